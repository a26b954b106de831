"""The HTTP adapter's transport: httpx over httpcore's pool, under one wall-clock deadline a call.

httpx's timeouts bound each phase, and a read timeout each read: a server that drips its reply
one byte at a time, or sends a byte just before each read timeout, keeps a call going for as
long as it likes. :func:`deadline` sets one point in time for everything a call does on the
network in this thread; :class:`DeadlineTransport` is an httpx transport over httpcore's
connection pool (httpx's own engine) whose network streams give every connect, TLS handshake,
write and read only the time left until that point, and fail it once the point has passed:
``ConnectTimeout`` while connecting (nothing was sent), ``WriteTimeout`` or ``ReadTimeout`` after
(the request may have arrived). Errors reach the caller as httpx's exceptions, as with httpx's
own transport.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import httpcore
import httpx

_DEADLINE: ContextVar[float | None] = ContextVar("ratchet_http_deadline", default=None)

#: httpcore's errors and the httpx errors they reach the caller as, the most specific first.
_ERRORS: tuple[tuple[type[Exception], type[httpx.TransportError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.ProxyError, httpx.ProxyError),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.ProtocolError, httpx.ProtocolError),
)


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Everything this thread does on the network inside the block ends ``seconds`` from now,
    or sooner, by the deadline of a block it is inside (a listing's pages share one)."""
    end = time.monotonic() + seconds
    outer = _DEADLINE.get()
    token = _DEADLINE.set(end if outer is None else min(end, outer))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def _left(timeout: float | None, error: type[Exception], doing: str) -> float | None:
    """The time one network operation may take: its own ``timeout``, cut to what is left of
    the deadline; ``error`` once nothing is left."""
    end = _DEADLINE.get()
    if end is None:
        return timeout
    left = end - time.monotonic()
    if left <= 0:
        raise error(f"the call's deadline passed while {doing}")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    """A connection whose every write, read and handshake ends by the deadline."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _left(timeout, httpcore.ReadTimeout, "reading"))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _left(timeout, httpcore.WriteTimeout, "sending"))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        left = _left(timeout, httpcore.ConnectTimeout, "shaking hands")
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, left))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's own socket backend, whose connections end by the deadline."""

    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        left = _left(timeout, httpcore.ConnectTimeout, "connecting")
        return _DeadlineStream(
            self._inner.connect_tcp(host, port, left, local_address, socket_options)
        )

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        left = _left(timeout, httpcore.ConnectTimeout, "connecting")
        return _DeadlineStream(self._inner.connect_unix_socket(path, left, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


@contextmanager
def _as_httpx() -> Iterator[None]:
    """httpcore's errors raised as httpx's, as httpx's own transport raises them."""
    try:
        yield
    except Exception as exc:
        for source, target in _ERRORS:
            if isinstance(exc, source):
                raise target(str(exc)) from exc
        raise


class _ReplyStream(httpx.SyncByteStream):
    def __init__(self, inner: Iterable[bytes]) -> None:
        self._inner = inner

    def __iter__(self) -> Iterator[bytes]:
        with _as_httpx():
            yield from self._inner

    def close(self) -> None:
        close = getattr(self._inner, "close", None)
        if close is not None:
            close()


class DeadlineTransport(httpx.BaseTransport):
    """An httpx transport over an httpcore connection pool whose connections keep the deadline
    set by :func:`deadline`; idle connections are dropped after ``keepalive_expiry`` seconds."""

    def __init__(
        self, ssl_context: ssl.SSLContext | None, max_connections: int, keepalive_expiry: float
    ) -> None:
        self._pool = httpcore.ConnectionPool(
            ssl_context=ssl_context,
            max_connections=max_connections,
            max_keepalive_connections=max_connections,
            keepalive_expiry=keepalive_expiry,
            network_backend=_DeadlineBackend(),
        )

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.SyncByteStream)
        sent = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        with _as_httpx():
            reply = self._pool.handle_request(sent)
        assert isinstance(reply.stream, Iterable)
        return httpx.Response(
            status_code=reply.status,
            headers=reply.headers,
            stream=_ReplyStream(reply.stream),
            extensions=reply.extensions,
        )

    def close(self) -> None:
        self._pool.close()
