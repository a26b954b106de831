"""The practice world over HTTP: its providers as a JSON API on a real socket, with the same
faults and the Idempotency-Key rules of the IETF draft (``ratchet practice serve``).

Routes (``docs/reference/adapters.md``, "The practice world over HTTP", is the contract)::

    POST /{service}/{operation}              the arguments as a JSON object; the operation ID in
                                             the Idempotency-Key header → 200 and the receipt
    GET  /{service}/operations/{operation_id} the lookup → 200 and the receipt, or 404
    GET  /{service}/changes/{operation_id}    every change made under the ID → 200 and
                                             {"changes": [receipt, ...]} (empty: none)
    GET  /                                   the services and their operations

``{service}`` is ``payments``, ``warehouse``, ``travel``, ``service`` (the generic service: any
operation; ``?dedupe=false`` for one that makes a second change on a second request) or
``noop``. The optional ``Ratchet-Effect`` header names the effect a request is for, which is
what the practice world's faults are injected into (default: the operation's name).

A provider that deduplicates answers the same key with the first result, the same key with
other arguments with 422, and the same key while its first request is still being processed
with 409; a POST without a key gets 400. The faults act on the connection itself:
``timeout_before_write`` closes it without a reply and commits nothing, ``timeout_after_write``
commits and then resets it, ``commits_late`` closes it at once and commits a while later. Every
request is served through :meth:`~ratchet_runner.adapters.practice.PracticeWorld.handle`, in the
same practice database file the commands use, so ``ratchet effects`` shows what it did.
"""

from __future__ import annotations

import json
import logging
import signal
import socket
import struct
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from ...errors import UsageError
from ..base import Call, Done, Found, LookupFailed, Refused
from .faults import COMMITS_LATE_SECONDS, SLOW_REPLY_SECONDS
from .services import GENERIC, PRACTICE_SERVICES, operation, operation_names
from .world import Handled, PracticeWorld

LOG = logging.getLogger(__name__)

#: The request header that carries the operation ID, and the one that names the effect.
KEY_HEADER, EFFECT_HEADER = "Idempotency-Key", "Ratchet-Effect"

#: How long an idle keep-alive connection stays open (clients should let go of theirs sooner).
IDLE_SECONDS = 30.0

#: The largest request body served (413 beyond it), and the longest key (400 beyond it).
MAX_BODY, MAX_KEY = 1 << 20, 255

#: The body a ``malformed`` reply carries, with a 200: not the receipt, not even JSON.
MALFORMED_BODY = b"<html>502 Bad Gateway</html>"


class _Keys:
    """The operation IDs whose first request is still being processed, per service."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: set[tuple[str, str]] = set()

    @contextmanager
    def hold(self, service: str, key: str) -> Iterator[bool]:
        """Hold ``key`` while the body runs; yields False (and holds nothing) if another
        request holds it already."""
        with self._lock:
            taken = (service, key) not in self._held
            if taken:
                self._held.add((service, key))
        try:
            yield taken
        finally:
            if taken:
                with self._lock:
                    self._held.discard((service, key))


class PracticeServer(ThreadingHTTPServer):
    """The practice world's providers served over HTTP, one thread per connection."""

    daemon_threads = True

    def __init__(self, world: PracticeWorld, host: str = "127.0.0.1", port: int = 0) -> None:
        self.world = world
        self.keys = _Keys()
        if ":" in host:  # an IPv6 address
            self.address_family = socket.AF_INET6
        try:
            super().__init__((host, port), _Handler)
        except (OSError, OverflowError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc)
            raise UsageError(
                f"cannot serve the practice world on {host}:{port}: {reason}"
            ) from None

    @property
    def url(self) -> str:
        """The base URL the server answers at (with the port the system chose for port 0)."""
        host, port = self.server_address[:2]
        host = str(host)
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def serve_until_signalled(self) -> None:
        """Serve in this (the main) thread until SIGTERM or SIGINT, then stop listening; a
        request still being served is cut off with the process."""
        previous = signal.getsignal(signal.SIGTERM)

        def stop(_signum: int, _frame: FrameType | None) -> None:
            raise KeyboardInterrupt  # as Ctrl-C: out of serve_forever, in this thread

        signal.signal(signal.SIGTERM, stop)
        try:
            self.serve_forever(poll_interval=0.2)
        except KeyboardInterrupt:
            pass
        finally:
            signal.signal(signal.SIGTERM, previous)
            self.server_close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """One line on stderr, not a traceback (a client that went away is no error)."""
        error = sys.exc_info()[1]
        if not isinstance(error, ConnectionError):
            LOG.error("practice server: %s: %s", type(error).__name__, error)


