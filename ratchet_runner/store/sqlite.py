"""SQLite's writer: the transactional writer, whose transactions take the write lock up front.

SQLite lets one writer at a time in. A transaction that begins as a read and later writes must
upgrade its lock, and fails with "database is locked" when another writer got there first; so
every write transaction here begins with ``BEGIN IMMEDIATE``, which takes the write lock at once
and otherwise waits: writers queue instead of failing, and claims are serialised.

How it waits matters. SQLite's own busy handler sleeps longer and longer between tries, up to
100 ms each, and its lock is not fair: a writer that has waited a third of a second looks only
ten times a second, while the others, polling sooner, take the lock again and again in between
(two workers' longest commit reached 0.93 s with nothing else running, 1.13 s beside a prune:
``bench/bench_prune.py``). So a write's ``BEGIN IMMEDIATE`` tries without SQLite's handler, and
between tries sleeps a millisecond or two, never more than :data:`MOST_PAUSE` (a failed try
costs microseconds), for as long as the busy timeout
(:data:`~ratchet_runner.store.dialects.SQLITE_BUSY_SECONDS`); every other statement keeps that
timeout as it is. Reads are single statements in autocommit.
The connections' own transaction handling is switched off by the dialect, so this ``BEGIN`` is
the only one. SQLite lives on this host, so its clock is this host's (the store's
:class:`~ratchet_runner.clock.Clock`): :meth:`Writer.db_now` as it is.

**A change to a run in one statement.** SQLite has no writable ``WITH`` (PostgreSQL's writer
applies a change in one statement with one: :mod:`.postgres`). Here each connection holds a
temporary view, ``ratchet_commit``, whose ``INSTEAD OF INSERT`` trigger does a change's writes:
the compare-and-set (refused with :data:`REFUSED`, nothing written, when the run moved on or
its lease was lost; the lease taken where the change takes it), the history, the new operation,
the operation's update, and the tally of a run that ends (:mod:`.tallies`), in that order, each
row as the writer's own statements write it (every value bound as they bind it, through its
column's type). A change applies with one ``INSERT INTO ratchet_commit`` where it took five
statements, the trigger's compiled once with it; an attempt's commit adds one, the store's
sequence (:func:`~.restores.count_attempt`). The view has a column for each value: the
history row (:mod:`.compact`), one new operation and one update. A change with more, or
with anything else (approvals, timers, signals, duplicates, taking an ended run back), goes
through the writer's statements one by one, as does a change on a connection without the view
(one that refuses writes). The view and its trigger are the connection's own (``TEMP``),
made before its first write transaction: nothing is added to the store's file or its schema,
and a Ratchet of any version reads and writes the store as before. A schema change drops them
from its connection first (SQLite checks every trigger when it renames a table, and this one
names tables an older revision lacks).

The hot path (a run's creation and each commit to it, and the reads of a run by its ID and of
the version new runs start on) runs the writer's own statements on the driver's connection
(:mod:`.compiled`): through SQLAlchemy's connection, each statement cost several times what
SQLite takes to run it. The connection is the pool's, the lock taken the same way, the same
statements sent; while anything listens to the engine's statements or transactions (``ratchet
check``'s crash windows, instrumentation, a test's count) these go through SQLAlchemy, so that
the listener sees each one.

Over 400 lines: one concern, how a change reaches SQLite (the write lock, the driver's
connection, and the trigger that writes a change in one statement, with the SQL of its view).
"""

from __future__ import annotations

import random
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, event
from sqlalchemy.exc import DBAPIError, IntegrityError

from ..clock import Clock
from ..words import RunStatus
from . import compact, tallies
from .compiled import Executes, execute, observed
from .context import stored
from .dialects import SQLITE_BUSY_SECONDS, Dialect, failures
from .records import Change, RunRecord
from .restores import attempt_in, count_attempt
from .tables import JSON_TYPE, operations
from .writer import Writer, recording


