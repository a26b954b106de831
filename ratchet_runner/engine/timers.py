"""Durable timers and pause records, as pure functions over the run's records.

Entering a ``pause`` state with ``expires_after`` arms an ``expired`` timer; entering a ``wait``
state arms a ``due`` timer (``after`` a duration, or ``until`` a deadline). Timers are rows in the
store, armed and cancelled in the same transaction as the move that enters or leaves their state
(:func:`on_move` adds them to that move's change), so nothing waits in memory: a paused run costs a
row, not a thread. Firing what is due is a worker's pass
(:func:`ratchet_runner.worker.passes.fire_due`): it claims the timer (``UPDATE … WHERE fired_at IS
NULL``) in the transaction that moves the run, so each timer fires once, and never before its time
by the injected clock.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from ..errors import RunError
from ..spec.expressions import compile_expression
from ..spec.model import Spec, State
from ..store.records import Change, NewTimer, RunRecord
from ..words import EventKind
from .activation import activation
from .identity import describe_action, evaluate_args


def _deadline(text: Any) -> float:
    if isinstance(text, int | float):
        return float(text)
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise RunError(f"the wait deadline {text!r} is not an RFC 3339 timestamp") from None


def arm(run: RunRecord, spec: Spec, state: State, now: float) -> list[NewTimer]:
    """The timers that entering ``state`` at ``now`` arms."""
    if state.kind == "pause" and state.expires_after:
        return [{"state": state.name, "event": "expired", "due_at": now + state.expires_after}]
    if state.kind == "wait":
        if state.after is not None:
            return [{"state": state.name, "event": "due", "due_at": now + state.after}]
        if state.until is not None:
            deadline = _deadline(compile_expression(state.until).evaluate(activation(run, spec)))
            return [{"state": state.name, "event": "due", "due_at": deadline}]
    return []


def pause_record(run: RunRecord, spec: Spec, state: State, now: float) -> dict[str, Any]:
    """Why the run paused, what resumes it, when it expires, and what it proposes."""
    record: dict[str, Any] = {
        "state": state.name,
        "since": now,
        "reason": state.description or f"waiting in {state.name}",
        "resumes_on": list(state.resumes_on),
        "expires_at": now + state.expires_after if state.expires_after else None,
    }
    approval = spec.approvals.get(state.approval or "")
    if approval is not None:
        effect = spec.effects[approval.effect]
        args = evaluate_args(effect, activation(run, spec))
        record["reason"] = state.description or f"waiting for a decision on {approval.name}"
        record["proposal"] = describe_action(effect, args)
        record["decided_by"] = list(approval.roles)
    return record


def on_move(run: RunRecord, spec: Spec, target: State, change: Change) -> None:
    """Cancel the timers of the state being left; arm and record those of the new one."""
    context = (change.context if change.context is not None else run.context).copy()
    if context.get("timers_of") == run.state:
        change.cancel_timers_of_state = run.state
        del context["timers_of"]
    view = replace(run, context=context, state=target.name)  # the run as it will be
    armed = arm(view, spec, target, change.at)
    if armed:
        change.new_timers.extend(armed)
        context = {**context, "timers_of": target.name}
    change.context = context
    if target.kind in ("pause", "wait"):
        pause = pause_record(view, spec, target, change.at)
        change.event(EventKind.PAUSED, **pause)
        change.context = {**context, "pause": pause}
    elif "pause" in context:
        context = context.copy()
        del context["pause"]
        change.context = context
