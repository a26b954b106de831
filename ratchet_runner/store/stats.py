"""What the store says about all runs at once, for metrics: counts, ages and backlogs, grouped by
workflow (and state, or effect), never by run.

Each figure is one aggregate query, and none reads the history: the ended runs' figures come
from their tallies (:mod:`.tallies`, summary rows kept in the transactions that end runs), the
others from the runs not ended, the leases, the unknown outcomes and the failed undos, each
through an index that holds only those rows. A scrape costs a few statements whatever the
number of runs, and about the same time with a million finished runs as with a thousand
(``bench/bench_stats.py``; ``tests/store/test_stats_plans.py`` pins the plans). It is right
whichever process moved the runs.

``ratchet_effect_attempts`` counts every attempt made, a pruned or forgotten run's included:
it is a counter, and pruning a run does not unmake its calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, case, func, literal, select

from ..words import ENDED, RunStatus
from . import tallies
from .tables import (
    FAILED_UNDO,
    UNKNOWN_OPERATION,
    duplicates,
    lease_expired,
    operations,
    runs,
    unmoved,
)

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


#: The statuses of a run not ended, which the index ``ix_runs_status`` finds without reading the
#: ended ones (``status NOT IN …`` would read them all).
LIVE = tuple(status for status in RunStatus if status not in ENDED)


def gather(conn: Connection, now: float, db_now: Any, stuck_after: float) -> Stats:
    """The figures, read through ``conn``. ``db_now``: the database's clock as an SQL
    expression (leases expire by it); ``stuck_after``: seconds a runnable run may sit untouched
    before it counts as stuck."""
    stats = Stats(now)
    live = runs.c.status.in_(LIVE)
    ended, folded = tallies.read(conn)
    stats.runs.update(ended)
    # Each query over the live runs is grouped by status first, so that it walks an index led
    # by the status (only the live runs) rather than one in the order of the workflow (every
    # run): SQLite otherwise prefers the index that spares it the sort.
    for status, workflow, count in conn.execute(
        select(runs.c.status, runs.c.workflow, func.count())
        .where(live)
        .group_by(runs.c.status, runs.c.workflow)
    ):
        stats.runs[(workflow, status)] = int(count)
    age = literal(now) - runs.c.created_at
    bucket_counts = [func.sum(case((age <= bound, 1), else_=0)) for bound in AGE_BUCKETS]
    for row in conn.execute(
        select(runs.c.status, runs.c.workflow, func.count(), func.sum(age), *bucket_counts)
        .where(live)
        .group_by(runs.c.status, runs.c.workflow)
    ):
        _status, workflow, count, total, *buckets = row
        had, had_total, had_buckets = stats.ages.get(workflow, (0, 0.0, (0,) * len(AGE_BUCKETS)))
        stats.ages[workflow] = (
            had + int(count),
            had_total + float(total or 0.0),
            tuple(a + int(b or 0) for a, b in zip(had_buckets, buckets, strict=True)),
        )
    for _status, workflow, state, count, oldest in conn.execute(
        select(
            runs.c.status, runs.c.workflow, runs.c.state, func.count(), func.min(runs.c.updated_at)
        )
        .where(live)
        .group_by(runs.c.status, runs.c.workflow, runs.c.state)
    ):
        had, longest = stats.states.get((workflow, state), (0, 0.0))
        stats.states[(workflow, state)] = (
            had + int(count),
            max(longest, now - float(oldest), 0.0),
        )
    for _status, workflow, digest, state, count, oldest in conn.execute(
        select(
            runs.c.status,
            runs.c.workflow,
            runs.c.spec_digest,
            runs.c.state,
            func.count(),
            func.min(runs.c.updated_at),
        )
        .where(runs.c.status == RunStatus.WAITING)
        .group_by(runs.c.status, runs.c.workflow, runs.c.spec_digest, runs.c.state)
    ):
        stats.waiting[(workflow, digest, state)] = (int(count), max(0.0, now - float(oldest)))
    joined = operations.join(runs, operations.c.run_id == runs.c.id)
    for (workflow, effect, role, _status), (count, attempts) in folded.items():
        before = stats.attempts.get((workflow, effect, role), (0, 0))
        stats.attempts[(workflow, effect, role)] = (before[0] + count, before[1] + attempts)
    for _status, workflow, effect, role, count, attempts in conn.execute(
        select(
            runs.c.status,
            runs.c.workflow,
            operations.c.effect,
            operations.c.role,
            func.count(),
            func.sum(operations.c.attempts),
        )
        .select_from(joined)
        .where(live)
        .group_by(runs.c.status, runs.c.workflow, operations.c.effect, operations.c.role)
    ):
        before = stats.attempts.get((workflow, effect, role), (0, 0))
        stats.attempts[(workflow, effect, role)] = (
            before[0] + int(count),
            before[1] + int(attempts or 0),
        )
    run_workflow = select(runs.c.workflow).where(runs.c.id == operations.c.run_id).scalar_subquery()
    for target, where in (
        (stats.unknown, UNKNOWN_OPERATION),
        (stats.failed_undos, FAILED_UNDO),
    ):
        # a handful of rows, read from the partial index and counted here; each run's workflow
        # looked up by its key (joined and grouped in SQL, SQLite may walk every run instead)
        for workflow, effect in conn.execute(
            select(run_workflow, operations.c.effect).where(where)
        ):
            target[(workflow, effect)] = target.get((workflow, effect), 0) + 1
    for reason, where in (
        ("lease_expired", lease_expired(db_now)),
        ("unmoved", unmoved(now, stuck_after)),
    ):
        # the same
        for (workflow,) in conn.execute(select(runs.c.workflow).where(where)):
            stats.stuck[(workflow, reason)] = stats.stuck.get((workflow, reason), 0) + 1
    for workflow, effect, count in conn.execute(
        select(duplicates.c.workflow, duplicates.c.effect, func.count()).group_by(
            duplicates.c.workflow, duplicates.c.effect
        )
    ):
        stats.duplicates[(workflow, effect)] = int(count)
    return stats


def status_counts(conn: Connection) -> dict[str, int]:
    """How many runs have each status: the ended ones from the tallies, the others through
    ``ix_runs_status``."""
    counts: dict[str, int] = {}
    for (_workflow, status), n in tallies.read(conn)[0].items():
        counts[status] = counts.get(status, 0) + n
    for status, n in conn.execute(
        select(runs.c.status, func.count()).where(runs.c.status.in_(LIVE)).group_by(runs.c.status)
    ):
        counts[str(status)] = int(n)
    return counts
