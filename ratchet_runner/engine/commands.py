"""What a command does to a run — start, decide, signal, resume, operate — under the run's lease.

Every process that may call a provider for a run holds that run's lease for the call: a worker
that claimed it, and a command as much as a worker. A command takes the run's lease
(:meth:`Store.claim_run`) *before* it changes the run, makes its change and drives the run on
with every commit fenced by that lease, keeps the lease alive with a heartbeat while it works, and
gives it back at the end. So a worker (or a second command) cannot claim the run while the
command's request may still be in flight, find nothing yet on the provider's side, and call
again: it waits until the lease is released, or has expired — and a lease is only trusted for a
call that ends (by its timeout) well before it does
(:meth:`~ratchet_runner.engine.lease.Lease.secure`).

A command that finds the run held by another live process does not race it: it waits a moment
(:data:`PATIENCE`) for the lease to come free, and otherwise says who is carrying the run on and
changes nothing (:class:`RunBusy`; a ``resume`` reports it as a normal outcome). See
``docs/explanation/leases.md``.

A command that would drive a run through other adapters than the ones it started under (another
binding, or none where one is needed: :func:`~ratchet_runner.engine.resolution.refusal`) changes
nothing and raises the reason (``BindingMismatch``, ``BindingError``), before it takes the lease.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

from ..errors import RunBusy, StoreError, VersionConflict
from ..spec.model import Spec
from ..store.records import RunRecord
from ..words import ENDED, RunStatus
from .controls import operate as carry_out
from .deciding import decide as record_decision
from .drive import carry_on
from .lease import Lease, owner_identity, validate_lease
from .resolution import refusal
from .runner import Runner
from .signals import send_signal
from .versions import migrate

#: How long a command leases a run for by default; a heartbeat renews it while the command works,
#: so this is how long a killed command keeps others off the run.
COMMAND_LEASE = 30.0

#: How long a command waits for another process's lease on the run to come free.
PATIENCE = 3.0

#: What a command that records without driving says of the run.
LEFT = "left to the workers"

#: Statuses a command has nothing to drive in: it reads the run and takes no lease.


@dataclass(frozen=True)
class CommandResult:
    """What a command did: the run afterwards, whether this command changed it, what it did,
    and what happened after (``then``: another process carried the run on, or its next step
    failed and it waits for a person). ``carried_on_by`` names the process that holds the run
    when this command handed over to it."""

    run: RunRecord
    changed: bool
    message: str
    then: str | None = None
    carried_on_by: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "changed": self.changed,
            "message": self.message,
            "then": self.then,
            "carried_on_by": self.carried_on_by,
        }


def command_owner(command: str) -> str:
    """The lease owner a command records: ``ratchet COMMAND host:pid:nonce``."""
    return f"ratchet {command} {owner_identity()}"


# -- the lease a command holds --------------------------------------------------------------


@contextmanager
def holding(
    runner: Runner,
    run: RunRecord,
    owner: str,
    lease_seconds: float = COMMAND_LEASE,
    patience: float = PATIENCE,
) -> Iterator[RunRecord]:
    """Hold the lease on ``run`` for the block, renewed by a heartbeat thread, with every commit
    ``runner`` makes to the run fenced by it, and give it back at the end (unless a commit that
    took the run out of ``running`` already did). Yields the run to act on.

    A running run (one that may have a call in flight) is claimed first, waiting up to
    ``patience`` seconds for another holder to release it (else :class:`RunBusy`), so anything
    this command reconciles is looked up only once no one else may still be calling. A run
    that is not running has no call in flight: its lease is taken by the first commit this
    command makes to it (a refused request changes nothing at all), and that commit fails if
    another live process holds it."""
    lease_seconds = validate_lease(lease_seconds)
    run_id = run.id
    monotonic = runner.options.monotonic
    asked = monotonic()
    give_up = asked + max(0.0, patience)
    while run.status == RunStatus.RUNNING:
        asked = monotonic()
        try:
            run = runner.store.claim_run(run_id, owner, lease_seconds, runner.clock.now())
            break
        except (RunBusy, VersionConflict):
            if monotonic() >= give_up:
                raise
            time.sleep(0.05)
            run = runner.store.get_run(run_id)  # the holder may have finished it meanwhile
    if run.lease_owner == owner:
        lease = Lease.asked(run_id, str(run.lease_token), lease_seconds, asked)
    else:  # not running: nothing is in flight; the first commit takes the lease
        lease = Lease.asked(run_id, uuid.uuid4().hex, lease_seconds, asked, take_as=owner)
    runner.leases.hold(lease)
    stop = threading.Event()
    beat = threading.Thread(
        target=heartbeat,
        args=(runner, lease, stop),
        name=f"ratchet-lease-{run_id}",
        daemon=True,
    )
    if runner.options.heartbeat:
        beat.start()
    try:
        yield run
    finally:
        stop.set()
        if beat.is_alive():
            beat.join()
        runner.leases.drop(run_id)
        with suppress(StoreError):  # the store is away: the lease runs out by itself
            runner.store.release(run_id, lease.token)  # a no-op if a commit already gave it back


def heartbeat(runner: Runner, lease: Lease, stop: threading.Event) -> None:
    """Renew ``lease`` every third of its length until ``stop`` is set, and record each renewal
    in the runner's leases (while it still holds that lease)."""
    while not stop.wait(lease.seconds / 3):
        asked = runner.options.monotonic()
        try:
            renewed = runner.store.renew(lease.run_id, lease.token, lease.seconds)
        except Exception:  # the store is away: the lease runs out; no call is started past it
            continue
        if renewed:
            runner.leases.renewed(lease.run_id, lease.token, asked)


