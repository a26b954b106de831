"""What the store says about all runs at once, for metrics: counts, ages and backlogs, grouped by
workflow (and state, or effect), never by run.

Each figure is one aggregate query over the store's tables, so a scrape costs a few statements
whatever the number of runs, and is right whichever process moved the runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, and_, case, func, literal, select

from ..words import ENDED, OperationStatus, RunStatus
from .tables import duplicates, lease_expired, operations, runs, unmoved

#: Upper bounds of the run-age histogram's buckets, in seconds (a minute to 30 days).
AGE_BUCKETS = (60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 86400.0, 7 * 86400.0, 30 * 86400.0)


@dataclass
class Stats:
    """The figures at one moment (``now``, by the caller's clock; leases by the database's)."""

    now: float
    #: (workflow, status) → runs
    runs: dict[tuple[str, str], int] = field(default_factory=dict)
    #: workflow → (runs not ended, sum of their ages, count at or under each of AGE_BUCKETS)
    ages: dict[str, tuple[int, float, tuple[int, ...]]] = field(default_factory=dict)
    #: (workflow, state) → (runs not ended in it, the longest time one has been in it)
    states: dict[tuple[str, str], tuple[int, float]] = field(default_factory=dict)
    #: (workflow, spec digest, state) → (runs waiting in it, the longest wait): the caller, who
    #: can read the spec, tells which states wait for a decision
    waiting: dict[tuple[str, str, str], tuple[int, float]] = field(default_factory=dict)
    #: (workflow, effect, role) → (operations, attempts in all)
    attempts: dict[tuple[str, str, str], tuple[int, int]] = field(default_factory=dict)
    #: (workflow, effect) → operations whose outcome is unknown (a reconcile is owed)
    unknown: dict[tuple[str, str], int] = field(default_factory=dict)
    #: (workflow, effect) → compensations that failed for good (refused, out of attempts)
    failed_undos: dict[tuple[str, str], int] = field(default_factory=dict)
    #: (workflow, reason) → runs nobody is moving
    stuck: dict[tuple[str, str], int] = field(default_factory=dict)
    #: (workflow, effect) → times a lookup found an operation's change made more than once
    duplicates: dict[tuple[str, str], int] = field(default_factory=dict)


def gather(conn: Connection, now: float, db_now: Any, stuck_after: float) -> Stats:
    """The figures, read through ``conn``. ``db_now``: the database's clock as an SQL
    expression (leases expire by it); ``stuck_after``: seconds a runnable run may sit untouched
    before it counts as stuck."""
    stats = Stats(now)
    live = runs.c.status.not_in(ENDED)
    for workflow, status, count in conn.execute(
        select(runs.c.workflow, runs.c.status, func.count()).group_by(
            runs.c.workflow, runs.c.status
        )
    ):
        stats.runs[(workflow, status)] = int(count)
    age = literal(now) - runs.c.created_at
    bucket_counts = [func.sum(case((age <= bound, 1), else_=0)) for bound in AGE_BUCKETS]
    for row in conn.execute(
        select(runs.c.workflow, func.count(), func.sum(age), *bucket_counts)
        .where(live)
        .group_by(runs.c.workflow)
    ):
        workflow, count, total, *buckets = row
        counted = tuple(int(b or 0) for b in buckets)
        stats.ages[workflow] = (int(count), float(total or 0.0), counted)
    for workflow, state, count, oldest in conn.execute(
        select(runs.c.workflow, runs.c.state, func.count(), func.min(runs.c.updated_at))
        .where(live)
        .group_by(runs.c.workflow, runs.c.state)
    ):
        stats.states[(workflow, state)] = (int(count), max(0.0, now - float(oldest)))
    for workflow, digest, state, count, oldest in conn.execute(
        select(
            runs.c.workflow,
            runs.c.spec_digest,
            runs.c.state,
            func.count(),
            func.min(runs.c.updated_at),
        )
        .where(runs.c.status == RunStatus.WAITING)
        .group_by(runs.c.workflow, runs.c.spec_digest, runs.c.state)
    ):
        stats.waiting[(workflow, digest, state)] = (int(count), max(0.0, now - float(oldest)))
    joined = operations.join(runs, operations.c.run_id == runs.c.id)
    for workflow, effect, role, count, attempts in conn.execute(
        select(
            runs.c.workflow,
            operations.c.effect,
            operations.c.role,
            func.count(),
            func.sum(operations.c.attempts),
        )
        .select_from(joined)
        .group_by(runs.c.workflow, operations.c.effect, operations.c.role)
    ):
        stats.attempts[(workflow, effect, role)] = (int(count), int(attempts or 0))
    for target, where in (
        (stats.unknown, operations.c.status == OperationStatus.UNKNOWN),
        (
            stats.failed_undos,
            and_(
                operations.c.role == "compensation",
                operations.c.status.in_((OperationStatus.REFUSED, OperationStatus.EXHAUSTED)),
            ),
        ),
    ):
        for workflow, effect, count in conn.execute(
            select(runs.c.workflow, operations.c.effect, func.count())
            .select_from(joined)
            .where(where)
            .group_by(runs.c.workflow, operations.c.effect)
        ):
            target[(workflow, effect)] = int(count)
    for reason, where in (
        ("lease_expired", lease_expired(db_now)),
        ("unmoved", unmoved(now, stuck_after)),
    ):
        for workflow, count in conn.execute(
            select(runs.c.workflow, func.count()).where(where).group_by(runs.c.workflow)
        ):
            stats.stuck[(workflow, reason)] = int(count)
    for workflow, effect, count in conn.execute(
        select(duplicates.c.workflow, duplicates.c.effect, func.count()).group_by(
            duplicates.c.workflow, duplicates.c.effect
        )
    ):
        stats.duplicates[(workflow, effect)] = int(count)
    return stats
