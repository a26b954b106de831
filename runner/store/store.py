"""The store: every SQL statement Ratchet runs against its own database lives in this module.

Tables: ``spec_versions`` (the exact text a run started under), ``runs`` (state, version,
business key, input, context), ``events`` (each run's append-only history, plain JSON),
``operations`` (one row per operation ID, under a primary key: idempotency is data),
``approvals``, ``timers``, ``signals``, and ``meta`` (what the store recorded about itself when
it was created: whether it is a practice store).

Every change to a run is one :class:`Change` applied by :meth:`Store.commit` in one transaction
that first compare-and-sets the run's version (``UPDATE runs … WHERE id = :id AND version = :v``,
rowcount checked) and then appends the history and writes operations and approvals. Losing the
race raises :class:`~ratchet_runner.errors.VersionConflict`; nothing is overwritten.

SQLite (the embedded default) runs in WAL mode with ``synchronous=FULL``, a busy timeout, and
``BEGIN IMMEDIATE`` for writes, so concurrent writers queue instead of failing with "database is
locked". PostgreSQL (``postgresql+psycopg://``) runs the same code, except that a change, a new run
and a claim are each one statement in autocommit (:mod:`ratchet_runner.store.postgres`: one round
trip, the same atomicity), and reads are autocommit too; the rest of what differs is in
:class:`_Dialect` and its subclasses.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import (
    JSON,
    Column,
    Connection,
    Engine,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    bindparam,
    case,
    create_engine,
    event,
    func,
    insert,
    make_url,
    or_,
    select,
    update,
)
from sqlalchemy.exc import (
    DataError,
    DisconnectionError,
    IntegrityError,
    OperationalError,
    SQLAlchemyError,
)

from ratchet_runner.clock import Clock, SystemClock
from ratchet_runner.errors import (
    DuplicateOperation,
    LeaseLost,
    RunBusy,
    RunNotFound,
    StoreError,
    VersionConflict,
)
from ratchet_runner.settings import ENV_DB, home
from ratchet_runner.store.postgres import Statements, Tables

# Plain ``json`` on PostgreSQL too, not ``jsonb``: the history must come back exactly as written.
# ``jsonb`` reorders keys, turns 1e20 into an integer and refuses "\u0000" in a string.
_JSON = JSON()
metadata = MetaData()

spec_versions = Table(
    "spec_versions",
    metadata,
    Column("digest", String(64), primary_key=True),
    Column("name", String(200), nullable=False),
    Column("spec_version", Integer, nullable=False),
    Column("policy_version", String(100), nullable=False),
    Column("text", Text, nullable=False),
    Column("created_at", Float, nullable=False),
)

runs = Table(
    "runs",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("workflow", String(200), nullable=False),
    Column("spec_digest", String(64), ForeignKey("spec_versions.digest"), nullable=False),
    Column("business_key", String(400), nullable=False),
    Column("state", String(200), nullable=False),
    Column("status", String(20), nullable=False),
    Column("version", Integer, nullable=False),
    Column("input", _JSON, nullable=False),
    Column("context", _JSON, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("wake_at", Float),
    Column("lease_owner", String(200)),
    Column("lease_token", String(64)),
    Column("lease_expires_at", Float),
    UniqueConstraint("workflow", "business_key", name="uq_runs_business_key"),
)
Index("ix_runs_status", runs.c.status, runs.c.wake_at)
# A claim takes the runnable run least recently moved: in index order, so a claim costs the same
# with a backlog of a hundred thousand runs as with ten.
Index("ix_runs_claim", runs.c.status, runs.c.updated_at, runs.c.id)

events = Table(
    "events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(40), ForeignKey("runs.id"), nullable=False),
    Column("version", Integer, nullable=False),
    Column("kind", String(40), nullable=False),
    Column("data", _JSON, nullable=False),
    Column("at", Float, nullable=False),
)
Index("ix_events_run", events.c.run_id, events.c.id)

operations = Table(
    "operations",
    metadata,
    Column("operation_id", String(64), primary_key=True),
    Column("run_id", String(40), ForeignKey("runs.id"), nullable=False),
    Column("effect", String(200), nullable=False),
    Column("role", String(20), nullable=False),
    Column("args", _JSON, nullable=False),
    Column("fingerprint", String(64), nullable=False),
    Column("status", String(20), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("receipt", _JSON),
    Column("last_error", Text),
    Column("compensates", String(64)),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
)
Index("ix_operations_run", operations.c.run_id)

approvals = Table(
    "approvals",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(40), ForeignKey("runs.id"), nullable=False),
    Column("name", String(200), nullable=False),
    Column("effect", String(200), nullable=False),
    Column("digest", String(64), nullable=False),
    Column("decision", String(20), nullable=False),
    Column("actor", String(200), nullable=False),
    Column("role", String(200), nullable=False),
    Column("reason", Text),
    Column("policy_version", String(100), nullable=False),
    Column("spec_digest", String(64), nullable=False),
    Column("decided_at", Float, nullable=False),
    Column("expires_at", Float),
    Column("consumed_at", Float),
)
Index("ix_approvals_run", approvals.c.run_id)

timers = Table(
    "timers",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(40), ForeignKey("runs.id"), nullable=False),
    Column("state", String(200), nullable=False),
    Column("event", String(200), nullable=False),
    Column("due_at", Float, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("fired_at", Float),
    Column("outcome", String(20)),
)
Index("ix_timers_due", timers.c.fired_at, timers.c.due_at)
Index("ix_timers_run", timers.c.run_id)

#: What a store records about itself, once, when it is created: ``created_at`` (epoch seconds)
#: and, for a practice store, ``practice`` (``true``): the one kind of store on which the
#: command line honours ``RATCHET_NOW``. A key/value table, so that later facts need no new one.
meta = Table(
    "meta",
    metadata,
    Column("key", String(100), primary_key=True),
    Column("value", Text, nullable=False),
)

signals = Table(
    "signals",
    metadata,
    Column("signal_id", String(200), primary_key=True),
    Column("run_id", String(40), ForeignKey("runs.id"), primary_key=True),
    Column("event", String(200), nullable=False),
    Column("data", _JSON, nullable=False),
    Column("received_at", Float, nullable=False),
)


# -- statements, built once (building a statement costs more than running it) ----------------

_CAS_VALUES: dict[str, Any] = {
    "version": bindparam("n_version"),
    "state": bindparam("n_state"),
    "status": bindparam("n_status"),
    "context": bindparam("n_context", type_=_JSON),
    "updated_at": bindparam("n_updated_at"),
    "wake_at": bindparam("n_wake_at"),
    "spec_digest": bindparam("n_spec_digest"),
}


#: A leased commit that takes the run out of ``running`` gives the lease back with it: a run
#: nobody can claim needs no lease, and the worker saves a round trip.
_RELEASE_UNLESS_RUNNING: dict[str, Any] = {
    column: case((bindparam("n_status") == "running", runs.c[column]), else_=None)
    for column in ("lease_owner", "lease_token", "lease_expires_at")
}


#: A commit under no lease matches only a run with no lease or an expired one: it clears it, so
#: a run finished after its worker died shows no dead worker's lease.
_CLEAR_LEASE: dict[str, Any] = dict.fromkeys(("lease_owner", "lease_token", "lease_expires_at"))


def _cas_run(*fence: Any, release: bool = False) -> Any:
    """``UPDATE runs SET … WHERE id = :id AND version = :v`` and the lease condition ``fence``."""
    values = {**_CAS_VALUES, **(_RELEASE_UNLESS_RUNNING if release else _CLEAR_LEASE)}
    return (
        update(runs)
        .where(runs.c.id == bindparam("b_id"), runs.c.version == bindparam("b_version"), *fence)
        .values(**values)
    )


_RUN_BY_ID = select(runs).where(runs.c.id == bindparam("b_id"))
_RUN_BY_KEY = select(runs).where(
    runs.c.workflow == bindparam("b_workflow"), runs.c.business_key == bindparam("b_key")
)
_INSERT_RUN = insert(runs)
_OPERATION_BY_ID = select(operations).where(operations.c.operation_id == bindparam("b_id"))
_INSERT_EVENTS = insert(events)
_INSERT_OPERATION = insert(operations)
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


_CONSUME_APPROVAL = (
    update(approvals)
    .where(approvals.c.id == bindparam("b_id"), approvals.c.consumed_at.is_(None))
    .values(consumed_at=bindparam("n_at"))
)


# -- records --------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunRecord:
    id: str
    workflow: str
    spec_digest: str
    business_key: str
    state: str
    status: str
    version: int
    input: dict[str, Any]
    context: dict[str, Any]
    created_at: float
    updated_at: float
    wake_at: float | None = None
    lease_owner: str | None = None
    lease_token: str | None = None
    lease_expires_at: float | None = None


@dataclass(frozen=True)
class EventRecord:
    id: int
    run_id: str
    version: int
    kind: str
    data: dict[str, Any]
    at: float


@dataclass(frozen=True)
class OperationRecord:
    operation_id: str
    run_id: str
    effect: str
    role: str
    args: dict[str, Any]
    fingerprint: str
    status: str
    attempts: int
    receipt: dict[str, Any] | None
    last_error: str | None
    compensates: str | None
    created_at: float
    updated_at: float


@dataclass(frozen=True)
class ApprovalRecord:
    id: int
    run_id: str
    name: str
    effect: str
    digest: str
    decision: str
    actor: str
    role: str
    reason: str | None
    policy_version: str
    spec_digest: str
    decided_at: float
    expires_at: float | None
    consumed_at: float | None


@dataclass(frozen=True)
class TimerRecord:
    id: int
    run_id: str
    state: str
    event: str
    due_at: float
    created_at: float
    fired_at: float | None
    outcome: str | None


@dataclass(frozen=True)
class SignalRecord:
    signal_id: str
    run_id: str
    event: str
    data: dict[str, Any]
    received_at: float


@dataclass
class Change:
    """Everything one move of a run writes, applied atomically by :meth:`Store.commit`."""

    run_id: str
    expected_version: int
    at: float
    base: RunRecord | None = None
    state: str | None = None
    spec_digest: str | None = None
    lease_token: str | None = None  # the lease this commit is made under (fencing)
    # (owner, seconds): take the lease ``lease_token`` with this commit if the run is free (no
    # lease, or an expired one) — or keep it, renewed, if it is already this one; how a command
    # holds the runs it changes without an extra round trip (see runner.commands)
    take_lease: tuple[str, float] | None = None
    status: str | None = None
    context: dict[str, Any] | None = None
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    new_operations: list[dict[str, Any]] = field(default_factory=list)
    operation_updates: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    new_approvals: list[dict[str, Any]] = field(default_factory=list)
    consume_approvals: list[int] = field(default_factory=list)
    new_timers: list[dict[str, Any]] = field(default_factory=list)
    cancel_timers_of_state: str | None = None
    fire_timer: int | None = None
    new_signals: list[dict[str, Any]] = field(default_factory=list)

    def event(self, kind: str, **data: Any) -> Change:
        self.events.append((kind, data))
        return self

    def preview(self, base: RunRecord) -> RunRecord:
        """The run as this change will leave it, if ``base`` is the run it applies to (a leased
        commit that takes the run out of ``running`` releases the lease with it)."""
        context = self.context if self.context is not None else base.context
        status = self.status if self.status is not None else base.status
        if self.lease_token is None or status != "running":
            base = replace(base, lease_owner=None, lease_token=None, lease_expires_at=None)
        elif self.take_lease is not None:  # the expiry is the database's: this is its estimate
            owner, seconds = self.take_lease
            base = replace(
                base,
                lease_owner=owner,
                lease_token=self.lease_token,
                lease_expires_at=self.at + seconds,
            )
        return replace(
            base,
            version=self.expected_version + 1,
            updated_at=self.at,
            state=self.state if self.state is not None else base.state,
            status=status,
            context=context,
            spec_digest=self.spec_digest or base.spec_digest,
            wake_at=context.get("wake_at"),
        )


# -- dialects -------------------------------------------------------------------------------


class _Dialect:
    """What differs between databases: connection set-up and how a write transaction begins."""

    name = "generic"

    def engine(self, url: str) -> Engine:
        return create_engine(url)

    def lock_schema(self, conn: Connection) -> None:
        """Serialise schema creation between processes (SQLite's BEGIN IMMEDIATE already does)."""

    def now(self) -> Any:
        """The database's own clock, in epoch seconds: leases expire by it, not by a worker's."""
        return func.extract("epoch", func.now())

    def claim_query(self, query: Any) -> Any:
        """How a claim locks the rows it takes (PostgreSQL claims in one statement with
        ``FOR UPDATE SKIP LOCKED`` instead: :mod:`ratchet_runner.store.postgres`)."""
        return query


class _SQLite(_Dialect):
    name = "sqlite"

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def engine(self, url: str) -> Engine:
        engine = create_engine(url, connect_args={"timeout": 60})

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.isolation_level = None  # we emit BEGIN ourselves
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=FULL")
            cursor.execute("PRAGMA busy_timeout=60000")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()
            # Leases expire by ratchet_now(): this host's clock, read through the store's clock
            # (the system clock, or one a simulation drives: tests/property/simulation.py).
            dbapi_connection.create_function("ratchet_now", 0, self.clock.now)

        @event.listens_for(engine, "begin")
        def _on_begin(connection: Connection) -> None:
            # Writes take the write lock up front, so concurrent writers queue (busy timeout)
            # instead of failing on upgrade; reads are single statements in autocommit.
            if connection.get_execution_options().get("ratchet_write", False):
                connection.exec_driver_sql("BEGIN IMMEDIATE")

        return engine

    def now(self) -> Any:
        return func.ratchet_now()


#: A pooled PostgreSQL connection idle for longer than this is pinged before it is used again
#: (one that is in steady use is not: a ping per checkout would double a commit's round trips).
IDLE_PING_SECONDS = 10.0


class _PostgreSQL(_Dialect):
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
        engine = create_engine(parsed, connect_args=connect_args)

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

    def lock_schema(self, conn: Connection) -> None:
        # Workers opening a fresh database at once would race to CREATE TABLE (duplicate key
        # in pg_type); this lock, held until the transaction ends, makes them take turns.
        conn.exec_driver_sql("SELECT pg_advisory_xact_lock(7523094288207667809)")

    def now(self) -> Any:
        return func.extract("epoch", func.clock_timestamp())


def _dialect_for(url: str, clock: Clock) -> _Dialect:
    if url.startswith("sqlite"):
        return _SQLite(clock)
    if url.startswith("postgresql"):
        return _PostgreSQL()
    return _Dialect()


def default_url() -> str:
    """``$RATCHET_DB``, else the SQLite file ``ratchet.db`` under :func:`home`."""
    configured = os.environ.get(ENV_DB)
    if configured:
        return configured
    path = home() / "ratchet.db"
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


def _record_creation(conn: Connection, practice: bool) -> None:
    """Record in ``meta`` when the store was created, and whether as a practice store, unless it
    is recorded already (in the transaction that creates the tables)."""
    known = conn.execute(select(meta.c.key).where(meta.c.key == "created_at")).first()
    if known is not None:
        return
    rows = [{"key": "created_at", "value": repr(time.time())}]
    if practice:
        rows.append({"key": "practice", "value": "true"})
    conn.execute(insert(meta), rows)


def redact(url: str) -> str:
    """The URL without its password, for messages."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        credentials, host = rest.rsplit("@", 1)
        user = credentials.split(":", 1)[0]
        return f"{scheme}://{user}:***@{host}" if ":" in credentials else url
    return url


# -- the store ------------------------------------------------------------------------------


class Store:
    """Ratchet's durable state behind one SQLAlchemy engine."""

    def __init__(
        self,
        url: str | None = None,
        *,
        create: bool = True,
        practice: bool = False,
        clock: Clock | None = None,
    ) -> None:
        """Open the store at ``url`` (default: :func:`default_url`), creating its tables when
        ``create``. ``practice`` records, when this call creates the store, that it is a
        practice store (see :meth:`is_practice`); opening an existing store never changes what
        it is. ``clock`` is the clock leases expire by on SQLite (default: the system clock; a
        simulation injects its own); PostgreSQL's leases expire by the server's clock."""
        self.url = url or default_url()
        self.clock: Clock = clock or SystemClock()
        self.dialect = _dialect_for(self.url, self.clock)
        #: Set when "now" is overridden for practice (``RATCHET_NOW``): every event a change
        #: commits then also records the real time, as ``real_at`` in its data.
        self.stamp_real_time = False
        try:
            self.engine = self.dialect.engine(self.url)
            self._writer = self.engine.execution_options(ratchet_write=True)
            # PostgreSQL: reads and one-statement writes run in autocommit (no BEGIN, no
            # ROLLBACK: one round trip each); a change to a run is one statement (store_pg).
            self._pg: Statements | None = None
            self._single = self._writer
            self._reader = self.engine
            if self.dialect.name == "postgresql":
                self._single = self._reader = self.engine.execution_options(
                    isolation_level="AUTOCOMMIT"
                )
                self._pg = Statements(Tables(runs, events, operations, approvals, timers, signals))
            self._db_now = self.dialect.now()
            # A commit under a lease must hold it (fencing); any other commit needs the run
            # free: no lease, or one the database's clock says has expired.
            self._cas_leased = _cas_run(runs.c.lease_token == bindparam("b_token"), release=True)
            self._cas_free = _cas_run(
                or_(runs.c.lease_token.is_(None), runs.c.lease_expires_at < self._db_now)
            )
            running = bindparam("n_status") == "running"
            self._cas_take = (
                update(runs)
                .where(
                    runs.c.id == bindparam("b_id"),
                    runs.c.version == bindparam("b_version"),
                    or_(
                        runs.c.lease_token == bindparam("b_token"),
                        runs.c.lease_token.is_(None),
                        runs.c.lease_expires_at < self._db_now,
                    ),
                )
                .values(
                    **_CAS_VALUES,
                    lease_owner=case((running, bindparam("b_owner")), else_=None),
                    lease_token=case((running, bindparam("b_token")), else_=None),
                    lease_expires_at=case(
                        (running, self._db_now + bindparam("b_seconds", type_=Float)),
                        else_=None,
                    ),
                )
            )
            if create:
                with self._writer.begin() as conn:
                    self.dialect.lock_schema(conn)
                    metadata.create_all(conn)
                    for table in metadata.sorted_tables:  # an index added since they were made
                        for index in table.indexes:
                            index.create(conn, checkfirst=True)
                    _record_creation(conn, practice)
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot open the store at {redact(self.url)}: {_why(exc)}") from None
        except Exception as exc:  # a bad URL, a missing driver
            raise StoreError(f"cannot open the store at {redact(self.url)}: {exc}") from None

    def close(self) -> None:
        self.engine.dispose()

    # -- the store's own clock and facts ------------------------------------------------------

    def _stamped(
        self, events: list[tuple[str, dict[str, Any]]]
    ) -> list[tuple[str, dict[str, Any]]]:
        """``events``, each with the real time beside it when "now" is overridden."""
        if not self.stamp_real_time:
            return events
        real = time.time()
        return [(kind, {**data, "real_at": data.get("real_at", real)}) for kind, data in events]

    def db_now(self) -> float:
        """Now by the store's clock, in epoch seconds: what decisions bounded by a deadline or an
        expiry are judged by (through :meth:`ratchet_runner.engine.runner.Runner.decision_now`), so
        every process deciding on one run reads one clock. SQLite lives on this host: its clock is
        this host's (read through the store's clock). PostgreSQL: the server's
        ``clock_timestamp()``, one round trip."""
        if self._pg is None:
            return self.clock.now()
        with self._read() as conn:
            return float(
                conn.exec_driver_sql("SELECT extract(epoch from clock_timestamp())").scalar_one()
            )

    def meta_value(self, key: str) -> str | None:
        """What the store recorded about itself under ``key`` (``meta``), if anything."""
        with self._read() as conn:
            row = conn.execute(select(meta.c.value).where(meta.c.key == key)).first()
        return None if row is None else str(row[0])

    def is_practice(self) -> bool:
        """Whether the store was created as a practice store (or later emptied and declared one,
        :meth:`mark_practice`): the command line honours ``RATCHET_NOW`` only on such a store."""
        return self.meta_value("practice") == "true"

    def mark_practice(self) -> None:
        """Declare the store a practice store. Meant for a store just emptied (``ratchet reset
        --all --practice``): on a practice store anyone may set "now" to any time."""
        with self._write() as conn:
            if conn.execute(select(meta.c.key).where(meta.c.key == "practice")).first() is None:
                conn.execute(insert(meta).values(key="practice", value="true"))
            else:
                conn.execute(update(meta).where(meta.c.key == "practice").values(value="true"))

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        try:
            with self._reader.connect() as conn:
                yield conn
        except (OperationalError, DataError) as exc:
            raise StoreError(f"the store failed: {_why(exc)}") from None

    @contextmanager
    def _write_one(self) -> Iterator[Connection]:
        """For a write that is a single statement: in autocommit on PostgreSQL (the statement
        is its own transaction), in a write transaction on SQLite."""
        try:
            with self._single.begin() as conn:
                yield conn
        except IntegrityError:
            raise
        except (OperationalError, DataError) as exc:
            raise StoreError(f"the store failed: {_why(exc)}") from None

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        try:
            with self._writer.begin() as conn:
                yield conn
        except IntegrityError:
            raise
        except (OperationalError, DataError) as exc:  # DataError: a value it cannot hold
            raise StoreError(f"the store failed: {_why(exc)}") from None

    # -- specs ------------------------------------------------------------------------------

    def save_spec(
        self, digest: str, name: str, spec_version: int, policy_version: str, text: str, at: float
    ) -> None:
        """Record the exact spec text under its digest (once)."""
        try:
            with self._write() as conn:
                exists = conn.execute(
                    select(spec_versions.c.digest).where(spec_versions.c.digest == digest)
                ).first()
                if exists is None:
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
            with self._read() as conn:
                saved = conn.execute(
                    select(spec_versions.c.digest).where(spec_versions.c.digest == digest)
                ).first()
            if saved is None:
                raise StoreError(f"cannot save spec version {digest[:12]}: {_why(exc)}") from None

    def latest_spec(self, name: str) -> tuple[str, int] | None:
        """The digest and version of the newest spec version stored for workflow ``name``."""
        with self._read() as conn:
            row = conn.execute(
                select(spec_versions.c.digest, spec_versions.c.spec_version)
                .where(spec_versions.c.name == name)
                .order_by(spec_versions.c.spec_version.desc(), spec_versions.c.created_at.desc())
                .limit(1)
            ).first()
        return (str(row[0]), int(row[1])) if row is not None else None

    def spec_text(self, digest: str) -> str:
        with self._read() as conn:
            row = conn.execute(
                select(spec_versions.c.text).where(spec_versions.c.digest == digest)
            ).first()
        if row is None:
            raise StoreError(f"no spec version {digest[:12]} in the store")
        return str(row[0])

    # -- runs -------------------------------------------------------------------------------

    def create_run(
        self,
        run_id: str,
        workflow: str,
        spec_digest: str,
        business_key: str,
        state: str,
        status: str,
        input: dict[str, Any],
        at: float,
        context: dict[str, Any] | None = None,
        new_timers: list[dict[str, Any]] | None = None,
        first_events: list[tuple[str, dict[str, Any]]] | None = None,
    ) -> tuple[RunRecord, bool]:
        """Create a run, or return the one that already exists for this business key.

        Returns ``(run, created)``. Starting the same piece of work twice is not an error: it is
        the same run.
        """
        record = RunRecord(
            id=run_id,
            workflow=workflow,
            spec_digest=spec_digest,
            business_key=business_key,
            state=state,
            status=status,
            version=1,
            input=input,
            context=context or {},
            created_at=at,
            updated_at=at,
        )
        created = self._stamped(
            [("created", {"state": state, "business_key": business_key}), *(first_events or [])]
        )
        try:
            if self._pg is not None:
                sql, params = self._pg.create(record.__dict__, created, list(new_timers or []))
                with self._write_one() as conn:
                    conn.exec_driver_sql(sql, params)
                return record, True
            with self._write() as conn:
                conn.execute(_INSERT_RUN, record.__dict__)
                conn.execute(
                    _INSERT_EVENTS,
                    [
                        {"run_id": run_id, "version": 1, "kind": kind, "data": data, "at": at}
                        for kind, data in created
                    ],
                )
                for timer in new_timers or []:
                    conn.execute(insert(timers).values(run_id=run_id, created_at=at, **timer))
        except (
            IntegrityError
        ) as exc:  # the business key has a run already (or the spec is not saved)
            with self._read() as conn:
                found = self._find(conn, workflow, business_key)
            if found is None:
                raise StoreError(f"cannot create run {run_id}: {_why(exc)}") from None
            return found, False
        return record, True

    def _find(self, conn: Connection, workflow: str, business_key: str) -> RunRecord | None:
        row = conn.execute(_RUN_BY_KEY, {"b_workflow": workflow, "b_key": business_key}).first()
        return RunRecord(**row._mapping) if row is not None else None

    def get_run(self, run_id: str) -> RunRecord:
        with self._read() as conn:
            row = conn.execute(_RUN_BY_ID, {"b_id": run_id}).first()
        if row is None:
            raise RunNotFound(f"no run {run_id!r}")
        return RunRecord(**row._mapping)

    def resolve(self, reference: str) -> RunRecord:
        """The run named by its ID, or by its business key when only one run has it."""
        if reference.startswith("run_"):
            return self.get_run(reference)
        with self._read() as conn:
            rows = conn.execute(select(runs).where(runs.c.business_key == reference)).fetchall()
        if not rows:
            raise RunNotFound(f"no run has the ID or business key {reference!r}")
        if len(rows) > 1:
            ids = ", ".join(f"{r.id} ({r.workflow})" for r in rows)
            raise RunNotFound(f"several runs have the business key {reference!r}: {ids}")
        return RunRecord(**rows[0]._mapping)

    def find_run(self, workflow: str, business_key: str) -> RunRecord | None:
        with self._read() as conn:
            return self._find(conn, workflow, business_key)

    def list_runs(self, status: str | None = None, limit: int = 200) -> list[RunRecord]:
        query = select(runs).order_by(runs.c.created_at.desc(), runs.c.id).limit(limit)
        if status is not None:
            query = query.where(runs.c.status == status)
        with self._read() as conn:
            return [RunRecord(**row._mapping) for row in conn.execute(query)]

    def history(self, run_id: str) -> list[EventRecord]:
        with self._read() as conn:
            rows = conn.execute(
                select(events).where(events.c.run_id == run_id).order_by(events.c.id)
            )
            return [EventRecord(**row._mapping) for row in rows]

    # -- operations and approvals -----------------------------------------------------------

    def operation(self, operation_id: str) -> OperationRecord | None:
        with self._read() as conn:
            row = conn.execute(_OPERATION_BY_ID, {"b_id": operation_id}).first()
        return OperationRecord(**row._mapping) if row is not None else None

    def operations(self, run_id: str | None = None) -> list[OperationRecord]:
        query = select(operations).order_by(operations.c.created_at, operations.c.operation_id)
        if run_id is not None:
            query = query.where(operations.c.run_id == run_id)
        with self._read() as conn:
            return [OperationRecord(**row._mapping) for row in conn.execute(query)]

    def approvals(self, run_id: str) -> list[ApprovalRecord]:
        with self._read() as conn:
            rows = conn.execute(
                select(approvals).where(approvals.c.run_id == run_id).order_by(approvals.c.id)
            )
            return [ApprovalRecord(**row._mapping) for row in rows]

    # -- timers and signals -----------------------------------------------------------------

    def due_timers(self, now: float, limit: int = 500) -> list[TimerRecord]:
        """Timers due at ``now`` that have not fired, oldest first."""
        query = (
            select(timers)
            .where(timers.c.fired_at.is_(None), timers.c.due_at <= now)
            .order_by(timers.c.due_at, timers.c.id)
            .limit(limit)
        )
        with self._read() as conn:
            return [TimerRecord(**row._mapping) for row in conn.execute(query)]

    def discard_timer(self, timer_id: int, at: float) -> None:
        """Mark a timer whose run has left its state as stale (it will never fire)."""
        with self._write_one() as conn:
            conn.execute(
                update(timers)
                .where(timers.c.id == timer_id, timers.c.fired_at.is_(None))
                .values(fired_at=at, outcome="stale")
            )

    def timers(self, run_id: str) -> list[TimerRecord]:
        with self._read() as conn:
            rows = conn.execute(
                select(timers).where(timers.c.run_id == run_id).order_by(timers.c.id)
            )
            return [TimerRecord(**row._mapping) for row in rows]

    def signal(self, run_id: str, signal_id: str) -> SignalRecord | None:
        """The signal ``signal_id`` that ``run_id`` received, if it did (IDs are per run)."""
        with self._read() as conn:
            row = conn.execute(
                select(signals).where(signals.c.signal_id == signal_id, signals.c.run_id == run_id)
            ).first()
        return SignalRecord(**row._mapping) if row is not None else None

    # -- the one way to change a run --------------------------------------------------------

    def commit(self, change: Change) -> RunRecord:
        """Apply ``change`` atomically, or raise :class:`VersionConflict` if the run moved on."""
        if self.stamp_real_time:
            change.events = self._stamped(change.events)
        base = change.base
        if base is None or base.version != change.expected_version:
            base = self.get_run(change.run_id)
        after = change.preview(base)
        fenced = change.lease_token is not None
        if (
            change.take_lease is not None
            and after.status == "running"
            and base.lease_token != change.lease_token
            and not any(kind == "leased" for kind, _ in change.events)
        ):  # the commit that takes the lease says so, as a claim does
            change.events.insert(
                0, ("leased", {"owner": change.take_lease[0], "previous": base.lease_owner})
            )
        one = self._pg.commit(change, after) if self._pg is not None else None
        try:
            if one is not None:
                with self._write_one() as conn:
                    if conn.exec_driver_sql(*one).first() is None:
                        self._refused(conn, change, fenced)
                return after
            taking = change.take_lease is not None
            with self._write() as conn:
                result = conn.execute(
                    self._cas_take if taking else self._cas_leased if fenced else self._cas_free,
                    {
                        "b_owner": change.take_lease[0] if change.take_lease else None,
                        "b_seconds": change.take_lease[1] if change.take_lease else None,
                        "b_token": change.lease_token,
                        "b_id": change.run_id,
                        "b_version": change.expected_version,
                        "n_version": after.version,
                        "n_state": after.state,
                        "n_status": after.status,
                        "n_context": after.context,
                        "n_updated_at": change.at,
                        "n_wake_at": after.wake_at,
                        "n_spec_digest": after.spec_digest,
                    },
                )
                if result.rowcount != 1:
                    self._refused(conn, change, fenced and not taking)
                self._apply(conn, change, after.version)
        except IntegrityError as exc:
            raise DuplicateOperation(f"already recorded: {_why(exc)}") from None
        return after

    @staticmethod
    def _refused(conn: Connection, change: Change, fenced: bool) -> None:
        """Raise why the compare-and-set of ``change`` matched no row."""
        found = conn.execute(_RUN_BY_ID, {"b_id": change.run_id}).first()
        if found is None:
            raise RunNotFound(f"no run {change.run_id!r}")
        if found.version != change.expected_version:
            raise VersionConflict(
                f"run {change.run_id} has moved on (version {found.version}, "
                f"expected {change.expected_version})"
            )
        raise LeaseLost(
            f"run {change.run_id} is leased by {found.lease_owner}"
            if not fenced
            else f"the lease on run {change.run_id} was lost to {found.lease_owner}"
        )

    def _apply(self, conn: Connection, change: Change, version: int) -> None:
        """The writes that ride on a successful compare-and-set."""
        if change.events:
            conn.execute(
                _INSERT_EVENTS,
                [
                    {
                        "run_id": change.run_id,
                        "version": version,
                        "kind": kind,
                        "data": data,
                        "at": change.at,
                    }
                    for kind, data in change.events
                ],
            )
        for op in change.new_operations:
            conn.execute(
                _INSERT_OPERATION,
                {
                    "run_id": change.run_id,
                    "created_at": change.at,
                    "updated_at": change.at,
                    "receipt": None,
                    "last_error": None,
                    "compensates": None,
                    **op,
                },
            )
        for operation_id, fields in change.operation_updates:
            conn.execute(
                _operation_update(tuple(sorted(fields))),
                {"b_id": operation_id, "n_updated_at": change.at}
                | {f"n_{name}": value for name, value in fields.items()},
            )
        for record in change.new_approvals:
            conn.execute(_INSERT_APPROVAL, {"run_id": change.run_id, "consumed_at": None, **record})
        for approval_id in change.consume_approvals:
            consumed = conn.execute(_CONSUME_APPROVAL, {"b_id": approval_id, "n_at": change.at})
            if consumed.rowcount != 1:
                raise VersionConflict(f"approval {approval_id} was already consumed")
        if change.fire_timer is not None:
            fired = conn.execute(
                update(timers)
                .where(timers.c.id == change.fire_timer, timers.c.fired_at.is_(None))
                .values(fired_at=change.at, outcome="fired")
            )
            if fired.rowcount != 1:
                raise VersionConflict(f"timer {change.fire_timer} has already fired")
        if change.cancel_timers_of_state is not None:
            conn.execute(
                update(timers)
                .where(
                    timers.c.run_id == change.run_id,
                    timers.c.state == change.cancel_timers_of_state,
                    timers.c.fired_at.is_(None),
                )
                .values(fired_at=change.at, outcome="cancelled")
            )
        for timer in change.new_timers:
            conn.execute(insert(timers).values(run_id=change.run_id, created_at=change.at, **timer))
        for signal in change.new_signals:
            conn.execute(insert(signals).values(run_id=change.run_id, **signal))

    # -- leases -------------------------------------------------------------------------------

    def claim(
        self, owner: str, lease_seconds: float, now: float, limit: int = 1
    ) -> list[RunRecord]:
        """Lease up to ``limit`` runnable runs to ``owner`` (running, not waiting for a back-off,
        not leased, or whose lease expired by the database's clock). Each claim bumps the run's
        version and sets a new lease token, so a worker that lost its lease can commit nothing
        more; a run taken over from an expired lease gets a ``rescued`` event."""
        if self._pg is not None:
            params = {"now": now, "limit": limit, "owner": owner, "seconds": lease_seconds}
            with self._write_one() as conn:
                rows = conn.exec_driver_sql(self._pg.claim_sql, params).fetchall()
            return [RunRecord(**row._mapping) for row in rows]
        query = self.dialect.claim_query(
            select(runs)
            .where(runs.c.status == "running")
            .where(or_(runs.c.wake_at.is_(None), runs.c.wake_at <= now))
            .where(or_(runs.c.lease_token.is_(None), runs.c.lease_expires_at < self._db_now))
            .order_by(runs.c.updated_at, runs.c.id)
            .limit(limit)
        )
        claimed: list[RunRecord] = []
        with self._write() as conn:
            for row in conn.execute(query).fetchall():
                taken = self._lease_to(conn, RunRecord(**row._mapping), owner, lease_seconds, now)
                if taken is not None:
                    claimed.append(taken)
        return claimed

    def claim_run(self, run_id: str, owner: str, lease_seconds: float, now: float) -> RunRecord:
        """Lease the run ``run_id`` to ``owner``, whatever its status: how a command takes a run
        before it changes it or calls out for it. A run with no lease, or one the database's
        clock says has expired, is taken (its version bumped, a new token, a ``leased`` event, or
        ``rescued`` over an expired lease); one held by a live lease raises :class:`RunBusy`
        naming the holder, and nothing changes."""

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
        done = conn.execute(
            update(runs)
            .where(
                runs.c.id == record.id,
                runs.c.version == record.version,
                or_(runs.c.lease_token.is_(None), runs.c.lease_expires_at < self._db_now),
            )
            .values(
                version=record.version + 1,
                lease_owner=owner,
                lease_token=token,
                lease_expires_at=expires,
            )
        )
        if done.rowcount != 1:
            return None
        conn.execute(
            _INSERT_EVENTS,
            [
                {
                    "run_id": record.id,
                    "version": record.version + 1,
                    "kind": "rescued" if record.lease_token is not None else "leased",
                    "data": {"owner": owner, "previous": record.lease_owner},
                    "at": now,
                }
            ],
        )
        return replace(
            record,
            version=record.version + 1,
            lease_owner=owner,
            lease_token=token,
            lease_expires_at=expires,
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

    def release(self, run_id: str, token: str) -> None:
        """Give a lease back (no version bump: releasing changes nothing about the run)."""
        with self._write_one() as conn:
            conn.execute(
                update(runs)
                .where(runs.c.id == run_id, runs.c.lease_token == token)
                .values(lease_owner=None, lease_token=None, lease_expires_at=None)
            )

    def leases(self) -> list[dict[str, Any]]:
        """Every lease on record, with how long until (or since) it expires by the DB clock, and
        when it was taken (``taken_at``: the time of the run's last ``leased`` or ``rescued``
        event, by the claiming worker's clock)."""
        taken = (
            select(func.max(events.c.at))
            .where(events.c.run_id == runs.c.id, events.c.kind.in_(("leased", "rescued")))
            .scalar_subquery()
        )
        query = (
            select(
                runs.c.id,
                runs.c.workflow,
                runs.c.business_key,
                runs.c.state,
                runs.c.lease_owner,
                runs.c.lease_expires_at,
                (runs.c.lease_expires_at - self._db_now).label("left"),
                taken.label("taken_at"),
            )
            .where(runs.c.lease_token.is_not(None))
            .order_by(runs.c.lease_expires_at)
        )
        with self._read() as conn:
            return [dict(row._mapping) for row in conn.execute(query)]

    def status_counts(self) -> dict[str, int]:
        """How many runs have each status."""
        query = select(runs.c.status, func.count()).group_by(runs.c.status)
        with self._read() as conn:
            return {str(status): int(n) for status, n in conn.execute(query)}

    def stuck(self, now: float, older_than: float) -> list[tuple[RunRecord, str]]:
        """Runs nobody is moving: leased by a worker whose lease expired (it died or froze), or
        runnable, unleased and untouched for ``older_than`` seconds (no worker is running)."""
        expired = select(runs).where(
            runs.c.lease_token.is_not(None), runs.c.lease_expires_at < self._db_now
        )
        idle = select(runs).where(
            runs.c.status == "running",
            runs.c.lease_token.is_(None),
            runs.c.updated_at < now - older_than,
            or_(runs.c.wake_at.is_(None), runs.c.wake_at < now - older_than),
        )
        with self._read() as conn:
            found = [(RunRecord(**r._mapping), "lease expired") for r in conn.execute(expired)]
            found += [
                (RunRecord(**r._mapping), "no worker has moved it") for r in conn.execute(idle)
            ]
        return found

    def counts(self) -> dict[str, int]:
        """Rows per table (for status and tests)."""
        with self._read() as conn:
            return {
                table.name: int(conn.execute(select(func.count()).select_from(table)).scalar_one())
                for table in (runs, events, operations, approvals, timers, signals, spec_versions)
            }

    def reset(self) -> None:
        """Delete every run, event, operation, approval, timer, signal and spec version (what the
        store recorded about itself, ``meta``, stays)."""
        with self._write() as conn:
            for table in (events, operations, approvals, timers, signals, runs, spec_versions):
                conn.execute(table.delete())


def _why(exc: BaseException) -> str:
    original = getattr(exc, "orig", None)
    text = str(original if original is not None else exc)
    return " ".join(text.split())[:300]
