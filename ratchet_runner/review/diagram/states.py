"""The ``states`` view: one node per state, one edge per transition row.

Each node is shaped and coloured by its kind; a pause says what resumes it and when it expires, a
wait when it fires, a step which effect it performs, an operator queue what the person is to do
(numbered, with the same number on the row that leads there). Each edge carries its event, its
guard (shortened when long) and the effect the row performs.
"""

from __future__ import annotations

from ...spec.model import OUTCOME_EVENTS, Row, Spec, State
from .model import Builder, Graph, Line, duration, shorten, wrap

#: State kinds in legend order, with what the legend says about each.
KINDS: dict[str, str] = {
    "step": "step: the runner acts at once",
    "pause": "pause: waits for a decision or a signal",
    "wait": "wait: a durable timer",
    "compensate": "compensate: undoes done effects",
    "success": "success (end)",
    "cancelled": "cancelled (end)",
    "compensated": "compensated (end)",
    "operator_queue": "operator queue: a person finishes it",
}
EDGES: dict[str, str] = {
    "effect": "ok: the row's effect is done",
    "move": "a signal, a decision, next, or ok (no effect)",
    "failure": "refused, exhausted, unknown",
    "timer": "expired / due (a timer)",
}
NODE_WIDTH = 44
EDGE_WIDTH = 34
GUARD_LIMIT = 72


def _edge_role(row: Row) -> str:
    if row.external_effect is not None:
        return "effect"
    if row.event in ("expired", "due"):
        return "timer"
    if row.event in OUTCOME_EVENTS - {"ok"}:
        return "failure"
    return "move"


def _todo_numbers(spec: Spec) -> dict[int, int]:
    """Row index → its number in the to-do list of the operator queue it leads to."""
    numbers: dict[int, int] = {}
    counts: dict[str, int] = {}
    for row in spec.transitions:
        target = spec.states.get(row.next_state)
        if target is not None and target.kind == "operator_queue" and row.operator_action:
            counts[target.name] = counts.get(target.name, 0) + 1
            numbers[row.index] = counts[target.name]
    return numbers


def _queue_lines(spec: Spec, state: State, numbers: dict[int, int]) -> list[Line]:
    """What the person finishing a run in this queue is to do, numbered by the row that led
    there (the row's edge carries the same number)."""
    lines = [Line("operator queue: a person finishes it", "muted")]
    if state.operator_action:
        lines += wrap(f"to do: {state.operator_action}", NODE_WIDTH, "note")
    for row in spec.transitions:
        if row.index in numbers and row.next_state == state.name:
            text = f"#{numbers[row.index]} ({row.state}, {row.event}): {row.operator_action}"
            lines += wrap(text, NODE_WIDTH, "note")
    return lines


def _state_lines(spec: Spec, state: State, numbers: dict[int, int]) -> list[Line]:
    lines = [Line(state.name, "title")]
    if state.kind == "step":
        effect = spec.effect_of(state.name)
        lines.append(Line("step", "muted"))
        if effect is not None:
            lines.append(Line(f"performs {effect.name}"))
    elif state.kind == "pause":
        lines.append(Line("pause", "muted"))
        if state.resumes_on:
            lines += wrap("resumes on " + " / ".join(state.resumes_on), NODE_WIDTH)
        if state.approval is not None:
            lines.append(Line(f"asks for {state.approval}"))
        if state.expires_after is not None:
            lines.append(Line(f"expires after {duration(state.expires_after)} → expired"))
    elif state.kind == "wait":
        lines.append(Line("wait", "muted"))
        if state.after is not None:
            lines.append(Line(f"after {duration(state.after)} → due"))
        if state.until is not None:
            lines += wrap(f"until {shorten(state.until, GUARD_LIMIT)} → due", NODE_WIDTH, "code")
        if state.resumes_on:
            lines += wrap("or on " + " / ".join(state.resumes_on), NODE_WIDTH)
    elif state.kind == "compensate":
        lines.append(Line("compensate", "muted"))
        lines.append(Line("undoes the done effects, newest first"))
    elif state.kind == "operator_queue":
        lines += _queue_lines(spec, state, numbers)
    else:
        lines.append(Line(f"{state.kind} (end)", "muted"))
    if state.description:
        lines += wrap(shorten(state.description, 2 * NODE_WIDTH), NODE_WIDTH, "note")
    return lines


def _row_lines(row: Row, number: int | None) -> list[Line]:
    lines = [Line(row.event, "title")]
    if row.guard:
        lines += wrap(f"[{shorten(row.guard, GUARD_LIMIT)}]", EDGE_WIDTH, "code")
    if row.external_effect is not None:
        lines.append(Line(f"does {row.external_effect}", "note"))
        if row.receipt:
            lines.append(Line(f"receipt {row.receipt}", "note"))
    if number is not None:
        lines.append(Line(f"to do #{number}", "note"))
    return lines


def states_graph(spec: Spec, current: str | None = None) -> Graph:
    """The state graph of ``spec``; with ``current``, that state is drawn emphasised and says
    a run is there (the console's run page)."""
    title = [Line(f"{spec.name} v{spec.spec_version}: states", "title")]
    if spec.title:
        title.append(Line(spec.title, "muted"))
    b = Builder("states", tuple(title))
    numbers = _todo_numbers(spec)
    start = b.node("start")
    ids = {}
    for state in spec.states.values():
        lines = _state_lines(spec, state, numbers)
        if state.name == current:
            lines.append(Line("\u25cf this run is here", "note"))
        ids[state.name] = b.node(_kind(state), *lines)
    if current in ids:
        b.highlight = ids[current]
    if spec.start in ids:
        b.edge(start, ids[spec.start], "start")
    for row in spec.transitions:
        if row.state in ids and row.next_state in ids:
            lines = _row_lines(row, numbers.get(row.index))
            b.edge(ids[row.state], ids[row.next_state], _edge_role(row), *lines)
    b.finals.extend(ids[s.name] for s in spec.states.values() if s.terminal)
    for kind, text in KINDS.items():
        b.explain("node", kind, text)
    for role, text in EDGES.items():
        b.explain("edge", role, text)
    return b.graph()


def _kind(state: State) -> str:
    return state.kind if state.kind in KINDS else "step"
