"""The write-ahead record: what the commit made before a call adds to it.

Step 3 of the effect protocol (:mod:`ratchet_runner.engine.runner`): the operation's pending
record, with its first attempt counted (against the run's budget too), listed in the run's
``operations`` in the same commit; and, for a forward effect whose row declares an undo, that
compensation, registered with it, so that a done effect whose undo is unknown never exists. Plain
functions that add to a :class:`~ratchet_runner.store.store.Change`; the store writes it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..spec.model import Compensation, Effect
from ..store.records import (
    Change,
    NewOperation,
    OperationRecord,
    OperationUpdate,
    RunRecord,
)
from ..words import EventKind, OperationStatus
from .budget import count_attempt
from .identity import compensation_id, describe_action


def operation_fields(
    operation_id: str, effect: Effect, role: str, args: dict[str, Any], attempts: int
) -> NewOperation:
    """The columns of a pending operation record."""
    return {
        "operation_id": operation_id,
        "effect": effect.name,
        "role": role,
        "args": args,
        "fingerprint": None,  # that of args, worked out when read
        "status": OperationStatus.PENDING,
        "attempts": attempts,
    }


def write_ahead(
    change: Change,
    run: RunRecord,
    effect: Effect,
    fields: NewOperation,
    registered: OperationRecord | None,
    strategy: str = "ratchet",
) -> OperationRecord:
    """Add the pending record ``fields`` (:func:`operation_fields`, one attempt) to ``change``,
    as a new record or over the ``registered`` one, with its first attempt counted; return the
    record as the commit will store it. ``strategy``: what the step that writes it is called,
    which the history records (a step that is not the effect protocol's says so)."""
    operation_id = fields["operation_id"]
    if registered is None:
        change.new_operations.append(fields)
        base = OperationRecord(
            run_id=run.id,
            receipt=None,
            last_error=None,
            compensates=None,
            created_at=change.at,
            updated_at=change.at,
            **fields,
        )
    else:
        update: OperationUpdate = {
            "args": fields["args"],
            "fingerprint": fields["fingerprint"],
            "status": fields["status"],
            "attempts": fields["attempts"],
        }
        change.operation_updates.append((operation_id, update))
        base = replace(registered, updated_at=change.at, **update)
    change.event(
        EventKind.PENDING,
        operation_id=operation_id,
        effect=effect.name,
        role=fields["role"],
        action=describe_action(effect, fields["args"]),
        strategy=strategy,
    )
    change.event(EventKind.CALL, operation_id=operation_id, attempt=1)
    count_attempt(run, effect, change)
    list_operations(change, run, operation_id)
    return base


def list_operations(change: Change, run: RunRecord, *operation_ids: str) -> None:
    """List ``operation_ids`` in the run's ``operations`` (in the order written), in ``change``:
    an ID the run does not list has no record to read."""
    context = change.context if change.context is not None else run.context
    listed = list(context.get("operations", ()))
    listed += [i for i in operation_ids if i not in listed]
    change.context = {**context, "operations": listed}


def register_compensation(
    change: Change, run: RunRecord, comp: Compensation, operation_id: str, effect: str
) -> None:
    """Register ``comp``, the undo of forward operation ``operation_id`` (of ``effect``), in
    the change that writes its pending record; or record that it has none."""
    if comp.effect is None:
        _beside_pending(
            change,
            operation_id,
            EventKind.NO_COMPENSATION,
            operation_id=operation_id,
            effect=effect,
            undo=comp.kind,
            reason=comp.reason,
        )
        return
    comp_id = compensation_id(operation_id, comp.effect)
    change.new_operations.append(
        {
            "operation_id": comp_id,
            "effect": comp.effect,
            "role": "compensation",
            "args": {},
            "fingerprint": "",
            "status": OperationStatus.REGISTERED,
            "attempts": 0,
            "compensates": operation_id,
        }
    )
    list_operations(change, run, comp_id)
    _beside_pending(
        change,
        operation_id,
        EventKind.COMPENSATION_REGISTERED,
        operation_id=comp_id,
        effect=comp.effect,
        compensates=operation_id,
    )


def _beside_pending(change: Change, forward: str, kind: EventKind, **data: Any) -> None:
    """Record ``kind`` in ``change`` with the pending record of ``forward``: before the call
    the change counts, so that a history reads in the order the commit made it true (the undo is
    known before anything is sent)."""
    calls = [
        i
        for i, (written, fields) in enumerate(change.events)
        if written == EventKind.CALL and fields.get("operation_id") == forward
    ]
    change.events.insert(calls[0] if calls else len(change.events), (kind, data))
