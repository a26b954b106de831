"""Deciding: a person's approval or rejection, weighed against the table and recorded.

Recording a decision (:func:`decide`) works against a :class:`~ratchet_runner.engine.host.RunHost`
(the runner), not the runner's class. The decision's event records the Ratchet version that
recorded it, beside the digest that binds the spec and policy versions
(:mod:`~ratchet_runner.engine.approvals`). Whether approving in a role would be taken now
(:func:`verdicts`, what the queue shows before anyone clicks) is weighed by the function that
weighs a decision being recorded, and writes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from ..clock import format_time
from ..errors import ApprovalError, ExpressionError
from ..settings import VERSION
from ..spec.expressions import compile_expression
from ..spec.model import Approval, Row, Spec, canonical_json
from ..store.records import RunRecord, TimerRecord
from ..words import EventKind, RunStatus
from .activation import activation
from .approvals import ApprovalRequest, apply_expiry, expired_pause, request_for, waiting_for
from .audit import origin
from .host import RunHost
from .identity import normalise
from .machine import machine_for


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
    approval = waiting_for(spec, run)
    if approval is None or run.status in (RunStatus.PAUSED, RunStatus.CANCELLED):
        return []
    request = request_for(run, spec, approval)
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
    approval = waiting_for(spec, run)
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
    approval = waiting_for(spec, run)
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
    request = request_for(run, spec, approval)
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
