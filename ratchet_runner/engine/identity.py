"""Stable names for changes: normalised arguments, operation IDs and approval digests.

Everything here is a pure function of business data, never of time, attempt or randomness, so
the same change gets the same name on every attempt, after a crash, in another process, on
another machine.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from typing import Any

from ..errors import ExpressionError, RunError
from ..spec.expressions import compile_expression
from ..spec.model import Effect, Row, Spec, canonical_json


def sha256(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def normalise(value: Any) -> Any:
    """Plain JSON with integral floats as integers (``10.0`` and ``10`` name the same amount);
    non-finite numbers are refused."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise RunError(f"{value} is not a usable argument value")
        return int(value) if value.is_integer() else value
    if isinstance(value, Mapping):
        return {str(k): normalise(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [normalise(v) for v in value]
    return str(value)


def first_difference(there: Any, here: Any, where: str = "") -> tuple[str, str, str] | None:
    """Where two JSON values first differ once normalised (:func:`normalise`: ``10.0`` is
    ``10``; ``true`` is not ``1``), keys taken in sorted order: the path to it (``where/amount``)
    and each side's value there as canonical JSON, ``absent`` where a side has none. None when
    they are the same value."""
    there, here = normalise(there), normalise(here)
    if canonical_json(there) == canonical_json(here):
        return None
    path = where
    while True:
        if isinstance(there, dict) and isinstance(here, dict):
            keys: list[Any] = sorted(set(there) | set(here))
        elif isinstance(there, list) and isinstance(here, list):
            keys = list(range(max(len(there), len(here))))
        else:
            return path, canonical_json(there), canonical_json(here)
        key = next(k for k in keys if _text(_part(there, k)) != _text(_part(here, k)))
        a, b = _part(there, key), _part(here, key)
        path = f"{path}/{key}" if path else str(key)
        if a is _ABSENT or b is _ABSENT:
            return path, _text(a), _text(b)
        there, here = a, b


_ABSENT = object()


def _part(value: dict[str, Any] | list[Any], key: Any) -> Any:
    if isinstance(value, dict):
        return value.get(key, _ABSENT)
    return value[key] if key < len(value) else _ABSENT


def _text(value: Any) -> str:
    return "absent" if value is _ABSENT else canonical_json(value)


def evaluate_args(effect: Effect, activation: Mapping[str, Any]) -> dict[str, Any]:
    """The effect's arguments, evaluated and normalised."""
    args: dict[str, Any] = {}
    for name, value in effect.args.items():
        if isinstance(value, str):
            try:
                value = compile_expression(value).evaluate(activation)
            except ExpressionError as exc:
                raise RunError(f"argument {name!r} of {effect.name!r}: {exc}") from None
        elif isinstance(value, dict) and "const" in value:
            value = value["const"]
        args[name] = normalise(value)
    return args


def _key_value(item: str, effect: Effect, args: dict[str, Any], ctx: Mapping[str, Any]) -> Any:
    head, _, rest = item.partition(".")
    if head == "effect":
        return effect.name
    if head == "business_key":
        return ctx["business_key"]
    if head == "args":
        return args if not rest else args.get(rest)
    value: Any = ctx.get(head)
    for part in rest.split(".") if rest else []:
        value = value.get(part) if isinstance(value, Mapping) else None
    return normalise(value)


def operation_id(
    spec: Spec, row: Row, effect: Effect, args: dict[str, Any], ctx: Mapping[str, Any]
) -> str:
    """SHA-256 of the canonical JSON of the workflow name and the row's idempotency-key fields."""
    fields = row.idempotency_key or ("business_key", "effect", "args")
    key = {item: _key_value(item, effect, args, ctx) for item in fields}
    return sha256({"workflow": spec.name, "key": key})


def compensation_id(forward_operation_id: str, effect: str) -> str:
    """The operation ID of the compensation registered for a forward operation."""
    return sha256({"compensates": forward_operation_id, "effect": effect})


def bound_args(spec: Spec, approval_name: str, args: dict[str, Any]) -> dict[str, Any]:
    approval = spec.approvals[approval_name]
    if approval.binds == "all":
        return dict(args)
    return {name: args.get(name) for name in approval.binds}


def approval_digest(
    spec: Spec, run_id: str, approval_name: str, effect: Effect, args: dict[str, Any]
) -> str:
    """What an approval binds: workflow, run, spec and policy versions, effect, exact arguments."""
    return sha256(
        {
            "workflow": spec.name,
            "run": run_id,
            "spec_version": spec.spec_version,
            "policy_version": str(spec.policy_version),
            "approval": approval_name,
            "effect": effect.name,
            "args": bound_args(spec, approval_name, args),
        }
    )


def describe_action(effect: Effect, args: dict[str, Any]) -> str:
    """``request_refund LK-793996 9.95 CAD RFD-LATE``: the effect and its argument values."""
    values = " ".join(
        canonical_json(v) if isinstance(v, dict | list) else str(v) for v in args.values()
    )
    return f"{effect.name} {values}".strip()
