"""The store's schema and its revisions: which one a store is at, and moving it to another.

Every store records the revision of its schema in ``ratchet_schema_version`` (Alembic's revision
table, named for Ratchet so that it never meets an application's own); this code's revisions are
:data:`REVISIONS`, the newest :data:`HEAD`. Opening a store (:func:`prepare`) reads its standing
first, without importing Alembic when the store is at :data:`HEAD`:

* **new** (none of Ratchet's tables): it is made at :data:`HEAD`, on any database, in one
  transaction and without Alembic (:func:`make`): this code's tables, which a test keeps equal to
  what the revisions make, and :data:`HEAD` recorded; a new store is not an upgrade;
* **unversioned** (Ratchet's tables, no revision: made before revisions were kept, which is the
  first revision's schema): the tables it lacks are made, it is stamped with the first revision,
  then treated as older;
* **older** than :data:`HEAD`: an SQLite store (embedded, one file) is copied beside itself with
  SQLite's backup API, then upgraded; any other store is refused with a
  :class:`~ratchet_runner.errors.StoreRevision` that names ``ratchet db upgrade``: PostgreSQL
  never upgrades itself;
* **newer**, or at a revision this code does not know: refused, on every database.

Each revision runs in one transaction opened here (SQLite's ``BEGIN IMMEDIATE``; on PostgreSQL
with the schema's advisory lock and a ``lock_timeout``), which reads the revision again first: a
process that finds another has moved it on does nothing.

What cannot run in a transaction runs after it, as a step of its own: on PostgreSQL, a revision's
indexes on tables workers write (its ``CONCURRENTLY``) are built with ``CREATE INDEX
CONCURRENTLY`` once its transaction has committed (:func:`build_outside`), so that writes go on
while they build. Such a build stopped midway (the process killed, its lock not granted in time)
leaves the index missing or invalid, which the store works without (it is slower where the index
would serve); ``ratchet db check`` reports it (:func:`unbuilt`) and ``ratchet db upgrade`` builds
it again, dropping an invalid one first.

Over 400 lines: one concern, the schema's revision and every way of moving it (made new,
recorded, upgraded, downgraded, its indexes built outside a transaction), which share the
standing they read and the lock they take.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy import (
    Column,
    Connection,
    Engine,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    inspect,
    text,
)
from sqlalchemy.exc import SQLAlchemyError

from ..errors import StoreError, StoreRevision
from .dialects import Dialect, failure, redact
from .restores import database_file, record_identity
from .tables import metadata, record_creation

if TYPE_CHECKING:
    from alembic.config import Config


class Store(Protocol):
    """What the schema needs of a store (:class:`~ratchet_runner.store.store.Store`, which
    imports this module): where it is, its engine and dialect, and a transaction holding the
    schema's lock."""

    url: str
    engine: Engine
    dialect: Dialect

    def schema_transaction(self) -> AbstractContextManager[Connection]: ...

    def schema_read(self) -> AbstractContextManager[Connection]: ...


#: The table a store's revision is kept in.
REVISION_TABLE = "ratchet_schema_version"
#: This code's revisions, oldest first (a test keeps them the migrations folder's).
REVISIONS: tuple[str, ...] = ("0001", "0002", "0003", "0004", "0005", "0006", "0007")
HEAD = REVISIONS[-1]
#: How long a revision waits for a lock on PostgreSQL before it gives up (and changes nothing).
LOCK_TIMEOUT_SECONDS = 5
#: The advisory lock builds outside a transaction take turns under (not the schema's: a build
#: waits for older transactions to end, and one of them may be waiting for the schema's lock).
_OUTSIDE_LOCK = "1751607123, hashtext(coalesce(current_schema(), ''))"

NEW, UNVERSIONED, OLDER, CURRENT, NEWER = "new", "unversioned", "older", "current", "newer"

#: The revision table as Alembic makes it (``version_table_impl``), for a store made new here.
_REVISION = Table(
    REVISION_TABLE,
    MetaData(),
    Column("version_num", String(32), nullable=False),
    PrimaryKeyConstraint("version_num", name=f"{REVISION_TABLE}_pkc"),
)


