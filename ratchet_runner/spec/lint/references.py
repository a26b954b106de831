"""Reference checks (E2xx/E3xx): names that must exist, expressions that must compile, and the
input schema, with a "did you mean" where a name is close to a known one.

The registry of every check is :data:`ratchet_runner.spec.lint.CHECKS`.

Over 400 lines: one concern, the checks that every name a spec uses exists, each with its own
message and "did you mean".
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import jsonschema
from jsonschema import Draft7Validator

from ...errors import Diagnostic, ExpressionError
from ..expressions import APPROVAL_FIELDS, RUN_FIELDS, Scope, check
from ..kinds import GENERIC, KINDS, operation_names, receipt_field
from ..model import Adapter, Contract, Effect, Spec
from .support import at, at_field, at_name, col, only_undoes


def _suggest(name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(known), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


# -- references ---------------------------------------------------------------------------------


def check_references(spec: Spec) -> Iterator[Diagnostic]:
    states, effects, approvals = spec.states, spec.effects, spec.approvals

    def state_ref(name: str, pointer: str) -> Iterator[Diagnostic]:
        if name not in states:
            yield at(
                spec,
                pointer,
                "E301",
                f"unknown state {name!r} (declare it under states:){_suggest(name, states)}",
            )

    def effect_ref(name: str, pointer: str, what: str = "effect") -> Iterator[Diagnostic]:
        if name not in effects:
            yield at(
                spec,
                pointer,
                "E302",
                f"unknown {what} {name!r}: declare it under effects:, or name a declared "
                f"effect{_suggest(name, effects)}",
            )

    yield from state_ref(spec.start, "/start")
    for row in spec.transitions:
        yield from state_ref(row.state, col(row, "state"))
        yield from state_ref(row.next_state, col(row, "next_state"))
        if row.external_effect is not None:
            yield from effect_ref(row.external_effect, col(row, "external_effect"))
        comp = row.compensation
        if comp is not None and comp.effect is not None and comp.effect not in effects:
            yield at(
                spec,
                col(row, "compensation"),
                "E302",
                f"unknown compensating effect {comp.effect!r}: declare it under effects:, or "
                f"write 'none: REASON' / 'impossible: REASON'{_suggest(comp.effect, effects)}",
            )
    for effect in effects.values():
        if effect.adapter not in spec.adapters:
            yield at(
                spec,
                f"{effect.pointer}/adapter",
                "E304",
                f"unknown adapter {effect.adapter!r}: declare it under adapters:, or name a "
                f"declared adapter{_suggest(effect.adapter, spec.adapters)}",
            )
        if effect.approval is not None and effect.approval not in approvals:
            yield _unknown_approval(spec, effect.pointer, effect.approval)
    for adapter in spec.adapters.values():
        if adapter.kind not in KINDS:
            yield at(
                spec,
                f"{adapter.pointer}/kind",
                "E304",
                f"unknown adapter kind {adapter.kind!r}: use one of {', '.join(KINDS)}"
                f"{_suggest(adapter.kind, KINDS) or _bind_instead(adapter.kind)}",
            )
    yield from _operation_refs(spec)
    undoes = only_undoes(spec)
    for approval in approvals.values():
        bound = effects.get(approval.effect)
        if bound is None:
            yield from effect_ref(approval.effect, f"{approval.pointer}/effect")
            continue
        if bound.approval != approval.name and bound.name not in undoes:
            # An effect that only undoes may not ask for any approval: E519 says so instead.
            yield at(
                spec,
                f"{approval.pointer}/effect",
                "E303",
                f"approval {approval.name!r} binds effect {bound.name!r}, but that effect does "
                f"not ask for it: add approval: {approval.name} to the effect",
            )
        if approval.binds != "all":
            for i, arg in enumerate(approval.binds):
                if arg not in bound.args:
                    yield at(
                        spec,
                        f"{approval.pointer}/binds/{i}",
                        "E308",
                        f"effect {bound.name!r} has no argument {arg!r}: bind only its arguments "
                        f"({', '.join(bound.args) or 'none'}), or bind 'all'",
                    )
    for state in states.values():
        if state.approval is not None and state.approval not in approvals:
            yield _unknown_approval(spec, state.pointer, state.approval)


def check_evidence(spec: Spec) -> Iterator[Diagnostic]:
    """An approval's declared evidence (``evidence.related_runs``) shows effects the spec
    declares (E315) and relates runs by an input field the input schema declares (E316): what
    the person deciding is shown must be what the runs record."""
    for approval in spec.approvals.values():
        related = approval.related_runs
        if related is None:
            continue
        for i, name in enumerate(related.effects):
            if name not in spec.effects:
                yield at(
                    spec,
                    f"{related.pointer}/effects/{i}",
                    "E315",
                    f"approval {approval.name!r} shows the operations of effect {name!r} as "
                    "evidence, but the spec declares no such effect: name a declared effect"
                    f"{_suggest(name, spec.effects)}",
                )
        undeclared = _undeclared_input(spec.input_schema, related.by)
        if undeclared is not None:
            part, walked, known = undeclared
            fields = ", ".join(sorted(known)) or "none"
            close = difflib.get_close_matches(part, known, n=1)
            hint = f" (did you mean {walked}.{close[0]}?)" if close else ""
            yield at(
                spec,
                f"{related.pointer}/by",
                "E316",
                f"approval {approval.name!r} relates runs by {related.by}, but the input schema "
                f"declares no field {part!r} under {walked} (fields: {fields}): relate them by "
                f"a declared field{hint}, or declare it in the input schema",
            )


def _undeclared_input(schema: Any, path: str) -> tuple[str, str, list[str]] | None:
    """Where the input schema stops declaring the field ``path`` (``input.order``) names: the
    part it lacks, the path above it, and the fields declared there; None when it declares it.
    Each level must list the next part under ``properties``: a free-form object declares no
    field of its own."""
    node, walked = schema, "input"
    for part in path.split(".")[1:]:
        props = node.get("properties") if isinstance(node, dict) else None
        known = [str(name) for name in props] if isinstance(props, dict) else []
        if not isinstance(props, dict) or part not in props:
            return part, walked, known
        node, walked = props[part], f"{walked}.{part}"
    return None


def _bind_instead(kind: str) -> str:
    """How an implementation a spec names as a kind (a plugin's, a factory's) is named instead."""
    return (
        "; a plugin or a python factory is not a kind: declare the adapter with the kind it "
        "stands for in practice (noop, service, ...) and bind it to the implementation in a "
        f'binding file (implementation = "{kind}")'
    )


def _operation_refs(spec: Spec) -> Iterator[Diagnostic]:
    """E309: an effect names an operation its adapter has: one its contract declares, when the
    adapter has one (:func:`_contract_refs`), else one its practice service has (for the
    generic ``service``, one its adapter declares under ``config.operations``)."""
    for declared in spec.adapters.values():
        yield from _practice_contract(spec, declared)
    for effect in spec.effects.values():
        adapter = spec.adapters.get(effect.adapter)
        if adapter is not None and adapter.operations is not None:
            yield from _contract_refs(spec, effect, adapter.name, adapter.operations)
            continue
        offered = None if adapter is None else operation_names(adapter.kind, adapter.config)
        if adapter is None or offered is None or effect.operation in offered:
            continue
        yield at(
            spec,
            f"{effect.pointer}/operation",
            "E309",
            f"{_lacks(adapter, effect.operation, offered)}{_suggest(effect.operation, offered)}",
        )


def _lacks(adapter: Adapter, operation: str, offered: tuple[str, ...]) -> str:
    if adapter.kind == GENERIC:
        return (
            f"adapter {adapter.name!r} declares no operation {operation!r}: declare it under "
            f"adapters.{adapter.name}.config.operations, with dedupe: true or false"
        )
    return (
        f"the practice world's {adapter.kind} (adapter {adapter.name!r}) has no operation "
        f"{operation!r}: use one of {', '.join(offered)}"
    )


def _practice_contract(spec: Spec, adapter: Adapter) -> Iterator[Diagnostic]:
    """A contract of an adapter whose kind the practice world serves names only operations it
    has (E309), with the receipt field each returns there (E311)."""
    offered = operation_names(adapter.kind, adapter.config)
    for contract in (adapter.operations or {}).values():
        if offered is not None and contract.name not in offered:
            yield at_name(
                spec,
                contract.pointer,
                "E309",
                f"{_lacks(adapter, contract.name, offered)}{_suggest(contract.name, offered)}",
            )
            continue
        returned = receipt_field(adapter.kind, contract.name) if offered is not None else None
        if contract.receipt is not None and returned is not None and contract.receipt != returned:
            yield at(
                spec,
                f"{contract.pointer}/receipt",
                "E311",
                f"operation {contract.name!r} of the practice world's {adapter.kind} returns "
                f"receipt field {returned!r}, not {contract.receipt!r}",
            )


def _contract_refs(
    spec: Spec, effect: Effect, adapter: str, contract: Mapping[str, Contract]
) -> Iterator[Diagnostic]:
    """An effect on an adapter with a contract: its operation declared (E309), its arguments
    those the operation takes (E310), its receipt field the operation's (E311), and its
    reconcile lookup the one the contract names for the operation (E312)."""
    where = f"adapters.{adapter}.operations"
    declared = contract.get(effect.operation)
    if declared is None:
        yield at(
            spec,
            f"{effect.pointer}/operation",
            "E309",
            f"the contract of adapter {adapter!r} declares no operation {effect.operation!r}: "
            "declare "
            f"it under {where}, or use one of {', '.join(contract)}"
            f"{_suggest(effect.operation, contract)}",
        )
        return
    missing = [arg for arg in declared.args if arg not in effect.args]
    if missing:
        yield at_field(
            spec,
            effect.pointer,
            "args",
            "E310",
            f"effect {effect.name!r} does not pass {', '.join(map(repr, missing))}, which "
            f"operation {effect.operation!r} requires ({where}.{effect.operation}.args)",
        )
    takes = (*declared.args, *declared.optional_args)
    for name in effect.args:
        if name not in takes:
            yield at_name(
                spec,
                f"{effect.pointer}/args/{name}",
                "E310",
                f"operation {effect.operation!r} takes no argument {name!r}: it takes "
                f"{', '.join(takes) or 'none'} ({where}.{effect.operation}){_suggest(name, takes)}",
            )
    if declared.receipt is not None:
        named = [(f"{effect.pointer}/receipt", effect.receipt)] + [
            (col(row, "receipt"), row.receipt)
            for row in spec.transitions
            if row.external_effect == effect.name
        ]
        for pointer, receipt in named:
            if receipt is not None and receipt != declared.receipt:
                yield at(
                    spec,
                    pointer,
                    "E311",
                    f"operation {effect.operation!r} returns receipt field "
                    f"{declared.receipt!r} ({where}.{effect.operation}.receipt), not {receipt!r}",
                )
    if effect.reconcile is not None and effect.reconcile != declared.lookup:
        fix = (
            f"the contract names lookup {declared.lookup!r} for it: reconcile with that"
            if declared.lookup is not None
            else f"add lookup: {effect.reconcile} to {where}.{effect.operation} if the provider "
            "can find a change by its operation ID; if it cannot, the outcome of a lost reply "
            "cannot be learnt (reconcile: none, and E504 says what that costs)"
        )
        yield at(
            spec,
            f"{effect.pointer}/reconcile",
            "E312",
            f"effect {effect.name!r} reconciles {effect.operation!r} with lookup "
            f"{effect.reconcile!r}, but {fix}",
        )


# -- expressions --------------------------------------------------------------------------------

_EXPRESSION_HINTS = {
    "E305": "; fix the syntax (CEL compares with ==, !=, <, <=, >, >=, joins with && and ||, "
    "and quotes strings: 'CAD')",
    "E307": "; use a CEL function (size, int, double, string, matches, startsWith, endsWith, "
    "timestamp, duration, has)",
}


def expression_scopes(spec: Spec) -> dict[str, Scope]:
    """What each kind of expression may name (business key, args, guard, until), for ``spec``."""
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
        hint = _EXPRESSION_HINTS.get(exc.lint_code, "; name one of those, or declare it first")
        if "simplify it" in str(exc):
            hint = ""
        message = str(exc).removesuffix(f": {source}")  # the parser echoes the source
        yield at(spec, pointer, exc.lint_code, f"{message}{hint}")


def check_expressions(spec: Spec) -> Iterator[Diagnostic]:
    scopes = expression_scopes(spec)
    yield from _expression(spec, scopes["business_key"], spec.business_key, "/business_key")
    for row in spec.transitions:
        if row.guard is not None:
            yield from _expression(spec, scopes["guard"], row.guard, col(row, "guard"))
    for effect in spec.effects.values():
        for name, value in effect.args.items():
            if isinstance(value, str):
                pointer = f"{effect.pointer}/args/{name}"
                yield from _expression(spec, scopes["args"], value, pointer)
    for state in spec.states.values():
        if state.until is not None:
            yield from _expression(spec, scopes["until"], state.until, f"{state.pointer}/until")


_JSON_TYPES = ("array", "boolean", "integer", "null", "number", "object", "string")


def _brief(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:160]


def check_input_schema(spec: Spec) -> Iterator[Diagnostic]:
    try:
        Draft7Validator.check_schema(spec.input_schema)
    except jsonschema.SchemaError as exc:
        path = list(exc.absolute_path)
        where = "".join(f"/{p}" for p in path)
        if path and path[-1] == "type":
            problem = f"{exc.instance!r} is not a JSON Schema type: use {', '.join(_JSON_TYPES)}"
        else:
            problem = f"{exc.message}: write it as draft-07 JSON Schema"
        yield at(spec, f"/input{where}", "E205", f"the input schema is invalid: {problem}")
        return
    validator = Draft7Validator(spec.input_schema)
    for example in spec.examples.values():
        try:
            errors = list(validator.iter_errors(example.input))
        except Exception as exc:  # a $ref that points nowhere, or elsewhere
            yield at(
                spec,
                "/input",
                "E205",
                f"the input schema cannot be applied: {_brief(exc)}; a $ref must point inside "
                "the input schema (e.g. '#/definitions/NAME')",
            )
            return
        for error in errors:
            where = "".join(f"/{p}" for p in error.absolute_path)
            yield at(
                spec,
                f"/examples/{example.name}/input{where}",
                "E206",
                f"example {example.name!r}: {error.message}; make the example's input match "
                "the input schema (or fix the schema)",
            )


def _unknown_approval(spec: Spec, pointer: str, name: str) -> Diagnostic:
    """E303 at ``pointer``'s ``approval``: ``name`` is no declared approval."""
    return at(
        spec,
        f"{pointer}/approval",
        "E303",
        f"unknown approval {name!r}: declare it under approvals:, or name a "
        f"declared approval{_suggest(name, spec.approvals)}",
    )
