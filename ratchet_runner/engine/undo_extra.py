"""A run held for a duplicate: its extra changes undone, then a person asked (:mod:`.duplicates`).

While a run is held (:func:`~.duplicates.holding`), each step of it is :func:`step`: the next undo
of an extra change, an :class:`ExtraUndoStep` (the effect protocol: its own operation ID, a
write-ahead record, reconcile before any retry, persisted attempts), until none is left; then the
run waits for a person where it stands (``needs_person``), with what was found and what was done
(a ``queued`` item). ``ratchet ops retry`` takes it on from where it was
(:func:`~ratchet_runner.engine.controls.operate`).
"""

from __future__ import annotations

from typing import Any, Final

from ..adapters.base import Escalate
from ..spec.model import Spec
from ..store.context import without
from ..store.records import Change, OperationRecord, RunRecord
from ..words import EventKind, OperationStatus, RunStatus
from . import duplicates
from .activation import activation
from .compensation import CompensationStep
from .host import StepHost

#: The run's context key: the undos of extra changes that failed, with why.
FAILED: Final = "duplicate_undo_failed"


class ExtraUndoStep(CompensationStep):
    """The undo of one extra change, its arguments made from that change's receipt when it was
    registered. It ends the same way however it goes: the undo is taken off the list, and a
    failure (refused, out of attempts, unknown) is kept for the person who is asked next."""

    role = duplicates.UNDO_EXTRA

    def _activation(self, run: RunRecord, spec: Spec) -> dict[str, Any]:
        found = duplicates.extra_receipt(run, self.registered.operation_id)
        if found is None:
            return activation(run, spec)
        effect, receipt = found
        return activation(run, spec, receipts={**run.context.get("receipts", {}), effect: receipt})

    def _record_done(self, change: Change, op: OperationRecord, receipt: dict[str, Any]) -> None:
        self._taken_off(change, op, None)

    def _finish(self, op: OperationRecord, receipt: dict[str, Any], via: str) -> RunRecord:
        change = self._done_change(op, receipt, via)
        self._record_done(change, op, receipt)
        self.run = self.host.store.commit(change)
        return self.run

    def _outcome(
        self,
        op: OperationRecord,
        event: OperationStatus,
        reason: str,
        evidence: dict[str, Any] | None = None,
    ) -> RunRecord:
        change = self._ended_change(op, event, reason, evidence)
        self._taken_off(change, op, f"{event}: {reason}")
        self.run = self.host.store.commit(change)
        return self.run

    def _escalate(self, op: OperationRecord, outcome: Escalate) -> RunRecord:
        status = OperationStatus.UNKNOWN if outcome.possibly_applied else OperationStatus.REFUSED
        return self._outcome(op, status, outcome.reason, outcome.evidence)

    def _taken_off(self, change: Change, op: OperationRecord, failure: str | None) -> None:
        """Take ``op`` off the undos still to make, in ``change``; keep why it failed."""
        context = (change.context if change.context is not None else self.run.context).copy()
        context[duplicates.UNDOING] = [
            i for i in context.get(duplicates.UNDOING, []) if i != op.operation_id
        ]
        if failure is not None:
            context[FAILED] = {**context.get(FAILED, {}), op.operation_id: failure}
        context["wake_at"] = None
        change.context = context


def step(host: StepHost, run: RunRecord, spec: Spec) -> RunRecord:
    """One step of a run held for a duplicate: the next undo of an extra change, or, with none
    left, the run handed to a person where it stands."""
    left = duplicates.pending(run)
    if left:
        registered = host.store.operation(left[0])
        if registered is not None:
            return ExtraUndoStep(host, run, spec, registered).perform()
        change = host.change(run)  # an undo the store does not have: nothing to make
        change.context = {**run.context, duplicates.UNDOING: left[1:]}
        return host.store.commit(change)
    change = host.change(run)
    change.status = RunStatus.NEEDS_PERSON
    change.context = {**run.context, "wake_at": None}
    found = run.context.get(duplicates.FOUND, [])
    change.event(
        EventKind.QUEUED,
        queue=run.state,
        operator_action=duplicates.action(run, dict(run.context.get(FAILED, {}))),
        duplicates=[f["operation_id"] for f in found],
        effect=found[-1]["effect"] if found else None,
        operation_id=found[-1]["operation_id"] if found else None,
    )
    return host.store.commit(change)


def release(run: RunRecord, change: Change) -> str:
    """In ``change``, let a run held for a duplicate go on from where it was (an operator's
    ``ratchet ops retry``): its state and status as they were when the duplicate was found,
    the duplicates kept in its history. Returns where it goes on from."""
    was = run.context.get(duplicates.WAS, {})
    change.context = without(run.context, duplicates.WAS, duplicates.UNDOING, FAILED, "wake_at")
    change.state = was.get("state") or run.state
    change.status = RunStatus(was.get("status") or RunStatus.RUNNING)
    return f"{change.state} ({change.status})"
