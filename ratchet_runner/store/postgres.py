"""PostgreSQL's writer: each write one statement, in autocommit, where one statement can say it.

On PostgreSQL a change to a run is one statement::

    WITH cas AS (UPDATE runs SET … WHERE id = … AND version = … AND <lease fence> RETURNING id),
         ev  AS (INSERT INTO history … SELECT … FROM cas),
         op0 AS (INSERT INTO operations … SELECT … FROM cas),
         up0 AS (UPDATE operations SET … FROM cas WHERE operation_id = …),
         …
    SELECT id FROM cas

Every other write selects from ``cas``, so when the compare-and-set matches no row (the run moved
on, or its lease was lost) nothing at all is written; a constraint violation anywhere aborts the
whole statement. A single statement is its own transaction, so the commit costs one round trip
to the server instead of a ``BEGIN``, one per statement and a ``COMMIT``: the same atomicity, a
third of the waiting. The SQL text depends only on the change's shape (whether it writes
history, which columns an update sets, …) and is cached, so psycopg prepares it on the server
after a few uses.
A new run and a claim (``FOR UPDATE SKIP LOCKED``) are one statement each too. A wake-up
(:func:`~ratchet_runner.store.bell.wakes`) ends ``SELECT id, pg_notify(:channel, '') FROM cas``:
the notification is sent when, and only if, the statement commits having written the run.

A change that ends the run adds it to the ended runs' tallies in a last part, ``tl``
(:func:`_tally`, :mod:`~ratchet_runner.store.tallies`). Changes this form cannot express exactly
(consuming an approval or firing a timer, whose "exactly one row" checks need a transaction,
taking a lease, two writes to one operation, taking an ended run back, or recording a
duplicate, rare enough to need no statement of its own) go through the transactional
:class:`~ratchet_runner.store.writer.Writer` this writer extends. :class:`Statements` builds
the SQL text; :class:`PostgresWriter` runs it. Leases expire by the server's clock
(:data:`DB_NOW`). Over 500 lines: one concern, the text of every one-statement write (a change,
a new run with its evidence keys, a claim) and the writer that sends them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, NamedTuple

from sqlalchemy import JSON, Connection, Engine, Float, Integer, Table
from sqlalchemy.exc import DBAPIError

from ..clock import Clock
from ..words import ENDED
from . import compact, tallies
from . import tables as schema
from .compiled import Executes, observed
from .context import stored
from .dialects import Dialect, failures, json_text
from .records import Change, Event, NewRun, NewTimer, RunRecord
from .restores import attempt_in
from .writer import Writer, recording

#: The database's clock in epoch seconds: leases expire by it, never by a worker's clock.
DB_NOW = "extract(epoch from clock_timestamp())"

OPERATION_COLUMNS = (
    "operation_id",
    "effect",
    "role",
    "args",
    "fingerprint",
    "status",
    "attempts",
    "receipt",
    "last_error",
    "compensates",
)
_OPERATION_DEFAULTS = {"receipt": None, "last_error": None, "compensates": None}
#: The columns of an ``evidence_keys`` row a new run writes (the run's ID comes from ``cas``).
_KEY_COLUMNS = ("workflow", "path", "value", "created_at")


def sql_type(table: Table, column: str) -> str:
    """The cast that gives a parameter the column's type (psycopg sends None untyped)."""
    kind = table.c[column].type
    if isinstance(kind, JSON):
        return "json"
    if isinstance(kind, Float):
        return "float8"
    if isinstance(kind, Integer):
        return "int8"
    return "text"


def _quote(column: str) -> str:
    return f'"{column}"'


def _param(table: Table, name: str, column: str) -> str:
    return f"%({name})s::{sql_type(table, column)}"


def bind(table: Table, column: str, value: Any) -> Any:
    """A value as a parameter of ``column``: JSON is sent as its text, cast by the SQL."""
    if isinstance(table.c[column].type, JSON):
        return json_text(value)
    return value


