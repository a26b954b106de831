"""The ``saga`` view: the forward effects in order, each with its undo, and the undo path.

The forward path follows the rows from ``start`` through step, pause and wait states to the
success states; each effect on it is numbered and says what undoes it: a compensating effect,
or ``none: …`` / ``impossible: …`` with the reason.

Each ``compensate`` state is then drawn as its undo path, and each way into it (a row whose
next state is the compensate state) enters that path at the newest change *that way* can have
made: :func:`ways_in` follows every path from ``start`` (:func:`made_before`), so an undo path
reached only before an e-mail is sent never shows the e-mail. On its way in, an effect is

- **made** once its ``ok`` row was taken: undone by its compensation, or kept (``none``,
  ``impossible``) and drawn so;
- **maybe** made when the way in is its own ``exhausted``, ``unknown`` or ``expired`` row: the
  outcome is not known (an ambiguous attempt may have landed), so the compensation looks it up
  first by its operation ID (engine/compensation.py) and undoes it only if found. Such an effect
  is drawn with a dotted border, and the legend says so;
- not made after its ``refused`` row.

Ways that can have made the same changes share the same nodes, and since the undo runs newest
first, every path shares its older end (each node stands for "this undo, then the rest").
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from ...spec.model import Effect, Row, Spec, State
from ...spec.paths import (
    Made,
    after_row,
    effect_row,
    made_before,
)
from .model import Builder, Graph, Line, wrap

#: The kinds of state a forward path runs through.
FORWARD_KINDS = frozenset({"step", "pause", "wait", "success"})
WIDTH = 44
Step = tuple[int, Row, Effect]


@dataclass(frozen=True)
class WayIn:
    """A row into a compensate state, and the forward effects that way can have made, newest
    first: (effect name, ``made`` or ``maybe``)."""

    row: Row
    states: tuple[str, ...]
    effects: tuple[tuple[str, Made], ...]


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


# -- what each way into the undo path can have made -----------------------------------------------


def _newest_first(spec: Spec, known: Mapping[str, Made]) -> tuple[str, ...]:
    """The effect states of ``known``, newest first: in reverse forward-path order (a state off
    the forward path, reached only through an undo path, counts as the newest)."""
    order = {name: i for i, name in enumerate(_forward_states(spec))}
    return tuple(sorted(known, key=lambda s: (-order.get(s, len(order)), s)))


def ways_in(spec: Spec) -> list[WayIn]:
    """Every row from a reachable state into a compensate state, in table order, with what its
    way can have made."""
    known = made_before(spec)
    ways = []
    for row in spec.transitions:
        target = spec.states.get(row.next_state)
        if target is None or target.kind != "compensate" or row.state not in known:
            continue
        made = after_row(spec, row, known[row.state])
        states = _newest_first(spec, made)
        effects = tuple((_effect_name(spec, s), made[s]) for s in states)
        ways.append(WayIn(row, states, effects))
    return ways


def _effect_name(spec: Spec, state: str) -> str:
    found = effect_row(spec, state)
    return found[1].name if found is not None else state


# -- drawing --------------------------------------------------------------------------------------


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


def _undo_node(b: Builder, spec: Spec, step: Step, made: Made) -> str:
    number, row, effect = step
    comp = row.compensation
    prefix = f"{number} · " if number else ""
    if comp is not None and comp.kind == "effect" and comp.effect is not None:
        if made == "made":
            lines = [Line(f"undo {prefix}{comp.effect}", "title"), Line(f"undoes {effect.name}")]
        else:
            lines = [
                Line(f"undo {prefix}{comp.effect}, if {effect.name} was made", "title"),
                Line(f"{effect.name}'s outcome is not known on this way:", "note"),
                Line("looked up first: found → undone · not found → skipped", "note"),
            ]
            if effect.reconcile is None:
                lines.append(Line("no lookup: the run goes to a person", "note"))
        undo = spec.effects.get(comp.effect)
        if undo is not None:
            lines.append(Line(f"{undo.adapter}.{undo.operation}, its own operation ID", "note"))
        return b.node("undo" if made == "made" else "undo_maybe", *lines)
    kind = comp.kind if comp is not None else "none"
    role = "kept_impossible" if kind == "impossible" else "kept_none"
    if made == "made":
        head = Line(f"{prefix}{effect.name} is kept", "title")
    else:
        head = Line(f"{prefix}{effect.name} may have been made", "title")
        role += "_maybe"
    return b.node(role, head, *_undo_text(row))


def _forward(b: Builder, spec: Spec) -> tuple[dict[str, str], dict[str, Step]]:
    """The forward path's nodes by state, and its effects by state, numbered in order."""
    ids: dict[str, str] = {}
    steps: dict[str, Step] = {}
    for name in _forward_states(spec):
        state = spec.states[name]
        found = effect_row(spec, name)
        if found is None:
            ids[name] = _state_node(b, state)
            continue
        row, effect = found
        steps[name] = (len(steps) + 1, row, effect)
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


