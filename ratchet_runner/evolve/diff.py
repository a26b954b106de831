"""A semantic diff of two versions of a spec: what changed, in the words of the spec, located.

:func:`diff` compares two :class:`~ratchet_runner.spec.model.Spec` values as the runner reads
them, not as text: a comment, a reordering of keys or ``60s`` written ``1m`` is no change, and a
guard, a timer or an idempotency key is. Each :class:`Change` says what (``state``, ``row``,
``guard``, ``effect``, ``contract``, ``approval``, ``compensation``, ``timer``, ...), which
(``subject``: the state, the effect, the row), which of its fields, the old and the new value,
and where it is written: in the new version, as ``FILE:LINE:COL`` with its JSON pointer, the
way ``ratchet validate`` locates a finding; for something removed, in the old version.

A row is identified by its state and event, and by its guard when several rows share them
(:func:`match_rows`): the one row of ``(proposed, approve)`` whose guard changed is a changed
row, not one removed and one added. The examples are not compared: they change nothing a run
does. Pure: it reads the two specs and imports nothing but the spec and the ground floor.

Over 400 lines, as one concern: every part of a spec compared, each in the spec's own words.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, is_dataclass
from typing import Any, Literal

from ..spec.model import COLUMNS, TERMINAL_KINDS, Compensation, Row, Spec, canonical_json

ChangeKind = Literal["added", "removed", "changed"]

#: What a change is about, in the order a spec is written (and a diff is shown).
WHATS = (
    "name",
    "version",
    "policy",
    "business_key",
    "start",
    "on_version_change",
    "budget",
    "input",
    "description",
    "adapter",
    "contract",
    "effect",
    "approval",
    "operators",
    "state",
    "timer",
    "operator_action",
    "row",
    "guard",
    "idempotency_key",
    "retry_owner",
    "compensation",
    "event",
)

#: What a change of each row column is about (the rest are the row's own: ``row``).
_COLUMN_WHAT = {
    "guard": "guard",
    "idempotency_key": "idempotency_key",
    "retry_owner": "retry_owner",
    "compensation": "compensation",
    "operator_action": "operator_action",
}

#: The state fields that are timers, and the state kinds whose runs have ended.
TIMER_FIELDS = ("expires_after", "after", "until")
ENDED_KINDS = TERMINAL_KINDS - {"operator_queue"}


#: What the subject of a change is, by where it is written.
_THINGS = (
    ("/transitions", "row"),
    ("/states", "state"),
    ("/effects", "effect"),
    ("/approvals", "approval"),
    ("/adapters", "adapter"),
    ("/input", "input field"),
    ("/operators", "operator role"),
)


@dataclass(frozen=True)
class Where:
    """A place in a spec file: ``FILE:LINE:COL`` and the JSON pointer written there."""

    file: str
    line: int
    column: int
    pointer: str

    def format(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "line": self.line,
            "column": self.column,
            "pointer": self.pointer,
        }


@dataclass(frozen=True)
class Change:
    """One thing added, removed or changed between two versions."""

    kind: ChangeKind
    what: str
    subject: str
    field: str | None
    old: Any
    new: Any
    where: Where

    def describe(self) -> str:
        """The change in words: ``guard of (proposed, approve): `a` → `b```."""
        thing = f"{self.thing} {self.subject}".strip()
        if self.field is not None:
            thing = f"{self.field} of {thing}"
        if self.kind == "added":
            return f"added {thing}" + (f": {show(self.new)}" if _worth(self.new) else "")
        if self.kind == "removed":
            return f"removed {thing}" + (f" (was {show(self.old)})" if _worth(self.old) else "")
        return f"changed {thing}: {show(self.old)} → {show(self.new)}"

    @property
    def thing(self) -> str:
        """What the subject is: ``state``, ``row``, ``effect``, ... (empty for the spec's own
        fields, such as ``business_key``)."""
        if self.what == "event":
            return "event"
        pointer = self.where.pointer
        if pointer.startswith("/adapters/") and "/operations/" in pointer:
            return "operation"
        for prefix, noun in _THINGS:
            if pointer.startswith(prefix) and self.subject != prefix.strip("/"):
                return noun
        return ""

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "thing": self.thing,
            "what": self.what,
            "subject": self.subject,
            "field": self.field,
            "old": self.old,
            "new": self.new,
            **self.where.to_json(),
        }


@dataclass(frozen=True)
class RowPair:
    """A row of the old version and the row of the new version it became (either may be None:
    a row added, a row removed), with the columns that differ."""

    old: Row | None
    new: Row | None
    changed: tuple[str, ...] = ()

    @property
    def kind(self) -> Literal["added", "removed", "changed", "same"]:
        if self.old is None:
            return "added"
        if self.new is None:
            return "removed"
        return "changed" if self.changed else "same"

    @property
    def row(self) -> Row:
        """The new row, or the old one when it was removed."""
        found = self.new or self.old
        assert found is not None
        return found


@dataclass(frozen=True)
class SpecDiff:
    """Every change from ``old`` to ``new``, and how their rows pair up."""

    old: Spec
    new: Spec
    changes: tuple[Change, ...]
    rows: tuple[RowPair, ...] = field(default=())

    def of(self, *whats: str) -> list[Change]:
        """The changes about any of ``whats``."""
        return [c for c in self.changes if c.what in whats]

    @property
    def changed_rows(self) -> list[RowPair]:
        return [pair for pair in self.rows if pair.kind != "same"]

    def to_json(self) -> list[dict[str, Any]]:
        return [change.to_json() for change in self.changes]


# -- values as a person reads them ------------------------------------------------------------


def plain(value: Any) -> Any:
    """``value`` as plain JSON data: tuples as lists, dataclasses as mappings, a compensation as
    it is written in the table."""
    if isinstance(value, Compensation):
        return compensation_text(value)
    if is_dataclass(value) and not isinstance(value, type):
        return {k: plain(v) for k, v in asdict(value).items() if k != "pointer"}
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def compensation_text(comp: Compensation | None) -> str | None:
    """A row's compensation as written: the effect's name, or ``none: REASON``."""
    if comp is None:
        return None
    if comp.kind == "effect":
        return comp.effect
    return f"{comp.kind}: {comp.reason}" if comp.reason else comp.kind


def show(value: Any) -> str:
    """A value for a message: in backticks, ``(none)`` for nothing."""
    if value is None:
        return "(none)"
    if isinstance(value, str):
        return f"`{value}`"
    return f"`{canonical_json(value)}`"


def fields_changed(old: Any, new: Any) -> str:
    """Two values side by side, only what differs when both are mappings (``max_attempts `3` →
    `5```), else whole."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return f"{show(old)} → {show(new)}"
    keys = [*old, *[k for k in new if k not in old]]
    return "; ".join(
        f"{k} {show(old.get(k))} → {show(new.get(k))}" for k in keys if old.get(k) != new.get(k)
    )