@dataclass(frozen=True)
class Standing:
    """Where a store's schema stands: its revision (None: none recorded), whether it has
    Ratchet's tables, and so what it is to this code (``new``, ``unversioned``, ``older``,
    ``current``, ``newer``)."""

    revision: str | None
    tables: bool

    @property
    def status(self) -> str:
        if self.revision is None:
            return UNVERSIONED if self.tables else NEW
        if self.revision == HEAD:
            return CURRENT
        return OLDER if self.revision in REVISIONS else NEWER

    def to_json(self) -> dict[str, Any]:
        return {"revision": self.revision, "head": HEAD, "status": self.status}


def standing(conn: Connection) -> Standing:
    """The standing of the store ``conn`` is connected to. Its tables are looked for first,
    its revision after: a store made new commits both at once, and a reader outside a
    transaction (each statement its own snapshot) that saw the tables sees the revision too,
    where the other order could see a revision not yet made and tables made since, and take a
    store made that instant for one made before revisions were kept."""
    found = inspect(conn)
    tables = found.has_table("runs")
    revision = None
    if found.has_table(REVISION_TABLE):
        row = conn.execute(text(f"SELECT version_num FROM {REVISION_TABLE}")).first()
        revision = None if row is None else str(row[0])
    return Standing(revision, tables)


def read(store: Store) -> Standing:
    """Where ``store``'s schema stands, read with no lock and no write (a read-only store, or
    one another process is upgrading, answers)."""
    with store.schema_read() as conn:
        return standing(conn)


def refusal(store: Store, found: Standing) -> StoreRevision:
    """Why ``store`` cannot be used as it stands, naming what to do."""
    where = redact(store.url)
    if found.status == NEWER:
        return StoreRevision(
            f"the store at {where} is at schema revision {found.revision}, which this Ratchet "
            f"(revision {HEAD}) does not know: a newer Ratchet upgraded it; use that one "
            "(nothing was changed)"
        )
    revision = found.revision or "none (made before revisions were kept)"
    return StoreRevision(
        f"the store at {where} is at schema revision {revision}, older than this Ratchet's "
        f"{HEAD}: run `ratchet db upgrade --db URL` first (see docs/how-to/operate-a-store.md; "
        "nothing was changed)"
    )


def prepare(store: Store, *, create: bool, practice: bool, upgrade: bool) -> Standing:
    """Make ``store`` usable by this code, or refuse it (:class:`StoreRevision`): made when new
    (with ``create``), upgraded when older (with ``upgrade``: an SQLite store, backed up first),
    refused when newer or unknown. Returns where it stood. A store at this code's revision is
    read without a lock (or a write: a read-only store opens)."""
    found = read(store)
    status = found.status
    if status == CURRENT:
        return found
    if status == NEW and not create:
        raise StoreError(f"there is no Ratchet store at {redact(store.url)} (it has no tables)")
    if status == NEW:
        make(store, practice=practice)
        status = read(store).status  # another process may have made it first
        if status == CURRENT:
            return found
    if status == NEWER or not create or (status != NEW and not upgrade):
        raise refusal(store, found)
    if status in (OLDER, UNVERSIONED) and store.dialect.name == "sqlite":
        backup(store, found)
    migrate_to(store, HEAD, practice=practice)
    return found


def make(store: Store, *, practice: bool) -> None:
    """Make a new store at :data:`HEAD` in one transaction, unless another process made it
    first: this code's tables and indexes, the revision recorded as Alembic records it, when
    the store was made (and whether for practice), and its identity. The same schema as the
    revisions make one step at a time (``tests/store/test_schema.py`` compares the two), in a
    fraction of the time: no Alembic, and no table copied by SQLite's batch mode."""
    with store.schema_transaction() as conn:
        if standing(conn).status != NEW:
            return
        metadata.create_all(conn)
        _REVISION.create(conn, checkfirst=True)  # a store taken down to base keeps it
        conn.execute(_REVISION.insert(), {"version_num": HEAD})
        record_creation(conn, practice)
        record_identity(conn)


