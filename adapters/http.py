"""The HTTP adapter: an effect's operation sent to a real provider over HTTP, on httpx.

:class:`HttpAdapter` implements the :class:`~ratchet_runner.adapters.base.Adapter` protocol for
a provider that a binding describes (:mod:`~ratchet_runner.adapters.http_settings`): per
operation, the method, the path template and whether the arguments go as the JSON body or the
query; the operation ID in the idempotency header; the receipt at a JSON pointer of the reply;
per lookup, a lookup endpoint or a listing of recent changes (a lookup without its own receipt
field takes a receipt holding any operation's, and the runner checks the effect's). Each call
runs under one wall-clock deadline, the effect's timeout, over connecting, sending and reading
the whole reply (:mod:`~ratchet_runner.adapters.http_transport`), and every outcome is
classified at the boundary by what the client observed
(:mod:`~ratchet_runner.adapters.http_classify`). Secrets come from the environment or files and
never appear in an outcome (:mod:`~ratchet_runner.adapters.http_secrets`).

The adapter remembers, in memory, when it first and last sent each operation ID: the first
bounds how late a retry may reuse a key the provider keeps for ``key_retention`` seconds; the
last starts a listing lookup's settle time. An ID this adapter has not sent (a call made by
another process, or before a restart) counts as sent when the adapter was made.
"""

from __future__ import annotations

import json
import ssl
import string
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote

import httpx

from ratchet_runner.errors import BindingError

from .base import Ambiguous, Call, Escalate, LookupFailed, LookupResult, Outcome
from .http_classify import (
    Reply,
    endpoint_result,
    listing_result,
    lookup_failed,
    reply_outcome,
    transport_outcome,
)
from .http_secrets import Credentials
from .http_settings import EndpointLookup, HttpSettings, OperationSettings, parse_settings
from .http_transport import DeadlineTransport, deadline

#: The largest reply body read; a longer one is not taken as an answer.
MAX_REPLY_BYTES = 1 << 20
#: How many operation IDs the adapter remembers sending (the oldest are forgotten first).
REMEMBERED_IDS = 100_000


class _SendTimes:
    """When this adapter first and last sent each operation ID, on its monotonic clock."""

    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now
        self.made_at = now()
        self._times: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()

    def sent(self, operation_id: str) -> None:
        now = self._now()
        with self._lock:
            first = self._times.pop(operation_id, (now, now))[0]
            self._times[operation_id] = (first, now)
            if len(self._times) > REMEMBERED_IDS:
                self._times.popitem(last=False)

    def first(self, operation_id: str) -> float | None:
        with self._lock:
            times = self._times.get(operation_id)
        return None if times is None else times[0]

    def last(self, operation_id: str) -> float:
        with self._lock:
            times = self._times.get(operation_id)
        return self.made_at if times is None else max(times[1], self.made_at)


def _text(value: Any) -> str:
    """An argument as text in a path or a query: JSON for anything but a string."""
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


#: Query parameters as httpx takes them.
Query = list[tuple[str, str | int | float | bool | None]]


def _query(args: Mapping[str, Any]) -> Query:
    """Arguments as query parameters: a list becomes the parameter repeated."""
    pairs: Query = []
    for key, value in args.items():
        values = value if isinstance(value, list) else [value]
        pairs += [(key, _text(v)) for v in values]
    return pairs


def _fill(template: str, values: Mapping[str, Any]) -> tuple[str, str | None]:
    """The path with each ``{name}`` replaced by its value, URL-encoded; or the first name
    that ``values`` lacks."""
    parts: list[str] = []
    for literal, name, _, _ in string.Formatter().parse(template):
        parts.append(literal)
        if name is None:
            continue
        if name not in values:
            return "", name
        parts.append(quote(_text(values[name]), safe=""))
    return "".join(parts), None


def _ssl_context(settings: HttpSettings, where: str) -> ssl.SSLContext:
    """Verification on by default; off only when the binding says ``verify_tls = false``."""
    if not settings.verify_tls:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    if settings.ca_file is None:
        return httpx.create_ssl_context()
    try:
        return ssl.create_default_context(cafile=str(settings.ca_file))
    except (OSError, ssl.SSLError) as exc:
        raise BindingError(
            f"{where}: setting 'ca_file' names {settings.ca_file}, which cannot be used as CA "
            f"certificates ({type(exc).__name__})"
        ) from None


def _read(response: httpx.Response) -> bytes | None:
    """The whole body, or None past :data:`MAX_REPLY_BYTES`."""
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_bytes():
        size += len(chunk)
        if size > MAX_REPLY_BYTES:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


