"""The practice world: a payment provider, a warehouse and travel providers in one SQLite file.

It stands in for the outside world in examples, tests and practice runs. It keeps its own
database (the "practice database"), separate from the runner's store. The payment provider
deduplicates by operation ID (the idempotency key): the same ID writes once and returns the first
result, and the same ID with other arguments is refused (as Stripe does). The warehouse and
travel providers keep the operation ID as a client reference that a lookup finds, but do not
deduplicate: a blind retry there makes a second change, so only reconciling first prevents it.
Every call received is logged, so tests can count calls.

Faults are injected per effect and per call: ``timeout_before_write`` (the request is lost),
``timeout_after_write`` (the change is made, the answer lost), ``unavailable`` (503), ``refuse``,
``malformed`` (the change is made, the reply is garbage), ``lookup_fails``, ``slow_reply``
(the change is made; the answer comes a few seconds later) and ``slow_commit`` (the provider
commits the change, and answers, only a few seconds after it received the request: a lookup
meanwhile finds nothing — a provider that commits late but within the call's timeout).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ratchet_runner.errors import WorldError

from .base import (
    Ambiguous,
    Call,
    Done,
    Found,
    LookupFailed,
    LookupResult,
    NotFound,
    Outcome,
    Refused,
    Transient,
)

#: The services the practice world serves (adapter kinds it stands in for).
PRACTICE_SERVICES = ("payments", "warehouse", "travel", "noop")

#: Services that deduplicate by idempotency key, as a payment provider does. The others record
#: the operation ID as a client reference that a lookup can find, but a second request with the
#: same ID makes a second change, as many warehouse and travel APIs do: for them, only reconciling
#: before a retry prevents a duplicate.
IDEMPOTENT_SERVICES = frozenset({"payments", "noop"})

FAULT_KINDS = (
    "timeout_before_write",
    "timeout_after_write",
    "unavailable",
    "refuse",
    "malformed",
    "lookup_fails",
    "slow_reply",
    "slow_commit",
)

#: How long a ``slow_reply`` keeps the caller waiting after the change is made.
SLOW_REPLY_SECONDS = 3.0

#: How long a ``slow_commit`` provider works on a request before it commits the change (and
#: replies): a lookup meanwhile finds nothing. Well within every shipped effect's timeout.
SLOW_COMMIT_SECONDS = 2.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS orders (
    order_id TEXT PRIMARY KEY, item TEXT, sku TEXT, paid REAL NOT NULL, currency TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS stock (sku TEXT PRIMARY KEY, available INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS changes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    operation_id TEXT NOT NULL,
    service TEXT NOT NULL,
    operation TEXT NOT NULL,
    effect TEXT NOT NULL,
    args TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    result TEXT NOT NULL,
    at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE INDEX IF NOT EXISTS ix_changes_operation ON changes (operation_id);
CREATE TABLE IF NOT EXISTS holds (
    hold_id TEXT PRIMARY KEY, kind TEXT NOT NULL, trip TEXT NOT NULL, ref TEXT NOT NULL,
    status TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS calls (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    operation_id TEXT NOT NULL,
    effect TEXT NOT NULL,
    operation TEXT NOT NULL,
    outcome TEXT NOT NULL,
    at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE TABLE IF NOT EXISTS faults (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    effect TEXT NOT NULL,
    kind TEXT NOT NULL,
    calls TEXT,
    times INTEGER,
    used INTEGER NOT NULL DEFAULT 0
);
"""


@dataclass(frozen=True)
class Change:
    seq: int
    operation_id: str
    service: str
    operation: str
    effect: str
    args: dict[str, Any]
    result: dict[str, Any]
    at: str


