"""The runner: drives a run through its table and performs each effect by the effect protocol.

For every state that performs an effect:

1. derive the operation ID from the row's idempotency key
(:func:`ratchet_runner.engine.identity.operation_id`); 2. if the store says the operation is done,
skip the call; if it is pending with a call on
   record, reconcile first (ask the adapter what happened to that ID);
3. otherwise write the operation as pending, with its first attempt counted, in the same
   transaction that bumps the run's version (and consumes the approval, if one is needed);
4. call the adapter with that ID, and classify the outcome: done · transient (retry, same ID,
   capped exponential backoff with full jitter) · ambiguous (reconcile; retry with the same ID
   only if the provider has no record) · refused (no retry; the row's ``refused`` event);
5. store the receipt and move the state in one transaction; when the next state performs an
   effect straight away, that effect's step 3 rides in the same transaction (one commit per
   effect step), and this runner calls it without a reconcile, having written it itself.

Attempts persist in the operation row: a resume never refills the budget. Every commit is a
compare-and-set on the run's version; losing it raises
:class:`~ratchet_runner.errors.VersionConflict`.

The runner hosts the steps (:class:`~ratchet_runner.engine.host.StepHost`): the effect step
(:mod:`~ratchet_runner.engine.protocol`) and the saga's undo
(:mod:`~ratchet_runner.engine.compensation`) call back only through that interface, and the rules
they follow are plain functions: the retry budget, the activation, approval validity, timers, the
write-ahead record. The leases it holds are :class:`~ratchet_runner.engine.lease.Lease` values in
its :class:`~ratchet_runner.engine.lease.Leases`; how it works (inline waits, a stop signal, its
clock for leases) is fixed when it is made, by :class:`RunnerOptions`; what its adapters resolve
through (the binding a run it starts records, and the check a spec passes first), by a
:class:`~ratchet_runner.engine.resolution.Resolution`.

Over 500 lines: one concern, the runner that hosts the steps: starting a run, taking its
steps, moving it by its table, and what the steps ask of their host (leases, deadlines, commits
whose reply may be lost).
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, replace
from typing import Any, Protocol

import jsonschema

from ..adapters.base import Adapter, Semantics
from ..clock import Clock, SystemClock
from ..errors import (
    DuplicateOperation,
    InputConflict,
    RunError,
    RunNotFound,
    StoreError,
    UnstorableValue,
    VersionConflict,
)
from ..settings import INTERRUPT_POINTS as INTERRUPT_POINTS
from ..settings import VERSION, business_key_problem, shown, unstorable
from ..spec.expressions import compile_expression
from ..spec.model import Adapter as AdapterSpec
from ..spec.model import Effect, Spec, State, per_version
from ..spec.reads import missing_read
from ..spec.validate import load_stored_spec
from ..store.bell import left_to_workers
from ..store.context import RunContext
from ..store.records import Change, Event, NewRun, OperationRecord, RunRecord
from ..store.store import Store
from ..words import EventKind, RunStatus
from . import duplicates, evidence, timers, undo_extra
from .activation import activation
from .compensation import compensate
from .identity import first_difference, sha256
from .lease import LEASE_MARGIN, Leases
from .machine import machine_for, status_of
from .protocol import EffectStep
from .providers import DEFAULT_CALL_SECONDS, declared_by
from .resolution import Resolution

AdapterFactory = Callable[[AdapterSpec], Adapter]
Interrupt = Callable[[str, str], None]
#: ``steps(run, spec, effect)``: the class of the step that performs ``effect`` for ``run``, for
#: a composition root that gives some runs another than the effect protocol's (a demonstration
#: of a hand-rolled retry loop, which ``ratchet check`` shows beside it).
StepKind = Callable[[RunRecord, Spec, Effect], type[EffectStep]]


class RunnerFactory(Protocol):
    """Makes a worker thread's runner (on its own store connection), set to work by the pool's
    ``options`` (:meth:`ratchet_runner.session.Session.runner_factory`)."""

    def __call__(self, *, options: RunnerOptions) -> Runner: ...


def _never() -> bool:
    return False


#: The input schema's validator of each spec version, by digest: made once, not at every start.
_INPUT_VALIDATORS: dict[str, jsonschema.Draft7Validator] = {}


def _input_validator(spec: Spec) -> jsonschema.Draft7Validator:
    return per_version(
        _INPUT_VALIDATORS, spec, lambda s: jsonschema.Draft7Validator(s.input_schema)
    )


def _same_input(existing: RunRecord | None, given: dict[str, Any]) -> None:
    """Refuse ``given`` for the business key of ``existing`` unless it is the input that run was
    started with, as normalised JSON (the run's input is never replaced: its arguments, digests
    and operation IDs were made from it)."""
    if existing is None:
        return
    pruned = existing.context.get("pruned")
    if pruned is not None:  # a tombstone keeps its input's digest only
        if sha256(given) == pruned["input_digest"]:
            return
        raise InputConflict(
            f"run {existing.id} (business key {shown(existing.business_key)!r}) was started with "
            "another input (it finished and was pruned: its input is kept as a digest, and this "
            "one's differs); a business key names one piece of work: nothing was written",
            existing,
            "input",
        )
    differs = first_difference(existing.input, given, "input")
    if differs is None:
        return
    where, there, here = differs
    raise InputConflict(
        f"run {existing.id} (business key {shown(existing.business_key)!r}) was started with "
        f"another input: {shown(where)} is {shown(there, 40)} there, {shown(here, 40)} here; a "
        "business key names one piece of work, and its run keeps the input it started with: "
        "nothing was written",
        existing,
        where,
    )


@dataclass(frozen=True)
class RunnerOptions:
    """How a runner works, fixed when it is made (a worker pool passes its own).

    ``inline_wait``: the longest back-off, in seconds, slept in the process; a longer one is
    stored as a wake-up time for a worker. ``spec_check_interval``: how long the newest stored
    version of a workflow is taken as known (a pool claiming hundreds of runs a second asks once
    per poll interval, not once per run). ``stopping``: asked between steps; when it says stop,
    :meth:`Runner.advance` returns after the current step (a pool sets it on SIGTERM).
    ``monotonic``: the clock lease deadlines are counted by (a simulation that moves time
    itself passes its own). ``heartbeat``: whether a command holding a run's lease renews it
    from a heartbeat thread (a simulation that schedules every step renews it itself)."""

    inline_wait: float = 5.0
    spec_check_interval: float = 0.0
    stopping: Callable[[], bool] = _never
    monotonic: Callable[[], float] = time.monotonic
    heartbeat: bool = True


class Runner:
    """Runs workflows against a store and adapters.

    ``leases``: the leases this runner holds (a fresh :class:`Leases` by default); whoever takes
    a lease for it (a worker pass, a pool, a command) holds it there. ``resolution``: what its
    ``adapters`` resolve through (by default: nothing is recorded, any run is driven)."""

    def __init__(
        self,
        store: Store,
        adapters: AdapterFactory,
        clock: Clock | None = None,
        *,
        interrupt: Interrupt | None = None,
        steps: StepKind | None = None,
        marks: RunContext | None = None,
        rng: random.Random | None = None,
        options: RunnerOptions | None = None,
        leases: Leases | None = None,
        resolution: Resolution | None = None,
    ) -> None:
        self.store = store
        self.resolution = resolution or Resolution()
        self._adapter_factory = adapters
        self._adapters: dict[tuple[str, str], Adapter] = {}
        self.clock = clock or SystemClock()
        self._interrupt = interrupt
        self._steps = steps
        self.marks: RunContext = marks.copy() if marks else RunContext()
        self.rng = rng or random.Random()
        self.options = options or RunnerOptions()
        self.leases = Leases() if leases is None else leases
        self._specs: dict[str, Spec] = {}
        # run ID -> (version, operation, deadline): a pending record this runner wrote ahead,
        # with the move into its state, and has not called yet, and the deadline of its call
        # (see ``move(..., write_ahead_next=True)``)
        self._written_ahead: dict[str, tuple[int, OperationRecord, float]] = {}
        self._semantics: dict[tuple[str, str], Semantics | None] = {}
        self._latest: dict[str, tuple[float, tuple[str, int] | None]] = {}
        self._quiet: set[str] = set()  # runs advance() carries on here with no lease

    # -- specs and adapters -----------------------------------------------------------------

    def spec_of(self, run: RunRecord) -> Spec:
        """The spec version the run is pinned to, from the text stored when it started."""
        return self.spec_for_digest(run.spec_digest)

    def spec_for_digest(self, digest: str) -> Spec:
        spec = self._specs.get(digest)
        if spec is None:
            text = self.store.spec_text(digest)
            spec = self._specs[digest] = load_stored_spec(text, f"spec {digest[:12]} (stored)")
        return spec

    def latest_spec(self, workflow: str) -> tuple[str, int] | None:
        """The digest and version of the newest stored version of ``workflow``, read again once
        ``options.spec_check_interval`` seconds have passed (or this runner saved a new one)."""
        now = self.options.monotonic()
        known = self._latest.get(workflow)
        if known is not None and now - known[0] < self.options.spec_check_interval:
            return known[1]
        latest = self.store.latest_spec(workflow)
        self._latest[workflow] = (now, latest)
        return latest

    def start_version(
        self, spec: Spec, text: str, input: dict[str, Any] | None = None
    ) -> tuple[Spec, str]:
        """The spec version (and its text) a new run of ``spec``'s workflow starts on: the one
        an operator set (:meth:`~ratchet_runner.store.store.Store.published`), when it is not
        ``spec``, else ``spec``. ``spec`` is then stored all the same (once), so that it can be
        chosen later; storing it moves no run, since older runs move on to the version set. A
        start of work a run already does (its business key, by ``spec``, names a run) is no new
        run: ``spec`` is kept, and the start finds that run as it always does."""
        chosen = self.store.published(spec.name)
        if chosen is None or chosen[0] == spec.digest:
            return spec, text
        if input is not None:
            with suppress(Exception):  # a key that cannot be made is refused by the start itself
                key = compile_expression(spec.business_key).evaluate({"input": input})
                if key not in (None, "") and self.store.find_run(spec.name, str(key)) is not None:
                    return spec, text
        if spec.digest not in self._specs:
            self.store.save_spec(
                spec.digest,
                spec.name,
                spec.spec_version,
                str(spec.policy_version),
                text,
                self.clock.now(),
            )
            self._specs[spec.digest] = spec
        return self.spec_for_digest(chosen[0]), self.store.spec_text(chosen[0])

    def adapter(self, spec: Spec, name: str) -> Adapter:
        """The adapter ``name`` of this spec version, made once per (spec version, adapter):
        never by name alone, since two specs (or two versions of one) may give the same name
        to different services (a real payment provider in one, ``noop`` in the other)."""
        key = (spec.digest, name)
        adapter = self._adapters.get(key)
        if adapter is None:
            adapter = self._adapters[key] = self._adapter_factory(spec.adapters[name])
        return adapter

    def semantics(self, spec: Spec, effect: Effect) -> Semantics | None:
        """What the provider behind ``effect`` does with a second request under one operation
        ID, and how far its lookup may lag: what the binding declares for the effect's adapter,
        over what the adapter itself declares (None when neither says anything)."""
        key = (spec.digest, effect.name)
        if key not in self._semantics:
            adapter = self.adapter(spec, effect.adapter)
            own = declared_by(adapter, effect.operation, effect.reconcile)
            declare = self.resolution.semantics
            bound = None if declare is None else declare(spec.adapters[effect.adapter])
            self._semantics[key] = own if bound is None else bound.over(own)
        return self._semantics[key]

    def make_adapters(self, spec: Spec) -> None:
        """Make every adapter of ``spec`` now (each once, as :meth:`adapter` does), so that one
        that cannot be made (a secret not set, a factory that fails: a
        :class:`~ratchet_runner.errors.BindingError`) refuses the command before it writes
        anything, instead of failing the step after a decision was spent on it."""
        for name in spec.adapters:
            self.adapter(spec, name)

    # -- starting and advancing -------------------------------------------------------------

    def start(
        self, spec: Spec, text: str, input: dict[str, Any], *, wake: bool = True
    ) -> tuple[RunRecord, bool]:
        """Start a run of ``spec`` (whose exact text is ``text``), or find the one that already
        exists for the same business key. Returns ``(run, created)``. Its creation wakes the
        idle workers (``wake``), unless the caller carries it on itself. A spec this runner's
        adapters cannot run (its resolution's ``admit`` refuses it, or an adapter cannot be made)
        is refused first, with nothing stored, and so is an input that does not fit the spec's
        input schema or lacks a field the business key or an effect argument reads
        (:func:`~ratchet_runner.spec.reads.missing_read`). A run that exists for the business
        key with another input is no start of it: :class:`~ratchet_runner.errors.InputConflict`,
        with nothing written (looked up before a spec version this runner has not stored yet is
        saved, since a newer version moves older runs on). The run records the binding and the
        Ratchet version it starts under. Where an operator set the version new runs of the
        workflow start on (``ratchet versions W --start-new-on N``), the run starts on that one,
        and the version given is stored, to be chosen later (:meth:`start_version`)."""
        spec, text = self.start_version(spec, text, input)
        if self.resolution.admit is not None:
            self.resolution.admit(spec)
        self.make_adapters(spec)
        unfit = unstorable(input, "input")
        if unfit is not None:  # what no store keeps the same way: refused on every one
            raise UnstorableValue(f"the input cannot be stored: {unfit}; nothing was written")
        try:
            problems = sorted(_input_validator(spec).iter_errors(input), key=str)
        except Exception as exc:  # a $ref that cannot be resolved
            raise RunError(f"the spec's input schema cannot be applied: {exc}") from None
        if problems:
            where = "/".join(str(p) for p in problems[0].absolute_path) or "input"
            raise RunError(f"the input does not fit the spec: {where}: {problems[0].message}")
        lacking = missing_read(spec, input)
        if lacking is not None:
            read, field = lacking
            raise RunError(
                f"the input has no {field!r}, which {read.reader} reads ({read.source}): give "
                f"it in the input (and require it in the spec's input schema)"
            )
        key = compile_expression(spec.business_key).evaluate({"input": input})
        if key is None or key == "":
            raise RunError(f"the business key {spec.business_key!r} is empty for this input")
        wrong = business_key_problem(str(key))
        if wrong is not None:
            raise RunError(
                f"the business key {spec.business_key!r} cannot name a run for this input: "
                f"{wrong}; nothing was written"
            )
        now = self.clock.now()
        if spec.digest not in self._specs:
            _same_input(self.store.find_run(spec.name, str(key)), input)
            self.store.save_spec(
                spec.digest, spec.name, spec.spec_version, str(spec.policy_version), text, now
            )
            self._specs[spec.digest] = spec
            self._latest.pop(spec.name, None)
        run_id = f"run_{uuid.uuid4().hex[:16]}"
        first = spec.states[spec.start]
        stamp = self.resolution.stamp
        new = NewRun(
            run_id,
            spec.name,
            spec.digest,
            str(key),
            first.name,
            status_of(first),
            input,
            now,
            binding=None if stamp is None else dict(stamp),
            ratchet_version=VERSION,
            keys=evidence.keys(spec, input),
        )
        draft = new.record()  # the run as it will be: what its first state's timers are armed on
        context: RunContext = {"ratchet_version": VERSION}
        if stamp is not None:
            context["binding"] = dict(stamp)
        context.update(self.marks)  # what the composition root marks its runs with
        first_events: list[Event] = []
        armed = timers.arm(draft, spec, first, now)
        if armed:
            context["timers_of"] = first.name
        if first.kind in ("pause", "wait"):
            pause = timers.pause_record(draft, spec, first, now)
            context["pause"] = pause
            first_events.append((EventKind.PAUSED, pause))
        new = replace(new, context=context, timers=armed, events=first_events, wake=wake)
        run, created = self.store.create_run(new)
        if not created:  # found: the same piece of work only if it was asked with the same input
            _same_input(run, input)
        return run, created

    def advance(self, run: str | RunRecord, max_steps: int = 10_000) -> RunRecord:
        """Drive the run (by ID, or as just committed) until it waits, ends, or needs a
        person. A record handed in saves reading it again; if it is stale, the first commit
        finds out (:class:`~ratchet_runner.errors.VersionConflict`)."""
        if isinstance(run, str):
            run = self.store.get_run(run)
        run_id = run.id
        # With no lease on the run, its commits here wake no worker (each would: it stays
        # running with no lease); the workers are woken once at the end if it is left to them.
        quiet = self.leases.get(run_id) is None and run_id not in self._quiet
        if quiet:
            self._quiet.add(run_id)
        first, left = run.version, None
        try:
            for _ in range(max_steps):
                if self.options.stopping() and run_id not in self._written_ahead:
                    left = run  # a pending record written ahead is called first: it is promised
                    return run
                moved = self.step(run)
                if moved is None:
                    left = run
                    return run
                run = moved
        finally:
            # Not called by now (an error): whoever takes the run next reconciles it first.
            self._written_ahead.pop(run_id, None)
            if quiet:
                self._quiet.discard(run_id)
                if left is None:  # an error: what it left is not known; waking is only sooner
                    with suppress(Exception):  # than the next poll, and must not hide the error
                        self.store.wake_workers()
                elif left.version != first and left_to_workers(left):
                    self.store.wake_workers()
        raise RunError(f"run {run_id} took more than {max_steps} steps without stopping")

    def step(self, run: RunRecord) -> RunRecord | None:
        """Take one step; None when there is nothing the runner can do now."""
        if run.status not in (RunStatus.RUNNING,):
            return None
        wake = run.context.get("wake_at")
        if (
            wake is not None
            and wake > self.clock.now()
            and not self.wait_inline(wake - self.clock.now())
        ):
            return None
        spec = self.spec_of(run)
        if duplicates.holding(run):  # a change made twice: its extra undone, then a person
            return undo_extra.step(self, run, spec)
        state = spec.states[run.state]
        if state.kind == "compensate":
            return self._compensate(run, spec)
        if state.kind != "step":
            return None
        effect = spec.effect_of(state.name)
        if effect is None:
            return self.move(run, spec, "next", self.change(run))
        return self.step_kind(run, spec, effect)(self, run, spec, effect).perform()

    def step_kind(self, run: RunRecord, spec: Spec, effect: Effect) -> type[EffectStep]:
        """The step that performs ``effect`` for ``run``: the effect protocol's, unless the
        runner was made with another choice (``steps``)."""
        return EffectStep if self._steps is None else self._steps(run, spec, effect)

    def _compensate(self, run: RunRecord, spec: Spec) -> RunRecord:
        """One step of the saga's undo (:func:`~ratchet_runner.engine.compensation.compensate`)."""
        return compensate(self, run, spec)

    def change(self, run: RunRecord, at: float | None = None) -> Change:
        """A new change to ``run``, made under this runner's lease on it, if it holds one."""
        lease = self.leases.get(run.id)
        return Change(
            run.id,
            run.version,
            self.clock.now() if at is None else at,
            run,
            lease_token=None if lease is None else lease.token,
            take_lease=None if lease is None else lease.taken_by_commits,
            wake=run.id not in self._quiet,
        )

    # -- moving -----------------------------------------------------------------------------

    def move(
        self,
        run: RunRecord,
        spec: Spec,
        event: str,
        change: Change,
        ctx: Mapping[str, Any] | None = None,
        *,
        write_ahead_next: bool = False,
    ) -> RunRecord:
        """Fire ``event`` and commit ``change`` with the move it selects. With no row for it
        (``unknown`` falls back to ``exhausted``), the run is handed to a person, unmoved.

        With ``write_ahead_next``, when the move leads straight into another effect, that
        effect's pending record is written in this same commit (see :meth:`_write_ahead_next`).
        """
        machine = machine_for(spec)
        ctx = ctx or activation(run, spec)
        row, errors = machine.fire(run.state, event, ctx)
        if row is None and event == "unknown":
            row, errors = machine.fire(run.state, "exhausted", ctx)
        if row is None:
            change.status = RunStatus.NEEDS_PERSON
            change.event(
                EventKind.STUCK,
                state=run.state,
                event=event,
                reason="no row's guard holds" if not errors else "; ".join(errors),
            )
            return self.store.commit(change)
        target = spec.states[row.next_state]
        change.state, change.status = target.name, status_of(target)
        followed = {"from": run.state, "event": row.event, "to": target.name}
        if row.event != event:  # no row for ``unknown``: the ``exhausted`` row was followed
            followed["instead_of"] = event
        change.event(EventKind.MOVED, **followed)
        if target.kind == "operator_queue":
            action = row.operator_action or target.operator_action
            change.event(EventKind.QUEUED, queue=target.name, operator_action=action)
        timers.on_move(run, spec, target, change)
        ahead = self._write_ahead_next(run, spec, target, change) if write_ahead_next else None
        if ahead is None:
            return self.store.commit(change)
        written, deadline = ahead
        moved = self.commit_attempt(change, written.operation_id, written.attempts, deadline)
        self._written_ahead[run.id] = (moved.version, written, deadline)
        return moved

    def _write_ahead_next(
        self, run: RunRecord, spec: Spec, target: State, change: Change
    ) -> tuple[OperationRecord, float] | None:
        """Add the next effect's write-ahead (pending record, first attempt counted) to the
        commit that moves the run into its state: one commit per effect step instead of two, and
        the pending record still precedes the call. Only for a fresh operation, with no approval
        to consume and budget left; any other effect is begun by its own step, as before. A
        crash before the call leaves the pending record, which the next runner reconciles. Not
        when the runner is stopping: it would promise a call it is not going to make."""
        if (
            target.kind != "step"
            or run.version != change.expected_version
            or self.options.stopping()
        ):
            return None
        effect = spec.effect_of(target.name)
        if effect is None or effect.approval is not None:
            return None
        preview = change.preview(run)
        try:
            step = self.step_kind(preview, spec, effect)(self, preview, spec, effect)
        except Exception:  # arguments that do not evaluate: the step itself will say so
            return None
        return step.write_ahead_into(change)

    def written_ahead(self, run: RunRecord) -> tuple[OperationRecord, float] | None:
        """The operation this runner wrote ahead with the commit that made ``run``, if any, and
        the deadline of its call: recorded, not yet called, so the call needs no reconcile
        first."""
        entry = self._written_ahead.pop(run.id, None)
        if entry is None or entry[0] != run.version:
            return None
        return entry[1], entry[2]

    # -- what the steps ask of their host --------------------------------------------------

    def commit_attempt(
        self, change: Change, operation_id: str, attempts: int, deadline: float
    ) -> RunRecord:
        """Commit ``change``, which records attempt ``attempts`` of ``operation_id``. An attempt
        counts only once its request may have been sent: when the store's reply to this commit
        is lost (the connection dropped after the database committed, or before), this process
        asks the store again, until the call's ``deadline``, whether the commit landed. It did
        (the run one version on, the attempt recorded): the run as committed is returned, and
        the request is sent under it, so the attempt is spent on a call. It did not: the
        store's error is raised, nothing was counted. The store not answering before the
        deadline: the error is raised, and the run's next holder reconciles."""
        try:
            return self.store.commit(change)
        except (VersionConflict, RunNotFound, DuplicateOperation, UnstorableValue):
            raise  # the store answered: nothing was committed
        except StoreError:
            landed = self._landed(change, operation_id, attempts, deadline)
            if landed is None:
                raise
            return landed

    def _landed(
        self, change: Change, operation_id: str, attempts: int, deadline: float
    ) -> RunRecord | None:
        """The run as ``change`` left it, if it was committed; None if it was not, or if the
        store does not answer before ``deadline``."""
        pause = 0.02
        while self.monotonic() < deadline:
            try:
                run = self.store.get_run(change.run_id)
                op = self.store.operation(operation_id)
            except RunNotFound:
                return None
            except StoreError:
                time.sleep(min(pause, max(0.0, deadline - self.monotonic())))
                pause = min(pause * 2, 1.0)
                continue
            committed = (
                run.version == change.expected_version + 1
                and op is not None
                and op.attempts == attempts
                and (change.lease_token is None or run.lease_token == change.lease_token)
            )
            return run if committed else None
        return None

    def secure_lease(self, run_id: str, timeout: float | None) -> None:
        """Before an attempt is committed: make sure the lease this runner holds on the run lasts
        the call (:meth:`~ratchet_runner.engine.lease.Lease.secure`), renewing it first if need
        be; raises :class:`~ratchet_runner.errors.LeaseLost` or
        :class:`~ratchet_runner.errors.LeaseTooShort` with nothing committed or sent. A runner
        holding no lease on the run (a test, ``ratchet check``) is not checked."""
        self.leases.secure(run_id, timeout, self.options.monotonic, self.store.renew)

    def now(self) -> float:
        """The runner's clock (epoch seconds)."""
        return self.clock.now()

    def monotonic(self) -> float:
        """The clock call deadlines and leases are counted by (``options.monotonic``)."""
        return self.options.monotonic()

    def call_seconds(self, run_id: str, timeout: float | None) -> float:
        """How long a call made now may take: the effect's ``timeout``; for an effect without
        one, as long as the lease this runner holds on the run still covers (less its margin),
        else :data:`~ratchet_runner.engine.providers.DEFAULT_CALL_SECONDS`."""
        if timeout is not None:
            return timeout
        lease = self.leases.get(run_id)
        if lease is None or lease.counted_until is None:
            return DEFAULT_CALL_SECONDS
        return max(0.0, float(lease.counted_until) - self.monotonic() - LEASE_MARGIN)

    def interrupts_at(self, point: str, effect: str) -> bool:
        """Whether the crash-practice hook ends this process at ``point`` of ``effect`` (a hook
        that says so: its ``fires(point, effect)``)."""
        fires = getattr(self._interrupt, "fires", None)
        return bool(callable(fires) and fires(point, effect))

    def interrupt(self, point: str, effect: str) -> None:
        if self._interrupt is not None:
            self._interrupt(point, effect)

    def wait_inline(self, seconds: float) -> bool:
        """Sleep ``seconds`` here if that is short enough; otherwise leave it to a timer."""
        if seconds > self.options.inline_wait:
            return False
        self.clock.sleep(seconds)
        return True

    def decision_now(self) -> float:
        """Now, for a decision a deadline or an expiry bounds (a decision on a pause, an
        approval about to be used): the store's clock when this runner runs on the system
        clock, so every process deciding on one run reads one clock; the injected clock when
        another is injected (a fake clock in tests, ``RATCHET_NOW`` for practice)."""
        if isinstance(self.clock, SystemClock):
            return self.store.db_now()
        return self.clock.now()
