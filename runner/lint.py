"""Semantic checks of a schema-valid spec: references, expressions, the graph, effect safety.

Each check is a function ``(spec) -> Iterator[Diagnostic]`` registered in :data:`CHECKS`; each
finding carries a stable code from :mod:`runner.codes` and the JSON pointer of the offending node,
so it is reported at its line and column. Checks never raise on odd input: the document already
passed the schema, and every lookup tolerates a dangling reference (reported by another check).
"""

from __future__ import annotations

import keyword
from collections import Counter, deque
from collections.abc import Callable, Iterator
from typing import Any

import jsonschema
from jsonschema import Draft7Validator
from transitions import Machine

from adapters import KINDS

from .errors import Diagnostic
from .expressions import APPROVAL_FIELDS, RUN_FIELDS, ExpressionError, Scope, check
from .loader import Document, pointer_join
from .spec import OUTCOME_EVENTS, RUNNER_EVENTS, Effect, Row, Spec

#: More calls than this for one approved change, across all retry layers, is a warning (W508).
MAX_CALLS_PER_EFFECT = 10

#: Idempotency-key fields whose value differs between attempts, processes or machines.
UNSTABLE_KEY_FIELDS = frozenset(
    {"now", "time", "timestamp", "today", "attempt", "attempts", "random", "uuid", "nonce"}
)
UNSTABLE_RUN_FIELDS = frozenset({"id", "attempts", "started_at", "version", "state"})
KEY_HEADS = frozenset({"business_key", "effect", "args", "input", "receipts", "run"})

#: Names an event may not take: they are attributes of a `transitions` model or machine, of the
#: runner's run object, or Python keywords.
RESERVED_EVENT_NAMES = frozenset(
    {n for n in dir(Machine) if not n.startswith("_")}
    | {"state", "trigger", "machine", "model", "run", "spec", "input", "context", "version"}
    | {"id", "history", "receipts", "approval", "signal", "business_key"}
    | set(keyword.kwlist)
)
RESERVED_EVENT_PREFIXES = ("to_", "may_", "is_")

Check = Callable[[Spec], Iterator[Diagnostic]]


def _doc(spec: Spec) -> Document:
    assert spec.document is not None
    return spec.document


def _at(spec: Spec, pointer: str, code: str, message: str) -> Diagnostic:
    return _doc(spec).diagnostic(pointer, code, message)


def _col(row: Row, column: str) -> str:
    return pointer_join(row.pointer, column)


def effect_rows(spec: Spec) -> Iterator[tuple[Row, Effect]]:
    """Every row that names a known effect, with that effect."""
    for row in spec.transitions:
        if row.external_effect is not None and row.external_effect in spec.effects:
            yield row, spec.effects[row.external_effect]


# -- references ---------------------------------------------------------------------------------


def check_references(spec: Spec) -> Iterator[Diagnostic]:
    states, effects, approvals = spec.states, spec.effects, spec.approvals

    def state_ref(name: str, pointer: str) -> Iterator[Diagnostic]:
        if name not in states:
            yield _at(spec, pointer, "E301", f"unknown state {name!r} (declare it under states:)")

    yield from state_ref(spec.start, "/start")
    for row in spec.transitions:
        yield from state_ref(row.state, _col(row, "state"))
        yield from state_ref(row.next_state, _col(row, "next_state"))
        if row.external_effect is not None and row.external_effect not in effects:
            yield _at(
                spec,
                _col(row, "external_effect"),
                "E302",
                f"unknown effect {row.external_effect!r} (declare it under effects:)",
            )
        comp = row.compensation
        if comp is not None and comp.effect is not None and comp.effect not in effects:
            yield _at(
                spec,
                _col(row, "compensation"),
                "E302",
                f"unknown compensating effect {comp.effect!r} (declare it under effects:, or "
                "write 'none: REASON' / 'impossible: REASON')",
            )
    for effect in effects.values():
        if effect.adapter not in spec.adapters:
            yield _at(
                spec,
                f"{effect.pointer}/adapter",
                "E304",
                f"unknown adapter {effect.adapter!r} (declare it under adapters:)",
            )
        if effect.approval is not None and effect.approval not in approvals:
            yield _at(
                spec, f"{effect.pointer}/approval", "E303", f"unknown approval {effect.approval!r}"
            )
    for adapter in spec.adapters.values():
        if adapter.kind not in KINDS:
            yield _at(
                spec,
                f"{adapter.pointer}/kind",
                "E304",
                f"unknown adapter kind {adapter.kind!r} (known: {', '.join(KINDS)})",
            )
    for approval in approvals.values():
        bound = effects.get(approval.effect)
        if bound is None:
            yield _at(
                spec, f"{approval.pointer}/effect", "E302", f"unknown effect {approval.effect!r}"
            )
            continue
        if bound.approval != approval.name:
            yield _at(
                spec,
                f"{approval.pointer}/effect",
                "E303",
                f"approval {approval.name!r} binds effect {bound.name!r}, but that effect does "
                f"not ask for it (add approval: {approval.name} to the effect)",
            )
        if approval.binds != "all":
            for i, arg in enumerate(approval.binds):
                if arg not in bound.args:
                    yield _at(
                        spec,
                        f"{approval.pointer}/binds/{i}",
                        "E308",
                        f"effect {bound.name!r} has no argument {arg!r} "
                        f"(arguments: {', '.join(bound.args) or 'none'})",
                    )
    for state in states.values():
        if state.approval is not None and state.approval not in approvals:
            yield _at(
                spec, f"{state.pointer}/approval", "E303", f"unknown approval {state.approval!r}"
            )


