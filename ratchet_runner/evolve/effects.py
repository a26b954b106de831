"""The hazards of the effects: calls in flight, operation IDs, arguments, undos and retries.

``V103`` runs inside an effect window of an effect the change touches (a call written ahead,
an outcome nobody learnt, a lookup due) cannot move until it closes; ``V104`` an effect's
operation-ID recipe changes (its idempotency key, the arguments the key covers, its adapter or
operation, the business key, the workflow's name), which for a run that has called it means the
same change sent again under another ID: each run's new ID is computed, as the runner would,
and compared with the one it recorded; ``V105`` an effect's arguments change for runs that
have not called it yet, each run's old and new arguments evaluated; ``V107`` the undo of an
effect runs have made changes or is gone; ``V113`` the retry owner or budget changes for runs
between attempts.

Over 400 lines, as one concern: the five checks of an effect, which read a run's operations the
same way and share what an effect's change is.
"""

from __future__ import annotations

from typing import Any

from ..engine.identity import describe_action, evaluate_args, operation_id
from ..errors import RatchetError
from ..spec.expressions import compile_expression
from ..spec.model import Effect, Spec
from ..words import OperationStatus
from .basis import Check, plural
from .diff import (
    compensation_text,
    fields_changed,
    plain,
    row_performing,
    show,
    state_performing,
)
from .runs import LiveRun


def _fields(effect: Effect | None) -> dict[str, Any]:
    if effect is None:
        return {}
    found = plain(effect)
    assert isinstance(found, dict)
    return found


#: What of an effect a call in flight meets, besides its operation ID (``V104``'s: the key,
#: the arguments, the adapter and operation) and its retries (``V113``'s), and its undo, which
#: was registered with the call (``V107``'s).
WINDOW_FIELDS = ("reconcile", "approval", "timeout", "cost", "receipt")
WINDOW_COLUMNS = ("state", "next_state", "receipt")


def effect_changes(check: Check, effect: str) -> list[str]:
    """What the change does to ``effect`` (an old effect's name) that a run in the middle of
    it would meet, other than its operation ID, its retries and its undo: its lookup, approval,
    timeout, cost or receipt, its adapter's kind or settings, the row that performs it, its
    state, and the digest of its approval, which a new spec or policy version changes."""
    old, new = check.old, check.new
    before, after = old.effects[effect], new.effects.get(effect)
    if after is None:
        return ["the effect itself (it is gone)"]
    was, now = _fields(before), _fields(after)
    found = [f"its {name}" for name in WINDOW_FIELDS if was.get(name) != now.get(name)]
    adapter_old, adapter_new = old.adapters.get(before.adapter), new.adapters.get(after.adapter)
    if (adapter_old is None) != (adapter_new is None) or (
        adapter_old is not None
        and adapter_new is not None
        and (adapter_old.kind, adapter_old.config) != (adapter_new.kind, adapter_new.config)
    ):
        found.append(f"its adapter {after.adapter!r}")
    row_old, row_new = row_performing(old, effect), row_performing(new, effect)
    if row_old is not None and row_new is None:
        found.append("the row that performs it (none does)")
    elif row_old is not None and row_new is not None:
        found += [
            f"its row's {c}"
            for c in WINDOW_COLUMNS
            if plain(row_old.cell(c)) != plain(row_new.cell(c))
        ]
    state = state_performing(old, effect)
    if state is not None and check.target(state) != state:
        found.append(f"its state (mapped to {check.target(state)!r})")
    elif (
        state is not None
        and state in new.states
        and new.states[state].kind != old.states[state].kind
    ):
        found.append(f"the kind of its state {state!r}")
    if before.approval is not None and (
        old.spec_version != new.spec_version or str(old.policy_version) != str(new.policy_version)
    ):
        found.append("the digest of its approval (it covers the spec and policy versions)")
    return found


