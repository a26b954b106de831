"""The hazards of where runs stand: states removed, retyped or unreachable, their timers, the
rows that route runs out of them, and what waiting and queued runs need.

``V101`` a state runs can be in is gone (and no mapping moves them); ``V102`` runs would stand in
a state of another kind; ``V108`` the rows out of an occupied state would send its runs
elsewhere, found by firing both versions' rows, as the runner does, on each run's recorded
context; ``V109`` a timer changes where runs have it armed, and the mapping does not say whether
they keep it; ``V111`` a signal a waiting run waits for, or an operator action a queued run needs,
is gone; ``V114`` a state that holds runs cannot be reached any more.
"""

from __future__ import annotations

from typing import Any

from ..clock import format_time
from ..engine.machine import machine_for
from ..spec.expressions import compile_expression
from ..spec.model import RUNNER_EVENTS, Row, Spec, State
from ..words import GAVE_UP, OperationStatus, RunStatus
from .basis import Check, plural
from .diff import article, raw, reachable, show, state_performing
from .runs import LiveRun


def check_states(check: Check) -> None:
    """``V101``, ``V102`` and ``V114``: where runs stand."""
    old, new = check.old, check.new
    reach_old, reach_new = reachable(old), reachable(new)
    for name in check.occupiable():
        state, target = old.states[name], check.target(name)
        touched = check.runs_in(name)
        if target not in new.states:
            if check.mapped(name):
                continue  # a mapping to a state that does not exist: V205
            check.add(
                "V101",
                check.at_old(f"/states/{name}", key=True),
                f"state {name!r} ({state.kind}) is not in version {new.spec_version}: "
                f"{check.who(touched, 'in it')} cannot move there (revalidate would hand them "
                f"to a person); {_renamed(check, name)}",
                touched,
            )
            continue
        now = new.states[target]
        if now.kind != state.kind and not check.mapped(name):  # a mapping's kind change: V102
            check.add(
                "V102",
                check.at_new(f"/states/{target}/kind"),
                f"state {name!r} is {article(state.kind)} in version {old.spec_version} and "
                f"{article(now.kind)} in version {new.spec_version}: "
                f"{check.who(touched, 'in it')} would stand in {article(now.kind)} state with "
                f"what {article(state.kind)} state left them (its timers, its pending decision, "
                f"its effect); map them to {article(state.kind)} state (states: {{{name}: "
                "...}), or keep its kind",
                touched,
            )
        if target not in reach_new and (name in reach_old or target != name):
            check.add(
                "V114",
                check.at_new(f"/states/{target}", key=True),
                f"state {target!r} cannot be reached from {new.start!r} in version "
                f"{new.spec_version}: {check.who(touched, f'in {name!r}')} would still leave it "
                "by its rows, but no run comes to it any more (a state left over?); map them "
                "to a state that is reached, or keep a row into it",
                touched,
            )


def _renamed(check: Check, name: str) -> str:
    """A hint when one state of the same kind was added: the removed one was perhaps renamed."""
    kind = check.old.states[name].kind
    added = [n for n, s in check.new.states.items() if n not in check.old.states and s.kind == kind]
    if len(added) != 1:
        return (
            "map them to a state of the new version in a mapping file "
            f"(states: {{{name}: NEW_STATE}})"
        )
    return (
        f"if it was renamed {added[0]!r}, map them there in a mapping file "
        f"(states: {{{name}: {added[0]}}})"
    )


# -- timers ------------------------------------------------------------------------------------


def timer_of(state: State | None) -> tuple[str, Any] | None:
    """The timer a state arms, as (field, value): a pause's ``expires_after``, a wait's
    ``after`` or ``until``; None when it arms none."""
    if state is None:
        return None
    if state.kind == "pause" and state.expires_after:
        return ("expires_after", state.expires_after)
    if state.kind == "wait":
        if state.after is not None:
            return ("after", state.after)
        if state.until is not None:
            return ("until", state.until)
    return None


def _timer_text(spec: Spec, state: State | None, timer: tuple[str, Any] | None) -> str:
    """A state's timer as the spec writes it (``expires_after 72h``)."""
    if state is None or timer is None:
        return "no timer"
    field, value = timer
    if field == "until":
        return f"until `{value}`"
    written = raw(spec, "states", state.name).get(field)
    return f"{field} {written if isinstance(written, str) else _seconds(value)}"


