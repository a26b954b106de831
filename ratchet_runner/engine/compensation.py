"""Compensation: undoing a run's forward effects, newest first, while it stands in a ``compensate``
state.

:func:`compensate` takes one step of the saga: it undoes the newest forward effect not yet undone
by its registered compensation (a :class:`CompensationStep`, the effect protocol with a different
ending), reconciles first a forward operation whose outcome is not known, skips (and records) one
that registered no undo, and moves the run by ``ok`` once nothing is left. It works against a
:class:`~ratchet_runner.engine.host.StepHost`, like the effect step.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..adapters.base import Found, LookupFailed, LookupResult, NotFound
from ..spec.model import Compensation, Effect, Spec
from ..store.context import RunContext
from ..store.records import Change, OperationRecord, RunRecord
from ..words import GAVE_UP, EventKind, OperationStatus, RunStatus
from . import duplicates
from .host import StepHost
from .protocol import EffectStep
from .providers import DEFAULT_CALL_SECONDS, ask, conclusive_from, why_unsettled
from .verify import schedule as schedule_verification

#: The statuses of a forward operation whose change may have been made without the runner
#: knowing: ``unknown`` (its lookup failed), ``pending`` with a call on record (the process
#: died, or the run was moved on, before the outcome was known), and ``exhausted`` or
#: ``expired`` (no further attempt: each ambiguous attempt was looked up and not found, but a
#: provider may commit late, and an effect without a lookup never knew). A compensation asks
#: once more rather than assume nothing was made.
UNRESOLVED = frozenset(
    {
        OperationStatus.UNKNOWN,
        OperationStatus.PENDING,
        OperationStatus.EXHAUSTED,
        OperationStatus.EXPIRED,
    }
)


def outcome_unresolved(op: OperationRecord) -> bool:
    """Whether ``op`` may have been made although it is not recorded done."""
    return op.status in UNRESOLVED and op.attempts > 0


class CompensationStep(EffectStep):
    """One registered compensation, run while the run stands in a ``compensate`` state."""

    role = "compensation"

    def __init__(
        self, host: StepHost, run: RunRecord, spec: Spec, registered: OperationRecord
    ) -> None:
        self.registered = registered
        super().__init__(host, run, spec, spec.effects[registered.effect])

    def _name(self) -> str:
        return self.registered.operation_id

    def perform(self) -> RunRecord:
        op = self.host.store.operation(self.operation_id) or self.registered
        if op.status in GAVE_UP:
            return self._outcome(op, op.status, op.last_error or op.status)
        return super().perform()

    def _record_done(self, change: Change, op: OperationRecord, receipt: dict[str, Any]) -> None:
        """A done undo is kept among the undone ones: the saga does not make it again."""
        context = change.context if change.context is not None else self.run.context
        undone = list(context.get("undone", []))
        if op.operation_id not in undone:
            undone.append(op.operation_id)
        change.context = {**context, "undone": undone, "wake_at": None}

    def _finish(self, op: OperationRecord, receipt: dict[str, Any], via: str) -> RunRecord:
        change = self._done_change(op, receipt, via)
        self._record_done(change, op, receipt)
        self.run = self.host.store.commit(change)
        self.host.interrupt("after-receipt", self.effect.name)
        return self.run


def compensate(host: StepHost, run: RunRecord, spec: Spec) -> RunRecord:
    """Undo the forward effects, newest first, one compensation (or one lookup) per step.

    The completed effects are undone by their registered compensations. A forward operation
    whose outcome is not known (:data:`UNRESOLVED`) and that registered an undo is first
    reconciled by its operation ID (:func:`_reconcile_for_undo`): found, it is recorded done
    and undone in its turn; not found, its undo is skipped; if nobody can tell, the run goes
    to a person instead of ending compensated with the change perhaps still made."""
    operations = host.store.operations(run.id)
    by_id = {op.operation_id: op for op in operations}
    undo = {op.compensates: op for op in operations if op.role == "compensation"}
    noted = set(run.context.get("skipped_undo", []))
    completed = set(run.context.get("completed", []))
    impossible = {
        op.operation_id
        for op in operations
        if op.role == "forward" and _kind_of_undo(spec, op.effect) == "impossible"
    }
    for forward_id in reversed(_undo_order(run, operations, undo, impossible)):
        forward = by_id.get(forward_id)
        registered = undo.get(forward_id)
        if forward_id not in completed:  # outcome unknown: ask the provider first
            if forward_id in noted or forward is None:
                continue
            if registered is None:  # it may have been made, and cannot be undone
                return _skip_undo(host, run, spec, forward, noted)
            return _reconcile_for_undo(host, run, spec, forward, registered)
        if registered is None:
            if forward_id in noted or forward is None:
                continue
            return _skip_undo(host, run, spec, forward, noted)
        if registered.status == OperationStatus.DONE:
            continue
        return CompensationStep(host, run, spec, registered).perform()
    change = host.change(run)
    cannot = [by_id[i] for i in run.context.get("cannot_undo", []) if i in by_id]
    if cannot:  # everything undoable is undone; what is left is a person's to decide
        change.event(
            EventKind.COMPENSATION_INCOMPLETE,
            effects=[op.effect for op in cannot],
            operation_ids=[op.operation_id for op in cannot],
            undone=len(run.context.get("undone", [])),
            reason=f"{', '.join(op.effect for op in cannot)} cannot be undone "
            f"({'; '.join(_no_undo_reason(spec, op.effect) for op in cannot)})",
        )
        return host.move(run, spec, "refused", change)
    change.event(EventKind.COMPENSATED, undone=len(run.context.get("undone", [])))
    return host.move(run, spec, "ok", change)


def _skip_undo(
    host: StepHost, run: RunRecord, spec: Spec, forward: OperationRecord, noted: set[str]
) -> RunRecord:
    """Record that a completed forward effect with no registered undo is not undone. Kept on
    purpose (``none: …``), it is left as it is. One that ``impossible: …`` says cannot be undone
    is a change still made: it is noted, and once every other effect is undone the run is
    handed to a person (by the compensate state's ``refused`` row) instead of ending
    compensated. One that declares no compensation (E509) or registered none (a step that
    forgets to, as a hand-rolled loop would) is skipped: ``ratchet check`` shows what that
    leaves."""
    declared = _declared_undo(spec, forward.effect)
    change = host.change(run)
    context: RunContext = {**run.context, "skipped_undo": [*noted, forward.operation_id]}
    if declared is not None and declared.kind == "impossible":
        context["cannot_undo"] = [*run.context.get("cannot_undo", []), forward.operation_id]
    change.context = context
    change.event(
        EventKind.COMPENSATION_SKIPPED,
        operation_id=forward.operation_id,
        effect=forward.effect,
        undo=declared.kind if declared is not None else "missing",
        reason=_no_undo_reason(spec, forward.effect),
    )
    return host.store.commit(change)


def _undo_order(
    run: RunRecord,
    operations: list[OperationRecord],
    undo: Mapping[str | None, Any],
    impossible: set[str],
) -> list[str]:
    """The forward operations to undo, oldest first: the completed ones in the order they
    completed, and each one with an unknown outcome and a registered undo (or one that cannot
    be undone, in ``impossible``) placed where its pending record was written (the run's
    ``operations`` list keeps that order; the store's timestamps may tie)."""
    order = list(run.context.get("completed", []))
    for op in operations:
        if (
            op.role == "forward"
            and op.operation_id not in order
            and (op.operation_id in undo or op.operation_id in impossible)
            and outcome_unresolved(op)
        ):
            order = _in_written_order(run, order, op.operation_id)
    return order


def _in_written_order(run: RunRecord, order: list[str], operation_id: str) -> list[str]:
    """``order`` with ``operation_id`` inserted before the first operation whose pending
    record was written after its own."""
    written = {oid: i for i, oid in enumerate(run.context.get("operations", []))}
    mine = written.get(operation_id, len(written))
    later = (i for i, oid in enumerate(order) if written.get(oid, -1) > mine)
    at = next(later, len(order))
    return [*order[:at], operation_id, *order[at:]]


def _reconcile_for_undo(
    host: StepHost,
    run: RunRecord,
    spec: Spec,
    forward: OperationRecord,
    registered: OperationRecord,
) -> RunRecord:
    """Ask the provider, by its operation ID, whether a forward operation whose outcome is
    unknown was made, before the saga decides whether to undo it."""
    effect = spec.effects[forward.effect]
    if effect.reconcile is None:
        return _unknown_to_person(
            host, run, forward, "the effect has no reconcile lookup", looked=False
        )
    adapter = host.adapter(spec, effect.adapter)
    found: LookupResult = ask(
        adapter, effect.reconcile, forward.operation_id, effect.name, forward.args
    )
    field = _receipt_field(spec, effect)
    if (
        isinstance(found, Found)
        and found.receipt
        and (field is None or bool(found.receipt.get(field)))
    ):
        return _found_for_undo(host, run, spec, forward, found, field)
    if isinstance(found, NotFound):
        semantics = host.semantics(spec, effect)
        seconds = effect.timeout if effect.timeout is not None else DEFAULT_CALL_SECONDS
        until = conclusive_from(run, forward, semantics, seconds)
        if until is not None and until > host.now():  # it may still be made: ask again then
            return _await_undo_lookup(host, run, forward, until, why_unsettled(semantics))
        change = host.change(run)
        noted = list(run.context.get("skipped_undo", []))
        change.context = {**run.context, "skipped_undo": [*noted, forward.operation_id]}
        change.operation_updates.append(
            (
                forward.operation_id,
                {"last_error": "not on the provider's record when compensating: not made"},
            )
        )
        change.event(
            EventKind.COMPENSATION_SKIPPED,
            operation_id=forward.operation_id,
            effect=forward.effect,
            outcome="not_made",
            reason=(
                f"op {forward.operation_id[:12]} is not on the provider's record: "
                f"it was not made, so {registered.effect} has nothing to undo"
            ),
        )
        # should the provider make it later still (past the window it promised), a lookup
        # later on finds it, and the saga's undo is made then (:mod:`.verify`)
        schedule_verification(
            change, run, forward.operation_id, semantics.window if semantics is not None else 0.0
        )
        return host.store.commit(change)
    reason = found.reason if isinstance(found, LookupFailed) else "malformed lookup reply"
    return _unknown_to_person(host, run, forward, reason, looked=True)


def _await_undo_lookup(
    host: StepHost, run: RunRecord, forward: OperationRecord, until: float, why: str
) -> RunRecord:
    """The provider has no record of a forward operation yet, but may still make it: the saga
    decides nothing now; it looks again from ``until`` (here if that is soon, else when a worker
    takes the run up at its wake-up time)."""
    change = host.change(run)
    change.event(
        EventKind.RECONCILE_UNSETTLED,
        operation_id=forward.operation_id,
        conclusive_at=round(until, 3),
        reason=f"not found yet, and {why}: the undo waits, and looks again then",
    )
    if host.wait_inline(until - host.now()):
        return host.store.commit(change)  # the next step asks again
    change.context = {**run.context, "wake_at": until}
    return host.store.commit(change)


def _found_for_undo(
    host: StepHost,
    run: RunRecord,
    spec: Spec,
    forward: OperationRecord,
    found: Found,
    field: str | None,
) -> RunRecord:
    """The provider made the change: record it done, with its receipt (which the undo's
    arguments read), in its place among the completed effects; the next step undoes it. Made
    more than once (a provider that does not deduplicate), the extra changes are recorded as a
    duplicate, each undone by an undo of its own first (:mod:`.duplicates`)."""
    receipt, extra = duplicates.kept_and_extra(found, forward.receipt, field)
    change = host.change(run)
    change.operation_updates.append(
        (
            forward.operation_id,
            {"status": OperationStatus.DONE, "receipt": receipt, "last_error": None},
        )
    )
    receipts = {**run.context.get("receipts", {}), forward.effect: receipt}
    completed = _in_written_order(run, list(run.context.get("completed", [])), forward.operation_id)
    change.context = {**run.context, "receipts": receipts, "completed": completed}
    change.event(EventKind.RECONCILE_FOUND, operation_id=forward.operation_id)
    change.event(
        EventKind.DONE,
        operation_id=forward.operation_id,
        effect=forward.effect,
        role="forward",
        via="reconcile",
        receipt={field or "receipt": receipt.get(field or "")},
    )
    extra = duplicates.unrecorded(run, forward.operation_id, extra)  # none recorded twice
    if extra:
        undo = _declared_undo(spec, forward.effect)
        duplicates.note(change, run, spec, forward, receipt, extra, via="reconcile", undo=undo)
    return host.store.commit(change)


def _unknown_to_person(
    host: StepHost, run: RunRecord, forward: OperationRecord, reason: str, *, looked: bool
) -> RunRecord:
    """Nobody can tell whether the change was made: hand the run to a person, where it
    stands, with what to check. It takes no step until an operator acts (no hot loop)."""
    op_id = forward.operation_id
    action = (
        f"{forward.effect} may have been made, and the saga cannot tell ({reason}): check "
        f"with the provider whether operation {op_id} was made. Then run "
        "'ratchet ops compensate' (it looks the operation up again, undoes it if it was "
        "made and goes on undoing, newest first), or undo it by hand and cancel the run"
    )
    change = host.change(run)
    change.status = RunStatus.NEEDS_PERSON
    change.context = {**run.context, "wake_at": None}
    change.operation_updates.append(
        (
            op_id,
            {
                "status": OperationStatus.UNKNOWN,
                "last_error": f"{reason}: nobody can tell whether operation {op_id} was made",
            },
        )
    )
    if looked:
        change.event(EventKind.RECONCILE_FAILED, operation_id=op_id, reason=reason)
    change.event(
        EventKind.QUEUED,
        queue=run.state,
        operator_action=action,
        effect=forward.effect,
        operation_id=op_id,
    )
    return host.store.commit(change)


def _receipt_field(spec: Spec, effect: Effect) -> str | None:
    for row in spec.transitions:
        if row.external_effect == effect.name:
            return row.receipt or effect.receipt
    return effect.receipt


def _declared_undo(spec: Spec, effect: str) -> Compensation | None:
    """The compensation the row performing ``effect`` declares (None: it declares none)."""
    for row in spec.transitions:
        if row.external_effect == effect and row.compensation is not None:
            return row.compensation
    return None


def _kind_of_undo(spec: Spec, effect: str) -> str | None:
    declared = _declared_undo(spec, effect)
    return None if declared is None else declared.kind


def _no_undo_reason(spec: Spec, effect: str) -> str:
    comp = _declared_undo(spec, effect)
    if comp is None:
        return "no compensation declared"
    return f"{comp.kind}: {comp.reason}" if comp.reason else comp.kind
