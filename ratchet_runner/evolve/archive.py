"""Archives of pruned runs: compressed JSONL, each record chained to the one before it.

``ratchet prune --archive FILE`` writes each run it is about to prune as the history ``ratchet
export`` writes (``ratchet.run/1``, :func:`~ratchet_runner.evolve.history.dump_line`), wrapped
in a line that carries the SHA-256 of the line before it (``sha256_previous``; 64 zeros for the
file's first): ``{"sha256_previous": ..., "history": {...}}``. Each prune opens with a line
``{"opened": ...}`` and closes with ``{"closed": {"histories": N}}``; each batch between is one
gzip member, written and flushed to disk before the batch's runs are pruned. A file is appended
to by the next prune, its chain going on; a member cut off by a crash at the file's end is cut
away first (its runs were not pruned: the next prune writes them again), and a prune stopped
before it closed is closed as ``stopped``.

:func:`verify` reads it back: a line changed, removed, inserted or moved breaks the chain at
the line after it, and is named; a prune's histories that do not add up to its closing line's
count are named too.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import time
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..store.records import RunRecord
from .history import History, LineProblem, dump_line, history_from_json, parse_line

ZERO = "0" * 64


@dataclass(frozen=True)
class Member:
    """One gzip member of the file: where it starts and ends, its text, and whether it is whole."""

    start: int
    end: int
    data: bytes
    whole: bool


def members(raw: bytes) -> Iterator[Member]:
    """The gzip members of ``raw``, in order; the last may be cut off (``whole`` False)."""
    at = 0
    while at < len(raw):
        reading = zlib.decompressobj(wbits=31)
        try:
            data = reading.decompress(raw[at:])
        except zlib.error:
            yield Member(at, len(raw), b"", False)
            return
        if not reading.eof:
            yield Member(at, len(raw), data, False)
            return
        end = len(raw) - len(reading.unused_data)
        yield Member(at, end, data, True)
        at = end


#: How every gzip member begins.
_GZIP_MAGIC = b"\x1f\x8b"


def not_an_archive(path: Path, *, opening: bool = True) -> str | None:
    """Why the file at ``path`` is not an archive ``ratchet prune`` wrote (None: it is one, or
    it is empty or missing, which a prune may start): it does not begin as gzip does, or (with
    ``opening``) its first line does not open a chain."""
    try:
        with path.open("rb") as file:
            head = file.read(2)
    except FileNotFoundError:
        return None
    if not head:
        return None
    if head != _GZIP_MAGIC:
        return "it is not gzip"
    if not opening:
        return None
    lines, _good, _cut = _lines(path)
    if not lines:
        return None  # its first write cut off by a crash: a prune's own, cut away
    try:
        first = json.loads(lines[0])
    except ValueError:
        first = None
    if not isinstance(first, dict) or first.get("sha256_previous") != ZERO:
        return "its first line does not open a chain"
    return None


def _lines(path: Path) -> tuple[list[bytes], int, bool]:
    """The archive's lines, where its whole members end, and whether it ends cut off."""
    raw = path.read_bytes() if path.exists() else b""
    lines: list[bytes] = []
    good, cut = 0, False
    for member in members(raw):
        if not member.whole:
            cut = True
            break
        lines += [line for line in member.data.split(b"\n") if line]
        good = member.end
    return lines, good, cut


