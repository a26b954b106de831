"""The practice database: the one SQLite file the practice world keeps, its tables, and how it is
opened.

Every change is one ``BEGIN IMMEDIATE`` transaction (:meth:`PracticeDatabase.transaction`), in
WAL mode. A database that is there but cannot be written (a read-only mount, a folder of another
user's) is opened for reading only (:meth:`PracticeDatabase.reading`): ``ratchet effects`` reads
it, and every change is refused. :meth:`PracticeDatabase.ready` checks, before anything that
needs the world is written elsewhere, that it can be changed: not read-only, its pages sound, and
a write reaching the disk. Every failure of SQLite is a :class:`StoreError` that names the file
and says what a person can do about it (a read-only file, a full disk, corrupt pages).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from ...errors import StoreError

#: The practice database's tables, made when the file is first opened for writing.
SCHEMA = """
CREATE TABLE IF NOT EXISTS orders (
    order_id TEXT PRIMARY KEY, item TEXT, sku TEXT, paid REAL NOT NULL, currency TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS stock (sku TEXT PRIMARY KEY, available INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS changes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    operation_id TEXT NOT NULL,
    service TEXT NOT NULL,
    operation TEXT NOT NULL,
    effect TEXT NOT NULL,
    args TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    result TEXT NOT NULL,
    at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE INDEX IF NOT EXISTS ix_changes_operation ON changes (operation_id);
CREATE TABLE IF NOT EXISTS holds (
    hold_id TEXT PRIMARY KEY, kind TEXT NOT NULL, trip TEXT NOT NULL, ref TEXT NOT NULL,
    status TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS calls (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    operation_id TEXT NOT NULL,
    effect TEXT NOT NULL,
    operation TEXT NOT NULL,
    outcome TEXT NOT NULL,
    at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE TABLE IF NOT EXISTS faults (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    effect TEXT NOT NULL,
    kind TEXT NOT NULL,
    calls TEXT,
    times INTEGER,
    used INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS late (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    operation_id TEXT NOT NULL,
    service TEXT NOT NULL,
    operation TEXT NOT NULL,
    effect TEXT NOT NULL,
    args TEXT NOT NULL,
    dedupe INTEGER NOT NULL,
    due REAL NOT NULL
);
"""


class PracticeDatabase:
    """The practice world's SQLite file at ``path``, made with ``schema`` when it can be
    written."""

    def __init__(self, path: Path, schema: str) -> None:
        self.path = path
        #: The file is there, but neither it nor its folder can be written: read, never changed.
        self.read_only = path.exists() and not (
            os.access(path.parent, os.W_OK) and os.access(path, os.W_OK)
        )
        self._ready = False
        if self.read_only:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(path, timeout=60, isolation_level=None)
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.executescript(schema)
            finally:
                db.close()
        except (sqlite3.Error, OSError) as exc:
            raise self.failed(exc) from None

    def failed(self, exc: BaseException) -> StoreError:
        """A failure of the practice database as a :class:`StoreError` that names it and says
        what a person can do about it."""
        said = " ".join(str(exc).split())[:300]
        if "readonly" in said or "read-only" in said.lower():
            said = f"it is read-only ({said}): it can be read, not changed"
        elif "disk is full" in said or "No space left" in said:
            said = f"its disk is full ({said}); nothing was written"
        elif "malformed" in said or "not a database" in said:
            said = (
                f"its pages are corrupt ({said}); it holds practice data only: delete "
                f"{self.path.name} and the next command makes it afresh"
            )
        return StoreError(f"the practice world at {self.path} failed: {said}")

    @contextmanager
    def transaction(self, until: float | None = None) -> Iterator[sqlite3.Connection]:
        """A write transaction, committed at the end of the block (rolled back if it raises).
        ``until``: a ``time.monotonic()`` instant by which it must commit; a transaction that
        cannot (the database busy for that long) is rolled back, and ``TimeoutError`` raised."""
        if self.read_only:
            raise StoreError(
                f"the practice world at {self.path} is read-only (its folder cannot be "
                "written): it can be read, not changed"
            )
        wait = 60.0 if until is None else max(0.001, min(60.0, until - time.monotonic()))
        try:
            db = sqlite3.connect(self.path, timeout=wait, isolation_level=None)
        except sqlite3.Error as exc:
            raise self.failed(exc) from None
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(f"PRAGMA busy_timeout={int(wait * 1000)}")
            try:
                db.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if until is not None and "locked" in str(exc):
                    raise TimeoutError(str(exc)) from None
                raise
            try:
                yield db
                if until is not None and time.monotonic() > until:
                    raise TimeoutError("the transaction could not commit in time")
            except BaseException:
                if db.in_transaction:  # a full disk may have rolled it back already
                    db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            raise self.failed(exc) from None
        finally:
            db.close()

    @contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        """A connection to read from: a transaction of its own, or, when the database is
        read-only, a read-only connection (immutable when its write-ahead log is not there to
        be read, which is how SQLite reads a WAL database on a read-only file system)."""
        if not self.read_only:
            with self.transaction() as db:
                yield db
            return
        beside = [self.path.with_name(self.path.name + end) for end in ("-wal", "-shm")]
        immutable = "" if all(p.exists() for p in beside) else "&immutable=1"
        try:
            db = sqlite3.connect(f"file:{quote(str(self.path))}?mode=ro{immutable}", uri=True)
        except sqlite3.Error as exc:
            raise self.failed(exc) from None
        try:
            yield db
        except sqlite3.Error as exc:
            raise self.failed(exc) from None
        finally:
            db.close()

    def ready(self) -> None:
        """Make sure the database can be changed before anything that needs it is written
        elsewhere: not read-only, its pages sound (``PRAGMA quick_check``), and a write reaches
        the disk (a full disk says so now, not after a run was created without its world). A
        :class:`StoreError` that says which; checked once."""
        if self._ready:
            return
        with self.transaction() as db:
            found = [str(row[0]) for row in db.execute("PRAGMA quick_check").fetchall()]
            if found != ["ok"]:
                raise self.failed(sqlite3.DatabaseError(f"malformed: {found[0][:200]}"))
            version = int(db.execute("PRAGMA user_version").fetchone()[0])
            db.execute(f"PRAGMA user_version = {version}")  # a write, to the disk at COMMIT
        self._ready = True