def index() -> dict[str, Any]:
    """What ``GET /`` answers: each service with the operations it offers."""
    services: dict[str, Any] = {}
    for service in PRACTICE_SERVICES:
        names = operation_names(service, None)
        services[service] = list(names) if names else "any operation"
    services[GENERIC] = "any operation (?dedupe=false: a second request makes a second change)"
    return {
        "services": services,
        "lookup": "GET /{service}/operations/{operation_id}",
        "every change": "GET /{service}/changes/{operation_id}",
    }


class _Refusal(Exception):
    """A request refused before it reaches the world: answered with ``status`` and a JSON error
    body; ``close`` ends the connection after the answer (its body may not have been read)."""

    def __init__(self, status: int, code: str, message: str, close: bool = False) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.close = status, code, message, close


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = IDLE_SECONDS
    # TCP_NODELAY: a reply goes out as two writes (the headers, then the body), and with Nagle's
    # algorithm the body waits for the client's delayed ACK of the headers (40 ms on Linux).
    disable_nagle_algorithm = True
    server: PracticeServer

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the practice database logs every call."""

    # -- routes ---------------------------------------------------------------------------------

    def do_GET(self) -> None:
        with self._answering():
            parts, query = self._route()
            if parts == [] and not query:
                self._send(200, index())
            elif len(parts) == 3 and parts[0] in PRACTICE_SERVICES and parts[1] == "operations":
                self._lookup(parts[0], parts[2])
            elif len(parts) == 3 and parts[0] in PRACTICE_SERVICES and parts[1] == "changes":
                self._lookup(parts[0], parts[2], every=True)
            else:
                raise _Refusal(404, "no_such_route", f"no route GET {self.path}")

    def do_POST(self) -> None:
        with self._answering():
            body = self._body()
            parts, query = self._route()
            if len(parts) != 2 or parts[0] not in PRACTICE_SERVICES:
                raise _Refusal(404, "no_such_route", f"no route POST {self.path}")
            service, name = parts
            declared = self._declared(service, name, query)
            op = operation(service, name, declared)
            if op is None:
                raise _Refusal(404, "no_such_operation", f"{service} has no operation {name!r}")
            request = Call(name, self._key(), self._args(body), self._effect(name))
            if not op.dedupe:
                self._reply(self.server.world.handle(service, request, declared))
                return
            with self.server.keys.hold(service, request.operation_id) as taken:
                if not taken:
                    raise _Refusal(409, "request_in_progress", _IN_PROGRESS)
                self._reply(self.server.world.handle(service, request, declared))

    def do_PUT(self) -> None:
        self._not_allowed()

    def do_PATCH(self) -> None:
        self._not_allowed()

    def do_DELETE(self) -> None:
        self._not_allowed()

    def _not_allowed(self) -> None:
        with self._answering():
            self._body()
            self._error(405, "method_not_allowed", f"{self.command} is not served", {}, _ALLOW)

    @contextmanager
    def _answering(self) -> Iterator[None]:
        """Answer a :class:`_Refusal` raised while serving with its JSON error."""
        try:
            yield
        except _Refusal as refusal:
            self.close_connection = self.close_connection or refusal.close
            self._error(refusal.status, refusal.code, refusal.message)

    # -- one request ----------------------------------------------------------------------------

    def _reply(self, handled: Handled) -> None:
        verdict, fault, outcome = handled.verdict, handled.fault, handled.outcome
        if verdict == "dropped":
            self._drop()
        elif verdict == "late":  # no answer now; the change is committed a while later
            self._drop()
            self.server.world.sleep(COMMITS_LATE_SECONDS)
            self.server.world.settle()
        elif verdict == "unavailable":
            self._error(503, "unavailable", "service unavailable", {}, {"Retry-After": "1"})
        elif verdict == "abandoned":  # not committed within its commits_within: nothing made
            self._error(503, "abandoned", _reason(outcome), {}, {"Retry-After": "1"})
        elif verdict == "in_processing":
            self._error(409, "request_in_progress", _IN_PROGRESS)
        elif verdict == "key_reused":
            evidence = outcome.evidence if isinstance(outcome, Refused) else {}
            self._error(422, "idempotency_key_reused", _reason(outcome), evidence)
        elif fault == "timeout_after_write":
            self._drop(reset=True)
        else:
            if fault == "slow_reply":
                self.server.world.sleep(SLOW_REPLY_SECONDS)
            self._answer(handled)

    def _answer(self, handled: Handled) -> None:
        outcome = handled.outcome
        if isinstance(outcome, Refused):
            self._error(400, "refused", outcome.reason, outcome.evidence)
        elif not isinstance(outcome, Done):  # handle() gives no other outcome here
            self._error(500, "internal", _reason(outcome))
        elif handled.fault == "malformed":
            self._write(200, MALFORMED_BODY, "text/html")
        else:
            replayed = {"Idempotent-Replayed": "true"} if handled.verdict == "replayed" else None
            self._send(200, outcome.receipt, replayed)

    def _lookup(self, service: str, operation_id: str, every: bool = False) -> None:
        """The lookup: the first change under ``operation_id`` (404 for none), or, ``every``,
        the list of every change under it (a provider that does not deduplicate may have made
        it more than once), empty for none."""
        effect = self.headers.get(EFFECT_HEADER, "")
        found = self.server.world.lookup(service, "lookup", operation_id, effect)
        if isinstance(found, LookupFailed):
            self._drop()
        elif every:
            changes = [found.receipt, *found.others] if isinstance(found, Found) else []
            self._send(200, {"changes": changes})
        elif isinstance(found, Found):
            self._send(200, found.receipt)
        else:
            self._error(404, "not_found", f"{service} has no operation ID {operation_id}")

    # -- reading the request --------------------------------------------------------------------

    def _route(self) -> tuple[list[str], dict[str, list[str]]]:
        split = urlsplit(self.path)
        parts = [unquote(p) for p in split.path.split("/") if p]
        return parts, parse_qs(split.query, keep_blank_values=True)

    def _body(self) -> bytes:
        """The whole body, read first so that the connection stays in step."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            raise _Refusal(411, "length_required", "send the body with a Content-Length", True)
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise _Refusal(400, "bad_request", "Content-Length is no number", True) from None
        if not 0 <= length <= MAX_BODY:
            raise _Refusal(413, "body_too_large", f"a body is at most {MAX_BODY} bytes", True)
        return self.rfile.read(length)

    def _declared(
        self, service: str, name: str, query: Mapping[str, list[str]]
    ) -> dict[str, bool] | None:
        """For the generic service, ``{name: dedupe}`` from ``?dedupe=`` (default true)."""
        unknown = set(query) - ({"dedupe"} if service == GENERIC else set())
        values = query.get("dedupe", ["true"])
        if unknown or len(values) != 1 or values[0] not in ("true", "false"):
            raise _Refusal(
                400,
                "bad_request",
                f"bad query {urlsplit(self.path).query!r}: the only query is dedupe=true|false, "
                "for the generic service",
            )
        return {name: values[0] == "true"} if service == GENERIC else None

    def _key(self) -> str:
        """The Idempotency-Key: a bare token, or a quoted string (a structured field)."""
        raw = (self.headers.get(KEY_HEADER) or "").strip()
        if len(raw) >= 2 and raw[0] == raw[-1] == '"':
            raw = raw[1:-1]
        if not raw or len(raw) > MAX_KEY:
            raise _Refusal(
                400,
                "idempotency_key_missing",
                f"a POST needs an {KEY_HEADER} header of 1 to {MAX_KEY} characters",
            )
        return raw

    def _args(self, body: bytes) -> dict[str, Any]:
        try:
            args = json.loads(body or b"{}")
        except (UnicodeDecodeError, ValueError) as exc:
            raise _Refusal(400, "bad_request", f"the body is not JSON: {exc}") from None
        if not isinstance(args, dict):
            raise _Refusal(400, "bad_request", "the body is a JSON object: the arguments")
        return args

    def _effect(self, operation_name: str) -> str:
        return self.headers.get(EFFECT_HEADER) or operation_name

    # -- writing the reply ----------------------------------------------------------------------

    def _send(
        self, status: int, body: Mapping[str, Any], headers: Mapping[str, str] | None = None
    ) -> None:
        self._write(status, json.dumps(body, sort_keys=True).encode(), "application/json", headers)

    def _error(
        self,
        status: int,
        code: str,
        message: str,
        evidence: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        error: dict[str, Any] = {"code": code, "message": message}
        if evidence:
            error["evidence"] = dict(evidence)
        self._send(status, {"error": error}, headers)

    def _write(
        self,
        status: int,
        data: bytes,
        content_type: str,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        with suppress(ConnectionError):
            self.wfile.write(data)

    def _drop(self, reset: bool = False) -> None:
        """End the connection without a reply: closed (FIN), or with ``reset`` aborted (RST)."""
        self.close_connection = True
        if reset:
            linger = struct.pack("ii", 1, 0)  # on, 0 s: close() resets the connection
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
            self.connection.close()  # the reset goes out once the handler lets go of it
        else:
            with suppress(OSError):
                self.connection.shutdown(socket.SHUT_WR)


_IN_PROGRESS = "a request with this Idempotency-Key is still being processed"
_ALLOW = {"Allow": "GET, POST"}


def _reason(outcome: Any) -> str:
    return str(getattr(outcome, "reason", outcome))