@dataclass
class Writer:
    """Appends to an archive: each batch a member, flushed to disk; :meth:`close` ends it."""

    path: Path
    tip: str = ZERO
    written: int = 0

    @classmethod
    def open(cls, path: str | Path) -> Writer:
        """An archive to append to, opened for one prune: a new file, or one whose chain goes
        on from its last line (a member cut off at its end by a crash is cut away first, and a
        prune that was stopped before it closed is closed as stopped)."""
        where = Path(path)
        why = not_an_archive(where) if not where.is_dir() else "it is a folder"
        if why is not None:
            raise UsageError(
                f"{path} is not an archive of ratchet prune ({why}): nothing was pruned and the "
                "file is as it was; give a new file, or an archive to append to"
            )
        lines, good, cut = _lines(where)
        if cut:
            with where.open("r+b") as file:
                file.truncate(good)
        writer = cls(where, hashlib.sha256(lines[-1]).hexdigest() if lines else ZERO)
        stopped = _open_prune(lines)
        if stopped is not None:
            writer._append([{"closed": {"histories": stopped, "stopped": True}}], sealed=True)
        writer._append([{"opened": {"at": time.time()}}])
        return writer

    def _append(self, records: Sequence[dict[str, Any]], sealed: bool = False) -> None:
        text = []
        for record in records:
            line = json.dumps(
                {"sha256_previous": self.tip, **record}, ensure_ascii=False, separators=(",", ":")
            )
            if sealed:  # ...,"sha256":"<the SHA-256 of everything before it>"}
                body = line[:-1]
                line = f'{body},"sha256":"{hashlib.sha256(body.encode("utf-8")).hexdigest()}"}}'
            text.append(line)
            self.tip = hashlib.sha256(line.encode("utf-8")).hexdigest()
        blob = gzip.compress(("\n".join(text) + "\n").encode("utf-8"))
        try:
            with self.path.open("ab") as file:
                file.write(blob)
                file.flush()
                os.fsync(file.fileno())
        except OSError as exc:
            raise UsageError(
                f"cannot write the archive {str(self.path)!r}: {exc.strerror or exc}; the runs "
                "it does not hold were not pruned"
            ) from None

    def write(self, histories: Sequence[History]) -> None:
        """Append ``histories`` as one member, on disk when this returns."""
        if histories:
            self._append([{"history": json.loads(dump_line(h))} for h in histories])
            self.written += len(histories)

    def close(self) -> None:
        """End what this prune wrote with its count, the line sealed by its own SHA-256 (no line
        follows it to carry its hash)."""
        self._append([{"closed": {"histories": self.written}}], sealed=True)


@dataclass
class Verified:
    """What :func:`verify` found: the histories, the prunes closed, and each problem."""

    histories: int = 0
    closed: int = 0
    problems: list[str] = field(default_factory=list)
    cut: bool = False
    #: The IDs of the runs whose histories it holds.
    runs: set[str] = field(default_factory=set)
    #: With a store (:func:`against`): the pruned runs whose tombstones name this archive.
    named: int | None = None

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "histories": self.histories,
            "closed": self.closed,
            "cut_off": self.cut,
            "problems": self.problems,
        } | ({} if self.named is None else {"tombstones_naming_it": self.named})


def _open_prune(lines: Sequence[bytes]) -> int | None:
    """How many histories the last prune wrote, if it was not closed; None if it was."""
    count: int | None = None
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict):
            continue
        if "opened" in record:
            count = 0
        elif "closed" in record:
            count = None
        elif "history" in record and count is not None:
            count += 1
    return count