# -- expressions --------------------------------------------------------------------------------


def _scopes(spec: Spec) -> dict[str, Scope]:
    input_rule: Any = spec.input_schema if isinstance(spec.input_schema, dict) else None
    receipts: dict[str, Any] = {"properties": {name: {} for name in spec.effects}}
    base = {"input": input_rule, "receipts": receipts, "run": RUN_FIELDS, "business_key": None}
    return {
        "business_key": Scope({"input": input_rule}),
        "args": Scope(base),
        "guard": Scope({**base, "approval": APPROVAL_FIELDS, "signal": None}),
        "until": Scope(base),
    }


def _expression(spec: Spec, scope: Scope, source: str, pointer: str) -> Iterator[Diagnostic]:
    try:
        check(source, scope)
    except ExpressionError as exc:
        yield _at(spec, pointer, exc.code, str(exc))


def check_expressions(spec: Spec) -> Iterator[Diagnostic]:
    scopes = _scopes(spec)
    yield from _expression(spec, scopes["business_key"], spec.business_key, "/business_key")
    for row in spec.transitions:
        if row.guard is not None:
            yield from _expression(spec, scopes["guard"], row.guard, _col(row, "guard"))
    for effect in spec.effects.values():
        for name, value in effect.args.items():
            if isinstance(value, str):
                pointer = f"{effect.pointer}/args/{name}"
                yield from _expression(spec, scopes["args"], value, pointer)
    for state in spec.states.values():
        if state.until is not None:
            yield from _expression(spec, scopes["until"], state.until, f"{state.pointer}/until")


def check_input_schema(spec: Spec) -> Iterator[Diagnostic]:
    try:
        Draft7Validator.check_schema(spec.input_schema)
    except jsonschema.SchemaError as exc:
        where = "".join(f"/{p}" for p in exc.absolute_path)
        yield _at(spec, f"/input{where}", "E205", f"the input schema is invalid: {exc.message}")
        return
    validator = Draft7Validator(spec.input_schema)
    for example in spec.examples.values():
        for error in validator.iter_errors(example.input):
            where = "".join(f"/{p}" for p in error.absolute_path)
            yield _at(
                spec,
                f"/examples/{example.name}/input{where}",
                "E206",
                f"example {example.name!r}: {error.message}",
            )


# -- the state graph ----------------------------------------------------------------------------


def check_graph(spec: Spec) -> Iterator[Diagnostic]:
    if not any(state.terminal for state in spec.states.values()):
        yield _at(
            spec,
            "/states",
            "E403",
            "no terminal state: add one of kind success, cancelled, compensated or operator_queue",
        )
    seen = {spec.start}
    queue = deque([spec.start])
    while queue:
        for row in spec.rows_from(queue.popleft()):
            if row.next_state not in seen:
                seen.add(row.next_state)
                queue.append(row.next_state)
    for state in spec.states.values():
        outgoing = spec.rows_from(state.name)
        if state.name not in seen:
            yield _at(
                spec,
                state.pointer,
                "W401",
                f"state {state.name!r} cannot be reached from {spec.start!r}",
            )
        if state.terminal and outgoing:
            yield _at(
                spec,
                outgoing[0].pointer,
                "E404",
                f"state {state.name!r} is terminal ({state.kind}) but has outgoing rows",
            )
        elif not state.terminal and not outgoing:
            yield _at(
                spec,
                state.pointer,
                "E402",
                f"state {state.name!r} ({state.kind}) has no rows out of it: a run there is stuck",
            )
    yield from _ambiguous_rows(spec)


