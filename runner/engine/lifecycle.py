"""The long-running part of a run's life: signals, timers, spec versions, and operator controls.

* :func:`send_signal` moves a paused run by a named signal, once per signal ID.
* :func:`worker_pass` fires due timers and advances every runnable run (``ratchet worker``).
* :func:`migrate` applies a newer spec version's ``on_version_change`` to an older run.
* :func:`operate` carries out an operator control, authorised by the spec's operator roles and
  audited in the run's history; :func:`queue` lists the runs waiting for a person.
"""

from __future__ import annotations

import math
import os
import socket
import uuid
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from ratchet_runner.clock import format_time
from ratchet_runner.engine.approvals import apply_expiry, expired_pause
from ratchet_runner.engine.machine import machine_for
from ratchet_runner.engine.runner import LEASE_SAFETY, Runner, status_of
from ratchet_runner.engine.timers import Fired
from ratchet_runner.errors import (
    ApprovalError,
    DuplicateOperation,
    RatchetError,
    RunError,
    SignalRefused,
    StoreError,
    UsageError,
    VersionConflict,
)
from ratchet_runner.settings import OPERATOR_ACTIONS
from ratchet_runner.spec.model import RUNNER_EVENTS, Spec
from ratchet_runner.store.store import Change, OperationRecord, RunRecord


class OperatorRefused(RunError):
    """The operator control was refused; nothing changed."""

    code = "R405"


@dataclass(frozen=True)
class Outcome:
    """What a lifecycle call did: the run afterwards, whether it changed, and why; ``then`` says
    what happened after the change, when the run could not be driven on as usual (another
    process carried it on, or its next step failed and it waits for a person)."""

    run: RunRecord
    changed: bool
    message: str
    then: str | None = None


class StepFailed(RunError):
    """A step failed with an error the run cannot recover from by itself: the run was moved to
    the operator queue with the error as evidence."""

    code = "R407"

    def __init__(self, message: str, run: RunRecord) -> None:
        super().__init__(message)
        self.run = run


def validate_lease(seconds: float) -> float:
    """A lease length a worker or command may use: a finite number of seconds above zero."""
    if not isinstance(seconds, int | float) or not math.isfinite(seconds) or seconds <= 0:
        raise UsageError(f"a lease must be a finite number of seconds above 0, not {seconds!r}")
    return float(seconds)


# -- driving a run on -----------------------------------------------------------------------


def park(runner: Runner, run_id: str, error: BaseException) -> RunRecord:
    """Move a running run whose step failed with ``error`` to the operator queue, once, with the
    error as evidence; ``ratchet ops retry`` takes the step again (reconciling first)."""
    run = runner.store.get_run(run_id)
    if run.status != "running":
        return run
    code = getattr(error, "code", "R000") if isinstance(error, RatchetError) else "R000"
    text = str(error) if isinstance(error, RatchetError) else f"{type(error).__name__}: {error}"
    change = runner.change(run)
    change.status = "needs_person"
    change.context = {
        **run.context,
        "wake_at": None,
        "failed_step": {"state": run.state, "code": code, "error": text},
    }
    change.event("step_failed", state=run.state, code=code, error=text)
    change.event(
        "queued",
        queue=run.state,
        operator_action=(
            f"the step in {run.state!r} failed: {text}. Fix the cause, then "
            f"'ratchet ops retry {run.id} --as NAME --role ROLE' takes the step again "
            "(reconciling any call on record first)"
        ),
    )
    return runner.store.commit(change)


def drive(runner: Runner, run: RunRecord) -> RunRecord:
    """:meth:`Runner.advance`, except that a step failing with an error the run cannot recover
    from by itself (a bad argument, an adapter kind with no implementation, an approval that no
    longer fits) moves the run to the operator queue once, with the error as evidence, and
    raises :class:`StepFailed`, instead of leaving it runnable to fail again and again. Races
    (:class:`VersionConflict`) and store failures are raised as they are: they are not the
    run's fault."""
    try:
        return runner.advance(run)
    except (StoreError, SQLAlchemyError):  # a database error that escaped unwrapped: an outage
        raise
    except Exception as exc:
        parked = park(runner, run.id, exc)
        raise StepFailed(f"run {run.id}: {exc}; it waits for a person", parked) from exc


