"""What the ended runs add up to, kept as they end, so that metrics and ``ratchet status`` read a
few summary rows instead of every finished run.

The ``tallies`` table (:data:`~ratchet_runner.store.tables.tallies`, since revision 0005) holds,
per workflow, how many runs ended with each status, and how many operations of each effect, role
and status those runs made, with their attempts. A run's commit that ends it (its status becomes
``done`` or ``cancelled``) adds the run and its operations as the commit leaves them, in the
same transaction (:func:`shift`); one that takes an ended run back (an operator moving a run
that ended in its queue) takes them out first, as they were. Forgetting a pruned run
(:func:`forget`) takes the run out, not its operations: the attempts are a counter of every call
ever made, and pruning a run does not unmake its calls. Pruning changes nothing here: a
tombstone is still an ended run. Runs not ended are never tallied: they are few, and the
queries that count them read them through indexes that hold only them (``ix_runs_status``).

A worker of a Ratchet older than revision 0005 keeps no tallies: runs it ends are not counted
until :func:`recount` (``ratchet db recount``) makes them again from the runs the store holds.

Every row is kept in one of :data:`SLOTS` copies (``slot``), chosen by the run's ID, and read
summed: on PostgreSQL an update holds its row until the transaction commits, and workers ending
runs of one workflow at once would otherwise queue on one row.

On PostgreSQL the commit that ends a run stays one statement: a last part adds the run and
its operations, read as the statement leaves them (those it did not touch from the table, those
it wrote from their ``RETURNING``: :mod:`~ratchet_runner.store.postgres`). One that takes an
ended run back, rare, goes through the writer's transaction. On SQLite the tally is the last
write of the trigger that applies a change (:mod:`~ratchet_runner.store.sqlite`), or one more
statement in the transaction of a change the trigger does not write.
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection, text

from ..words import ENDED, RunStatus
from .compiled import Executes
from .records import Change, RunRecord

#: How many rows each figure is spread over.
SLOTS = 16

_ON_CONFLICT = (
    "ON CONFLICT (workflow, effect, role, status, slot) DO UPDATE SET "
    "n = tallies.n + excluded.n, attempts = tallies.attempts + excluded.attempts"
)
_COLUMNS = "INSERT INTO tallies (workflow, effect, role, status, slot, n, attempts) "


#: A run and its operations, added (``:sign`` 1) or taken out (-1). The casts give PostgreSQL
#: the parameters' types; the outer ``WHERE true`` keeps SQLite from reading ``ON CONFLICT`` as
#: a join's ``ON``.
def fold_sql(
    workflow: str, status: str, slot: str, sign: str, run_id: str, when: str = "true"
) -> str:
    """The text of the statement that adds a run and its operations to the tallies (``sign``
    1) or takes them out (-1), each argument the SQL of that value (a parameter, or a
    trigger's ``NEW.…``), and nothing when ``when`` is false."""
    return (
        _COLUMNS + "SELECT * FROM ("
        f"SELECT CAST({workflow} AS TEXT) AS workflow, '' AS effect, '' AS role, "
        f"CAST({status} AS TEXT) AS status, CAST({slot} AS INTEGER) AS slot, "
        f"CAST({sign} AS BIGINT) AS n, CAST(0 AS BIGINT) AS attempts WHERE {when} "
        "UNION ALL "
        f"SELECT CAST({workflow} AS TEXT), effect, role, status, CAST({slot} AS INTEGER), "
        f"CAST({sign} AS BIGINT) * count(*), CAST({sign} AS BIGINT) * sum(attempts) "
        f"FROM operations WHERE run_id = {run_id} AND {when} GROUP BY effect, role, status"
        ") AS fold WHERE true " + _ON_CONFLICT
    )


_FOLD = text(fold_sql(":workflow", ":status", ":slot", ":sign", ":run_id"))

#: One figure added to (a negative ``:n`` takes it out).
_ADD = text(
    _COLUMNS + "VALUES (:workflow, :effect, :role, :status, :slot, :n, :attempts) " + _ON_CONFLICT
)

#: The ended statuses, as SQL (the words of :data:`~ratchet_runner.words.ENDED`).
_ENDED_SQL = ", ".join(f"'{status}'" for status in ENDED)

#: Every ended run's figures, from what the store holds (a new revision's first tallies).
_RECOUNT = (
    text(
        _COLUMNS + "SELECT workflow, '', '', status, 0, count(*), 0 FROM runs "
        f"WHERE status IN ({_ENDED_SQL}) GROUP BY workflow, status"
    ),
    text(
        _COLUMNS + "SELECT r.workflow, o.effect, o.role, o.status, 0, count(*), sum(o.attempts) "
        "FROM operations o JOIN runs r ON r.id = o.run_id "
        f"WHERE r.status IN ({_ENDED_SQL}) "
        "GROUP BY r.workflow, o.effect, o.role, o.status"
    ),
)


def slot(run_id: str) -> int:
    """The copy of each figure a run counts in."""
    return zlib.crc32(run_id.encode()) % SLOTS


def moves(change: Change, before: RunRecord, after: RunRecord) -> tuple[bool, bool]:
    """Whether committing ``change`` (``before`` → ``after``) takes the run out of the tallies
    (it had ended), and whether it adds it (it ends, or stays ended with its operations
    changed)."""
    was, now = before.status in ENDED, after.status in ENDED
    if was and now and before.status == after.status:
        changed = bool(change.new_operations or change.operation_updates)
        return changed, changed
    return was, now


def shift(conn: Executes, run: RunRecord, status: RunStatus | str, sign: int) -> None:
    """Within a write transaction: add (``sign`` 1) or take out (-1) ``run``, with ``status``,
    and its operations as the transaction sees them."""
    conn.execute(
        _FOLD,
        {
            "workflow": run.workflow,
            "status": str(status),
            "slot": slot(run.id),
            "sign": sign,
            "run_id": run.id,
        },
    )


def forget(conn: Connection, gone: Iterable[RunRecord]) -> None:
    """Within a write transaction: take the runs ``gone`` out of the ended runs' counts (their
    operations' attempts stay counted)."""
    counted = Counter((run.workflow, str(run.status), slot(run.id)) for run in gone)
    rows = [
        {
            "workflow": workflow,
            "effect": "",
            "role": "",
            "status": status,
            "slot": at,
            "n": -n,
            "attempts": 0,
        }
        for (workflow, status, at), n in sorted(counted.items())
    ]
    if rows:
        conn.execute(_ADD, rows)


def recount(conn: Connection) -> None:
    """Within a write transaction: the tallies made again from the runs and operations the
    store holds (a pruned run's operations not done were removed with its history, so its
    attempts count as the tombstone records them, and a forgotten run's not at all). On
    PostgreSQL the runs are locked against writes until the transaction ends (``SHARE``: reads
    go on), waiting at most 5 s for the lock, so that no run ends uncounted meanwhile."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql("SET LOCAL lock_timeout = '5s'")
        conn.exec_driver_sql("LOCK TABLE runs IN SHARE MODE")
    conn.execute(text("DELETE FROM tallies"))
    for statement in _RECOUNT:
        conn.execute(statement)


def differences(
    before: tuple[dict[tuple[str, str], int], dict[tuple[str, ...], Any]],
    after: tuple[dict[tuple[str, str], int], dict[tuple[str, ...], Any]],
) -> list[dict[str, Any]]:
    """What a recount changed, figure by figure (:func:`read`'s two results, before and
    after), in order."""
    found: list[dict[str, Any]] = []
    for workflow, status in sorted(set(before[0]) | set(after[0])):
        was, now = before[0].get((workflow, status), 0), after[0].get((workflow, status), 0)
        if was != now:
            found.append({"workflow": workflow, "status": status, "runs": [was, now]})
    for key in sorted(set(before[1]) | set(after[1])):
        was_ops, now_ops = before[1].get(key, (0, 0)), after[1].get(key, (0, 0))
        if was_ops != now_ops:
            workflow, effect, role, status = key
            found.append(
                {
                    "workflow": workflow,
                    "effect": effect,
                    "role": role,
                    "status": status,
                    "operations": [was_ops[0], now_ops[0]],
                    "attempts": [was_ops[1], now_ops[1]],
                }
            )
    return found


def read(conn: Connection) -> tuple[dict[tuple[str, str], int], dict[tuple[str, ...], Any]]:
    """The ended runs per (workflow, status), and their operations per (workflow, effect, role,
    status) as (operations, attempts), summed over the slots (figures at zero left out)."""
    ended: dict[tuple[str, str], int] = {}
    operations: dict[tuple[str, ...], tuple[int, int]] = {}
    rows = conn.execute(
        text(
            "SELECT workflow, effect, role, status, sum(n), sum(attempts) FROM tallies "
            "GROUP BY workflow, effect, role, status"
        )
    )
    for workflow, effect, role, status, n, attempts in rows:
        if int(n) == 0:
            continue
        if role == "":
            ended[(workflow, status)] = int(n)
        else:
            operations[(workflow, effect, role, status)] = (int(n), int(attempts or 0))
    return ended, operations
