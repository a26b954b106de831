"""The store's tables: their definitions, and creating them when a store is opened.

``spec_versions`` (the exact text a run started under), ``runs`` (state, version, business key,
input, context, lease), ``history`` (each run's append-only history, a row per commit: see
:mod:`~ratchet_runner.store.compact`), ``operations``
(one row per operation ID, under a primary key: idempotency is data), ``approvals``, ``timers``,
``signals``, ``duplicates`` (each time a lookup found more than one change made under one
operation ID), ``evidence_keys`` (the input values a spec relates its runs by, for the evidence
an approver is shown), ``published`` (the version new runs of a workflow start on, where an
operator chose one), ``restores`` (each time the store was put back from a copy), and ``meta``
(what the store recorded about itself: whether it is a practice store, its ID).

Over 400 lines, as one concern: every table of the store, with the queries shared by its
readers and writers, in one place, so that a column is named once.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from functools import cache
from typing import Any

from sqlalchemy import (
    DDL,
    JSON,
    BigInteger,
    Column,
    Connection,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    Select,
    String,
    Table,
    Text,
    UniqueConstraint,
    and_,
    bindparam,
    event,
    func,
    insert,
    literal_column,
    or_,
    select,
    text,
)

from ..errors import UnstorableValue
from ..settings import MAX_BUSINESS_KEY, MAX_NAME, is_unicode, shown, unstorable
from ..words import ENDED, OperationStatus, RunStatus

# Plain ``json`` on PostgreSQL too, not ``jsonb``: the history must come back exactly as written.
# ``jsonb`` reorders keys, turns 1e20 into an integer and refuses "\u0000" in a string.
JSON_TYPE = JSON()
metadata = MetaData()


def _run_rows(name: str, *columns: Column[Any]) -> Table:
    """A table of rows a run owns, numbered in the order they were written: ``id``, ``run_id``,
    then ``columns``."""
    return Table(
        name,
        metadata,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("run_id", String(40), ForeignKey("runs.id"), nullable=False),
        *columns,
    )


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
    Column("business_key", String(MAX_BUSINESS_KEY), nullable=False),
    Column("state", String(200), nullable=False),
    Column("status", String(20), nullable=False),
    Column("version", Integer, nullable=False),
    Column("input", JSON_TYPE, nullable=False),
    Column("context", JSON_TYPE, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("wake_at", Float),
    Column("lease_owner", String(200)),
    Column("lease_token", String(64)),
    Column("lease_expires_at", Float),
    #: When ``ratchet prune`` compacted the finished run to its tombstone (None: not pruned).
    Column("pruned_at", Float),
    UniqueConstraint("workflow", "business_key", name="uq_runs_business_key"),
)
Index("ix_runs_status", runs.c.status, runs.c.wake_at)
# A claim takes the runnable run least recently moved: in index order, so a claim costs the same
# with a backlog of a hundred thousand runs as with ten.
Index("ix_runs_claim", runs.c.status, runs.c.updated_at, runs.c.id)
# Prune takes the finished runs not yet pruned that finished longest ago, in index order: the
# runs pruned before it (however many) are not walked.
Index("ix_runs_prune", runs.c.status, runs.c.pruned_at, runs.c.updated_at, runs.c.id)
# The runs a lease holds (a handful, whatever the history), by when it expires: expired leases
# and stuck runs are found without reading every run.
Index(
    "ix_runs_lease",
    runs.c.lease_expires_at,
    sqlite_where=runs.c.lease_token.is_not(None),
    postgresql_where=runs.c.lease_token.is_not(None),
)

#: A run's history: a row per version of the run (each commit that writes history makes one),
#: its events in the compact form of :mod:`~ratchet_runner.store.compact`. Clustered by run and
#: version on SQLite (no row ID, no other index): a run's history is one range of the table.
history = Table(
    "history",
    metadata,
    Column("run_id", String(40), ForeignKey("runs.id"), nullable=False),
    Column("version", Integer, nullable=False),
    Column("at", Float, nullable=False),
    Column("events", JSON_TYPE, nullable=False),
    PrimaryKeyConstraint("run_id", "version", name="pk_history"),
    sqlite_with_rowid=False,
)

operations = Table(
    "operations",
    metadata,
    Column("operation_id", String(64), primary_key=True),
    Column("run_id", String(40), ForeignKey("runs.id"), nullable=False),
    Column("effect", String(200), nullable=False),
    Column("role", String(20), nullable=False),
    Column("args", JSON_TYPE, nullable=False),
    Column("fingerprint", String(64)),  # null: that of args (records.fingerprint)
    Column("status", String(20), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("receipt", JSON_TYPE),
    Column("last_error", Text),
    Column("compensates", String(64)),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
)
Index("ix_operations_run", operations.c.run_id)
#: An operation's receipt is written once on SQLite (revision 0007): the history's ``done``
#: events read it from there (:mod:`.compact`), so a receipt written over another would change
#: what an event said. A trigger refuses it, whichever statement writes it (no receipt yet is
#: SQL ``NULL`` or JSON ``null``, as the JSON type writes None). PostgreSQL's done events keep
#: their receipts (in a trial, a row trigger there cost 6-12 % more CPU a step), so it has none.
RECEIPT_ONCE = "ratchet: the receipt of an operation is written once"
#: The database that keeps receipts written once (and so may take a done event's from there).
RECEIPTS_ONCE_ON = "sqlite"
_RECEIPT_TRIGGER = DDL(  # type: ignore[no-untyped-call]
    "CREATE TRIGGER IF NOT EXISTS operations_receipt_once BEFORE UPDATE OF receipt ON "
    "operations WHEN coalesce(OLD.receipt, 'null') != 'null' "
    "AND NEW.receipt IS NOT OLD.receipt "
    f"BEGIN SELECT RAISE(ABORT, '{RECEIPT_ONCE}'); END"
)
event.listen(operations, "after_create", _RECEIPT_TRIGGER.execute_if(dialect=RECEIPTS_ONCE_ON))
#: The operations whose outcome is unknown, and the compensations that failed for good: what the
#: metrics count (a reconcile owed, a person needed), without reading every operation. Each
#: holds only those operations, whatever the history. A query repeats the condition with the
#: words written in its SQL (:data:`UNKNOWN_OPERATION`, :data:`FAILED_UNDO`): SQLite does not
#: match a bound parameter to a partial index's condition.
for _name, _where in (
    ("ix_operations_unknown", "status = 'unknown'"),
    ("ix_operations_failed_undo", "role = 'compensation' AND status IN ('refused', 'exhausted')"),
):
    Index(
        _name,
        operations.c.run_id,
        sqlite_where=text(_where),
        postgresql_where=text(_where),
    )

approvals = _run_rows(
    "approvals",
    Column("name", String(200), nullable=False),
    Column("effect", String(200), nullable=False),
    Column("digest", String(64), nullable=False),
    Column("decision", String(20), nullable=False),
    Column("actor", String(MAX_NAME), nullable=False),
    Column("role", String(MAX_NAME), nullable=False),
    Column("reason", Text),
    Column("policy_version", String(100), nullable=False),
    Column("spec_digest", String(64), nullable=False),
    Column("decided_at", Float, nullable=False),
    Column("expires_at", Float),
    Column("consumed_at", Float),
)
Index("ix_approvals_run", approvals.c.run_id)

timers = _run_rows(
    "timers",
    Column("state", String(200), nullable=False),
    Column("event", String(200), nullable=False),
    Column("due_at", Float, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("fired_at", Float),
    Column("outcome", String(20)),
)
Index("ix_timers_due", timers.c.fired_at, timers.c.due_at)
Index("ix_timers_run", timers.c.run_id)

#: Each time a lookup found one operation ID's change made more than once (a provider that does
#: not deduplicate committed a request late): what the operator queue and the metrics count.
#: A table of its own, not a column, so that a store made before it gains it as it is opened.
duplicates = _run_rows(
    "duplicates",
    Column("operation_id", String(64), nullable=False),
    Column("workflow", String(200), nullable=False),
    Column("effect", String(200), nullable=False),
    Column("role", String(20), nullable=False),
    Column("receipts", JSON_TYPE, nullable=False),
    Column("via", String(20), nullable=False),
    Column("detected_at", Float, nullable=False),
)
Index("ix_duplicates_run", duplicates.c.run_id)

#: The value each run was started with at an input path its spec relates runs by (an approval's
#: ``evidence.related_runs.by``): ``value`` is a digest of the value's normalised JSON, so any
#: value compares exactly and the row's width is fixed. A table of its own, indexed, rather than
#: a query into the ``input`` column: JSON paths are read differently on SQLite and PostgreSQL,
#: and no index can serve a path a spec declares; here finding the other runs of an order is an
#: index lookup on both, however many runs the store holds.
evidence_keys = _run_rows(
    "evidence_keys",
    Column("workflow", String(200), nullable=False),
    Column("path", String(200), nullable=False),
    Column("value", String(64), nullable=False),
    Column("created_at", Float, nullable=False),
)
Index(
    "ix_evidence_keys_lookup",
    evidence_keys.c.workflow,
    evidence_keys.c.path,
    evidence_keys.c.value,
    evidence_keys.c.created_at,
)

#: What a store records about itself, once, when it is created: ``created_at`` (epoch seconds)
#: and, for a practice store, ``practice`` (``true``): the one kind of store on which the
#: command line honours ``RATCHET_NOW``; since revision 0003, ``store_id`` (the same in every
#: copy) and ``sequence`` (the attempts committed, kept on SQLite for its high-water mark). A
#: key/value table, so that later facts need no new one.
meta = Table(
    "meta",
    metadata,
    Column("key", String(100), primary_key=True),
    Column("value", Text, nullable=False),
)

#: Each time the store was put back from a copy (``ratchet restore``, ``ratchet restore --mark``,
#: ``ratchet db mark-restored``): the incarnation it became (the store as made is 1), when, the
#: restore window's end (until then every operation is looked up before its first call), when the
#: copy was taken (if known), what was put back and by whom
#: (:mod:`~ratchet_runner.store.restores`).
restores = Table(
    "restores",
    metadata,
    Column("incarnation", Integer, primary_key=True, autoincrement=False),
    Column("restored_at", Float, nullable=False),
    Column("window_until", Float, nullable=False),
    Column("backup_taken_at", Float),
    Column("source", Text, nullable=False),
    Column("by", String(MAX_NAME), nullable=False),
)


def _word(value: str) -> Any:
    """``value`` written into a statement's SQL, not bound (see the partial indexes above)."""
    return literal_column(f"'{value}'")


