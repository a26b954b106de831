"""The operator queue: the runs waiting for a person, with what to do and the evidence."""

from __future__ import annotations

from typing import Any

from ..store.records import RunRecord, latest_event
from .runner import Runner


def evidence(runner: Runner, run: RunRecord) -> dict[str, Any]:
    """What was done, what was undone, what is left, what failed, and what the provider
    answered when an adapter escalated an effect to a person (still not done)."""
    ops = runner.store.operations(run.id)
    done = [o for o in ops if o.role == "forward" and o.status == "done"]
    undo = {o.compensates: o for o in ops if o.role == "compensation"}
    history = runner.store.history(run.id)
    no_undo = {e.data.get("operation_id"): e.data for e in history if e.kind == "no_compensation"}
    done_ids = {o.operation_id for o in ops if o.status == "done"}
    return {
        "done": [
            {"effect": o.effect, "operation_id": o.operation_id, "receipt": o.receipt} for o in done
        ],
        "undone": [
            {"effect": u.effect, "operation_id": u.operation_id}
            for u in undo.values()
            if u.status == "done"
        ],
        "left": [
            {
                "effect": o.effect,
                "undo": undo[o.operation_id].effect,
                "status": undo[o.operation_id].status,
            }
            for o in done
            if o.operation_id in undo and undo[o.operation_id].status != "done"
        ],
        "not_undoable": [
            {
                "effect": o.effect,
                "undo": no_undo[o.operation_id].get("undo"),
                "reason": no_undo[o.operation_id].get("reason"),
            }
            for o in done
            if o.operation_id in no_undo
        ],
        "failed": [
            {"effect": o.effect, "status": o.status, "error": o.last_error, "attempts": o.attempts}
            for o in ops
            if o.status in ("exhausted", "unknown", "refused")
        ],
        "escalated": [
            {
                key: e.data.get(key)
                for key in ("effect", "operation_id", "possibly_applied", "reason", "evidence")
            }
            for e in history
            if e.kind == "escalated" and e.data.get("operation_id") not in done_ids
        ],
    }


def queue(runner: Runner, *, offset: int = 0, limit: int = 1000) -> list[dict[str, Any]]:
    """The runs waiting for a person, oldest first, with what to do and the evidence (a page
    of ``limit`` from ``offset``)."""
    now = runner.clock.now()
    waiting = runner.store.list_runs("needs_person", limit, offset=offset, oldest=True)
    items = []
    for run in waiting:
        history = runner.store.history(run.id)
        queued = latest_event(history, ("queued", "stuck"))
        items.append(
            {
                "run": run.id,
                "workflow": run.workflow,
                "business_key": run.business_key,
                "state": run.state,
                "operator_action": queued.get("operator_action") or queued.get("reason"),
                "age_seconds": round(now - run.updated_at, 1),
                "evidence": evidence(runner, run),
            }
        )
    return items
