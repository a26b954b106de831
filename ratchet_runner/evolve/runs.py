"""What the checks of a change need to know about one unfinished run: :class:`LiveRun`.

:func:`live_runs` reads them through the store's API (:meth:`Store.open_runs
<ratchet_runner.store.store.Store.open_runs>` and one read per table for all of them): every run
of a workflow that is neither done nor cancelled, on any of its versions, with its operations,
its decisions, its armed timers, the signals it received and, for a run waiting for a person,
the item the operator queue shows. What each word means is the engine's: an operation written
ahead and perhaps sent (``pending`` with an attempt counted), an outcome nobody could learn
(``unknown``), a lookup still due (a settle window, a verification), an approval held (recorded,
not yet consumed by the call it allows).

Ratchet never queues a signal: one that does not fit a run's state is refused, never kept
(:func:`~ratchet_runner.engine.signals.send_signal`). The signals a run "has queued" are the ones
it waits for: those its pause or wait state resumes on, which people and webhooks will send.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..store.records import (
    ApprovalRecord,
    OperationRecord,
    RunRecord,
    SignalRecord,
    TimerRecord,
    latest_event,
)
from ..store.store import Store
from ..words import EventKind, OperationStatus, RunStatus

#: The events that say why a run waits for a person (the newest one is its queue item).
_QUEUED = (EventKind.QUEUED, EventKind.STUCK, EventKind.STEP_FAILED, EventKind.VERSION_STUCK)


@dataclass(frozen=True)
class LiveRun:
    """One unfinished run, as the checks of a change read it."""

    run: RunRecord
    operations: tuple[OperationRecord, ...] = ()
    approvals: tuple[ApprovalRecord, ...] = ()
    #: The timers armed and not fired (nor discarded).
    timers: tuple[TimerRecord, ...] = ()
    signals: tuple[SignalRecord, ...] = ()
    #: For a run waiting for a person: why (the newest ``queued``, ``stuck``, ``step_failed``
    #: or ``version_stuck`` event's data), as the operator queue shows it.
    queued: Mapping[str, Any] | None = None

    @property
    def id(self) -> str:
        return self.run.id

    @property
    def state(self) -> str:
        return self.run.state

    @property
    def status(self) -> RunStatus:
        return self.run.status

    @property
    def spec_digest(self) -> str:
        return self.run.spec_digest

    @property
    def context(self) -> Mapping[str, Any]:
        """The run's recorded context (what it keeps between moves)."""
        return self.run.context

    @property
    def receipts(self) -> dict[str, dict[str, Any]]:
        """The receipt of each forward effect made, by effect."""
        return dict(self.run.context.get("receipts", {}))

    def of_effect(self, effect: str, role: str = "forward") -> list[OperationRecord]:
        """The run's operations of ``effect`` in ``role`` (``forward`` or ``compensation``)."""
        return [op for op in self.operations if op.effect == effect and op.role == role]

    def attempted(self, effect: str) -> list[OperationRecord]:
        """The forward operations of ``effect`` the run has called at least once."""
        return [op for op in self.of_effect(effect) if op.attempts > 0]

    def made(self, effect: str) -> list[OperationRecord]:
        """The forward operations of ``effect`` made (``done``), or perhaps made (called, its
        outcome not known): the changes an undo may be needed for."""
        return [
            op
            for op in self.attempted(effect)
            if op.status in (OperationStatus.DONE, OperationStatus.PENDING, OperationStatus.UNKNOWN)
        ]

    def undo_of(self, operation_id: str) -> OperationRecord | None:
        """The compensation registered for forward operation ``operation_id``, if any."""
        return next((op for op in self.operations if op.compensates == operation_id), None)

    @property
    def in_window(self) -> list[tuple[OperationRecord, str]]:
        """The run's operations inside an effect window, each with which: ``pending`` (written
        ahead and called, its outcome not yet known: the next step looks it up first),
        ``unknown outcome`` (nobody could learn it), ``reconcile due`` (a lookup scheduled: a
        provider's settle window, or a verification of a call sent again)."""
        due = set(self.run.context.get("verifying", {}))
        if self.run.context.get("wake_at") is not None:
            due |= {
                op.operation_id
                for op in self.operations
                if op.status == OperationStatus.PENDING and op.attempts > 0
            }
        found: list[tuple[OperationRecord, str]] = []
        for op in self.operations:
            if op.operation_id in due:
                found.append((op, "reconcile due"))
            elif op.status == OperationStatus.PENDING and op.attempts > 0:
                found.append((op, "pending"))
            elif op.status == OperationStatus.UNKNOWN:
                found.append((op, "unknown outcome"))
        return found

    @property
    def held(self) -> list[ApprovalRecord]:
        """The approvals the run holds: given and not yet consumed by the call they allow."""
        return [a for a in self.approvals if a.decision == "approved" and a.consumed_at is None]


def live_runs(store: Store, workflow: str) -> list[LiveRun]:
    """Every unfinished run of ``workflow`` (on any of its versions), oldest first, with what
    the checks of a change read of it."""
    found = store.open_runs(workflow)
    ids = [run.id for run in found]
    operations = _by_run(store.operations(runs_in=ids) if ids else [])
    approvals = _by_run(store.approvals(runs_in=ids) if ids else [])
    timers = _by_run([t for t in store.timers(runs_in=ids) if t.fired_at is None] if ids else [])
    signals = _by_run(store.signals(runs_in=ids) if ids else [])
    return [
        LiveRun(
            run,
            tuple(operations.get(run.id, ())),
            tuple(approvals.get(run.id, ())),
            tuple(timers.get(run.id, ())),
            tuple(signals.get(run.id, ())),
            _queued(store, run),
        )
        for run in found
    ]


def live_run(store: Store, run: RunRecord) -> LiveRun:
    """What the checks read of one run, as it is now (a migration takes each run's verdict
    again from this before it moves it)."""
    return LiveRun(
        run,
        tuple(store.operations(run.id)),
        tuple(store.approvals(run.id)),
        tuple(t for t in store.timers(run.id) if t.fired_at is None),
        tuple(store.signals(run.id)),
        _queued(store, run),
    )


def _by_run(records: list[Any]) -> dict[str, list[Any]]:
    grouped: dict[str, list[Any]] = {}
    for record in records:
        grouped.setdefault(record.run_id, []).append(record)
    return grouped


def _queued(store: Store, run: RunRecord) -> Mapping[str, Any] | None:
    if run.status != RunStatus.NEEDS_PERSON:
        return None
    return latest_event(store.history(run.id), _QUEUED) or {}
