"""The hazards of what the new version reads and decides: approvals, input fields, receipts.

``V106`` an approval's rules change (what it binds, who may give it, how long it lasts, the
guard of approving, the policy version) where runs hold or await it: the approvals voided are
listed, or, under ``pin``, the warning that they still count; ``V110`` the new version's
arguments, guards or deadlines read input fields the old version did not require (each run's
input looked at), or the input schema declares a field otherwise; ``V112`` they read receipt
fields the old version's effects never declared (each run's recorded receipts looked at).

Over 400 lines, as one concern: what the new version's expressions read and decide, found by one
list of its readers (:func:`readers`) and checked against each run's data.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import jsonschema

from ..spec.expressions import compile_expression
from ..spec.model import Spec
from ..spec.reads import tested
from .basis import Check
from .diff import fields_changed, plain, row_performing, show, state_performing
from .runs import LiveRun

# -- approvals -----------------------------------------------------------------------------------


def check_approvals(check: Check) -> None:
    """``V106``: an approval's rules change where runs hold or await it."""
    old, new = check.old, check.new
    said = None if check.mapping is None else check.mapping.approvals
    moving = check.mapping is not None or new.on_version_change == "revalidate"
    for name, approval in old.approvals.items():
        reasons = _rules(check, name)
        if not reasons:
            continue
        rules = [r for r in reasons if r != "the spec version"]
        if not rules and (not moving or said == "keep"):
            continue  # nothing but the version: voided only when runs move, and kept if asked
        if not moving:
            reasons = rules  # under pin, the version voids nothing
        asking = [s for s, st in old.states.items() if st.approval == name]
        notes: dict[str, str] = {}
        for run in check.live or ():
            held = [a for a in run.held if a.name == name]
            held += [
                a
                for a in run.approvals
                if a.name == name
                and a.consumed_at is not None
                and _unfinished(run, approval.effect)
            ]
            if held:
                notes[run.id] = "; ".join(
                    f"holds approval #{a.id} by {a.actor} ({a.role})" for a in held
                )
            elif run.state in asking:
                notes[run.id] = "awaits the decision"
        touched = [r for r in check.live or () if r.id in notes]
        who = check.who(touched, f"holding or awaiting {name!r}")
        severity: Literal["error", "warning"] = "warning"
        if said == "keep" and rules:
            severity = "error"
            tail = (
                f"{who} would keep approvals (approvals: keep) that count under rules they were "
                "not given under; void them (approvals: void): they ask again under the new rules"
            )
        elif moving:
            how = "approvals: void" if said == "void" else "moving them voids them"
            tail = (
                f"{who} would have them voided ({how}): those holding one would ask for a "
                "new decision under the new rules, those awaiting one would get it under them"
                + (" (the voided approvals are in each run's note)" if check.checked else "")
                + "; tell the approvers"
            )
        elif new.on_version_change == "cancel":
            tail = f"{who} would be cancelled by on_version_change: cancel; check that is meant"
        else:
            tail = (
                f"under pin, {who} would stay on version {old.spec_version}, their approvals "
                "counted under the old rules; if those are wrong, move them (a mapping with "
                "approvals: void) so they ask again"
            )
        check.add(
            "V106",
            check.at_new(f"/approvals/{name}", key=True)
            if name in new.approvals
            else check.at_old(f"/approvals/{name}", key=True),
            f"approval {name!r} changes ({'; '.join(reasons)}): {tail}",
            touched,
            notes,
            severity=severity,
        )


def _rules(check: Check, name: str) -> list[str]:
    """What changes about approval ``name``'s rules."""
    old, new = check.old, check.new
    before, after = old.approvals[name], new.approvals.get(name)
    if after is None:
        return [f"it is gone from version {new.spec_version}"]
    found = []
    for field in ("effect", "binds", "roles", "expires_after"):
        a, b = plain(getattr(before, field)), plain(getattr(after, field))
        if a != b:
            found.append(f"{field} {show(a)} → {show(b)}")
    effect_old, effect_new = old.effects.get(before.effect), new.effects.get(after.effect)
    if effect_old is not None and effect_new is not None:
        bound = list(effect_old.args) if before.binds == "all" else list(before.binds)
        differ = [
            a for a in bound if plain(effect_old.args.get(a)) != plain(effect_new.args.get(a))
        ]
        if differ:
            found.append(f"the arguments it binds ({', '.join(differ)})")
    for state, st in old.states.items():
        if st.approval != name or check.target(state) not in new.states:
            continue
        guards_old = sorted(r.guard or "" for r in old.rows_from(state) if r.event == "approve")
        guards_new = sorted(
            r.guard or "" for r in new.rows_from(check.target(state)) if r.event == "approve"
        )
        if guards_old != guards_new:
            found.append(f"the guard of approving in {state!r}")
    if str(old.policy_version) != str(new.policy_version):
        found.append(f"policy_version {show(old.policy_version)} → {show(new.policy_version)}")
    if old.spec_version != new.spec_version:
        found.append("the spec version")
    return found