def check_windows(check: Check) -> None:
    """``V103``: runs in the middle of an effect the change touches."""
    old = check.old
    for effect in old.effects:
        reasons = effect_changes(check, effect)
        if not reasons:
            continue
        inside = {
            run.id: f"{why} ({plural(op.attempts, 'attempt')} made)"
            for run in check.live or ()
            for op, why in run.in_window
            if op.effect == effect
        }
        touched = [r for r in check.live or () if r.id in inside]
        state = state_performing(old, effect)
        where = f"in {state!r}" if state is not None else "as an undo"
        check.add(
            "V103",
            _at_effect(check, effect),
            f"{check.who(touched, f'inside an effect window of {effect!r} {where}')} (its "
            "call written ahead, its outcome not known, or a lookup due) would finish it under "
            f"version {check.new.spec_version}, which changes {_and(reasons)}: they are "
            "blocked until the window closes; let the worker finish them (ratchet ops reconcile "
            "for an unknown outcome), then move them",
            touched,
            inside,
        )


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _at_effect(check: Check, effect: str) -> Any:
    """Where the row performing ``effect`` is (the new version's; else the old one's)."""
    row = row_performing(check.new, effect)
    if row is not None:
        return check.at_new(row.pointer)
    row = row_performing(check.old, effect)
    if row is not None:
        return check.at_old(row.pointer)
    if effect in check.new.effects:
        return check.at_new(f"/effects/{effect}", key=True)
    return check.at_old(f"/effects/{effect}", key=True)


# -- operation IDs ---------------------------------------------------------------------------


def recipe(spec: Spec, effect: str) -> dict[str, Any] | None:
    """What ``effect``'s operation ID is made of in ``spec`` (besides the workflow's name,
    :func:`check_name`'s, and the business key, which a run keeps once it has started): the
    row's idempotency key, the expressions of the arguments the key covers, and the adapter and
    operation the ID is sent to (None: no row performs it)."""
    row, made = row_performing(spec, effect), spec.effects.get(effect)
    if row is None or made is None:
        return None
    key = row.idempotency_key or ("business_key", "effect", "args")
    covered = (
        list(made.args)
        if "args" in key
        else [k.removeprefix("args.") for k in key if k.startswith("args.")]
    )
    return {
        "idempotency_key": list(key),
        **{f"args.{a}": plain(made.args.get(a)) for a in covered},
        "adapter": made.adapter,
        "operation": made.operation,
    }


def check_recipes(check: Check) -> None:
    """``V104``: operation IDs made another way, for runs that have called the effect."""
    old, new = check.old, check.new
    if old.business_key != new.business_key:
        _business_key(check)
    for effect in old.effects:
        before, after = recipe(old, effect), recipe(new, effect)
        if before is None or before == after:
            continue
        if after is None:
            what = f"no row of version {new.spec_version} performs it"
        else:
            what = ", ".join(
                f"{k} {show(before.get(k))} → {show(after.get(k))}"
                for k in [*after, *[k for k in before if k not in after]]
                if before.get(k) != after.get(k)
            )
        notes = {}
        for run in check.live or ():
            note = _new_id(check, run, effect)
            if note is not None:
                notes[run.id] = note
        touched = [r for r in check.live or () if r.id in notes]
        nobody = check.checked and not touched
        # The key, the adapter or the operation made another way is dangerous whatever runs
        # there are now; new arguments are the change asked for, for runs that have not called.
        proper = after is None or any(
            before.get(k) != after.get(k) for k in ("idempotency_key", "adapter", "operation")
        )
        check.add(
            "V104",
            _at_key(check, effect),
            f"the operation ID of {effect!r} is made another way ({what}): "
            + (
                f"no live run has called it, but runs that call it on version "
                f"{old.spec_version} before they move"
                if nobody
                else check.who(touched, "that called it")
            )
            + " would call it again under another ID, which the provider cannot tell from a "
            f"new change; pin the old recipe for them (leave them on version {old.spec_version}: "
            "on_version_change: pin, no migration), or keep the recipe",
            touched,
            notes,
            always=proper,
            severity="warning" if nobody else "error",
        )


def _at_key(check: Check, effect: str) -> Any:
    row = row_performing(check.new, effect)
    if row is None:
        return _at_effect(check, effect)
    return check.at_new(f"{row.pointer}/idempotency_key")


def _new_id(check: Check, run: LiveRun, effect: str) -> str | None:
    """Why ``run``'s operation of ``effect`` would be named anew, or None: it has not called
    it (or made it, and cannot come back to it), or the new version names it the same."""
    new = check.new
    row, made = row_performing(new, effect), new.effects.get(effect)
    state = state_performing(new, effect)
    for op in reversed(run.attempted(effect)):
        again = op.status != OperationStatus.DONE or (
            state is not None and check.reaches(run, state)
        )
        if not again or op.status == OperationStatus.REFUSED:
            continue
        if row is None or made is None:
            return f"op {op.operation_id[:12]} ({op.status}): no row performs {effect} any more"
        try:
            ctx = check.activation(run, new)
            named = operation_id(new, row, made, evaluate_args(made, ctx), ctx)
        except RatchetError as exc:
            return f"op {op.operation_id[:12]} ({op.status}): its new ID cannot be made: {exc}"
        if named != op.operation_id:
            return f"op {op.operation_id[:12]} ({op.status}) would be op {named[:12]}"
    return None


