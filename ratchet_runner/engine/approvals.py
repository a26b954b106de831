"""Approvals: a person's decision, bound to a digest of the exact arguments it lets run.

The digest (:func:`ratchet_runner.engine.identity.approval_digest`) covers the workflow, the run,
the spec and policy versions, the effect and its normalised arguments. An effect that needs approval
runs only with an unconsumed, unexpired approval whose digest matches the arguments it is about to
send (:func:`valid_approval`, a plain function of the run's approval records and the time), and
that approval is consumed in the same transaction that writes the operation's pending record.
What a run waiting for a decision asks (:func:`pending_request`) and a pause's expiry
(:func:`apply_expiry`) are here too; weighing and recording a decision are
:mod:`~ratchet_runner.engine.deciding`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..clock import format_time
from ..errors import (
    ApprovalError,
    ApprovalExpired,
    ApprovalStale,
    VersionConflict,
)
from ..spec.model import Approval, Effect, Spec
from ..store.records import ApprovalRecord, Change, RunRecord, TimerRecord
from ..words import EventKind
from .activation import activation
from .host import RunHost, StepHost
from .identity import approval_digest, describe_action, evaluate_args
from .machine import status_of
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


def waiting_for(spec: Spec, run: RunRecord) -> Approval | None:
    """The approval the pause ``run`` stands in asks for, if it asks for one."""
    state = spec.states[run.state]
    if state.kind != "pause" or state.approval is None:
        return None
    return spec.approvals.get(state.approval)


def request_for(run: RunRecord, spec: Spec, approval: Approval) -> ApprovalRequest:
    """What ``run`` asks a person to approve for ``approval``: the action, and its digest."""
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
    approval = waiting_for(spec, run)
    return None if approval is None else request_for(run, spec, approval)


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
