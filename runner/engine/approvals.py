"""Approvals: a person's decision, bound to a digest of the exact arguments it lets run.

The digest (:func:`ratchet_runner.engine.identity.approval_digest`) covers the workflow, the run,
the spec and policy versions, the effect and its normalised arguments. An effect that needs approval
runs only with an unconsumed, unexpired approval whose digest matches the arguments it is about to
send (:func:`valid_approval`, a plain function of the run's approval records and the time), and
that approval is consumed in the same transaction that writes the operation's pending record.
Recording a decision (:func:`decide`) works against a :class:`~ratchet_runner.engine.host.RunHost`
(the runner), not the runner's class. The decision's event records the Ratchet version that
recorded it, beside the digest that binds the spec and policy versions. Whether approving in a
role would be taken now (:func:`verdicts`, what the queue shows before anyone clicks) is weighed
by the function that weighs a decision being recorded, and writes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from ..clock import format_time
from ..errors import (
    ApprovalError,
    ApprovalExpired,
    ApprovalStale,
    ExpressionError,
    VersionConflict,
)
from ..settings import VERSION
from ..spec.expressions import compile_expression
from ..spec.model import Approval, Effect, Row, Spec, canonical_json
from ..store.records import ApprovalRecord, Change, RunRecord, TimerRecord
from ..words import EventKind, RunStatus
from .activation import activation
from .audit import origin
from .host import RunHost, StepHost
from .identity import approval_digest, describe_action, evaluate_args, normalise
from .machine import machine_for, status_of
from .timers import on_move


@dataclass(frozen=True)
class ApprovalRequest:
    """What a run waiting for a decision asks a person to approve."""

    run_id: str
    approval: str
    effect: str
    action: str
    args: dict[str, Any]
    roles: tuple[str, ...]
    digest: str
    expires_after: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run_id,
            "approval": self.approval,
            "effect": self.effect,
            "action": self.action,
            "args": self.args,
            "roles": list(self.roles),
            "digest": self.digest,
            "expires_after_seconds": self.expires_after,
        }


@dataclass(frozen=True)
class Verdict:
    """Whether approving in ``role`` would be taken now, and if not, why (:func:`verdicts`)."""

    role: str
    may_approve: bool
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"role": self.role, "may_approve": self.may_approve, "reason": self.reason}


@dataclass(frozen=True)
class Decision:
    """The result of approve/reject: the run afterwards, and whether anything changed."""

    run: RunRecord
    changed: bool
    message: str


def valid_approval(
    records: list[ApprovalRecord],
    spec: Spec,
    run_id: str,
    effect: Effect,
    args: dict[str, Any],
    now: float,
) -> ApprovalRecord:
    """Of the run's approval ``records`` (oldest first), the unconsumed one that covers exactly
    these arguments of ``effect``, unexpired at ``now``; else :class:`ApprovalError` (rejected,
    or none given), :class:`ApprovalExpired` or :class:`ApprovalStale` (given for other
    arguments, another spec version or another policy)."""
    assert effect.approval is not None
    digest = approval_digest(spec, run_id, effect.approval, effect, args)
    stale: ApprovalRecord | None = None
    for record in reversed(records):
        if record.name != effect.approval:
            continue
        if record.decision == "rejected":
            raise ApprovalError(f"{effect.name} was rejected by {record.actor}: {record.reason}")
        if record.consumed_at is not None:
            continue
        if record.digest != digest:
            stale = stale or record
            continue
        if record.expires_at is not None and record.expires_at <= now:
            raise ApprovalExpired(
                f"the approval by {record.actor} expired before {effect.name} ran"
            )
        return record
    if stale is not None:
        raise ApprovalStale(
            f"the approval by {stale.actor} covers other arguments or another policy than "
            f"{describe_action(effect, args)} (policy {spec.policy_version})"
        )
    raise ApprovalError(
        f"{describe_action(effect, args)} has no valid approval (digest {digest[:12]}): "
        "nothing was executed"
    )


def last_consumed(records: list[ApprovalRecord], name: str) -> ApprovalRecord | None:
    """The approval ``name`` most recently consumed (by an attempt of its effect), if any."""
    consumed = [
        a
        for a in records
        if a.name == name and a.decision == "approved" and a.consumed_at is not None
    ]
    return consumed[-1] if consumed else None


def ask_again(
    host: StepHost, run: RunRecord, spec: Spec, effect: Effect, change: Change, why: Exception
) -> RunRecord:
    """An approval that no longer covers ``effect``: commit ``change`` moving the run back to
    the state that asks for it (``decision_needed``); :class:`ApprovalStale` if none does."""
    asking = next(
        (s for s in spec.states.values() if s.kind == "pause" and s.approval == effect.approval),
        None,
    )
    if asking is None:
        raise ApprovalStale(str(why))
    change.state, change.status = asking.name, status_of(asking)
    change.event(EventKind.DECISION_NEEDED, reason=str(why), to=asking.name, effect=effect.name)
    on_move(run, spec, asking, change)
    return host.store.commit(change)


def _waiting_for(spec: Spec, run: RunRecord) -> Approval | None:
    state = spec.states[run.state]
    if state.kind != "pause" or state.approval is None:
        return None
    return spec.approvals.get(state.approval)


def _request(run: RunRecord, spec: Spec, approval: Approval) -> ApprovalRequest:
    effect: Effect = spec.effects[approval.effect]
    args = evaluate_args(effect, activation(run, spec))
    return ApprovalRequest(
        run.id,
        approval.name,
        effect.name,
        describe_action(effect, args),
        args,
        approval.roles,
        approval_digest(spec, run.id, approval.name, effect, args),
        approval.expires_after,
    )


def pending_request(runner: RunHost, run: RunRecord) -> ApprovalRequest | None:
    """The decision ``run`` is waiting for, if any."""
    spec = runner.spec_of(run)
    approval = _waiting_for(spec, run)
    return None if approval is None else _request(run, spec, approval)


def expired_pause(runner: RunHost, run: RunRecord, now: float) -> TimerRecord | None:
    """The pause's ``expired`` timer, if it is due at ``now`` and has not fired yet."""
    for timer in runner.store.timers(run.id):
        if (
            timer.state == run.state
            and timer.event == "expired"
            and timer.fired_at is None
            and timer.due_at <= now
        ):
            return timer
    return None