UNKNOWN_OPERATION = operations.c.status == _word(OperationStatus.UNKNOWN)
FAILED_UNDO = and_(
    operations.c.role == _word("compensation"),
    operations.c.status.in_([_word(OperationStatus.REFUSED), _word(OperationStatus.EXHAUSTED)]),
)

#: What the ended runs add up to (since revision 0005), so that metrics and ``ratchet status``
#: never read every finished run: per workflow, the runs that ended with each status (``role``
#: empty, ``effect`` empty) and the operations those runs made, per effect, role and status, with
#: their attempts (as each run stood when it ended). Kept in the transaction that ends a run (and
#: the one that forgets it), spread over :data:`~ratchet_runner.store.tallies.SLOTS` rows by the
#: run's ID, so that workers ending runs at once seldom wait on one row
#: (:mod:`~ratchet_runner.store.tallies`).
tallies = Table(
    "tallies",
    metadata,
    Column("workflow", String(200), nullable=False),
    Column("effect", String(200), nullable=False),
    Column("role", String(20), nullable=False),
    Column("status", String(20), nullable=False),
    Column("slot", Integer, nullable=False),
    Column("n", BigInteger, nullable=False),
    Column("attempts", BigInteger, nullable=False),
    PrimaryKeyConstraint("workflow", "effect", "role", "status", "slot", name="pk_tallies"),
)

