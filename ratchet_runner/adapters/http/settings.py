"""The HTTP adapter's settings: typed, checked configuration built from plain data.

:func:`parse_settings` takes the mapping a binding holds for one adapter (TOML or JSON data:
strings, numbers, booleans, tables, arrays) and returns :class:`HttpSettings`, or raises
:class:`~ratchet_runner.errors.BindingError` (R203) naming the first setting that is missing,
unknown, of the wrong type or out of range. Secrets are named here, never held: a
:class:`SecretSource` says which environment variable or file holds one, and
:mod:`~ratchet_runner.adapters.http.secrets` reads it when the adapter is made. The settings are
listed, with the classification table they feed, in ``docs/reference/adapters.md`` ("The HTTP
adapter").

Over 400 lines: one concern, reading a binding's HTTP settings, every setting checked and
named in its own message; the checked reading of one table is :mod:`.table`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ...errors import BindingError
from .table import Table, kind, scale, template

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
#: What a remap may make of a status: the rows of the classification table.
REMAP_OUTCOMES = ("transient", "ambiguous", "key_reused", "config_fault", "refused")

ArgumentsGo = Literal["json", "query"]


@dataclass(frozen=True)
class SecretSource:
    """Where a secret is read from: an environment variable or a file (never the value)."""

    env: str | None = None
    file: Path | None = None

    def describe(self) -> str:
        return f"environment variable {self.env}" if self.env else f"file {self.file}"


@dataclass(frozen=True)
class AuthSettings:
    """``bearer``: ``Authorization: Bearer <token>``; ``basic``: user name and password."""

    type: Literal["bearer", "basic"]
    secret: SecretSource  # the token, or the password
    username: str | None = None


@dataclass(frozen=True)
class SigningSettings:
    """An HMAC of the request body, hex-encoded, sent in ``header`` (after ``prefix``)."""

    header: str
    key: SecretSource
    algorithm: Literal["sha256", "sha512"] = "sha256"
    prefix: str = ""


@dataclass(frozen=True)
class OperationSettings:
    """How one operation is called: ``path`` is a template over the call's arguments
    (``/refunds/{order}``); the arguments go as the JSON body or as the query; the receipt is
    the value at the JSON pointer ``receipt`` of the reply (an object holding
    ``receipt_field``, or the value of ``receipt_field`` itself)."""

    method: str
    path: str
    arguments: ArgumentsGo
    receipt: str
    receipt_field: str


@dataclass(frozen=True)
class EndpointLookup:
    """Ask a lookup endpoint about an operation ID: ``path`` holds ``{operation_id}``; a reply
    with ``not_found_status`` (and, when set, ``not_found_equals`` at ``not_found_pointer`` of
    its body) means the provider has no change under that ID. Without ``receipt_field``, the
    receipt holds the receipt field of one of the operations (:meth:`HttpSettings.lookup_fields`).
    ``every_change``: the reply holds, at ``receipt``, a list with one record for each change
    the provider made under the ID (empty: none), so that a change made twice is seen.
    """

    method: str
    path: str
    receipt: str
    receipt_field: str | None
    not_found_status: int = 404
    not_found_pointer: str | None = None
    not_found_equals: str | None = None
    every_change: bool = False
    by: Literal["endpoint"] = field(default="endpoint", init=False)


@dataclass(frozen=True)
class ListingLookup:
    """List the provider's changes and find those of the operation: the items whose
    ``reference`` (a JSON pointer into each item) is the operation ID, or, for a provider whose
    items do not echo it, those whose values at the ``match`` pointers equal the operation's
    arguments. ``filter``: query parameters filled from the arguments (parameter → argument
    name), so that the provider lists only the changes of, say, one order; ``next``: the JSON
    pointer of the next page in a reply (a path or URL, or a cursor sent back as
    ``cursor_param``), followed for at most ``max_pages`` pages. ``settle``: how long the listing
    may lag behind a change, which the runner waits out before it believes "none listed".
    ``receipt_field`` as for :class:`EndpointLookup`."""

    method: str
    path: str
    items: str
    reference: str | None
    receipt: str
    receipt_field: str | None
    settle: float
    match: Mapping[str, str] = field(default_factory=dict)
    filter: Mapping[str, str] = field(default_factory=dict)
    next: str | None = None
    cursor_param: str | None = None
    max_pages: int = 10
    by: Literal["listing"] = field(default="listing", init=False)


Lookup = EndpointLookup | ListingLookup


@dataclass(frozen=True)
class Remap:
    """A reply with ``status`` (and, when set, ``body_equals`` at ``body_pointer`` of its JSON
    body) is classified as ``outcome`` instead of by the default table."""

    status: int
    outcome: str
    body_pointer: str | None = None
    body_equals: str | None = None


@dataclass(frozen=True)
class HttpSettings:
    """One HTTP adapter's binding (see ``docs/reference/adapters.md`` for every setting)."""

    base_url: str
    operations: Mapping[str, OperationSettings]
    lookups: Mapping[str, Lookup] = field(default_factory=dict)
    idempotency_header: str = "Idempotency-Key"
    effect_header: str | None = None
    timeout: float = 30.0
    lookup_timeout: float = 10.0
    keepalive_expiry: float = 5.0
    provider_idle_timeout: float | None = None
    max_connections: int = 10
    key_retention: float | None = None
    verify_tls: bool = True
    ca_file: Path | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    auth: AuthSettings | None = None
    signing: SigningSettings | None = None
    remaps: tuple[Remap, ...] = ()
    #: Multiplies each call's deadline (the effect's timeout, or ``timeout``): in (0, 1], for a
    #: binding that ``ratchet check`` or practice runs use, never for a real provider.
    timeout_scale: float = 1.0

    def lookup_fields(self, lookup: Lookup) -> tuple[str, ...]:
        """The receipt fields a reply to ``lookup`` may hold to be the receipt: its own
        ``receipt_field``; without one, the receipt field of each operation (each once, in the
        binding's order), for the lookup is told the operation ID and the effect, not the
        operation, and one lookup may serve operations with different receipt fields. The runner
        then checks the field of the effect looked up."""
        if lookup.receipt_field is not None:
            return (lookup.receipt_field,)
        return tuple(dict.fromkeys(op.receipt_field for op in self.operations.values()))