class SQLiteWriter(Writer):
    """Writes in ``BEGIN IMMEDIATE`` transactions."""

    def __init__(self, engine: Engine, dialect: Dialect, clock: Clock) -> None:
        event.listen(engine, "begin", _begin_immediately_when_writing)
        super().__init__(engine, dialect, clock)
        #: How each operation's column binds its value (None: as it is); then the run's context.
        self._write_value: dict[str, Callable[[Any], Any] | None] = {
            column.name: column.type._cached_bind_processor(engine.dialect)
            for column in operations.columns
        }
        self._write_context: Callable[[Any], Any] | None
        self._write_context = JSON_TYPE._cached_bind_processor(engine.dialect)

    @contextmanager
    def schema_transaction(self, dialect: Dialect) -> Iterator[Connection]:
        """The writer's schema transaction, on a connection without the view (see
        :func:`drop_commit_view`)."""
        with super().schema_transaction(dialect) as conn:
            drop_commit_view(conn)
            yield conn

    def commit(self, change: Change, after: RunRecord, *, wake: bool = False) -> None:
        """Apply ``change`` in one statement where the trigger writes it (the module says
        which), else as any writer does, a statement each; in one transaction either way."""
        params = self.one_statement(change, after)
        with recording(), self._write_hot() as conn:
            if params is None or not conn.info.get(_VIEW_MADE):  # no view: refuses writes
                self._commit_in(conn, change, after, wake)
                return
            try:
                conn.exec_driver_sql(_COMMIT, params)
            except IntegrityError as exc:
                if REFUSED not in str(exc.orig):
                    raise
                fenced = change.lease_token is not None and change.take_lease is None
                self._refused(conn, change, fenced, after)
            if attempt_in(change.events):  # checks the incarnation in the same statement
                self.sequence = count_attempt(conn, self.incarnation)
            if wake:
                self._notify_in(conn)

    def one_statement(self, change: Change, after: RunRecord) -> tuple[Any, ...] | None:
        """The parameters of ``INSERT INTO ratchet_commit`` that apply ``change``, or None
        when the trigger does not write it (see the module)."""
        if (
            change.new_approvals
            or change.consume_approvals
            or change.fire_timer is not None
            or change.cancel_timers_of_state is not None
            or change.new_timers
            or change.new_signals
            or change.new_duplicates
        ):
            return None
        before = change.base
        out, into = tallies.moves(change, before, after) if before else (False, False)
        if out:
            return None
        if (
            len(change.new_operations) > 1
            or len(change.operation_updates) > 1
            or change.writes_an_operation_twice()
        ):
            return None
        write = self._write_value
        owner, seconds = change.take_lease or (None, None)
        params: list[Any] = [
            change.run_id,
            change.expected_version,
            change.lease_token,
            owner,
            seconds,
            after.version,
            after.state,
            str(after.status),
            self._write_context(stored(after.context))
            if self._write_context
            else stored(after.context),
            change.at,
            after.wake_at,
            after.spec_digest,
            after.workflow if into else None,
            tallies.slot(after.id),
        ]
        listed = compact.listed_in(after.context)
        if change.events:
            params.append(
                compact.encode(change.events, listed, compact.recorded_in(change.operation_updates))
            )
        else:
            params.append(None)
        params.append(len(listed))
        if change.new_operations:
            row = {**_NO_OUTCOME, **change.new_operations[0]}
            if row.keys() != _NEW_COLUMN_SET:
                return None  # a column left to its default, or one not known: the insert's own
            params += (_written(row[name], write[name]) for name in _NEW_COLUMNS)
        else:
            params += _NO_OPERATION
        if change.operation_updates:
            operation_id, fields = change.operation_updates[0]
            sets = 0
            for name in fields:
                bit = _UPDATE_BITS.get(name)
                if bit is None:
                    return None
                sets |= bit
            params += (operation_id, sets)
            params += (_written(fields.get(name), write[name]) for name in _UPDATABLE)
        else:
            params += _NO_UPDATE
        return tuple(params)

    @contextmanager
    def _write_hot(self) -> Iterator[Executes]:
        """A run's creation or a change to it, on the driver's connection (:mod:`.compiled`):
        the lock taken as :func:`_begin_immediately_when_writing` takes it, the same statements
        run, committed, or rolled back on any error. While anything listens to the engine's
        statements or transactions (instrumentation, ``ratchet check``'s crash windows, a
        test's count), through SQLAlchemy as any other write, so that it sees every one."""
        if observed(self._engine, own_begin=1):
            with self._write() as conn:
                yield conn
            return
        with failures():
            pooled = self._engine.raw_connection()
            try:
                raw = pooled.driver_connection
                assert raw is not None  # a pooled connection, checked out
                _make_commit_view(raw, pooled.info)
                _lock(raw)
                try:
                    yield self._compiled.driven(raw, pooled.info)
                    execute(raw, "COMMIT", (), sqlite3.Error)
                except BaseException:
                    if raw.in_transaction:
                        raw.execute("ROLLBACK")
                    raise
            finally:
                pooled.close()

    @contextmanager
    def reading(self) -> Iterator[Executes]:
        """A read on the hot path on the driver's connection (its own transaction, as every
        statement in autocommit), unless something listens to the engine (see
        :meth:`_write_hot`)."""
        if observed(self._engine, own_begin=1):
            with super().reading() as conn:
                yield conn
            return
        with failures():
            pooled = self._engine.raw_connection()
            try:
                yield self._compiled.driven(pooled.driver_connection)
            finally:
                pooled.close()

    def _apply(self, conn: Executes, change: Change, version: int) -> None:
        """The change's writes; and, when it commits an attempt (a call may follow), one more
        on the store's sequence, whose new value the store then writes to the high-water mark
        beside its file (:mod:`~ratchet_runner.store.restores`)."""
        self._apply_change(conn, change, version)
        if attempt_in(change.events):  # checks the incarnation in the same statement
            self.sequence = count_attempt(conn, self.incarnation)


