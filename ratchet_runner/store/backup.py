"""Backing up an SQLite store while workers run, and putting a backup back as a new incarnation.

:func:`take` copies the store with SQLite's backup API **in one step**: one read transaction
over the whole copy, so the copy is the store as of one commit, and workers go on writing
meanwhile (WAL: a reader never blocks a writer). A copy made in small steps would restart each
time a worker wrote. The copy is written to ``FILE.partial`` and renamed when whole, with the
moment it was taken recorded in its ``meta`` (``backup_taken_at``): a killed backup leaves no
file that looks like a backup.

:func:`put_back` puts a backup back so that no effect is made twice
(:mod:`~ratchet_runner.store.restores`):

1. the backup is checked (an SQLite database holding a Ratchet store) and copied to
   ``STORE.restoring``, where it is upgraded to this code's schema revision if it is older, and
   recorded as a new incarnation with its restore window: above the incarnation of the store it
   replaces and of the mark beside it;
2. the store is refused while a worker holds a live lease on it (stop the workers first);
3. the marked copy is written over the store with the backup API in one step: one transaction
   of the store's, so a kill before it commits leaves the store as it was, and one after leaves
   it restored and marked: never restored and unmarked;
4. the high-water mark is set to the new incarnation, and ``STORE.restoring`` removed.

Run again after a kill at any point, it starts over and finishes.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import StoreError
from .restores import Mark, Restore, Standing

#: The key, in a backup's ``meta``, of when it was taken (epoch seconds).
TAKEN_AT = "backup_taken_at"
#: What a restore calls at each of its points (tests kill the process there).
Checkpoint = Callable[[str], None]


def no_checkpoint(_point: str) -> None:
    """A restore's checkpoints, doing nothing."""


@contextmanager
def _connect(path: Path, *, read_only: bool = False) -> Iterator[sqlite3.Connection]:
    target = f"file:{path}?mode=ro" if read_only else f"file:{path}"
    conn = sqlite3.connect(target, uri=True, timeout=30, isolation_level=None)
    try:
        yield conn
    finally:
        conn.close()


def _remove(path: Path) -> None:
    for leftover in (path, *(path.with_name(path.name + s) for s in ("-wal", "-shm", "-journal"))):
        with contextlib.suppress(FileNotFoundError):
            leftover.unlink()


def take(database: Path, target: Path, at: float) -> int:
    """Copy the store at ``database`` to ``target`` (which must not exist), consistent as of one
    commit while workers write; record ``at`` as when it was taken. Returns its size in bytes."""
    if target.exists():
        raise StoreError(f"{target} exists: a backup never overwrites a file (choose another name)")
    if not target.parent.is_dir():
        raise StoreError(f"no folder {target.parent} to write the backup {target.name} in")
    partial = target.with_name(target.name + ".partial")
    _remove(partial)
    try:
        with _connect(database, read_only=True) as source, _connect(partial) as copy:
            source.backup(copy)  # one step: the store as of one commit
            copy.execute("PRAGMA journal_mode=DELETE")
            copy.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (TAKEN_AT, repr(at))
            )
        with open(partial, "rb") as written:
            os.fsync(written.fileno())
        os.replace(partial, target)
    except sqlite3.Error as exc:
        _remove(partial)
        raise StoreError(f"cannot back up {database}: {exc}") from None
    return target.stat().st_size


def check_backup(path: Path) -> None:
    """Refuse ``path`` unless it is an SQLite database holding a Ratchet store, whole."""
    if not path.is_file():
        raise StoreError(f"no backup at {path}")
    try:
        with _connect(path, read_only=True) as conn:
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
            whole = conn.execute("PRAGMA quick_check").fetchone()
    except sqlite3.Error as exc:
        raise StoreError(f"{path} is not an SQLite database ({exc}): nothing was changed") from None
    if not {"runs", "operations", "meta"} <= tables:
        raise StoreError(f"{path} holds no Ratchet store: nothing was changed")
    if not whole or whole[0] != "ok":
        found = whole[0] if whole else "no answer"
        raise StoreError(f"{path} is damaged ({found}): nothing was changed")


def taken_at(path: Path) -> float | None:
    """When the backup at ``path`` was taken (``ratchet backup`` records it), if known."""
    with _connect(path, read_only=True) as conn:
        row = conn.execute("SELECT value FROM meta WHERE key = ?", (TAKEN_AT,)).fetchone()
    try:
        return float(row[0]) if row else None
    except ValueError:
        return None


def staging(database: Path) -> Path:
    """Where a restore prepares the copy it puts back over ``database``."""
    return database.with_name(f"{database.name}.restoring")


def put_back(
    database: Path,
    prepare: Callable[[Path], tuple[Restore, Standing]],
    live_standing: Callable[[], Standing | None],
    checkpoint: Checkpoint = no_checkpoint,
) -> Restore:
    """Put the staged copy (see the module) over the store at ``database``. ``prepare(staged)``
    upgrades and marks the staged copy, returning its restore and standing; ``live_standing()``
    reads the store it replaces (and refuses it while workers hold leases)."""
    staged = staging(database)
    restore, standing = prepare(staged)
    checkpoint("staged")
    live_standing()
    with _connect(staged, read_only=True) as source, _connect(database) as live:
        checkpoint("writing")
        source.backup(live)  # one step: one transaction of the store's
    checkpoint("written")
    Mark(database).raise_to(standing, force=True)
    _remove(staged)
    for upgraded in staged.parent.glob(f"{staged.name}.r*.bak"):  # an older backup, upgraded
        upgraded.unlink(missing_ok=True)
    return restore


def stage(backup: Path, database: Path) -> Path:
    """Copy ``backup`` to the staging file beside ``database`` (a leftover one removed)."""
    check_backup(backup)
    staged = staging(database)
    _remove(staged)
    with _connect(backup, read_only=True) as source, _connect(staged) as copy:
        source.backup(copy)
        copy.execute("PRAGMA journal_mode=DELETE")
    return staged