def _ambiguous_rows(spec: Spec) -> Iterator[Diagnostic]:
    by_pair: dict[tuple[str, str], list[Row]] = {}
    for row in spec.transitions:
        by_pair.setdefault((row.state, row.event), []).append(row)
    for (state, event), rows in by_pair.items():
        counts = Counter(row.guard for row in rows)
        for row in rows[1:]:
            if counts[row.guard] > 1 or (row.guard is None and len(rows) > 1):
                guard = "no guard" if row.guard is None else f"guard {row.guard!r}"
                yield _at(
                    spec,
                    row.pointer,
                    "E405",
                    f"another row for state {state!r} on {event!r} has {guard} too: "
                    "give each a guard that tells them apart",
                )
                break


def _allowed_events(spec: Spec, state_name: str) -> tuple[set[str], str]:
    state = spec.states[state_name]
    if state.kind == "pause":
        allowed = set(state.resumes_on) | ({"expired"} if state.expires_after else set())
        return allowed, "its resumes_on signals" + (" and 'expired'" if state.expires_after else "")
    if state.kind == "wait":
        return set(state.resumes_on) | {"due"}, "'due' and its resumes_on signals"
    if state.kind == "compensate":
        return {"ok", "refused", "exhausted"}, "'ok', 'refused' and 'exhausted'"
    if spec.effect_of(state_name) is not None:
        return set(OUTCOME_EVENTS), "the outcomes of its effect: ok, refused, exhausted, unknown"
    return {"next"}, "'next' (it performs no effect)"


def check_events(spec: Spec) -> Iterator[Diagnostic]:
    for row in spec.transitions:
        if row.state not in spec.states:
            continue
        allowed, words = _allowed_events(spec, row.state)
        if row.event not in allowed:
            kind = spec.states[row.state].kind
            yield _at(
                spec,
                _col(row, "event"),
                "E406",
                f"{row.event!r} cannot happen in {row.state!r} ({kind}); it takes {words}",
            )
        if row.external_effect is not None and row.event != "ok":
            yield _at(
                spec,
                _col(row, "external_effect"),
                "E406",
                f"the row naming effect {row.external_effect!r} must be its 'ok' row, not "
                f"{row.event!r}; outcome rows route the other outcomes",
            )
    for state in spec.states.values():
        events = {row.event for row in spec.rows_from(state.name)}
        for i, signal in enumerate(state.resumes_on):
            pointer = f"{state.pointer}/resumes_on/{i}"
            if signal in RUNNER_EVENTS:
                yield _at(
                    spec,
                    pointer,
                    "E407",
                    f"{signal!r} is an event the runner fires; a signal needs another name",
                )
            elif signal not in events:
                yield _at(
                    spec,
                    pointer,
                    "E406",
                    f"state {state.name!r} resumes on {signal!r} but has no row for it",
                )
        if state.kind == "pause" and state.expires_after and "expired" not in events:
            yield _at(
                spec,
                f"{state.pointer}/expires_after",
                "E402",
                f"state {state.name!r} expires but has no 'expired' row",
            )
        if state.kind == "wait" and state.after is None and state.until is None:
            yield _at(
                spec,
                state.pointer,
                "E402",
                f"wait state {state.name!r} needs 'after' or 'until' to end",
            )


def check_event_names(spec: Spec) -> Iterator[Diagnostic]:
    reported: set[str] = set()
    for row in spec.transitions:
        name = row.event
        if name in reported:
            continue
        if name in RESERVED_EVENT_NAMES or name.startswith(RESERVED_EVENT_PREFIXES):
            reported.add(name)
            yield _at(
                spec,
                _col(row, "event"),
                "E407",
                f"event {name!r} collides with a runner or state-machine attribute; rename it",
            )


# -- effect safety ------------------------------------------------------------------------------


def check_effect_states(spec: Spec) -> Iterator[Diagnostic]:
    named: dict[str, str] = {}
    for row, effect in effect_rows(spec):
        first = named.setdefault(row.state, effect.name)
        if first != effect.name:
            yield _at(
                spec,
                _col(row, "external_effect"),
                "E514",
                f"state {row.state!r} already performs {first!r}; one effect per state "
                "(add a state for this one)",
            )
        kind = spec.states[row.state].kind if row.state in spec.states else "step"
        if kind != "step":
            yield _at(
                spec,
                _col(row, "external_effect"),
                "E406",
                f"only a step state performs an effect; {row.state!r} is {kind}",
            )
    for state in spec.states.values():
        if spec.effect_of(state.name) is None and state.kind != "compensate":
            continue
        events = {row.event for row in spec.rows_from(state.name)}
        missing = [e for e in ("refused", "exhausted") if e not in events]
        if missing:
            rows = spec.rows_from(state.name)
            yield _at(
                spec,
                rows[0].pointer if rows else state.pointer,
                "E506",
                f"state {state.name!r} has no row for {' or '.join(map(repr, missing))}: "
                "say where the run goes when the effect is refused or its retries run out",
            )


