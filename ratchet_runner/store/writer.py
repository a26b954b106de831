"""The store's writes, each in one transaction: the writer every database starts from.

Every change to a run is one :class:`~ratchet_runner.store.records.Change` applied in one
transaction that first compare-and-sets the run's version (``UPDATE runs … WHERE id = :id AND
version = :v`` and the lease fence, rowcount checked) and then appends the history and writes
operations, approvals, timers and signals. Losing the race raises
:class:`~ratchet_runner.errors.VersionConflict` (:class:`~ratchet_runner.errors.LeaseLost` when
only the lease differs); nothing is overwritten. Claims, leases, a run's creation and the store's
own housekeeping are written here too.

This is how any database is written; :class:`~ratchet_runner.store.sqlite.SQLiteWriter` adds
that its transactions take SQLite's write lock up front and that a change is one statement
where a trigger can write it, and
:class:`~ratchet_runner.store.postgres.PostgresWriter` writes what it can in one statement and
comes back here for the rest. A transaction runs on ``engine`` with the execution option
``ratchet_write``, which tells a write transaction from a read.

Over 400 lines: one concern, the store's writes, each one transaction, with the statements they
run, built once.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from functools import lru_cache
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    Float,
    Integer,
    bindparam,
    case,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError

from ..clock import Clock
from ..errors import (
    DuplicateOperation,
    LeaseLost,
    RunBusy,
    RunNotFound,
    StoreError,
    UsageError,
    VersionConflict,
)
from ..words import ENDED, EventKind, RunStatus
from . import compact, tallies
from .compiled import Executes, Statements
from .context import RunContext, stored
from .dialects import Dialect, failures, why
from .prune import forget, prune
from .records import Change, Event, NewRun, RunRecord
from .restores import attempt_in, check_incarnation
from .tables import (
    JSON_TYPE,
    RECEIPT_ONCE,
    RECEIPTS_ONCE_ON,
    RUN_TABLES,
    approvals,
    duplicates,
    evidence_keys,
    free,
    history,
    meta,
    operations,
    published,
    runnable,
    runs,
    signals,
    spec_versions,
    timers,
)

# -- statements, built once (building a statement costs more than running it) ----------------

_CAS_VALUES: dict[str, Any] = {
    "version": bindparam("n_version"),
    "state": bindparam("n_state"),
    "status": bindparam("n_status"),
    "context": bindparam("n_context", type_=JSON_TYPE),
    "updated_at": bindparam("n_updated_at"),
    "wake_at": bindparam("n_wake_at"),
    "spec_digest": bindparam("n_spec_digest"),
}

#: A leased commit that takes the run out of ``running`` gives the lease back with it: a run
#: nobody can claim needs no lease, and the worker saves a round trip.
_RELEASE_UNLESS_RUNNING: dict[str, Any] = {
    column: case((bindparam("n_status") == RunStatus.RUNNING, runs.c[column]), else_=None)
    for column in ("lease_owner", "lease_token", "lease_expires_at")
}

#: A commit under no lease matches only a run with no lease or an expired one: it clears it, so
#: a run finished after its worker died shows no dead worker's lease.
_CLEAR_LEASE: dict[str, Any] = dict.fromkeys(("lease_owner", "lease_token", "lease_expires_at"))


#: A change keeps every operation the run lists (``operations`` only grows: the history and the
#: context name them by their place, :mod:`.compact`): one whose context lists fewer than the
#: stored one does, written over a move it never read, is refused.
_LISTED_NOW = func.coalesce(func.json_array_length(runs.c.context["operations"]), 0)
_KEEPS_LISTED = bindparam("n_listed", type_=Integer) >= _LISTED_NOW


def _cas_run(*fence: Any, release: bool = False) -> Any:
    """``UPDATE runs SET … WHERE id = :id AND version = :v`` and the lease condition ``fence``
    (and :data:`_KEEPS_LISTED`)."""
    values = {**_CAS_VALUES, **(_RELEASE_UNLESS_RUNNING if release else _CLEAR_LEASE)}
    return (
        update(runs)
        .where(
            runs.c.id == bindparam("b_id"),
            runs.c.version == bindparam("b_version"),
            _KEEPS_LISTED,
            *fence,
        )
        .values(**values)
    )


def _cas_taking(free: Any, now: Any) -> Any:
    """The compare-and-set of a commit that takes the lease ``:b_token`` for ``:b_owner`` (or
    keeps it, renewed) if the run is ``free``, and gives it back unless the run stays running."""
    running = bindparam("n_status") == RunStatus.RUNNING
    return (
        update(runs)
        .where(
            runs.c.id == bindparam("b_id"),
            runs.c.version == bindparam("b_version"),
            _KEEPS_LISTED,
            or_(runs.c.lease_token == bindparam("b_token"), free),
        )
        .values(
            **_CAS_VALUES,
            lease_owner=case((running, bindparam("b_owner")), else_=None),
            lease_token=case((running, bindparam("b_token")), else_=None),
            lease_expires_at=case((running, now + bindparam("b_seconds", type_=Float)), else_=None),
        )
    )


_RUN_BY_ID = select(runs).where(runs.c.id == bindparam("b_id"))
_INSERT_RUN = insert(runs)


_INSERT_HISTORY = insert(history)


@lru_cache(maxsize=8)
def _history_sql(dialect: str, paramstyle: str) -> str | None:
    """``INSERT INTO history …`` in the DBAPI's own parameter style (None for a style other
    than SQLite's and psycopg's)."""
    if paramstyle == "qmark":
        values = "(?, ?, ?, ?)"
    elif paramstyle in ("format", "pyformat"):
        values = "(%s, %s, %s, %s::json)" if dialect == "postgresql" else "(%s, %s, %s, %s)"
    else:
        return None
    return f'INSERT INTO history (run_id, version, "at", events) VALUES {values}'


def insert_history(
    conn: Executes,
    run_id: str,
    version: int,
    at: float,
    events: Sequence[Event],
    change: Change | None = None,
) -> None:
    """Within a write transaction: the run's history row of ``version`` (the commit's), its
    ``events`` in the compact form of :mod:`.compact` (``change``: the commit's, which names
    the run's operations and the receipts it stores), sent to the driver as it is (nothing is
    written for a commit with no events)."""
    if not events:
        return
    listed, recorded = written_with(change) if change is not None else ((), None)
    if conn.dialect.name != RECEIPTS_ONCE_ON:
        recorded = None  # a done event keeps its receipt where nothing keeps that written once
    sql = _history_sql(conn.dialect.name, conn.dialect.paramstyle)
    if sql is None:
        row = {"run_id": run_id, "version": version, "at": at}
        entries = compact.entries(events, listed, recorded)
        conn.execute(_INSERT_HISTORY, [{**row, "events": entries}])
        return
    conn.exec_driver_sql(sql, (run_id, version, at, compact.encode(events, listed, recorded)))


def written_with(change: Change) -> tuple[Sequence[str], dict[str, Any]]:
    """What :mod:`.compact` writes ``change``'s history against: the operations the run lists
    once it is committed (its context's), and the receipts it stores, by operation ID."""
    context = change.context if change.context is not None else change.base and change.base.context
    return compact.listed_in(context or {}), compact.recorded_in(change.operation_updates)


_INSERT_OPERATION = insert(operations)
#: What a new operation has not got yet (a compensation says what it compensates).
_NO_OUTCOME = {"receipt": None, "last_error": None, "compensates": None}
_INSERT_APPROVAL = insert(approvals)
_OPERATION_UPDATES: dict[tuple[str, ...], Any] = {}


def _operation_update(names: tuple[str, ...]) -> Any:
    """``UPDATE operations SET <names> … WHERE operation_id = :b_id``, built once per set."""
    statement = _OPERATION_UPDATES.get(names)
    if statement is None:
        values: dict[str, Any] = {"updated_at": bindparam("n_updated_at")}
        for name in names:
            column = operations.c[name]
            values[name] = bindparam(f"n_{name}", type_=column.type)
        statement = _OPERATION_UPDATES[names] = (
            update(operations)
            .where(operations.c.operation_id == bindparam("b_id"))
            .values(**values)
        )
    return statement


_INSERT_TIMER = insert(timers)
_INSERT_KEY = insert(evidence_keys)
_INSERT_SIGNAL = insert(signals)
_INSERT_DUPLICATE = insert(duplicates)
_FIRE_TIMER = (
    update(timers)
    .where(timers.c.id == bindparam("b_id"), timers.c.fired_at.is_(None))
    .values(fired_at=bindparam("n_at"), outcome="fired")
)
_CANCEL_TIMERS = (
    update(timers)
    .where(
        timers.c.run_id == bindparam("b_run_id"),
        timers.c.state == bindparam("b_state"),
        timers.c.fired_at.is_(None),
    )
    .values(fired_at=bindparam("n_at"), outcome="cancelled")
)
_CONSUME_APPROVAL = (
    update(approvals)
    .where(approvals.c.id == bindparam("b_id"), approvals.c.consumed_at.is_(None))
    .values(consumed_at=bindparam("n_at"))
)


@contextmanager
def recording() -> Iterator[None]:
    """A row a change records twice (an operation ID, a signal ID) raises
    :class:`~ratchet_runner.errors.DuplicateOperation`; the whole change is rolled back."""
    try:
        yield
    except IntegrityError as exc:
        if RECEIPT_ONCE in why(exc):  # a bug of the caller's: nothing was written
            raise StoreError(f"refused: {why(exc)}; nothing was written") from None
        raise DuplicateOperation(f"already recorded: {why(exc)}") from None


class Writer:
    """Every write of a store, each in one transaction."""

    def __init__(self, engine: Engine, dialect: Dialect, clock: Clock) -> None:
        """Write through ``engine`` (made by ``dialect``); ``clock`` is what :meth:`db_now`
        reads when the database's clock is this host's."""
        self.clock = clock
        self._engine = engine
        #: The hot path's statements, compiled for the driver (where a writer runs them there).
        self._compiled = Statements(engine.dialect)
        self._transaction = engine.execution_options(ratchet_write=True)
        self._reader = dialect.autocommit(engine)
        #: Where a write that is one statement runs: a write transaction here.
        self._single: Engine = self._transaction
        self._db_now = dialect.now()
        #: A run no live lease holds: no lease, or one the database's clock says has expired.
        self._free = free(self._db_now)
        # A commit under a lease must hold it (fencing); any other commit needs the run free,
        # but for one that takes the lease, which may also renew its own.
        self._cas_leased = _cas_run(runs.c.lease_token == bindparam("b_token"), release=True)
        self._cas_free = _cas_run(self._free)
        self._cas_take = _cas_taking(self._free, self._db_now)
        #: The store's sequence after the last commit of an attempt, where this writer keeps one
        #: (SQLite's; see :mod:`~ratchet_runner.store.restores`); the store clears it.
        self.sequence: int | None = None
        #: The store's incarnation as its store read it (None: not known, not checked).
        self.incarnation: int | None = None

    def prune(self, tombstones: Sequence[tuple[RunRecord, RunContext]], now: float) -> list[str]:
        """Compact finished runs to their tombstones, in one transaction (see
        :mod:`~ratchet_runner.store.prune`)."""
        with self._write() as conn:
            return prune(conn, tombstones, now)

    def recount(self) -> list[dict[str, Any]]:
        """Make the ended runs' tallies again from the runs the store holds, in one transaction
        (:func:`~ratchet_runner.store.tallies.recount`); what that changed."""
        with self._write() as conn:
            before = tallies.read(conn)
            tallies.recount(conn)
            return tallies.differences(before, tallies.read(conn))

    def forget(self, tombstones: Sequence[RunRecord]) -> list[str]:
        """Remove pruned runs whole, in one transaction (see :mod:`~ratchet_runner.store.prune`)."""
        with self._write() as conn:
            return forget(conn, tombstones)

    @contextmanager
    def schema_transaction(self, dialect: Dialect) -> Iterator[Connection]:
        """A write transaction holding the schema's lock: one process at a time reads or moves
        the store's schema revision (see :mod:`~ratchet_runner.store.schema`)."""
        with failures(), self._transaction.begin() as conn:
            dialect.lock_schema(conn)
            yield conn

    def db_now(self) -> float:
        """Now by the database's clock, in epoch seconds: this host's, read through the
        store's clock (PostgreSQL's writer asks the server)."""
        return self.clock.now()

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        """A write transaction."""
        with failures(), self._transaction.begin() as conn:
            yield conn

    @contextmanager
    def _write_hot(self) -> Iterator[Executes]:
        """A write transaction for a run's creation or a change to it, the hot path: here as
        :meth:`_write`; SQLite's writer runs it on the driver (:mod:`.compiled`)."""
        with self._write() as conn:
            yield conn

    @contextmanager
    def reading(self) -> Iterator[Executes]:
        """A read on the hot path (a run by its ID, the version new runs start on), in
        autocommit: here through SQLAlchemy; SQLite's writer runs it on the driver."""
        with failures(), self._reader.connect() as conn:
            yield conn

    @contextmanager
    def _write_one(self) -> Iterator[Connection]:
        """For a write that is a single statement (see ``_single``)."""
        with failures(), self._single.begin() as conn:
            yield conn

    # -- a run and its changes ----------------------------------------------------------------

    # -- wake-ups (see ratchet_runner.store.bell) ----------------------------------------------

    def channel(self) -> str | None:
        """The notification channel other processes' workers listen on, if the database has
        one (PostgreSQL's ``LISTEN``/``NOTIFY``)."""
        return None

    def _notify_in(self, conn: Executes, payload: str = "") -> None:
        """Within a write transaction: tell the other processes' workers when it commits."""

    def notify(self, payload: str = "") -> None:
        """Tell the other processes' workers now, in a transaction of its own."""
        if self.channel() is None:
            return
        with self._write() as conn:
            self._notify_in(conn, payload)

    # -- a run and its changes ----------------------------------------------------------------

    def create_run(self, new: NewRun, history: list[Event], *, wake: bool = False) -> None:
        """Insert the run ``new`` with ``history`` and its timers; an
        :class:`~sqlalchemy.exc.IntegrityError` when its business key (or ID) is taken.
        ``wake``: the other processes' workers are told when it commits."""
        with self._write_hot() as conn:
            conn.execute(_INSERT_RUN, new.record().__dict__)
            insert_history(conn, new.id, 1, new.at, history)
            for timer in new.timers:
                conn.execute(_INSERT_TIMER, {"run_id": new.id, "created_at": new.at, **timer})
            keys = new.key_rows()
            if keys:
                conn.execute(_INSERT_KEY, [{"run_id": new.id, **k} for k in keys])
            if new.status in ENDED:  # made ended (an import, a test): counted as it ends
                tallies.shift(conn, new.record(), new.status, 1)
            if wake:
                self._notify_in(conn)

    def commit(self, change: Change, after: RunRecord, *, wake: bool = False) -> None:
        """Apply ``change``, which moves the run from ``change.base`` to ``after``, in one
        transaction (``wake``: the other processes' workers are told when it commits), with the
        ended runs' tallies when it ends the run or takes it back (:mod:`.tallies`)."""
        with recording(), self._write_hot() as conn:
            self._commit_in(conn, change, after, wake)

    def _commit_in(self, conn: Executes, change: Change, after: RunRecord, wake: bool) -> None:
        """Within a write transaction: :meth:`commit`'s writes, a statement each."""
        taking = change.take_lease is not None
        fenced = change.lease_token is not None
        owner, seconds = change.take_lease or (None, None)
        result = conn.execute(
            self._cas_take if taking else self._cas_leased if fenced else self._cas_free,
            {
                "b_owner": owner,
                "b_seconds": seconds,
                "b_token": change.lease_token,
                "b_id": change.run_id,
                "b_version": change.expected_version,
                "n_version": after.version,
                "n_state": after.state,
                "n_status": after.status,
                "n_context": stored(after.context),
                "n_updated_at": change.at,
                "n_wake_at": after.wake_at,
                "n_spec_digest": after.spec_digest,
                "n_listed": len(compact.listed_in(after.context)),
            },
        )
        if result.rowcount != 1:
            self._refused(conn, change, fenced and not taking, after)
        before = change.base
        out, into = tallies.moves(change, before, after) if before else (False, False)
        if out and before is not None:
            tallies.shift(conn, before, before.status, -1)
        self._apply(conn, change, after.version)
        if into:
            tallies.shift(conn, after, after.status, 1)
        if wake:
            self._notify_in(conn)

    def _refused(
        self, conn: Executes, change: Change, fenced: bool, after: RunRecord | None = None
    ) -> None:
        """Raise why the compare-and-set of ``change`` (to ``after``) matched no row (an
        attempt's: the store may have been put back from a copy since this process read it)."""
        if attempt_in(change.events):
            check_incarnation(conn, self.incarnation)
        found = conn.execute(_RUN_BY_ID, {"b_id": change.run_id}).first()
        if found is None:
            raise RunNotFound(f"no run {change.run_id!r}")
        if found.version != change.expected_version:
            raise VersionConflict(
                f"run {change.run_id} has moved on (version {found.version}, "
                f"expected {change.expected_version})"
            )
        listed = len(compact.listed_in(found.context))
        kept = len(compact.listed_in(after.context)) if after is not None else listed
        if kept < listed:
            raise VersionConflict(
                f"run {change.run_id} has moved on: the change lists {kept} of the {listed} "
                "operations the run lists, so it was made from an older read of the run; "
                "nothing was written"
            )
        raise LeaseLost(
            f"run {change.run_id} is leased by {found.lease_owner}"
            if not fenced
            else f"the lease on run {change.run_id} was lost to {found.lease_owner}"
        )

    def _apply(self, conn: Executes, change: Change, version: int) -> None:
        """The writes that ride on a successful compare-and-set; an attempt's first checks that
        the store is still the incarnation this process read (a worker idle while a backup was
        put back never calls without the restore's lookup: :mod:`.restores`)."""
        if attempt_in(change.events):
            check_incarnation(conn, self.incarnation)
        self._apply_change(conn, change, version)

    def _apply_change(self, conn: Executes, change: Change, version: int) -> None:
        """The change's own writes."""
        run_id, at = change.run_id, change.at
        insert_history(conn, run_id, version, at, change.events, change)
        for op in change.new_operations:
            row = {"run_id": run_id, "created_at": at, "updated_at": at, **_NO_OUTCOME, **op}
            conn.execute(_INSERT_OPERATION, row)
        for operation_id, fields in change.operation_updates:
            conn.execute(
                _operation_update(tuple(sorted(fields))),
                {"b_id": operation_id, "n_updated_at": at}
                | {f"n_{name}": value for name, value in fields.items()},
            )
        for record in change.new_approvals:
            conn.execute(_INSERT_APPROVAL, {"run_id": run_id, "consumed_at": None, **record})
        for approval_id in change.consume_approvals:
            consumed = conn.execute(_CONSUME_APPROVAL, {"b_id": approval_id, "n_at": at})
            if consumed.rowcount != 1:
                raise VersionConflict(f"approval {approval_id} was already consumed")
        self._apply_timers(conn, change)
        for signal in change.new_signals:
            conn.execute(_INSERT_SIGNAL, {"run_id": run_id, **signal})
        for found in change.new_duplicates:
            conn.execute(_INSERT_DUPLICATE, {"run_id": run_id, "detected_at": at, **found})

    @staticmethod
    def _apply_timers(conn: Executes, change: Change) -> None:
        """Fire, cancel and arm the timers ``change`` fires, cancels and arms, in that order."""
        if change.fire_timer is not None:
            fired = conn.execute(_FIRE_TIMER, {"b_id": change.fire_timer, "n_at": change.at})
            if fired.rowcount != 1:
                raise VersionConflict(f"timer {change.fire_timer} has already fired")
        if change.cancel_timers_of_state is not None:
            conn.execute(
                _CANCEL_TIMERS,
                {
                    "b_run_id": change.run_id,
                    "b_state": change.cancel_timers_of_state,
                    "n_at": change.at,
                },
            )
        for timer in change.new_timers:
            conn.execute(_INSERT_TIMER, {"run_id": change.run_id, "created_at": change.at, **timer})

    def discard_timer(self, timer_id: int, at: float) -> None:
        """Mark a timer whose run has left its state as stale (it will never fire)."""
        with self._write_one() as conn:
            conn.execute(
                update(timers)
                .where(timers.c.id == timer_id, timers.c.fired_at.is_(None))
                .values(fired_at=at, outcome="stale")
            )

    # -- leases -------------------------------------------------------------------------------

    def claim(
        self, owner: str, lease_seconds: float, now: float, limit: int = 1, skip: Sequence[str] = ()
    ) -> list[RunRecord]:
        """Lease up to ``limit`` runnable runs to ``owner``, least recently moved first, none of
        ``skip``, in one transaction (on SQLite, its write lock serialises claims)."""
        query = (
            select(runs)
            .where(runnable(now, self._db_now))
            .order_by(runs.c.updated_at, runs.c.id)
            .limit(limit)
        )
        if skip:
            query = query.where(runs.c.id.not_in(skip))
        claimed: list[RunRecord] = []
        with self._write() as conn:
            for row in conn.execute(query).fetchall():
                taken = self._lease_to(conn, RunRecord(**row._mapping), owner, lease_seconds, now)
                if taken is not None:
                    claimed.append(taken)
        return claimed

    def claim_run(self, run_id: str, owner: str, lease_seconds: float, now: float) -> RunRecord:
        """Lease the run ``run_id`` to ``owner`` if no live lease holds it (else
        :class:`~ratchet_runner.errors.RunBusy`, naming the holder)."""
        left = (runs.c.lease_expires_at - self._db_now).label("left")
        with self._write() as conn:
            row = conn.execute(select(runs, left).where(runs.c.id == run_id)).first()
            if row is None:
                raise RunNotFound(f"no run {run_id!r}")
            mapping = dict(row._mapping)
            seconds_left = mapping.pop("left")
            record = RunRecord(**mapping)
            if record.lease_token is not None and float(seconds_left) >= 0:
                raise RunBusy(
                    f"run {run_id} is being carried on by {record.lease_owner} (its lease "
                    f"runs {float(seconds_left):.1f} s more)",
                    holder=str(record.lease_owner),
                    seconds_left=float(seconds_left),
                )
            taken = self._lease_to(conn, record, owner, lease_seconds, now)
        if taken is None:
            raise VersionConflict(f"run {run_id} has moved on while it was being leased")
        return taken

    def _lease_to(
        self, conn: Connection, record: RunRecord, owner: str, lease_seconds: float, now: float
    ) -> RunRecord | None:
        """In a write transaction: lease ``record`` to ``owner`` if it is still at its version
        and unleased (or its lease expired), bumping the version, with a ``leased`` (or, over an
        expired lease, ``rescued``) event; None if another process got there first."""
        token = uuid.uuid4().hex
        expires = float(conn.execute(select(self._db_now + lease_seconds)).scalar_one())
        version = record.version + 1
        done = conn.execute(
            update(runs)
            .where(runs.c.id == record.id, runs.c.version == record.version, self._free)
            .values(version=version, lease_owner=owner, lease_token=token, lease_expires_at=expires)
        )
        if done.rowcount != 1:
            return None
        kind = EventKind.RESCUED if record.lease_token is not None else EventKind.LEASED
        data = {"owner": owner, "previous": record.lease_owner}
        insert_history(conn, record.id, version, now, [(kind, data)])
        return replace(
            record, version=version, lease_owner=owner, lease_token=token, lease_expires_at=expires
        )

    def renew(self, run_id: str, token: str, lease_seconds: float) -> bool:
        """Extend a lease still held; False when it was lost."""
        with self._write_one() as conn:
            done = conn.execute(
                update(runs)
                .where(runs.c.id == run_id, runs.c.lease_token == token)
                .values(lease_expires_at=self._db_now + lease_seconds)
            )
        return done.rowcount == 1

    def release(self, run_id: str, token: str) -> bool:
        """Give a lease back (no version bump: releasing changes nothing about the run); whether
        that left a running run free for any worker."""
        with self._write_one() as conn:
            status = conn.execute(
                update(runs)
                .where(runs.c.id == run_id, runs.c.lease_token == token)
                .values(lease_owner=None, lease_token=None, lease_expires_at=None)
                .returning(runs.c.status)
            ).scalar()
        return status == RunStatus.RUNNING

    # -- specs and the store itself -----------------------------------------------------------

    def save_spec(
        self, digest: str, name: str, spec_version: int, policy_version: str, text: str, at: float
    ) -> None:
        """Record the exact spec text under its digest (once)."""
        saved = select(spec_versions.c.digest).where(spec_versions.c.digest == digest)
        try:
            with self._write() as conn:
                if conn.execute(saved).first() is None:
                    conn.execute(
                        insert(spec_versions).values(
                            digest=digest,
                            name=name,
                            spec_version=spec_version,
                            policy_version=str(policy_version),
                            text=text,
                            created_at=at,
                        )
                    )
        except IntegrityError as exc:
            # Another worker saved the same digest between our look and our insert (PostgreSQL;
            # SQLite's BEGIN IMMEDIATE serialises the two): that version is recorded, as asked.
            with failures(), self._reader.connect() as conn:
                found = conn.execute(saved).first()
            if found is None:
                raise StoreError(f"cannot save spec version {digest[:12]}: {why(exc)}") from None

    def publish(self, name: str, version: int | None, by: str, at: float) -> tuple[str, int] | None:
        """Set the version new runs of workflow ``name`` start on (``None``: none set, the
        version given to each start), in one transaction: the newest stored text of that version
        is looked up and recorded with who set it. Returns the digest and version set, or
        ``None`` when ``version`` is ``None``; a version not stored is refused, nothing written."""
        with self._write() as conn:
            conn.execute(published.delete().where(published.c.name == name))
            if version is None:
                return None
            row = conn.execute(
                select(spec_versions.c.digest)
                .where(spec_versions.c.name == name, spec_versions.c.spec_version == version)
                .order_by(spec_versions.c.created_at.desc(), spec_versions.c.digest)
                .limit(1)
            ).first()
            if row is None:
                stored = sorted(
                    {
                        int(v)
                        for (v,) in conn.execute(
                            select(spec_versions.c.spec_version).where(spec_versions.c.name == name)
                        )
                    }
                )
                listed = ", ".join(map(str, stored)) or "none"
                raise UsageError(
                    f"workflow {name!r} has no stored version {version} (stored: {listed}); "
                    "a version is stored when a run starts on it: nothing was changed"
                )
            digest = str(row[0])
            conn.execute(
                insert(published).values(
                    name=name, digest=digest, spec_version=version, set_by=by, set_at=at
                )
            )
        return digest, version

    def mark_practice(self) -> None:
        """Record in ``meta`` that the store is a practice store."""
        with self._write() as conn:
            if conn.execute(select(meta.c.key).where(meta.c.key == "practice")).first() is None:
                conn.execute(insert(meta).values(key="practice", value="true"))
            else:
                conn.execute(update(meta).where(meta.c.key == "practice").values(value="true"))

    def reset(self) -> None:
        """Delete every row of every table but ``meta``."""
        with self._write() as conn:
            for table in RUN_TABLES:
                conn.execute(table.delete())
