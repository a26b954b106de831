"""The HTTP adapter's classification table: what the client observed, and the outcome it means.

Only a failure while connecting proves that nothing was sent; anything after that may have
reached the provider. A reply is classified by the binding's remaps first, then by its status:

====================================  =================================================
observed                              outcome
====================================  =================================================
ConnectError, ConnectTimeout,         :class:`Transient` (nothing was sent)
PoolTimeout
TLS verification failed               :class:`Escalate`, not applied (a binding or a
                                      certificate to fix)
WriteError, WriteTimeout, ReadError,  :class:`Ambiguous` (the request may have arrived)
ReadTimeout, RemoteProtocolError,
a truncated body, the deadline
2xx with the receipt                  :class:`Done`
2xx without it, malformed JSON        :class:`Ambiguous`
408, 425, 429, 503                    :class:`Transient` with ``Retry-After``
409 (key still being processed),      :class:`Ambiguous`
500, 502, 504, any other 5xx
422 (key used with other arguments)   :class:`Escalate`, possibly applied
401, 403, 404                         :class:`Escalate`, not applied (configuration)
any other 4xx                         :class:`Refused`, with the status and the body
anything else (1xx, 3xx)              :class:`Ambiguous`
====================================  =================================================

Lookups: a reply with the lookup's "not found" status is :class:`NotFound`; a 2xx with the
receipt (holding the lookup's ``receipt_field``, or, without one, an operation's) is
:class:`Found`; anything else, and every transport error, :class:`LookupFailed`. A
listing that does not list the operation ID is :class:`NotFound` only once the settle time
after the call has passed. Every text kept (reasons, evidence, receipts) is redacted by the
binding's :class:`~ratchet_runner.adapters.http.secrets.Credentials`.

Over 400 lines: one concern, the classification table, every row of it and of a lookup's, which
read best beside each other.
"""

from __future__ import annotations

import email.utils
import json
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from ..base import (
    Ambiguous,
    Done,
    Escalate,
    Found,
    LookupFailed,
    LookupResult,
    NotFound,
    Outcome,
    Refused,
    Transient,
)
from .secrets import Credentials
from .settings import EndpointLookup, ListingLookup, OperationSettings, Remap

TRANSIENT_STATUSES = frozenset({408, 425, 429, 503})
CONFIG_STATUSES = frozenset({401, 403, 404})
KEY_REUSED_STATUS = 422
IN_PROGRESS_STATUS = 409

#: Marks a JSON pointer that leads nowhere (``None`` is a value JSON can hold).
MISSING: Any = object()


@dataclass(frozen=True)
class Reply:
    """A whole reply: its status, headers and body, and the request it answers (``POST
    /refunds/LK-1``), for the evidence."""

    status: int
    headers: Mapping[str, str]
    body: bytes
    request: str


# -- reading a reply ----------------------------------------------------------------------------


def resolve(data: Any, pointer: str) -> Any:
    """The value at JSON pointer ``pointer`` (RFC 6901) of ``data``, or :data:`MISSING`."""
    if pointer == "":
        return data
    for raw in pointer[1:].split("/"):
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(data, dict) and token in data:
            data = data[token]
        elif isinstance(data, list) and token.isdigit() and int(token) < len(data):
            data = data[int(token)]
        else:
            return MISSING
    return data


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_json(body: bytes) -> Any:
    """The reply's JSON, or :data:`MISSING` when it is none (empty, cut short, not UTF-8, a
    ``NaN`` or ``Infinity`` that JSON does not have, nested deeper than Python can read)."""
    try:
        return json.loads(body, parse_constant=_no_constant)
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return MISSING


def receipt_at(data: Any, pointer: str, field: str) -> dict[str, Any] | None:
    """The receipt at ``pointer``: an object holding ``field``, or a plain value taken as
    ``field`` itself (``/id`` → ``{field: "re_123"}``); None when it is neither."""
    value = resolve(data, pointer)
    if isinstance(value, dict):
        return value if value.get(field) not in (None, "", False) else None
    if isinstance(value, str | int | float) and not isinstance(value, bool) and value != "":
        return {field: value}
    return None


def lookup_receipt(data: Any, pointer: str, fields: tuple[str, ...]) -> dict[str, Any] | str:
    """The receipt a lookup found at ``pointer``: an object holding one of ``fields`` (the
    lookup's ``receipt_field``, or each operation's), or a plain value taken as the one field
    there is; else why there is none."""
    value = resolve(data, pointer)
    named = " or ".join(map(repr, fields))
    if isinstance(value, dict):
        if any(value.get(f) not in (None, "", False) for f in fields):
            return value
        return f"no {named} at {pointer!r}"
    if len(fields) == 1:
        receipt = receipt_at(data, pointer, fields[0])
        return f"no {named} at {pointer!r}" if receipt is None else receipt
    return (
        f"the value at {pointer!r} is no object holding {named}, and a plain value cannot say "
        "which operation's receipt field it is: give the lookup a receipt_field"
    )