def apply_expiry(
    runner: RunHost, run: RunRecord, spec: Spec, timer: TimerRecord, now: float, **refused: Any
) -> tuple[RunRecord, str]:
    """Fire the pause's due ``expired`` timer now, as a worker would (claiming the timer in the
    move's transaction, so it fires once even if a worker fires it at the same moment), with a
    ``decision_refused`` event for the request ``refused`` describes. Returns the run after it
    and how the expiry came about."""
    change = runner.change(run, at=now)
    change.fire_timer = timer.id
    change.event(
        EventKind.DECISION_REFUSED,
        **refused,
        reason=f"the pause expired at {format_time(timer.due_at)}",
    )
    change.event(EventKind.TIMER, event=timer.event, due_at=timer.due_at)
    try:
        return runner.move(run, spec, timer.event, change), "its expiry was applied now"
    except VersionConflict:
        moved = runner.store.get_run(run.id)
        if moved.state == run.state:
            raise
        return moved, "another process applied its expiry first"


def _refuse_after_expiry(
    runner: RunHost,
    run: RunRecord,
    spec: Spec,
    timer: TimerRecord,
    decision: str,
    actor: str,
    role: str | None,
    now: float,
) -> NoReturn:
    """A decision that came after the pause expired: fire the expiry instead, and refuse the
    decision. Nothing is recorded as decided."""
    verb = "approved" if decision == "approve" else "rejected"
    moved, how = apply_expiry(
        runner, run, spec, timer, now, decision=decision, actor=actor, role=role or ""
    )
    raise ApprovalError(
        f"run {run.id} can no longer be {verb}: its pause in {run.state!r} expired at "
        f"{format_time(timer.due_at)}, before this decision; {how}, and the run moved by "
        f"'expired' to {moved.state!r} ({moved.status}). Nothing was {verb}"
    )


