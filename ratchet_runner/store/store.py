"""The store: Ratchet's durable state, read here and written through one writer per database.

:class:`Store` opens the database (:mod:`~ratchet_runner.store.dialects`), creates the tables it
lacks (:mod:`~ratchet_runner.store.tables`), answers every read with records
(:mod:`~ratchet_runner.store.records`), and hands every write to the writer it picked for that
database when it was opened: :class:`~ratchet_runner.store.sqlite.SQLiteWriter` (each write one
``BEGIN IMMEDIATE`` transaction) or :class:`~ratchet_runner.store.postgres.PostgresWriter` (one
statement in autocommit where one can say it), both a :class:`~ratchet_runner.store.writer.Writer`.

Every change to a run is one :class:`~ratchet_runner.store.records.Change` applied by
:meth:`Store.commit` atomically, after a compare-and-set of the run's version (and its lease):
losing the race raises :class:`~ratchet_runner.errors.VersionConflict`; nothing is overwritten.
Reads are single statements (in autocommit on PostgreSQL).

Over 500 lines: one concern, the store's whole surface, every read and every write a caller may
ask for, each a short method in front of one statement (the statements themselves are in
:mod:`~ratchet_runner.store.tables` and the writers).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, bindparam, exists, func, select
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.pool import Pool

from ..clock import Clock, SystemClock
from ..errors import RunNotFound, StoreCopiedBack, StoreError, StoreRevision, VersionConflict
from ..words import ENDED, EventKind, RunStatus
from . import backup, schema
from . import restores as incarnations
from .bell import Bell, arms_soon, bell_for, wakes
from .compact import CONTEXT as _CONTEXT
from .compact import HISTORY as _HISTORY
from .compact import RECEIPTS as _RECEIPTS
from .compact import expand, lease_times, listed_in
from .context import RunContext
from .dialects import (
    close_engine,
    default_url,
    dialect_for,
    failure,
    failures,
    redact,
    retire_pool,
    sqlite_url,
    why,
)
from .postgres import PostgresWriter
from .records import (
    ApprovalRecord,
    Change,
    DuplicateRecord,
    Event,
    EventRecord,
    NewRun,
    OperationRecord,
    RunRecord,
    SignalRecord,
    SpecVersion,
    TimerRecord,
)
from .restores import Mark, Restore, database_file
from .sqlite import SQLiteWriter
from .stats import Stats, gather, status_counts
from .tables import (
    LIVE_SPEC_DIGESTS,
    NEXT_DUE,
    SPEC_VERSIONS,
    approvals,
    duplicates,
    forgettable_runs,
    history,
    lease_expired,
    meta,
    operations,
    prunable_runs,
    pruned_runs,
    published,
    refuse_unfit,
    related_runs,
    runnable,
    runs,
    runs_listed,
    signals,
    spec_versions,
    timers,
    unmoved,
)
from .writer import Writer

#: The writer of each database, by its dialect's name (any other database: the plain one).
_WRITERS: dict[str, type[Writer]] = {"sqlite": SQLiteWriter, "postgresql": PostgresWriter}

_PUBLISHED = select(published.c.digest, published.c.spec_version).where(
    published.c.name == bindparam("b_name")
)
_RUN_BY_ID = select(runs).where(runs.c.id == bindparam("b_id"))
_RUN_BY_KEY = select(runs).where(
    runs.c.workflow == bindparam("b_workflow"), runs.c.business_key == bindparam("b_key")
)
_OPERATION_BY_ID = select(operations).where(operations.c.operation_id == bindparam("b_id"))
#: How many runs one read of several runs' rows names at most.
_RUNS_PER_READ = 500


class Store:
    """Ratchet's durable state behind one SQLAlchemy engine."""

    def __init__(
        self,
        url: str | None = None,
        *,
        create: bool = True,
        practice: bool = False,
        clock: Clock | None = None,
        upgrade: bool | None = None,
        checked: bool = True,
    ) -> None:
        """Open the store at ``url`` (default: :func:`default_url`): a new store is made at this
        code's schema revision when ``create``; an older one is upgraded when ``create`` and
        ``upgrade`` (default: on SQLite, never on another database), else refused, and a newer
        one refused (:class:`~ratchet_runner.errors.StoreRevision`; see
        :mod:`~ratchet_runner.store.schema`). ``practice`` records, when this call creates
        the store, that it is a practice store (see :meth:`is_practice`); opening an existing
        store never changes what it is. ``clock`` is the clock leases expire by on SQLite
        (default: the system clock; a simulation injects its own); PostgreSQL's leases expire
        by the server's clock. ``checked=False`` opens it whatever its schema revision, and
        changes nothing of it: what ``ratchet db`` reads and moves it with."""
        self.url = url or default_url()
        self.clock: Clock = clock or SystemClock()
        #: Rung after each commit here that is a wake-up (:func:`wakes`), for this process's
        #: idle workers on the same store.
        self.bell: Bell = bell_for(self.url)
        self.dialect = dialect_for(self.url, self.clock)
        #: Set when "now" is overridden for practice (``RATCHET_NOW``): every event a change
        #: commits then also records the real time, as ``real_at`` in its data.
        self.stamp_real_time = False
        self._retired: list[Pool] = []  # pools replaced by drop_connections()
        try:
            self.engine = self.dialect.engine(self.url)
            self._reader = self.dialect.autocommit(self.engine)
            self._db_now = self.dialect.now()
            writer = _WRITERS.get(self.dialect.name, Writer)
            self._writer = writer(self.engine, self.dialect, self.clock)
            if upgrade is None:
                upgrade = self.dialect.name == "sqlite"
            #: The store's latest restore (None: never put back from a copy), read as it opens.
            self.restored: Restore | None = None
            self._standing: incarnations.Standing | None = None
            self._mark: Mark | None = None
            if checked:
                schema.prepare(self, create=create, practice=practice, upgrade=upgrade)
                self._read_incarnation(writable=create)
        except (StoreRevision, StoreCopiedBack):
            self.close()
            raise
        except StoreError as exc:  # a setting refused, or the database failed on the schema
            if hasattr(self, "engine"):
                self.close()
            raise StoreError(f"cannot open the store at {redact(self.url)}: {exc}") from None
        except SQLAlchemyError as exc:
            raise StoreError(
                f"cannot open the store at {redact(self.url)}: {failure(exc)}"
            ) from None
        except Exception as exc:  # a bad URL, a missing driver
            raise StoreError(f"cannot open the store at {redact(self.url)}: {exc}") from None

    def close(self) -> None:
        """Close every connection the store opened. A thread that uses the store afterwards gets
        a :class:`~ratchet_runner.errors.StoreError`, not a new connection nobody would close."""
        if getattr(self, "_mark", None) is not None:
            self._mark.close()  # type: ignore[union-attr]
        close_engine(self.engine, self._retired)

    def _read_incarnation(self, *, writable: bool) -> None:
        """Read the store's latest restore and its standing; for an SQLite file opened for
        writing, check it against the high-water mark beside it (refused when it was put back
        by a plain copy: :class:`~ratchet_runner.errors.StoreCopiedBack`) and keep the mark."""
        database = self.database_file() if writable else None
        if self._mark is not None:
            self._mark.close()
            self._mark = None
        mark = Mark(database) if database is not None else None
        # The mark first, then the store: a mark is raised only after its commit, so a store
        # read after its mark holds at least what the mark says, however many workers commit.
        seen = mark.read() if mark is not None else None
        with self._read() as conn:
            standing = incarnations.standing(conn)
            self._became(incarnations.latest(conn), standing)
        if mark is not None:
            self._mark = mark
            mark.check(standing, seen)

    def _became(self, restored: Restore | None, standing: incarnations.Standing) -> None:
        """Keep what the store now is: its latest restore, its standing, and the incarnation
        its writer checks every attempt's commit against."""
        self.restored = restored
        self._standing = standing
        self._writer.incarnation = standing.incarnation

    def database_file(self) -> Path | None:
        """The file of an SQLite store (None for another database, or one in memory)."""
        if self.dialect.name != "sqlite":
            return None
        return database_file(self.engine.url.database)

    def drop_connections(self) -> None:
        """Open new connections from now on, instead of reusing pooled ones that may be dead (after
        an outage); a connection in use now is closed once it is given back."""
        retire_pool(self.engine, self._retired)

    @contextmanager
    def schema_transaction(self) -> Iterator[Connection]:
        """A write transaction holding the schema's lock (see
        :mod:`~ratchet_runner.store.schema`)."""
        with self._writer.schema_transaction(self.dialect) as conn:
            yield conn

    @contextmanager
    def schema_read(self) -> Iterator[Connection]:
        """A read of the schema, with no lock and no write (see
        :mod:`~ratchet_runner.store.schema`)."""
        with self._read() as conn:
            yield conn

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        with failures(), self._reader.connect() as conn:
            yield conn

    # -- the store's own clock and facts ------------------------------------------------------

    def _stamped(self, history: list[Event]) -> list[Event]:
        """``history``, each event with the real time beside it when "now" is overridden."""
        if not self.stamp_real_time:
            return history
        real = time.time()
        return [(kind, {**data, "real_at": data.get("real_at", real)}) for kind, data in history]

    def db_now(self) -> float:
        """Now by the store's clock, in epoch seconds: what decisions bounded by a deadline or an
        expiry are judged by (through :meth:`ratchet_runner.engine.runner.Runner.decision_now`), so
        every process deciding on one run reads one clock. SQLite lives on this host: its clock is
        this host's (read through the store's clock). PostgreSQL: the server's
        ``clock_timestamp()``, one round trip."""
        return self._writer.db_now()

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
        self._writer.mark_practice()

    # -- restores (:mod:`~ratchet_runner.store.restores`) -------------------------------------

    def restore_window(self, now: float) -> Restore | None:
        """The restore whose window is open at ``now`` (every operation is then looked up before
        its first call), or None."""
        found = self.restored
        return found if found is not None and found.open_at(now) else None

    def restores(self) -> list[Restore]:
        """Every time the store was put back from a copy, oldest first."""
        with self._read() as conn:
            return incarnations.history(conn)

    def mark_restored(
        self,
        *,
        at: float,
        window: float,
        source: str,
        by: str,
        backup_taken_at: float | None = None,
    ) -> Restore:
        """Record that the store was put back from a copy (``ratchet db mark-restored`` after a
        PostgreSQL restore, ``ratchet restore --mark`` after a plain copy): a new incarnation,
        with its restore window of ``window`` seconds from ``at``. Refused while a worker holds a
        live lease (it would carry on from what it holds in memory)."""
        database = self.database_file()
        mark = incarnations.read_mark(incarnations.mark_path(database)) if database else None
        with self._writer.schema_transaction(self.dialect) as conn:
            incarnations.refuse_live_leases(conn, at)
            made = incarnations.record_restore(
                conn,
                at=at,
                window=window,
                source=source,
                by=by,
                backup_taken_at=backup_taken_at,
                after=mark.incarnation if mark is not None else 1,
            )
            standing = incarnations.standing(conn)
        self._became(made, standing)
        if database is not None:
            Mark(database).raise_to(standing, force=True)
        return made

    def take_backup(self, target: Path, at: float) -> int:
        """Copy this SQLite store to ``target`` while workers run (:func:`backup.take`); its
        size in bytes. Refused for another database (PostgreSQL: ``pg_dump``)."""
        database = self.database_file()
        if database is None:
            raise StoreError(
                f"ratchet backup copies an SQLite store; {redact(self.url)} is not one: back "
                "PostgreSQL up with pg_dump or its point-in-time recovery, then run `ratchet db "
                "mark-restored` after putting it back (docs/how-to/operate-a-store.md)"
            )
        return backup.take(database, target, at)

    def restore_from(
        self,
        source: Path,
        *,
        at: float,
        window: float,
        by: str,
        checkpoint: backup.Checkpoint | None = None,
    ) -> Restore:
        """Put the SQLite backup ``source`` back over this store as a new incarnation, with its
        restore window (see :mod:`~ratchet_runner.store.backup`). Refused for another database,
        and while a worker holds a live lease."""
        database = self.database_file()
        if database is None:
            raise StoreError(
                f"ratchet restore puts back an SQLite backup; {redact(self.url)} is not an "
                "SQLite file: restore PostgreSQL with pg_restore or its point-in-time recovery, "
                "then run `ratchet db mark-restored` (docs/how-to/operate-a-store.md)"
            )
        backup.stage(source, database)

        def prepare(path: Path) -> tuple[Restore, incarnations.Standing]:
            copy = Store(sqlite_url(path), checked=False, clock=self.clock)
            try:
                schema.prepare(copy, create=True, practice=False, upgrade=True)
                mark = incarnations.read_mark(incarnations.mark_path(database))
                after = max(self._live_standing().incarnation, mark.incarnation if mark else 1)
                with copy.schema_transaction() as conn:
                    made = incarnations.record_restore(
                        conn,
                        at=at,
                        window=window,
                        source=source.name,
                        by=by,
                        backup_taken_at=backup.taken_at(path),
                        after=after,
                    )
                    return made, incarnations.standing(conn)
            finally:
                copy.close()

        def refuse_workers() -> incarnations.Standing:
            with self._read() as conn:
                incarnations.refuse_live_leases(conn, at)
            return self._live_standing()

        ready = checkpoint or backup.no_checkpoint
        made = backup.put_back(database, prepare, refuse_workers, ready)
        self._became(made, self._live_standing())
        return made

    def _live_standing(self) -> incarnations.Standing:
        with self._read() as conn:
            return incarnations.standing(conn)

    # -- specs ------------------------------------------------------------------------------

    def save_spec(
        self, digest: str, name: str, spec_version: int, policy_version: str, text: str, at: float
    ) -> None:
        """Record the exact spec text under its digest (once)."""
        self._writer.save_spec(digest, name, spec_version, policy_version, text, at)

    def latest_spec(self, name: str) -> tuple[str, int] | None:
        """The digest and version of the version of workflow ``name`` that older runs move on
        to (by their spec's ``on_version_change``): the one new runs start on when an operator
        set one (:meth:`published`), else the newest stored."""
        chosen = self.published(name)
        if chosen is not None:
            return chosen
        with self._read() as conn:
            row = conn.execute(
                select(spec_versions.c.digest, spec_versions.c.spec_version)
                .where(spec_versions.c.name == name)
                .order_by(spec_versions.c.spec_version.desc(), spec_versions.c.created_at.desc())
                .limit(1)
            ).first()
        return (str(row[0]), int(row[1])) if row is not None else None

    def published(self, name: str) -> tuple[str, int] | None:
        """The digest and version new runs of workflow ``name`` start on, when an operator set
        one (``ratchet versions NAME --start-new-on N``); ``None``: each start runs the version
        it is given."""
        with self._writer.reading() as conn:
            row = conn.execute(_PUBLISHED, {"b_name": name}).first()
        return (str(row[0]), int(row[1])) if row is not None else None

    def publish(self, name: str, version: int | None, by: str, at: float) -> tuple[str, int] | None:
        """Set the version new runs of workflow ``name`` start on (its newest stored text), by
        ``by`` at ``at``; ``None`` clears it. A version not stored is refused
        (:class:`~ratchet_runner.errors.UsageError`), nothing written."""
        return self._writer.publish(name, version, by, at)

    def workflow_versions(self, name: str) -> list[tuple[SpecVersion, int]]:
        """Every stored version of workflow ``name``, newest first, each with how many of its
        runs are open (not done or cancelled)."""
        open_runs = (
            select(runs.c.spec_digest, func.count().label("n"))
            .where(runs.c.workflow == name, runs.c.status.not_in(ENDED))
            .group_by(runs.c.spec_digest)
            .subquery()
        )
        query = (
            select(
                spec_versions.c.digest,
                spec_versions.c.name,
                spec_versions.c.spec_version,
                spec_versions.c.policy_version,
                spec_versions.c.created_at,
                func.coalesce(open_runs.c.n, 0),
            )
            .outerjoin(open_runs, open_runs.c.spec_digest == spec_versions.c.digest)
            .where(spec_versions.c.name == name)
            .order_by(
                spec_versions.c.spec_version.desc(),
                spec_versions.c.created_at.desc(),
                spec_versions.c.digest,
            )
        )
        with self._read() as conn:
            return [(SpecVersion(*row[:5]), int(row[5])) for row in conn.execute(query)]

    def spec_text(self, digest: str) -> str:
        with self._read() as conn:
            row = conn.execute(
                select(spec_versions.c.text).where(spec_versions.c.digest == digest)
            ).first()
        if row is None:
            raise StoreError(f"no spec version {digest[:12]} in the store")
        return str(row[0])

    # -- runs -------------------------------------------------------------------------------

    def create_run(self, new: NewRun) -> tuple[RunRecord, bool]:
        """Create the run ``new``, or return the one that already exists for its business key.

        Returns ``(run, created)``. Starting the same piece of work twice is not an error: it is
        the same run (whether it was asked with the same input is the runner's to judge:
        :meth:`~ratchet_runner.engine.runner.Runner.start`). A value the store cannot keep as it
        is (a business key too long, a number that is not finite, text that is not valid
        Unicode) raises :class:`~ratchet_runner.errors.UnstorableValue`, the same on every
        database, and nothing is written.
        """
        refuse_unfit(new.rows())
        wake = new.wake and (new.status == RunStatus.RUNNING or arms_soon(new.timers, new.at))
        try:
            self._writer.create_run(new, self._stamped(new.history()), wake=wake)
        except IntegrityError as exc:  # the business key has a run already (or no such spec)
            found = self.find_run(new.workflow, new.business_key)
            if found is None:
                raise StoreError(f"cannot create run {new.id}: {why(exc)}") from None
            return found, False
        if wake:
            self.bell.ring()
        return new.record(), True

    def get_run(self, run_id: str) -> RunRecord:
        with self._writer.reading() as conn:
            row = conn.execute(_RUN_BY_ID, {"b_id": run_id}).first()
        if row is None:
            raise RunNotFound(f"no run {run_id!r}")
        return RunRecord(**row._mapping)

    def resolve(self, reference: str) -> RunRecord:
        """The run named by its ID, or by its business key when only one run has it (a
        reference that looks like an ID, ``run_...``, is looked up as a business key too when no
        run has that ID: a store may hold keys from before such keys were refused)."""
        by_id: RunNotFound | None = None
        if reference.startswith("run_"):
            try:
                return self.get_run(reference)
            except RunNotFound as missing:
                by_id = missing
        with self._read() as conn:
            rows = conn.execute(select(runs).where(runs.c.business_key == reference)).fetchall()
        if not rows:
            raise by_id or RunNotFound(
                f"no run has the ID or business key {reference!r}{self._keys_beginning(reference)}"
            )
        if len(rows) > 1:
            ids = ", ".join(f"{r.id} ({r.workflow})" for r in rows)
            raise RunNotFound(f"several runs have the business key {reference!r}: {ids}")
        return RunRecord(**rows[0]._mapping)

    def _keys_beginning(self, reference: str, shown: int = 5) -> str:
        """A hint naming the business keys that start with ``reference`` (a ticket whose runs are
        keyed ``TICKET/ACTION``, say), with each run's workflow; empty when none does."""
        if not reference:
            return ""
        query = (
            select(runs.c.business_key, runs.c.workflow)
            .where(runs.c.business_key.startswith(reference, autoescape=True))
            .order_by(runs.c.business_key, runs.c.workflow)
            .limit(shown + 1)
        )
        with self._read() as conn:
            found = [f"{key!r} ({workflow})" for key, workflow in conn.execute(query)]
        if not found:
            return ""
        more = ", ..." if len(found) > shown else ""
        return f"; business keys that start with it: {', '.join(found[:shown])}{more}"

    def find_run(self, workflow: str, business_key: str) -> RunRecord | None:
        with self._read() as conn:
            row = conn.execute(_RUN_BY_KEY, {"b_workflow": workflow, "b_key": business_key}).first()
        return RunRecord(**row._mapping) if row is not None else None

    def list_runs(
        self,
        status: str | None = None,
        limit: int = 200,
        *,
        offset: int = 0,
        oldest: bool = False,
        **only: Any,
    ) -> list[RunRecord]:
        """Runs, newest first (``oldest``: those changed longest ago first), a page at a time;
        ``only`` narrows them (``workflow``, ``business_key``, ``created_before``: see
        :func:`.tables.runs_listed`)."""
        query = runs_listed(status, limit, offset, oldest, **only)
        with self._read() as conn:
            return [RunRecord(**row._mapping) for row in conn.execute(query)]

    def run_ids(
        self, workflow: str | None = None, *, since: float | None = None, pruned: bool = True
    ) -> list[str]:
        """The ID of every run (of ``workflow``; created at or after ``since``; with ``pruned``
        False, none pruned to its tombstone), oldest first: by creation time, then ID. What an
        export walks, a run at a time."""
        query = select(runs.c.id).order_by(runs.c.created_at, runs.c.id)
        if not pruned:
            query = query.where(runs.c.pruned_at.is_(None))
        if workflow is not None:
            query = query.where(runs.c.workflow == workflow)
        if since is not None:
            query = query.where(runs.c.created_at >= since)
        with self._read() as conn:
            return [str(run_id) for (run_id,) in conn.execute(query)]

    def related_runs(
        self, workflow: str, path: str, value: str, *, exclude: str | None = None, limit: int = 10
    ) -> list[RunRecord]:
        """The runs of ``workflow`` started with ``value`` at the input ``path`` (as the run's
        ``NewRun.keys`` recorded them), newest first, but ``exclude``: at most ``limit``. An
        index lookup (``evidence_keys``), the same on every database."""
        query = related_runs(workflow, path, value, exclude, limit)
        with self._read() as conn:
            return [RunRecord(**row._mapping) for row in conn.execute(query)]

    def spec_versions(self) -> list[SpecVersion]:
        """Every spec version runs were started under, newest first (without their text)."""
        with self._read() as conn:
            return [SpecVersion(*row) for row in conn.execute(SPEC_VERSIONS)]

    def live_spec_digests(self) -> list[str]:
        """The digest of every spec version a live run (not done or cancelled) is under, each
        once: the specs a worker may yet drive, which ``ratchet worker`` checks its lease for."""
        with self._read() as conn:
            return [str(digest) for (digest,) in conn.execute(LIVE_SPEC_DIGESTS)]

    def history(self, run_id: str) -> list[EventRecord]:
        """The run's events, oldest first, each as it was written (numbered from 1)."""
        with self._read() as conn:
            rows = conn.execute(_HISTORY, {"b_id": run_id}).all()
            listed = listed_in(conn.execute(_CONTEXT, {"b_id": run_id}).scalar()) if rows else ()
            receipts = dict(conn.execute(_RECEIPTS, {"b_id": run_id}).all()) if listed else {}
        found: list[EventRecord] = []
        for version, at, entries in rows:
            where = f"of run {run_id} version {version}"
            for kind, data, when in expand(entries, at, where, listed, receipts):
                found.append(EventRecord(len(found) + 1, run_id, version, kind, data, when))
        return found

    # -- operations and approvals -----------------------------------------------------------

    def operation(self, operation_id: str) -> OperationRecord | None:
        with self._read() as conn:
            row = conn.execute(_OPERATION_BY_ID, {"b_id": operation_id}).first()
        return OperationRecord(**row._mapping) if row is not None else None

    def operations(
        self, run_id: str | None = None, *, runs_in: Sequence[str] | None = None
    ) -> list[OperationRecord]:
        """The operations of ``run_id`` (None: of every run; ``runs_in``: of those runs), in
        the order they were registered."""
        query = select(operations).order_by(operations.c.created_at, operations.c.operation_id)
        if run_id is not None:
            query = query.where(operations.c.run_id == run_id)
        if runs_in is not None:
            query = query.where(operations.c.run_id.in_(list(runs_in)))
        with self._read() as conn:
            return [OperationRecord(**row._mapping) for row in conn.execute(query)]

    def approvals(
        self, run_id: str | None = None, *, runs_in: Sequence[str] | None = None
    ) -> list[ApprovalRecord]:
        """The decisions recorded for ``run_id`` (``runs_in``: for those runs), oldest first."""
        return [
            ApprovalRecord(**row)
            for row in self._rows_of(approvals, run_id, runs_in, approvals.c.id)
        ]

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
        self._writer.discard_timer(timer_id, at)

    def timers(
        self, run_id: str | None = None, *, runs_in: Sequence[str] | None = None
    ) -> list[TimerRecord]:
        """The timers of ``run_id`` (``runs_in``: of those runs), fired or not, oldest first."""
        return [TimerRecord(**row) for row in self._rows_of(timers, run_id, runs_in, timers.c.id)]

    def signals(
        self, run_id: str | None = None, *, runs_in: Sequence[str] | None = None
    ) -> list[SignalRecord]:
        """The signals ``run_id`` (``runs_in``: those runs) received, in the order received."""
        order = (signals.c.received_at, signals.c.signal_id)
        return [SignalRecord(**row) for row in self._rows_of(signals, run_id, runs_in, *order)]

    def open_runs(self, workflow: str) -> list[RunRecord]:
        """Every unfinished run of ``workflow`` (neither done nor cancelled), whatever its spec
        version, oldest first: the runs a new version of it may have to move."""
        query = (
            select(runs)
            .where(runs.c.workflow == workflow, runs.c.status.not_in([str(s) for s in ENDED]))
            .order_by(runs.c.created_at, runs.c.id)
        )
        with self._read() as conn:
            return [RunRecord(**row._mapping) for row in conn.execute(query)]

    def _rows_of(
        self, table: Any, run_id: str | None, runs_in: Sequence[str] | None, *order: Any
    ) -> list[dict[str, Any]]:
        """The rows of ``table`` of one run, or of the runs ``runs_in`` names (read
        :data:`_RUNS_PER_READ` at a time, so that no statement names thousands), in ``order``."""
        if run_id is not None:
            groups: list[list[str]] = [[run_id]]
        elif runs_in is not None:
            named = list(dict.fromkeys(runs_in))
            groups = [named[i : i + _RUNS_PER_READ] for i in range(0, len(named), _RUNS_PER_READ)]
        else:
            groups = []
        found: list[dict[str, Any]] = []
        with self._read() as conn:
            if run_id is None and runs_in is None:
                return [dict(r._mapping) for r in conn.execute(select(table).order_by(*order))]
            for group in groups:
                query = select(table).where(table.c.run_id.in_(group)).order_by(*order)
                found += [dict(r._mapping) for r in conn.execute(query)]
        return found

    def signal(self, run_id: str, signal_id: str) -> SignalRecord | None:
        """The signal ``signal_id`` that ``run_id`` received, if it did (IDs are per run)."""
        with self._read() as conn:
            row = conn.execute(
                select(signals).where(signals.c.signal_id == signal_id, signals.c.run_id == run_id)
            ).first()
        return SignalRecord(**row._mapping) if row is not None else None

    def duplicates(self, run_id: str | None = None) -> list[DuplicateRecord]:
        """Every time a lookup found an operation's change made more than once (of ``run_id``,
        or of every run), oldest first."""
        query = select(duplicates).order_by(duplicates.c.id)
        if run_id is not None:
            query = query.where(duplicates.c.run_id == run_id)
        with self._read() as conn:
            return [DuplicateRecord(**row._mapping) for row in conn.execute(query)]

    # -- the one way to change a run --------------------------------------------------------

    def commit(self, change: Change) -> RunRecord:
        """Apply ``change`` atomically, or raise :class:`~ratchet_runner.errors.VersionConflict`
        if the run moved on (:class:`~ratchet_runner.errors.LeaseLost` if only its lease did,
        :class:`~ratchet_runner.errors.DuplicateOperation` if a row it records exists). Returns
        the run as this commit wrote it."""
        if self.stamp_real_time:
            change.events = self._stamped(change.events)
        base = change.base
        if base is None or base.version != change.expected_version:
            base = self.get_run(change.run_id)
        change.base = base
        after = change.preview(base)
        refuse_unfit(change.rows(after))
        if (
            change.take_lease is not None
            and after.status == RunStatus.RUNNING
            and base.lease_token != change.lease_token
            and not any(kind == EventKind.LEASED for kind, _ in change.events)
        ):  # the commit that takes the lease says so, as a claim does
            change.events.insert(
                0, (EventKind.LEASED, {"owner": change.take_lease[0], "previous": base.lease_owner})
            )
        wake = change.wake and wakes(change, after)
        try:
            self._writer.commit(change, after, wake=wake)
        except VersionConflict as lost:
            if incarnations.PUT_BACK_MEANWHILE in str(lost):
                self._read_incarnation(writable=self._mark is not None)
            raise
        if wake:
            self.bell.ring()
        counted = self._writer.sequence
        if counted is not None and self._mark is not None and self._standing is not None:
            self._writer.sequence = None  # an attempt committed: the mark beside it is raised
            self._mark.raise_to(replace(self._standing, sequence=counted))
        return after

    # -- retention ----------------------------------------------------------------------------

    def prunable(
        self, before: float, limit: int, after: tuple[float, str] | None = None
    ) -> list[RunRecord]:
        """Finished runs (done or cancelled) not pruned yet, last changed before ``before``,
        oldest first (by last change, then ID; ``after``: past that one), at most ``limit``:
        none with a timer still armed (a receipt's later verification) or an operation whose
        outcome is not settled (written ahead, or unknown). In index order (``ix_runs_prune``):
        the runs pruned before are not walked."""
        query = prunable_runs(before, limit, after)
        with self._read() as conn:
            return [RunRecord(**row._mapping) for row in conn.execute(query)]

    def prune(self, tombstones: Sequence[tuple[RunRecord, RunContext]], now: float) -> list[str]:
        """Compact each finished run to its tombstone, all in one transaction: its context
        replaced by the one given, its input emptied, ``pruned_at`` set; its history replaced
        by one ``pruned`` event; its approvals, timers, signals and duplicate records removed;
        its done operations kept (operation ID, effect, receipt, when) with their arguments
        emptied, its others removed. A run that changed since it was read (its version), or is
        no longer finished, is left as it is. Returns the IDs pruned."""
        if not tombstones:
            return []
        return self._writer.prune(tombstones, now)

    def stored_specs(self) -> list[tuple[str, str]]:
        """Every stored spec version: its digest and exact text."""
        with self._read() as conn:
            query = select(spec_versions.c.digest, spec_versions.c.text)
            return [(str(row[0]), str(row[1])) for row in conn.execute(query)]

    def forgettable(
        self, digest: str, before: float, limit: int, after: tuple[float, str] | None = None
    ) -> list[RunRecord]:
        """Runs of spec version ``digest`` pruned to their tombstones that finished before
        ``before``, oldest first (``after``: past that one), at most ``limit``."""
        with self._read() as conn:
            query = forgettable_runs(digest, before, limit, after)
            return [RunRecord(**row._mapping) for row in conn.execute(query)]

    def tombstones(self, batch: int = 500) -> Iterator[RunRecord]:
        """Every run pruned to its tombstone, in ID order, read a batch at a time."""
        after: str | None = None
        while True:
            with self._read() as conn:
                rows = conn.execute(pruned_runs(batch, after))
                found = [RunRecord(**row._mapping) for row in rows]
            yield from found
            if len(found) < batch:
                return
            after = found[-1].id

    def recount(self) -> list[dict[str, Any]]:
        """Make the ended runs' tallies (:mod:`.tallies`) again from the runs the store holds,
        in one transaction; the figures that changed, each with its value before and after
        (``ratchet db recount``)."""
        return self._writer.recount()

    def forget(self, tombstones: Sequence[RunRecord]) -> list[str]:
        """Remove pruned runs whole (their tombstones past ``retention.operation_ids``), in one
        transaction: their row, operations, evidence keys and ``pruned`` event. A run that
        changed since it was read is left. Returns the IDs removed."""
        return self._writer.forget(tombstones)

    # -- leases -------------------------------------------------------------------------------

    def claim(
        self, owner: str, lease_seconds: float, now: float, limit: int = 1, skip: Sequence[str] = ()
    ) -> list[RunRecord]:
        """Lease up to ``limit`` runnable runs to ``owner`` (running, not waiting for a back-off,
        not leased, or whose lease expired by the database's clock), none of the runs ``skip``
        names (runs a worker left to another, which has their binding). Each claim bumps the
        run's version and sets a new lease token, so a worker that lost its lease can commit
        nothing more; a run taken over from an expired lease gets a ``rescued`` event."""
        return self._writer.claim(owner, lease_seconds, now, limit, tuple(skip))

    def claim_run(self, run_id: str, owner: str, lease_seconds: float, now: float) -> RunRecord:
        """Lease the run ``run_id`` to ``owner``, whatever its status: how a command takes a run
        before it changes it or calls out for it. A run with no lease, or one the database's
        clock says has expired, is taken (its version bumped, a new token, a ``leased`` event, or
        ``rescued`` over an expired lease); one held by a live lease raises
        :class:`~ratchet_runner.errors.RunBusy` naming the holder, and nothing changes."""
        return self._writer.claim_run(run_id, owner, lease_seconds, now)

    def renew(self, run_id: str, token: str, lease_seconds: float) -> bool:
        """Extend a lease still held; False when it was lost."""
        return self._writer.renew(run_id, token, lease_seconds)

    def release(self, run_id: str, token: str) -> None:
        """Give a lease back (no version bump: releasing changes nothing about the run). A run
        still running is then runnable by any worker: a wake-up."""
        if self._writer.release(run_id, token):
            self.bell.ring()

    def next_due(self, now: float) -> float | None:
        """The earliest time after ``now`` at which a timer falls due or a run's back-off ends
        (when an idle worker should look again, if nothing wakes it sooner), or None."""
        with self._read() as conn:
            row = conn.execute(NEXT_DUE, {"b_now": now}).one()
        due = [float(value) for value in row if value is not None]
        return min(due) if due else None

    def has_runnable(self, now: float) -> bool:
        """Whether a worker could claim a run at ``now`` (what :meth:`claim` looks for)."""
        with self._read() as conn:
            return bool(conn.execute(select(exists().where(runnable(now, self._db_now)))).scalar())

    def wake_workers(self, payload: str = "") -> None:
        """Wake this store's idle workers in every process (``payload``: on PostgreSQL's
        channel, for a worker's start-up check)."""
        self._writer.notify(payload)
        self.bell.ring()

    def notification_channel(self) -> str | None:
        """The PostgreSQL channel of this store's wake-ups (None elsewhere)."""
        return self._writer.channel()

    def leases(self) -> list[dict[str, Any]]:
        """Every lease on record, with how long until (or since) it expires by the DB clock, and
        when it was taken (``taken_at``: the time of the run's last ``leased`` or ``rescued``
        event, by the claiming worker's clock)."""
        query = (
            select(
                runs.c.id,
                runs.c.workflow,
                runs.c.business_key,
                runs.c.state,
                runs.c.lease_owner,
                runs.c.lease_expires_at,
                (runs.c.lease_expires_at - self._db_now).label("left"),
            )
            .where(runs.c.lease_token.is_not(None))
            .order_by(runs.c.lease_expires_at)
        )
        with self._read() as conn:
            found = [dict(row._mapping) for row in conn.execute(query)]
            taken = lease_times(conn) if found else {}
        for lease in found:
            lease["taken_at"] = taken.get(lease["id"])
        return found

    def status_counts(self) -> dict[str, int]:
        """How many runs have each status (the ended ones from their tallies: :mod:`.tallies`)."""
        with self._read() as conn:
            return status_counts(conn)

    def stuck(self, now: float, older_than: float) -> list[tuple[RunRecord, str]]:
        """Runs nobody is moving: leased by a worker whose lease expired (it died or froze), or
        runnable, unleased and untouched for ``older_than`` seconds (no worker is running)."""
        expired = select(runs).where(lease_expired(self._db_now))
        idle = select(runs).where(unmoved(now, older_than))
        with self._read() as conn:
            found = [(RunRecord(**r._mapping), "lease expired") for r in conn.execute(expired)]
            found += [
                (RunRecord(**r._mapping), "no worker has moved it") for r in conn.execute(idle)
            ]
        return found

    def stats(self, now: float, stuck_after: float = 300.0) -> Stats:
        """Counts, ages and backlogs of all runs, by workflow (:mod:`.stats`): for metrics."""
        with self._read() as conn:
            return gather(conn, now, self._db_now, stuck_after)

    def counts(self) -> dict[str, int]:
        """Rows per table (for status and tests)."""
        with self._read() as conn:
            return {
                table.name: int(conn.execute(select(func.count()).select_from(table)).scalar_one())
                for table in (runs, history, operations, approvals, timers, signals, spec_versions)
            }

    def reset(self) -> None:
        """Delete every run, event, operation, approval, timer, signal and spec version (what the
        store recorded about itself, ``meta``, stays)."""
        self._writer.reset()