def check_idempotency_keys(spec: Spec) -> Iterator[Diagnostic]:
    for row, effect in effect_rows(spec):
        key = row.idempotency_key
        if key is None:
            yield _at(
                spec,
                row.pointer,
                "E501",
                f"the row performing {effect.name!r} has no idempotency_key: without one, every "
                "retry is a new change (try [business_key, effect, args])",
            )
            continue
        pointer = _col(row, "idempotency_key")
        for i, item in enumerate(key):
            yield from _key_item(spec, effect, item, f"{pointer}/{i}")
        if "args" not in key:
            left_out = [a for a in effect.args if f"args.{a}" not in key]
            if left_out:
                yield _at(
                    spec,
                    pointer,
                    "E503",
                    f"the key leaves out {', '.join(left_out)} of {effect.name!r}: a changed "
                    "argument would reuse the operation ID (add 'args')",
                )
        if "effect" not in key:
            yield _at(
                spec,
                pointer,
                "E516",
                "the key does not name the effect: two effects with equal arguments would share "
                "one operation ID (add 'effect')",
            )


def _key_item(spec: Spec, effect: Effect, item: str, pointer: str) -> Iterator[Diagnostic]:
    head, _, rest = item.partition(".")
    field = rest.split(".")[0] if rest else ""
    if head in UNSTABLE_KEY_FIELDS or (head == "run" and field in UNSTABLE_RUN_FIELDS):
        hint = " and a business key exists: use business_key" if item == "run.id" else ""
        yield _at(
            spec,
            pointer,
            "E502",
            f"{item!r} differs between attempts, processes or machines{hint}; a key built from it "
            "names a new change on every retry",
        )
    elif head not in KEY_HEADS or (head in ("business_key", "effect") and rest):
        yield _at(
            spec,
            pointer,
            "E306",
            f"{item!r} is not a key field (use business_key, effect, args, args.NAME, "
            "input.FIELD or receipts.EFFECT.FIELD)",
        )
    elif head == "args" and field and field not in effect.args:
        yield _at(spec, pointer, "E308", f"effect {effect.name!r} has no argument {field!r}")
    elif head == "receipts" and field and field not in spec.effects:
        yield _at(spec, pointer, "E302", f"unknown effect {field!r}")


def check_retry_and_hope(spec: Spec) -> Iterator[Diagnostic]:
    for effect in spec.effects.values():
        if effect.reconcile is None:
            yield _at(
                spec,
                f"{effect.pointer}/reconcile"
                if "reconcile" in _raw(spec, effect)
                else effect.pointer,
                "E504",
                f"effect {effect.name!r} has no reconcile lookup: after a timeout nobody can "
                "learn whether the call happened, so a retry may repeat it",
            )
    for row, effect in effect_rows(spec):
        if "pending" not in row.durable_write:
            yield _at(
                spec,
                _col(row, "durable_write"),
                "E505",
                f"the row performing {effect.name!r} does not write 'pending' before the call: a "
                "crash mid-call leaves no record that the call was made",
            )
        if row.receipt is None:
            yield _at(
                spec,
                row.pointer,
                "E513",
                f"the row performing {effect.name!r} names no receipt (the reply field "
                "that proves it happened, e.g. refund_id)",
            )


def _raw(spec: Spec, effect: Effect) -> dict[str, Any]:
    raw = _doc(spec).data.get("effects", {}).get(effect.name, {})
    return raw if isinstance(raw, dict) else {}