def _unfinished(run: LiveRun, effect: str) -> bool:
    """Whether ``run`` has an operation of ``effect`` called and not done: the approval it
    consumed may be asked for again."""
    return any(op.status != "done" for op in run.attempted(effect))


# -- what expressions read -------------------------------------------------------------------------


@dataclass(frozen=True)
class Reader:
    """An expression of a spec that reads a run's data: an effect's argument, a row's guard,
    an idempotency key, a wait's deadline."""

    kind: Literal["argument", "guard", "key", "deadline"]
    label: str
    source: str
    pointer: str
    #: The state a run reads it in (None: a compensate state, whichever).
    state: str | None
    effect: str | None = None

    @property
    def stops(self) -> bool:
        """Whether a value it cannot read stops a call (an argument, a key) rather than makes
        a guard not hold or a deadline not be computed."""
        return self.kind in ("argument", "key")

    def paths(self) -> list[tuple[str, ...]]:
        """The name paths it reads that it does not test with ``has()`` first."""
        try:
            read = compile_expression(self.source).paths
        except Exception:  # validated specs compile; a stored one that does not reads nothing
            return []
        checked = tested(self.source)
        return [p for p in dict.fromkeys(read) if not any(p[: len(t)] == t for t in checked)]


def readers(spec: Spec) -> Iterator[Reader]:
    """Every expression of ``spec`` that reads a run's data."""
    for effect in spec.effects.values():
        for arg, value in effect.args.items():
            if isinstance(value, str):
                yield Reader(
                    "argument",
                    f"argument {arg!r} of {effect.name!r}",
                    value,
                    f"{effect.pointer}/args/{arg}",
                    state_performing(spec, effect.name),
                    effect.name,
                )
    for row in spec.transitions:
        if row.guard:
            yield Reader(
                "guard",
                f"the guard of ({row.state}, {row.event})",
                row.guard,
                f"{row.pointer}/guard",
                row.state,
            )
        for item in row.idempotency_key or ():
            if item.startswith(("input.", "receipts.")):
                yield Reader(
                    "key",
                    f"the idempotency key of {row.external_effect!r}",
                    item,
                    f"{row.pointer}/idempotency_key",
                    row.state,
                    row.external_effect,
                )
    for state in spec.states.values():
        if state.until:
            yield Reader(
                "deadline",
                f"the deadline of {state.name!r}",
                state.until,
                f"{state.pointer}/until",
                state.name,
            )


def _read(check: Check, reader: Reader) -> bool:
    """Whether any run of the old version could come to read ``reader``."""
    if reader.state is None:
        return any(check.new.states[s].kind == "compensate" for s in check.reached())
    return reader.state in check.reached()


def _reaches(check: Check, run: LiveRun, reader: Reader) -> bool:
    """Whether ``run`` can still come to read ``reader`` (an argument of an effect it has made
    is read no more)."""
    if reader.effect is not None and any(
        op.status == "done" for op in run.attempted(reader.effect)
    ):
        return False
    if reader.state is None:
        return any(
            s.kind == "compensate" and check.reaches(run, n) for n, s in check.new.states.items()
        )
    return check.reaches(run, reader.state)


def _value(data: Any, path: tuple[str, ...]) -> tuple[bool, Any]:
    for part in path:
        if not isinstance(data, dict) or part not in data:
            return False, None
        data = data[part]
    return True, data


def _required(schema: Any, path: tuple[str, ...]) -> bool:
    """Whether the input schema requires ``path`` (``("input", "a", "b")``) at every level."""
    node = schema
    for part in path[1:]:
        if not isinstance(node, dict) or part not in (node.get("required") or ()):
            return False
        node = (node.get("properties") or {}).get(part)
    return True


def check_inputs(check: Check) -> None:
    """``V110``: input fields the new version reads that old runs may lack, and fields the
    input schema declares otherwise."""
    old, new = check.old, check.new
    before = {(r.kind, r.label, p) for r in readers(old) for p in r.paths()}
    for reader in readers(new):
        if not _read(check, reader):
            continue
        for path in reader.paths():
            if path[0] != "input" or len(path) < 2 or _required(old.input_schema, path):
                continue
            if (reader.kind, reader.label, path) in before:
                continue
            dotted = ".".join(path)
            touched = [
                r
                for r in check.live or ()
                if not _value(r.run.input, path[1:])[0] and _reaches(check, r, reader)
            ]
            consequence = (
                "stop there: the call cannot be made, and a person is asked"
                if reader.stops
                else "find it does not hold"
                if reader.kind == "guard"
                else "find the deadline cannot be computed"
            )
            check.add(
                "V110",
                check.at_new(reader.pointer),
                f"{reader.label} reads {dotted}, which version {old.spec_version} did not "
                f"require: {check.who(touched, 'started without it')} would {consequence}; "
                f"give it a default where it is read (has({dotted}) ? {dotted} : ...), or move "
                "only the runs that have it",
                touched,
                {r.id: f"its input has no {dotted}" for r in touched},
                severity="error" if reader.stops else "warning",
            )
    for change in check.diff.of("input"):
        if change.kind != "changed" or change.field not in ("schema", "required"):
            continue
        if change.subject == "input" or (change.field == "required" and not change.new):
            continue
        path = tuple(change.subject.split("."))
        notes = {}
        for run in check.live or ():
            there, value = _value(run.run.input, path[1:])
            if change.field == "required" and not there:
                notes[run.id] = f"its input has no {change.subject}"
            elif change.field == "schema" and there:
                problem = _misfit(new, path, value)
                if problem is not None:
                    notes[run.id] = f"its {change.subject} {problem}"
        touched = [r for r in check.live or () if r.id in notes]
        said = (
            f"requires {change.subject}"
            if change.field == "required"
            else f"declares {change.subject} otherwise ({fields_changed(change.old, change.new)})"
        )
        check.add(
            "V110",
            change.where,
            f"version {new.spec_version} {said}: "
            f"{check.who(touched, f'started under version {old.spec_version}')} "
            "would keep the input they were given, which no new check looks at again, and the new "
            "version's expressions may read it as declared now; move only the runs whose input "
            "fits, or keep the declaration",
            touched,
            notes,
            severity="warning",
        )