def article(word: str) -> str:
    """``a step``, ``an operator_queue``."""
    return f"an {word}" if word[:1] in "aeiou" else f"a {word}"


def _worth(value: Any) -> bool:
    """Whether an added or removed value is worth naming beside the thing (not a whole
    mapping of fields)."""
    return value is not None and not isinstance(value, dict)


def row_label(row: Row, *, guard: bool = False) -> str:
    """A row as it is identified: ``(proposed, approve)``, with its guard when it needs one."""
    if guard and row.guard:
        return f"({row.state}, {row.event}, {row.guard})"
    return f"({row.state}, {row.event})"


def where(spec: Spec, pointer: str, *, key: bool = False) -> Where:
    """Where ``pointer`` is written in ``spec``'s file (its nearest written ancestor), the way
    a lint finding is located; a spec made in code has no file, and says so."""
    doc = spec.document
    if doc is None:
        return Where(f"<{spec.name} version {spec.spec_version}>", 1, 1, pointer)
    line, column = doc.locate(pointer, key=key)
    return Where(doc.file, line, column, pointer)


def raw(spec: Spec, *path: str) -> dict[str, Any]:
    """The mapping at ``path`` in the spec's document as written (``{}`` when there is none):
    for what the model keeps no copy of (descriptions, durations as written)."""
    node: Any = spec.document.data if spec.document is not None else {}
    for part in path:
        node = node.get(part) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else {}