def retry_after(value: str | None) -> float | None:
    """A ``Retry-After`` header in seconds: a number of seconds or an HTTP date; None if
    absent or unreadable."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _matches(reply: Reply, pointer: str | None, equals: str | None) -> bool:
    """Whether the reply's JSON body holds ``equals`` at ``pointer`` (always, with no pointer)."""
    if pointer is None:
        return True
    value = resolve(parse_json(reply.body), pointer)
    return value is not MISSING and str(value) == equals


# -- a call ---------------------------------------------------------------------------------


def tls_verification_failed(exc: BaseException) -> bool:
    """Whether a connect error is a certificate the client did not trust."""
    seen: BaseException | None = exc
    for _ in range(10):
        if seen is None:
            return False
        if isinstance(seen, ssl.SSLCertVerificationError):
            return True
        if "CERTIFICATE_VERIFY_FAILED" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def transport_outcome(exc: BaseException, credentials: Credentials, seconds: float) -> Outcome:
    """What a failed exchange means, by the phase it failed in (``seconds``: the deadline)."""
    text = credentials.redact(f"{type(exc).__name__}: {exc}")
    if isinstance(exc, httpx.TimeoutException):
        text = f"{text} (the call's deadline: {seconds:g} s)"
    evidence = {"error": text}
    if isinstance(exc, httpx.ConnectError) and tls_verification_failed(exc):
        return Escalate(
            f"the provider's TLS certificate was not trusted ({text}): nothing was sent. Fix "
            "the certificate, or give the binding the CA that signed it ('ca_file')",
            evidence,
            possibly_applied=False,
        )
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout):
        return Transient(f"nothing was sent: {text}")
    return Ambiguous(f"the request may have reached the provider: {text}")


def _evidence(reply: Reply, credentials: Credentials) -> dict[str, Any]:
    return {
        "status": reply.status,
        "request": credentials.redact(reply.request),
        "body": credentials.evidence(reply.body),
    }


def _brief(reply: Reply, credentials: Credentials) -> str:
    body = credentials.evidence(reply.body, limit=300)
    return f"HTTP {reply.status} to {credentials.redact(reply.request)}: {body or '(no body)'}"


def _outcome_named(
    name: str, reply: Reply, credentials: Credentials, retry: float | None
) -> Outcome:
    """The outcome a row of the table (or a remap) names, with the reply as its evidence."""
    brief, evidence = _brief(reply, credentials), _evidence(reply, credentials)
    if name == "transient":
        return Transient(f"nothing was done, try later: {brief}", retry_after=retry)
    if name == "key_reused":
        return Escalate(
            f"the provider says this operation ID was used with other arguments ({brief}): a "
            "change may exist under it. Check with the provider what was made under it",
            evidence,
            possibly_applied=True,
        )
    if name == "config_fault":
        return Escalate(
            f"the provider rejects the request as the binding makes it ({brief}): check the "
            "binding's base URL, path and credentials; nothing was made",
            evidence,
            possibly_applied=False,
        )
    if name == "refused":
        return Refused(f"the provider refused: {brief}", evidence)
    return Ambiguous(f"the provider's answer does not say whether it was made: {brief}")


def _remapped(reply: Reply, remaps: tuple[Remap, ...]) -> str | None:
    for remap in remaps:
        if remap.status == reply.status and _matches(reply, remap.body_pointer, remap.body_equals):
            return remap.outcome
    return None


def _default_row(status: int) -> str:
    if status in TRANSIENT_STATUSES:
        return "transient"
    if status == KEY_REUSED_STATUS:
        return "key_reused"
    if status in CONFIG_STATUSES:
        return "config_fault"
    if 400 <= status < 500 and status != IN_PROGRESS_STATUS:
        return "refused"
    return "ambiguous"  # 409, every 5xx, 1xx and 3xx


def reply_outcome(
    reply: Reply, operation: OperationSettings, remaps: tuple[Remap, ...], credentials: Credentials
) -> Outcome:
    """What a whole reply to a call means (the table above; remaps first)."""
    retry = retry_after(reply.headers.get("retry-after"))
    remapped = _remapped(reply, remaps)
    if remapped is not None:
        return _outcome_named(remapped, reply, credentials, retry)
    if not 200 <= reply.status < 300:
        return _outcome_named(_default_row(reply.status), reply, credentials, retry)
    data = parse_json(reply.body)
    if data is MISSING:
        return Ambiguous(f"malformed JSON in a success reply: {_brief(reply, credentials)}")
    receipt = receipt_at(data, operation.receipt, operation.receipt_field)
    if receipt is None:
        return Ambiguous(
            f"a success reply without the receipt ({operation.receipt_field!r} at "
            f"{operation.receipt!r}): {_brief(reply, credentials)}"
        )
    return Done(credentials.redact_data(receipt))