def _business_key(check: Check) -> None:
    old, new = check.old, check.new
    notes = {}
    for run in check.live or ():
        try:
            key = compile_expression(new.business_key).evaluate({"input": run.run.input})
        except RatchetError as exc:
            notes[run.id] = f"its key cannot be made: {exc}"
            continue
        if str(key) != run.run.business_key:
            notes[run.id] = f"{run.run.business_key!r} would be {str(key)!r}"
    touched = [r for r in check.live or () if r.id in notes]
    check.add(
        "V104",
        check.at_new("/business_key"),
        f"the business key is computed another way ({show(old.business_key)} → "
        f"{show(new.business_key)}): a start of the same piece of work after the deploy (a "
        "caller retrying, a run that ended asked again) finds no run under the new key and "
        "starts a second one, whose effects are made again under other operation IDs"
        + (f" ({plural(len(touched), 'live run')} would be keyed otherwise)" if touched else "")
        + "; keep the business key, or give the new version another workflow name",
        touched,
        notes,
        always=True,
    )


def check_name(check: Check) -> None:
    """``V104`` for the workflow's name: it is in every operation ID and approval digest."""
    old, new = check.old, check.new
    if old.name == new.name:
        return
    everyone = list(check.live or ())
    check.add(
        "V104",
        check.at_new("/name"),
        f"the workflow is renamed ({old.name!r} → {new.name!r}): its name is in every "
        "operation ID and approval digest, and the runs of one are not runs of the other "
        f"({check.who(everyone, 'of the old name')} would stay where they are); keep the "
        "name",
        everyone,
        always=True,
    )


# -- arguments ---------------------------------------------------------------------------------


def check_arguments(check: Check) -> None:
    """``V105``: arguments changed, for the runs that have not called the effect yet."""
    old, new = check.old, check.new
    for effect, before in old.effects.items():
        after = new.effects.get(effect)
        state = state_performing(new, effect)
        if after is None or state is None or plain(before.args) == plain(after.args):
            continue
        if state not in check.reached():
            continue  # no run comes to call it
        names = sorted(
            a
            for a in {*before.args, *after.args}
            if plain(before.args.get(a)) != plain(after.args.get(a))
        )
        notes = {}
        for run in check.live or ():
            if run.attempted(effect) or not check.reaches(run, state):
                continue
            notes[run.id] = _arguments(check, run, before, after)
        touched = [r for r in check.live or () if r.id in notes]
        asked = f" and ask approval {after.approval!r} for them" if after.approval else ""
        check.add(
            "V105",
            check.at_new(f"/effects/{effect}/args/{names[0]}")
            if names[0] in after.args
            else check.at_new(f"/effects/{effect}/args"),
            f"the arguments of {effect!r} change ({', '.join(names)}): "
            f"{check.who(touched, 'yet to call it')} would call it with the new "
            f"ones{asked}; check they are what those runs should send",
            touched,
            notes,
        )


def _arguments(check: Check, run: LiveRun, before: Effect, after: Effect) -> str:
    try:
        was = evaluate_args(before, check.activation(run, check.old))
        now = evaluate_args(after, check.activation(run, check.new))
    except RatchetError:
        return "evaluated when it is called (it reads what the run has not made yet)"
    if was == now:
        return "the same values for this run"
    return f"{describe_action(before, was)} → {describe_action(after, now)}"


# -- undos ---------------------------------------------------------------------------------------


