"""Signals: a named event from outside that moves a paused run, delivered once per signal ID."""

from __future__ import annotations

from typing import Any

from ..clock import format_time
from ..errors import DuplicateOperation, SignalRefused
from ..spec.model import RUNNER_EVENTS
from ..store.records import RunRecord
from ..words import EventKind, RunStatus
from .activation import activation
from .approvals import apply_expiry, expired_pause
from .audit import origin
from .drive import Outcome, carry_on
from .machine import machine_for
from .runner import Runner


def send_signal(
    runner: Runner,
    run: RunRecord,
    event: str,
    signal_id: str,
    data: dict[str, Any] | None = None,
    spec_version: int | None = None,
    *,
    drive: bool = True,
) -> Outcome:
    """Deliver signal ``event`` to ``run`` (as the store has just given it), once per
    ``signal_id``, and drive the run on (or, without ``drive``, leave it to the workers, whom
    the commit wakes).

    A signal ID seen before changes nothing and says so. A signal the run's state does not take,
    or whose row's guard does not hold, or sent for a ``spec_version`` other than the one the
    run is pinned to, is refused with nothing changed — never queued.

    What it reads before its commit: nothing more than the run it is given, but for a pause
    that expires (the database's clock and the run's timers). Whether the signal ID was seen
    before is asked only on the way to a refusal (a signal the run has already taken may be
    one its state no longer takes); on the way to the commit, the signal's row says it,
    refused by the store as a duplicate with the whole change.
    """
    store = runner.store

    def duplicate() -> Outcome | None:
        """The answer to a signal ID the run has already received, or None."""
        seen = store.signal(run.id, signal_id)
        return None if seen is None else _already(run, signal_id, seen.event)

    def refused(error: SignalRefused) -> Outcome:
        """A duplicate's answer, or ``error`` raised."""
        answer = duplicate()
        if answer is None:
            raise error
        return answer

    if run.status in (RunStatus.PAUSED, RunStatus.CANCELLED):
        return refused(
            SignalRefused(f"run {run.id} is {run.status} by an operator; nothing changed")
        )
    spec = runner.spec_of(run)
    if spec_version is not None and spec_version != spec.spec_version:
        return refused(
            SignalRefused(
                f"run {run.id} runs version {spec.spec_version} of {spec.name}; this signal "
                f"was sent for version {spec_version}; nothing changed"
            )
        )
    state = spec.states[run.state]
    if state.approval is not None and event in ("approve", "reject"):
        return refused(
            SignalRefused(
                f"a decision on {state.approval} needs an actor and a role: use "
                f"'ratchet {event} {run.id} --as NAME ...'; nothing changed"
            )
        )
    takes = list(state.resumes_on) if state.kind in ("pause", "wait") else []
    if event in RUNNER_EVENTS or event not in takes:
        offered = ", ".join(takes) or "no signals"
        return refused(
            SignalRefused(
                f"run {run.id} is in {run.state!r} ({state.kind}), which takes {offered}, not "
                f"{event!r}; nothing changed"
            )
        )
    payload = data or {}
    # Only a pause that expires has an ``expired`` timer to look for (timers.arm), by the
    # clock every process deciding on the run reads.
    lapsed = None
    if state.kind == "pause" and state.expires_after:
        now = runner.decision_now()
        lapsed = expired_pause(runner, run, now)
    if lapsed is not None:  # came after the pause expired, before a worker fired its timer
        answer = duplicate()
        if answer is not None:
            return answer
        moved, how = apply_expiry(runner, run, spec, lapsed, now, signal=event, signal_id=signal_id)
        raise SignalRefused(
            f"run {run.id} no longer takes {event!r}: its pause in {run.state!r} expired at "
            f"{format_time(lapsed.due_at)}, before this signal; {how}, and the run moved by "
            f"'expired' to {moved.state!r} ({moved.status}). The signal was not delivered"
        )
    ctx = activation(run, spec, signal=payload)
    row, errors = machine_for(spec).fire(run.state, event, ctx)
    if row is None:
        why = "; ".join(errors) or "no row's guard holds"
        return refused(
            SignalRefused(f"{event!r} does not apply to run {run.id} now ({why}); nothing changed")
        )
    change = runner.change(run)
    change.new_signals.append(
        {"signal_id": signal_id, "event": event, "data": payload, "received_at": change.at}
    )
    change.event(EventKind.SIGNAL, event=event, signal_id=signal_id, data=payload, **origin())
    try:
        moved = runner.move(run, spec, event, change, ctx)
    except DuplicateOperation:
        seen = store.signal(run.id, signal_id)
        return _already(store.get_run(run.id), signal_id, seen.event if seen else None)
    said = f"{event} moved the run to {row.next_state}"
    if not drive:
        return Outcome(moved, True, said, None)
    driven, then = carry_on(runner, moved)
    return Outcome(driven, True, said, then)


def _already(run: RunRecord, signal_id: str, event: str | None) -> Outcome:
    """What a signal ID seen before gets: nothing changed, and it says so."""
    received = f" ({event})" if event else ""
    return Outcome(
        run, False, f"signal {signal_id} was already received{received}; nothing changed"
    )