# -- rows ---------------------------------------------------------------------------------------


def match_rows(old: Sequence[Row], new: Sequence[Row]) -> list[RowPair]:
    """Pair each row of ``old`` with the row of ``new`` it became: rows of one state and event
    pair up by the same guard, then by the same next state, then in table order; what is left
    was added or removed. In the new table's order, each removed row after the row that
    followed its predecessor."""
    groups: dict[tuple[str, str], tuple[list[Row], list[Row]]] = {}
    for row in old:
        groups.setdefault((row.state, row.event), ([], []))[0].append(row)
    for row in new:
        groups.setdefault((row.state, row.event), ([], []))[1].append(row)
    pairs: list[RowPair] = []
    for before, after in groups.values():
        for same in (
            lambda a, b: a.guard == b.guard,
            lambda a, b: a.next_state == b.next_state,
            lambda a, b: True,
        ):
            for row in list(after):
                match = next((o for o in before if same(o, row)), None)
                if match is not None:
                    before.remove(match)
                    after.remove(row)
                    pairs.append(_pair(match, row))
        pairs += [RowPair(o, None) for o in before] + [RowPair(None, n) for n in after]
    return sorted(pairs, key=lambda p: _row_order(p, pairs))


def _pair(old: Row, new: Row) -> RowPair:
    changed = tuple(c for c in COLUMNS if plain(old.cell(c)) != plain(new.cell(c)))
    return RowPair(old, new, changed)


def _row_order(pair: RowPair, pairs: list[RowPair]) -> tuple[float, int]:
    if pair.new is not None:
        return (pair.new.index, 0)
    assert pair.old is not None
    before = [
        p.new.index
        for p in pairs
        if p.new is not None and p.old is not None and p.old.index < pair.old.index
    ]
    return (max(before, default=-1) + 0.5, pair.old.index)


def _row_changes(old: Spec, new: Spec, pairs: list[RowPair]) -> Iterator[Change]:
    for pair in pairs:
        if pair.kind == "same":
            continue
        shared = len(
            [p for p in pairs if (p.row.state, p.row.event) == (pair.row.state, pair.row.event)]
        )
        label = row_label(pair.row, guard=shared > 1)
        if pair.old is None:
            assert pair.new is not None
            yield Change(
                "added", "row", label, None, None, _row_json(pair.new), where(new, pair.new.pointer)
            )
            continue
        if pair.new is None:
            yield Change(
                "removed",
                "row",
                label,
                None,
                _row_json(pair.old),
                None,
                where(old, pair.old.pointer),
            )
            continue
        for column in pair.changed:
            yield Change(
                "changed",
                _COLUMN_WHAT.get(column, "row"),
                row_label(pair.old, guard=shared > 1),
                column,
                plain(pair.old.cell(column)),
                plain(pair.new.cell(column)),
                where(new, f"{pair.new.pointer}/{column}"),
            )


def _row_json(row: Row) -> dict[str, Any]:
    return {c: plain(row.cell(c)) for c in COLUMNS if row.cell(c) not in (None, ())}


def events_of(spec: Spec, state: str) -> set[str]:
    """The events ``state`` takes: those its rows name, and the signals it resumes on."""
    found = {row.event for row in spec.rows_from(state)}
    taken = spec.states.get(state)
    return found | set(taken.resumes_on if taken is not None else ())


def _event_changes(old: Spec, new: Spec) -> Iterator[Change]:
    for name in [s for s in new.states if s in old.states]:
        before, after = events_of(old, name), events_of(new, name)
        for event in sorted(after - before):
            first = next((r for r in new.rows_from(name) if r.event == event), None)
            pointer = first.pointer if first else new.states[name].pointer
            yield Change(
                "added", "event", f"{name}.{event}", None, None, event, where(new, pointer)
            )
        for event in sorted(before - after):
            first = next((r for r in old.rows_from(name) if r.event == event), None)
            pointer = first.pointer if first else old.states[name].pointer
            yield Change(
                "removed", "event", f"{name}.{event}", None, event, None, where(old, pointer)
            )