def carry_on(runner: Runner, run: RunRecord) -> tuple[RunRecord, str | None]:
    """Drive on a run this process has just changed, and say what happened after the change
    instead of raising: the change itself stands whatever follows."""
    try:
        return drive(runner, run), None
    except StepFailed as failed:
        return failed.run, f"its next step failed and it waits for a person: {failed.__cause__}"
    except VersionConflict as raced:
        try:
            now = runner.store.get_run(run.id)
        except StoreError:
            now = run
        return now, f"another process carried the run on ({raced})"
    except StoreError as failed:
        return run, f"the store failed while driving it on ({failed}); 'ratchet resume' goes on"


# -- signals --------------------------------------------------------------------------------


def send_signal(
    runner: Runner,
    run_id: str,
    event: str,
    signal_id: str,
    data: dict[str, Any] | None = None,
    spec_version: int | None = None,
) -> Outcome:
    """Deliver signal ``event`` to the run, once per ``signal_id``.

    A signal ID seen before changes nothing and says so. A signal the run's state does not take,
    or whose row's guard does not hold, or sent for a ``spec_version`` other than the one the
    run is pinned to, is refused with nothing changed — never queued.
    """
    store = runner.store
    run = store.resolve(run_id)
    seen = store.signal(run.id, signal_id)
    if seen is not None:
        return Outcome(
            run, False, f"signal {signal_id} was already received ({seen.event}); nothing changed"
        )
    if run.status in ("paused", "cancelled"):
        raise SignalRefused(f"run {run.id} is {run.status} by an operator; nothing changed")
    spec = runner.spec_of(run)
    if spec_version is not None and spec_version != spec.spec_version:
        raise SignalRefused(
            f"run {run.id} runs version {spec.spec_version} of {spec.name}; this signal was "
            f"sent for version {spec_version}; nothing changed"
        )
    state = spec.states[run.state]
    if state.approval is not None and event in ("approve", "reject"):
        raise SignalRefused(
            f"a decision on {state.approval} needs an actor and a role: use "
            f"'ratchet {event} {run.id} --as NAME ...'; nothing changed"
        )
    takes = list(state.resumes_on) if state.kind in ("pause", "wait") else []
    if event in RUNNER_EVENTS or event not in takes:
        offered = ", ".join(takes) or "no signals"
        raise SignalRefused(
            f"run {run.id} is in {run.state!r} ({state.kind}), which takes {offered}, not "
            f"{event!r}; nothing changed"
        )
    payload = data or {}
    now = runner.decision_now()
    lapsed = expired_pause(runner, run, now)
    if lapsed is not None:  # came after the pause expired, before a worker fired its timer
        moved, how = apply_expiry(runner, run, spec, lapsed, now, signal=event, signal_id=signal_id)
        raise SignalRefused(
            f"run {run.id} no longer takes {event!r}: its pause in {run.state!r} expired at "
            f"{format_time(lapsed.due_at)}, before this signal; {how}, and the run moved by "
            f"'expired' to {moved.state!r} ({moved.status}). The signal was not delivered"
        )
    ctx = runner.context(run, spec, signal=payload)
    row, errors = machine_for(spec).fire(run.state, event, ctx)
    if row is None:
        why = "; ".join(errors) or "no row's guard holds"
        raise SignalRefused(
            f"{event!r} does not apply to run {run.id} now ({why}); nothing changed"
        )
    change = runner.change(run)
    change.new_signals.append(
        {"signal_id": signal_id, "event": event, "data": payload, "received_at": change.at}
    )
    change.event("signal", event=event, signal_id=signal_id, data=payload)
    try:
        moved = runner.move(run, spec, event, change, ctx)
    except DuplicateOperation:
        return Outcome(
            store.get_run(run.id),
            False,
            f"signal {signal_id} was already received; nothing changed",
        )
    driven, then = carry_on(runner, moved)
    return Outcome(driven, True, f"{event} moved the run to {row.next_state}", then)


# -- spec versions --------------------------------------------------------------------------


