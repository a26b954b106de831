"""The moves of a history checked under a spec version: the row each recorded move's event
selects from its state on the recorded activation (:func:`~ratchet_runner.engine.machine.
machine_for`), the lack of one where the run went to a person, and the timers a waiting state
arms (:func:`~ratchet_runner.engine.timers.arm`), which must end the wait as it ended. A move
committed with a decision, a signal or a timer is checked at that event, as the engine weighs
the row before it records them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..engine.activation import activation
from ..engine.timers import arm
from ..errors import RatchetError
from ..spec.loader import pointer_join
from ..spec.model import Row, State
from ..store.records import EventRecord
from ..words import EventKind
from .walk import WAITING, Moment, Walk, text


class MoveChecks(Walk):
    """The checks of a history's moves and waits."""

    def move_after(self, start: int) -> tuple[int, EventRecord] | None:
        """The move (``moved`` or ``stuck``) committed with the event at ``start``."""
        events = self.history.events
        version = events[start - 1].version
        for position in range(start + 1, len(events) + 1):
            found = events[position - 1]
            if found.version != version:
                return None
            if found.kind in (EventKind.MOVED, EventKind.STUCK):
                return position, found
        return None

    def fire(self, state: str, event: str, ctx: Mapping[str, Any]) -> tuple[Row | None, list[str]]:
        """The row ``event`` selects from ``state``, as the runner's move does (no row for
        ``unknown``: the ``exhausted`` row)."""
        row, errors = self.machine.fire(state, event, ctx)
        if row is None and event == "unknown":
            row, errors = self.machine.fire(state, "exhausted", ctx)
        return row, errors

    def check_move(self, move: EventRecord, **extra: Any) -> None:
        """The recorded move (or the recorded lack of one: ``stuck``) is the one the new
        version's table selects on the recorded activation."""
        data = move.data
        stuck = move.kind == EventKind.STUCK
        recorded = text(data, "state" if stuck else "from")
        self.resync(recorded)
        self.require_state(recorded, "the run stood in")
        event = text(data, "event")
        if not stuck:  # the row the runner looked for first (``unknown``: then ``exhausted``)
            event = text(data, "instead_of") or event
        to = "" if stuck else text(data, "to")
        view = self.view(move, recorded)
        ctx = activation(view, self.spec, **extra)
        row, errors = self.fire(recorded, event, ctx)
        hidden = self.sealed_read(self.guards(recorded, event, "exhausted"), ctx)
        if stuck:
            if row is not None and hidden is None:
                code = "V304" if row.guard else "V301"
                self.diverge(
                    code,
                    row.pointer,
                    f"the history found no row for {event!r} in {recorded!r} (the run went to a "
                    f"person); this version's row takes it to {row.next_state!r}",
                )
            return
        if to not in self.spec.states:
            pointer = row.pointer if row is not None else self.state_pointer(recorded)
            self.diverge(
                "V302",
                pointer,
                f"the run moved {recorded} --{event}--> {to}; this version has no state {to!r}",
            )
        same = row is not None and row.next_state == to  # by its own row or the fallback
        if same:
            return
        if hidden is not None:
            self.note(f"the move {recorded} --{event}--> {to} was not checked: {hidden} is sealed")
            return
        fallback = "exhausted" if event == "unknown" else event
        rows = [r for r in self.spec.rows_from(recorded) if r.event in (event, fallback)]
        if not rows:
            self.diverge(
                "V303",
                self.state_pointer(recorded),
                f"no row of this version takes {event!r} in {recorded!r} (the history moved "
                f"{recorded} --{event}--> {to})",
                key=True,
            )
        if row is None:
            guards = [r for r in rows if r.guard]
            why = "; ".join(errors) or "no row's guard holds on the recorded context"
            pointer = pointer_join(guards[0].pointer, "guard") if guards else rows[0].pointer
            self.diverge(
                "V304", pointer, f"{recorded} --{event}--> {to} is not taken any more: {why}"
            )
        if row.event != text(data, "event"):  # a row for ``unknown`` where none was
            self.diverge(
                "V301",
                row.pointer,
                f"a row of this version takes {row.event!r} in {recorded!r} itself, to "
                f"{row.next_state!r}; the history followed the {text(data, 'event')!r} row to "
                f"{to!r}",
            )
        if any(r.next_state == to and r.event == row.event for r in rows):
            self.diverge(
                "V304",
                self.field_pointer(row.pointer, "guard"),
                f"on the recorded context this row's guard selects {recorded} --{row.event}--> "
                f"{row.next_state} first, where the history moved to {to!r}",
            )
        self.diverge(
            "V301",
            self.field_pointer(row.pointer, "next_state"),
            f"{recorded} --{row.event}--> now leads to {row.next_state!r}; the history moved to "
            f"{to!r}",
        )

    def moved_into(self, move: EventRecord) -> None:
        """The run now stands where ``move`` took it."""
        to = text(move.data, "to")
        self.state, self.inferred = to, False
        target = self.spec.states.get(to)
        if target is not None and target.kind in WAITING:
            self.entered = Moment(move.at, self.view(move, to, ahead=0))
        else:
            self.entered = None

    def check_timers(self, left_at: float, fired: str | None = None, due: float = 0.0) -> None:
        """Whether the timers this version arms in the waiting state would have ended the wait
        as the history says it ended: by the recorded timer (``fired``, due at ``due``), or, for
        a decision or signal at ``left_at``, by none first."""
        state = self.spec.states.get(self.state or "")
        if state is None or self.entered is None:
            return
        armed: list[Any] = []
        if state.kind in WAITING:
            try:
                armed = list(arm(self.entered.view, self.spec, state, self.entered.at))
            except RatchetError as exc:
                self.diverge("V310", self.timer_pointer(state), f"its timer cannot be armed: {exc}")
        pointer = self.timer_pointer(state)
        if fired is not None:
            match = [t for t in armed if t["event"] == fired]
            if not match:
                self.diverge(
                    "V310",
                    pointer,
                    f"the run left {state.name!r} by its {fired!r} timer; this "
                    f"version arms no {fired!r} timer there",
                )
            if abs(float(match[0]["due_at"]) - due) > 1e-6:
                self.diverge(
                    "V310",
                    pointer,
                    f"the {fired!r} timer in {state.name!r} falls due "
                    f"{delta(float(match[0]['due_at']) - self.entered.at)} after entry in this "
                    f"version; the history's fell due {delta(due - self.entered.at)} after",
                )
            return
        early = [t for t in armed if float(t["due_at"]) <= left_at]
        if early:
            self.diverge(
                "V310",
                pointer,
                f"the {early[0]['event']!r} timer in {state.name!r} falls due "
                f"{delta(float(early[0]['due_at']) - self.entered.at)} after entry in this "
                f"version, before the run left it ({delta(left_at - self.entered.at)} after)",
            )

    def timer_pointer(self, state: State) -> str:
        for name in ("expires_after", "after", "until"):
            pointer = pointer_join(state.pointer, name)
            if self.spec.document is not None and pointer in self.spec.document.marks:
                return pointer
        return state.pointer

    def caused_move(self, **extra: Any) -> None:
        """Check the move committed with the event being taken, there."""
        found = self.move_after(self.position)
        if found is None:
            return
        position, move = found
        self.checked.add(position)
        self.check_move(move, **extra)


def delta(seconds: float) -> str:
    """``72h``, ``30m``, ``1d 2h``: a span as the spec writes durations."""
    whole = round(seconds)
    if whole % 86400 == 0 and whole:
        return f"{whole // 86400}d"
    if whole % 3600 == 0 and whole:
        return f"{whole // 3600}h"
    if whole % 60 == 0 and whole:
        return f"{whole // 60}m"
    return f"{seconds:g}s"
