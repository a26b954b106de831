"""Spec versions: what a newer stored version of a workflow does to an older, unfinished run."""

from __future__ import annotations

from ..store.records import RunRecord
from ..words import ENDED, EventKind, RunStatus
from .runner import Runner


def migrate(runner: Runner, run: RunRecord) -> RunRecord:
    """Apply the newest stored spec version's ``on_version_change`` to an older, unfinished run:
    ``pin`` keeps it; ``revalidate`` moves it to the new version if its state still exists (its
    approvals, bound to the old policy, then no longer count); ``cancel`` cancels it."""
    if run.status in ENDED:
        return run
    latest = runner.latest_spec(run.workflow)
    current = runner.spec_of(run)
    if latest is None or latest[0] == run.spec_digest or latest[1] <= current.spec_version:
        return run
    newer = runner.spec_for_digest(latest[0])
    policy = newer.on_version_change
    if policy == "pin":
        return run
    change = runner.change(run)
    if policy == "cancel":
        change.status = RunStatus.CANCELLED
        change.event(EventKind.VERSION_CANCELLED, old=current.spec_version, new=newer.spec_version)
        return runner.store.commit(change)
    if run.state not in newer.states:
        change.status = RunStatus.NEEDS_PERSON
        change.event(
            EventKind.VERSION_STUCK,
            old=current.spec_version,
            new=newer.spec_version,
            reason=f"state {run.state!r} does not exist in the new version",
        )
        return runner.store.commit(change)
    change.spec_digest = newer.digest
    change.event(
        EventKind.REVALIDATED,
        old=current.spec_version,
        new=newer.spec_version,
        policy=str(newer.policy_version),
    )
    return runner.store.commit(change)
