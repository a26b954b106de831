"""The operator queue: the decisions waiting, with what an approver needs to decide them, and
the runs waiting for a person, with what to do and the evidence.

The one read model of the queue, for the CLI (``ratchet queue``), the HTTP API and the console.
A decision waiting (:func:`decision`) carries the exact arguments and digest asked for, when the
pause expires and how long an approval given now would stay valid, whether approving in each
role would be taken (:func:`~ratchet_runner.engine.deciding.verdicts`, the checks approving
makes), and the evidence the approval declares (:mod:`~ratchet_runner.engine.evidence`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..store.records import RunRecord, latest_event
from ..words import GAVE_UP, EventKind, OperationStatus, RunStatus
from .approvals import pending_request
from .deciding import verdicts
from .evidence import related
from .runner import Runner


def evidence(runner: Runner, run: RunRecord) -> dict[str, Any]:
    """What was done, what was undone, what is left, what failed, and what the provider
    answered when an adapter escalated an effect to a person (still not done)."""
    ops = runner.store.operations(run.id)
    done = [o for o in ops if o.role == "forward" and o.status == OperationStatus.DONE]
    undo = {o.compensates: o for o in ops if o.role == "compensation"}
    history = runner.store.history(run.id)
    no_undo = {
        e.data.get("operation_id"): e.data for e in history if e.kind == EventKind.NO_COMPENSATION
    }
    done_ids = {o.operation_id for o in ops if o.status == OperationStatus.DONE}
    return {
        "done": [
            {"effect": o.effect, "operation_id": o.operation_id, "receipt": o.receipt} for o in done
        ],
        "undone": [
            {"effect": u.effect, "operation_id": u.operation_id}
            for u in undo.values()
            if u.status == OperationStatus.DONE
        ],
        "left": [
            {
                "effect": o.effect,
                "undo": undo[o.operation_id].effect,
                "status": undo[o.operation_id].status,
            }
            for o in done
            if o.operation_id in undo and undo[o.operation_id].status != OperationStatus.DONE
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
            if o.status in GAVE_UP
        ],
        "escalated": [
            {
                key: e.data.get(key)
                for key in ("effect", "operation_id", "possibly_applied", "reason", "evidence")
            }
            for e in history
            if e.kind == EventKind.ESCALATED and e.data.get("operation_id") not in done_ids
        ],
    }


def queue(runner: Runner, *, offset: int = 0, limit: int = 1000) -> list[dict[str, Any]]:
    """The runs waiting for a person, oldest first, with what to do and the evidence (a page
    of ``limit`` from ``offset``)."""
    now = runner.clock.now()
    waiting = runner.store.list_runs(RunStatus.NEEDS_PERSON, limit, offset=offset, oldest=True)
    items = []
    for run in waiting:
        history = runner.store.history(run.id)
        queued = latest_event(history, (EventKind.QUEUED, EventKind.STUCK))
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


def decision(
    runner: Runner,
    run: RunRecord,
    now: float,
    *,
    actor: str = "",
    roles: Sequence[str] | None = None,
    holding: Sequence[str] | None = None,
) -> dict[str, Any] | None:
    """What ``run`` waits for a decision on (None: nothing), for the person deciding at
    ``now``: the request (exact arguments, digest, the roles that may decide), when the pause
    expires (``pause_expires_at``), until when an approval given now would be valid
    (``approval_expires_at``), the verdict of approving as ``actor`` in each of ``roles`` (the
    roles the approval allows when None; with ``holding``, those of them the operator holds),
    and the declared ``evidence``."""
    asked = pending_request(runner, run)
    if asked is None:
        return None
    spec = runner.spec_of(run)
    approval = spec.approvals[asked.approval]
    if roles is None:
        roles = [r for r in asked.roles if holding is None or r in holding]
    due = [
        t.due_at
        for t in runner.store.timers(run.id)
        if t.state == run.state and t.event == "expired" and t.fired_at is None
    ]
    return {
        **asked.to_json(),
        "workflow": run.workflow,
        "business_key": run.business_key,
        "state": run.state,
        "age_seconds": round(now - run.updated_at, 1),
        "pause_expires_at": min(due) if due else None,
        "approval_expires_at": now + asked.expires_after if asked.expires_after else None,
        "verdicts": [v.to_json() for v in verdicts(runner, run, roles, actor, now)],
        "evidence": {"related_runs": related(runner, run, spec, approval)}
        if approval.related_runs is not None
        else {},
    }


def decisions(
    runner: Runner,
    *,
    offset: int = 0,
    limit: int = 1000,
    now: float | None = None,
    actor: str = "",
    roles: Sequence[str] | None = None,
    holding: Sequence[str] | None = None,
) -> tuple[list[dict[str, Any]], int]:
    """A page of the decisions waiting (:func:`decision`) at ``now`` (default: the runner's
    :meth:`~ratchet_runner.engine.runner.Runner.decision_now`, the time a decision is judged
    by), oldest first, of ``limit`` runs from ``offset``; and how many runs the page read (a
    page is full when it read ``limit``)."""
    if now is None:
        now = runner.decision_now()
    waiting = runner.store.list_runs(RunStatus.WAITING, limit, offset=offset, oldest=True)
    items = []
    for run in waiting:
        item = decision(runner, run, now, actor=actor, roles=roles, holding=holding)
        if item is not None:
            items.append(item)
    return items, len(waiting)
