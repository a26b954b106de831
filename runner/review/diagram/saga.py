"""The ``saga`` view: the forward effects in order, each with its undo, and the undo path.

The forward path follows the rows from ``start`` through step, pause and wait states to the
success states; each effect on it is numbered and says what undoes it: a compensating effect,
or ``none: …`` / ``impossible: …`` with the reason. Each ``compensate`` state then shows the
undo path: the same effects newest first (an effect with no undo is kept, and says why),
ending in the states the compensate state's rows lead to.
"""

from __future__ import annotations

from collections import deque

from ...spec.model import Effect, Row, Spec, State
from .model import Builder, Graph, Line, wrap

#: The kinds of state a forward path runs through.
FORWARD_KINDS = frozenset({"step", "pause", "wait", "success"})
WIDTH = 44
Step = tuple[int, Row, Effect]


def _forward_states(spec: Spec) -> list[str]:
    """The states on a forward path, breadth first from ``start``, in table order."""
    if spec.start not in spec.states:
        return []
    seen, queue = [spec.start], deque([spec.start])
    while queue:
        for row in spec.rows_from(queue.popleft()):
            target = spec.states.get(row.next_state)
            if target is not None and target.kind in FORWARD_KINDS and target.name not in seen:
                seen.append(target.name)
                queue.append(target.name)
    return seen


def _effect_row(spec: Spec, state: str) -> tuple[Row, Effect] | None:
    for row in spec.rows_from(state):
        if row.external_effect is not None and row.external_effect in spec.effects:
            return row, spec.effects[row.external_effect]
    return None


def _undo_text(row: Row) -> list[Line]:
    comp = row.compensation
    if comp is None:
        return [Line("undo: not declared", "muted")]
    if comp.kind == "effect":
        return [Line(f"undo: {comp.effect}")]
    label = "no undo (none)" if comp.kind == "none" else "CANNOT BE UNDONE (impossible)"
    return [Line(label, "title"), *wrap(comp.reason or "no reason given", WIDTH, "note")]


def _forward_lines(number: int, state: State, row: Row, effect: Effect) -> list[Line]:
    return [
        Line(f"{number} · {effect.name}", "title"),
        Line(f"in {state.name}: {effect.adapter}.{effect.operation}", "muted"),
        *([Line(f"receipt {row.receipt}", "note")] if row.receipt else []),
        *_undo_text(row),
    ]


def _state_node(b: Builder, state: State) -> str:
    return b.node(
        state.kind, Line(state.name, "title"), Line(state.kind.replace("_", " "), "muted")
    )


def _undo_node(b: Builder, spec: Spec, step: Step) -> str:
    number, row, effect = step
    comp = row.compensation
    if comp is not None and comp.kind == "effect" and comp.effect is not None:
        lines = [Line(f"undo {number} · {comp.effect}", "title"), Line(f"undoes {effect.name}")]
        undo = spec.effects.get(comp.effect)
        if undo is not None:
            lines.append(Line(f"{undo.adapter}.{undo.operation}, its own operation ID", "note"))
        return b.node("undo", *lines)
    kind = comp.kind if comp is not None else "none"
    role = "kept_impossible" if kind == "impossible" else "kept_none"
    head = Line(f"{number} · {effect.name} is kept", "title")
    return b.node(role, head, *_undo_text(row))


def _forward(b: Builder, spec: Spec) -> tuple[dict[str, str], list[Step]]:
    """The forward path's nodes by state, and its effects in order."""
    ids: dict[str, str] = {}
    steps: list[Step] = []
    for name in _forward_states(spec):
        state = spec.states[name]
        found = _effect_row(spec, name)
        if found is None:
            ids[name] = _state_node(b, state)
            continue
        row, effect = found
        steps.append((len(steps) + 1, row, effect))
        ids[name] = b.node("forward", *_forward_lines(len(steps), state, row, effect))
    for row in spec.transitions:
        if row.state in ids and row.next_state in ids:
            b.edge(ids[row.state], ids[row.next_state], "forward", Line(row.event, "title"))
    return ids, steps


def _grouped(rows: list[Row]) -> dict[str, list[str]]:
    """Target state → the events of ``rows`` that lead there, in table order."""
    grouped: dict[str, list[str]] = {}
    for row in rows:
        grouped.setdefault(row.next_state, []).append(row.event)
    return grouped


def _undo_path(
    b: Builder, spec: Spec, state: State, ids: dict[str, str], steps: list[Step]
) -> None:
    node = b.node(
        "compensate",
        Line(state.name, "title"),
        Line("compensate: undoes the done effects, newest first", "muted"),
    )
    into = [r for r in spec.transitions if r.next_state == state.name and r.state in ids]
    for source in dict.fromkeys(r.state for r in into):
        causes = " / ".join(r.event for r in into if r.state == source)
        b.edge(ids[source], node, "fail", Line(causes, "note"))
    last = node
    for step in reversed(steps):
        undo = _undo_node(b, spec, step)
        b.edge(last, undo, "undo", *([Line("newest first", "note")] if last == node else []))
        last = undo
    for target, events in _grouped(spec.rows_from(state.name)).items():
        if target not in ids and target in spec.states:
            ids[target] = _state_node(b, spec.states[target])
            if spec.states[target].terminal:
                b.finals.append(ids[target])
        if target in ids:
            b.edge(
                last,
                ids[target],
                "undo" if "ok" in events else "fail",
                Line(" / ".join(events), "note"),
            )


def saga_graph(spec: Spec) -> Graph:
    """The saga plan of ``spec``: forward effects with their undo, and the undo path."""
    title = (
        Line(f"{spec.name} v{spec.spec_version}: saga", "title"),
        Line(
            "the forward effects in order, each with its undo; the undo path runs newest first",
            "muted",
        ),
    )
    b = Builder("flow", title)
    start = b.node("start")
    ids, steps = _forward(b, spec)
    if spec.start in ids:
        b.edge(start, ids[spec.start], "forward")
    compensating = [s for s in spec.states.values() if s.kind == "compensate"]
    for state in compensating:
        _undo_path(b, spec, state, ids, steps)
    if not compensating:
        b.node(
            "note",
            *wrap(
                "no compensate state: nothing is undone automatically; each effect "
                "says what would undo it",
                WIDTH,
            ),
        )
    b.explain("node", "forward", "a forward effect (numbered)")
    b.explain("node", "undo", "its compensating effect")
    b.explain("node", "kept_none", "kept: no undo (none: why)")
    b.explain("node", "kept_impossible", "kept: cannot be undone (impossible: why)")
    b.explain("edge", "forward", "forward path")
    b.explain("edge", "fail", "a failure that starts the undo")
    b.explain("edge", "undo", "the undo path")
    return b.graph()