def _misfit(spec: Spec, path: tuple[str, ...], value: Any) -> str | None:
    """Why ``value`` does not fit what ``spec``'s input schema declares at ``path``."""
    node: Any = spec.input_schema
    for part in path[1:]:
        node = (node.get("properties") or {}).get(part) if isinstance(node, dict) else None
    if not isinstance(node, dict):
        return None
    try:
        errors = list(jsonschema.Draft7Validator(node).iter_errors(value))
    except Exception:  # a schema the validator cannot apply here ($ref): not judged
        return None
    return f"({show(value)}) {errors[0].message}" if errors else None


# -- receipts --------------------------------------------------------------------------------------


def declared_receipt(spec: Spec, effect: str) -> str | None:
    """The receipt field ``spec`` declares for ``effect``: its row's, else its own, else its
    adapter's contract's."""
    row = row_performing(spec, effect)
    if row is not None and row.receipt:
        return row.receipt
    made = spec.effects.get(effect)
    if made is None:
        return None
    if made.receipt:
        return made.receipt
    contract = spec.adapters[made.adapter].operations if made.adapter in spec.adapters else None
    found = (contract or {}).get(made.operation)
    return found.receipt if found is not None else None


def _fields(receipt: dict[str, Any]) -> str:
    return ", ".join(sorted(receipt)) or "nothing"


def check_receipts(check: Check) -> None:
    """``V112``: receipt fields the new version reads that the old one's effects never
    declared, and receipt fields declared otherwise."""
    old, new = check.old, check.new
    before = {p for r in readers(old) for p in r.paths() if p[0] == "receipts"}
    for reader in readers(new):
        if not _read(check, reader):
            continue
        for path in reader.paths():
            if path[0] != "receipts" or len(path) < 3 or path in before:
                continue
            effect, field = path[1], path[2]
            if effect not in old.effects or declared_receipt(old, effect) == field:
                continue
            dotted = ".".join(path)
            notes = {
                r.id: f"its receipt of {effect} has {_fields(r.receipts[effect])}"
                for r in check.live or ()
                if effect in r.receipts
                and field not in r.receipts[effect]
                and _reaches(check, r, reader)
            }
            touched = [r for r in check.live or () if r.id in notes]
            check.add(
                "V112",
                check.at_new(reader.pointer),
                f"{reader.label} reads {dotted}, a field version {old.spec_version} never "
                f"declared for {effect!r} (it declared {show(declared_receipt(old, effect))}): "
                f"{check.who(touched, f'that made {effect!r} before')} recorded the reply as the "
                f"provider gave it then, which may not have it, and would "
                + (
                    "stop there: the call cannot be made"
                    if reader.stops
                    else "find the guard does not hold"
                )
                + f"; read {show(declared_receipt(old, effect))}, or move only runs whose "
                "receipt has it",
                touched,
                notes,
                severity="error" if reader.stops else "warning",
            )
    for pair in check.diff.rows:
        if pair.kind != "changed" or "receipt" not in pair.changed or pair.old is None:
            continue
        made = pair.old.external_effect
        if made is None or pair.new is None:
            continue
        effect, field = made, pair.new.receipt or "(none)"
        notes = {}
        for run in check.live or ():
            windows = [op for op, _ in run.in_window if op.effect == effect]
            if windows:
                notes[run.id] = f"its lookup of {effect} would look for {field} in the reply"
            elif effect in run.receipts and field not in run.receipts[effect]:
                notes[run.id] = f"its receipt of {effect} has no {field}"
        touched = [r for r in check.live or () if r.id in notes]
        check.add(
            "V112",
            check.at_new(f"{pair.new.pointer}/receipt"),
            f"the receipt of {effect!r} is another field ({show(pair.old.receipt)} → "
            f"{show(field)}): {check.who(touched, f'that called or made {effect!r}')} would be "
            "proved by, or read, replies kept for the old field; check the provider's replies "
            "have the new one, or keep the field",
            touched,
            notes,
        )