#: Headers that carry credentials: set through ``auth`` or ``signing``, never ``headers``.
CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie"})


def _secret(table: Table, stem: str, base_dir: Path | None) -> SecretSource:
    """``STEM_env`` or ``STEM_file``: exactly one of them."""
    env, file = table.text(f"{stem}_env"), table.text(f"{stem}_file")
    if (env is None) == (file is None):
        table.fail(
            table.name(f"{stem}_env"),
            f"or {table.name(stem + '_file')!r}: set exactly one "
            "(a secret is read from an environment variable or a file, never written here)",
        )
    if env is not None:
        return SecretSource(env=env)
    return SecretSource(file=_relative(Path(file), base_dir))


def _auth(table: Table, base_dir: Path | None) -> AuthSettings:
    kind = table.choice("type", ("bearer", "basic"))
    if kind == "bearer":
        table.only("type", "token_env", "token_file")
        return AuthSettings("bearer", _secret(table, "token", base_dir))
    table.only("type", "username", "password_env", "password_file")
    username = table.text("username", required=True)
    if ":" in username:
        table.fail(table.name("username"), "may not hold ':'")
    return AuthSettings("basic", _secret(table, "password", base_dir), username)


def _signing(table: Table, base_dir: Path | None) -> SigningSettings:
    table.only("header", "key_env", "key_file", "algorithm", "prefix")
    return SigningSettings(
        header=_header_name(table, "header", None),
        key=_secret(table, "key", base_dir),
        algorithm=table.choice("algorithm", ("sha256", "sha512"), "sha256"),
        prefix=table.text("prefix", ""),
    )