# -- named things -------------------------------------------------------------------------------


def _named(
    what: str,
    old: Spec,
    new: Spec,
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    pointer: Callable[[str], str],
    fields: Callable[[Spec, str, Any], dict[str, Any]],
    whats: Mapping[str, str] | None = None,
) -> Iterator[Change]:
    """Things of one kind (states, effects, ...) added, removed, or changed field by field
    (``fields`` gives each field's value as compared; ``whats`` names fields that are about
    something else, such as a state's timers)."""
    for name, thing in after.items():
        if name not in before:
            yield Change(
                "added", what, name, None, None, fields(new, name, thing), _at(new, pointer(name))
            )
    for name, thing in before.items():
        if name not in after:
            yield Change(
                "removed", what, name, None, fields(old, name, thing), None, _at(old, pointer(name))
            )
    for name, thing in after.items():
        if name not in before:
            continue
        was, now = fields(old, name, before[name]), fields(new, name, thing)
        for key in [*now, *[k for k in was if k not in now]]:
            a, b = was.get(key), now.get(key)
            if a == b:
                continue
            about = (whats or {}).get(key.split(".")[0], what)
            at = f"{pointer(name)}/{key.replace('.', '/')}"
            if b is None:
                yield Change("removed", about, name, key, a, None, where(old, at))
            elif a is None:
                yield Change("added", about, name, key, None, b, where(new, at))
            else:
                yield Change("changed", about, name, key, a, b, where(new, at))


def _at(spec: Spec, pointer: str) -> Where:
    return where(spec, pointer, key=True)


def _described(spec: Spec, section: str, name: str) -> dict[str, Any]:
    text = raw(spec, section, name).get("description")
    return {"description": text} if text is not None else {}


def _as_written(spec: Spec, value: Any, *path: str) -> Any:
    """A duration as the file writes it (``72h``), when it is written; else the value."""
    written = raw(spec, *path[:-1]).get(path[-1])
    return written if isinstance(written, str) and value is not None else value


def _state_fields(spec: Spec, name: str, state: Any) -> dict[str, Any]:
    found = {
        "kind": state.kind,
        "resumes_on": list(state.resumes_on) or None,
        "approval": state.approval,
        "operator_action": state.operator_action,
        "description": state.description,
    }
    for timer in TIMER_FIELDS:
        value = getattr(state, timer)
        found[timer] = _Timer(value, _as_written(spec, value, "states", name, timer))
    return {k: v for k, v in found.items() if v is not None and v != _Timer(None, None)}


@dataclass(frozen=True)
class _Timer:
    """A timer compared by its value (``1m`` is ``60s``), shown as written."""

    value: Any
    written: Any

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Timer) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)


def _effect_fields(spec: Spec, name: str, effect: Any) -> dict[str, Any]:
    found: dict[str, Any] = {
        "adapter": effect.adapter,
        "operation": effect.operation,
        **{f"args.{arg}": plain(value) for arg, value in effect.args.items()},
        "reconcile": effect.reconcile,
        "approval": effect.approval,
        "retry": _Timer(
            plain(effect.retry), raw(spec, "effects", name).get("retry") or plain(effect.retry)
        ),
        "timeout": _Timer(
            effect.timeout, _as_written(spec, effect.timeout, "effects", name, "timeout")
        ),
        "cost": effect.cost,
        "receipt": effect.receipt,
        **_described(spec, "effects", name),
    }
    return {k: v for k, v in found.items() if v is not None and v != _Timer(None, None)}