class HttpAdapter:
    """A provider behind HTTP, as a binding describes it. ``environ``: where environment
    secrets are read (``os.environ`` by default); ``now``: the monotonic clock of the settle
    time and the key retention."""

    def __init__(
        self,
        settings: HttpSettings,
        *,
        name: str = "http",
        environ: Mapping[str, str] | None = None,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        where = f"binding {name!r}"
        self.settings = settings
        self.name = name
        self._credentials = Credentials(settings, environ, where)
        # TLS only for an https:// provider (loading the CA certificates takes a while); a
        # ca_file is read all the same, so that a wrong one is refused when the adapter is made
        tls = settings.base_url.startswith("https://") or settings.ca_file is not None
        context = _ssl_context(settings, where) if tls else None
        transport = DeadlineTransport(context, settings.max_connections, settings.keepalive_expiry)
        self._client = httpx.Client(transport=transport, trust_env=False, follow_redirects=False)
        self._now = now
        self._sent = _SendTimes(now)

    @classmethod
    def from_data(
        cls,
        data: Any,
        *,
        name: str = "http",
        base_dir: Path | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> HttpAdapter:
        """The adapter a binding's plain data describes (:func:`parse_settings`)."""
        settings = parse_settings(data, name=name, base_dir=base_dir)
        return cls(settings, name=name, environ=environ)

    def __repr__(self) -> str:
        return f"HttpAdapter({self.name!r}, {self.settings.base_url!r})"

    def close(self) -> None:
        """Close the pooled connections."""
        self._client.close()

    def __enter__(self) -> HttpAdapter:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- the protocol ---------------------------------------------------------------------

    def call(self, request: Call) -> Outcome:
        """Send the operation with its operation ID as the idempotency key, within the call's
        deadline, and classify what comes back."""
        operation = self.settings.operations.get(request.operation)
        if operation is None:
            return self._unbound(f"operation {request.operation!r}")
        seconds = (request.timeout or self.settings.timeout) * self.settings.timeout_scale
        sent = self._key_expired(request.operation_id) or self._build(operation, request, seconds)
        if isinstance(sent, Escalate):
            return sent
        self._sent.sent(request.operation_id)
        try:
            reply = self._exchange(sent, seconds)
        except Exception as exc:  # every error of the exchange is classified, none escapes
            return transport_outcome(exc, self._credentials, seconds)
        if reply is None:
            return Ambiguous(f"a reply larger than {MAX_REPLY_BYTES} bytes was not read")
        return reply_outcome(reply, operation, self.settings.remaps, self._credentials)

    def lookup(self, operation: str, operation_id: str, effect: str = "") -> LookupResult:
        """Ask the provider what it did with ``operation_id``, by the binding's lookup."""
        lookup = self.settings.lookups.get(operation)
        if lookup is None:
            return LookupFailed(f"the binding {self.name!r} has no lookup {operation!r}")
        path, _ = _fill(lookup.path, {"operation_id": operation_id})
        named = self.settings.effect_header  # the effect looked up, as on its calls
        headers = {named: effect} if named and effect else {}
        seconds = self.settings.lookup_timeout
        try:
            sent = self._request(lookup.method, path, b"", headers, None, seconds)
            reply = self._exchange(sent, seconds)
        except Exception as exc:
            return lookup_failed(exc, self._credentials, self.settings.lookup_timeout)
        if reply is None:
            return LookupFailed(f"a reply larger than {MAX_REPLY_BYTES} bytes was not read")
        fields = self.settings.lookup_fields(lookup)
        if isinstance(lookup, EndpointLookup):
            return endpoint_result(reply, lookup, fields, self._credentials)
        settled = self._now() - self._sent.last(operation_id) >= lookup.settle
        return listing_result(reply, lookup, fields, operation_id, settled, self._credentials)

    # -- how -------------------------------------------------------------------------------

    def _unbound(self, what: str) -> Escalate:
        return self._not_sent(f"the binding {self.name!r} has no {what}")

    def _not_sent(self, problem: str) -> Escalate:
        return Escalate(f"{problem}: nothing was sent. Fix the binding", possibly_applied=False)

    def _key_expired(self, operation_id: str) -> Escalate | None:
        """Not sent again under a key the provider has forgotten: it could make a second
        change (only an ID this adapter sent first is known to be that old)."""
        kept = self.settings.key_retention
        first = self._sent.first(operation_id)
        if kept is None or first is None or self._now() - first <= kept:
            return None
        age = self._now() - first
        return Escalate(
            f"the provider keeps idempotency keys for {kept:g} s, and this operation ID was "
            f"first sent {age:.0f} s ago: sent again, it could make a second change. Check with "
            "the provider what was made under it",
            {"first_sent_seconds_ago": round(age, 1), "key_retention": kept},
            possibly_applied=True,
        )

    def _build(
        self, operation: OperationSettings, request: Call, seconds: float
    ) -> httpx.Request | Escalate:
        """The request for a call, or, when the binding cannot make it, why (nothing sent)."""
        path, missing = _fill(operation.path, request.args)
        if missing is not None:
            return self._unbound(f"argument {missing!r} for the path {operation.path!r}")
        body = b""
        headers = {self.settings.idempotency_header: request.operation_id}
        if self.settings.effect_header and request.effect:
            headers[self.settings.effect_header] = request.effect
        params = None
        if operation.arguments == "json":
            body = json.dumps(request.args, separators=(",", ":"), sort_keys=True).encode()
            headers["Content-Type"] = "application/json"
        else:
            params = _query(request.args)
        try:
            return self._request(operation.method, path, body, headers, params, seconds)
        except Exception as exc:  # a URL or a header httpx cannot send
            reason = self._credentials.redact(f"{type(exc).__name__}: {exc}")
            return self._not_sent(f"the request cannot be made as the binding says ({reason})")

    def _request(
        self,
        method: str,
        path: str,
        body: bytes,
        headers: dict[str, str],
        params: Query | None,
        seconds: float,
    ) -> httpx.Request:
        return self._client.build_request(
            method,
            self.settings.base_url + path,
            content=body or None,
            params=params,
            headers={
                "Accept": "application/json",
                **self.settings.headers,
                **headers,
                **self._credentials.headers(body),
            },
            timeout=httpx.Timeout(seconds),
        )

    def _exchange(self, request: httpx.Request, seconds: float) -> Reply | None:
        """Send ``request`` and read the whole reply, all within ``seconds``; None when the
        reply is too large to read."""
        with deadline(seconds):
            response = self._client.send(request, stream=True)
            try:
                body = _read(response)
            finally:
                response.close()
        if body is None:
            return None
        target = request.url.raw_path.decode("ascii", errors="replace")
        return Reply(response.status_code, response.headers, body, f"{request.method} {target}")