def _header_name(table: Table, key: str, default: str | None) -> str:
    name: str = table.text(key, default, required=True)
    if not name or not all(c.isalnum() or c in "-_" for c in name):
        table.fail(table.name(key), f"is no header name: {name!r}")
    return name


def _operation(table: Table) -> OperationSettings:
    table.only("method", "path", "arguments", "receipt", "receipt_field")
    method = table.choice("method", METHODS, "POST")
    default_go = "query" if method in ("GET", "DELETE") else "json"
    return OperationSettings(
        method=method,
        path=template(table, "path", None),
        arguments=table.choice("arguments", ("json", "query"), default_go),
        receipt=table.pointer("receipt"),
        receipt_field=table.text("receipt_field", required=True),
    )


def _lookup(table: Table) -> Lookup:
    by = table.choice("by", ("endpoint", "listing"))
    common = ("by", "method", "path", "receipt", "receipt_field")
    method = table.choice("method", METHODS, "GET")
    if by == "endpoint":
        table.only(
            *common, "not_found_status", "not_found_pointer", "not_found_equals", "every_change"
        )
        path = template(table, "path", frozenset({"operation_id"}))
        if "{operation_id}" not in path:
            table.fail(table.name("path"), f"must hold {{operation_id}}: {path!r}")
        pointer, equals = table.pair("not_found_pointer", "not_found_equals")
        return EndpointLookup(
            method=method,
            path=path,
            receipt=table.pointer("receipt"),
            receipt_field=table.text("receipt_field"),
            not_found_status=table.integer("not_found_status", 404, 400, 499),
            not_found_pointer=pointer,
            not_found_equals=equals,
            every_change=table.flag("every_change", False),
        )
    table.only(
        *common,
        "items",
        "reference",
        "match",
        "filter",
        "next",
        "cursor_param",
        "max_pages",
        "settle",
    )
    if "settle" not in table.data:
        table.fail(table.name("settle"), "is required: how long a listing may lag behind a call")
    reference = table.pointer("reference", None)
    match = _names_table(table, "match", pointers=True)
    if (reference is None) == (not match):
        table.fail(
            table.name("reference"),
            "or 'match': set exactly one: the pointer of the field that echoes the operation ID "
            "in each item, or, for a provider that echoes none, the item's fields that must equal "
            'the operation\'s arguments (match = { "/order" = "order" })',
        )
    return ListingLookup(
        method=method,
        path=template(table, "path", frozenset({"operation_id"})),
        items=table.pointer("items"),
        reference=reference,
        receipt=table.pointer("receipt"),
        receipt_field=table.text("receipt_field"),
        settle=table.seconds("settle", None, zero=True),
        match=match,
        filter=_names_table(table, "filter", pointers=False),
        next=table.pointer("next", None),
        cursor_param=table.text("cursor_param"),
        max_pages=table.integer("max_pages", 10, 1, 1000),
    )


def _names_table(table: Table, key: str, *, pointers: bool) -> dict[str, str]:
    """A table of strings to argument names (``match``: item pointers; ``filter``: query
    parameters), each argument name a plain name."""
    inner = table.table(key)
    if inner is None:
        return {}
    found: dict[str, str] = {}
    for name, value in inner.data.items():
        if pointers and not str(name).startswith("/"):
            inner.fail(inner.name(str(name)), "must be a JSON pointer into the item ('/order')")
        if not isinstance(value, str) or not value.isidentifier():
            inner.fail(inner.name(str(name)), f"must name an argument, not {value!r}")
        found[str(name)] = value
    return found


def _remaps(data: Any, where: str) -> tuple[Remap, ...]:
    if data is None:
        return ()
    if not isinstance(data, list):
        raise BindingError(f"{where}: setting 'remap' must be an array of tables, not {kind(data)}")
    remaps = []
    for i, entry in enumerate(data):
        table = Table(entry, where, f"remap[{i}]")
        table.only("status", "outcome", "body_pointer", "body_equals")
        if "status" not in table.data:
            table.fail(table.name("status"), "is required")
        pointer, equals = table.pair("body_pointer", "body_equals")
        remaps.append(
            Remap(
                status=table.integer("status", None, 100, 599),
                outcome=table.choice("outcome", REMAP_OUTCOMES),
                body_pointer=pointer,
                body_equals=equals,
            )
        )
    return tuple(remaps)


