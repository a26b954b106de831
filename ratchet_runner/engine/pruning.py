"""Retention: finished runs pruned to their tombstones, in small batches (``ratchet prune``).

:func:`prune` takes the finished runs last changed before a moment, oldest first, a batch at a
time, each batch one short transaction (:meth:`~ratchet_runner.store.store.Store.prune`), so
that workers never wait long on it; a prune stopped midway (even by SIGKILL) leaves every run
either whole or pruned, and run again it goes on where it stopped. It never takes a run that is
not finished, has a timer still armed (a receipt's later verification), or has an operation
whose outcome is not settled. What stays of a pruned run answers for it: starting the same
business key again finds the run done, with its receipts, and makes nothing again; another input
for it is still refused (its input's digest is kept) (:mod:`~ratchet_runner.store.prune`).

A tombstone is kept forever, unless the spec version its run finished under says otherwise
(``retention.operation_ids``): then the same prune forgets the tombstones older than that, a
batch at a time, and the business key started again is a new run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import SpecError
from ..spec.validate import load_stored_spec
from ..store.context import RunContext
from ..store.records import RunRecord
from ..store.store import Store
from .identity import sha256

#: Runs compacted per transaction.
BATCH = 100
#: The least rest between two batches on SQLite, in seconds: longer than the longest sleep of
#: SQLite's busy handler (100 ms), so that a writer waiting for the lock gets it.
SQLITE_REST = 0.12
#: What of a run's context its tombstone keeps (beside the ``pruned`` record).
KEPT = ("ratchet_version", "binding", "operations", "receipts", "completed", "migrated")


@dataclass
class Pruned:
    """What :func:`prune` did (or, with ``dry_run``, would do)."""

    before: float
    dry_run: bool = False
    pruned: int = 0
    batches: int = 0
    #: Runs that moved on between the read and the write (left as they are).
    left: int = 0
    oldest: float | None = None
    newest: float | None = None
    seconds: float = 0.0
    by_workflow: dict[str, int] = field(default_factory=dict)
    #: Tombstones removed whole, past their workflow's ``retention.operation_ids``.
    forgotten: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "before": self.before,
            "dry_run": self.dry_run,
            "pruned": self.pruned,
            "batches": self.batches,
            "left": self.left,
            "oldest": self.oldest,
            "newest": self.newest,
            "seconds": round(self.seconds, 3),
            "by_workflow": self.by_workflow,
            "forgotten": self.forgotten,
        }


def tombstone(run: RunRecord, now: float, archive: str | None = None) -> RunContext:
    """The context a pruned ``run`` keeps: what answers for it, and its input's digest."""
    kept: dict[str, Any] = {k: v for k, v in run.context.items() if k in KEPT}
    kept["pruned"] = {
        "at": now,
        "input_digest": sha256(run.input),
        "events": 0,
        "archive": archive,
    }
    return kept  # type: ignore[return-value]


def prune(
    store: Store,
    before: float,
    now: float,
    *,
    batch: int = BATCH,
    dry_run: bool = False,
    progress: Callable[[Pruned], None] | None = None,
    keep: Callable[[list[RunRecord]], str | None] | None = None,
    rest: float | None = None,
) -> Pruned:
    """Prune the finished runs last changed before ``before`` (see the module), a batch at a
    time; with ``dry_run``, count them and change nothing. ``keep`` is given each batch before
    it is pruned, and keeps it (``ratchet prune --archive``: on disk when it returns), returning
    where, as the tombstones record. ``progress`` is told after each batch.

    Between two batches it rests ``rest`` times as long as the batch took (default: on SQLite,
    once as long, at least :data:`SQLITE_REST` seconds; elsewhere not at all). SQLite has one
    writer at a time and its lock is not fair: a worker waiting for it polls, and a pruner that
    began its next batch at once would take the lock first, again and again (a worker's commit
    waited 4.9 s at 100,000 runs, ``bench/bench_prune.py``). On PostgreSQL a batch locks only
    its own runs' rows."""
    began = time.monotonic()
    if rest is None:
        rest = 1.0 if store.dialect.name == "sqlite" else 0.0
    done = Pruned(before, dry_run)
    after: tuple[float, str] | None = None
    while True:
        found = store.prunable(before, batch, after)
        if not found:
            break
        after = (found[-1].updated_at, found[-1].id)
        if dry_run:
            taken = [r.id for r in found]
        else:
            kept = keep(found) if keep is not None else None
            writing = time.monotonic()
            taken = store.prune([(r, tombstone(r, now, kept)) for r in found], now)
            if rest:
                time.sleep(max(SQLITE_REST, rest * (time.monotonic() - writing)))
        done.batches += 1
        done.pruned += len(taken)
        done.left += len(found) - len(taken)
        ids = set(taken)
        for run in found:
            if run.id in ids:
                done.by_workflow[run.workflow] = done.by_workflow.get(run.workflow, 0) + 1
                done.oldest = run.updated_at if done.oldest is None else done.oldest
                done.newest = run.updated_at
        if progress is not None:
            progress(done)
    _forget(store, now, batch, dry_run, rest, done)
    done.seconds = time.monotonic() - began
    return done


def retention_of(text: str) -> float | None:
    """The ``retention.operation_ids`` of a stored spec version, in seconds (None: forever, or
    a text that no longer loads: kept)."""
    try:
        return load_stored_spec(text).retention_ids
    except SpecError:
        return None


def _forget(store: Store, now: float, batch: int, dry_run: bool, rest: float, done: Pruned) -> None:
    """Forget the tombstones past the ``retention.operation_ids`` of the spec version each run
    finished under, a batch per transaction (resting as prune does); with ``dry_run``, count."""
    for digest, text in store.stored_specs():
        seconds = retention_of(text)
        if seconds is None:
            continue
        after: tuple[float, str] | None = None
        while found := store.forgettable(digest, now - seconds, batch, after):
            after = (found[-1].updated_at, found[-1].id)
            if dry_run:
                done.forgotten += len(found)
                continue
            writing = time.monotonic()
            done.forgotten += len(store.forget(found))
            if rest:
                time.sleep(max(SQLITE_REST, rest * (time.monotonic() - writing)))