def backup(store: Store, found: Standing) -> Path | None:
    """Copy an SQLite store's file beside it before it is upgraded (``FILE.rREVISION.bak``, made
    with SQLite's backup API, consistent while others write); None for a store in memory."""
    path = database_file(store.engine.url.database)
    if path is None:
        return None
    target = path.with_name(f"{path.name}.r{found.revision or '0000'}.bak")
    source = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        copy = sqlite3.connect(target)
        try:
            source.backup(copy)
        finally:
            copy.close()
    finally:
        source.close()
    return target


def config(conn: Connection | None = None) -> Config:
    """Alembic's configuration for the store's migrations (on ``conn``)."""
    from alembic.config import Config

    cfg = Config()
    folder = resources.files("ratchet_runner.store") / "migrations"
    cfg.set_main_option("script_location", str(folder))
    cfg.attributes["connection"] = conn
    return cfg


def revisions() -> list[dict[str, str | None]]:
    """This code's revisions from its migrations folder, oldest first: each revision, the one
    it follows, and the first line of what it says it does."""
    from alembic.script import ScriptDirectory

    scripts = ScriptDirectory.from_config(config())
    found = [
        {
            "revision": script.revision,
            "down_revision": str(script.down_revision) if script.down_revision else None,
            "doc": (script.doc or "").strip().splitlines()[0] if script.doc else "",
        }
        for script in scripts.walk_revisions()
    ]
    return found[::-1]


def steps_between(start: str | None, target: str) -> list[tuple[str | None, str, bool]]:
    """The revisions from ``start`` (None: nothing) to ``target``, one step each: ``(from, to,
    up)`` (a step back to before the first revision goes to ``base``)."""
    order = [None, *REVISIONS]
    if target != "base" and target not in REVISIONS:
        raise StoreError(
            f"no schema revision {target!r} (this Ratchet knows {', '.join(REVISIONS)}, and base)"
        )
    at, goal = order.index(start), 0 if target == "base" else order.index(target)
    if goal >= at:
        return [(order[i], str(order[i + 1]), True) for i in range(at, goal)]
    return [(order[i], order[i - 1] or "base", False) for i in range(at, goal, -1)]


def migrate_to(store: Store, target: str, *, practice: bool = False) -> list[str]:
    """Move ``store``'s schema to revision ``target`` (``head``, a revision, or ``base``), one
    revision per transaction, each reading the revision again under the schema's lock (a
    revision another process applied meanwhile is not applied twice). Returns the steps taken,
    as ``FROM→TO``."""
    from alembic import command

    target = HEAD if target == "head" else target
    with store.schema_transaction() as conn:
        start = standing(conn)
    if start.status == NEWER:
        raise refusal(store, start)
    if start.status == UNVERSIONED:
        stamp_unversioned(store)
        start = Standing(REVISIONS[0], True)
    steps = steps_between(start.revision, target)
    taken: list[str] = []
    try:
        for before, after, up in steps:
            with store.schema_transaction() as conn:
                if standing(conn).revision != before:
                    continue  # another process took this step
                store.dialect.limit_locks(conn, LOCK_TIMEOUT_SECONDS)
                try:
                    (command.upgrade if up else command.downgrade)(config(conn), after)
                except SQLAlchemyError as exc:
                    raise StoreError(
                        f"schema revision {before or 'none'} → {after} failed and was rolled "
                        f"back: {failure(exc)}"
                    ) from None
                if before is None and up:
                    record_creation(conn, practice)
            taken.append(f"{before or 'none'}→{after}")
        if all(up for _before, _after, up in steps):
            taken += [f"built {name}" for name in build_outside(store)]  # a step left unbuilt
    except StoreError as exc:
        if not taken:
            raise
        raise StoreError(f"{exc} (committed before it, and kept: {', '.join(taken)})") from None
    return taken


@dataclass(frozen=True)
class Outside:
    """An index a revision builds on PostgreSQL after its transaction (``CREATE INDEX
    CONCURRENTLY``): its name, its table, its columns and the rows it holds (``where``: all
    of them when empty), as the revision declares them."""

    revision: str
    name: str
    table: str
    columns: tuple[str, ...]
    where: str = ""


