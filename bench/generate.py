"""Generate large, valid specs for benchmarks."""

from __future__ import annotations

import yaml

HEADER = {
    "name": "big",
    "title": "A generated spec for benchmarks",
    "spec_version": 1,
    "policy_version": 1,
    "business_key": "input.ticket",
    "start": "s0",
    "input": {
        "type": "object",
        "required": ["ticket", "amount"],
        "properties": {"ticket": {"type": "string"}, "amount": {"type": "number"}},
    },
    "adapters": {"payments": {"kind": "payments"}},
}


def big_spec(rows: int) -> str:
    """A valid spec of about ``rows`` transition rows: a chain of effect states, four rows each
    (``ok`` with a guard, ``refused``, ``exhausted``, ``unknown``), ending in a success state."""
    steps = max(1, rows // 4)
    spec = dict(HEADER)
    spec["effects"] = {
        f"e{i}": {
            "adapter": "payments",
            "operation": "refund",
            "args": {"ticket": "input.ticket", "amount": "input.amount", "step": i},
            "reconcile": "lookup_refund",
            "retry": {"max_attempts": 3, "initial_backoff": "1s", "max_backoff": "30s"},
            "timeout": "10s",
        }
        for i in range(steps)
    }
    states: dict[str, object] = {f"s{i}": {"kind": "step"} for i in range(steps)}
    states["done"] = {"kind": "success"}
    states["queue"] = {"kind": "operator_queue", "operator_action": "Look at the evidence"}
    spec["states"] = states
    table = []
    for i in range(steps):
        nxt = f"s{i + 1}" if i + 1 < steps else "done"
        table.append(
            {
                "state": f"s{i}",
                "event": "ok",
                "guard": f"input.amount >= {i}.0 || has(receipts.e{i}.refund_id)",
                "next_state": nxt,
                "durable_write": ["pending", "receipt"],
                "external_effect": f"e{i}",
                "idempotency_key": ["business_key", "effect", "args"],
                "receipt": "refund_id",
                "retry_owner": "runner",
                "compensation": "none: generated",
            }
        )
        for event in ("refused", "exhausted", "unknown"):
            table.append(
                {
                    "state": f"s{i}",
                    "event": event,
                    "next_state": "queue",
                    "durable_write": "outcome",
                }
            )
    spec["transitions"] = table
    return yaml.safe_dump(spec, sort_keys=False, width=200, default_flow_style=None)
