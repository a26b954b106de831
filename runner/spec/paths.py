"""What each path through a spec can have made: for every state reachable from ``start``, the
forward effects some path into it can have made, made for sure (its ``ok`` row taken) or maybe
(its outcome not known on that path).

The saga view draws each way into an undo path from it (:mod:`ratchet_runner.review.diagram.saga`),
and the lints flag a row that ends a run compensated or cancelled while a change it cannot have
undone may still be in place (:mod:`ratchet_runner.spec.lint.endings`, E518).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Literal

from .model import Effect, Row, Spec

#: Whether a forward effect was made on a way (its ``ok`` row taken), or may have been (its
#: outcome is not known on that way).
Made = Literal["made", "maybe"]
#: The effect state → what is known of its effect, at some point of some path.
Known = dict[str, Made]
#: Events of an effect's own row after which its change is not made.
NOT_MADE = frozenset({"refused"})


def effect_row(spec: Spec, state: str) -> tuple[Row, Effect] | None:
    for row in spec.rows_from(state):
        if row.external_effect is not None and row.external_effect in spec.effects:
            return row, spec.effects[row.external_effect]
    return None


def join(a: Mapping[str, Made], b: Mapping[str, Made]) -> Known:
    """Both paths' effects: made on either is made (the undo path must handle it)."""
    joined: Known = dict(a)
    for state, made in b.items():
        if joined.get(state) != "made":
            joined[state] = made
    return joined


def undone_by_effect(spec: Spec, state: str) -> bool:
    found = effect_row(spec, state)
    comp = found[0].compensation if found is not None else None
    return comp is not None and comp.kind == "effect"


def after_row(spec: Spec, row: Row, before: Mapping[str, Made]) -> Known:
    """What is known of the forward effects once ``row`` is taken, given ``before``.

    The effect of the row's own state is made by ``ok``, not made by ``refused``, and may have
    been made by any other outcome (``exhausted``, ``unknown``, an approval ``expired`` before a
    call sent again). Leaving a compensate state by ``ok``, the effects it undid are gone; the
    ones kept (``none``, ``impossible``) stay."""
    state = spec.states.get(row.state)
    if state is not None and state.kind == "compensate":
        if row.event != "ok":
            return dict(before)
        return {s: m for s, m in before.items() if not undone_by_effect(spec, s)}
    if effect_row(spec, row.state) is None or row.event in NOT_MADE:
        return dict(before)
    return join(before, {row.state: "made" if row.event == "ok" else "maybe"})


def made_before(spec: Spec) -> dict[str, Known]:
    """For each state reachable from ``start``: the forward effects some path into it can have
    made (a fixed point over the transition graph; loops included)."""
    if spec.start not in spec.states:
        return {}
    known: dict[str, Known] = {spec.start: {}}
    queue = deque([spec.start])
    while queue:
        state = queue.popleft()
        for row in spec.rows_from(state):
            if row.next_state not in spec.states:
                continue
            before = known.get(row.next_state)
            after = join(before or {}, after_row(spec, row, known[state]))
            if after != before:
                known[row.next_state] = after
                queue.append(row.next_state)
    return known