def _rows(
    name: str,
    table: Table,
    prefix: str,
    columns: tuple[str, ...],
    count: int,
    fixed: dict[str, str],
) -> str:
    """``name AS (INSERT INTO table … SELECT … FROM cas, (VALUES …) ORDER BY n)``: ``count``
    rows, in order (so serial IDs follow the order the change lists them in)."""
    values = ", ".join(
        "("
        + ", ".join(
            [str(i)] + [_param(table, f"{prefix}{i}_{column}", column) for column in columns]
        )
        + ")"
        for i in range(count)
    )
    targets = ["run_id", *fixed, *columns]
    sources = ["cas.id", *fixed.values(), *(f"v.{_quote(column)}" for column in columns)]
    return (
        f"{name} AS (INSERT INTO {table.name} ({', '.join(map(_quote, targets))}) "
        f"SELECT {', '.join(sources)} FROM cas, (VALUES {values}) "
        f"AS v(n, {', '.join(map(_quote, columns))}) ORDER BY v.n)"
    )


def _row_params(
    table: Table, prefix: str, columns: tuple[str, ...], rows: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    return {
        f"{prefix}{i}_{column}": bind(table, column, row.get(column))
        for i, row in enumerate(rows)
        for column in columns
    }


class Tables(NamedTuple):
    """The tables the statements write (the store's own :class:`~sqlalchemy.Table` objects)."""

    runs: Table
    history: Table
    operations: Table
    approvals: Table
    timers: Table
    signals: Table
    evidence_keys: Table = schema.evidence_keys


def _event_params(events: Sequence[Event], listed: Sequence[str] = ()) -> dict[str, Any]:
    """The parameter of the ``ev`` part: the commit's history row (:mod:`.compact`; ``listed``:
    the run's operations as the commit leaves them; a done event keeps its receipt, which no
    trigger keeps written once here, :data:`~.tables.RECEIPT_ONCE`)."""
    return {"history": compact.encode(events, listed)} if events else {}


#: The shape of a change: everything its SQL text depends on.
Shape = tuple[
    bool,  # fenced by a lease token
    bool,  # writes history
    int,  # new operations
    tuple[tuple[str, ...], ...],  # columns of each operation update
    bool,  # cancels the timers of a state
    tuple[tuple[str, ...], ...],  # columns of each new timer
    tuple[tuple[str, ...], ...],  # columns of each new signal
    tuple[tuple[str, ...], ...],  # columns of each new approval
    bool,  # commits an attempt (only on the incarnation this process read)
    bool,  # ends the run (its tallies: :mod:`.tallies`)
]

#: What a tally reads of an operation.
_TALLIED = "effect, role, status, attempts"


class Statements:
    """The SQL text of PostgreSQL's one-statement writes, built once per shape."""

    def __init__(self, tables: Tables) -> None:
        self.t = tables
        self._commit_sql = lru_cache(maxsize=256)(self._build_commit)
        self._create_sql = lru_cache(maxsize=64)(self._build_create)
        run_columns = [column.name for column in tables.runs.columns]
        self.run_columns = tuple(run_columns)
        self.claim_sql = self._build_claim()

    # -- parts shared by a commit and a run's creation ---------------------------------------

    def _parts(
        self,
        events: bool,
        new_operations: int,
        updates: tuple[tuple[str, ...], ...],
        cancel: bool,
        new_timers: tuple[tuple[str, ...], ...],
        new_signals: tuple[tuple[str, ...], ...],
        new_approvals: tuple[tuple[str, ...], ...],
        returning: bool = False,
    ) -> list[str]:
        """The statement's parts after ``cas``; with ``returning``, its operations' inserts and
        updates return what a tally reads of them."""
        t = self.t
        parts: list[str] = []
        back = f" RETURNING {_TALLIED}" if returning else ""
        if events:
            parts.append(
                f'ev AS (INSERT INTO {t.history.name} (run_id, version, "at", events) '
                "SELECT cas.id, %(n_version)s::int8, %(at)s::float8, %(history)s::json FROM cas)"
            )
        if new_operations:
            at = "%(at)s::float8"
            parts.append(
                _rows(
                    "op",
                    t.operations,
                    "o",
                    OPERATION_COLUMNS,
                    new_operations,
                    {"created_at": at, "updated_at": at},
                )[:-1]
                + back
                + ")"
            )
        for i, columns in enumerate(updates):
            sets = ", ".join(
                ['"updated_at" = %(at)s::float8']
                + [f"{_quote(c)} = {_param(t.operations, f'u{i}_{c}', c)}" for c in columns]
            )
            parts.append(
                f"up{i} AS (UPDATE operations SET {sets} FROM cas "
                f"WHERE operations.operation_id = %(u{i}__id)s::text{back})"
            )
        if cancel:
            parts.append(
                "tc AS (UPDATE timers SET fired_at = %(at)s::float8, outcome = 'cancelled' "
                "FROM cas WHERE timers.run_id = cas.id AND timers.state = %(cancel_state)s::text "
                "AND timers.fired_at IS NULL)"
            )
        for name, table, prefix, shapes, fixed in (
            ("tn", t.timers, "t", new_timers, {"created_at": "%(at)s::float8"}),
            ("sg", t.signals, "s", new_signals, {}),
            ("ap", t.approvals, "a", new_approvals, {"consumed_at": "NULL::float8"}),
        ):
            for i, columns in enumerate(shapes):
                parts.append(_rows(f"{name}{i}", table, f"{prefix}{i}", columns, 1, fixed))
        return parts

    # -- a change to a run -------------------------------------------------------------------

    @staticmethod
    def shape(change: Change) -> Shape | None:
        """The shape of ``change``, or None when one statement cannot apply it exactly."""
        if change.consume_approvals or change.fire_timer is not None or change.take_lease:
            return None
        if change.new_duplicates:  # no part of the statement writes them: the writer's do
            return None
        if change.writes_an_operation_twice():
            return None
        return (
            change.lease_token is not None,
            bool(change.events),
            len(change.new_operations),
            tuple(tuple(sorted(fields)) for _, fields in change.operation_updates),
            change.cancel_timers_of_state is not None,
            tuple(tuple(sorted(timer)) for timer in change.new_timers),
            tuple(tuple(sorted(signal)) for signal in change.new_signals),
            tuple(tuple(sorted(record)) for record in change.new_approvals),
            attempt_in(change.events),
            False,
        )

    def commit(
        self, change: Change, after: RunRecord, channel: str | None = None, *, ends: bool = False
    ) -> tuple[str, dict[str, Any]] | None:
        """The statement and parameters that apply ``change`` (moving the run to ``after``),
        or None when it needs a transaction; with ``channel``, the statement notifies it when
        the change applies (a wake-up: :mod:`~ratchet_runner.store.bell`); with ``ends``, it
        adds the run to the ended runs' tallies (:mod:`.tallies`)."""
        shape = self.shape(change)
        if shape is None:
            return None
        if ends:
            shape = (*shape[:-1], True)
        t = self.t
        listed = compact.listed_in(after.context)
        params: dict[str, Any] = {
            "channel": channel,
            "b_id": change.run_id,
            "b_version": change.expected_version,
            "b_token": change.lease_token,
            "n_version": after.version,
            "n_state": after.state,
            "n_status": after.status,
            "n_context": json_text(stored(after.context)),
            "n_listed": len(listed),
            "n_wake_at": after.wake_at,
            "n_spec_digest": after.spec_digest,
            "at": change.at,
            "cancel_state": change.cancel_timers_of_state,
            **_event_params(change.events, listed),
        }
        if ends:
            params["tl_workflow"] = after.workflow
            params["tl_slot"] = tallies.slot(after.id)
        if change.new_operations:
            params.update(
                _row_params(
                    t.operations,
                    "o",
                    OPERATION_COLUMNS,
                    [{**_OPERATION_DEFAULTS, **op} for op in change.new_operations],
                )
            )
        for i, (operation_id, fields) in enumerate(change.operation_updates):
            params[f"u{i}__id"] = operation_id
            for column, value in fields.items():
                params[f"u{i}_{column}"] = bind(t.operations, column, value)
        for prefix, table, rows, shapes in (
            ("t", t.timers, change.new_timers, shape[5]),
            ("s", t.signals, change.new_signals, shape[6]),
            ("a", t.approvals, change.new_approvals, shape[7]),
        ):
            for i, (row, columns) in enumerate(zip(rows, shapes, strict=True)):
                params.update(_row_params(table, f"{prefix}{i}", columns, [row]))
        return self._commit_sql(shape, channel is not None), params

    def _build_commit(self, shape: Shape, wake: bool) -> str:
        (
            fenced,
            events,
            new_ops,
            updates,
            cancel,
            new_timers,
            new_signals,
            new_approvals,
            tried,
            ends,
        ) = shape
        fence = (
            "lease_token = %(b_token)s::text"
            if fenced
            else f"(lease_token IS NULL OR lease_expires_at < {DB_NOW})"
        )
        # A leased commit that takes the run out of ``running`` gives the lease back with it;
        # a commit under no lease finds none or an expired one, and clears it.
        release = "".join(
            f", {column} = CASE WHEN %(n_status)s::text = 'running' THEN {column} END"
            if fenced
            else f", {column} = NULL"
            for column in ("lease_owner", "lease_token", "lease_expires_at")
        )
        # An attempt commits only on the incarnation this process read (restores.py).
        incarnation = (
            " AND (%(incarnation)s::int8 IS NULL OR "
            "(SELECT coalesce(max(incarnation), 1) FROM restores) = %(incarnation)s::int8)"
            if tried
            else ""
        )
        cas = (
            "cas AS (UPDATE runs SET version = %(n_version)s::int8, state = %(n_state)s::text, "
            "status = %(n_status)s::text, context = %(n_context)s::json, "
            "updated_at = %(at)s::float8, wake_at = %(n_wake_at)s::float8, "
            f"spec_digest = %(n_spec_digest)s::text{release} "
            f"WHERE id = %(b_id)s::text AND version = %(b_version)s::int8 AND {fence}{incarnation} "
            "AND coalesce(json_array_length(context -> 'operations'), 0) <= %(n_listed)s::int8 "
            "RETURNING id)"
        )
        parts = self._parts(
            events, new_ops, updates, cancel, new_timers, new_signals, new_approvals, ends
        )
        if ends:
            parts.append(_tally(new_ops, len(updates)))
        return "WITH " + ",\n".join([cas, *parts]) + _returned(wake)

    # -- a new run ---------------------------------------------------------------------------

    def create(
        self,
        record: Mapping[str, Any],
        first_events: Sequence[Event],
        new_timers: Sequence[NewTimer],
        channel: str | None = None,
        keys: Sequence[Mapping[str, Any]] = (),
    ) -> tuple[str, dict[str, Any]]:
        """The statement that inserts a run with its first events, timers and evidence keys
        (``keys``: rows of ``evidence_keys`` without the run's ID; with ``channel``, and
        notifies it)."""
        t = self.t
        timer_shapes = tuple(tuple(sorted(timer)) for timer in new_timers)
        params = {
            f"r_{column}": bind(t.runs, column, record.get(column)) for column in self.run_columns
        }
        params |= {"n_version": record["version"], "at": record["created_at"], "channel": channel}
        params |= _event_params(first_events)
        for i, (timer, columns) in enumerate(zip(new_timers, timer_shapes, strict=True)):
            params.update(_row_params(t.timers, f"t{i}", columns, [timer]))
        params.update(_row_params(t.evidence_keys, "k", _KEY_COLUMNS, keys))
        sql = self._create_sql(bool(first_events), timer_shapes, len(keys), channel is not None)
        return sql, params

    def _build_create(
        self, events: bool, new_timers: tuple[tuple[str, ...], ...], keys: int, wake: bool
    ) -> str:
        t = self.t
        columns = ", ".join(map(_quote, self.run_columns))
        values = ", ".join(_param(t.runs, f"r_{c}", c) for c in self.run_columns)
        cas = f"cas AS (INSERT INTO runs ({columns}) VALUES ({values}) RETURNING id)"
        parts = self._parts(events, 0, (), False, new_timers, (), ())
        if keys:
            parts.append(_rows("ek", t.evidence_keys, "k", _KEY_COLUMNS, keys, {}))
        return "WITH " + ",\n".join([cas, *parts]) + _returned(wake)

    # -- claims ------------------------------------------------------------------------------

    def _build_claim(self) -> str:
        """Lease up to ``%(limit)s`` runnable runs, none of ``%(skip)s``: lock them with ``SKIP
        LOCKED``, bump each version, set a new random token and an expiry by the database's
        clock, and record a ``leased`` (or, over an expired lease, ``rescued``) event; return the
        claimed runs.

        Its commit does not wait for the disk (``synchronous_commit`` off for this statement
        alone): a claim lost in a crash of the server is a run nobody holds, at the version
        before the claim, and the worker's next commit, the write-ahead record before any call,
        is a compare-and-set on the claimed version fenced by the claim's token, so it is
        refused and no call is made. That commit is synchronous, and PostgreSQL's log is one
        sequence: once it is on disk, so is every claim before it."""
        returned = ", ".join(f"u.{_quote(c)}" for c in self.run_columns)
        return (
            "WITH c AS (SELECT id, version, lease_token, lease_owner FROM runs "
            "WHERE status = 'running' AND (wake_at IS NULL OR wake_at <= %(now)s::float8) "
            f"AND (lease_token IS NULL OR lease_expires_at < {DB_NOW}) "
            "AND NOT (id = ANY(%(skip)s::text[])) "
            "ORDER BY updated_at, id LIMIT %(limit)s::int8 FOR UPDATE SKIP LOCKED),\n"
            "s AS (SELECT set_config('synchronous_commit', 'off', true) AS setting),\n"
            "u AS (UPDATE runs SET version = runs.version + 1, lease_owner = %(owner)s::text, "
            "lease_token = replace(gen_random_uuid()::text, '-', ''), "
            f"lease_expires_at = {DB_NOW} + %(seconds)s::float8 "
            "FROM c, s WHERE runs.id = c.id AND runs.version = c.version "
            "RETURNING runs.*, c.lease_token AS previous_token, c.lease_owner AS previous),\n"
            'ev AS (INSERT INTO history (run_id, version, "at", events) '
            "SELECT u.id, u.version, %(now)s::float8, json_build_array(json_build_array("
            "CASE WHEN u.previous_token IS NULL THEN 'leased' ELSE 'rescued' END, "
            f"{compact.LEASED_SHAPE}, %(owner)s::text, u.previous)) FROM u)\n"
            f"SELECT {returned} FROM u ORDER BY u.updated_at, u.id"
        )


def _tally(new_ops: int, updates: int) -> str:
    """``tl``: the run that this statement ends added to the tallies with its operations as the
    statement leaves them. The parts of one statement all read the data as it was before it,
    so the operations are those it did not touch as they were, and those it inserted (``op``)
    and updated (``upN``) as their ``RETURNING`` gives them."""
    untouched = "SELECT o.effect, o.role, o.status, o.attempts FROM operations o, cas " + (
        "WHERE o.run_id = cas.id"
    )
    if updates:
        ids = ", ".join(f"%(u{i}__id)s::text" for i in range(updates))
        untouched += f" AND o.operation_id NOT IN ({ids})"
    sources = [untouched]
    if new_ops:
        sources.append(f"SELECT {_TALLIED} FROM op")
    sources += [f"SELECT {_TALLIED} FROM up{i}" for i in range(updates)]
    return (
        "tl AS (INSERT INTO tallies (workflow, effect, role, status, slot, n, attempts) "
        "SELECT %(tl_workflow)s::text, '', '', %(n_status)s::text, %(tl_slot)s::int4, 1, 0 "
        "FROM cas UNION ALL "
        "SELECT %(tl_workflow)s::text, x.effect, x.role, x.status, %(tl_slot)s::int4, "
        "count(*), sum(x.attempts) FROM (" + " UNION ALL ".join(sources) + ") AS x "
        "GROUP BY x.effect, x.role, x.status "
        "ON CONFLICT (workflow, effect, role, status, slot) DO UPDATE SET "
        "n = tallies.n + excluded.n, attempts = tallies.attempts + excluded.attempts)"
    )


def _returned(wake: bool) -> str:
    """The end of a one-statement write: the row it wrote, and with ``wake`` a notification on
    ``%(channel)s``, sent when (and only if) the statement commits having written it."""
    if wake:
        return "\nSELECT id, pg_notify(%(channel)s::text, '') FROM cas"
    return "\nSELECT id FROM cas"


def channel_name(schema: str) -> str:
    """The notification channel of the store in ``schema`` (a channel is database-wide, so stores
    in two schemas of one database need two): ``ratchet_wake:SCHEMA``, or a digest of a schema
    name too long for a channel's 63 bytes."""
    name = f"ratchet_wake:{schema}"
    if len(name.encode()) <= 63:
        return name
    return "ratchet_wake:" + hashlib.sha256(schema.encode()).hexdigest()[:40]


#: A lease given back, with a notification when the run is still running (anyone may carry it on).
_RELEASE = (
    "WITH r AS (UPDATE runs SET lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL "
    "WHERE id = %(b_id)s::text AND lease_token = %(b_token)s::text RETURNING status) "
    "SELECT pg_notify(%(channel)s::text, '') FROM r WHERE r.status = 'running'"
)


class PostgresWriter(Writer):
    """Writes a change, a new run and a claim as one statement each, in autocommit."""

    def __init__(self, engine: Engine, dialect: Dialect, clock: Clock) -> None:
        super().__init__(engine, dialect, clock)
        self._channel: str | None = None
        self._single = self._reader  # autocommit: the statement is its own transaction
        self.statements = Statements(
            Tables(
                schema.runs,
                schema.history,
                schema.operations,
                schema.approvals,
                schema.timers,
                schema.signals,
                schema.evidence_keys,
            )
        )

    @contextmanager
    def _write_one(self) -> Iterator[Connection]:
        """A single statement, in autocommit: its own transaction, so without SQLAlchemy's
        ``begin()`` and ``commit()`` around it, which send nothing here but took about a tenth
        of the worker's CPU time for a one-statement write. (This writer's own statements, a
        commit, a new run, a claim, a release, run on the driver: :meth:`_driven`.)"""
        with failures(), self._single.connect() as conn:
            yield conn

    @contextmanager
    def reading(self) -> Iterator[Executes]:
        with self._driven() as conn:
            yield conn

    @contextmanager
    def _driven(self) -> Iterator[Executes]:
        """Statements in autocommit on the pool's psycopg connection (:mod:`.compiled`): through
        SQLAlchemy's connection, taking it from the pool and switching it to autocommit and back
        cost more than psycopg's own work for a statement. A connection the server dropped is
        invalidated, as SQLAlchemy invalidates it, so the pool makes a new one. While anything
        listens to the engine, through SQLAlchemy (see SQLite's ``_write_hot``)."""
        if observed(self._engine):
            with failures(), self._single.connect() as conn:
                yield conn
            return
        dbapi_error: type[Exception] = self._engine.dialect.loaded_dbapi.Error
        with failures():
            pooled = self._engine.raw_connection()
            raw: Any = pooled.driver_connection
            try:
                try:
                    raw.autocommit = True
                    yield self._compiled.driven(raw)
                finally:  # whatever happened (a lost race too): the pool's connections transact
                    if not raw.closed:
                        raw.autocommit = False
            except DBAPIError as exc:
                if self._engine.dialect.is_disconnect(exc.orig, raw, None):  # type: ignore[arg-type]
                    exc.connection_invalidated = True
                    pooled.invalidate(exc)
                raise
            except dbapi_error as exc:  # switching autocommit on a connection that broke
                pooled.invalidate(exc)
                raise DBAPIError.instance("autocommit", (), exc, dbapi_error) from exc
            finally:
                pooled.close()

    def db_now(self) -> float:
        """Now by the server's ``clock_timestamp()``: one round trip."""
        with failures(), self._reader.connect() as conn:
            return float(conn.exec_driver_sql(f"SELECT {DB_NOW}").scalar_one())

    def channel(self) -> str:
        """``ratchet_wake:SCHEMA`` (:func:`channel_name`), the schema read once from the server."""
        if self._channel is None:
            with failures(), self._reader.connect() as conn:
                schema = conn.exec_driver_sql("SELECT current_schema()").scalar_one()
            self._channel = channel_name(str(schema or ""))
        return self._channel

    def _notify_in(self, conn: Executes, payload: str = "") -> None:
        conn.exec_driver_sql(
            "SELECT pg_notify(%(channel)s::text, %(payload)s::text)",
            {"channel": self.channel(), "payload": payload},
        )

    def create_run(self, new: NewRun, history: list[Event], *, wake: bool = False) -> None:
        if new.status in ENDED:  # made ended (an import, a test): counted in a transaction
            super().create_run(new, history, wake=wake)
            return
        channel = self.channel() if wake else None
        sql, params = self.statements.create(
            new.record().__dict__, history, new.timers, channel, new.key_rows()
        )
        with self._driven() as conn:
            conn.exec_driver_sql(sql, params)

    def commit(self, change: Change, after: RunRecord, *, wake: bool = False) -> None:
        out, into = tallies.moves(change, change.base, after) if change.base else (False, False)
        channel = self.channel() if wake else None
        one = None if out else self.statements.commit(change, after, channel, ends=into)
        if one is None:  # it needs a transaction (as one that takes an ended run back does)
            super().commit(change, after, wake=wake)
            return
        one[1]["incarnation"] = self.incarnation
        with recording(), self._driven() as conn:
            if conn.exec_driver_sql(*one).first() is None:
                self._refused(conn, change, change.lease_token is not None, after)

    def release(self, run_id: str, token: str) -> bool:
        with self._driven() as conn:
            notified = conn.exec_driver_sql(
                _RELEASE, {"b_id": run_id, "b_token": token, "channel": self.channel()}
            ).first()
        return notified is not None

    def claim(
        self, owner: str, lease_seconds: float, now: float, limit: int = 1, skip: Sequence[str] = ()
    ) -> list[RunRecord]:
        """Lease up to ``limit`` runnable runs, none of ``skip``, in one statement (``FOR UPDATE
        SKIP LOCKED``: concurrent claims pass each other by instead of queueing)."""
        params = {
            "now": now,
            "limit": limit,
            "owner": owner,
            "seconds": lease_seconds,
            "skip": list(skip),
        }
        with self._driven() as conn:
            rows = conn.exec_driver_sql(self.statements.claim_sql, params).fetchall()
        return [RunRecord(**row._mapping) for row in rows]