def verify(path: str | Path) -> Verified:
    """Check the archive's chain and counts (see the module); a problem names its line."""
    where = Path(path)
    if not where.is_file():
        raise UsageError(f"no archive {str(path)!r}")
    why = not_an_archive(where, opening=False)  # a first line changed is named as any other
    if why is not None:
        return Verified(problems=[f"{path}: not an archive of ratchet prune ({why})"])
    lines, _good, cut = _lines(where)
    found = Verified(cut=cut)
    if not lines and where.stat().st_size and not cut:
        found.problems.append(f"{path}: not an archive (no gzip member can be read)")
    previous, open_count, opened_at = ZERO, 0, 0
    for number, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
        except ValueError:
            found.problems.append(f"{path}:{number}: not JSON: the line was changed")
            previous = hashlib.sha256(line).hexdigest()
            continue
        if not isinstance(record, dict) or record.get("sha256_previous") != previous:
            found.problems.append(
                f"{path}:{number}: does not follow line {number - 1}: line {number - 1} was "
                "changed, or a line was removed, inserted or moved before this one"
                if number > 1
                else f"{path}:1: the first line does not start the chain"
            )
        previous = hashlib.sha256(line).hexdigest()
        if not isinstance(record, dict):
            continue
        if "opened" in record:
            if opened_at:
                found.problems.append(
                    f"{path}:{number}: a prune opens while the one opened at line {opened_at} "
                    "was never closed: its closing line was removed"
                )
            opened_at, open_count = number, 0
        elif "history" in record:
            checked = parse_line(json.dumps(record["history"]).encode("utf-8"), str(path), number)
            if isinstance(checked, LineProblem):
                found.problems.append(f"{path}:{number}: {checked.code} {checked.message}")
            else:
                found.runs.add(str((record["history"].get("run") or {}).get("id")))
            if not opened_at:
                found.problems.append(f"{path}:{number}: a history outside any prune")
            found.histories += 1
            open_count += 1
        elif "closed" in record:
            body, _sep, seal = line.rpartition(b',"sha256":"')
            if seal[:-2].decode("utf-8", "replace") != hashlib.sha256(body).hexdigest():
                found.problems.append(
                    f"{path}:{number}: the closing line was changed (its own SHA-256 differs)"
                )
            said = (record.get("closed") or {}).get("histories")
            if said != open_count:
                found.problems.append(
                    f"{path}:{number}: closes a prune of {said} histories, but {open_count} "
                    "precede it: a history was removed or added"
                )
            found.closed += 1
            opened_at, open_count = 0, 0
    if opened_at:
        found.problems.append(
            f"{path}:{len(lines) + 1}: the archive ends inside the prune opened at line "
            f"{opened_at}: its closing line was removed, or that prune is still running (the next "
            "prune closes a stopped one)"
        )
    return found


def against(found: Verified, path: str | Path, tombstones: Iterable[RunRecord]) -> Verified:
    """Check ``found`` (the archive at ``path``, verified) against a store's ``tombstones``
    (its pruned runs): each whose tombstone names an archive of this file's name must have its
    history in it. Prunes cut from the file's end leave its chain whole; this finds them."""
    name = Path(path).name
    named, missing = 0, []
    for run in tombstones:
        context: dict[str, Any] = dict(run.context)
        kept = (context.get("pruned") or {}).get("archive")
        if not kept or Path(str(kept)).name != name:
            continue
        named += 1
        if run.id not in found.runs:
            missing.append(run.id)
    found.named = named
    if missing:
        found.problems.append(
            f"{path}: {len(missing):,} pruned run(s) whose tombstones name this archive are not "
            f"in it (the first: {missing[0]}): their histories were removed, or the prunes that "
            "wrote them were cut from its end (the chain alone cannot show that)"
        )
    return found


def find(path: str | Path, reference: str) -> History:
    """The last history in the archive of the run ``reference`` (an ID or a business key): a
    :class:`UsageError` when it holds none, or more than one run has that business key."""
    where = Path(path)
    if not where.is_file():
        raise UsageError(f"no archive {str(path)!r}")
    lines, _good, _cut = _lines(where)
    by_id: dict[str, dict[str, Any]] = {}
    keys: dict[str, set[str]] = {}
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        history = record.get("history") if isinstance(record, dict) else None
        if not isinstance(history, dict) or not isinstance(history.get("run"), dict):
            continue
        run = history["run"]
        by_id[str(run.get("id"))] = history
        keys.setdefault(str(run.get("business_key")), set()).add(str(run.get("id")))
    run_id = reference if reference in by_id else None
    if run_id is None:
        named = keys.get(reference, set())
        if len(named) > 1:
            raise UsageError(f"{reference!r} names {len(named)} runs in {path}: give a run ID")
        run_id = next(iter(named), None)
    if run_id is None:
        raise UsageError(f"{path} holds no run {reference!r}")
    return history_from_json(by_id[run_id], f"{path}")