def migrate(runner: Runner, run: RunRecord) -> RunRecord:
    """Apply the newest stored spec version's ``on_version_change`` to an older, unfinished run:
    ``pin`` keeps it; ``revalidate`` moves it to the new version if its state still exists (its
    approvals, bound to the old policy, then no longer count); ``cancel`` cancels it."""
    if run.status in ("done", "cancelled"):
        return run
    latest = runner.latest_spec(run.workflow)
    current = runner.spec_of(run)
    if latest is None or latest[0] == run.spec_digest or latest[1] <= current.spec_version:
        return run
    newer = runner.spec_for_digest(latest[0])
    policy = newer.on_version_change
    if policy == "pin":
        return run
    change = runner.change(run)
    if policy == "cancel":
        change.status = "cancelled"
        change.event("version_cancelled", old=current.spec_version, new=newer.spec_version)
        return runner.store.commit(change)
    if run.state not in newer.states:
        change.status = "needs_person"
        change.event(
            "version_stuck",
            old=current.spec_version,
            new=newer.spec_version,
            reason=f"state {run.state!r} does not exist in the new version",
        )
        return runner.store.commit(change)
    change.spec_digest = newer.digest
    change.event(
        "revalidated",
        old=current.spec_version,
        new=newer.spec_version,
        policy=str(newer.policy_version),
    )
    return runner.store.commit(change)


# -- the worker -----------------------------------------------------------------------------


@dataclass
class PassReport:
    """What one worker pass did."""

    fired: list[Fired] = field(default_factory=list)
    advanced: list[RunRecord] = field(default_factory=list)
    raced: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "timers_fired": [
                {
                    "timer": f.timer.id,
                    "run": f.timer.run_id,
                    "event": f.timer.event,
                    "outcome": f.outcome,
                }
                for f in self.fired
            ],
            "runs_advanced": [
                {"run": r.id, "state": r.state, "status": r.status} for r in self.advanced
            ],
            "raced": self.raced,
            "failed": [{"run": run, "error": error} for run, error in self.failed],
        }