def _named(table: Table | None, read: Any) -> dict[str, Any]:
    if table is None:
        return {}
    return {
        str(name): read(Table(value, table.where, table.name(str(name))))
        for name, value in table.data.items()
    }


def _headers(table: Table | None) -> dict[str, str]:
    if table is None:
        return {}
    headers = {}
    for name in table.data:
        value = table.text(str(name), required=True)
        if not str(name) or not all(c.isalnum() or c in "-_" for c in str(name)):
            table.fail(table.name(str(name)), "is no header name")
        if str(name).lower() in CREDENTIAL_HEADERS:
            table.fail(
                table.name(str(name)),
                "carries credentials: set them with 'auth', read "
                "from an environment variable or a file",
            )
        headers[str(name)] = value
    return headers


def parse_settings(data: Any, *, name: str = "http", base_dir: Path | None = None) -> HttpSettings:
    """The settings of the HTTP adapter ``name`` from plain data, or :class:`BindingError`
    naming the first wrong setting. Relative secret and CA files are taken from ``base_dir``
    (the binding file's folder), when given."""
    where = f"binding {name!r}"
    top = Table(data, where)
    top.only(
        "base_url",
        "operations",
        "lookups",
        "idempotency_header",
        "effect_header",
        "timeout",
        "lookup_timeout",
        "keepalive_expiry",
        "provider_idle_timeout",
        "max_connections",
        "key_retention",
        "verify_tls",
        "ca_file",
        "headers",
        "auth",
        "signing",
        "remap",
        "timeout_scale",
    )
    base_url: str = top.text("base_url", required=True)
    if not base_url.startswith(("http://", "https://")) or len(base_url.split("://", 1)[1]) == 0:
        top.fail("base_url", f"must be an http:// or https:// URL: {base_url!r}")
    keepalive = top.seconds("keepalive_expiry", 5.0)
    idle = top.seconds("provider_idle_timeout", None)
    if idle is not None and keepalive >= idle:
        top.fail(
            "keepalive_expiry",
            f"must be below provider_idle_timeout ({idle:g} s), so "
            f"that no pooled connection outlives the provider's: {keepalive:g}",
        )
    operations = _named(top.table("operations"), _operation)
    if not operations:
        top.fail("operations", "is required: at least one operation")
    ca_file = top.text("ca_file")
    auth, signing = top.table("auth"), top.table("signing")
    return HttpSettings(
        base_url=base_url.rstrip("/"),
        operations=operations,
        lookups=_named(top.table("lookups"), _lookup),
        idempotency_header=_header_name(top, "idempotency_header", "Idempotency-Key"),
        effect_header=_header_name(top, "effect_header", None) if "effect_header" in data else None,
        timeout=top.seconds("timeout", 30.0),
        lookup_timeout=top.seconds("lookup_timeout", 10.0),
        keepalive_expiry=keepalive,
        provider_idle_timeout=idle,
        max_connections=top.integer("max_connections", 10, 1, 1000),
        key_retention=top.seconds("key_retention", None),
        verify_tls=top.flag("verify_tls", True),
        ca_file=None if ca_file is None else _relative(Path(ca_file), base_dir),
        headers=_headers(top.table("headers")),
        auth=None if auth is None else _auth(auth, base_dir),
        signing=None if signing is None else _signing(signing, base_dir),
        remaps=_remaps(top.data.get("remap"), where),
        timeout_scale=scale(top, "timeout_scale"),
    )


def _relative(path: Path, base_dir: Path | None) -> Path:
    return path if path.is_absolute() or base_dir is None else base_dir / path
