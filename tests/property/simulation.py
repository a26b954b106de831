"""A seeded, deterministic simulation of Ratchet's drivers over shared runs.

One *schedule* interleaves several drivers — ``ratchet run``
(:func:`ratchet_runner.engine.commands.start`), ``approve``/``reject``
(:func:`ratchet_runner.engine.commands.decide`), ``resume``, ``ops`` and worker passes
(:func:`ratchet_runner.worker.passes.worker_pass`), among them a late "rescuer" that starts after
the clock has jumped past every lease — over one or two runs of the shipped specs, against simulated
providers that commit late, lose replies, are unavailable, refuse and fail lookups. Between any two
steps the scheduler may let another driver go on, let a provider commit a request it holds, jump the
clock, or kill a driver. Then it drains the schedule and checks its invariants (see
:meth:`Simulation.check`): no effect made twice, every run ends or waits for a person, every change
a compensated saga made is undone or declared kept, no driver crashed.

How it is deterministic:

* Each driver runs the real code (``ratchet_runner.engine.runner.Runner``,
``ratchet_runner.engine.commands``,
  ``ratchet_runner.worker.passes``) in its own thread, but only one thread runs at a time. A
  driver hands control back at every *yield point*: every call to the store (through
  :class:`StoreProxy`), every adapter call and lookup (:class:`SimAdapter`), every sleep. A call is
  *in flight* from the step that sends it until the provider has settled it, which the scheduler
  decides.
* Every choice is drawn from ``random.Random`` seeded by the schedule's seed: which driver goes
  on, which provider fate each request meets, which clock jump or kill happens, and the run IDs
  and lease tokens (``uuid.uuid4`` is seeded while a schedule runs).
* Time is one simulated clock (:class:`SimClock`): the runners' clock, their monotonic clock
  (``RunnerOptions.monotonic``) and the store's lease clock (``Store(..., clock=...)``) all read it.

A **kill** is SIGKILL: the driver never runs again; every later store or adapter call from its
thread raises :class:`Killed` before touching anything (so ``finally:`` blocks that would give a
lease back give nothing back), and the thread unwinds. A request it had sent stays at the
provider, which still commits it within the call's timeout. A **clock jump** first settles every
request whose deadline it passes.

The parts: this module schedules, drains and checks; :mod:`tests.property.sim_world` holds the
clock, the providers and the store as the drivers see it; :mod:`tests.property.sim_drivers` the
drivers; :mod:`tests.property.sim_profiles` what a schedule may contain.

``RATCHET_SIM_SEED=N`` replays schedule ``N``; a failing schedule prints its seed, what it found
and the schedule, step by step. See ``docs/explanation/simulation.md``.
"""

from __future__ import annotations

import random
import threading
import traceback
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from ratchet_runner.engine import commands as real_commands
from ratchet_runner.engine.runner import Runner, RunnerOptions
from ratchet_runner.errors import RatchetError
from ratchet_runner.spec.model import Adapter as AdapterSpec
from ratchet_runner.spec.model import Spec
from ratchet_runner.store.records import OperationRecord, RunRecord
from ratchet_runner.store.store import Store
from tests.property.sim_drivers import (
    Arrival,
    Driver,
    decision,
    heartbeat,
    operator,
    resume_command,
    run_command,
    worker,
)
from tests.property.sim_profiles import PROFILES, WORKLOADS, Profile, Workload, load
from tests.property.sim_world import (
    DEDUPLICATING,
    START,
    HarnessError,
    Killed,
    Provider,
    Request,
    SimAdapter,
    SimClock,
    SimRunner,
    StoreProxy,
    short,
    simulation_store,
)

__all__ = ["PROFILES", "Result", "Simulation", "run_schedule", "simulation_store"]

T = TypeVar("T")

#: Statuses a run may end a schedule in; ``waiting`` only in a state that waits for a person or
#: a system (a ``pause``), not for a timer the final worker would have fired.
ENDED = frozenset({"done", "cancelled", "needs_person"})


@dataclass
class Result:
    """What one schedule did and found."""

    seed: int
    profile: str
    violations: list[str]
    log: list[str]
    steps: int
    ends: dict[str, str]  # business key -> workflow, state and status at the end
    seen: Counter[str]  # what happened: the runs' history events, and kills and rescues

    @property
    def ok(self) -> bool:
        return not self.violations

    def report(self) -> str:
        lines = [
            f"seed {self.seed} (profile {self.profile}): {len(self.violations)} violation(s)",
            *(f"  ! {v}" for v in self.violations),
            f"replay: python -m bench.simulate --show --profile {self.profile} --seed "
            f"{self.seed} --schedules 1 (or RATCHET_SIM_SEED={self.seed} with pytest -s -k)",
            "schedule:",
            *(f"  {line}" for line in self.log),
        ]
        return "\n".join(lines)


