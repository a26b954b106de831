"""Structural checks (E4xx/W4xx): the state graph, and what can happen in each state.

A run must be able to reach an end from every state (at least one terminal state, no dead end, no
closed loop), every state should be reachable from the start, no two rows may apply at once, and
every event must be one that can happen in its state, under a name the state machine does not
already use. :mod:`ratchet_runner.spec.lint` registers these checks in
:data:`ratchet_runner.spec.lint.CHECKS`.
"""

from __future__ import annotations

import difflib
import keyword
from collections import deque
from collections.abc import Iterable, Iterator

from transitions import Machine

from ...errors import Diagnostic
from ..model import OUTCOME_EVENTS, RUNNER_EVENTS, TERMINAL_KINDS, Row, Spec
from .support import at, at_name, col, line_of

#: Attributes of a `transitions` Machine, and those it gives (or may give) every model.
MACHINE_NAMES = frozenset(n for n in dir(Machine) if not n.startswith("_")) | {
    "state",
    "trigger",
    "machine",
    "model",
}
#: Names the runner's run object already uses.
RUN_NAMES = frozenset(
    {"run", "spec", "input", "context", "version", "id", "history", "receipts", "approval"}
    | {"signal", "business_key"}
)
#: Names an event may not take: they are attributes of a `transitions` model or machine, of the
#: runner's run object, or Python keywords.
RESERVED_EVENT_NAMES = MACHINE_NAMES | RUN_NAMES | frozenset(keyword.kwlist)
#: Prefixes of the methods `transitions` adds to a model per state and event.
RESERVED_EVENT_PREFIXES = ("to_", "may_", "is_")


# -- the state graph ----------------------------------------------------------------------------

_TERMINALS = ", ".join(sorted(TERMINAL_KINDS))


def _meant(spec: Spec, name: str) -> str:
    """The declared state a misspelt ``next_state`` most likely meant (E301 reports the typo; the
    state it meant is not then also reported as unreachable), else ``name`` itself."""
    if name in spec.states:
        return name
    close = difflib.get_close_matches(name, list(spec.states), n=1)
    return close[0] if close else name


def _reachable(spec: Spec, sources: Iterable[str], *, forward: bool) -> set[str]:
    """States reachable from ``sources`` along rows (or against them, if not ``forward``)."""
    edges: dict[str, set[str]] = {}
    for row in spec.transitions:
        target = _meant(spec, row.next_state)
        a, b = (row.state, target) if forward else (target, row.state)
        edges.setdefault(a, set()).add(b)
    seen = set(sources)
    queue = deque(seen)
    while queue:
        for nxt in edges.get(queue.popleft(), ()):
            if nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    return seen


def check_graph(spec: Spec) -> Iterator[Diagnostic]:
    has_terminal = any(state.terminal for state in spec.states.values())
    if not has_terminal:
        yield at_name(
            spec,
            "/states",
            "E403",
            "no terminal state: a run can never finish; give the states where it ends one of the "
            f"kinds {_TERMINALS}",
        )
    seen = _reachable(spec, [spec.start], forward=True) if spec.start in spec.states else None
    dead_ends: list[str] = []
    for state in spec.states.values():
        outgoing = spec.rows_from(state.name)
        if seen is not None and state.name not in seen:
            yield at_name(
                spec,
                state.pointer,
                "W401",
                f"state {state.name!r} cannot be reached from {spec.start!r}: add a row into it, "
                "or delete it",
            )
        if state.terminal and outgoing:
            yield at(
                spec,
                outgoing[0].pointer,
                "E404",
                f"state {state.name!r} is terminal ({state.kind}) but has rows out of it: a run "
                "ends there, so they never fire; delete them, or give the state a non-terminal "
                "kind (pause, wait, step)",
            )
        elif not state.terminal and not outgoing:
            dead_ends.append(state.name)
            yield at_name(
                spec,
                state.pointer,
                "E402",
                f"state {state.name!r} ({state.kind}) has no rows out of it, so a run there is "
                f"stuck: add a row out of it, or give it a terminal kind ({_TERMINALS})",
            )
    if has_terminal:
        yield from _closed_loops(spec, dead_ends)
    yield from _ambiguous_rows(spec)


def _closed_loops(spec: Spec, dead_ends: list[str]) -> Iterator[Diagnostic]:
    """E402 for states whose rows only lead round a loop that never reaches an end."""
    ends = [s.name for s in spec.states.values() if s.terminal] + dead_ends
    ends += [row.next_state for row in spec.transitions if row.next_state not in spec.states]
    finishing = _reachable(spec, ends, forward=False)
    for state in spec.states.values():
        if state.name not in finishing:
            yield at_name(
                spec,
                state.pointer,
                "E402",
                f"every row out of {state.name!r} leads round a loop that never reaches a terminal "
                "state, so a run there never ends: add a row from the loop to a terminal state",
            )


