"""The practice world's services: what each operation does to the practice database, and whether
its provider deduplicates by key.

Each operation is a handler ``(db, call) -> Done | Refused`` run inside the world's transaction,
and a ``dedupe`` flag: a provider that deduplicates (payments, ``noop``, a generic operation
declared ``dedupe: true``) answers a second request with the same operation ID with the first
result; one that does not (the warehouse, travel, a generic operation declared ``dedupe: false``)
makes a second change. :mod:`~ratchet_runner.adapters.practice` owns the database, the faults and
the deduplication itself; this module owns what the providers do.

The services: ``payments`` (``refund``, ``charge``), ``warehouse`` (``create_label``,
``reship``), ``travel`` (``hold_flight``, ``hold_hotel``, ``confirm``, ``release``), ``noop``
(any operation; the receipt is ``{"id": OPERATION_ID}``) and the generic ``service``, whose
operations a spec declares (``config: {operations: {NAME: {dedupe: true|false}}}``): each records
the change with its arguments and returns ``{"<NAME>_id": ..., "operation": NAME}``.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import WorldError
from ..base import Call, Done, Outcome, Refused, Semantics

#: The services the practice world serves (adapter kinds it stands in for).
PRACTICE_SERVICES = ("payments", "warehouse", "travel", "service", "noop")

#: The generic service: any operation a spec declares, deduplicated or not as it says.
GENERIC = "service"

Handler = Callable[[sqlite3.Connection, Call], Outcome]


@dataclass(frozen=True)
class Operation:
    """One operation of a practice service: what it does, and whether its provider returns the
    first result for a second request with the same operation ID (``dedupe``)."""

    service: str
    name: str
    handler: Handler
    dedupe: bool


def operation(
    service: str, name: str, declared: Mapping[str, bool] | None = None
) -> Operation | None:
    """``service``'s operation ``name``, or None if it has none. The generic service offers the
    operations ``declared`` (name → dedupe) and no other."""
    if service == GENERIC:
        if declared is None or name not in declared:
            return None
        return Operation(service, name, _generic, declared[name])
    if service == "noop":
        return Operation(service, name, _noop, dedupe=True)
    handler = _HANDLERS.get((service, name))
    if handler is None:
        return None
    return Operation(service, name, handler, dedupe=service == "payments")


def semantics_of(service: str, name: str, config: Mapping[str, Any] | None) -> Semantics | None:
    """What the practice ``service``'s operation ``name`` does with a second request under one
    operation ID (None: no such operation). Those that do not deduplicate commit a request
    within ``COMMITS_WITHIN_SECONDS`` of receiving it, or abandon it (:func:`semantics_for`)."""
    try:
        declared = declared_operations(config) if service == GENERIC else None
    except WorldError:
        return None
    return semantics_for(operation(service, name, declared))


def semantics_for(op: Operation | None) -> Semantics | None:
    """What practice operation ``op`` does with a second request (None: no such operation):
    one that deduplicates returns the first result; the others make a second change, commit a
    request within ``COMMITS_WITHIN_SECONDS`` of receiving it or abandon it, and their lookups
    answer with every change made under the ID, at once."""
    from .faults import COMMITS_WITHIN_SECONDS

    if op is None:
        return None
    if op.dedupe:
        return Semantics(dedupe=True)
    return Semantics(dedupe=False, commits_within=COMMITS_WITHIN_SECONDS, sees_every_change=True)


def declared_operations(config: Mapping[str, Any] | None) -> dict[str, bool]:
    """The operations a generic ``service`` adapter's ``config`` declares, each with its
    ``dedupe``; a :class:`WorldError` for a config that declares none, or a ``dedupe`` that is
    not ``true`` or ``false`` (the spec schema already refuses both)."""
    operations = (config or {}).get("operations")
    if not isinstance(operations, Mapping) or not operations:
        raise WorldError(
            "a 'service' adapter declares its operations: "
            "config: {operations: {NAME: {dedupe: true|false}}}"
        )
    declared: dict[str, bool] = {}
    for name, settings in operations.items():
        dedupe = settings.get("dedupe") if isinstance(settings, Mapping) else None
        if not isinstance(dedupe, bool):
            raise WorldError(f"operation {name!r} of a 'service' adapter needs dedupe: true|false")
        declared[str(name)] = dedupe
    return declared


def operation_names(kind: str, config: Mapping[str, Any] | None) -> tuple[str, ...] | None:
    """The operations an adapter of ``kind`` offers in the practice world, as the validator
    checks them; None when any name will do (``noop``) or ``kind`` is no practice service."""
    if kind == GENERIC:
        operations = (config or {}).get("operations")
        return tuple(operations) if isinstance(operations, Mapping) else ()
    names = tuple(name for service, name in _HANDLERS if service == kind)
    return names or None


# -- payments -------------------------------------------------------------------------------------


def _short(db: sqlite3.Connection, request: Call, prefix: str) -> str:
    """A provider ID for the change: the operation ID's prefix, numbered when a provider that
    does not deduplicate makes a second change under the same ID."""
    (made,) = db.execute(
        "SELECT COUNT(*) FROM changes WHERE operation_id = ?", (request.operation_id,)
    ).fetchone()
    suffix = f"_{made + 1}" if made else ""
    return f"{prefix}_{request.operation_id[:12]}{suffix}"


def _paid_order(db: sqlite3.Connection, args: Mapping[str, Any]) -> tuple[float, str] | Refused:
    """The order's price and currency, or the refusal a payment provider gives: no such order,
    or another currency than the order's."""
    order = db.execute(
        "SELECT paid, currency FROM orders WHERE order_id = ?", (args["order"],)
    ).fetchone()
    if order is None:
        return Refused(f"no order {args['order']}")
    paid, currency = order
    if args["currency"] != currency:
        return Refused(f"order {args['order']} was paid in {currency}, not {args['currency']}")
    return float(paid), str(currency)