def _approval_fields(spec: Spec, name: str, approval: Any) -> dict[str, Any]:
    found: dict[str, Any] = {
        "effect": approval.effect,
        "binds": plain(approval.binds),
        "roles": list(approval.roles),
        "expires_after": _Timer(
            approval.expires_after,
            _as_written(spec, approval.expires_after, "approvals", name, "expires_after"),
        ),
        "evidence": plain(approval.related_runs),
        **_described(spec, "approvals", name),
    }
    return {k: v for k, v in found.items() if v is not None and v != _Timer(None, None)}


def _adapter_fields(spec: Spec, name: str, adapter: Any) -> dict[str, Any]:
    found: dict[str, Any] = {
        "kind": adapter.kind,
        "attempts": adapter.attempts,
        "upstream_attempts": adapter.upstream_attempts,
        "config": plain(adapter.config) or None,
        **_described(spec, "adapters", name),
    }
    return {k: v for k, v in found.items() if v is not None}


def _contract_changes(old: Spec, new: Spec) -> Iterator[Change]:
    for name in [a for a in new.adapters if a in old.adapters]:
        before = old.adapters[name].operations
        after = new.adapters[name].operations
        if before is None and after is None:
            continue
        if before is None or after is None:
            kind: ChangeKind = "added" if before is None else "removed"
            side = new if before is None else old
            yield Change(
                kind,
                "contract",
                name,
                "operations",
                None if before is None else sorted(before),
                None if after is None else sorted(after),
                _at(side, f"/adapters/{name}/operations"),
            )
            continue
        yield from _named(
            "contract", old, new, before, after, _operation_pointer(name), _contract_fields
        )


def _operation_pointer(adapter: str) -> Callable[[str], str]:
    return lambda operation: f"/adapters/{adapter}/operations/{operation}"


def _contract_fields(spec: Spec, name: str, contract: Any) -> dict[str, Any]:
    found = {
        "args": list(contract.args) or None,
        "optional_args": list(contract.optional_args) or None,
        "receipt": contract.receipt,
        "lookup": contract.lookup,
    }
    return {k: v for k, v in found.items() if v is not None}


# -- the input schema -----------------------------------------------------------------------------

_SCHEMA_WORDS = ("properties", "required", "description", "title", "examples")


def _schema_changes(
    old: Spec, new: Spec, before: Mapping[str, Any], after: Mapping[str, Any], path: str, at: str
) -> Iterator[Change]:
    """The input schema compared field by field: a field added, removed, required or not, or
    declared otherwise (its type, its enum, ...), level by level."""
    was = {k: v for k, v in before.items() if k not in _SCHEMA_WORDS}
    now = {k: v for k, v in after.items() if k not in _SCHEMA_WORDS}
    if was != now:
        yield Change("changed", "input", path, "schema", was, now, where(new, at))
    props_old = before.get("properties") or {}
    props_new = after.get("properties") or {}
    required_old = set(before.get("required") or ())
    required_new = set(after.get("required") or ())
    for name in [*props_new, *[p for p in props_old if p not in props_new]]:
        sub, pointer = f"{path}.{name}", f"{at}/properties/{name}"
        if name not in props_old:
            yield Change("added", "input", sub, None, None, props_new[name], _at(new, pointer))
        elif name not in props_new:
            yield Change("removed", "input", sub, None, props_old[name], None, _at(old, pointer))
        elif isinstance(props_old[name], dict) and isinstance(props_new[name], dict):
            yield from _schema_changes(old, new, props_old[name], props_new[name], sub, pointer)
        if (name in required_old) != (name in required_new) and name in props_new:
            yield Change(
                "changed",
                "input",
                sub,
                "required",
                name in required_old,
                name in required_new,
                where(new, f"{at}/required"),
            )


# -- the whole --------------------------------------------------------------------------------


