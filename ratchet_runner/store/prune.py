"""A finished run compacted to its tombstone, in the writer's transaction (see
:meth:`~ratchet_runner.store.store.Store.prune`).

What stays of a pruned run: its ``runs`` row (its ID, workflow, business key, final state and
status, its times, ``pruned_at``; its context cut to what answers for it: receipts, operations
and the ``pruned`` record with its input's digest; its input emptied), its done operations
(operation ID, effect, receipt, status, attempts, when; arguments emptied), its evidence keys
(an approver still sees that it ran), and one ``pruned`` event. The rest of its history, its
approvals, timers, signals, duplicate records and operations that were not done are removed.
The business key's unique row stays, so starting the same work again finds the run, not a
new one: the effect is never made twice, and another input for it is still refused.

A tombstone is kept forever, unless the workflow's ``retention.operation_ids`` says otherwise:
past it, :func:`forget` removes the run whole (its row, its operations, its evidence keys and
its ``pruned`` event), and the same business key started again is a new run.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, bindparam, delete, func, insert, select, update

from ..words import ENDED, EventKind, OperationStatus
from . import tallies
from .compact import entries
from .context import RunContext, stored
from .records import RunRecord, fingerprint
from .tables import (
    approvals,
    duplicates,
    evidence_keys,
    history,
    operations,
    runs,
    signals,
    timers,
)

#: The tables of a run's rows removed whole by a prune.
REMOVED = (approvals, timers, signals, duplicates)


def prune(
    conn: Connection, tombstones: Sequence[tuple[RunRecord, RunContext]], now: float
) -> list[str]:
    """Compact each run to its tombstone within ``conn``'s transaction; a run that moved on
    since it was read is left. Returns the IDs pruned."""
    pruned: list[str] = []
    for run, context in tombstones:
        moved = conn.execute(
            update(runs)
            .where(
                runs.c.id == run.id,
                runs.c.version == run.version,
                runs.c.pruned_at.is_(None),
                runs.c.status.in_(tuple(ENDED)),
            )
            .values(input={}, context=stored(context), pruned_at=now, version=run.version + 1)
        )
        if moved.rowcount != 1:
            continue
        pruned.append(run.id)
        removed = conn.execute(
            select(func.coalesce(func.sum(func.json_array_length(history.c.events)), 0)).where(
                history.c.run_id == run.id
            )
        ).scalar_one()
        conn.execute(delete(history).where(history.c.run_id == run.id))
        data = {**dict(context.get("pruned") or {}), "events": int(removed)}
        conn.execute(
            insert(history).values(
                run_id=run.id,
                version=run.version + 1,
                at=now,
                events=entries([(EventKind.PRUNED, data)]),
            )
        )
    if not pruned:
        return pruned
    for table in REMOVED:
        conn.execute(delete(table).where(table.c.run_id.in_(pruned)))
    conn.execute(
        delete(operations).where(
            operations.c.run_id.in_(pruned), operations.c.status != OperationStatus.DONE
        )
    )
    derived = conn.execute(
        select(operations.c.operation_id, operations.c.args).where(
            operations.c.run_id.in_(pruned), operations.c.fingerprint.is_(None)
        )
    ).all()
    if derived:  # the fingerprint of the arguments about to be emptied is kept
        conn.execute(
            update(operations)
            .where(operations.c.operation_id == bindparam("b_id"))
            .values(fingerprint=bindparam("b_fingerprint")),
            [{"b_id": i, "b_fingerprint": fingerprint(args)} for i, args in derived],
        )
    conn.execute(update(operations).where(operations.c.run_id.in_(pruned)).values(args={}))
    return pruned


def forget(conn: Connection, tombstones: Sequence[RunRecord]) -> list[str]:
    """Remove each pruned run whole within ``conn``'s transaction (its tombstone past its
    workflow's ``retention.operation_ids``); one that changed since it was read is left.
    Returns the IDs forgotten."""
    ids = [run.id for run in tombstones]
    if not ids:
        return []
    still = {
        str(row[0])
        for row in conn.execute(
            select(runs.c.id).where(
                runs.c.id.in_(ids),
                runs.c.pruned_at.is_not(None),
                runs.c.version.in_({run.version for run in tombstones}),
            )
        )
    }
    gone = [run.id for run in tombstones if run.id in still]
    if gone:
        tallies.forget(conn, [run for run in tombstones if run.id in still])
        for table in (history, operations, evidence_keys):
            conn.execute(delete(table).where(table.c.run_id.in_(gone)))
        conn.execute(delete(runs).where(runs.c.id.in_(gone)))
    return gone