# -- a lookup -------------------------------------------------------------------------------


def lookup_failed(exc: BaseException, credentials: Credentials, seconds: float) -> LookupFailed:
    text = credentials.redact(f"the lookup failed: {type(exc).__name__}: {exc}")
    if isinstance(exc, httpx.TimeoutException):
        text = f"{text} (the lookup's deadline: {seconds:g} s)"
    return LookupFailed(text)


def endpoint_result(
    reply: Reply, lookup: EndpointLookup, fields: tuple[str, ...], credentials: Credentials
) -> LookupResult:
    """What a lookup endpoint's reply says about the operation ID (``fields``: the receipt
    fields the receipt may hold, :meth:`~.http_settings.HttpSettings.lookup_fields`)."""
    if reply.status == lookup.not_found_status and _matches(
        reply, lookup.not_found_pointer, lookup.not_found_equals
    ):
        return NotFound()
    if not 200 <= reply.status < 300:
        return LookupFailed(f"the lookup was answered {_brief(reply, credentials)}")
    data = parse_json(reply.body)
    if lookup.every_change:
        return _every_change(data, reply, lookup, fields, credentials)
    receipt = lookup_receipt(data, lookup.receipt, fields)
    if isinstance(receipt, str):
        return LookupFailed(
            f"a lookup reply without the receipt ({receipt}): {_brief(reply, credentials)}"
        )
    return Found(credentials.redact_data(receipt))


def _every_change(
    data: Any,
    reply: Reply,
    lookup: EndpointLookup,
    fields: tuple[str, ...],
    credentials: Credentials,
) -> LookupResult:
    """A reply listing every change under the operation ID at ``lookup.receipt``: none is
    "not found", one the receipt, more a change made more than once (:attr:`Found.others`)."""
    listed = resolve(data, lookup.receipt)
    if not isinstance(listed, list):
        return LookupFailed(
            f"a lookup reply without the list of changes at {lookup.receipt!r}: "
            f"{_brief(reply, credentials)}"
        )
    receipts: list[dict[str, Any]] = []
    for item in listed:
        receipt = lookup_receipt(item, "", fields)
        if isinstance(receipt, str):
            return LookupFailed(
                f"a change listed without its receipt ({receipt}): {_brief(reply, credentials)}"
            )
        receipts.append(credentials.redact_data(receipt))
    if not receipts:
        return NotFound()
    first, *others = receipts
    return Found(first, tuple(others))


def listing_items(reply: Reply, lookup: ListingLookup, credentials: Credentials) -> list[Any] | str:
    """The items of one page of a listing, or why there are none to read."""
    if not 200 <= reply.status < 300:
        return f"the listing was answered {_brief(reply, credentials)}"
    items = resolve(parse_json(reply.body), lookup.items)
    if not isinstance(items, list):
        return f"the listing holds no list at {lookup.items!r}"
    return items


def next_page(reply: Reply, lookup: ListingLookup) -> str | None:
    """Where the next page of a listing is (a path, a URL or a cursor), or None for none."""
    if lookup.next is None:
        return None
    value = resolve(parse_json(reply.body), lookup.next)
    if isinstance(value, bool) or not isinstance(value, str | int) or value == "":
        return None
    return str(value)


def _same(a: Any, b: Any) -> bool:
    """Two JSON values alike, an integral number as an integer (``10`` is ``10.0``)."""

    def plain(value: Any) -> Any:
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, list):
            return [plain(v) for v in value]
        return value

    return bool(plain(a) == plain(b))


def is_the_operation(
    item: Any, lookup: ListingLookup, operation_id: str, args: Mapping[str, Any] | None
) -> bool:
    """Whether a listed item is a change of the operation: it echoes the operation ID at
    ``reference``, or its values at the ``match`` pointers equal the operation's arguments."""
    if lookup.reference is not None:
        return bool(resolve(item, lookup.reference) == operation_id)
    if args is None:
        return False
    return all(
        name in args and _same(resolve(item, pointer), args[name])
        for pointer, name in lookup.match.items()
    )


def listing_result(
    matched: list[Any], lookup: ListingLookup, fields: tuple[str, ...], credentials: Credentials
) -> LookupResult:
    """What the items listed for the operation say: none, :class:`NotFound` (the runner waits
    out the listing's ``settle`` before it believes it); one or more, :class:`Found` with the
    first and, in ``others``, the further changes (a duplicate)."""
    receipts: list[dict[str, Any]] = []
    for item in matched:
        receipt = lookup_receipt(item, lookup.receipt, fields)
        if isinstance(receipt, str):
            return LookupFailed(f"the listed change has no receipt: {receipt}")
        receipts.append(credentials.redact_data(receipt))
    if not receipts:
        return NotFound()
    return Found(receipts[0], tuple(receipts[1:]))