#: What one way in leaves to undo: (effect state, made or maybe), newest first.
Chain = tuple[tuple[str, Made], ...]


def _undo_path(
    b: Builder,
    spec: Spec,
    state: State,
    ids: dict[str, str],
    steps: dict[str, Step],
    ways: list[WayIn],
) -> None:
    """The undo path of compensate state ``state``: each way in enters at the newest change it
    can have made; the nodes for the same rest of the path are shared."""
    nodes: dict[Chain, str] = {}
    ends: list[str] = []

    def chain(rest: Chain) -> str:
        if rest in nodes:
            return nodes[rest]
        if not rest:
            node = b.node("nothing", Line("nothing to undo", "title"))
            nodes[rest] = node
            ends.append(node)
            return node
        (effect_state, made), older = rest[0], rest[1:]
        found = effect_row(spec, effect_state)
        assert found is not None  # only effect states are ever known as made
        number = steps[effect_state][0] if effect_state in steps else 0
        node = _undo_node(b, spec, (number, *found), made)
        nodes[rest] = node
        if older:
            b.edge(node, chain(older), "undo")
        else:
            ends.append(node)
        return node

    entered: dict[tuple[str, str], list[str]] = {}
    for way in ways:
        if way.row.next_state != state.name or way.row.state not in ids:
            continue
        head = chain(tuple(zip(way.states, (m for _, m in way.effects), strict=True)))
        entered.setdefault((ids[way.row.state], head), []).append(way.row.event)
    if not nodes:
        ends.append(b.node("nothing", *wrap("no way in from the forward path", WIDTH, "title")))
    b.cluster(
        "undo_path",
        (
            Line(state.name, "title"),
            Line("compensate: each way in enters at the newest change it can have made;", "muted"),
            Line("the undo runs newest first", "muted"),
        ),
        [*nodes.values()] if nodes else ends,
    )
    for (tail, head), events in entered.items():
        b.edge(tail, head, "fail", Line(" / ".join(events), "note"))
    for target, events in _grouped(spec.rows_from(state.name)).items():
        if target not in ids and target in spec.states:
            ids[target] = _state_node(b, spec.states[target])
            if spec.states[target].terminal:
                b.finals.append(ids[target])
        if target in ids:
            for end in ends:
                b.edge(
                    end,
                    ids[target],
                    "undo" if "ok" in events else "undo_failed",
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
    ways = ways_in(spec)
    for state in compensating:
        _undo_path(b, spec, state, ids, steps, ways)
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
    b.explain("node", "undo", "made on that way: undone by its compensating effect")
    b.explain("node", "kept_none", "made on that way: kept, no undo (none: why)")
    b.explain("node", "kept_impossible", "made on that way: cannot be undone (impossible: why)")
    b.explain(
        "node",
        "undo_maybe",
        "dotted: may have been made (its outcome is not known on that way): looked up first, "
        "undone only if found",
    )
    b.explain("node", "kept_none_maybe", "dotted: may have been made; kept, no undo (none: why)")
    b.explain(
        "node",
        "kept_impossible_maybe",
        "dotted: may have been made; cannot be undone (impossible: why)",
    )
    b.explain("node", "nothing", "nothing made on that way: nothing to undo")
    b.explain("edge", "forward", "forward path")
    b.explain("edge", "fail", "a way into the undo path, at the newest change it can have made")
    b.explain("edge", "undo", "the undo path, newest first")
    b.explain("edge", "undo_failed", "a compensation refused, or out of attempts")
    return b.graph()