def outside(upto: str | None) -> list[Outside]:
    """The indexes built outside a transaction by the revisions up to ``upto``, in order."""
    if upto is None or upto not in REVISIONS:
        return []
    from alembic.script import ScriptDirectory

    scripts = ScriptDirectory.from_config(config())
    found: list[Outside] = []
    for revision in REVISIONS[: REVISIONS.index(upto) + 1]:
        module = scripts.get_revision(revision).module
        for name, table, columns, *where in getattr(module, "CONCURRENTLY", ()):
            found.append(Outside(revision, name, table, tuple(columns), *where))
    return found


_INDEX_STATE = text(
    "SELECT c.relname, i.indisvalid FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid "
    "JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = current_schema() AND c.relname = :name"
)


def _state(conn: Connection, name: str) -> bool | None:
    """Whether index ``name`` is built and valid (None: there is none)."""
    row = conn.execute(_INDEX_STATE, {"name": name}).first()
    return None if row is None else bool(row[1])


def unbuilt(store: Store) -> list[Outside]:
    """The indexes the store's revision should have built outside a transaction and has not
    (missing, or left invalid by a build stopped midway); none but on PostgreSQL."""
    if store.dialect.name != "postgresql":
        return []
    with store.schema_read() as conn:
        found = standing(conn)
        if found.status != CURRENT and found.status != OLDER:
            return []
        return [index for index in outside(found.revision) if not _state(conn, index.name)]


def build_outside(store: Store) -> list[str]:
    """Build what :func:`unbuilt` finds, each with ``CREATE INDEX CONCURRENTLY`` in autocommit
    (an invalid one dropped first), one process at a time, each lock waited for at most
    :data:`LOCK_TIMEOUT_SECONDS`; returns the names built. A build that fails is dropped again
    where it can be, and is said to be run again."""
    pending = unbuilt(store)
    if not pending:
        return []
    built: list[str] = []
    with store.engine.connect() as conn:
        conn = conn.execution_options(isolation_level="AUTOCOMMIT")
        conn.exec_driver_sql(f"SET lock_timeout = '{LOCK_TIMEOUT_SECONDS * 1000}ms'")
        # Another process building: wait for it in short tries, never in one long wait (a
        # build waits for every transaction older than it, a blocked lock request included,
        # and PostgreSQL would end one of the two as a deadlock).
        while not conn.exec_driver_sql(f"SELECT pg_try_advisory_lock({_OUTSIDE_LOCK})").scalar():
            time.sleep(0.1)
        try:
            built = [index.name for index in pending if _build(conn, index)]
        finally:
            conn.exec_driver_sql(f"SELECT pg_advisory_unlock({_OUTSIDE_LOCK})")
    return built


def _build(conn: Connection, index: Outside) -> bool:
    """Build ``index`` concurrently, unless another process built it meanwhile (False)."""
    state = _state(conn, index.name)
    if state:
        return False
    quoted = conn.dialect.identifier_preparer.quote
    name = quoted(index.name)
    try:
        if state is False:  # left invalid by a build stopped midway
            conn.exec_driver_sql(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
        columns = ", ".join(quoted(c) for c in index.columns)
        where = f" WHERE {index.where}" if index.where else ""
        conn.exec_driver_sql(
            f"CREATE INDEX CONCURRENTLY {name} ON {quoted(index.table)} ({columns}){where}"
        )
    except SQLAlchemyError as exc:
        with contextlib.suppress(SQLAlchemyError):
            conn.exec_driver_sql(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
        raise StoreError(
            f"building index {index.name} (revision {index.revision}) without holding writes "
            f"failed: {failure(exc)}; the store works without it, slower; run `ratchet db "
            "upgrade` again"
        ) from None
    return True


def stamp_unversioned(store: Store) -> None:
    """A store made before revisions were kept: the tables it lacks (added to the first
    revision's schema since it was made) made, and the first revision recorded."""
    from alembic import command

    from .migrations.versions import r0001_first

    first = r0001_first.schema()
    with store.schema_transaction() as conn:
        if standing(conn).status != UNVERSIONED:
            return
        first.create_all(conn)  # the first revision's tables and indexes it lacks
        for table in first.sorted_tables:
            for index in table.indexes:
                index.create(conn, checkfirst=True)
        command.stamp(config(conn), REVISIONS[0])
