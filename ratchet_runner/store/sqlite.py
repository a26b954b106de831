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

The hot path (a run's creation and each commit to it, and the reads of a run by its ID and of
the version new runs start on) runs the writer's own statements on the driver's connection
(:mod:`.compiled`): through SQLAlchemy's connection, each statement cost several times what
SQLite takes to run it. The connection is the pool's, the lock taken the same way, the same
statements sent; while anything listens to the engine's statements or transactions (``ratchet
check``'s crash windows, instrumentation, a test's count) these go through SQLAlchemy, so that
the listener sees each one.
"""

from __future__ import annotations

import random
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, Engine, event
from sqlalchemy.exc import DBAPIError

from ..clock import Clock
from .compiled import Executes, execute, observed
from .dialects import SQLITE_BUSY_SECONDS, Dialect, failures
from .records import Change
from .restores import attempt_in, count_attempt
from .writer import Writer


class SQLiteWriter(Writer):
    """Writes in ``BEGIN IMMEDIATE`` transactions."""

    def __init__(self, engine: Engine, dialect: Dialect, clock: Clock) -> None:
        event.listen(engine, "begin", _begin_immediately_when_writing)
        super().__init__(engine, dialect, clock)

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
                _lock(raw)
                try:
                    yield self._compiled.driven(raw)
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