@dataclass(frozen=True)
class _Hold:
    """How long a command leases the run, how long it waits for a run another process holds,
    and in whose name (default: the command's)."""

    lease_seconds: float
    patience: float
    owner: str | None = None


def _act(
    runner: Runner,
    run_ref: str,
    command: str,
    act: Callable[[RunRecord], CommandResult],
    hold: _Hold,
    *,
    only_running: bool = False,
    calls_out: bool = True,
) -> CommandResult:
    """Carry out ``act`` on the run under its lease (``hold``): a run that has ended (or, with
    ``only_running``, one that is not running: nothing would be called) is read, not leased.
    An act that may call out for the run (``calls_out``) is refused, with nothing changed, when
    this runner's adapters are not the ones the run started under, or one cannot be made."""
    run = runner.store.resolve(run_ref)
    if run.status in ENDED or (only_running and run.status != RunStatus.RUNNING):
        return act(run)
    if calls_out:
        spec = runner.spec_of(run)
        problem = refusal(runner.resolution, run, spec)
        if problem is not None:
            raise problem
        runner.make_adapters(spec)
    owner = hold.owner or command_owner(command)
    with holding(runner, run, owner, hold.lease_seconds, hold.patience) as held:
        return act(held)


# -- the commands ---------------------------------------------------------------------------


def start(
    runner: Runner,
    spec: Spec,
    text: str,
    data: dict[str, Any],
    *,
    lease_seconds: float = COMMAND_LEASE,
    patience: float = PATIENCE,
    owner: str | None = None,
    before_drive: Callable[[RunRecord, bool], None] | None = None,
    drive: bool = True,
) -> tuple[CommandResult, bool]:
    """``ratchet run``: start a run (or find the one with the same business key and input:
    another input is :class:`~ratchet_runner.errors.InputConflict`) and drive it until it
    waits, ends or needs a person; without ``drive``, leave it to the workers, whom its
    creation wakes. ``before_drive(run, created)`` runs after the run exists and before this
    command calls anything (the CLI seeds the practice world there). Returns the result and
    whether the run was created."""
    started, created = runner.start(spec, text, data, wake=not drive)
    if before_drive is not None:
        before_drive(started, created)
    made = "started" if created else "already existed for this business key"
    if not drive:
        return CommandResult(started, created, f"run {started.id} {made}; {LEFT}"), created
    try:
        result = _act(
            runner,
            started.id,
            "run",
            lambda run: _drive_only(runner, run, f"run {started.id} {made}"),
            _Hold(lease_seconds, patience, owner),
            only_running=True,
        )
    except RunBusy as busy:
        result = _handed_over(runner, started.id, f"run {started.id} {made}", busy)
    return result, created


def resume(
    runner: Runner,
    run_ref: str,
    *,
    lease_seconds: float = COMMAND_LEASE,
    patience: float = PATIENCE,
    owner: str | None = None,
) -> CommandResult:
    """``ratchet resume``: drive the run on from where it stopped, reconciling any call on
    record first. A run another live process holds is left to it, and the result says so."""

    def act(run: RunRecord) -> CommandResult:
        migrated = migrate(runner, run)
        return _drive_only(runner, migrated, "")

    try:
        return _act(
            runner, run_ref, "resume", act, _Hold(lease_seconds, patience, owner), only_running=True
        )
    except RunBusy as busy:
        return _handed_over(runner, run_ref, "", busy)


