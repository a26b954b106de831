"""What each path through a spec can have made: for every state reachable from ``start``, the
forward effects some path into it can have made, made for sure (its ``ok`` row taken) or maybe
(its outcome not known on that path).

:func:`made_before` joins the paths into one set per state: the lints flag a row that ends a run
compensated or cancelled while a change it cannot have undone may still be in place
(:mod:`ratchet_runner.spec.lint.endings`, W518), whichever path made it. :func:`histories_before`
keeps the paths apart, each with its effects in the order it made them: the saga view draws
each way into an undo path from it (:mod:`ratchet_runner.review.diagram.saga`), since the
runtime undoes a run's effects newest first in the order *that run* made them
(:mod:`ratchet_runner.engine.compensation`), and never an effect of a path it did not take.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from typing import Literal

from .model import Effect, Row, Spec

#: Whether a forward effect was made on a way (its ``ok`` row taken), or may have been (its
#: outcome is not known on that way).
Made = Literal["made", "maybe"]
#: The effect state → what is known of its effect, at some point of some path.
Known = dict[str, Made]
#: One path's forward effects, oldest first: the order its effect states made them in.
Order = tuple[str, ...]
#: The paths into one state, told apart by their order, each with what it knows of its effects
#: (paths in the same order join: made on either is made).
Histories = dict[Order, Known]
#: The most orders :func:`histories_before` follows into one state.
MAX_HISTORIES = 64
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

    def carry(row: Row) -> bool:
        before = known.get(row.next_state)
        known[row.next_state] = join(before or {}, after_row(spec, row, known[row.state]))
        return known[row.next_state] != before

    _until_stable(spec, carry)
    return known


def history_after_row(spec: Spec, row: Row, order: Order, before: Mapping[str, Made]) -> Order:
    """The order of one path's effects once ``row`` is taken (what is known of them is
    :func:`after_row`'s): the row's own effect, once it may have been made, comes newest, where
    the runtime writes its pending record; an effect made before stays where it was (its
    operation keeps its place); leaving a compensate state by ``ok`` drops the effects it
    undid."""
    after = after_row(spec, row, before)
    kept = tuple(s for s in order if s in after)
    return kept + tuple(s for s in after if s not in kept)


def histories_before(spec: Spec, limit: int = MAX_HISTORIES) -> dict[str, Histories] | None:
    """For each state reachable from ``start``: the paths into it, each with the forward effects
    it can have made, in the order it made them (a fixed point over the transition graph, as
    :func:`made_before`; an order holds each effect state once, so there are finitely many).

    None once some state is reached in more than ``limit`` orders: each choice between two ways
    doubles the orders after it, so a spec can have too many to follow (or to draw) apart."""
    if spec.start not in spec.states:
        return {}
    found: dict[str, Histories] = {spec.start: {(): {}}}

    def carry(row: Row) -> bool | None:
        into = found.setdefault(row.next_state, {})
        changed = False
        for order, before in list(found[row.state].items()):
            after = after_row(spec, row, before)
            next_order = history_after_row(spec, row, order, before)
            joined = join(into.get(next_order, {}), after)
            if into.get(next_order) != joined:
                into[next_order] = joined
                changed = True
        return None if len(into) > limit else changed

    return found if _until_stable(spec, carry) else None


def _until_stable(spec: Spec, carry: Callable[[Row], bool | None]) -> bool:
    """A fixed point over the transition graph from ``start``: ``carry(row)`` carries what is
    known at the row's state into its next state and says whether that changed it; a state
    changed is visited again (loops included) until nothing changes. ``carry`` returns None to
    give up: False then."""
    queue = deque([spec.start])
    while queue:
        for row in spec.rows_from(queue.popleft()):
            if row.next_state not in spec.states:
                continue
            changed = carry(row)
            if changed is None:
                return False
            if changed and row.next_state not in queue:
                queue.append(row.next_state)
    return True