def _fingerprint(args: dict[str, Any]) -> str:
    text = json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def parse_fault(effects: Iterable[str], text: str) -> tuple[str, str]:
    """``EFFECT:KIND`` (as ``ratchet run --fault`` takes it) as ``(effect, kind)``; a
    :class:`WorldError` unless the effect is one of ``effects`` and the kind a known fault."""
    effect, _, kind = text.partition(":")
    known = list(effects)
    if effect not in known:
        raise WorldError(f"no effect {effect!r} (effects: {', '.join(known)})")
    if kind not in FAULT_KINDS:
        raise WorldError(f"no fault {kind!r} (faults: {', '.join(FAULT_KINDS)})")
    return effect, kind


class PracticeWorld:
    """The practice database and the services that live in it."""

    def __init__(self, path: str | Path, sleep: Callable[[float], None] | None = None) -> None:
        self.path = Path(path)
        #: How a ``slow_reply`` waits: ``time.sleep``, or an injected clock's ``sleep`` (which
        #: moves fake time, as ``ratchet check`` does).
        self.sleep: Callable[[float], None] = sleep or time.sleep
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(_SCHEMA)
        finally:
            db.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA busy_timeout=60000")
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        finally:
            db.close()

    # -- fixtures and faults ----------------------------------------------------------------

    def reset(self) -> None:
        """Forget every order, change, call and fault."""
        with self._tx() as db:
            for table in ("orders", "stock", "changes", "holds", "calls", "faults"):
                db.execute(f"DELETE FROM {table}")  # fixed names, never input

    def seed(self, fixture: dict[str, Any]) -> None:
        """Add the orders, stock and faults of an example's ``world:`` fixture."""
        if not isinstance(fixture, dict):
            raise WorldError("a world fixture is a mapping")
        unknown = set(fixture) - {"orders", "stock", "faults"}
        if unknown:
            raise WorldError(f"unknown world fixture keys: {', '.join(sorted(unknown))}")
        try:
            with self._tx() as db:
                for order in fixture.get("orders", []):
                    db.execute(
                        "INSERT OR REPLACE INTO orders VALUES (?, ?, ?, ?, ?)",
                        (
                            str(order["order"]),
                            order.get("item"),
                            order.get("sku"),
                            float(order["paid"]),
                            str(order["currency"]),
                        ),
                    )
                for sku, available in dict(fixture.get("stock", {})).items():
                    db.execute("INSERT OR REPLACE INTO stock VALUES (?, ?)", (sku, int(available)))
        except (KeyError, TypeError, ValueError) as exc:
            raise WorldError(f"bad order or stock in the world fixture: {exc}") from None
        for fault in fixture.get("faults", []):
            if not isinstance(fault, dict) or "effect" not in fault or "kind" not in fault:
                raise WorldError("a fault needs 'effect' and 'kind'")
            self.add_fault(fault["effect"], fault["kind"], fault.get("calls"), fault.get("times"))

    def add_fault(
        self, effect: str, kind: str, calls: list[int] | None = None, times: int | None = None
    ) -> None:
        """Inject ``kind`` into ``effect``'s calls: on the given call numbers (1-based), or on the
        next ``times`` calls (default: the next one)."""
        if kind not in FAULT_KINDS:
            raise WorldError(f"unknown fault {kind!r} (known: {', '.join(FAULT_KINDS)})")
        if calls is None and times is None:
            times = 1
        with self._tx() as db:
            db.execute(
                "INSERT INTO faults (effect, kind, calls, times) VALUES (?, ?, ?, ?)",
                (effect, kind, json.dumps(calls) if calls is not None else None, times),
            )

    def _fault(self, db: sqlite3.Connection, effect: str, lookup: bool) -> str | None:
        (made,) = db.execute(
            "SELECT COUNT(*) FROM calls WHERE effect = ? AND operation NOT LIKE 'lookup%'",
            (effect,),
        ).fetchone()
        number = made + (0 if lookup else 1)
        for fid, kind, calls, times, used in db.execute(
            "SELECT id, kind, calls, times, used FROM faults WHERE effect = ? ORDER BY id",
            (effect,),
        ).fetchall():
            if (kind == "lookup_fails") != lookup:
                continue
            if calls is not None and number in json.loads(calls) and not lookup:
                return str(kind)
            if times is not None and used < times:
                db.execute("UPDATE faults SET used = used + 1 WHERE id = ?", (fid,))
                return str(kind)
        return None

    # -- the services -----------------------------------------------------------------------

    def call(self, service: str, request: Call) -> Outcome:
        """Serve one request to ``service`` (payments, warehouse, travel, noop)."""
        handler = _HANDLERS.get((service, request.operation))
        if handler is None and service == "noop":
            handler = _noop
        if handler is None:
            return Refused(f"{service} has no operation {request.operation!r}")
        with self._tx() as db:
            fault = self._fault(db, request.effect, lookup=False)
        if fault == "slow_commit":  # received; committed (and answered) only a while later
            self.sleep(SLOW_COMMIT_SECONDS)
            fault = None
        with self._tx() as db:
            if fault in ("timeout_before_write", "unavailable"):
                self._log(db, request, fault)
                return (
                    Ambiguous("timeout: no reply")
                    if fault == "timeout_before_write"
                    else Transient("503 service unavailable")
                )
            if fault == "refuse":
                self._log(db, request, "refused")
                return Refused("refused by the provider (injected)")
            outcome = self._apply(db, service, request, handler)
            self._log(db, request, fault or outcome.kind)
        if fault == "timeout_after_write":
            return Ambiguous("timeout: the reply was lost")
        if fault == "slow_reply":  # made, then a long wait before the answer (outside the lock)
            self.sleep(SLOW_REPLY_SECONDS)
        if fault == "malformed" and isinstance(outcome, Done):
            return Ambiguous("malformed reply: '<html>502 Bad Gateway</html>'")
        return outcome

    def receive_only(self, request: Call) -> None:
        """Log a request that reached the provider, which never commits it (the caller died
        while it was in flight); no fault is consulted."""
        with self._tx() as db:
            self._log(db, request, "in_flight")

    def lookup(self, service: str, operation: str, operation_id: str, effect: str) -> LookupResult:
        """What the provider has under ``operation_id`` (the first change, if several)."""
        with self._tx() as db:
            fault = self._fault(db, effect, lookup=True)
            db.execute(
                "INSERT INTO calls (operation_id, effect, operation, outcome) VALUES (?, ?, ?, ?)",
                (operation_id, effect, operation, fault or "lookup"),
            )
            if fault == "lookup_fails":
                return LookupFailed("lookup timed out (injected)")
            row = db.execute(
                "SELECT result FROM changes WHERE operation_id = ? AND service = ? ORDER BY seq",
                (operation_id, service),
            ).fetchone()
        return Found(json.loads(row[0])) if row else NotFound()

    def _log(self, db: sqlite3.Connection, request: Call, outcome: str) -> None:
        db.execute(
            "INSERT INTO calls (operation_id, effect, operation, outcome) VALUES (?, ?, ?, ?)",
            (request.operation_id, request.effect, request.operation, outcome),
        )

    def _apply(
        self, db: sqlite3.Connection, service: str, request: Call, handler: _Handler
    ) -> Outcome:
        fingerprint = _fingerprint(request.args)
        seen = db.execute(
            "SELECT fingerprint, result FROM changes WHERE operation_id = ? ORDER BY seq",
            (request.operation_id,),
        ).fetchone()
        if seen is not None and service in IDEMPOTENT_SERVICES:
            if seen[0] != fingerprint:
                return Refused(
                    "idempotency key reused with different arguments",
                    {"operation_id": request.operation_id},
                )
            return Done(json.loads(seen[1]))
        try:
            outcome = handler(db, request)
        except (KeyError, TypeError, ValueError) as exc:
            return Refused(f"bad request: {exc}")
        if isinstance(outcome, Done):
            db.execute(
                "INSERT INTO changes (operation_id, service, operation, effect, args, fingerprint,"
                " result) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    request.operation_id,
                    service,
                    request.operation,
                    request.effect,
                    json.dumps(request.args, sort_keys=True),
                    fingerprint,
                    json.dumps(outcome.receipt, sort_keys=True),
                ),
            )
        return outcome

    # -- reading the world ------------------------------------------------------------------

    def changes(self) -> list[Change]:
        with self._tx() as db:
            rows = db.execute(
                "SELECT seq, operation_id, service, operation, effect, args, result, at "
                "FROM changes ORDER BY seq"
            ).fetchall()
        return [
            Change(r[0], r[1], r[2], r[3], r[4], json.loads(r[5]), json.loads(r[6]), r[7])
            for r in rows
        ]

    def calls(self, effect: str | None = None) -> list[dict[str, Any]]:
        query = "SELECT operation_id, effect, operation, outcome, at FROM calls"
        params: tuple[Any, ...] = ()
        if effect is not None:
            query += " WHERE effect = ?"
            params = (effect,)
        with self._tx() as db:
            rows = db.execute(query + " ORDER BY seq", params).fetchall()
        keys = ("operation_id", "effect", "operation", "outcome", "at")
        return [dict(zip(keys, r, strict=True)) for r in rows]

    def adapter(self, service: str) -> PracticeAdapter:
        return PracticeAdapter(self, service)


