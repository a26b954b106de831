"""Driving a run on after a change, and parking it when its step fails for good.

:func:`drive` is :meth:`~ratchet_runner.engine.runner.Runner.advance`, except that a step failing
with an error the run cannot recover from by itself moves the run to the operator queue, once
(:func:`park`), and that a run whose spec needs a longer lease than the one its driver holds is
not driven at all (:func:`short_lease`): that is the driver's fault, not the run's, and another
process may have the lease it needs. :func:`carry_on` drives on a run a command has just changed
and says what happened after the change instead of raising. :class:`Outcome` is what such a
command did.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.exc import SQLAlchemyError

from ..errors import LeaseTooShort, RatchetError, StepFailed, StoreError, VersionConflict
from ..store.records import RunRecord
from ..words import EventKind, RunStatus
from .lease import lease_needed
from .runner import Runner


@dataclass(frozen=True)
class Outcome:
    """What a lifecycle call did: the run afterwards, whether it changed, and why; ``then`` says
    what happened after the change, when the run could not be driven on as usual (another
    process carried it on, or its next step failed and it waits for a person)."""

    run: RunRecord
    changed: bool
    message: str
    then: str | None = None


def park(runner: Runner, run_id: str, error: BaseException) -> RunRecord:
    """Move a running run whose step failed with ``error`` to the operator queue, once, with the
    error as evidence; ``ratchet ops retry`` takes the step again (reconciling first)."""
    run = runner.store.get_run(run_id)
    if run.status != RunStatus.RUNNING:
        return run
    code = getattr(error, "code", "R000") if isinstance(error, RatchetError) else "R000"
    text = str(error) if isinstance(error, RatchetError) else f"{type(error).__name__}: {error}"
    change = runner.change(run)
    change.status = RunStatus.NEEDS_PERSON
    change.context = {
        **run.context,
        "wake_at": None,
        "failed_step": {"state": run.state, "code": code, "error": text},
    }
    change.event(EventKind.STEP_FAILED, state=run.state, code=code, error=text)
    change.event(
        EventKind.QUEUED,
        queue=run.state,
        operator_action=(
            f"the step in {run.state!r} failed: {text}. Fix the cause, then "
            f"'ratchet ops retry {run.id} --as NAME --role ROLE' takes the step again "
            "(reconciling any call on record first)"
        ),
    )
    return runner.store.commit(change)


def short_lease(runner: Runner, run: RunRecord) -> LeaseTooShort | None:
    """Why ``runner`` may not drive ``run``, a running run, under the lease it holds on it: its
    spec version needs a longer one (:func:`~ratchet_runner.engine.lease.lease_needed`); None
    when the lease is long enough, or when no lease is held or counted (nothing is checked)."""
    lease = runner.leases.get(run.id)
    if lease is None or lease.counted_until is None or run.status != RunStatus.RUNNING:
        return None
    need = lease_needed(runner.spec_of(run))
    if need is None or need.covered_by(lease.seconds):
        return None
    return need.refusal(lease.seconds)


def drive(runner: Runner, run: RunRecord) -> RunRecord:
    """:meth:`Runner.advance`, except that a step failing with an error the run cannot recover
    from by itself (a bad argument, an adapter kind with no implementation, an approval that no
    longer fits) moves the run to the operator queue once, with the error as evidence, and
    raises :class:`StepFailed`, instead of leaving it runnable to fail again and again. Races
    (:class:`VersionConflict`) and store failures are raised as they are: they are not the
    run's fault. Nor is a lease too short for the run's spec (:class:`LeaseTooShort`), raised
    before any step when :func:`short_lease` says so, or by a step before anything is committed
    or sent: the run is left as it is, to a process whose lease is long enough."""
    short = short_lease(runner, run)
    if short is not None:
        raise short
    try:
        return runner.advance(run)
    except (StoreError, SQLAlchemyError, LeaseTooShort):  # an outage, or this process's lease
        raise
    except Exception as exc:
        parked = park(runner, run.id, exc)
        raise StepFailed(f"run {run.id}: {exc}; it waits for a person", parked) from exc


def carry_on(runner: Runner, run: RunRecord) -> tuple[RunRecord, str | None]:
    """Drive on a run this process has just changed, and say what happened after the change
    instead of raising: the change itself stands whatever follows."""
    try:
        return drive(runner, run), None
    except StepFailed as failed:
        return failed.run, f"its next step failed and it waits for a person: {failed.__cause__}"
    except LeaseTooShort as short:  # the holder gives the lease back: a worker may take it
        try:
            now = runner.store.get_run(run.id)
        except StoreError:
            now = run
        return now, (
            f"this command's --lease is too short for this run's spec: {short}; the run is "
            "left to the workers (one whose --lease is long enough takes it)"
        )
    except VersionConflict as raced:
        try:
            now = runner.store.get_run(run.id)
        except StoreError:
            now = run
        return now, f"another process carried the run on ({raced})"
    except StoreError as failed:
        return run, f"the store failed while driving it on ({failed}); 'ratchet resume' goes on"
