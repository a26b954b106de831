"""Worker passes: fire the due timers, then claim runnable runs under leases and drive each on.

:func:`worker_pass` is one pass (``ratchet worker --once``); a pool's threads
(:mod:`ratchet_runner.worker.pool`) make the same moves one claim at a time, with a heartbeat.
:func:`fire_due` fires every timer that is due: firing claims the timer (``UPDATE … WHERE fired_at
IS NULL``) in the transaction that moves the run, so each timer fires once, whoever else is firing,
and never before its time by the runner's clock. :func:`advance_leased` takes one claimed run as
far as it goes under its :class:`~ratchet_runner.engine.lease.Lease`.

A worker drives only runs it resolves the same adapters for as the run started under
(:func:`~ratchet_runner.engine.resolution.refusal`): a run that recorded another binding is left,
unchanged, to a worker that has it (its lease given back, :class:`BindingMismatch` raised, and
the run skipped by this worker's next claims); a worker that has no binding at all, on a store
that is not a practice store, parks the run for a person with the reason, and says so when it
starts (:func:`unbound_warning`).

A worker drives only runs whose spec its lease is long enough for
(:func:`~ratchet_runner.engine.lease.lease_needed`): ``ratchet worker`` refuses to start when
its ``--lease`` is too short for the spec of a live run (:func:`lease_refusal`), and a run of a
spec met later that needs a longer lease is left, unchanged, to a worker that has one, as a run
of another binding is (:class:`LeaseTooShort` raised, the run skipped by the next claims): never
parked, since nothing is wrong with the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..engine.drive import drive, park
from ..engine.lease import Lease, lease_needed, owner_identity, validate_lease
from ..engine.resolution import refusal
from ..engine.runner import Runner
from ..engine.verify import check as verify_check
from ..engine.verify import is_verification
from ..engine.versions import migrate
from ..errors import (
    ApprovalError,
    BindingMismatch,
    CommandLineError,
    LeaseTooShort,
    RunError,
    SpecError,
    StepFailed,
    VersionConflict,
)
from ..store.records import RunRecord, TimerRecord
from ..words import EventKind, RunStatus


@dataclass(frozen=True)
class Fired:
    timer: TimerRecord
    run: RunRecord | None
    outcome: str  # fired · stale · raced; a verification's: duplicate · again · verified


def fire_due(runner: Runner, limit: int = 500) -> list[Fired]:
    """Fire every timer that is due now; each at most once, whoever else is firing."""
    fired: list[Fired] = []
    store = runner.store
    for timer in store.due_timers(runner.clock.now(), limit):
        run = store.get_run(timer.run_id)
        if run.status == RunStatus.PAUSED:
            continue  # an operator paused the run: the timer fires when it is resumed
        if is_verification(timer):  # a lookup of a retried operation, whatever the state
            outcome = verify_check(runner, timer, run)
            if outcome not in ("busy", "left"):
                fired.append(Fired(timer, None, outcome))
            continue
        if run.state != timer.state or run.status == RunStatus.CANCELLED:
            store.discard_timer(timer.id, runner.clock.now())
            fired.append(Fired(timer, run, "stale"))
            continue
        spec = runner.spec_of(run)
        change = runner.change(run)
        change.fire_timer = timer.id
        change.event(EventKind.TIMER, event=timer.event, due_at=timer.due_at)
        try:
            moved = runner.move(run, spec, timer.event, change)
        except VersionConflict:
            fired.append(Fired(timer, None, "raced"))
            continue
        fired.append(Fired(timer, moved, "fired"))
    return fired


@dataclass
class PassReport:
    """What one worker pass did."""

    fired: list[Fired] = field(default_factory=list)
    advanced: list[RunRecord] = field(default_factory=list)
    raced: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    #: Runs left, unchanged, to another worker, each with why: another binding, a longer lease.
    left: list[tuple[str, str]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "timers_fired": [
                {
                    "timer": f.timer.id,
                    "run": f.timer.run_id,
                    "event": f.timer.event,
                    "outcome": f.outcome,
                }
                for f in self.fired
            ],
            "runs_advanced": [
                {"run": r.id, "state": r.state, "status": r.status} for r in self.advanced
            ],
            "raced": self.raced,
            "failed": [{"run": run, "error": error} for run, error in self.failed],
            "left": [{"run": run, "reason": reason} for run, reason in self.left],
        }


def unbound_warning(runner: Runner) -> str | None:
    """What a worker says when it starts with ``runner`` resolving no adapter at all (no binding
    found, and a store that is not a practice store), or None when it resolves them. Such a
    worker parks each run it claims whose spec declares adapters (:func:`advance_leased`), and
    still drives runs of a spec without adapters and fires due timers: a warning, not a refusal."""
    missing = runner.resolution.missing
    if missing is None:
        return None
    return (
        f"warning: this worker, in {Path.cwd()}, has no binding: {missing}. Each run it claims "
        "whose spec declares adapters is parked for a person, nothing called (needs_person, a "
        "step_failed event, code R203); runs of a spec without adapters are driven, and due "
        "timers fired, as usual. Give the worker its binding (--bindings FILE or "
        "RATCHET_BINDINGS), then 'ratchet ops retry RUN --as NAME --role ROLE' for each parked run"
    )


def lease_refusal(runner: Runner, lease_seconds: float) -> CommandLineError | None:
    """Why a worker leasing runs for ``lease_seconds`` must not start: the spec version of a
    live run in ``runner``'s store needs a longer lease (:func:`lease_needed`), each such spec
    named with its effect and the ``--lease`` it needs; None when the lease covers them all.
    Such a worker would claim those runs only to leave them. A stored spec that no longer
    builds is passed over: no worker can drive its runs, whatever its lease, and claiming one
    says why."""
    needs = []
    for digest in runner.store.live_spec_digests():
        try:
            needs.append(lease_needed(runner.spec_for_digest(digest)))
        except SpecError:
            continue
    short = sorted(
        (need for need in needs if need is not None and not need.covered_by(lease_seconds)),
        key=lambda need: (need.workflow, need.spec_version),
    )
    if not short:
        return None
    if len(short) == 1:
        which = f"spec {short[0].spec}, which live runs use: {short[0].says(lease_seconds)}"
    else:
        which = "specs that live runs use: " + "; ".join(
            f"{need.spec}: {need.says(lease_seconds)}" for need in short
        )
    return CommandLineError(
        f"--lease {lease_seconds:g} is too short for {which}. Start the worker with --lease "
        f"{max(need.seconds for need in short)} or more; it claimed nothing"
    )


def advance_leased(runner: Runner, claimed: RunRecord, lease: Lease) -> RunRecord:
    """Take a run claimed under ``lease`` as far as it goes: every commit fenced by its token, no
    call once the lease can no longer be counted on; then give the lease back, unless the last
    commit did (a run that left ``running``). Raises what :meth:`Runner.advance` raises,
    :class:`BindingMismatch` for a run started under another binding and
    :class:`LeaseTooShort` for one whose spec needs a longer lease (each left unchanged)."""
    runner.leases.hold(lease)
    moved: RunRecord | None = None
    try:
        problem = refusal(runner.resolution, claimed, runner.spec_of(claimed))
        if isinstance(problem, BindingMismatch):
            raise problem
        if problem is not None:  # no binding at all: a person must give this worker one
            moved = park(runner, claimed.id, problem)
            raise StepFailed(f"run {claimed.id}: {problem}; it waits for a person", moved)
        moved = drive(runner, migrate(runner, claimed))
        return moved
    except StepFailed as failed:
        moved = failed.run  # parked: the commit that did it gave the lease back
        raise
    finally:
        runner.leases.drop(claimed.id)
        if moved is None or moved.lease_token is not None:
            runner.store.release(claimed.id, lease.token)


def worker_pass(
    runner: Runner, limit: int = 500, owner: str | None = None, lease_seconds: float = 30.0
) -> PassReport:
    """Fire every due timer, then claim each runnable run under a lease and take it as far as
    it goes, one at a time, until none is left (or ``limit`` runs). No heartbeat: each lease
    is counted on from its claim."""
    owner = owner or owner_identity()
    seconds = validate_lease(lease_seconds)
    report = PassReport(fired=fire_due(runner, limit))
    for _ in range(limit):
        asked = runner.options.monotonic()
        skip = [run_id for run_id, _ in report.left]
        claimed = runner.store.claim(owner, seconds, runner.clock.now(), skip=skip)
        if not claimed:
            break
        run = claimed[0]
        lease = Lease.asked(run.id, str(run.lease_token), seconds, asked)
        try:
            report.advanced.append(advance_leased(runner, run, lease))
        except VersionConflict:
            report.raced.append(run.id)
        except BindingMismatch:
            report.left.append((run.id, "it started under another binding"))
        except LeaseTooShort as short:
            report.left.append((run.id, f"{short}: left to a worker with a longer --lease"))
        except (RunError, ApprovalError) as exc:
            report.failed.append((run.id, str(exc)))
    return report
