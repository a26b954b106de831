"""A store put back from a copy: its incarnations, its restore window, and the high-water mark.

A backup is a store as it was. Put back, it knows nothing of the calls made after it was taken:
a run it holds at a state before an effect would make that effect again, and a warehouse that
keeps no key register would make a second label. So putting a copy back makes the store a new
**incarnation**, recorded in ``restores`` (``ratchet restore``, ``ratchet restore --mark``,
``ratchet db mark-restored``), with a **restore window**: until it closes, the runner looks every
operation up before its first call (:class:`~ratchet_runner.engine.protocol.EffectStep`), and an
effect made after the backup is found, not made again. A store reads its incarnation as it
opens; the commit of every attempt checks, in its transaction (or its one statement on
PostgreSQL), that the store is still that incarnation (:func:`check_incarnation`), so a worker
that sat idle while a copy was put back under it commits no attempt before it reads the store
again.

A copy put back by hand (``cp``), with nothing recorded, is what this module also catches where
it can: on SQLite, every commit of an attempt adds one to the store's ``sequence`` (in ``meta``,
in the same transaction), and the store writes the number, with the store's ID and incarnation,
to a **high-water mark** beside its file (``FILE.ratchet-mark``), never lowering it. A store
opened for writing whose file holds an older incarnation, or a lower sequence, than the mark
beside it has been put back from a copy behind Ratchet's back: it is refused
(:class:`~ratchet_runner.errors.StoreCopiedBack`) until an operator confirms it with
``ratchet restore --mark``, which makes it a new incarnation with its window. A mark left by
another store (another ID) is replaced: a different store is no copy of this one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from sqlalchemy import Connection, Integer, Text, bindparam, cast, func, insert, select, update

from ..errors import StoreCopiedBack, StoreError, VersionConflict
from .compiled import Executes
from .tables import meta, restores, runs

#: The key of the store's ID in ``meta`` (made by revision 0003; the same in every copy).
STORE_ID = "store_id"
#: The key of the number of attempts the store has committed (SQLite's high-water mark).
SEQUENCE = "sequence"
#: What a high-water mark file begins with; it is one line, padded to :data:`_MARK_SIZE`.
_MARK_MAGIC = "ratchet-mark 1"
_MARK_SIZE = 128


@dataclass(frozen=True)
class Restore:
    """One time the store was put back from a copy: it became ``incarnation`` (the store as made
    is 1) at ``restored_at``; until ``window_until`` every operation is looked up before its
    first call. ``backup_taken_at``: when the copy was taken, if known; ``source``: what was put
    back (a backup file's name, a plain copy, a PostgreSQL restore); ``by``: who did it."""

    incarnation: int
    restored_at: float
    window_until: float
    backup_taken_at: float | None
    source: str
    by: str

    def open_at(self, now: float) -> bool:
        """Whether the restore window is open at ``now``."""
        return now < self.window_until

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Standing:
    """What a store says of itself: its ID, its incarnation (1 + its restores) and its
    sequence of committed attempts (kept on SQLite; 0 elsewhere)."""

    store_id: str
    incarnation: int
    sequence: int


def record_identity(conn: Connection) -> None:
    """Give a store made new its ID and its sequence in ``meta`` (revision 0003 gives them to an
    older store as it upgrades)."""
    conn.execute(
        insert(meta),
        [{"key": STORE_ID, "value": uuid.uuid4().hex}, {"key": SEQUENCE, "value": "0"}],
    )


def latest(conn: Connection) -> Restore | None:
    """The store's latest restore, or None for a store never restored."""
    row = conn.execute(select(restores).order_by(restores.c.incarnation.desc()).limit(1)).first()
    return None if row is None else Restore(**row._mapping)


def history(conn: Connection) -> list[Restore]:
    """Every restore of the store, oldest first."""
    return [
        Restore(**row._mapping)
        for row in conn.execute(select(restores).order_by(restores.c.incarnation))
    ]


def _meta(conn: Connection, key: str) -> str | None:
    row = conn.execute(select(meta.c.value).where(meta.c.key == key)).first()
    return None if row is None else str(row[0])


def standing(conn: Connection) -> Standing:
    """The store's ID, incarnation and sequence, read on ``conn``."""
    incarnation = conn.execute(select(func.max(restores.c.incarnation))).scalar()
    sequence = _meta(conn, SEQUENCE)
    return Standing(
        store_id=_meta(conn, STORE_ID) or "",
        incarnation=int(incarnation or 1),
        sequence=int(sequence) if sequence and sequence.isdigit() else 0,
    )


#: What :func:`count_attempt` refuses with: the store was put back from a copy after this
#: process read its incarnation (the attempt would be called without the restore's lookup).
PUT_BACK_MEANWHILE = "the store was put back from a copy after this process opened it"


def attempt_in(change_events: Any) -> bool:
    """Whether a change commits an attempt (a ``call`` event: a call may follow its commit)."""
    return any(kind == "call" for kind, _ in change_events)


def _put_back_meanwhile() -> VersionConflict:
    return VersionConflict(
        f"{PUT_BACK_MEANWHILE}: nothing was committed, and the step is taken up again with the "
        "restore's lookups"
    )


#: The store's incarnation now (1 + its restores), as a subquery.
_INCARNATION = select(func.coalesce(func.max(restores.c.incarnation), 1)).scalar_subquery()
_CHECK = select(_INCARNATION)
_COUNT = (
    update(meta)
    .where(meta.c.key == SEQUENCE)
    .values(value=cast(cast(meta.c.value, Integer) + 1, Text))
    .returning(meta.c.value)
)
_COUNT_ON = _COUNT.where(bindparam("b_incarnation") == _INCARNATION)


def check_incarnation(conn: Executes, incarnation: int | None) -> None:
    """In the transaction of an attempt's commit: refuse it (a
    :class:`~ratchet_runner.errors.VersionConflict` saying :data:`PUT_BACK_MEANWHILE`, the
    transaction rolled back) when the store is no longer ``incarnation``, the one this process
    read (None: not checked)."""
    if incarnation is not None and conn.execute(_CHECK).scalar() != incarnation:
        raise _put_back_meanwhile()


def count_attempt(conn: Executes, incarnation: int | None = None) -> int:
    """In the transaction of an attempt's commit, in one statement: refuse it as
    :func:`check_incarnation` does (unless ``incarnation`` is None), else add one to the store's
    sequence (SQLite's high-water mark); the new value."""
    if incarnation is None:
        row = conn.execute(_COUNT).first()
        return int(row[0]) if row is not None else 0
    row = conn.execute(_COUNT_ON, {"b_incarnation": incarnation}).first()
    if row is None:
        raise _put_back_meanwhile()
    return int(row[0])


def record_restore(
    conn: Connection,
    *,
    at: float,
    window: float,
    source: str,
    by: str,
    backup_taken_at: float | None = None,
    after: int = 1,
) -> Restore:
    """Record on ``conn`` that the store was put back: a new incarnation, above both the one the
    store holds and ``after`` (the incarnation of the store it replaced, or of the mark beside
    it), with its restore window of ``window`` seconds from ``at``."""
    held = standing(conn).incarnation
    made = Restore(
        incarnation=max(held, after) + 1,
        restored_at=at,
        window_until=at + window,
        backup_taken_at=backup_taken_at,
        source=source,
        by=by,
    )
    conn.execute(insert(restores).values(**made.__dict__))
    return made


# -- the high-water mark beside an SQLite file ------------------------------------------------


def mark_path(database: Path) -> Path:
    """Where the high-water mark of the SQLite store at ``database`` is kept."""
    return database.with_name(f"{database.name}.ratchet-mark")


def read_mark(path: Path) -> Standing | None:
    """The high-water mark at ``path``; None when there is none, or it cannot be read (a torn
    or foreign file says nothing)."""
    try:
        return _parse(path.read_bytes()[:_MARK_SIZE])
    except OSError:
        return None


def _parse(content: bytes) -> Standing | None:
    """A high-water mark's line, or None for a torn or foreign one."""
    parts = content.decode("ascii", errors="replace").split()
    if len(parts) != 5 or " ".join(parts[:2]) != _MARK_MAGIC:
        return None
    store_id, incarnation, sequence = parts[2:]
    if not (incarnation.isdigit() and sequence.isdigit()):
        return None
    return Standing(store_id, int(incarnation), int(sequence))


def _line(standing: Standing) -> bytes:
    text = f"{_MARK_MAGIC} {standing.store_id} {standing.incarnation} {standing.sequence}\n"
    return text.encode("ascii").ljust(_MARK_SIZE, b" ")


def _ahead(mine: Standing, theirs: Standing | None) -> bool:
    """Whether ``mine`` is past ``theirs`` (or ``theirs`` is another store's, or none)."""
    if theirs is None or theirs.store_id != mine.store_id:
        return True
    return (mine.incarnation, mine.sequence) > (theirs.incarnation, theirs.sequence)


class Mark:
    """The high-water mark of one SQLite store file, kept open by the store that writes it."""

    def __init__(self, database: Path) -> None:
        self.path = mark_path(database)
        self._fd: int | None = None

    def _open(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        return self._fd

    def raise_to(self, standing: Standing, *, force: bool = False) -> None:
        """Raise the mark to ``standing`` (``force``: set it even if lower: a restore's new
        incarnation). Under a lock on the file, so that two processes never lower it. A mark
        that cannot be written is left: the store is not refused for it."""
        try:
            fd = self._open()
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                if force or _ahead(standing, _parse(os.pread(fd, _MARK_SIZE, 0))):
                    os.pwrite(fd, _line(standing), 0)
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        except OSError:
            return

    def read(self) -> Standing | None:
        """The mark as it stands now (None: none, or unreadable)."""
        return read_mark(self.path)

    def check(self, found: Standing, mark: Standing | None) -> None:
        """Refuse the store (:class:`StoreCopiedBack`) when ``found`` (the store, read after
        ``mark`` was read: see :meth:`read`) is behind the mark: a copy put back behind
        Ratchet's back. Otherwise raise the mark to it."""
        behind = mark is not None and mark.store_id == found.store_id and _ahead(mark, found)
        if mark is not None and behind:
            raise StoreCopiedBack(
                f"this store's file is behind the high-water mark beside it ({self.path.name}"
                f": incarnation {mark.incarnation}, {mark.sequence} attempt(s) committed; the "
                f"file holds incarnation {found.incarnation}, {found.sequence}): it was put "
                "back from a copy without `ratchet restore`, and calls made after that copy "
                "was taken would be made again. If it was put back on purpose, confirm it "
                "with `ratchet restore --mark --db URL` (every operation is then looked up "
                "before its first call, for the restore window); nothing was changed"
            )
        self.raise_to(found)

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


def database_file(url_database: str | None) -> Path | None:
    """The file of an SQLite store from its URL's database part; None for a store in memory."""
    if not url_database or url_database == ":memory:" or url_database.startswith("file::memory:"):
        return None
    if not url_database.startswith("file:"):
        return Path(url_database)
    path, _, query = url_database.removeprefix("file:").partition("?")
    return None if "mode=memory" in query else Path(unquote(path))


def refuse_live_leases(conn: Connection, now: float) -> None:
    """Refuse to put a copy back over a store that workers are using now (a lease unexpired):
    they would carry on from what they hold in memory."""
    live = conn.execute(
        select(func.count())
        .select_from(runs)
        .where(runs.c.lease_token.is_not(None), runs.c.lease_expires_at > now)
    ).scalar()
    if live:
        raise StoreError(
            f"{live} run(s) are leased by a worker now: stop every worker of this store before "
            "putting a copy back (nothing was changed)"
        )
