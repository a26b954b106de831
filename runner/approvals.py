"""Approvals: a person's decision, bound to a digest of the exact arguments it lets run.

The digest (:func:`runner.identity.approval_digest`) covers the workflow, the run, the spec and
policy versions, the effect and its normalised arguments. An effect that needs approval runs
only with an unconsumed, unexpired approval whose digest matches the arguments it is about to
send (:meth:`runner.execute.Runner.valid_approval`), and that approval is consumed in the same
transaction that writes the operation's pending record.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import ApprovalError
from .execute import Runner
from .identity import approval_digest, describe_action, evaluate_args
from .machine import machine_for
from .spec import Approval, Effect, Spec
from .store import RunRecord


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
class Decision:
    """The result of approve/reject: the run afterwards, and whether anything changed."""

    run: RunRecord
    changed: bool
    message: str


def _waiting_for(spec: Spec, run: RunRecord) -> Approval | None:
    state = spec.states[run.state]
    if state.kind != "pause" or state.approval is None:
        return None
    return spec.approvals.get(state.approval)


def _request(runner: Runner, run: RunRecord, spec: Spec, approval: Approval) -> ApprovalRequest:
    effect: Effect = spec.effects[approval.effect]
    args = evaluate_args(effect, runner.context(run, spec))
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


def pending_request(runner: Runner, run: RunRecord) -> ApprovalRequest | None:
    """The decision ``run`` is waiting for, if any."""
    spec = runner.spec_of(run)
    approval = _waiting_for(spec, run)
    return None if approval is None else _request(runner, run, spec, approval)


def decide(
    runner: Runner,
    run_id: str,
    decision: str,
    actor: str,
    role: str | None,
    reason: str | None = None,
) -> Decision:
    """Record ``decision`` (``approve`` or ``reject``) and move the run by that signal.

    Refused with no change: a run not waiting for a decision, a role the spec does not allow,
    an ``approve`` row whose guard does not hold. A repeated decision changes nothing and says so.
    """
    run = runner.store.get_run(run_id)
    if run.status in ("paused", "cancelled"):
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
    if role is not None and role not in approval.roles:
        raise ApprovalError(
            f"role {role!r} may not decide {approval.name!r} (allowed: "
            f"{', '.join(approval.roles)}); nothing changed"
        )
    if decision == "approve" and role is None:
        raise ApprovalError("an approval needs the approver's role (--role)")
    request = _request(runner, run, spec, approval)
    now = runner.clock.now()
    expires_at = now + approval.expires_after if approval.expires_after else None
    record = {
        "actor": actor,
        "role": role or "",
        "decided_at": now,
        "expires_at": expires_at,
        "digest": request.digest,
        "name": approval.name,
    }
    ctx = runner.context(run, spec, approval=record)
    row, errors = machine_for(spec).fire(run.state, decision, ctx)
    if row is None:
        why = "; ".join(errors) if errors else "no row's guard holds"
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
        "approved" if decision == "approve" else "rejected",
        actor=actor,
        role=role or "",
        action=request.action,
        digest=request.digest,
        reason=reason,
        expires_at=expires_at,
    )
    moved = runner.move(run, spec, decision, change, ctx)
    verb = "approved" if decision == "approve" else "rejected"
    return Decision(moved, True, f"{actor} {verb} {request.action}")
