"""Where an unfinished run would go on under a spec version: the state it stands in (if the
version has it), the status it would have there, the rows out of it, and what else matters: the
decision it waits for and its digest, a call in flight, a timer armed (which keeps its time).
"""

from __future__ import annotations

from ..clock import format_time
from ..engine.activation import activation
from ..engine.approvals import request_for, waiting_for
from ..engine.machine import status_of
from ..engine.timers import arm
from ..errors import RatchetError
from ..spec.model import State
from ..words import OperationStatus, RunStatus
from .results import Continuation, Way
from .walk import Walk


def continuation(walk: Walk) -> Continuation:
    """Where the walked history's run would go on under the walk's spec version."""
    run = walk.history.run
    state = walk.spec.states.get(run.state)
    if state is None:
        return Continuation(
            run.state,
            None,
            str(run.status),
            notes=("it needs a mapping to a state of this version first",),
        )
    held = (RunStatus.PAUSED, RunStatus.NEEDS_PERSON)
    status = str(run.status) if run.status in held else str(status_of(state))
    ways = tuple(
        Way(r.event, r.next_state, r.guard, r.external_effect, walk.located(r.pointer))
        for r in walk.spec.rows_from(state.name)
    )
    return Continuation(state.name, state.kind, status, ways, tuple(open_notes(walk, state)))


def open_notes(walk: Walk, state: State) -> list[str]:
    """What matters for an unfinished run in ``state``: the decision it waits for, a call
    in flight, its timers."""
    run, notes = walk.history.run, []
    approval = waiting_for(walk.spec, run)
    asked = None if approval is None else walk.spec.effects[approval.effect]
    unread = (
        None
        if asked is None
        else walk.sealed_read(walk.reads_of(asked), activation(run, walk.spec))
    )
    if approval is not None and unread is None:
        try:
            digest = request_for(run, walk.spec, approval).digest
        except RatchetError as exc:
            notes.append(f"its decision on {approval.name} cannot be asked: {exc}")
        else:
            notes.append(f"waits for a decision on {approval.name} (digest {digest[:12]})")
    for op in walk.history.operations:
        unsettled = op.status in (OperationStatus.PENDING, OperationStatus.UNKNOWN)
        if unsettled and op.attempts > 0:
            notes.append(
                f"{op.effect} is in flight (op {op.operation_id[:12]}, {op.status}, attempt "
                f"{op.attempts}): it is looked up before any call"
            )
    for timer in walk.history.timers:
        if timer.fired_at is not None or timer.state != state.name:
            continue
        said = f"its {timer.event!r} timer falls due at {format_time(timer.due_at)}, as armed"
        try:
            armed = arm(run, walk.spec, state, timer.created_at)
        except RatchetError:
            armed = []
        due = [float(t["due_at"]) for t in armed if t["event"] == timer.event]
        if not due:
            said += f"; this version would arm no {timer.event!r} timer here"
        elif abs(due[0] - timer.due_at) > 1e-6:
            said += f"; this version would arm it for {format_time(due[0])}"
        notes.append(said)
    return notes
