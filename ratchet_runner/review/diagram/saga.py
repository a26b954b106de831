"""The ``saga`` view: the forward effects in order, each with its undo, and the undo path.

The forward path follows the rows from ``start`` through step, pause and wait states to the
success states; each effect on it is numbered by its place on its way (alternatives, the
effects of two ways a guard chooses between, can share a number) and says what undoes it: a
compensating effect, or ``none: …`` / ``impossible: …`` with the reason.

Each ``compensate`` state is then drawn as its undo path, and each way into it (a row whose next
state is the compensate state) enters that path at the newest change *that way* can have made:
:func:`ways_in` follows every path from ``start`` (:func:`histories_before`), so an undo path
reached only before an e-mail is sent never shows the e-mail. Paths that made different
effects, or the same ones in another order, are alternatives: the row enters the undo path once
for each, and each undoes only what its own path made, newest first in the order that path
made them, as the runtime does (it undoes a run's completed effects in the order they
completed, engine/compensation.py). On its way in, an effect is

- **made** once its ``ok`` row was taken: undone by its compensation, or kept (``none``,
  ``impossible``) and drawn so;
- **maybe** made when the way in is its own ``exhausted``, ``unknown`` or ``expired`` row: the
  outcome is not known (an ambiguous attempt may have landed), so the compensation looks it up
  first by its operation ID (engine/compensation.py) and undoes it only if found. Such an effect
  is drawn with a dotted border, and the legend says so;
- not made after its ``refused`` row.

Ways that can have made the same changes share the same nodes, and since the undo runs newest
first, every path shares its older end (each node stands for "this undo, then the rest").

Over 400 lines: one concern, the saga view: the forward path, the ways into each undo path, and
the legend that explains them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import pairwise

from ...spec.model import Effect, Row, Spec, State
from ...spec.paths import (
    MAX_HISTORIES,
    Histories,
    Made,
    after_row,
    effect_row,
    histories_before,
    history_after_row,
    join,
    made_before,
)
from .model import Builder, Graph, Line, wrap

#: The kinds of state a forward path runs through.
FORWARD_KINDS = frozenset({"step", "pause", "wait", "success"})
WIDTH = 44
Step = tuple[int, Row, Effect]


@dataclass(frozen=True)
class WayIn:
    """A row into a compensate state along one path to it, and the forward effects that path
    can have made, newest first: (effect name, ``made`` or ``maybe``). A row reached by paths
    that made different effects, or the same in another order, has one per path (its
    alternatives)."""

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


def paths_of(spec: Spec) -> tuple[dict[str, Histories], bool]:
    """The paths into each reachable state, in the order each made its effects
    (:func:`histories_before`), and False; or, when there are too many to tell apart, True and
    for each state one path that made everything some path into it can have made, in
    forward-path order (a state off the forward path, reached only through an undo path,
    counts as the newest)."""
    found = histories_before(spec)
    if found is not None:
        return found, False
    place = {name: i for i, name in enumerate(_forward_states(spec))}
    joined: dict[str, Histories] = {}
    for state, known in made_before(spec).items():
        order = tuple(sorted(known, key=lambda s: (place.get(s, len(place)), s)))
        joined[state] = {order: known}
    return joined, True


def ways_in(spec: Spec, found: Mapping[str, Histories] | None = None) -> list[WayIn]:
    """Every row from a reachable state into a compensate state, in table order, once for each
    path to it that can have made other effects (or made them in another order), with what
    that path can have made, newest first in the order it made them (``found``: the paths
    into each state, as :func:`paths_of` gives them)."""
    if found is None:
        found = paths_of(spec)[0]
    ways = []
    for row in spec.transitions:
        target = spec.states.get(row.next_state)
        if target is None or target.kind != "compensate" or row.state not in found:
            continue
        after: Histories = {}
        for order, before in found[row.state].items():
            key = history_after_row(spec, row, order, before)
            after[key] = join(after.get(key, {}), after_row(spec, row, before))
        for order, made in after.items():
            states = tuple(reversed(order))
            effects = tuple((_effect_name(spec, s), made[s]) for s in states)
            ways.append(WayIn(row, states, effects))
    return ways


def numbers(found: Mapping[str, Histories]) -> dict[str, int]:
    """Each forward effect state's number: its place on the longest way to it, so that an
    effect after two alternatives comes after both, and alternatives (effects no way makes one
    after the other) can share a number. Two effects that one way makes in one order and
    another way in the other have no numbers that fit both: they keep the ones they have after
    as many rounds as there are effects."""
    orders = [order for histories in found.values() for order in histories]
    place = {s: 1 for order in orders for s in order}
    for _ in range(len(place)):
        changed = False
        for order in orders:
            for older, newer in pairwise(order):
                if place[newer] <= place[older]:
                    place[newer] = place[older] + 1
                    changed = True
        if not changed:
            break
    return place


def which_way(way: WayIn, alternatives: list[WayIn]) -> str | None:
    """What tells ``way`` from the other paths by the same row (None when there is no other):
    the effects only it made, oldest first, or else all it made, in its order."""
    if len(alternatives) < 2:
        return None
    shared = set.intersection(*(set(w.states) for w in alternatives))
    oldest_first = list(
        zip(reversed(way.states), (n for n, _ in reversed(way.effects)), strict=True)
    )
    own = [name for state, name in oldest_first if state not in shared]
    if own:
        return f"the way that made {', '.join(own)}"
    if not oldest_first:
        return "the way that made nothing"
    made = ", then ".join(name for _, name in oldest_first)
    if any(set(w.states) > set(way.states) for w in alternatives):
        return f"the way that made only {made}"
    return f"the way that made {made}"


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


def _forward(
    b: Builder, spec: Spec, paths: Mapping[str, Histories]
) -> tuple[dict[str, str], dict[str, Step]]:
    """The forward path's nodes by state, and its effects by state, each numbered by its place
    on its way (:func:`numbers`; an effect no way makes, after the others)."""
    ids: dict[str, str] = {}
    steps: dict[str, Step] = {}
    placed = numbers(paths)
    last = max(placed.values(), default=0)
    for name in _forward_states(spec):
        state = spec.states[name]
        found = effect_row(spec, name)
        if found is None:
            ids[name] = _state_node(b, state)
            continue
        row, effect = found
        if name not in placed:
            last += 1
        number = placed.get(name, last)
        steps[name] = (number, row, effect)
        ids[name] = b.node("forward", *_forward_lines(number, state, row, effect))
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

    entered: dict[tuple[str, str, str | None], list[str]] = {}
    for way in ways:
        if way.row.next_state != state.name or way.row.state not in ids:
            continue
        head = chain(tuple(zip(way.states, (m for _, m in way.effects), strict=True)))
        note = which_way(way, [w for w in ways if w.row is way.row])
        entered.setdefault((ids[way.row.state], head, note), []).append(way.row.event)
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
    for (tail, head, note), events in entered.items():
        which = [Line(note, "muted")] if note else []
        b.edge(tail, head, "fail", Line(" / ".join(events), "note"), *which)
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
    found, joined = paths_of(spec)
    ids, steps = _forward(b, spec, found)
    if spec.start in ids:
        b.edge(start, ids[spec.start], "forward")
    compensating = [s for s in spec.states.values() if s.kind == "compensate"]
    ways = ways_in(spec, found)
    branching = len({id(way.row) for way in ways}) < len(ways)
    shared = len(steps) > len({number for number, _, _ in steps.values()})
    for state in compensating:
        _undo_path(b, spec, state, ids, steps, ways)
    if joined and compensating:
        b.node(
            "note",
            *wrap(
                f"more than {MAX_HISTORIES} ways reach one state, too many to draw apart: "
                "each way into the undo path is drawn with everything any of its ways can "
                "have made, in forward-path order",
                WIDTH,
            ),
        )
    if not compensating:
        b.node(
            "note",
            *wrap(
                "no compensate state: nothing is undone automatically; each effect "
                "says what would undo it",
                WIDTH,
            ),
        )
    b.explain(
        "node",
        "forward",
        "a forward effect, numbered by its place on its way (the same number: alternatives)"
        if shared
        else "a forward effect (numbered)",
    )
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
    b.explain(
        "edge",
        "fail",
        "a way into the undo path, at the newest change it can have made; a row reached by "
        "alternative ways enters once for each, undoing only what that way made"
        if branching
        else "a way into the undo path, at the newest change it can have made",
    )
    b.explain("edge", "undo", "the undo path, newest first")
    b.explain("edge", "undo_failed", "a compensation refused, or out of attempts")
    return b.graph()