def _ambiguous_rows(spec: Spec) -> Iterator[Diagnostic]:
    by_pair: dict[tuple[str, str], list[Row]] = {}
    for row in spec.transitions:
        by_pair.setdefault((row.state, row.event), []).append(row)
    for (state, event), rows in by_pair.items():
        if len(rows) < 2 or len({row.external_effect for row in rows} - {None}) > 1:
            continue  # one row, or several effects in one state (E514 says so)
        for i, row in enumerate(rows):
            same = [r for r in rows[:i] if r.guard == row.guard]
            guarded = [r for r in rows if r.guard is not None]
            if same:
                other = same[0]
                why = "neither has a guard" if row.guard is None else "both have the same guard"
            elif row.guard is None and guarded:
                other = guarded[0]
                why = "this one has no guard, so it applies whenever the other does"
            else:
                continue
            yield at(
                spec,
                row.pointer,
                "E405",
                f"this row and the one on line {line_of(spec, other)} both move {state!r} on "
                f"{event!r}; {why}: give each row a guard, and make the guards exclusive",
            )


def _allowed_events(spec: Spec, state_name: str) -> tuple[set[str], str]:
    state = spec.states[state_name]
    performs = any(r.external_effect is not None for r in spec.rows_from(state_name))
    if state.kind == "pause":
        allowed = set(state.resumes_on) | ({"expired"} if state.expires_after else set())
        signals = ", ".join(state.resumes_on) or "none"
        tail = "and 'expired'" if state.expires_after else "('expired' needs expires_after)"
        return allowed, f"its resumes_on signals ({signals}) {tail}"
    if state.kind == "wait":
        return set(state.resumes_on) | {"due"}, "'due' and its resumes_on signals"
    if state.kind == "compensate":
        return {"ok", "refused", "exhausted"}, "'ok', 'refused' and 'exhausted'"
    if performs:
        effect = spec.effect_of(state_name)
        if effect is not None and effect.approval is not None:
            return set(OUTCOME_EVENTS) | {"expired"}, (
                "the outcomes of its effect (ok, refused, exhausted, unknown) and 'expired' "
                "(its approval expired before the call)"
            )
        return set(OUTCOME_EVENTS), "the outcomes of its effect (ok, refused, exhausted, unknown)"
    return {"next"}, "'next' (it performs no effect)"


def check_events(spec: Spec) -> Iterator[Diagnostic]:
    for row in spec.transitions:
        state = spec.states.get(row.state)
        if state is None or state.terminal:
            continue  # an unknown state is E301; rows out of a terminal state are E404
        allowed, words = _allowed_events(spec, row.state)
        if row.event not in allowed:
            yield at(
                spec,
                col(row, "event"),
                "E406",
                f"{row.event!r} cannot happen in {row.state!r} ({state.kind}), which takes only "
                f"{words}: use one of those, or move the row to a state that takes it",
            )
        if row.external_effect is not None and row.event != "ok":
            yield at(
                spec,
                col(row, "external_effect"),
                "E406",
                f"the row naming effect {row.external_effect!r} must be its 'ok' row, not "
                f"{row.event!r}: name the effect on the 'ok' row; the other outcome rows only "
                "route",
            )
    for state in spec.states.values():
        events = {row.event for row in spec.rows_from(state.name)}
        for i, signal in enumerate(state.resumes_on):
            pointer = f"{state.pointer}/resumes_on/{i}"
            if signal in RUNNER_EVENTS:
                yield at(
                    spec,
                    pointer,
                    "E407",
                    f"{signal!r} is an event the runner fires itself, so it cannot be a signal: "
                    "remove it from resumes_on"
                    + (" (use expires_after for a timeout)" if signal == "expired" else "")
                    + ", or give the signal another name",
                )
            elif signal not in events:
                yield at(
                    spec,
                    pointer,
                    "E406",
                    f"state {state.name!r} resumes on {signal!r} but has no row for it: add a "
                    f"row for {signal!r} out of {state.name!r}, or remove it from resumes_on",
                )
        if state.kind == "pause" and state.expires_after and "expired" not in events:
            yield at(
                spec,
                f"{state.pointer}/expires_after",
                "E402",
                f"state {state.name!r} expires, but has no 'expired' row to leave by: add a row "
                f"for 'expired' out of {state.name!r}",
            )
        if state.kind == "wait" and state.after is None and state.until is None:
            yield at_name(
                spec,
                state.pointer,
                "E402",
                f"wait state {state.name!r} never ends: give it 'after' (a duration) or 'until' "
                "(a deadline)",
            )


def _collision(name: str) -> str | None:
    if keyword.iskeyword(name):
        return "a Python keyword"
    if name in MACHINE_NAMES:
        return "an attribute of the transitions machine or model"
    if name.startswith(RESERVED_EVENT_PREFIXES):
        return f"the {name.split('_')[0]}_* methods transitions adds to the model"
    if name in RUN_NAMES:
        return "a field of the runner's run"
    return None


def check_event_names(spec: Spec) -> Iterator[Diagnostic]:
    reported: set[str] = set()
    for row in spec.transitions:
        clash = _collision(row.event)
        if clash is not None and row.event not in reported:
            reported.add(row.event)
            yield at(
                spec,
                col(row, "event"),
                "E407",
                f"event {row.event!r} collides with {clash}: rename it (in resumes_on too)",
            )