def worker_identity() -> str:
    """``host:pid:nonce``: unique across machines, processes and restarts of one process."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def lease_deadline(claimed_at: float, lease_seconds: float) -> float:
    """Until when (``Runner.monotonic``) a worker counts on a lease asked for at ``claimed_at``
    (the claim or renewal was sent then; the database's expiry cannot be earlier)."""
    return claimed_at + lease_seconds * LEASE_SAFETY


def advance_leased(runner: Runner, claimed: RunRecord, deadline: float) -> RunRecord:
    """Take a run claimed under a lease as far as it goes: every commit fenced by its token, no
    call once ``deadline`` has passed; then give the lease back, unless the last commit did
    (a run that left ``running``). Raises what :meth:`Runner.advance` raises."""
    token = str(claimed.lease_token)
    runner.leases[claimed.id] = token
    runner.lease_deadlines[claimed.id] = deadline
    moved: RunRecord | None = None
    try:
        moved = drive(runner, migrate(runner, claimed))
        return moved
    except StepFailed as failed:
        moved = failed.run  # parked: the commit that did it gave the lease back
        raise
    finally:
        runner.leases.pop(claimed.id, None)
        runner.lease_deadlines.pop(claimed.id, None)
        if moved is None or moved.lease_token is not None:
            runner.store.release(claimed.id, token)


def worker_pass(
    runner: Runner, limit: int = 500, owner: str | None = None, lease_seconds: float = 30.0
) -> PassReport:
    """Fire every due timer, then claim each runnable run under a lease and take it as far as
    it goes, one at a time, until none is left (or ``limit`` runs). No heartbeat: each lease
    is counted on from its claim."""
    owner = owner or worker_identity()
    runner.lease_seconds = validate_lease(lease_seconds)
    report = PassReport(fired=runner.timers.fire_due(limit))
    for _ in range(limit):
        asked = runner.monotonic()
        claimed = runner.store.claim(owner, lease_seconds, runner.clock.now())
        if not claimed:
            break
        run = claimed[0]
        try:
            report.advanced.append(
                advance_leased(runner, run, lease_deadline(asked, lease_seconds))
            )
        except VersionConflict:
            report.raced.append(run.id)
        except (RunError, ApprovalError) as exc:
            report.failed.append((run.id, str(exc)))
    return report


# -- operator controls ----------------------------------------------------------------------


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
    change.event("operator", action=action, actor=actor, role=role, note=note)
    return change


def _failed_operation(runner: Runner, run: RunRecord, roles: tuple[str, ...]) -> OperationRecord:
    failed = [
        op
        for op in runner.store.operations(run.id)
        if op.role in roles
        and op.status in ("exhausted", "unknown", "refused", "pending")
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
    runner: Runner, run_ref: str, action: str, actor: str, role: str, note: str | None = None
) -> Outcome:
    """Carry out operator control ``action`` on a run, audited, or refuse with no change."""
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
    return handler(runner, run, spec, _audit(runner, run, action, actor, role, note))


def _pause(runner: Runner, run: RunRecord, spec: Spec, change: Change) -> Outcome:
    if run.status in ("done", "cancelled", "paused"):
        raise OperatorRefused(f"run {run.id} is {run.status}; nothing changed")
    change.status = "paused"
    change.context = {**run.context, "paused_from": run.status}
    return Outcome(runner.store.commit(change), True, f"run {run.id} paused")


def _resume(runner: Runner, run: RunRecord, spec: Spec, change: Change) -> Outcome:
    if run.status != "paused":
        raise OperatorRefused(f"run {run.id} is {run.status}, not paused; nothing changed")
    change.status = str(run.context.get("paused_from") or status_of(spec.states[run.state]))
    driven, then = carry_on(runner, runner.store.commit(change))
    return Outcome(driven, True, f"run {run.id} resumed", then)


def _cancel(runner: Runner, run: RunRecord, spec: Spec, change: Change) -> Outcome:
    if run.status in ("done", "cancelled"):
        raise OperatorRefused(f"run {run.id} is {run.status}; nothing changed")
    undone = set(run.context.get("undone", []))
    left = [
        op.effect
        for op in runner.store.operations(run.id)
        if op.role == "forward" and op.status == "done"
    ]
    change.status = "cancelled"
    note = f"; done and not undone: {', '.join(left)}" if left and not undone else ""
    return Outcome(runner.store.commit(change), True, f"run {run.id} cancelled{note}")


def _grant(run: RunRecord, op: OperationRecord, extra: int) -> dict[str, Any]:
    grants = dict(run.context.get("grants", {}))
    grants[op.operation_id] = int(grants.get(op.operation_id, 0)) + extra
    return grants


def _retry(runner: Runner, run: RunRecord, spec: Spec, change: Change) -> Outcome:
    failed_step = run.context.get("failed_step")
    if failed_step is not None and run.status == "needs_person":
        # A step that failed before it could finish (see ``park``): take it again.
        change.status = "running"
        change.context = {
            k: v for k, v in run.context.items() if k not in ("failed_step", "wake_at")
        }
        driven, then = carry_on(runner, runner.store.commit(change))
        return Outcome(driven, True, f"the step in {failed_step['state']!r} is taken again", then)
    op = _failed_operation(runner, run, ("forward",))
    if op.status == "refused":
        raise OperatorRefused(
            f"{op.effect} was refused by the provider; a retry would be refused again. "
            "Change the run's input or handle it by hand; nothing changed"
        )
    effect = spec.effects[op.effect]
    change.state = _state_performing(spec, op.effect)
    change.status = "running"
    change.context = {
        **run.context,
        "grants": _grant(run, op, effect.retry.max_attempts),
        "wake_at": None,
    }
    change.operation_updates.append((op.operation_id, {"status": "pending"}))
    driven, then = carry_on(runner, runner.store.commit(change))
    return Outcome(
        driven,
        True,
        f"{op.effect} retried with {effect.retry.max_attempts} more attempt(s), same operation ID",
        then,
    )


def _reconcile(runner: Runner, run: RunRecord, spec: Spec, change: Change) -> Outcome:
    op = _failed_operation(runner, run, ("forward", "compensation"))
    effect = spec.effects[op.effect]
    if effect.reconcile is None:
        raise OperatorRefused(f"{op.effect} has no reconcile lookup; nothing changed")
    adapter = runner.adapter(spec, effect.adapter)
    found = adapter.lookup(effect.reconcile, op.operation_id, effect.name)
    if found.kind != "found":
        runner.store.commit(change.event("reconcile_not_found", operation_id=op.operation_id))
        return Outcome(
            runner.store.get_run(run.id),
            False,
            f"the provider has no record of {op.effect} (op {op.operation_id[:12]}); "
            "nothing was done: 'ratchet ops retry' makes it",
        )
    change.operation_updates.append((op.operation_id, {"status": "pending"}))
    if op.role == "forward":
        change.state = _state_performing(spec, op.effect)
    else:
        change.state = _compensate_state(spec, run)
    change.status = "running"
    change.event("reconcile_found", operation_id=op.operation_id)
    driven, then = carry_on(runner, runner.store.commit(change))
    return Outcome(driven, True, f"{op.effect} is on the provider's record; the run goes on", then)


def _compensate_state(spec: Spec, run: RunRecord) -> str:
    for state in spec.states.values():
        if state.kind == "compensate":
            return state.name
    raise OperatorRefused(f"{spec.name} has no compensate state; nothing changed")


def _compensate(runner: Runner, run: RunRecord, spec: Spec, change: Change) -> Outcome:
    target = _compensate_state(spec, run)
    if run.status in ("done", "cancelled") and spec.states[run.state].kind != "operator_queue":
        raise OperatorRefused(f"run {run.id} is {run.status}; nothing to compensate")
    grants = dict(run.context.get("grants", {}))
    for op in runner.store.operations(run.id):
        if op.role == "compensation" and op.status in ("exhausted", "unknown", "refused"):
            effect = spec.effects[op.effect]
            grants[op.operation_id] = (
                int(grants.get(op.operation_id, 0)) + effect.retry.max_attempts
            )
            change.operation_updates.append((op.operation_id, {"status": "pending"}))
    change.state, change.status = target, "running"
    change.context = {**run.context, "grants": grants, "wake_at": None}
    driven, then = carry_on(runner, runner.store.commit(change))
    return Outcome(driven, True, f"compensating run {run.id} from {target}", then)


# -- the queue ------------------------------------------------------------------------------


def evidence(runner: Runner, run: RunRecord) -> dict[str, Any]:
    """What was done, what was undone, what is left, and what failed."""
    ops = runner.store.operations(run.id)
    done = [o for o in ops if o.role == "forward" and o.status == "done"]
    undo = {o.compensates: o for o in ops if o.role == "compensation"}
    history = runner.store.history(run.id)
    no_undo = {e.data.get("operation_id"): e.data for e in history if e.kind == "no_compensation"}
    return {
        "done": [
            {"effect": o.effect, "operation_id": o.operation_id, "receipt": o.receipt} for o in done
        ],
        "undone": [
            {"effect": u.effect, "operation_id": u.operation_id}
            for u in undo.values()
            if u.status == "done"
        ],
        "left": [
            {
                "effect": o.effect,
                "undo": undo[o.operation_id].effect,
                "status": undo[o.operation_id].status,
            }
            for o in done
            if o.operation_id in undo and undo[o.operation_id].status != "done"
        ],
        "not_undoable": [
            {
                "effect": o.effect,
                "undo": no_undo[o.operation_id].get("undo"),
                "reason": no_undo[o.operation_id].get("reason"),
            }
            for o in done
            if o.operation_id in no_undo
        ],
        "failed": [
            {"effect": o.effect, "status": o.status, "error": o.last_error, "attempts": o.attempts}
            for o in ops
            if o.status in ("exhausted", "unknown", "refused")
        ],
    }


def queue(runner: Runner) -> list[dict[str, Any]]:
    """The runs waiting for a person, oldest first, with what to do and the evidence."""
    now = runner.clock.now()
    waiting = sorted(runner.store.list_runs("needs_person", limit=1000), key=lambda r: r.updated_at)
    items = []
    for run in waiting:
        history = runner.store.history(run.id)
        queued = next((e.data for e in reversed(history) if e.kind in ("queued", "stuck")), {})
        items.append(
            {
                "run": run.id,
                "workflow": run.workflow,
                "business_key": run.business_key,
                "state": run.state,
                "operator_action": queued.get("operator_action") or queued.get("reason"),
                "age_seconds": round(now - run.updated_at, 1),
                "evidence": evidence(runner, run),
            }
        )
    return items