def check_retry_owners(spec: Spec) -> Iterator[Diagnostic]:
    owners_by_adapter: dict[str, dict[str, str]] = {}
    for row, effect in effect_rows(spec):
        adapter = spec.adapters.get(effect.adapter)
        if adapter is None:
            continue
        actual = {"runner"} if effect.retry.max_attempts > 1 else set()
        if adapter.attempts > 1:
            actual.add("adapter")
        pointer = _col(row, "retry_owner")
        if len(actual) > 1:
            yield _at(
                spec,
                pointer,
                "E507",
                f"{effect.name!r} is retried by the runner ({effect.retry.max_attempts} attempts) "
                f"and by adapter {adapter.name!r} ({adapter.attempts} attempts): one layer must "
                "own retries",
            )
        declared = row.retry_owner
        owner = next(iter(actual)) if len(actual) == 1 else ("none" if not actual else None)
        if declared is not None and owner is not None and declared != owner:
            yield _at(
                spec,
                pointer,
                "E507",
                f"the row says retry_owner {declared!r} but {owner!r} retries {effect.name!r}",
            )
        if owner is not None and owner != "none":
            seen = owners_by_adapter.setdefault(adapter.name, {})
            for other_effect, other_owner in seen.items():
                if other_owner != owner:
                    yield _at(
                        spec,
                        pointer,
                        "E507",
                        f"dependency {adapter.name!r} is retried by the {other_owner} for "
                        f"{other_effect!r} and by the {owner} for {effect.name!r}",
                    )
                    break
            seen[effect.name] = owner
        calls = effect.retry.max_attempts * adapter.attempts * adapter.upstream_attempts
        if calls > MAX_CALLS_PER_EFFECT:
            layers = (
                f"{effect.retry.max_attempts} (runner) x {adapter.attempts} (adapter) x "
                f"{adapter.upstream_attempts} (upstream)"
            )
            yield _at(
                spec,
                pointer,
                "W508",
                f"{effect.name!r} may reach the provider {calls} times: {layers} > "
                f"{MAX_CALLS_PER_EFFECT}",
            )


def check_compensation(spec: Spec) -> Iterator[Diagnostic]:
    compensating = spec.compensating_effects
    for row, effect in effect_rows(spec):
        if effect.name in compensating:
            continue
        comp = row.compensation
        pointer = _col(row, "compensation")
        if comp is None and spec.is_saga:
            yield _at(
                spec,
                row.pointer,
                "E509",
                f"saga step {effect.name!r} says nothing about undoing it: name the compensating "
                "effect, or write 'none: REASON' or 'impossible: REASON'",
            )
        elif comp is not None and comp.kind != "effect" and comp.reason is None:
            yield _at(
                spec,
                pointer,
                "E509",
                f"'{comp.kind}' needs a reason: '{comp.kind}: WHY' (the operator reads it)",
            )


def check_approvals(spec: Spec) -> Iterator[Diagnostic]:
    for approval in spec.approvals.values():
        effect = spec.effects.get(approval.effect)
        if effect is not None and approval.binds != "all":
            unbound = [a for a in effect.args if a not in approval.binds]
            if unbound:
                yield _at(
                    spec,
                    f"{approval.pointer}/binds",
                    "E510",
                    f"approval {approval.name!r} does not bind {', '.join(unbound)}: they could "
                    "change after the decision (bind 'all')",
                )
        if approval.expires_after is None:
            yield _at(
                spec,
                approval.pointer,
                "E511",
                f"approval {approval.name!r} never expires: a stale decision could run weeks "
                "later (add expires_after)",
            )
    for effect in spec.effects.values():
        if effect.approval is None:
            continue
        states = {row.state for row, e in effect_rows(spec) if e.name == effect.name}
        for row in spec.transitions:
            if row.next_state in states and "approval" not in row.durable_write:
                yield _at(
                    spec,
                    row.pointer,
                    "E515",
                    f"this row enters {row.next_state!r}, which performs {effect.name!r}, without "
                    f"recording approval {effect.approval!r} (durable_write: approval)",
                )


def check_operator_actions(spec: Spec) -> Iterator[Diagnostic]:
    for row in spec.transitions:
        target = spec.states.get(row.next_state)
        if target is None or target.kind != "operator_queue":
            continue
        if row.operator_action is None and target.operator_action is None:
            yield _at(
                spec,
                row.pointer,
                "W512",
                f"this row ends in operator queue {target.name!r} without an operator_action: "
                "say what the person should do",
            )


CHECKS: tuple[Check, ...] = (
    check_references,
    check_expressions,
    check_input_schema,
    check_graph,
    check_events,
    check_event_names,
    check_effect_states,
    check_idempotency_keys,
    check_retry_and_hope,
    check_retry_owners,
    check_compensation,
    check_approvals,
    check_operator_actions,
)


def lint(spec: Spec) -> list[Diagnostic]:
    """Every semantic finding in ``spec``, in no particular order."""
    found: list[Diagnostic] = []
    for check_fn in CHECKS:
        found.extend(check_fn(spec))
    return found