#: The message of the trigger's refusal: the compare-and-set matched no run.
REFUSED = "ratchet: the run moved on or its lease is held"

#: What a new operation has not got yet (as the writer's own insert: a compensation says what
#: it compensates).
_NO_OUTCOME = {"receipt": None, "last_error": None, "compensates": None}
#: A new operation's columns (each the view's ``o_`` column of that name).
_NEW_COLUMNS = tuple(
    c.name for c in operations.columns if c.name not in ("run_id", "created_at", "updated_at")
)
_NEW_COLUMN_SET = frozenset(_NEW_COLUMNS)
#: The columns an operation's update may set (its ``updated_at`` is the change's time), each
#: the view's ``u_`` column of that name, and its bit in ``u_sets``: which of them it sets.
_UPDATABLE = tuple(name for name in _NEW_COLUMNS if name != "operation_id")
_UPDATE_BITS = {name: 1 << i for i, name in enumerate(_UPDATABLE)}
#: The parameters of the new operation and the update a change has not got.
_NO_OPERATION = (None,) * len(_NEW_COLUMNS)
_NO_UPDATE = (None, 0) + (None,) * len(_UPDATABLE)


def _written(value: Any, write: Callable[[Any], Any] | None) -> Any:
    """``value`` as its column's type writes it."""
    return value if write is None else write(value)


#: The view's columns: the change's parameters, in the order :meth:`SQLiteWriter.one_statement`
#: gives them.
_COMMIT_COLUMNS = (
    "run_id",
    "expected",
    "token",
    "owner",
    "seconds",
    "version",
    "state",
    "status",
    "context",
    "at",
    "wake_at",
    "spec_digest",
    "tally_workflow",
    "tally_slot",
    "history",
    "listed",
    *(f"o_{name}" for name in _NEW_COLUMNS),
    "u_id",
    "u_sets",
    *(f"u_{name}" for name in _UPDATABLE),
)
_COMMIT = (
    f"INSERT INTO ratchet_commit ({', '.join(_COMMIT_COLUMNS)}) "
    f"VALUES ({', '.join('?' * len(_COMMIT_COLUMNS))})"
)


def _lease_column(column: str, taken: str) -> str:
    """The lease's ``column`` after a change, as the writer's compare-and-sets leave it: a
    commit that takes the lease (``NEW.owner``) sets it to ``taken`` while the run stays
    running; a leased commit that takes the run out of ``running`` gives the lease back with
    it; a commit under no lease found none or an expired one, and clears it."""
    running = f"NEW.status = '{RunStatus.RUNNING}'"
    return (
        f"{column} = CASE WHEN NEW.owner IS NOT NULL THEN CASE WHEN {running} THEN {taken} END "
        f"WHEN NEW.token IS NOT NULL AND {running} THEN {column} END"
    )


#: The lease's columns, and what a commit that takes the lease sets them to.
_TAKEN = (
    ("lease_owner", "NEW.owner"),
    ("lease_token", "NEW.token"),
    ("lease_expires_at", "ratchet_now() + NEW.seconds"),
)


def _update_column(name: str) -> str:
    """An updated operation's column ``name``: the update's value where it sets it."""
    return f"{name} = CASE WHEN NEW.u_sets & {_UPDATE_BITS[name]} THEN NEW.u_{name} ELSE {name} END"