def _top(old: Spec, new: Spec) -> Iterator[Change]:
    top: list[tuple[str, str, Any, Any]] = [
        ("name", "/name", old.name, new.name),
        ("version", "/spec_version", old.spec_version, new.spec_version),
        ("policy", "/policy_version", old.policy_version, new.policy_version),
        ("business_key", "/business_key", old.business_key, new.business_key),
        ("start", "/start", old.start, new.start),
        ("on_version_change", "/on_version_change", old.on_version_change, new.on_version_change),
        ("budget", "/budget/max_attempts", old.budget.max_attempts, new.budget.max_attempts),
        ("budget", "/budget/max_cost", old.budget.max_cost, new.budget.max_cost),
        ("description", "/title", old.title, new.title),
        ("description", "/description", raw(old).get("description"), raw(new).get("description")),
    ]
    for what, pointer, a, b in top:
        if a == b:
            continue
        subject = pointer.strip("/").replace("/", ".")
        kind: ChangeKind = "added" if a is None else "removed" if b is None else "changed"
        side = old if kind == "removed" else new
        yield Change(kind, what, subject, None, a, b, where(side, pointer))


def diff(old: Spec, new: Spec) -> SpecDiff:
    """Everything that differs between ``old`` and ``new``, as the runner reads them."""
    pairs = match_rows(old.transitions, new.transitions)
    changes: list[Change] = [*_top(old, new)]
    changes += _schema_changes(old, new, old.input_schema, new.input_schema, "input", "/input")
    changes += _named(
        "adapter", old, new, old.adapters, new.adapters, lambda n: f"/adapters/{n}", _adapter_fields
    )
    changes += _contract_changes(old, new)
    changes += _named(
        "effect", old, new, old.effects, new.effects, lambda n: f"/effects/{n}", _effect_fields
    )
    changes += _named(
        "approval",
        old,
        new,
        old.approvals,
        new.approvals,
        lambda n: f"/approvals/{n}",
        _approval_fields,
    )
    for role in new.operator_roles:
        if role not in old.operator_roles:
            changes.append(
                Change("added", "operators", role, None, None, role, where(new, "/operators/roles"))
            )
    for role in old.operator_roles:
        if role not in new.operator_roles:
            changes.append(
                Change(
                    "removed", "operators", role, None, role, None, where(old, "/operators/roles")
                )
            )
    changes += _named(
        "state",
        old,
        new,
        old.states,
        new.states,
        lambda n: f"/states/{n}",
        _state_fields,
        {
            "expires_after": "timer",
            "after": "timer",
            "until": "timer",
            "operator_action": "operator_action",
            "description": "description",
        },
    )
    changes += _row_changes(old, new, pairs)
    changes += _event_changes(old, new)
    return SpecDiff(old, new, tuple(_shown(changes)), tuple(pairs))


def _shown(changes: Iterable[Change]) -> Iterator[Change]:
    """The changes with timers and retry policies shown as written, and descriptions (a
    change of words for people) kept apart: ``what`` is ``description`` whatever they
    describe."""
    for change in changes:
        old, new = change.old, change.new
        if isinstance(old, _Timer) or isinstance(new, _Timer):
            old = old.written if isinstance(old, _Timer) else old
            new = new.written if isinstance(new, _Timer) else new
        if isinstance(old, dict):
            old = {k: v.written if isinstance(v, _Timer) else v for k, v in old.items()}
        if isinstance(new, dict):
            new = {k: v.written if isinstance(v, _Timer) else v for k, v in new.items()}
        what = "description" if change.field == "description" else change.what
        yield Change(change.kind, what, change.subject, change.field, old, new, change.where)


# -- the graph ----------------------------------------------------------------------------------


def reachable(spec: Spec, *starts: str) -> set[str]:
    """The states reachable from ``starts`` (default: the spec's start) by its rows."""
    seen: set[str] = set()
    todo = list(starts or (spec.start,))
    while todo:
        state = todo.pop()
        if state in seen or state not in spec.states:
            continue
        seen.add(state)
        todo.extend(row.next_state for row in spec.rows_from(state))
    return seen


def state_performing(spec: Spec, effect: str) -> str | None:
    """The state whose row performs ``effect`` (None: no row does)."""
    return next((r.state for r in spec.transitions if r.external_effect == effect), None)


def row_performing(spec: Spec, effect: str) -> Row | None:
    """The row that performs ``effect`` (None: none does)."""
    return next((r for r in spec.transitions if r.external_effect == effect), None)
