"""The activation: what a run's guards, effect arguments and wait deadlines are evaluated against.

A plain function of the run as stored and the spec version it is pinned to: the input, the
receipts so far, the business key, the run's own facts, the approval last recorded, and whatever a
caller adds (``signal`` when a signal arrives, ``receipts`` as a step is about to record one).
"""

from __future__ import annotations

from typing import Any

from ..spec.model import Spec
from ..store.records import RunRecord


def activation(run: RunRecord, spec: Spec, **extra: Any) -> dict[str, Any]:
    """The activation that guards and arguments see; ``extra`` replaces keys of it."""
    return {
        "input": run.input,
        "receipts": dict(run.context.get("receipts", {})),
        "business_key": run.business_key,
        "run": {
            "id": run.id,
            "state": run.state,
            "version": run.version,
            "started_at": run.created_at,
            "spec_version": spec.spec_version,
            "policy_version": spec.policy_version,
            "attempts": int(run.context.get("budget_used", {}).get("attempts", 0)),
        },
        "approval": dict(run.context.get("approval", {})),
        "signal": {},
        **extra,
    }
