"""What differs between databases in connecting to them: the engine and its settings.

SQLite (the embedded default) runs in WAL mode with ``synchronous=FULL``, a busy timeout (kept
while turning WAL mode on, which SQLite itself does not wait for) and foreign keys on; each
connection gets ``ratchet_now()``, the SQL function leases expire by (this host's clock, read
through the store's :class:`~ratchet_runner.clock.Clock`). The driver's own transaction handling
is off: the SQLite writer (:mod:`ratchet_runner.store.sqlite`) begins its transactions itself.
PostgreSQL (``postgresql+psycopg://``) takes ``prepare_threshold`` from the URL, pings a pooled
connection that sat idle before using it again, serialises schema creation between processes,
and runs single statements in autocommit; its leases expire by the server's
``clock_timestamp()``. How each database is written to is its writer's
(:mod:`ratchet_runner.store.writer` and its subclasses). Last, how a database's failure reaches
the caller: as a :class:`~ratchet_runner.errors.StoreError` that says what the database said;
and how an engine's connections end: dropped after an outage (:func:`retire_pool`) and closed
with the store (:func:`close_engine`), each one closed, none left to the garbage collector.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from sqlalchemy import URL, Connection, Engine, create_engine, event, func, make_url
from sqlalchemy.exc import DatabaseError, DisconnectionError, IntegrityError
from sqlalchemy.pool import Pool

from ..clock import Clock
from ..errors import StoreError
from ..settings import ENV_DB
from .home import home_folder

#: A pooled PostgreSQL connection idle for longer than this is pinged before it is used again
#: (one that is in steady use is not: a ping per checkout would double a commit's round trips).
IDLE_PING_SECONDS = 10.0
#: How long a PostgreSQL connection may take to open, in seconds, unless the URL says
#: (``?connect_timeout=N``): a server that accepts the connection and never answers is a
#: store that does not answer, not a command that hangs.
CONNECT_TIMEOUT = 10


#: How long, in seconds, PostgreSQL lets a session sit idle inside the schema's creation (whose
#: lock every process opening the store waits for) before it ends that session.
SCHEMA_LOCK_IDLE = 5.0


#: How the store writes a JSON column: without the spaces after ``,`` and ``:`` (a finished run
#: keeps about 60 bytes fewer), by one encoder made once (``json.dumps`` with any argument
#: makes a new one at every call).
json_text = json.JSONEncoder(separators=(",", ":")).encode


class Dialect:
    """How to connect to a database SQLAlchemy knows and Ratchet has no settings for."""

    name = "generic"

    def engine(self, url: str) -> Engine:
        return create_engine(url, json_serializer=json_text)

    def autocommit(self, engine: Engine) -> Engine:
        """The engine single statements outside a write transaction run on (reads)."""
        return engine

    def lock_schema(self, conn: Connection) -> None:
        """Serialise schema creation between processes (SQLite's BEGIN IMMEDIATE already does)."""

    def limit_locks(self, conn: Connection, seconds: float) -> None:
        """Within a schema revision's transaction: give up on a lock not granted in ``seconds``
        (PostgreSQL's ``lock_timeout``; SQLite's writer holds the whole database already)."""

    def now(self) -> Any:
        """The database's own clock, in epoch seconds: leases expire by it, not by a worker's."""
        return func.extract("epoch", func.now())


#: How long an SQLite connection waits for another one's lock before it gives up.
SQLITE_BUSY_SECONDS = 60.0


def _wal_mode(cursor: Any) -> None:
    """Turn on WAL mode. On a new file, connections that turn it on at once (a pool's threads, a
    command and a worker) make each other fail at once with "database is locked": SQLite does
    not wait on its busy timeout for it. Each waits its turn instead, as long as that timeout."""
    deadline = time.monotonic() + SQLITE_BUSY_SECONDS
    pause = 0.001
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


class SQLite(Dialect):
    name = "sqlite"

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def engine(self, url: str) -> Engine:
        engine = create_engine(
            url, connect_args={"timeout": SQLITE_BUSY_SECONDS}, json_serializer=json_text
        )

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.isolation_level = None  # the writer emits BEGIN itself
            cursor = dbapi_connection.cursor()
            cursor.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_SECONDS * 1000)}")
            _wal_mode(cursor)
            cursor.execute("PRAGMA synchronous=FULL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()
            # Leases expire by ratchet_now(): this host's clock, read through the store's clock
            # (the system clock, or one a simulation drives: tests/property/simulation.py).
            dbapi_connection.create_function("ratchet_now", 0, self.clock.now)

        return engine

    def now(self) -> Any:
        return func.ratchet_now()


class PostgreSQL(Dialect):
    name = "postgresql"

    def engine(self, url: str) -> Engine:
        # psycopg prepares a statement on the server once it has run it 5 times (a commit runs
        # a third faster). Behind a transaction-pooling proxy that cannot keep prepared
        # statements (PgBouncer before 1.21), add ``?prepare_threshold=none`` to the URL.
        parsed = make_url(url)
        connect_args: dict[str, Any] = {}
        if "prepare_threshold" in parsed.query:
            given = str(parsed.query["prepare_threshold"]).strip().lower()
            try:
                connect_args["prepare_threshold"] = (
                    None if given in ("none", "off", "never", "") else int(given)
                )
            except ValueError:
                raise StoreError(
                    f"prepare_threshold must be a number or 'none', not {given!r}"
                ) from None
            parsed = parsed.difference_update_query(["prepare_threshold"])
        if "connect_timeout" not in parsed.query:  # a server that never answers: not forever
            connect_args["connect_timeout"] = CONNECT_TIMEOUT
        engine = create_engine(parsed, connect_args=connect_args, json_serializer=json_text)

        @event.listens_for(engine, "checkin")
        def _on_checkin(_dbapi_connection: Any, record: Any) -> None:
            record.info["idle_since"] = time.monotonic()

        @event.listens_for(engine, "checkout")
        def _on_checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
            idle_since = record.info.get("idle_since")
            if idle_since is None or time.monotonic() - idle_since < IDLE_PING_SECONDS:
                return
            try:  # a server restart or a dropped connection: the pool retries with a new one
                dbapi_connection.execute("SELECT 1")
                dbapi_connection.rollback()
            except Exception as exc:
                raise DisconnectionError(str(exc)) from exc

        return engine

    def autocommit(self, engine: Engine) -> Engine:
        # No BEGIN, no ROLLBACK: a read (or a one-statement write) is one round trip.
        return engine.execution_options(isolation_level="AUTOCOMMIT")

    def limit_locks(self, conn: Connection, seconds: float) -> None:
        conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{int(seconds * 1000)}ms'")

    def lock_schema(self, conn: Connection) -> None:
        # Workers opening a fresh schema at once would race to CREATE TABLE (duplicate key in
        # pg_type); this lock, one per schema and held until the transaction ends, makes them
        # take turns. A holder that stops answering inside it (a process frozen, a network cut)
        # has its session ended by the server after SCHEMA_LOCK_IDLE seconds, so the others
        # are not kept waiting on it.
        conn.exec_driver_sql(
            f"SET LOCAL idle_in_transaction_session_timeout = '{int(SCHEMA_LOCK_IDLE * 1000)}ms'"
        )
        conn.exec_driver_sql(
            "SELECT pg_advisory_xact_lock(1751607122, hashtext(coalesce(current_schema(), '')))"
        )

    def now(self) -> Any:
        return func.extract("epoch", func.clock_timestamp())


#: How many pools replaced by :func:`retire_pool` an engine's store keeps, to close the connections
#: that are given back to them.
RETIRED_POOLS = 8


def retire_pool(engine: Engine, retired: list[Pool]) -> None:
    """Give ``engine`` a new connection pool (after an outage: no statement then finds a dead
    connection). The old pool's idle connections are closed now; one in use goes back to the old
    pool when it is given back, and is closed at the next retirement or by :func:`close_engine`,
    never left to the garbage collector, which would drop it without ending its session."""
    for pool in retired:
        pool.dispose()
    retired.append(engine.pool)
    del retired[:-RETIRED_POOLS]
    engine.dispose()


def close_engine(engine: Engine, retired: list[Pool]) -> None:
    """Close every connection of ``engine`` and of the pools it ``retired``; from then on the
    engine opens none (a thread still using it gets a :class:`~ratchet_runner.errors.StoreError`
    instead of a connection nobody would close)."""
    if not event.contains(engine, "do_connect", _closed):
        event.listen(engine, "do_connect", _closed)
    engine.dispose()
    for pool in retired:
        pool.dispose()


def _closed(*_args: Any) -> None:
    raise StoreError("the store is closed")


def dialect_for(url: str, clock: Clock) -> Dialect:
    """The dialect of the database at ``url`` (``clock``: what SQLite's leases expire by)."""
    if url.startswith("sqlite"):
        return SQLite(clock)
    if url.startswith("postgresql"):
        return PostgreSQL()
    return Dialect()


def sqlite_url(path: Path, *, read_only: bool = False) -> str:
    """The URL of the SQLite file at ``path``, built from its parts: a path may hold ``?``,
    ``%`` or ``#`` (pasted into a URL, they would start its query or escape, and the store
    would land in another file). ``read_only``: opened for reading only; when the file's
    write-ahead log cannot be read (a read-only folder in which it is not there), as immutable,
    which is how SQLite reads a WAL database on a read-only file system."""
    if not read_only:
        return URL.create("sqlite", database=str(path)).render_as_string(hide_password=False)
    query = {"mode": "ro", "uri": "true"}
    beside = [path.with_name(path.name + suffix) for suffix in ("-wal", "-shm")]
    if not all(p.exists() for p in beside):
        query["immutable"] = "1"
    database = "file:" + quote(str(path), safe="/")
    return URL.create("sqlite", database=database, query=query).render_as_string(
        hide_password=False
    )


def missing_file(url: str) -> str | None:
    """The file a SQLite ``url`` names when it does not exist (None for another database, an
    in-memory one, or a file that is there): what a reader that must create nothing refuses
    before it connects, since connecting would create it."""
    if not url.startswith("sqlite"):
        return None
    try:
        database = make_url(url).database
    except Exception:  # not a URL: opening the store says so
        return None
    if not database or database == ":memory:" or database.startswith("file::memory:"):
        return None
    path = unquote(database.removeprefix("file:")) if database.startswith("file:") else database
    return None if Path(path).exists() else path


def default_url() -> str:
    """``$RATCHET_DB``, else the SQLite file ``ratchet.db`` under :func:`home` (made if missing;
    a :class:`~ratchet_runner.errors.UsageError` if it cannot be a folder)."""
    configured = os.environ.get(ENV_DB)
    if configured:
        return configured
    return sqlite_url(home_folder() / "ratchet.db")


def redact(url: str) -> str:
    """The URL without its password, for messages."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        credentials, host = rest.rsplit("@", 1)
        user = credentials.split(":", 1)[0]
        return f"{scheme}://{user}:***@{host}" if ":" in credentials else url
    return url


def why(exc: BaseException) -> str:
    """What the database (or its driver) said, on one line, for a message."""
    original = getattr(exc, "orig", None)
    text = str(original if original is not None else exc)
    return " ".join(text.split())[:300]


def failure(exc: BaseException) -> str:
    """What went wrong with the store, for a message: what the database said, and, for the
    failures a person can act on (a read-only file, a full disk, corrupt pages), what it means."""
    said = why(exc)
    if "readonly database" in said or "read-only" in said:
        return f"it is read-only ({said}): it can be read, not changed"
    if "disk is full" in said or "No space left" in said:
        return f"its disk is full ({said}); nothing was written"
    if "malformed" in said or "not a database" in said:
        return f"its pages are corrupt ({said}); restore it from a backup"
    return said


@contextmanager
def failures() -> Iterator[None]:
    """A database that fails (gone, refusing a value it cannot hold, read-only, full, corrupt)
    raises :class:`~ratchet_runner.errors.StoreError`; a constraint it enforces stays an
    :class:`~sqlalchemy.exc.IntegrityError`, for the store to say what it means."""
    try:
        yield
    except IntegrityError:
        raise
    except DatabaseError as exc:  # OperationalError, DataError, a corrupt page, ...
        raise StoreError(f"the store failed: {failure(exc)}") from None