signals = Table(
    "signals",
    metadata,
    Column("signal_id", String(MAX_NAME), primary_key=True),
    Column("run_id", String(40), ForeignKey("runs.id"), primary_key=True),
    Column("event", String(200), nullable=False),
    Column("data", JSON_TYPE, nullable=False),
    Column("received_at", Float, nullable=False),
)

#: The version new runs of a workflow start on, where an operator set one (``ratchet versions
#: WORKFLOW --start-new-on N``): the digest of that version, its number, who set it and when.
#: A workflow with no row here starts new runs on the version given (the newest stored moves
#: older runs on, by their spec's ``on_version_change``).
published = Table(
    "published",
    metadata,
    Column("name", String(200), primary_key=True),
    Column("digest", String(64), nullable=False),
    Column("spec_version", Integer, nullable=False),
    Column("set_by", String(MAX_NAME), nullable=False),
    Column("set_at", Float, nullable=False),
)

#: Every table but ``meta``, children before the runs they belong to (the order a reset empties
#: them in).
RUN_TABLES = (
    tallies,
    history,
    operations,
    approvals,
    timers,
    signals,
    duplicates,
    evidence_keys,
    runs,
    published,
    spec_versions,
)


def free(db_now: Any) -> Any:
    """A run no live lease holds: no lease, or one ``db_now`` (the database's clock) says has
    expired."""
    return or_(runs.c.lease_token.is_(None), runs.c.lease_expires_at < db_now)