def decide(
    runner: Runner,
    run_ref: str,
    decision: str,
    actor: str,
    role: str | None,
    reason: str | None = None,
    *,
    lease_seconds: float = COMMAND_LEASE,
    patience: float = PATIENCE,
    owner: str | None = None,
    drive: bool = True,
) -> CommandResult:
    """``ratchet approve`` / ``reject``: record the decision and drive the run on, under the
    run's lease; without ``drive``, record it and leave the run to the workers, whom the commit
    wakes. A refused decision changes nothing (:class:`~ratchet_runner.errors.ApprovalError`)."""

    def act(run: RunRecord) -> CommandResult:
        recorded = record_decision(runner, run.id, decision, actor, role, reason)
        if not recorded.changed:
            return CommandResult(recorded.run, False, recorded.message)
        if not drive:
            return CommandResult(recorded.run, True, f"{recorded.message}; {LEFT}")
        driven, then = carry_on(runner, recorded.run)
        return CommandResult(driven, True, recorded.message, then)

    if not drive:
        return act(runner.store.resolve(run_ref))
    return _act(runner, run_ref, decision, act, _Hold(lease_seconds, patience, owner))


def signal(
    runner: Runner,
    run_ref: str,
    event: str,
    signal_id: str,
    data: dict[str, Any] | None = None,
    spec_version: int | None = None,
    *,
    lease_seconds: float = COMMAND_LEASE,
    patience: float = PATIENCE,
    owner: str | None = None,
    drive: bool = True,
) -> CommandResult:
    """``ratchet signal``: deliver the signal once per ID and drive the run on, under its
    lease; without ``drive``, deliver it and leave the run to the workers, whom the commit
    wakes."""

    def act(run: RunRecord) -> CommandResult:
        outcome = send_signal(runner, run, event, signal_id, data, spec_version, drive=drive)
        message = outcome.message if drive or not outcome.changed else f"{outcome.message}; {LEFT}"
        return CommandResult(outcome.run, outcome.changed, message, outcome.then)

    if not drive:
        return act(runner.store.resolve(run_ref))
    return _act(runner, run_ref, "signal", act, _Hold(lease_seconds, patience, owner))


def operate(
    runner: Runner,
    run_ref: str,
    action: str,
    actor: str,
    role: str,
    note: str | None = None,
    *,
    lease_seconds: float = COMMAND_LEASE,
    patience: float = PATIENCE,
    owner: str | None = None,
    drive: bool = True,
) -> CommandResult:
    """``ratchet ops ACTION``: the operator control, under the run's lease (see
    :func:`ratchet_runner.engine.controls.operate`); then the run driven on, or (``drive``
    False) left to the workers, whom the commit wakes."""

    def act(run: RunRecord) -> CommandResult:
        outcome = carry_out(runner, run.id, action, actor, role, note, drive=drive)
        return CommandResult(outcome.run, outcome.changed, outcome.message, outcome.then)

    hold = _Hold(lease_seconds, patience, owner)
    # Calls to providers are made here by a reconcile's lookup, and by the drive after any
    # other action but pause and cancel; left to the workers, those make no call here.
    calls_out = action == "reconcile" or (drive and action not in ("pause", "cancel"))
    return _act(runner, run_ref, f"ops {action}", act, hold, calls_out=calls_out)


# -- helpers --------------------------------------------------------------------------------


def _drive_only(runner: Runner, run: RunRecord, message: str) -> CommandResult:
    before = run.version
    driven, then = carry_on(runner, run)
    moved = driven.version != before
    return CommandResult(driven, moved, message or _where(driven, moved), then)


def _where(run: RunRecord, moved: bool) -> str:
    if not moved:
        return f"run {run.id} is in {run.state} ({run.status}); nothing to do now"
    return f"run {run.id} went on to {run.state} ({run.status})"


def _handed_over(runner: Runner, run_ref: str, message: str, busy: RunBusy) -> CommandResult:
    run = runner.store.resolve(run_ref)
    text = (
        f"run {run.id} is being carried on by {busy.holder} (its lease runs "
        f"{busy.seconds_left:.0f} s more); this command left it to that process"
    )
    return CommandResult(
        run, False, f"{message}; {text}" if message else text, carried_on_by=busy.holder
    )
