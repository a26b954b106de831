"""A real HTTP server on 127.0.0.1 for the HTTP adapter's tests: raw sockets, one thread a
connection, an OS-assigned port, and a reply chosen per request by the test.

A test gives :class:`LocalServer` a function from the request received to what the server does:
a :class:`Reply` (a status, a JSON or raw body, headers), or one of the misbehaviours a real
network shows and a stdlib handler cannot: a reset after the request was read (:data:`RESET`),
closing without a reply (:data:`CLOSE`), never answering (:data:`SILENT`), a body cut short
(:class:`Truncated`), a reply dripped a byte at a time (:class:`Drip`). Every request received is
kept, with its headers and body. :func:`self_signed` makes a throwaway certificate for TLS.
"""

from __future__ import annotations

import datetime
import json
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit


@dataclass
class Received:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # lower-case names
    body: bytes
    raw: bytes  # the request as it arrived (for a server that echoes it)

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # JSON data, or bytes as they are
    headers: dict[str, str] = field(default_factory=dict)

    def encoded(self) -> bytes:
        body = self.body if isinstance(self.body, bytes) else json.dumps(self.body).encode()
        head = [f"HTTP/1.1 {self.status} Whatever", f"Content-Length: {len(body)}"]
        if not isinstance(self.body, bytes):
            head.append("Content-Type: application/json")
        head += [f"{k}: {v}" for k, v in self.headers.items()]
        head.append("Connection: close")
        return ("\r\n".join(head) + "\r\n\r\n").encode() + body


@dataclass
class Truncated:
    """A 200 whose Content-Length promises more than is sent before the server closes."""

    sent: bytes
    promised: int = 200


@dataclass
class Drip:
    """A 200 sent one byte every ``interval`` seconds (from the status line on, if
    ``headers_too``; else after the headers), for as long as the client listens."""

    body: bytes = b'{"refund_id": "re_1"}' + b" " * 500
    interval: float = 0.05
    headers_too: bool = False


RESET, CLOSE, SILENT = "reset", "close", "silent"

Behaviour = Reply | Truncated | Drip | str
Respond = Callable[[Received], Behaviour]


def _read_request(conn: socket.socket) -> Received | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    while len(body) < int(headers.get("content-length", "0")):
        chunk = conn.recv(65536)
        if not chunk:
            return None
        body += chunk
    parts = urlsplit(target)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    return Received(method, parts.path, query, headers, body, head + b"\r\n\r\n" + body)


class LocalServer:
    """Serves ``respond`` on 127.0.0.1 at an OS-assigned port until closed (a context manager).
    ``tls``: a (certificate, key) pair to serve HTTPS with."""

    def __init__(self, respond: Respond, tls: tuple[Path, Path] | None = None) -> None:
        self.respond = respond
        self.received: list[Received] = []
        self.arrived = threading.Event()
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self.port = self._listener.getsockname()[1]
        self._tls: ssl.SSLContext | None = None
        if tls is not None:
            self._tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self._tls.load_cert_chain(*tls)
        self._threads: list[threading.Thread] = []
        self._accepting = threading.Thread(target=self._accept, daemon=True)
        self._accepting.start()

    @property
    def url(self) -> str:
        return f"{'https' if self._tls else 'http'}://127.0.0.1:{self.port}"

    def __enter__(self) -> LocalServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        self._accepting.join(5)
        self._listener.close()
        for thread in self._threads:
            thread.join(5)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            if self._tls is not None:
                conn.settimeout(5)
                conn = self._tls.wrap_socket(conn, server_side=True)
            conn.settimeout(10)
            received = _read_request(conn)
            if received is None:
                return
            self.received.append(received)
            self.arrived.set()
            self._behave(conn, self.respond(received))
        except (OSError, ssl.SSLError):
            pass  # the client went away, or refused our certificate: that is the test's point
        finally:
            conn.close()

    def _behave(self, conn: socket.socket, behaviour: Behaviour) -> None:
        if isinstance(behaviour, Reply):
            conn.sendall(behaviour.encoded())
        elif isinstance(behaviour, Truncated):
            head = f"HTTP/1.1 200 OK\r\nContent-Length: {behaviour.promised}\r\n\r\n"
            conn.sendall(head.encode() + behaviour.sent)
        elif isinstance(behaviour, Drip):
            self._drip(conn, behaviour)
        elif behaviour == RESET:  # an RST, not a FIN: SO_LINGER with a zero timeout
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        elif behaviour == SILENT:
            self._stop.wait(30)
        # CLOSE: close without a word

    def _drip(self, conn: socket.socket, drip: Drip) -> None:
        head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(drip.body)}\r\n\r\n".encode()
        if not drip.headers_too:
            conn.sendall(head)
            head = b""
        for byte in head + drip.body:
            if self._stop.is_set():
                return
            conn.sendall(bytes([byte]))
            time.sleep(drip.interval)


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then closed)."""
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port: int = probe.getsockname()[1]
    return port


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A throwaway self-signed certificate for 127.0.0.1 and its key, written to ``folder``."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ratchet test provider")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "provider.pem", folder / "provider.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path