def _seconds(value: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if value >= size and value % size == 0:
            return f"{int(value // size)}{unit}"
    return f"{value}s"


def check_timers(check: Check) -> None:
    """``V109``: a timer changes (or appears) in a state where runs wait."""
    old, new = check.old, check.new
    said = None if check.mapping is None else check.mapping.timers
    for name in check.occupiable():
        target = check.target(name)
        if target not in new.states:
            continue
        before, after = timer_of(old.states[name]), timer_of(new.states[target])
        if before == after:
            continue
        waiting = check.runs_in(name)
        notes = {}
        for run in waiting:
            armed = [t for t in run.timers if t.state == name]
            notes[run.id] = (
                f"armed for {format_time(armed[0].due_at)}" if armed else "no timer armed"
            )
        change = (
            f"{_timer_text(old, old.states[name], before)} → "
            f"{_timer_text(new, new.states[target], after)}"
        )
        head = f"the timer of {name!r} changes ({change}): "
        if before is None:
            head += f"{check.who(waiting, 'waiting in it')} would wait with no deadline "
            head += "(none is armed) unless the move arms one"
        else:
            head += f"the old one is armed for {check.who(waiting, 'waiting in it')}"
        if said is None:
            tail = (
                "; say in a mapping file what happens to them: timers: keep (each fires when "
                "it was due) or timers: restart (armed anew, from the move, by the new version)"
            )
        elif said == "keep":
            tail = (
                "; the mapping keeps them (timers: keep): each fires when it was due under "
                f"version {old.spec_version}"
            )
        else:
            tail = (
                "; the mapping restarts them (timers: restart): each is armed anew from the "
                f"move, as version {new.spec_version} says"
            )
        field = (after or before or ("", None))[0]
        check.add(
            "V109",
            check.at_new(f"/states/{target}/{field}")
            if after is not None
            else check.at_state(target),
            head + tail,
            waiting,
            notes,
            severity="error" if said is None else "warning",
        )


# -- routes ------------------------------------------------------------------------------------


def check_routes(check: Check) -> None:
    """``V108``: the rows out of an occupied state change, and the runs there would go
    elsewhere: both versions' rows fired on each run's recorded context."""
    old, new = check.old, check.new
    for name in check.occupiable():
        target = check.target(name)
        if target not in new.states:
            continue
        for event in sorted({r.event for r in old.rows_from(name)}):
            rows_old = [r for r in old.rows_from(name) if r.event == event]
            rows_new = [r for r in new.rows_from(target) if r.event == event]
            if not rows_new:
                continue  # the event is gone: what waits for it is V111's
            route_old = sorted((r.guard or "", check.target(r.next_state)) for r in rows_old)
            route_new = sorted((r.guard or "", r.next_state) for r in rows_new)
            if route_old == route_new:
                continue
            in_state = check.runs_in(name)
            notes = {}
            for run in in_state:
                note = _rerouted(check, run, name, target, event, rows_old + rows_new)
                if note is not None:
                    notes[run.id] = note
            touched = [r for r in in_state if r.id in notes]
            check.add(
                "V108",
                _route_at(check, rows_new),
                f"the rows out of {name!r} on {event!r} change ({_routes(rows_old)} → "
                f"{_routes(rows_new)}): {check.who(touched, f'in {name!r}')} would go "
                "elsewhere on it than version "
                f"{old.spec_version} sends them"
                + (" (each run's next state is in its note)" if check.checked else "")
                + "; check that is meant, or move only the runs that go where they should",
                touched,
                notes,
            )


def _routes(rows: list[Row]) -> str:
    return "; ".join(
        f"{'if ' + show(r.guard) + ' ' if r.guard else ''}to {r.next_state}" for r in rows
    )


def _route_at(check: Check, rows_new: list[Row]) -> Any:
    changed = [
        p.new
        for p in check.diff.rows
        if p.new in rows_new and p.kind != "same" and {"guard", "next_state"} & set(p.changed)
    ]
    added = [p.new for p in check.diff.rows if p.new in rows_new and p.kind == "added"]
    row = (changed or added or rows_new)[0]
    assert row is not None
    column = "guard" if row.guard else "next_state"
    return check.at_new(f"{row.pointer}/{column}")


def _rerouted(
    check: Check, run: LiveRun, name: str, target: str, event: str, rows: list[Row]
) -> str | None:
    """Where ``run`` would go on ``event`` under each version, when that differs: once per
    role a decision may be made in when a guard reads the approval."""
    read = {p[0] for r in rows if r.guard for p in compile_expression(r.guard).paths}
    if "signal" in read:
        return f"on {event}: the guards read the signal's data, which only the signal brings"
    scenarios: list[tuple[str, dict[str, Any]]] = [("", {})]
    approval = check.old.states[name].approval
    if "approval" in read and approval is not None and event in ("approve", "reject"):
        roles = list(check.old.approvals[approval].roles)
        asked = check.new.states[target].approval
        if asked in check.new.approvals:
            roles += [r for r in check.new.approvals[asked].roles if r not in roles]
        scenarios = [(f" as {role}", _decision(run, approval, role)) for role in roles]
    found = []
    for label, extra in scenarios:
        was, errors_old = machine_for(check.old).fire(
            name, event, check.activation(run, check.old, **extra)
        )
        now, errors_new = machine_for(check.new).fire(
            target, event, check.activation(run, check.new, **extra)
        )
        before = check.target(was.next_state) if was is not None else None
        after = now.next_state if now is not None else None
        if before == after and not (errors_new and not errors_old):
            continue
        why = f" ({errors_new[0]})" if errors_new and not errors_old else ""
        found.append(f"on {event}{label}: {_where_to(before)} → {_where_to(after)}{why}")
    return "; ".join(found) or None


def _decision(run: LiveRun, approval: str, role: str) -> dict[str, Any]:
    """The approval a decision in ``role`` would record, as the guards see it."""
    at = run.run.updated_at
    return {
        "approval": {
            "actor": "approver",
            "role": role,
            "decided_at": at,
            "expires_at": None,
            "digest": "",
            "name": approval,
        }
    }


def _where_to(state: str | None) -> str:
    return state if state is not None else "no row holds (to a person)"


# -- what waiting and queued runs need -----------------------------------------------------------


def check_waiting(check: Check) -> None:
    """``V111``: a signal runs wait for, or an operator action queued runs need, is gone."""
    old, new = check.old, check.new
    for name in check.occupiable():
        state, target = old.states[name], check.target(name)
        if state.kind not in ("pause", "wait") or target not in new.states:
            continue
        now = new.states[target]
        takes = set(now.resumes_on) if now.kind in ("pause", "wait") else set()
        takes &= {r.event for r in new.rows_from(target)}
        for signal in [s for s in state.resumes_on if s not in RUNNER_EVENTS]:
            if signal in takes:
                continue
            waiting = check.runs_in(name)
            how = (
                f"ratchet {signal}"
                if state.approval is not None and signal in ("approve", "reject")
                else "ratchet signal, a webhook"
            )
            check.add(
                "V111",
                check.at_new(f"/states/{target}/resumes_on")
                if target == name or now.resumes_on
                else check.at_state(target),
                (
                    f"{name!r} takes {signal!r} no more"
                    if target == name
                    else f"{name!r} is mapped to {target!r}, which does not take {signal!r}"
                )
                + f": {check.who(waiting, f'waiting in {name!r}')} "
                f"would have it refused when it comes ({how}); keep {signal!r} in its "
                "resumes_on, "
                "with its row, or map them to a state that takes it",
                waiting,
            )
    _queued(check)


def _queued(check: Check) -> None:
    """What a run waiting for a person needs of the new version: the state that performs the
    effect that failed (``ratchet ops retry`` and ``reconcile`` return it there), a
    ``compensate`` state (``ratchet ops compensate``), and operator roles to act in."""
    old, new = check.old, check.new
    queued = [r for r in check.live or () if r.status == RunStatus.NEEDS_PERSON]
    if any(s.kind == "operator_queue" for s in old.states.values()) or check.checked:
        for effect in old.effects:
            if state_performing(old, effect) is None or state_performing(new, effect):
                continue
            failed = [r for r in queued if _failed(r, effect)]
            check.add(
                "V111",
                _effect_at(check, effect),
                f"no state performs {effect!r} in version {new.spec_version}: "
                f"{check.who(failed, f'in the operator queue after {effect!r} failed')} could "
                "not be retried or reconciled (ratchet ops retry and reconcile return a run "
                "to the state that performs it); keep a state that performs it, or finish "
                "them on the old version first",
                failed,
                {r.id: _failure(r, effect) for r in failed},
            )
    had = [s for s, st in old.states.items() if st.kind == "compensate"]
    if had and not any(st.kind == "compensate" for st in new.states.values()):
        undoing = [r for r in queued if any(op.role == "compensation" for op in r.operations)]
        check.add(
            "V111",
            check.at_old(f"/states/{had[0]}", key=True),
            f"version {new.spec_version} has no compensate state: "
            f"{check.who(undoing, 'in the operator queue with undos registered')} could not "
            "be compensated (ratchet ops compensate moves a run to the compensate state); "
            "keep one, or finish them on the old version first",
            undoing,
        )
    lost = [r for r in old.operator_roles if r not in new.operator_roles]
    if lost:
        acted = [r for r in check.live or () if r.status in (RunStatus.NEEDS_PERSON, "paused")]
        nobody = not new.operator_roles
        check.add(
            "V111",
            check.at_new("/operators/roles") if new.operator_roles else check.at_old("/operators"),
            f"operator role{'s' if len(lost) > 1 else ''} {', '.join(map(repr, lost))} may not "
            f"act in version {new.spec_version}"
            + (" (it has no operator roles at all)" if nobody else "")
            + f": {check.who(acted, 'in the operator queue or paused')} "
            + ("could be acted on by nobody" if nobody else "could not be acted on in it")
            + "; keep the role, or give its operators one the new version has",
            acted,
            severity="error" if nobody else "warning",
        )


def _failed(run: LiveRun, effect: str) -> bool:
    return any(
        op.status in (*GAVE_UP, OperationStatus.PENDING) and op.attempts > 0
        for op in run.of_effect(effect)
    )


def _failure(run: LiveRun, effect: str) -> str:
    op = next(op for op in reversed(run.of_effect(effect)) if op.attempts > 0)
    return f"{effect} {op.status} after {plural(op.attempts, 'attempt')}"


def _effect_at(check: Check, effect: str) -> Any:
    row = next((r for r in check.old.transitions if r.external_effect == effect), None)
    if effect in check.new.effects:
        return check.at_new(f"/effects/{effect}", key=True)
    return check.at_old(row.pointer if row is not None else f"/effects/{effect}")
