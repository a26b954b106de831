"""SQLite's writer: the transactional writer, whose transactions take the write lock up front.

SQLite lets one writer at a time in. A transaction that begins as a read and later writes must
upgrade its lock, and fails with "database is locked" when another writer got there first; so
every write transaction here begins with ``BEGIN IMMEDIATE``, which takes the write lock at once
and otherwise waits (the busy timeout, :class:`~ratchet_runner.store.dialects.SQLite`): writers
queue instead of failing, and claims are serialised. Reads are single statements in autocommit.
The connections' own transaction handling is switched off by the dialect, so this ``BEGIN`` is
the only one. SQLite lives on this host, so its clock is this host's (the store's
:class:`~ratchet_runner.clock.Clock`): :meth:`Writer.db_now` as it is.
"""

from __future__ import annotations

from sqlalchemy import Connection, Engine, event

from ..clock import Clock
from .dialects import Dialect
from .records import Change
from .restores import attempt_in, count_attempt
from .writer import Writer


class SQLiteWriter(Writer):
    """Writes in ``BEGIN IMMEDIATE`` transactions."""

    def __init__(self, engine: Engine, dialect: Dialect, clock: Clock) -> None:
        event.listen(engine, "begin", _begin_immediately_when_writing)
        super().__init__(engine, dialect, clock)

    def _apply(self, conn: Connection, change: Change, version: int) -> None:
        """The change's writes; and, when it commits an attempt (a call may follow), one more
        on the store's sequence, whose new value the store then writes to the high-water mark
        beside its file (:mod:`~ratchet_runner.store.restores`)."""
        self._apply_change(conn, change, version)
        if attempt_in(change.events):  # checks the incarnation in the same statement
            self.sequence = count_attempt(conn, self.incarnation)


def _begin_immediately_when_writing(connection: Connection) -> None:
    """Writes (the execution option ``ratchet_write``) take the write lock as they begin."""
    if connection.get_execution_options().get("ratchet_write", False):
        connection.exec_driver_sql("BEGIN IMMEDIATE")