# -- the simulation -------------------------------------------------------------------------


class Simulation:
    """One schedule: plans its drivers, runs them under the seeded scheduler, drains, checks."""

    def __init__(
        self, seed: int, store: Store, profile: Profile | str = "mixed", commands: Any = None
    ) -> None:
        self.seed = seed
        # : What the command drivers call: ``ratchet_runner.engine.commands`` (a test may hand in
        # another : implementation of ``start``, ``decide``, ``resume`` and ``operate``).
        self.commands: Any = commands or real_commands
        self.profile = PROFILES[profile] if isinstance(profile, str) else profile
        self.store = store
        clock = store.clock
        if not isinstance(clock, SimClock):
            raise HarnessError("the store must run on a SimClock: use open_store()")
        self.clock = clock
        self.rng = random.Random(f"{seed}/schedule")
        self.fates = random.Random(f"{seed}/providers")
        self._ids = random.Random(f"{seed}/ids")
        self.log: list[str] = []
        self.step_no = 0
        self.writes = 0
        self.drivers: list[Driver] = []
        self.arrivals: list[Arrival] = []
        self.in_flight: list[Request] = []
        self.providers: dict[tuple[str, str], Provider] = {}
        self.receipt_fields: dict[str, str | None] = {}
        self.undoing: set[str] = set()  # the effects that compensate another
        self.runs: dict[str, Workload] = {}  # business key -> its workload
        self.violations: list[str] = []
        self._seq = 0
        self._local = threading.local()
        self._back = threading.Semaphore(0)
        self._snapshot: tuple[int, dict[str, tuple[str, str]]] = (-1, {})
        self._kills_left = 0
        self._rescues_left = 0
        self.seen: Counter[str] = Counter()
        self._lease_ends: list[float] = []
        self.lease = 30.0
        self.settle_weight = self.jump_weight = 0.1
        self.inline_wait = 5.0
        self.dedup_kinds: frozenset[str] = DEDUPLICATING
        #: What the providers that do not deduplicate declare as their commits_within: they
        #: commit every request within the call's timeout (the shipped specs' longest is 15 s).
        self.commits_within = 15.0

    # -- yield points (called from driver threads) --------------------------------------------

    def current(self) -> Driver | None:
        driver: Driver | None = getattr(self._local, "driver", None)
        return driver

    def current_name(self) -> str:
        driver = self.current()
        return driver.name if driver is not None else "scheduler"

    def park(
        self, point: str, ready: Callable[[], bool] | None = None, wake: float | None = None
    ) -> None:
        """Hand control back to the scheduler and wait for this driver's next turn (which comes
        only once ``ready()`` holds). A killed driver raises :class:`Killed` instead."""
        driver = self.current()
        if driver is None:
            return
        if driver.killed:
            raise Killed
        driver.point, driver.ready, driver.wake = point, ready, wake
        self._back.release()
        driver.go.acquire()
        if driver.killed:
            raise Killed

    def note(self, text: str) -> None:
        """Add to the line of the step being taken."""
        if self.log:
            sep = "" if text.startswith(";") else " "
            self.log[-1] += sep + text

    def next_seq(self) -> int:
        self._seq += 1
        return self._seq

    # -- set-up -------------------------------------------------------------------------------

    def adapter(self, spec_adapter: AdapterSpec) -> SimAdapter:
        key = (spec_adapter.name, spec_adapter.kind)
        provider = self.providers.get(key)
        if provider is None:
            provider = self.providers[key] = Provider(self, spec_adapter.name, spec_adapter.kind)
        return SimAdapter(self, provider)

    def runner(self, name: str) -> Runner:
        return SimRunner(
            StoreProxy(self.store, self),  # type: ignore[arg-type]
            self.adapter,
            self.clock,
            rng=random.Random(f"{self.seed}/{name}"),
            options=RunnerOptions(
                inline_wait=self.inline_wait,
                monotonic=self.clock.now,
                heartbeat=False,  # renewed by a companion driver (``sim_drivers.heartbeat``)
            ),
        )

    def command_options(self, name: str) -> dict[str, Any]:
        """A command's lease, owner and patience: none, as a command that waited would only
        sleep in real time; a later arrival is the command tried again."""
        return {"lease_seconds": self.lease, "patience": 0, "owner": name}

    def driver(
        self,
        name: str,
        body: Callable[[Runner], str],
        gate: Callable[[dict[str, tuple[str, str]]], bool] | None = None,
        command: bool = True,
    ) -> Driver:
        return Driver(name, body, self.runner(name), gate, command)

    def _plan(self) -> None:
        """Which runs, drivers and kills this schedule has (all drawn from its seed)."""
        rng, profile = self.rng, self.profile
        for spec, _ in (load(name) for name in set(profile.workflows)):
            for effect in spec.effects.values():
                self.receipt_fields[effect.name] = _receipt_field(spec, effect.name)
            self.undoing.update(
                row.compensation.effect
                for row in spec.transitions
                if row.compensation is not None and row.compensation.effect is not None
            )
        self.dedup_kinds = DEDUPLICATING if rng.random() < 0.5 else frozenset()
        runs = 1 + (rng.random() < 0.3) * (profile.max_runs - 1)
        add = self.arrivals.append
        for n in range(1, runs + 1):
            workload = WORKLOADS[rng.choice(profile.workflows)]
            key = workload.key(n)
            self.runs[key] = workload
            add(Arrival(f"run-{n}", run_command(workload, key, n)))
            if rng.random() < profile.second_start:
                add(Arrival(f"run-{n}-again", run_command(workload, key, n)))
            decisions = (rng.random() < profile.decide) + (rng.random() < profile.second_decision)
            for d in range(decisions):
                verb = "approve" if rng.random() < profile.approve else "reject"
                strict = rng.random() < 0.85  # else it may come too early, and be refused
                add(Arrival(f"{verb}-{n}{'ab'[d]}", decision(workload, key, verb, strict)))
            for r in range(rng.choice(profile.resumes)):
                add(Arrival(f"resume-{n}{'abc'[r]}", resume_command(key)))
            if rng.random() < profile.operator:
                add(Arrival(f"ops-{n}", operator(workload, key, rng)))
        for w in range(rng.choice(profile.workers)):
            passes, poll = rng.choice(profile.passes), rng.uniform(0.2, 2.0)
            add(Arrival(f"worker-{w + 1}", worker(rng.random() < 0.7, passes, poll)))
        self._rescues_left = rng.choice(profile.rescues)
        self._kills_left = rng.choice(profile.kills)
        self.lease = rng.choice(profile.leases)
        self.settle_weight = rng.choice(profile.settle_weights)
        # Back-offs waited in the process (up to 5 s, the default) or all stored as ``wake_at``
        # for a worker to pick up
        self.inline_wait = rng.choice((0.0, 5.0))
        self.jump_weight = rng.choice(profile.jump_weights)

    # -- running ------------------------------------------------------------------------------

    def run(self) -> Result:
        self.store.reset()
        self.clock.reset(START)
        self.clock.sim = self
        saved = uuid.uuid4
        uuid.uuid4 = self._uuid4
        try:
            self._plan()
            self._explore()
            self._drain(f"the schedule's {self.step_no} steps are over")
            self._final_passes()
            self.check()
        finally:
            uuid.uuid4 = saved
            self._abandon()
            self.clock.sim = None
        runs = self.store.list_runs(limit=100)
        ends = {run.business_key: f"{run.workflow} {run.state} ({run.status})" for run in runs}
        seen = Counter(event.kind for run in runs for event in self.store.history(run.id))
        seen.update(self.seen)
        return Result(
            self.seed, self.profile.name, self.violations, self.log, self.step_no, ends, seen
        )

    def _uuid4(self) -> uuid.UUID:
        return uuid.UUID(int=self._ids.getrandbits(128), version=4)

    def _runs_now(self) -> dict[str, tuple[str, str]]:
        """business key -> (status, state), read again only after a write (with when each
        lease on record expires: ``_lease_ends``)."""
        if self._snapshot[0] != self.writes:
            runs = self.store.list_runs(limit=100)
            self._snapshot = (self.writes, {r.business_key: (r.status, r.state) for r in runs})
            self._lease_ends = [r.lease_expires_at for r in runs if r.lease_expires_at]
        return self._snapshot[1]

    def _live(self) -> list[Driver]:
        return [d for d in self.drivers if not d.done]

    def _runnable(self, driver: Driver) -> bool:
        if driver.killed:
            return True
        if not driver.started and driver.gate is not None and not driver.gate(self._runs_now()):
            return False
        return driver.ready is None or driver.ready()

    def _choices(self, exploring: bool) -> list[tuple[float, str, Any]]:
        for driver in self._live():  # the heartbeat of a command that never held a lease
            command = driver.companion_of
            if command is not None and command.done and not driver.started:
                driver.killed = True
                self._unwind(driver)
        choices: list[tuple[float, str, Any]] = [
            (1.0, "step", d) for d in self._live() if self._runnable(d)
        ]
        choices += [(self.settle_weight, "settle", r) for r in self.in_flight]
        if exploring and self.arrivals:
            choices.append((self.profile.spawn_weight, "spawn", None))
        if not choices or not exploring:
            return choices
        choices.append((self.jump_weight, "jump", None))
        if self._rescues_left and self.in_flight and (self._runs_now() and self._lease_ends):
            choices.append((self.profile.rescue_weight, "rescue", None))
        if self._kills_left:
            weight = self.profile.kill_weight
            choices += [
                (weight, "kill", d) for d in self._live() if d.started and d.companion_of is None
            ]
        return choices

    def _pick(self, choices: list[tuple[float, str, Any]]) -> tuple[str, Any]:
        return _draw(self.rng, [(weight, (kind, subject)) for weight, kind, subject in choices])

    def _explore(self) -> None:
        while self.step_no < self.profile.max_steps:
            choices = self._choices(exploring=True)
            if not choices:
                if not self._wake_sleepers():
                    return
                continue
            kind, subject = self._pick(choices)
            if kind == "step":
                self._step(subject)
            elif kind == "settle":
                self._settle(subject)
            elif kind == "spawn":
                self._spawn(self.arrivals.pop(self.rng.randrange(len(self.arrivals))))
            elif kind == "jump":
                self._jump()
            elif kind == "rescue":
                self._rescue()
            else:
                self._kill(subject)

    def _drain(self, why: str, budget: int = 5000) -> None:
        """Run every live driver to its end: no more arrivals, jumps or kills; the clock moves
        only when every live driver sleeps. A driver whose gate never opens gives up."""
        self.log.append(f"-- drain: {why}")
        limit = self.step_no + budget
        while self._live():
            if self.step_no >= limit:
                stuck = ", ".join(f"{d.name} at {d.point}" for d in self._live())
                self.violations.append(f"the drivers did not finish in {budget} steps: {stuck}")
                return
            choices = self._choices(exploring=False)
            if choices:
                kind, subject = self._pick(choices)
                if kind == "step":
                    self._step(subject)
                else:
                    self._settle(subject)
            elif not self._wake_sleepers():
                for driver in self._live():  # gated drivers whose moment never came
                    if not driver.started:
                        driver.killed = True
                        self._unwind(driver)
                        driver.outcome = "never had anything to do"
                if self._live() and not any(self._runnable(d) for d in self._live()):
                    stuck = ", ".join(f"{d.name} at {d.point}" for d in self._live())
                    raise HarnessError(f"seed {self.seed}: nothing can move: {stuck}")

    def _final_passes(self) -> None:
        """Move the clock past every lease, back-off and request deadline, and let a final
        worker fire the timers due and take every runnable run as far as it goes; again, while
        any run is running or a timer is due."""
        for n in range(1, 9):
            running = self.store.list_runs("running", limit=100)
            due = self.store.due_timers(self.clock.now())
            if not running and not due and not self.in_flight:
                return
            moments = [self.clock.now()]
            moments += [r.lease_expires_at for r in running if r.lease_expires_at is not None]
            moments += [r.wake_at for r in running if r.wake_at is not None]
            moments += [q.deadline for q in self.in_flight]
            self._advance(max(moments) + 1.0, "past every lease")
            if running or due:
                self._spawn(Arrival(f"final-worker-{n}", worker(False)))
                self._drain(f"final worker {n}")

    # -- actions ------------------------------------------------------------------------------

    def _line(self, text: str) -> None:
        self.step_no += 1
        self.log.append(f"step {self.step_no}: {text}")

    def _settle(self, request: Request) -> None:
        self._line("")
        self.log[-1] += request.provider.settle(request)

    def _step(self, driver: Driver) -> None:
        self._line(f"{driver.name} {driver.point}")
        self._resume_thread(driver)
        if driver.done:
            self.note(f"; {driver.name} ends: {driver.outcome}")

    def _resume_thread(self, driver: Driver) -> None:
        driver.started = True
        driver.go.release()
        if not self._back.acquire(timeout=120):
            raise HarnessError(f"seed {self.seed}: {driver.name} did not yield in 120 s")

    def _rescue(self) -> None:
        """Jump the clock just past every lease on record, and start a worker there."""
        self._rescues_left -= 1
        self.seen["rescue with a request in flight"] += 1
        self._line("clock jumps just past every lease")
        self._advance_noted(max(self._lease_ends) + self.rng.uniform(0.1, 5.0))
        rescuers = sum(d.name.startswith("rescuer") for d in self.drivers)
        self._spawn(Arrival(f"rescuer-{rescuers + 1}", worker(False)))

    def _spawn(self, arrival: Arrival) -> None:
        self._line(f"{arrival.name} arrives")
        driver = arrival.make(self, arrival.name)
        self._start_thread(driver)
        if driver.command:
            beat = Driver(f"{driver.name}/heartbeat", heartbeat(self, driver), driver.runner)
            beat.command, beat.companion_of = False, driver
            beat.point = "waits for its command to hold a lease"
            beat.ready = lambda: driver.done or bool(driver.runner.leases)
            self._start_thread(beat)

    def _start_thread(self, driver: Driver) -> None:
        self.drivers.append(driver)
        thread = threading.Thread(
            target=self._thread_body, args=(driver,), name=f"sim-{driver.name}", daemon=True
        )
        driver.thread = thread
        thread.start()

    def _thread_body(self, driver: Driver) -> None:
        self._local.driver = driver
        driver.go.acquire()
        try:
            if driver.killed:
                raise Killed
            driver.outcome = driver.body(driver.runner)
        except Killed:
            driver.outcome = driver.outcome or "killed"
        except RatchetError as exc:
            driver.outcome = f"{type(exc).__name__}: {exc}"
        except Exception as exc:
            driver.outcome = f"crashed: {type(exc).__name__}: {exc}"
            driver.crash = "".join(traceback.format_exception(exc))
        finally:
            driver.done = True
            self._back.release()

    def _kill(self, driver: Driver) -> None:
        self._kills_left -= 1
        self.seen[f"kill at {driver.point.split()[0]}"] += 1
        self._line(f"kill {driver.name} (at {driver.point})")
        for victim in [driver, *(d for d in self._live() if d.companion_of is driver)]:
            victim.killed = True
            self._unwind(victim)

    def _unwind(self, driver: Driver) -> None:
        if not driver.done:
            self._resume_thread(driver)

    def _jump(self) -> None:
        shortest, longest = _draw(self.rng, [(c, (lo, hi)) for c, lo, hi in self.profile.jumps])
        seconds = self.rng.uniform(shortest, longest)
        self._line(f"clock +{seconds:.1f} s")
        self._advance_noted(self.clock.now() + seconds)

    def _advance_noted(self, moment: float) -> None:
        settled = self._settle_until(moment)
        self.clock.set(moment)
        self.note(f"→ t={self.clock.now() - START:.1f}" + "".join(f"; {s}" for s in settled))

    def _advance(self, moment: float, why: str) -> None:
        self._line(f"clock jumps {why}")
        self._advance_noted(moment)

    def _settle_until(self, moment: float) -> list[str]:
        """Settle, in deadline order, every request whose deadline ``moment`` passes: the
        provider commits (or drops) a request within the caller's timeout."""
        settled = []
        for request in sorted(self.in_flight, key=lambda q: (q.deadline, q.seq)):
            if request.deadline <= moment:
                self.clock.set(request.deadline)
                settled.append(request.provider.settle(request))
        return settled

    def _wake_sleepers(self) -> bool:
        """Move the clock to the earliest wake-up of a sleeping driver, if any sleeps."""
        wakes = [d.wake for d in self._live() if d.wake is not None and not self._runnable(d)]
        if not wakes:
            return False
        self._line("every live driver sleeps: clock")
        self._advance_noted(min(wakes))
        return True

    def _abandon(self) -> None:
        """Unwind any thread still parked (after a harness error): nothing may outlive the
        schedule."""
        for driver in self._live():
            driver.killed = True
            driver.go.release()
        for driver in self.drivers:
            if driver.thread is not None:
                driver.thread.join(5)

    # -- the invariants -----------------------------------------------------------------------

    def check(self) -> None:
        """The invariants, once the schedule has drained.

        1. No effect made twice: a provider that does not deduplicate by idempotency key has at
           most one committed change per operation ID (and every change it made belongs to an
           operation a run recorded).
        2. Every run ends or waits for a person: ``done``, ``cancelled`` or ``needs_person``, or
           ``waiting`` in a ``pause`` state (for a decision or a signal).
        3. A saga that ends compensated undid what it did: in a ``compensated`` state, every
           forward change a provider made was undone there (a compensation it made named that
           change's receipt: the hold it releases), or is declared kept on purpose
           (``compensation: "none: …"``); a saga that cannot tell belongs in the operator queue
           instead.
        4. No driver died of an error that is not a Ratchet error (a traceback for a user).
        """
        operations = {op.operation_id: op for op in self.store.operations()}
        committed: dict[str, tuple[Provider, list[dict[str, Any]]]] = {}
        for provider in self.providers.values():
            for op_id, made in provider.changes.items():
                committed[op_id] = (provider, made)
                op = operations.get(op_id)
                if op is None:
                    self.violations.append(
                        f"{provider.name} made a change for op {op_id[:8]}, which no run recorded"
                    )
                if len(made) > 1 and not provider.dedup:
                    steps = ", ".join(f"step {m['step']} by {m['by']}" for m in made)
                    where = f" of {short(op.run_id)}" if op is not None else ""
                    self.violations.append(
                        f"{made[0]['effect']} (op {op_id[:8]}{where}) was made {len(made)} "
                        f"times at {provider.name}, which does not deduplicate: {steps}"
                    )
        for run in self.store.list_runs(limit=100):
            spec = load(run.workflow)[0]
            kind = spec.states[run.state].kind
            if run.status not in ENDED and not (run.status == "waiting" and kind == "pause"):
                self.violations.append(
                    f"run {short(run.id)} ({run.business_key}) was left {run.status} in "
                    f"{run.state} ({kind}) after the final worker"
                )
            if kind == "compensated":
                self._check_saga(run, spec, operations, committed)
        for driver in self.drivers:
            if driver.crash is not None:
                self.violations.append(f"{driver.name} crashed:\n{driver.crash}")

    def _check_saga(
        self,
        run: RunRecord,
        spec: Spec,
        operations: dict[str, OperationRecord],
        committed: dict[str, tuple[Provider, list[dict[str, Any]]]],
    ) -> None:
        """Every change a forward operation of ``run`` made is undone at its provider: a
        committed compensation named its receipt (the hold it releases)."""
        for op in operations.values():
            if op.run_id != run.id or op.role != "forward" or op.operation_id not in committed:
                continue
            row = next(
                (r for r in spec.transitions if r.external_effect == op.effect and r.compensation),
                None,
            )
            if row is not None and row.compensation is not None and row.compensation.effect is None:
                continue  # kept on purpose: "none: ..." or "impossible: ..."
            provider, made = committed[op.operation_id]
            for change in made:
                kept = [v for v in change["receipt"].values() if v not in provider.undone]
                if kept:
                    self.violations.append(
                        f"run {short(run.id)} ({run.business_key}) ended {run.state} "
                        f"(compensated) but {op.effect} (op {op.operation_id[:8]}) still holds "
                        f"{kept[0]} at {provider.name}: no compensation undid it"
                    )


def _draw(rng: random.Random, options: list[tuple[float, T]]) -> T:
    """One of ``options``, each ``(weight, value)``, drawn with chance in proportion to its
    weight."""
    draw = rng.random() * sum(weight for weight, _ in options)
    for weight, value in options:
        draw -= weight
        if draw < 0:
            return value
    return options[-1][1]


def _receipt_field(spec: Spec, effect: str) -> str | None:
    for row in spec.transitions:
        if row.external_effect == effect:
            return row.receipt or spec.effects[effect].receipt
    return spec.effects[effect].receipt


# -- running one --------------------------------------------------------------------------------


def run_schedule(
    seed: int, store: Store, profile: Profile | str = "mixed", commands: Any = None
) -> Result:
    """Run schedule ``seed`` of ``profile`` on ``store`` and check it (``commands``: see
    :attr:`Simulation.commands`)."""
    return Simulation(seed, store, profile, commands).run()