def runnable(now: Any, db_now: Any) -> Any:
    """A run a worker may claim at ``now``: running, not waiting for a back-off, and
    :func:`free`."""
    return and_(
        runs.c.status == RunStatus.RUNNING,
        or_(runs.c.wake_at.is_(None), runs.c.wake_at <= now),
        free(db_now),
    )


def lease_expired(db_now: Any) -> Any:
    """A run whose lease ran out by the database's clock: its worker died or froze."""
    return and_(runs.c.lease_token.is_not(None), runs.c.lease_expires_at < db_now)


def unmoved(now: float, older_than: float) -> Any:
    """A runnable run, unleased, that nobody has touched for ``older_than`` seconds (nor was
    it due to wake up in that time): no worker is running."""
    return and_(
        runs.c.status == RunStatus.RUNNING,
        runs.c.lease_token.is_(None),
        runs.c.updated_at < now - older_than,
        or_(runs.c.wake_at.is_(None), runs.c.wake_at < now - older_than),
    )


def runs_listed(
    status: str | None,
    limit: int,
    offset: int,
    oldest: bool,
    *,
    workflow: str | None = None,
    business_key: str | None = None,
    created_before: float | None = None,
) -> Any:
    """A page of runs, newest first (``oldest``: those changed longest ago first), with the
    status, workflow and business key given (None: any), created before ``created_before``."""
    order = (runs.c.updated_at, runs.c.id) if oldest else (runs.c.created_at.desc(), runs.c.id)
    query = select(runs).order_by(*order).offset(offset).limit(limit)
    for column, value in (
        (runs.c.status, status),
        (runs.c.workflow, workflow),
        (runs.c.business_key, business_key),
    ):
        if value is not None:
            query = query.where(column == value)
    if created_before is not None:
        query = query.where(runs.c.created_at < created_before)
    return query


def related_runs(workflow: str, path: str, value: str, exclude: str | None, limit: int) -> Any:
    """The runs of ``workflow`` started with ``value`` (a digest) at the input ``path``, newest
    first, but ``exclude``: at most ``limit``."""
    query = (
        select(runs)
        .join(evidence_keys, evidence_keys.c.run_id == runs.c.id)
        .where(
            evidence_keys.c.workflow == workflow,
            evidence_keys.c.path == path,
            evidence_keys.c.value == value,
        )
        .order_by(evidence_keys.c.created_at.desc(), runs.c.id.desc())
        .limit(limit)
    )
    if exclude is not None:
        query = query.where(runs.c.id != exclude)
    return query


#: Every spec version, newest first, without its text.
SPEC_VERSIONS = select(
    spec_versions.c.digest,
    spec_versions.c.name,
    spec_versions.c.spec_version,
    spec_versions.c.policy_version,
    spec_versions.c.created_at,
).order_by(spec_versions.c.created_at.desc(), spec_versions.c.digest)


#: The spec version of every live run (one not done or cancelled), each once, in digest order.
LIVE_SPEC_DIGESTS = (
    select(runs.c.spec_digest)
    .where(runs.c.status.not_in(ENDED))
    .distinct()
    .order_by(runs.c.spec_digest)
)


#: The earliest time after ``:b_now`` at which a timer falls due, and at which a run's back-off
#: ends (:meth:`~ratchet_runner.store.store.Store.next_due`).
NEXT_DUE = select(
    select(func.min(timers.c.due_at))
    .where(timers.c.fired_at.is_(None), timers.c.due_at > bindparam("b_now"))
    .scalar_subquery(),
    select(func.min(runs.c.wake_at))
    .where(runs.c.status == RunStatus.RUNNING, runs.c.wake_at > bindparam("b_now"))
    .scalar_subquery(),
)


@cache
def _column_checks(table: Table) -> dict[str, tuple[bool, int | None]]:
    """What :func:`unfit` checks of each column of ``table``: whether it holds JSON, and the
    longest text it keeps (None: no limit). Read from the table once: a commit checks every row
    it writes."""
    return {
        column.name: (isinstance(column.type, JSON), getattr(column.type, "length", None))
        for column in table.columns
    }


