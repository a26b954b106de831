"""The practice world: a payment provider, a warehouse, travel providers and a generic service in
one SQLite file.

It stands in for the outside world in examples, tests and practice runs. It keeps its own
database (the "practice database"), separate from the runner's store. What each operation does
is :mod:`~ratchet_runner.adapters.practice.services`'s, and which fault a call meets
:mod:`~ratchet_runner.adapters.practice.faults`'s; this module owns the database, the fixtures,
the keys and the changes committed late. A provider that deduplicates by operation ID (the
idempotency key: payments, ``noop``, a generic operation declared ``dedupe: true``) writes once
and returns the first result for the same ID, and refuses the same ID with other arguments (as
Stripe does). The others (warehouse, travel, ``dedupe: false``) keep the operation ID as a client
reference that a lookup finds, but a second request makes a second change: only reconciling
first prevents it.
Every call received is logged, so tests can count calls.

Faults are injected per effect and per call: ``timeout_before_write`` (the request is lost),
``timeout_after_write`` (the change is made, the answer lost), ``unavailable`` (503), ``refuse``,
``malformed`` (the change is made, the reply is garbage), ``lookup_fails``, ``slow_reply``
(the change is made; the answer comes a few seconds later), ``slow_commit`` (the provider
commits the change, and answers, only a few seconds after it received the request: a lookup
meanwhile finds nothing) and ``commits_late`` (no answer; the change is committed a few seconds
later, and until then the same operation ID is "still being processed").

:meth:`PracticeWorld.handle` is what the provider does with a request (a :class:`Handled`);
:meth:`PracticeWorld.call` is how an in-process caller sees it, and
:mod:`~ratchet_runner.adapters.practice.http` serves the same over HTTP.

Over 400 lines: one concern, the practice world's provider behaviour (the faults on each
request, the keys it deduplicates by, and the changes it commits late); its tables are
:mod:`~ratchet_runner.adapters.practice.db`'s.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..base import (
    Ambiguous,
    Call,
    Done,
    Found,
    LookupFailed,
    NotFound,
    Refused,
    Semantics,
    Transient,
    not_sent,
)
from .db import SCHEMA, PracticeDatabase
from .faults import (
    COMMITS_LATE_SECONDS,
    COMMITS_WITHIN_SECONDS,
    SLOW_COMMIT_SECONDS,
    SLOW_REPLY_SECONDS,
    insert_fault,
    next_fault,
)
from .fixtures import check_fixture
from .services import GENERIC, Operation, declared_operations, operation, semantics_for

practice_operation = operation  # by another name where ``operation`` names an argument

if TYPE_CHECKING:  # annotations only
    from ..base import LookupResult, Outcome


#: How a request was treated, as :class:`Handled` reports it.
Verdict = Literal[
    "made",  # the change was made now
    "replayed",  # the same operation ID with the same arguments: the first result, nothing new
    "refused",  # the provider said no (its rules, a bad request, or an injected refusal)
    "key_reused",  # the same operation ID with other arguments: refused, nothing new
    "in_processing",  # the same operation ID is still being processed (commits_late)
    "dropped",  # never seen: timeout_before_write
    "unavailable",  # 503: unavailable
    "late",  # accepted without an answer; committed later: commits_late
    "unknown",  # the service has no such operation
    "abandoned",  # not committed within the provider's commits_within: nothing made
]


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


@dataclass(frozen=True)
class Handled:
    """What the provider did with one request, before its reply travels back: ``verdict`` says
    how it was treated, ``outcome`` is what an in-process caller is told, and ``fault`` is the
    fault injected into the request, if any (``timeout_after_write``, ``malformed`` and
    ``slow_reply`` shape only the reply to a request that was otherwise served)."""

    verdict: Verdict
    outcome: Outcome
    fault: str | None = None


def _plain(value: Any) -> Any:
    """Integral floats as integers, as the runner normalises arguments (``10.0`` is ``10``)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _fingerprint(args: dict[str, Any]) -> str:
    text = json.dumps(_plain(args), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


class PracticeWorld:
    """The practice database and the services that live in it."""

    def __init__(self, path: str | Path, sleep: Callable[[float], None] | None = None) -> None:
        self.path = Path(path)
        #: How a ``slow_reply`` waits: ``time.sleep``, or an injected clock's ``sleep`` (which
        #: moves fake time, as ``ratchet check`` does).
        self.sleep: Callable[[float], None] = sleep or time.sleep
        #: When a ``commits_late`` change is due (epoch seconds).
        self.now: Callable[[], float] = time.time
        #: The database; read-only when it is there and cannot be written (then it is read,
        #: by ``ratchet effects``, and never changed).
        self.db = PracticeDatabase(self.path, SCHEMA)
        self._tx = self.db.transaction

    @property
    def read_only(self) -> bool:
        return self.db.read_only

    def ready(self) -> None:
        """Make sure the world can be changed (:meth:`PracticeDatabase.ready`)."""
        self.db.ready()

    # -- fixtures and faults ----------------------------------------------------------------

    def reset(self) -> None:
        """Forget every order, change, call, fault and change not yet committed; the changes
        are numbered from 1 again."""
        with self._tx() as db:
            for table in ("orders", "stock", "changes", "holds", "calls", "faults", "late"):
                db.execute(f"DELETE FROM {table}")  # fixed names, never input
            db.execute("DELETE FROM sqlite_sequence")  # the AUTOINCREMENT counters

    def seed(self, fixture: Mapping[str, Any]) -> None:
        """Add the orders, stock and faults of an example's ``world:`` fixture, all or nothing:
        a fixture the world cannot use is a :class:`WorldError` before anything is written
        (:func:`~ratchet_runner.adapters.practice.fixtures.check_fixture`)."""
        check_fixture(fixture)
        with self._tx() as db:
            for order in fixture.get("orders", []):
                db.execute(
                    "INSERT OR REPLACE INTO orders VALUES (?, ?, ?, ?, ?)",
                    (
                        order["order"],
                        order.get("item"),
                        order.get("sku"),
                        float(order["paid"]),
                        order["currency"],
                    ),
                )
            for sku, available in dict(fixture.get("stock", {})).items():
                db.execute("INSERT OR REPLACE INTO stock VALUES (?, ?)", (sku, available))
            for fault in fixture.get("faults", []):
                calls, times = fault.get("calls"), fault.get("times")
                insert_fault(db, fault["effect"], fault["kind"], calls, times)

    def add_fault(
        self, effect: str, kind: str, calls: list[int] | None = None, times: int | None = None
    ) -> None:
        """Inject ``kind`` into ``effect``'s calls: on the given call numbers (1-based), or on the
        next ``times`` calls (default: the next one)."""
        with self._tx() as db:
            insert_fault(db, effect, kind, calls, times)

    def armed(self) -> list[tuple[str, str]]:
        """The faults injected into the next calls of an effect (``times``) that no call has met
        yet, as ``(effect, kind)``, oldest first: they wait for the effect's next call, in
        whichever run makes it."""
        with self.db.reading() as db:
            rows = db.execute(
                "SELECT effect, kind FROM faults WHERE times IS NOT NULL AND used < times "
                "ORDER BY id"
            ).fetchall()
        return [(str(effect), str(kind)) for effect, kind in rows]

    # -- the services -----------------------------------------------------------------------

    def handle(
        self, service: str, request: Call, declared: Mapping[str, bool] | None = None
    ) -> Handled:
        """What ``service`` does with one request (``declared``: the generic service's
        operations, each with its ``dedupe``), faults included."""
        op = operation(service, request.operation, declared)
        if op is None:
            return Handled("unknown", Refused(f"{service} has no operation {request.operation!r}"))
        # A provider that does not deduplicate commits a request within its commits_within of
        # receiving it, or abandons it: its database busy for longer, it makes nothing.
        until = None if op.dedupe else time.monotonic() + COMMITS_WITHIN_SECONDS
        try:
            with self._tx(until) as db:
                self._settle(db)
                fault = next_fault(db, request.effect, lookup=False)
            if fault == "slow_commit":  # received; committed (and answered) only a while later
                self.sleep(SLOW_COMMIT_SECONDS)
                fault = None
            with self._tx(until) as db:
                self._settle(db)
                handled = self._before_write(db, op, request, fault)
                if handled is None:
                    verdict, outcome = self._apply(db, op, request)
                    handled = Handled(verdict, outcome, fault)
                    self._log(db, request, fault or outcome.kind)
        except TimeoutError:  # not committed by its commits_within: abandoned, nothing made
            reason = (
                f"{service} could not commit the request within {COMMITS_WITHIN_SECONDS:g} s of "
                "receiving it and abandoned it: nothing was made"
            )
            return Handled("abandoned", Transient(reason))
        return handled

    def call(
        self, service: str, request: Call, declared: Mapping[str, bool] | None = None
    ) -> Outcome:
        """Serve one request to ``service`` in-process: what the caller is told, the lost and
        garbled replies of the faults included. A request whose deadline has passed is not sent
        (:func:`~ratchet_runner.adapters.base.not_sent`): the provider never sees it."""
        if request.expired():
            return not_sent(request)
        handled = self.handle(service, request, declared)
        if handled.fault == "timeout_after_write":
            return Ambiguous("timeout: the reply was lost")
        if handled.fault == "slow_reply":  # made, then a long wait before the answer
            self.sleep(SLOW_REPLY_SECONDS)
        if handled.fault == "malformed" and isinstance(handled.outcome, Done):
            return Ambiguous("malformed reply: '<html>502 Bad Gateway</html>'")
        return handled.outcome

    def settle(self) -> None:
        """Commit the ``commits_late`` changes that are due (every request and lookup does so
        first, too)."""
        with self._tx() as db:
            self._settle(db)

    def receive_only(self, request: Call) -> None:
        """Log a request that reached the provider, which never commits it (the caller died
        while it was in flight); no fault is consulted."""
        with self._tx() as db:
            self._log(db, request, "in_flight")

    def lookup(self, service: str, operation: str, operation_id: str, effect: str) -> LookupResult:
        """What the provider has under ``operation_id``: the first change, and, in ``others``,
        every further one (a provider that does not deduplicate made it more than once)."""
        with self._tx() as db:
            self._settle(db)
            fault = next_fault(db, effect, lookup=True)
            db.execute(
                "INSERT INTO calls (operation_id, effect, operation, outcome) VALUES (?, ?, ?, ?)",
                (operation_id, effect, operation, fault or "lookup"),
            )
            if fault == "lookup_fails":
                return LookupFailed("lookup timed out (injected)")
            rows = db.execute(
                "SELECT result FROM changes WHERE operation_id = ? AND service = ? ORDER BY seq",
                (operation_id, service),
            ).fetchall()
        if not rows:
            return NotFound()
        first, *rest = (json.loads(row[0]) for row in rows)
        return Found(first, tuple(rest))

    def _log(self, db: sqlite3.Connection, request: Call, outcome: str) -> None:
        db.execute(
            "INSERT INTO calls (operation_id, effect, operation, outcome) VALUES (?, ?, ?, ?)",
            (request.operation_id, request.effect, request.operation, outcome),
        )

    def _before_write(
        self, db: sqlite3.Connection, op: Operation, request: Call, fault: str | None
    ) -> Handled | None:
        """The request's end before the provider's own work, if it has one: dropped,
        unavailable, still being processed, refused by a fault, or put off (``commits_late``)."""
        handled: Handled | None = None
        if fault == "timeout_before_write":
            handled = Handled("dropped", Ambiguous("timeout: no reply"), fault)
        elif fault == "unavailable":
            handled = Handled("unavailable", Transient("503 service unavailable"), fault)
        elif op.dedupe and self._in_processing(db, op.service, request.operation_id):
            reason = "409: a request with this operation ID is still being processed"
            handled = Handled("in_processing", Ambiguous(reason), fault)
        elif fault == "refuse":
            handled = Handled("refused", Refused("refused by the provider (injected)"), fault)
        elif fault == "commits_late":
            self._defer(db, op, request)
            handled = Handled("late", Ambiguous("timeout: no reply"), fault)
        if handled is not None:
            label = {"refused": "refused", "in_processing": "in_processing"}
            self._log(db, request, label.get(handled.verdict, str(fault)))
        return handled

    def _apply(
        self, db: sqlite3.Connection, op: Operation, request: Call
    ) -> tuple[Verdict, Outcome]:
        fingerprint = _fingerprint(request.args)
        seen = db.execute(
            "SELECT fingerprint, result FROM changes WHERE operation_id = ? AND service = ? "
            "ORDER BY seq",
            (request.operation_id, op.service),
        ).fetchone()
        if seen is not None and op.dedupe:
            if seen[0] != fingerprint:
                return "key_reused", Refused(
                    "idempotency key reused with different arguments",
                    {"operation_id": request.operation_id},
                )
            return "replayed", Done(json.loads(seen[1]))
        try:
            outcome = op.handler(db, request)
        except (KeyError, TypeError, ValueError) as exc:
            return "refused", Refused(f"bad request: {exc}")
        if not isinstance(outcome, Done):
            return "refused", outcome
        db.execute(
            "INSERT INTO changes (operation_id, service, operation, effect, args, fingerprint,"
            " result) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                request.operation_id,
                op.service,
                request.operation,
                request.effect,
                json.dumps(request.args, sort_keys=True),
                fingerprint,
                json.dumps(outcome.receipt, sort_keys=True),
            ),
        )
        return "made", outcome

    # -- changes committed late ---------------------------------------------------------------

    def _defer(self, db: sqlite3.Connection, op: Operation, request: Call) -> None:
        db.execute(
            "INSERT INTO late (operation_id, service, operation, effect, args, dedupe, due)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                request.operation_id,
                op.service,
                op.name,
                request.effect,
                json.dumps(request.args, sort_keys=True),
                int(op.dedupe),
                self.now() + COMMITS_LATE_SECONDS,
            ),
        )

    def _settle(self, db: sqlite3.Connection) -> None:
        """Make the changes put off by ``commits_late`` whose time has come, oldest first."""
        due = db.execute(
            "SELECT id, operation_id, service, operation, effect, args, dedupe FROM late "
            "WHERE due <= ? ORDER BY id",
            (self.now(),),
        ).fetchall()
        for late_id, operation_id, service, name, effect, args, dedupe in due:
            db.execute("DELETE FROM late WHERE id = ?", (late_id,))
            op = operation(service, name, {name: bool(dedupe)})
            if op is not None:
                self._apply(db, op, Call(name, operation_id, json.loads(args), effect))

    def _in_processing(self, db: sqlite3.Connection, service: str, operation_id: str) -> bool:
        """Whether a change under ``operation_id`` is accepted but not yet committed."""
        row = db.execute(
            "SELECT 1 FROM late WHERE operation_id = ? AND service = ?", (operation_id, service)
        ).fetchone()
        return row is not None

    # -- reading the world ------------------------------------------------------------------

    def changes(self) -> list[Change]:
        """Every change made, oldest first (those of ``commits_late`` that are due made first,
        unless the world is read-only)."""
        with self.db.reading() as db:
            if not self.read_only:
                self._settle(db)
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
        with self.db.reading() as db:
            rows = db.execute(query + " ORDER BY seq", params).fetchall()
        keys = ("operation_id", "effect", "operation", "outcome", "at")
        return [dict(zip(keys, r, strict=True)) for r in rows]

    def adapter(self, service: str, config: Mapping[str, Any] | None = None) -> PracticeAdapter:
        """``service`` through the adapter protocol; for the generic service, with the
        operations its adapter's ``config`` declares (a :class:`WorldError` if none)."""
        declared = declared_operations(config) if service == GENERIC else None
        return PracticeAdapter(self, service, declared)


class PracticeAdapter:
    """One practice service seen through the adapter protocol."""

    def __init__(
        self, world: PracticeWorld, service: str, declared: Mapping[str, bool] | None = None
    ) -> None:
        self.world = world
        self.service = service
        #: The generic service's operations, each with its ``dedupe``.
        self.declared = declared

    def call(self, request: Call) -> Outcome:
        return self.world.call(self.service, request, self.declared)

    def lookup(self, operation: str, operation_id: str, effect: str = "") -> LookupResult:
        return self.world.lookup(self.service, operation, operation_id, effect)

    def semantics(self, operation: str, lookup: str | None = None) -> Semantics | None:
        """What this practice provider does with a second request: payments, ``noop`` and a
        generic operation declared ``dedupe: true`` return the first result; the others make a
        second change, and commit a request within :data:`COMMITS_WITHIN_SECONDS` of receiving
        it or abandon it. Its lookups never lag behind a change, and answer with every change made
        under the ID."""
        return semantics_for(practice_operation(self.service, operation, self.declared))