_VIEW = "CREATE TEMP VIEW IF NOT EXISTS ratchet_commit AS SELECT " + ", ".join(
    f"NULL AS {column}" for column in _COMMIT_COLUMNS
)
_TRIGGER = f"""CREATE TEMP TRIGGER IF NOT EXISTS ratchet_commit_apply
INSTEAD OF INSERT ON ratchet_commit BEGIN
  UPDATE runs SET version = NEW.version, state = NEW.state, status = NEW.status,
    context = NEW.context, updated_at = NEW.at, wake_at = NEW.wake_at,
    spec_digest = NEW.spec_digest,
    {", ".join(_lease_column(column, taken) for column, taken in _TAKEN)}
  WHERE id = NEW.run_id AND version = NEW.expected AND CASE
    WHEN NEW.owner IS NOT NULL THEN lease_token = NEW.token OR lease_token IS NULL
      OR lease_expires_at < ratchet_now()
    WHEN NEW.token IS NOT NULL THEN lease_token = NEW.token
    ELSE lease_token IS NULL OR lease_expires_at < ratchet_now() END
    AND coalesce(json_array_length(context, '$.operations'), 0) <= NEW.listed;
  SELECT RAISE(ABORT, '{REFUSED}') WHERE changes() = 0;
  INSERT INTO history (run_id, version, "at", events)
    SELECT NEW.run_id, NEW.version, NEW.at, NEW.history WHERE NEW.history IS NOT NULL;
  INSERT INTO operations (run_id, {", ".join(_NEW_COLUMNS)}, created_at, updated_at)
    SELECT NEW.run_id, {", ".join(f"NEW.o_{name}" for name in _NEW_COLUMNS)}, NEW.at, NEW.at
    WHERE NEW.o_operation_id IS NOT NULL;
  UPDATE operations SET updated_at = NEW.at,
    {", ".join(_update_column(name) for name in _UPDATABLE)}
  WHERE NEW.u_id IS NOT NULL AND operation_id = NEW.u_id;
  {
    tallies.fold_sql(
        "NEW.tally_workflow",
        "NEW.status",
        "NEW.tally_slot",
        "1",
        "NEW.run_id",
        "NEW.tally_workflow IS NOT NULL",
    )
};
END"""


#: Where a connection's pool record says whether it has the view: True, or False when the
#: connection refused to make it (absent: not made yet).
_VIEW_MADE = "ratchet_commit"


def _make_commit_view(raw: sqlite3.Connection, info: dict[Any, Any]) -> None:
    """Give the connection ``raw`` (its pool record's ``info``) the view a change is applied
    through, before its write transaction begins, if it has none yet (see the module); a
    connection that refuses writes (``PRAGMA query_only``) gets none, and is not asked again."""
    if _VIEW_MADE in info:
        return
    try:
        raw.execute(_VIEW)
        raw.execute(_TRIGGER)
    except sqlite3.Error:
        info[_VIEW_MADE] = False
        return
    info[_VIEW_MADE] = True


def drop_commit_view(conn: Connection) -> None:
    """Take the view and its trigger off ``conn`` (for a schema change: SQLite checks every
    trigger when a table is renamed, and this one names tables an older revision lacks); the
    next write transaction on it makes them again."""
    conn.exec_driver_sql("DROP TRIGGER IF EXISTS temp.ratchet_commit_apply")
    conn.exec_driver_sql("DROP VIEW IF EXISTS temp.ratchet_commit")
    conn.info.pop(_VIEW_MADE, None)


#: The first and the longest sleep between two tries for the write lock, in seconds.
FIRST_PAUSE = 0.0005
MOST_PAUSE = 0.004
_NO_WAIT = "PRAGMA busy_timeout=0"
_WAIT = f"PRAGMA busy_timeout={int(SQLITE_BUSY_SECONDS * 1000)}"


def _begin_immediately_when_writing(connection: Connection) -> None:
    """Writes (the execution option ``ratchet_write``) take the write lock as they begin,
    waiting for it as the module says."""
    if not connection.get_execution_options().get("ratchet_write", False):
        return
    raw = connection.connection.driver_connection
    if raw is None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")
        return
    _make_commit_view(raw, connection.info)
    _lock(raw)


def _lock(raw: sqlite3.Connection) -> None:
    """Take the write lock on ``raw`` (:func:`_take_write_lock`; after the busy timeout, one
    last try, which says why it failed); the driver's error raised as SQLAlchemy raises it (a
    read-only or corrupt file is a :class:`~sqlalchemy.exc.OperationalError` or
    :class:`~sqlalchemy.exc.DatabaseError`, which the store reports as such)."""
    try:
        if _take_write_lock(raw, SQLITE_BUSY_SECONDS):
            return
        raw.execute(_NO_WAIT)
        try:
            raw.execute("BEGIN IMMEDIATE")
        finally:
            raw.execute(_WAIT)
    except sqlite3.Error as exc:
        raise DBAPIError.instance("BEGIN IMMEDIATE", (), exc, sqlite3.Error) from exc


def _take_write_lock(raw: sqlite3.Connection, patience: float) -> bool:
    """``BEGIN IMMEDIATE`` on ``raw``, tried every millisecond or so for ``patience`` seconds
    with SQLite's busy handler off; False when the lock was never free. The handler is on again
    after, whatever happens."""
    raw.execute(_NO_WAIT)
    try:
        pause, deadline = FIRST_PAUSE, 0.0
        while True:
            try:
                raw.execute("BEGIN IMMEDIATE")
                return True
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
            now = time.monotonic()
            if not deadline:
                deadline = now + patience
            elif now >= deadline:
                return False
            time.sleep(pause * random.uniform(0.5, 1.5))
            pause = min(pause * 2, MOST_PAUSE)
    finally:
        raw.execute(_WAIT)