def _role_refused(approval: Approval, role: str | None) -> str | None:
    """Why ``role`` may not decide ``approval`` (one the spec does not list), or None."""
    if role is not None and role not in approval.roles:
        return (
            f"role {role!r} may not decide {approval.name!r} (allowed: {', '.join(approval.roles)})"
        )
    return None


@dataclass(frozen=True)
class _Weighed:
    """A decision weighed against the table: the approval record it would write, the
    activation its rows' guards see, the row that fires (None: no guard holds) and the guards
    that could not be evaluated."""

    record: dict[str, Any]
    ctx: dict[str, Any]
    row: Row | None
    errors: list[str]


def _weigh(
    run: RunRecord,
    spec: Spec,
    approval: Approval,
    request: ApprovalRequest,
    decision: str,
    actor: str,
    role: str | None,
    now: float,
) -> _Weighed:
    """Which row ``decision`` by ``actor`` in ``role`` at ``now`` fires, and with what. What
    :func:`decide` records and what :func:`verdicts` reports both come from here, so that the
    verdict an approver is shown is what approving does. Writes nothing."""
    expires_at = now + approval.expires_after if approval.expires_after else None
    record = {
        "actor": actor,
        "role": role or "",
        "decided_at": now,
        "expires_at": expires_at,
        "digest": request.digest,
        "name": approval.name,
    }
    ctx = activation(run, spec, approval=record)
    row, errors = machine_for(spec).fire(run.state, decision, ctx)
    return _Weighed(record, ctx, row, errors)


def _guard_refuses(spec: Spec, run: RunRecord, weighed: _Weighed, role: str) -> str:
    """Why no ``approve`` row fires for ``role``: the guards, and the values they read other
    than the approval's own (``input.amount is 145``), or the guard that cannot be evaluated."""
    if weighed.errors:  # "'GUARD' cannot be evaluated: why"
        return f"the guard {weighed.errors[0]}"
    guards = [
        row.guard for row in spec.rows_from(run.state) if row.event == "approve" and row.guard
    ]
    if not guards:
        return f"no row takes approve in {run.state!r}"
    read: dict[str, str] = {}
    for guard in guards:
        for path in compile_expression(guard).paths:
            name = ".".join(path)
            if path[0] == "approval" or name in read:
                continue
            try:
                value = compile_expression(name).evaluate(weighed.ctx)
            except ExpressionError:
                continue
            read[name] = f"{name} is {canonical_json(normalise(value))}"
    said = " / ".join(f"`{guard}`" for guard in guards)
    values = f" ({', '.join(read.values())})" if read else ""
    return f"the guard {said} refuses {role}{values}"


def verdicts(
    runner: RunHost, run: RunRecord, roles: Sequence[str], actor: str, now: float
) -> list[Verdict]:
    """For each of ``roles``, whether approving what ``run`` waits for, as ``actor`` at ``now``,
    would be taken: the checks :func:`decide` makes, in its order (a role the approval does
    not allow, a pause that has expired, the approving row's guard), through the same
    functions, and nothing written. Empty when the run waits for no decision."""
    spec = runner.spec_of(run)
    approval = _waiting_for(spec, run)
    if approval is None or run.status in (RunStatus.PAUSED, RunStatus.CANCELLED):
        return []
    request = _request(run, spec, approval)
    lapsed = expired_pause(runner, run, now)
    found = []
    for role in roles:
        refused = _role_refused(approval, role)
        if refused is None and lapsed is not None:
            refused = (
                f"the pause expired at {format_time(lapsed.due_at)}: approving now applies "
                "the expiry instead"
            )
        if refused is None:
            weighed = _weigh(run, spec, approval, request, "approve", actor, role, now)
            if weighed.row is None:
                refused = _guard_refuses(spec, run, weighed, role)
        found.append(Verdict(role, refused is None, refused))
    return found


