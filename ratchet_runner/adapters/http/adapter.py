"""The HTTP adapter: an effect's operation sent to a real provider over HTTP, on httpx.

:class:`HttpAdapter` implements the :class:`~ratchet_runner.adapters.base.Adapter` protocol for
a provider that a binding describes (:mod:`~ratchet_runner.adapters.http.settings`): per
operation, the method, the path template and whether the arguments go as the JSON body or the
query; the operation ID in the idempotency header; the receipt at a JSON pointer of the reply;
per lookup, a lookup endpoint or a listing of recent changes (a lookup without its own receipt
field takes a receipt holding any operation's, and the runner checks the effect's). Each call
runs under one wall-clock deadline, the effect's timeout, over connecting, sending and reading
the whole reply (:mod:`~ratchet_runner.adapters.http.transport`), and every outcome is
classified at the boundary by what the client observed
(:mod:`~ratchet_runner.adapters.http.classify`). Secrets come from the environment or files and
never appear in an outcome (:mod:`~ratchet_runner.adapters.http.secrets`).

The adapter remembers, in memory, when it first sent each operation ID, which bounds how late a
retry may reuse a key the provider keeps for ``key_retention`` seconds. A listing lookup's
``settle`` it does not apply itself: it says what the provider's listing may lag
(:meth:`HttpAdapter.semantics`), and the runner waits that out from the time of the attempt,
which it keeps with the run, before it believes "none listed". No request is sent once the
call's deadline (``Call.deadline``) has passed.

Over 400 lines: one concern, an operation sent and looked up over HTTP (a lookup endpoint, or a
listing read page by page), with the checks made before a request leaves.
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

from ...errors import BindingError
from ..base import (
    Ambiguous,
    Call,
    Escalate,
    LookupFailed,
    LookupResult,
    Outcome,
    Semantics,
    not_sent,
)
from .classify import (
    Reply,
    endpoint_result,
    is_the_operation,
    listing_items,
    listing_result,
    lookup_failed,
    next_page,
    reply_outcome,
    transport_outcome,
)
from .secrets import Credentials
from .settings import (
    EndpointLookup,
    HttpSettings,
    ListingLookup,
    OperationSettings,
    parse_settings,
)
from .transport import DeadlineTransport, deadline

#: The largest reply body read; a longer one is not taken as an answer.
MAX_REPLY_BYTES = 1 << 20
#: How many operation IDs the adapter remembers sending (the oldest are forgotten first).
REMEMBERED_IDS = 100_000


class _SendTimes:
    """When this adapter first sent each operation ID, on its monotonic clock."""

    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now
        self._times: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()

    def sent(self, operation_id: str) -> None:
        now = self._now()
        with self._lock:
            first = self._times.pop(operation_id, now)
            self._times[operation_id] = first
            if len(self._times) > REMEMBERED_IDS:
                self._times.popitem(last=False)

    def first(self, operation_id: str) -> float | None:
        with self._lock:
            return self._times.get(operation_id)


def lookup_semantics(settings: HttpSettings, lookup: str | None) -> Semantics | None:
    """What a binding's HTTP settings say of the provider's lookup ``lookup``: how long a
    listing may lag behind a change (an endpoint lookup does not lag), and whether the lookup
    sees every change made under one operation ID (a listing does; an endpoint only with
    ``every_change``). None: no such lookup."""
    found = settings.lookups.get(lookup or "")
    if isinstance(found, ListingLookup):
        return Semantics(settle=found.settle, sees_every_change=True)
    if found is None:
        return None
    return Semantics(sees_every_change=found.every_change)


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
        if request.deadline is not None:  # never past the runner's deadline for the call
            seconds = min(seconds, request.deadline - time.monotonic())
        if seconds <= 0:
            return not_sent(request)
        sent = self._key_expired(request) or self._build(operation, request, seconds)
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

    def lookup(
        self,
        operation: str,
        operation_id: str,
        effect: str = "",
        *,
        args: Mapping[str, Any] | None = None,
    ) -> LookupResult:
        """Ask the provider what it did with ``operation_id``, by the binding's lookup
        (``args``: the operation's arguments, which a listing filters and matches by)."""
        lookup = self.settings.lookups.get(operation)
        if lookup is None:
            return LookupFailed(f"the binding {self.name!r} has no lookup {operation!r}")
        path, _ = _fill(lookup.path, {"operation_id": operation_id})
        named = self.settings.effect_header  # the effect looked up, as on its calls
        headers = {named: effect} if named and effect else {}
        fields = self.settings.lookup_fields(lookup)
        if isinstance(lookup, ListingLookup):
            return self._listing(lookup, path, headers, fields, operation_id, args)
        seconds = self.settings.lookup_timeout
        try:
            sent = self._request(lookup.method, path, b"", headers, None, seconds)
            reply = self._exchange(sent, seconds)
        except Exception as exc:
            return lookup_failed(exc, self._credentials, seconds)
        if reply is None:
            return LookupFailed(f"a reply larger than {MAX_REPLY_BYTES} bytes was not read")
        assert isinstance(lookup, EndpointLookup)
        return endpoint_result(reply, lookup, fields, self._credentials)

    def semantics(self, operation: str, lookup: str | None = None) -> Semantics | None:
        """What the binding's settings say of the provider's ``lookup``: how long a listing
        may lag behind a change, and whether it sees every change under one operation ID.
        Whether the provider deduplicates, the binding's table says (``dedupe``,
        ``commits_within``), beside the settings."""
        return lookup_semantics(self.settings, lookup)

    # -- how -------------------------------------------------------------------------------

    def _listing(
        self,
        lookup: ListingLookup,
        path: str,
        headers: dict[str, str],
        fields: tuple[str, ...],
        operation_id: str,
        args: Mapping[str, Any] | None,
    ) -> LookupResult:
        """Read the listing, page by page (at most ``max_pages``, all within the lookup's
        deadline), filtered by the arguments its ``filter`` names, and keep the items that are
        the operation's changes."""
        if lookup.reference is None and args is None:
            return LookupFailed(
                f"lookup of {self.name!r} matches items by the operation's arguments, and was "
                "not given them"
            )
        params: Query = []
        for parameter, name in lookup.filter.items():
            if args is None or name not in args:
                return LookupFailed(f"the listing filters by argument {name!r}, which it lacks")
            params.append((parameter, _text(args[name])))
        seconds = self.settings.lookup_timeout
        matched: list[Any] = []
        target: str | None = path
        try:
            with deadline(seconds):
                for _ in range(lookup.max_pages):
                    assert target is not None
                    sent = self._page_request(lookup, target, headers, params, seconds)
                    reply = self._exchange(sent, seconds)
                    if reply is None:
                        return LookupFailed(
                            f"a reply larger than {MAX_REPLY_BYTES} bytes was not read"
                        )
                    items = listing_items(reply, lookup, self._credentials)
                    if isinstance(items, str):
                        return LookupFailed(items)
                    matched += [
                        item for item in items if is_the_operation(item, lookup, operation_id, args)
                    ]
                    target = next_page(reply, lookup)
                    if target is None:
                        break
                    if lookup.cursor_param is not None:  # the same path, with the cursor
                        params = [p for p in params if p[0] != lookup.cursor_param]
                        params.append((lookup.cursor_param, target))
                        target = path
                    else:  # the provider's link to the next page carries its own query
                        params = []
                else:
                    if target is not None:
                        return LookupFailed(
                            f"the listing has more than {lookup.max_pages} pages (max_pages): "
                            "not all of it was read, so nothing can be said"
                        )
        except Exception as exc:
            return lookup_failed(exc, self._credentials, seconds)
        return listing_result(matched, lookup, fields, self._credentials)

    def _page_request(
        self,
        lookup: ListingLookup,
        target: str,
        headers: dict[str, str],
        params: Query,
        seconds: float,
    ) -> httpx.Request:
        """One page's request: ``target`` a path (from the base URL), or the provider's own
        URL for the next page (on the same origin only: a listing never sends credentials to
        another host)."""
        if target.startswith(("http://", "https://")):
            base = httpx.URL(self.settings.base_url)
            url = httpx.URL(target)
            if (url.scheme, url.host, url.port) != (base.scheme, base.host, base.port):
                raise ValueError(f"the next page is on another origin ({url.host}): not followed")
            raw = url.raw_path.decode("ascii")
            path = raw[len(base.raw_path.decode("ascii").rstrip("/")) :]
            return self._request(lookup.method, path, b"", headers, None, seconds)
        return self._request(lookup.method, target, b"", headers, params or None, seconds)

    def _unbound(self, what: str) -> Escalate:
        return self._not_sent(f"the binding {self.name!r} has no {what}")

    def _not_sent(self, problem: str) -> Escalate:
        return Escalate(f"{problem}: nothing was sent. Fix the binding", possibly_applied=False)

    def _key_expired(self, request: Call) -> Escalate | None:
        """Not sent again under a key the provider has forgotten: it could make a second
        change. The key's age is the runner's (``Call.key_age``: since the operation's first
        attempt was recorded, whichever process made it), else since this adapter first sent
        it."""
        kept = self.settings.key_retention
        if kept is None:
            return None
        first = self._sent.first(request.operation_id)
        age = request.key_age
        if age is None and first is not None:
            age = self._now() - first
        if age is None or age <= kept:
            return None
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
