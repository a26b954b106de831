"""Operator controls: pause, resume, cancel, retry, reconcile and compensate a run.

:func:`operate` carries out one, authorised by the spec's operator roles and audited in the run's
history, or refuses it with nothing changed (:class:`~ratchet_runner.errors.OperatorRefused`).
"""

from __future__ import annotations

from typing import Any

from ..adapters.base import Found, LookupFailed
from ..clock import format_time
from ..errors import OperatorRefused
from ..settings import OPERATOR_ACTIONS
from ..spec.model import Spec
from ..store.context import without
from ..store.records import Change, OperationRecord, RunRecord
from ..words import ENDED, GAVE_UP, EventKind, OperationStatus, RunStatus
from . import duplicates, undo_extra
from .audit import origin
from .drive import Outcome, carry_on
from .machine import status_of
from .providers import ask, conclusive_from, why_unsettled
from .runner import Runner


def _authorise(spec: Spec, run: RunRecord, action: str, role: str) -> None:
    if role not in spec.operator_roles:
        allowed = ", ".join(spec.operator_roles) or "none declared"
        raise OperatorRefused(
            f"role {role!r} may not {action} runs of {spec.name} (operator roles: {allowed}); "
            "nothing changed"
        )


def _audit(
    runner: Runner, run: RunRecord, action: str, actor: str, role: str, note: str | None
) -> Change:
    change = runner.change(run)
    change.event(EventKind.OPERATOR, action=action, actor=actor, role=role, note=note, **origin())
    return change


def _failed_operation(runner: Runner, run: RunRecord, roles: tuple[str, ...]) -> OperationRecord:
    failed = [
        op
        for op in runner.store.operations(run.id)
        if op.role in roles
        and op.status
        in (
            OperationStatus.EXHAUSTED,
            OperationStatus.UNKNOWN,
            OperationStatus.REFUSED,
            OperationStatus.PENDING,
        )
        and op.attempts > 0
    ]
    if not failed:
        raise OperatorRefused(f"run {run.id} has no failed operation to act on; nothing changed")
    return failed[-1]


def _state_performing(spec: Spec, effect: str) -> str:
    for row in spec.transitions:
        if row.external_effect == effect:
            return row.state
    raise OperatorRefused(f"no state performs {effect!r}; nothing changed")


def operate(
    runner: Runner,
    run_ref: str,
    action: str,
    actor: str,
    role: str,
    note: str | None = None,
    *,
    drive: bool = True,
) -> Outcome:
    """Carry out operator control ``action`` on a run, audited, or refuse with no change; then
    drive the run on (``drive``), or leave it to the workers, whom the commit wakes."""
    if action not in OPERATOR_ACTIONS:
        raise OperatorRefused(f"no operator action {action!r} ({', '.join(OPERATOR_ACTIONS)})")
    run = runner.store.resolve(run_ref)
    spec = runner.spec_of(run)
    _authorise(spec, run, action, role)
    handler = {
        "pause": _pause,
        "resume": _resume,
        "cancel": _cancel,
        "retry": _retry,
        "reconcile": _reconcile,
        "compensate": _compensate,
    }[action]
    return handler(runner, run, spec, _audit(runner, run, action, actor, role, note), drive)


def _go_on(runner: Runner, run: RunRecord, drive: bool) -> tuple[RunRecord, str | None]:
    """After the control's commit: the run driven on, or left as committed to the workers."""
    return carry_on(runner, run) if drive else (run, None)


def _pause(runner: Runner, run: RunRecord, spec: Spec, change: Change, drive: bool) -> Outcome:
    if run.status in (RunStatus.DONE, RunStatus.CANCELLED, RunStatus.PAUSED):
        raise OperatorRefused(f"run {run.id} is {run.status}; nothing changed")
    change.status = RunStatus.PAUSED
    change.context = {**run.context, "paused_from": run.status}
    return Outcome(runner.store.commit(change), True, f"run {run.id} paused")


def _resume(runner: Runner, run: RunRecord, spec: Spec, change: Change, drive: bool) -> Outcome:
    if run.status != RunStatus.PAUSED:
        raise OperatorRefused(f"run {run.id} is {run.status}, not paused; nothing changed")
    change.status = RunStatus(run.context.get("paused_from") or status_of(spec.states[run.state]))
    driven, then = _go_on(runner, runner.store.commit(change), drive)
    return Outcome(driven, True, f"run {run.id} resumed", then)


def _cancel(runner: Runner, run: RunRecord, spec: Spec, change: Change, drive: bool) -> Outcome:
    if run.status in ENDED:
        raise OperatorRefused(f"run {run.id} is {run.status}; nothing changed")
    undone = set(run.context.get("undone", []))
    left = [
        op.effect
        for op in runner.store.operations(run.id)
        if op.role == "forward" and op.status == OperationStatus.DONE
    ]
    change.status = RunStatus.CANCELLED
    note = f"; done and not undone: {', '.join(left)}" if left and not undone else ""
    return Outcome(runner.store.commit(change), True, f"run {run.id} cancelled{note}")


def _grant(run: RunRecord, op: OperationRecord, extra: int) -> dict[str, Any]:
    grants = dict(run.context.get("grants", {}))
    grants[op.operation_id] = int(grants.get(op.operation_id, 0)) + extra
    return grants