def _no_guard_holds(
    run: RunRecord, spec: Spec, decision: str, record: dict[str, Any], role: str | None
) -> str:
    """Why no row takes ``decision``: the guards that do not hold, and the roles the approval
    allows for which one would (the guard may ask for a role, as the refund's does above 100)."""
    guards = [
        f"{row.guard!r}"
        for row in spec.transitions
        if row.state == run.state and row.event == decision and row.guard
    ]
    said = f"the guard {' / '.join(guards)} does not hold" if guards else "no row's guard holds"
    approval = _waiting_for(spec, run)
    others = [r for r in (approval.roles if approval else ()) if r != role]
    passing = [
        other
        for other in others
        if machine_for(spec).fire(
            run.state, decision, activation(run, spec, approval={**record, "role": other})
        )[0]
        is not None
    ]
    if role is None:
        return said
    if passing:
        return f"{said} for role {role!r}; it would for {', '.join(passing)}"
    return f"{said} for role {role!r}, nor for any other role the approval allows"


def decide(
    runner: RunHost,
    run_id: str,
    decision: str,
    actor: str,
    role: str | None,
    reason: str | None = None,
) -> Decision:
    """Record ``decision`` (``approve`` or ``reject``) and move the run by that signal.

    Refused with no change: a run not waiting for a decision, a role the spec does not allow, an
    ``approve`` row whose guard does not hold. A repeated decision changes nothing and says so. The
    pause's deadline is checked now, by the host's ``decision_now``: a
    decision that comes after it is refused, and the expiry the timer has not fired yet is applied
    instead (the run moves by ``expired``).
    """
    run = runner.store.get_run(run_id)
    if run.status in (RunStatus.PAUSED, RunStatus.CANCELLED):
        raise ApprovalError(f"run {run.id} is {run.status} by an operator; nothing changed")
    spec = runner.spec_of(run)
    approval = _waiting_for(spec, run)
    if approval is None:
        earlier = [a for a in runner.store.approvals(run.id) if a.actor == actor]
        if earlier:
            last = earlier[-1]
            return Decision(
                run,
                False,
                f"{actor} already {last.decision} this run (digest {last.digest[:12]}); "
                "nothing changed",
            )
        raise ApprovalError(
            f"run {run.id} is in {run.state!r}, which is not waiting for a decision; "
            "nothing changed"
        )
    refused = _role_refused(approval, role)
    if refused is not None:
        raise ApprovalError(f"{refused}; nothing changed")
    if decision == "approve" and role is None:
        raise ApprovalError("an approval needs the approver's role (--role)")
    now = runner.decision_now()
    lapsed = expired_pause(runner, run, now)
    if lapsed is not None:
        _refuse_after_expiry(runner, run, spec, lapsed, decision, actor, role, now)
    request = _request(run, spec, approval)
    weighed = _weigh(run, spec, approval, request, decision, actor, role, now)
    record, ctx, expires_at = weighed.record, weighed.ctx, weighed.record["expires_at"]
    if weighed.row is None:
        why = "; ".join(weighed.errors) or _no_guard_holds(run, spec, decision, record, role)
        raise ApprovalError(f"{decision} does not apply here ({why}); nothing changed")
    change = runner.change(run, at=now)
    change.new_approvals.append(
        {
            "name": approval.name,
            "effect": approval.effect,
            "digest": request.digest,
            "decision": "approved" if decision == "approve" else "rejected",
            "actor": actor,
            "role": role or "",
            "reason": reason,
            "policy_version": str(spec.policy_version),
            "spec_digest": spec.digest,
            "decided_at": now,
            "expires_at": expires_at,
        }
    )
    change.context = {**run.context, "approval": record}
    change.event(
        EventKind.APPROVED if decision == "approve" else EventKind.REJECTED,
        actor=actor,
        role=role or "",
        action=request.action,
        digest=request.digest,
        reason=reason,
        expires_at=expires_at,
        ratchet_version=VERSION,  # the approvals table has no place for it: the event keeps it
        **origin(),
    )
    moved = runner.move(run, spec, decision, change, ctx)
    verb = "approved" if decision == "approve" else "rejected"
    return Decision(moved, True, f"{actor} {verb} {request.action}")