def _total(db: sqlite3.Connection, operation: str, order: str) -> float:
    return sum(
        float(json.loads(a)["amount"])
        for (a,) in db.execute(
            "SELECT args FROM changes WHERE service = 'payments' AND operation = ? "
            "AND json_extract(args, '$.order') = ?",
            (operation, order),
        )
    )


def _refund(db: sqlite3.Connection, request: Call) -> Outcome:
    args = request.args
    paid = _paid_order(db, args)
    if isinstance(paid, Refused):
        return paid
    price, currency = paid
    charged = _total(db, "charge", args["order"])
    refunded = _total(db, "refund", args["order"])
    amount = float(args["amount"])
    if round(refunded + amount, 2) > round(price + charged, 2):
        return Refused(
            f"refunding {amount:.2f} would take order {args['order']} to "
            f"{refunded + amount:.2f} {currency}, above the {price + charged:.2f} paid",
            {"paid": price, "charged": charged, "refunded": refunded},
        )
    return Done({"refund_id": _short(db, request, "re"), "amount": amount, "currency": currency})


def _charge(db: sqlite3.Connection, request: Call) -> Outcome:
    args = request.args
    paid = _paid_order(db, args)
    if isinstance(paid, Refused):
        return paid
    amount = float(args["amount"])
    if not amount > 0:
        return Refused(f"a charge must be above zero, not {amount:.2f}", {"amount": amount})
    return Done({"charge_id": _short(db, request, "ch"), "amount": amount, "currency": paid[1]})


# -- warehouse ------------------------------------------------------------------------------------


def _label(db: sqlite3.Connection, request: Call) -> Outcome:
    order = request.args["order"]
    if db.execute("SELECT 1 FROM orders WHERE order_id = ?", (order,)).fetchone() is None:
        return Refused(f"no order {order}")
    return Done({"label_id": _short(db, request, "lbl"), "order": order})


def _reship(db: sqlite3.Connection, request: Call) -> Outcome:
    sku = request.args["sku"]
    row = db.execute("SELECT available FROM stock WHERE sku = ?", (sku,)).fetchone()
    if row is None or row[0] < 1:
        return Refused(f"{sku} is out of stock", {"sku": sku, "available": row[0] if row else 0})
    db.execute("UPDATE stock SET available = available - 1 WHERE sku = ?", (sku,))
    return Done({"reship_id": _short(db, request, "rs"), "sku": sku})


# -- travel ---------------------------------------------------------------------------------------


def _hold(kind: str) -> Handler:
    def hold(db: sqlite3.Connection, request: Call) -> Outcome:
        hold_id = _short(db, request, kind[:2])
        ref = str(request.args.get("flight") or request.args.get("hotel"))
        db.execute(
            "INSERT INTO holds VALUES (?, ?, ?, ?, 'held')",
            (hold_id, kind, request.args["trip"], ref),
        )
        return Done({"hold_id": hold_id, kind: ref})

    return hold


def _confirm(db: sqlite3.Connection, request: Call) -> Outcome:
    held = {
        h
        for (h,) in db.execute(
            "SELECT hold_id FROM holds WHERE status = 'held' AND hold_id IN (?, ?)",
            (request.args["flight_hold"], request.args["hotel_hold"]),
        )
    }
    if len(held) != 2:
        return Refused("a hold to confirm is missing or released")
    return Done({"itinerary_id": _short(db, request, "it"), "trip": request.args["trip"]})


def _release(db: sqlite3.Connection, request: Call) -> Outcome:
    hold_id = request.args["hold_id"]
    row = db.execute("SELECT status FROM holds WHERE hold_id = ?", (hold_id,)).fetchone()
    if row is None:
        return Refused(f"no hold {hold_id}")
    db.execute("UPDATE holds SET status = 'released' WHERE hold_id = ?", (hold_id,))
    return Done({"release_id": _short(db, request, "rl"), "hold_id": hold_id})


# -- noop and the generic service -----------------------------------------------------------------


def _noop(db: sqlite3.Connection, request: Call) -> Outcome:
    return Done({"id": request.operation_id})


def _generic(db: sqlite3.Connection, request: Call) -> Outcome:
    """Record the change (its arguments are kept with it); the receipt names it by a generated
    ``<operation>_id``."""
    made = _short(db, request, request.operation)
    return Done({f"{request.operation}_id": made, "operation": request.operation})


_HANDLERS: dict[tuple[str, str], Handler] = {
    ("payments", "refund"): _refund,
    ("payments", "charge"): _charge,
    ("warehouse", "create_label"): _label,
    ("warehouse", "reship"): _reship,
    ("travel", "hold_flight"): _hold("flight"),
    ("travel", "hold_hotel"): _hold("hotel"),
    ("travel", "confirm"): _confirm,
    ("travel", "release"): _release,
}