def check_undos(check: Check) -> None:
    """``V107``: the undo of an effect runs have made changes or is gone."""
    old, new = check.old, check.new
    for effect in old.effects:
        row_old = row_performing(old, effect)
        if row_old is None:
            continue
        row_new = row_performing(new, effect)
        was = row_old.compensation
        now = row_new.compensation if row_new is not None else None
        reasons, lost = [], False
        if compensation_text(was) != compensation_text(now):
            reasons.append(f"{show(compensation_text(was))} → {show(compensation_text(now))}")
            lost = (
                was is not None and was.kind == "effect" and (now is None or now.kind != "effect")
            )
        undo = was.effect if was is not None and was.kind == "effect" else None
        if undo is not None and undo not in new.effects:
            reasons.append(f"its undo {undo!r} is gone")
            lost = True
        elif undo is not None and _fields(old.effects[undo]) != _fields(new.effects[undo]):
            changed = [
                k
                for k, v in _fields(old.effects[undo]).items()
                if _fields(new.effects[undo]).get(k) != v
            ]
            reasons.append(f"its undo {undo!r} changes ({', '.join(changed)})")
        if not reasons:
            continue
        notes = {}
        for run in check.live or ():
            for op in run.made(effect):
                registered = run.undo_of(op.operation_id)
                if registered is not None and registered.status == OperationStatus.DONE:
                    continue
                notes[run.id] = f"made {effect} (op {op.operation_id[:12]}, {op.status}); " + (
                    f"registered undo {registered.effect}" if registered else "no undo registered"
                )
        touched = [r for r in check.live or () if r.id in notes]
        if lost:
            tail = (
                "would lose it: a later failure would leave the change made; keep the undo "
                "(and its effect) until they have ended, or finish them on the old version"
            )
        else:
            tail = (
                "would undo it as they registered it then, not as the new version says; check "
                "that undo still holds, or finish them on the old version"
            )
        check.add(
            "V107",
            check.at_new(f"{row_new.pointer}/compensation")
            if row_new is not None
            else check.at_old(f"{row_old.pointer}/compensation"),
            f"the undo of {effect!r} changes ({'; '.join(reasons)}): "
            f"{check.who(touched, 'that already made it')} {tail}",
            touched,
            notes,
            severity="error" if lost else "warning",
        )


# -- retries -----------------------------------------------------------------------------------


def check_retries(check: Check) -> None:
    """``V113``: the retry owner or budget changes for runs between attempts."""
    old, new = check.old, check.new
    for effect, before in old.effects.items():
        after = new.effects.get(effect)
        if after is None:
            continue
        row_old, row_new = row_performing(old, effect), row_performing(new, effect)
        reasons = []
        if plain(before.retry) != plain(after.retry):
            reasons.append(f"retry: {fields_changed(plain(before.retry), plain(after.retry))}")
        owner_old = row_old.retry_owner if row_old else None
        owner_new = row_new.retry_owner if row_new else None
        if owner_old != owner_new:
            reasons.append(f"retry_owner {show(owner_old)} → {show(owner_new)}")
        attempts = (old.adapters[before.adapter].attempts, new.adapters[after.adapter].attempts)
        if attempts[0] != attempts[1]:
            reasons.append(f"the adapter's own attempts {attempts[0]} → {attempts[1]}")
        if not reasons:
            continue
        notes = {}
        for run in check.live or ():
            between = [
                op
                for op in run.operations
                if op.effect == effect
                and op.attempts > 0
                and op.status in (OperationStatus.PENDING, OperationStatus.EXHAUSTED)
            ]
            if between:
                op = between[-1]
                left = after.retry.max_attempts - op.attempts
                notes[run.id] = f"{plural(op.attempts, 'attempt')} made ({op.status}); " + (
                    f"{plural(left, 'attempt')} left under version {new.spec_version}"
                    if left > 0
                    else f"none left under version {new.spec_version}: its next step "
                    "finds the budget spent"
                )
        touched = [r for r in check.live or () if r.id in notes]
        check.add(
            "V113",
            check.at_new(f"/effects/{effect}/retry")
            if plain(before.retry) != plain(after.retry)
            else _at_effect(check, effect),
            f"the retries of {effect!r} change ({'; '.join(reasons)}): "
            f"{check.who(touched, 'between attempts of it')} (or exhausted: ratchet ops retry "
            "grants the effect's max_attempts anew) would go on under the new rule; check the "
            "attempts already made against it",
            touched,
            notes,
        )
    if old.budget != new.budget:
        spent = {
            r.id: f"{r.context.get('budget_used', {}).get('attempts', 0)} attempt(s) spent"
            for r in check.live or ()
            if r.context.get("budget_used", {}).get("attempts", 0) > 0
        }
        touched = [r for r in check.live or () if r.id in spent]
        check.add(
            "V113",
            check.at_new("/budget")
            if new.budget != type(new.budget)()
            else check.at_old("/budget"),
            f"the run's budget changes ({fields_changed(plain(old.budget), plain(new.budget))}): "
            f"{check.who(touched, 'that spent some of it')} would go on under the new one, "
            "their spending kept; check what they spent against it",
            touched,
            spent,
        )
