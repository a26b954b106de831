"""The state graph as a `transitions` Machine: which row fires for an event, given the guards.

One Machine is built per spec version (by digest) and cached. A run is never bound to it: each
:meth:`StepMachine.fire` puts a cursor (a model bound to the Machine once and reused by the fires
after it: binding a model costs more than firing an event) in the run's state and fires the event
on it. The Machine owns the graph and guard dispatch; it writes nothing durable: its one callback
notes, in memory, which row fired, and the runner then commits that move through the store.
:func:`status_of` says which status a run standing in a state has.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from transitions import Machine, MachineError

from ..errors import ExpressionError
from ..spec.expressions import Expression, compile_expression
from ..spec.model import Row, Spec, State, per_version
from ..words import RunStatus


class _Cursor:
    """The model a step fires an event on: where the run is, and which row fired."""

    def __init__(self) -> None:
        self.fired: Row | None = None
        self.guard_errors: list[str] = []


def _holds(guard: Expression, event: Any) -> bool:
    activation: Mapping[str, Any] = event.kwargs.get("activation", {})
    try:
        return bool(guard.evaluate(activation) is True)
    except ExpressionError as exc:
        event.model.guard_errors.append(str(exc))
        return False


def _note(row: Row, event: Any) -> None:
    event.model.fired = row


class StepMachine:
    """The transition table of one spec version, ready to pick rows."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self._machine = Machine(
            model=None,
            states=list(spec.states),
            initial=None,
            auto_transitions=False,
            send_event=True,
            ignore_invalid_triggers=False,
        )
        for row in spec.transitions:
            conditions: list[str | Callable[..., bool | None]] = []
            if row.guard:
                conditions.append(partial(_holds, compile_expression(row.guard)))
            self._machine.add_transition(
                trigger=row.event,
                source=row.state,
                dest=row.next_state,
                conditions=conditions,
                before=[partial(_note, row)],
            )
        self._events = {
            state: frozenset(row.event for row in spec.rows_from(state)) for state in spec.states
        }
        #: Cursors bound to the Machine and not in use: one is taken for each fire (so that
        #: threads firing at once each have their own) and given back after it.
        self._idle: list[_Cursor] = []

    def events_from(self, state: str) -> list[str]:
        """The events that have a row out of ``state``."""
        return sorted({row.event for row in self.spec.rows_from(state)})

    def fire(
        self, state: str, event: str, activation: Mapping[str, Any]
    ) -> tuple[Row | None, list[str]]:
        """The row that ``event`` fires from ``state`` (None if no row's guard holds), and any
        guard that failed to evaluate."""
        if event not in self._events.get(state, ()):
            return None, []
        try:
            cursor = self._idle.pop()
        except IndexError:
            cursor = _Cursor()
            self._machine.add_model(cursor, initial=state)
        fired: Row | None = None
        try:
            self._machine.set_state(state, model=cursor)
            cursor.fired, cursor.guard_errors = None, []
            cursor.trigger(event, activation=activation)  # type: ignore[attr-defined]
            fired = cursor.fired
        except MachineError:
            pass
        finally:
            errors = cursor.guard_errors
            self._idle.append(cursor)
        return fired, errors


_MACHINES: dict[str, StepMachine] = {}


def machine_for(spec: Spec) -> StepMachine:
    """The cached machine of this spec version."""
    return per_version(_MACHINES, spec, StepMachine)


#: The run status a state of each kind puts a run in.
_STATUS = {
    "step": RunStatus.RUNNING,
    "compensate": RunStatus.RUNNING,
    "pause": RunStatus.WAITING,
    "wait": RunStatus.WAITING,
    "success": RunStatus.DONE,
    "cancelled": RunStatus.DONE,
    "compensated": RunStatus.DONE,
    "operator_queue": RunStatus.NEEDS_PERSON,
}


def status_of(state: State) -> RunStatus:
    """The status of a run standing in ``state``."""
    return _STATUS[state.kind]