def unfit(table: Table, row: Mapping[str, Any], label: str) -> str | None:
    """Why ``row`` cannot be written to ``table`` as it is, or None: text longer than its column
    (PostgreSQL refuses it, SQLite would keep it), text that is not valid Unicode, JSON with a
    number that is not finite (PostgreSQL refuses ``Infinity`` and ``NaN``, SQLite would keep
    what no JSON reader takes). ``label`` names the row in the message (``signal``)."""
    checks = _column_checks(table)
    for name, value in row.items():
        check = checks.get(name)
        if check is None or value is None:
            continue
        json, length = check
        if json:
            problem = unstorable(value, f"{label} {_SHOWN_AS.get((table.name, name), name)}")
            if problem is not None:
                return problem
        elif isinstance(value, str):
            if length is not None and len(value) > length:
                return f"{label} {name} is {len(value):,} characters long (at most {length})"
            if not value.isascii() and not is_unicode(value):
                return f"{label} {name} '{shown(value)}' is not valid Unicode (a lone surrogate)"
    return None


#: Columns a message names otherwise: an event's data is checked as the history's ``events``.
_SHOWN_AS = {("history", "events"): "data"}


def refuse_unfit(rows: Iterable[tuple[str, Mapping[str, Any], str]]) -> None:
    """Raise :class:`~ratchet_runner.errors.UnstorableValue` for the first row that cannot be
    written as it is (:func:`unfit`), before any is. ``rows``: each as the name of its table,
    its values, and how a message names it (as :class:`~ratchet_runner.store.records.Change`
    lists them)."""
    for name, row, label in rows:
        problem = unfit(metadata.tables[name], row, label)
        if problem is not None:
            raise UnstorableValue(f"cannot store {problem}; nothing was written")


def prunable_runs(before: float, limit: int, after: tuple[float, str] | None) -> Select[Any]:
    """The finished runs prune may take (see :meth:`~ratchet_runner.store.store.Store.prunable`):
    in the order of ``ix_runs_prune``."""
    armed = select(timers.c.id).where(timers.c.run_id == runs.c.id, timers.c.fired_at.is_(None))
    unsettled = select(operations.c.operation_id).where(
        operations.c.run_id == runs.c.id,
        operations.c.status.in_(("pending", "unknown")),
    )
    query = select(runs).where(
        runs.c.status.in_(tuple(ENDED)),
        runs.c.pruned_at.is_(None),
        runs.c.updated_at < before,
        ~armed.exists(),
        ~unsettled.exists(),
    )
    if after is not None:
        at, run_id = after
        query = query.where(
            or_(runs.c.updated_at > at, and_(runs.c.updated_at == at, runs.c.id > run_id))
        )
    return query.order_by(runs.c.updated_at, runs.c.id).limit(limit)


def forgettable_runs(
    digest: str, before: float, limit: int, after: tuple[float, str] | None
) -> Select[Any]:
    """Pruned runs of spec version ``digest`` that finished before ``before``, oldest first
    (``after``: past that one), at most ``limit`` (see
    :meth:`~ratchet_runner.store.store.Store.forgettable`)."""
    query = select(runs).where(
        runs.c.status.in_(tuple(ENDED)),
        runs.c.pruned_at.is_not(None),
        runs.c.spec_digest == digest,
        runs.c.updated_at < before,
    )
    if after is not None:
        at, run_id = after
        query = query.where(
            or_(runs.c.updated_at > at, and_(runs.c.updated_at == at, runs.c.id > run_id))
        )
    return query.order_by(runs.c.updated_at, runs.c.id).limit(limit)


def pruned_runs(limit: int, after: str | None) -> Select[Any]:
    """Runs pruned to their tombstones, in ID order (``after``: past that ID), at most
    ``limit`` (see :meth:`~ratchet_runner.store.store.Store.tombstones`)."""
    query = select(runs).where(runs.c.pruned_at.is_not(None))
    if after is not None:
        query = query.where(runs.c.id > after)
    return query.order_by(runs.c.id).limit(limit)


def record_creation(conn: Connection, practice: bool) -> None:
    """Record in ``meta`` when the store was created, and whether as a practice store, unless
    that is recorded already."""
    known = conn.execute(select(meta.c.key).where(meta.c.key == "created_at")).first()
    if known is not None:
        return
    rows = [{"key": "created_at", "value": repr(time.time())}]
    if practice:
        rows.append({"key": "practice", "value": "true"})
    conn.execute(insert(meta), rows)