class PracticeAdapter:
    """One practice service seen through the adapter protocol."""

    def __init__(self, world: PracticeWorld, service: str) -> None:
        self.world = world
        self.service = service

    def call(self, request: Call) -> Outcome:
        return self.world.call(self.service, request)

    def lookup(self, operation: str, operation_id: str, effect: str = "") -> LookupResult:
        return self.world.lookup(self.service, operation, operation_id, effect)


# -- the operations -------------------------------------------------------------------------

_Handler = Callable[[sqlite3.Connection, Call], Outcome]


def _short(db: sqlite3.Connection, request: Call, prefix: str) -> str:
    """A provider ID for the change: the operation ID's prefix, numbered when a provider that
    does not deduplicate makes a second change under the same ID."""
    (made,) = db.execute(
        "SELECT COUNT(*) FROM changes WHERE operation_id = ?", (request.operation_id,)
    ).fetchone()
    suffix = f"_{made + 1}" if made else ""
    return f"{prefix}_{request.operation_id[:12]}{suffix}"


def _refund(db: sqlite3.Connection, request: Call) -> Outcome:
    args = request.args
    order = db.execute(
        "SELECT paid, currency FROM orders WHERE order_id = ?", (args["order"],)
    ).fetchone()
    if order is None:
        return Refused(f"no order {args['order']}")
    paid, currency = order
    if args["currency"] != currency:
        return Refused(f"order {args['order']} was paid in {currency}, not {args['currency']}")
    refunded = sum(
        json.loads(a)["amount"]
        for (a,) in db.execute(
            "SELECT args FROM changes "
            "WHERE operation = 'refund' AND json_extract(args, '$.order') = ?",
            (args["order"],),
        )
    )
    amount = float(args["amount"])
    if round(refunded + amount, 2) > round(paid, 2):
        return Refused(
            f"refunding {amount:.2f} would take order {args['order']} to "
            f"{refunded + amount:.2f} {currency}, above the {paid:.2f} paid",
            {"paid": paid, "refunded": refunded},
        )
    return Done({"refund_id": _short(db, request, "re"), "amount": amount, "currency": currency})


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


def _hold(kind: str) -> _Handler:
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


def _noop(db: sqlite3.Connection, request: Call) -> Outcome:
    return Done({"id": request.operation_id})


_HANDLERS: dict[tuple[str, str], _Handler] = {
    ("payments", "refund"): _refund,
    ("warehouse", "create_label"): _label,
    ("warehouse", "reship"): _reship,
    ("travel", "hold_flight"): _hold("flight"),
    ("travel", "hold_hotel"): _hold("hotel"),
    ("travel", "confirm"): _confirm,
    ("travel", "release"): _release,
}