def _retry(runner: Runner, run: RunRecord, spec: Spec, change: Change, drive: bool) -> Outcome:
    if duplicates.holding(run) and run.status == RunStatus.NEEDS_PERSON:
        # a change found made twice, looked at: the run goes on from where it was
        where = undo_extra.release(run, change)
        driven, then = _go_on(runner, runner.store.commit(change), drive)
        return Outcome(
            driven, True, f"the duplicate is left as it is; the run goes on from {where}", then
        )
    failed_step = run.context.get("failed_step")
    if failed_step is not None and run.status == RunStatus.NEEDS_PERSON:
        # A step that failed before it could finish (see ``park``): take it again.
        change.status = RunStatus.RUNNING
        change.context = without(run.context, "failed_step", "wake_at")
        driven, then = _go_on(runner, runner.store.commit(change), drive)
        return Outcome(driven, True, f"the step in {failed_step['state']!r} is taken again", then)
    op = _failed_operation(runner, run, ("forward",))
    if op.status == OperationStatus.REFUSED:
        raise OperatorRefused(
            f"{op.effect} was refused by the provider; a retry would be refused again. "
            "Change the run's input or handle it by hand; nothing changed"
        )
    effect = spec.effects[op.effect]
    change.state = _state_performing(spec, op.effect)
    change.status = RunStatus.RUNNING
    change.context = {
        **run.context,
        "grants": _grant(run, op, effect.retry.max_attempts),
        "wake_at": None,
    }
    change.operation_updates.append((op.operation_id, {"status": OperationStatus.PENDING}))
    driven, then = _go_on(runner, runner.store.commit(change), drive)
    return Outcome(
        driven,
        True,
        f"{op.effect} retried with {effect.retry.max_attempts} more attempt(s), same operation ID",
        then,
    )


def _reconcile(runner: Runner, run: RunRecord, spec: Spec, change: Change, drive: bool) -> Outcome:
    op = _failed_operation(runner, run, ("forward", "compensation"))
    effect = spec.effects[op.effect]
    if effect.reconcile is None:
        raise OperatorRefused(f"{op.effect} has no reconcile lookup; nothing changed")
    adapter = runner.adapter(spec, effect.adapter)
    found = ask(adapter, effect.reconcile, op.operation_id, effect.name, op.args)
    if isinstance(found, LookupFailed):
        runner.store.commit(
            change.event(
                EventKind.RECONCILE_FAILED, operation_id=op.operation_id, reason=found.reason
            )
        )
        return Outcome(
            runner.store.get_run(run.id),
            False,
            f"the lookup of {op.effect} (op {op.operation_id[:12]}) failed: {found.reason}; "
            "nothing was done: try again once the provider answers",
        )
    if not isinstance(found, Found):
        semantics = runner.semantics(spec, effect)
        seconds = runner.call_seconds(run.id, effect.timeout)
        until = conclusive_from(run, op, semantics, seconds)
        if until is not None and until > runner.now():
            runner.store.commit(
                change.event(
                    EventKind.RECONCILE_UNSETTLED,
                    operation_id=op.operation_id,
                    conclusive_at=round(until, 3),
                    reason=why_unsettled(semantics),
                )
            )
            return Outcome(
                runner.store.get_run(run.id),
                False,
                f"the provider has no record of {op.effect} (op {op.operation_id[:12]}) yet, but "
                f"{why_unsettled(semantics)}: it may still be made until {format_time(until)}. "
                "Nothing was done: 'ratchet ops retry' now waits until then, looks again, and "
                "calls only if it is still not there",
            )
        runner.store.commit(
            change.event(EventKind.RECONCILE_NOT_FOUND, operation_id=op.operation_id)
        )
        return Outcome(
            runner.store.get_run(run.id),
            False,
            f"the provider has no record of {op.effect} (op {op.operation_id[:12]}); "
            "nothing was done: 'ratchet ops retry' makes it",
        )
    change.operation_updates.append((op.operation_id, {"status": OperationStatus.PENDING}))
    if op.role == "forward":
        change.state = _state_performing(spec, op.effect)
    else:
        change.state = _compensate_state(spec, run)
    change.status = RunStatus.RUNNING
    change.event(EventKind.RECONCILE_FOUND, operation_id=op.operation_id)
    driven, then = _go_on(runner, runner.store.commit(change), drive)
    return Outcome(driven, True, f"{op.effect} is on the provider's record; the run goes on", then)


def _compensate_state(spec: Spec, run: RunRecord) -> str:
    for state in spec.states.values():
        if state.kind == "compensate":
            return state.name
    raise OperatorRefused(f"{spec.name} has no compensate state; nothing changed")


def _compensate(runner: Runner, run: RunRecord, spec: Spec, change: Change, drive: bool) -> Outcome:
    target = _compensate_state(spec, run)
    if run.status in ENDED and spec.states[run.state].kind != "operator_queue":
        raise OperatorRefused(f"run {run.id} is {run.status}; nothing to compensate")
    grants = dict(run.context.get("grants", {}))
    for op in runner.store.operations(run.id):
        if op.role == "compensation" and op.status in GAVE_UP:
            effect = spec.effects[op.effect]
            grants[op.operation_id] = (
                int(grants.get(op.operation_id, 0)) + effect.retry.max_attempts
            )
            change.operation_updates.append((op.operation_id, {"status": OperationStatus.PENDING}))
    change.state, change.status = target, RunStatus.RUNNING
    change.context = {**run.context, "grants": grants, "wake_at": None}
    driven, then = _go_on(runner, runner.store.commit(change), drive)
    return Outcome(driven, True, f"compensating run {run.id} from {target}", then)
