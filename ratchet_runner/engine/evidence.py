"""The evidence an approval declares (``evidence.related_runs``): the other runs of the workflow
started with the same input value, and what each of them did.

When a run starts, the value of its input at each path its spec relates runs by is recorded
beside it (:func:`keys`: a digest of the value's normalised JSON, in the store's
``evidence_keys``, written with the run). :func:`related` reads the runs recorded with the same
value, newest first, with the operations of the declared effects each made: what a person
approving a refund needs to see that the order was refunded already. A plain read: nothing
here writes, and nothing is computed that the spec does not declare.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..spec.model import Approval, Spec
from ..store.records import OperationRecord, RunRecord
from ..words import RunStatus
from .host import RunHost
from .identity import normalise, sha256


def value_at(data: Mapping[str, Any], path: str) -> Any:
    """The input's value at ``path`` (``input.order``); ``None`` when it has none there."""
    value: Any = data
    for part in path.split(".")[1:]:
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def digest_of(value: Any) -> str:
    """What ``evidence_keys`` keeps of a value: the SHA-256 of its normalised JSON, so that
    ``10.0`` and ``10`` are one value and any value fits the column."""
    return sha256(normalise(value))


def keys(spec: Spec, data: Mapping[str, Any]) -> dict[str, str]:
    """The values a new run with input ``data`` is related to others by: each path an
    approval of ``spec`` relates runs by, to the digest of the input's value there (a path
    with no value, or ``null``, relates the run to none)."""
    found: dict[str, str] = {}
    for approval in spec.approvals.values():
        declared = approval.related_runs
        if declared is None or declared.by in found:
            continue
        value = value_at(data, declared.by)
        if value is not None:
            found[declared.by] = digest_of(value)
    return found


def _operation(op: OperationRecord) -> dict[str, Any]:
    return {
        "effect": op.effect,
        "operation_id": op.operation_id,
        "role": op.role,
        "status": op.status,
        "args": op.args,
        "receipt": op.receipt,
    }


def related(host: RunHost, run: RunRecord, spec: Spec, approval: Approval) -> dict[str, Any] | None:
    """The related runs ``approval`` declares for ``run`` (None when it declares none): the
    path and the run's value there, and the other runs of the workflow started with that value
    (under any spec version that relates runs by the same path), newest first, at most the
    declared ``limit`` (``more``: there are others), each with where it is and the operations
    of the declared effects it registered (arguments, status, receipt)."""
    declared = approval.related_runs
    if declared is None:
        return None
    value = value_at(run.input, declared.by)
    shown: dict[str, Any] = {
        "by": declared.by,
        "value": value,
        "effects": list(declared.effects),
        "limit": declared.limit,
        "runs": [],
        "more": False,
    }
    if value is None:
        return shown
    found = host.store.related_runs(
        spec.name, declared.by, digest_of(value), exclude=run.id, limit=declared.limit + 1
    )
    shown["more"] = len(found) > declared.limit
    found = found[: declared.limit]
    made: dict[str, list[dict[str, Any]]] = {other.id: [] for other in found}
    if found:
        for op in host.store.operations(runs_in=list(made)):
            if op.effect in declared.effects:
                made[op.run_id].append(_operation(op))
    shown["runs"] = [
        {
            "run": other.id,
            "business_key": other.business_key,
            "state": other.state,
            "status": other.status,
            "created_at": other.created_at,
            "waiting_for": (other.context.get("pause") or {}).get("proposal")
            if other.status == RunStatus.WAITING
            else None,
            "effects": made[other.id],
        }
        for other in found
    ]
    return shown
