"""A seeded, deterministic simulation of Ratchet's drivers over shared runs.

One *schedule* interleaves several drivers — ``ratchet run``
(:func:`ratchet_runner.engine.commands.start`), ``approve``/``reject``
(:func:`ratchet_runner.engine.commands.decide`), ``resume``, ``ops`` and worker passes
(:func:`ratchet_runner.worker.passes.worker_pass`), among them a late "rescuer" that starts after
the clock has jumped past every lease — over one or two runs of the shipped specs, against simulated
providers that commit late, lose replies, are unavailable, refuse and fail lookups. Between any two
steps the scheduler may let another driver go on, let a provider commit a request it holds, jump the
clock, stall a driver between its lease check and its send, or kill a driver. Then it drains the
schedule and checks its invariants (see :meth:`Simulation.check`): no effect made twice, every run
ends or waits for a person, every change a compensated saga made is undone or declared kept, no
driver crashed, and no change made twice by a provider that broke its commits_within went
undetected.

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
provider, which still commits it within the call's timeout (in the late-commit profiles, at the
moment drawn for it). A **stall** is SIGSTOP between a lease check and the send: the clock moves
on while the driver stays where it is. A **clock jump** first settles every request whose moment
it passes.

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
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ratchet_runner.engine import commands as real_commands
from ratchet_runner.engine.runner import Runner, RunnerOptions
from ratchet_runner.engine.verify import is_verification
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

    #: Whether invariant 3 passes over a change a provider committed beyond its commits_within
    #: after the saga had given its operation up (exhausted, its undo skipped because a lookup
    #: after the window found nothing), counting it instead ("change made beyond the window
    #: after its saga gave it up"). It no longer does: the retry's verification finds such a
    #: change, and the run undoes it and hands itself to a person (:mod:`verify`). Kept so that
    #: a harness check can tell the engine's handling from the harness's excuse.
    late_changes_excused = False

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
        #: commit every request within the call's timeout (the shipped specs' longest is 15 s);
        #: in the late-commit profiles, one drawn per schedule (``Profile.commits_within``).
        self.commits_within = 15.0
        #: The late-commit profiles' draws: the longest delay within the window (a fraction of
        #: it), and the chance a late request is committed beyond it.
        self.delay_spread = 1.0
        self.beyond = 0.0
        self._stalls_left = 0
        self._finals = 0
        self._standbys = 0

    # -- yield points (called from driver threads) --------------------------------------------

    def current(self) -> Driver | None:
        driver: Driver | None = getattr(self._local, "driver", None)
        return driver

    def current_name(self) -> str:
        driver = self.current()
        return driver.name if driver is not None else "scheduler"

    def park(
        self,
        point: str,
        ready: Callable[[], bool] | None = None,
        wake: float | None = None,
        stall: str | None = None,
        deadline: float | None = None,
    ) -> None:
        """Hand control back to the scheduler and wait for this driver's next turn (which comes
        only once ``ready()`` holds). A killed driver raises :class:`Killed` instead. ``stall``:
        this is a point between a lease check and the send, where the scheduler may stall the
        driver (:meth:`_stall`); ``deadline``: the deadline of the call it is about to make, as
        far as it is known here."""
        driver = self.current()
        if driver is None:
            return
        if driver.killed:
            raise Killed
        driver.point, driver.ready, driver.wake = point, ready, wake
        driver.stall = stall
        if deadline is not None:
            driver.call_deadline = deadline
        self._back.release()
        driver.go.acquire()
        if driver.killed:
            raise Killed

    def pause_point(self, point: str, deadline: float | None = None) -> None:
        """A yield point between a lease check and the send, where the scheduler may stall the
        driver: only in the profiles that stall drivers there (``Profile.stall_points``); the
        others keep their schedules as they were."""
        if self.profile.stall_points:
            self.park(point, stall=point, deadline=deadline)

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
        runner = SimRunner(
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
        runner.sim = self
        return runner

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
            passes, poll = rng.choice(profile.passes), rng.uniform(*profile.polls)
            add(Arrival(f"worker-{w + 1}", worker(rng.random() < 0.7, passes, poll)))
        self._rescues_left = rng.choice(profile.rescues)
        self._kills_left = rng.choice(profile.kills)
        self.lease = rng.choice(profile.leases)
        self.settle_weight = rng.choice(profile.settle_weights)
        # Back-offs waited in the process (up to 5 s, the default) or all stored as ``wake_at``
        # for a worker to pick up
        self.inline_wait = rng.choice(profile.inline_waits)
        self.jump_weight = rng.choice(profile.jump_weights)
        if profile.timed or profile.stall_points:  # drawn last: the other profiles' draws stay
            self._stalls_left = rng.choice(profile.stalls)
            if profile.timed:
                self.commits_within = rng.choice(profile.commits_within)
                self.delay_spread = rng.choice(profile.delay_spread)
                self.beyond = rng.choice(profile.beyond)

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
            self._final_verifications()
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
        # A request committed at a drawn moment settles when the clock comes to it: while its
        # caller waits for it and the schedule explores, the scheduler may move the clock there
        # (the caller's timeout, or the commit before it); else only the clock's own moves do
        # (jumps, stalls, a sleeping driver's wake-up), so that a caller that gave up goes on.
        choices += [
            (self.settle_weight, "settle", r)
            for r in self.in_flight
            if r.commit_at is None or (exploring and not r.answered)
        ]
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
        if self._stalls_left:
            weight = self.profile.stall_weight
            choices += [
                (weight, "stall", d)
                for d in self._live()
                if d.started and d.stall is not None and not d.killed and d.ready is None
            ]
        return choices

    def _pick(self, choices: list[tuple[float, str, Any]]) -> tuple[str, Any]:
        return _draw(self.rng, [(weight, (kind, subject)) for weight, kind, subject in choices])

    def _explore(self) -> None:
        while self.step_no < self.profile.max_steps:
            choices = self._choices(exploring=True)
            if not choices:
                if not self._wake_sleepers() and not self._standby():
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
            elif kind == "stall":
                self._stall(subject)
            else:
                self._kill(subject)

    def _standby(self) -> bool:
        """Nothing is left to move but the clock: while the schedule may (``Profile.standby``)
        and a run is running or a request in flight, move the clock to the next moment
        something is due (a running run's wake-up or lease end, a provider's next moment for a
        request) and call a worker in there. False: nothing to do."""
        if self._standbys >= self.profile.standby:
            return False
        now = self.clock.now()
        running = self.store.list_runs("running", limit=100)
        moments = [q.due() for q in self.in_flight]
        moments += [r.wake_at for r in running if r.wake_at is not None]
        moments += [r.lease_expires_at for r in running if r.lease_expires_at is not None]
        if not running and not moments:
            return False
        self._standbys += 1
        self.seen["standby worker"] += 1
        self._line("every driver is done: clock to the next moment something is due")
        self._advance_noted(max(now, min(moments) + 0.01) if moments else now)
        passes = self.rng.choice((1, 2, 4))
        self._spawn(Arrival(f"standby-{self._standbys}", worker(False, passes)))
        return True

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
        for _ in range(8):
            running = self.store.list_runs("running", limit=100)
            due = self.store.due_timers(self.clock.now())
            if not running and not due and not self.in_flight:
                return
            moments = [self.clock.now()]
            moments += [r.lease_expires_at for r in running if r.lease_expires_at is not None]
            moments += [r.wake_at for r in running if r.wake_at is not None]
            moments += [q.last() for q in self.in_flight]
            self._advance(max(moments) + 1.0, "past every lease")
            if running or due:
                self._finals += 1
                self._spawn(Arrival(f"final-worker-{self._finals}", worker(False)))
                self._drain(f"final worker {self._finals}")

    def _final_verifications(self, rounds: int = 40) -> None:
        """While a change some provider made twice has not been detected, or a change was made
        under an operation its run does not believe made (given up, or its undo skipped as not
        made) and no detection names it, move the clock to the next verification that is due (a
        timer of state ``*``, armed by a retry made on a "not found" believed after the
        provider's window, or by a skipped undo: :mod:`ratchet_runner.engine.verify`) and past
        every lease, and let a final worker fire it and take the runs as far as they go; until
        none is left (the engine arms none a day after) or ``rounds`` have passed. A schedule
        in which nothing was made twice or unbelieved needs none."""
        for _ in range(rounds):
            if not self._undetected() and not self._unbelieved():
                return
            timers = [
                timer
                for run in self.store.list_runs(limit=100)
                for timer in self.store.timers(run.id)
                if timer.fired_at is None and is_verification(timer)
            ]
            if not timers:
                return
            self.seen["final verification"] += 1
            leases = [r.lease_expires_at for r in self.store.list_runs(limit=100)]
            moments = [self.clock.now(), min(t.due_at for t in timers)]
            moments += [moment + 1.0 for moment in leases if moment is not None]
            self._advance(max(moments), "to the next verification")
            self._finals += 1
            self._spawn(Arrival(f"final-worker-{self._finals}", worker(False)))
            self._drain(f"final worker {self._finals}")
            self._final_passes()

    # -- actions ------------------------------------------------------------------------------

    def _line(self, text: str) -> None:
        self.step_no += 1
        self.log.append(f"step {self.step_no}: {text}")

    def _settle(self, request: Request) -> None:
        if request.commit_at is not None:  # its moment is drawn: the clock goes there
            self._line(f"clock to {request.provider.name}'s next moment for {request.describe()}")
            self._advance_noted(max(self.clock.now(), request.due()))
            return
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

    def _stall(self, driver: Driver) -> None:
        """Stall ``driver`` where it stands, between a lease check and its send (SIGSTOP, a
        long pause, a slow commit): the clock moves on by a moment, just past every lease on
        record (and a rescuer may arrive), or just past the deadline of the call it is about to
        make, while the driver stays where it is."""
        self._stalls_left -= 1
        now = self.clock.now()
        self._runs_now()
        options: list[tuple[float, tuple[str, float]]] = [
            (0.25, ("by a moment", now + self.rng.uniform(0.1, 4.0)))
        ]
        if self._lease_ends:
            ends = max(now, *self._lease_ends)
            options.append((0.45, ("just past every lease", ends + self.rng.uniform(0.1, 3.0))))
        deadline = driver.call_deadline
        if deadline is not None and deadline >= now:
            options.append((0.3, ("just past the call's deadline", deadline + 0.001)))
        how, moment = _draw(self.rng, options)
        point = driver.stall or driver.point
        self.seen["stall before sending"] += 1
        self.seen[f"stall {point}"] += 1
        self.seen[f"stall {how}"] += 1
        self._line(f"{driver.name} stalls {point} (SIGSTOP): clock {how}")
        self._advance_noted(moment)
        if how == "just past every lease" and self.rng.random() < self.profile.stall_rescue:
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
        """Settle, in the order of their moments, every request whose next moment ``moment``
        passes (:meth:`Request.due`): the provider commits (or drops) a request by the caller's
        timeout; in the late-commit profiles, at its drawn moment, which may come after the
        caller has given up on its timeout."""
        settled: list[str] = []
        while True:
            due = [q for q in self.in_flight if q.due() <= moment]
            if not due:
                return settled
            request = min(due, key=lambda q: (q.due(), q.seq))
            self.clock.set(request.due())
            settled.append(request.provider.settle(request))

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
           most one committed change per operation ID among the changes it committed within the
           commits_within it declares (and every change it made belongs to an operation a run
           recorded). With every commit within it, as in every profile but
           ``late-commits-beyond``: at most one change per operation ID.
        5. No duplicate undetected: an operation ID whose change such a provider made more
           than once (a request committed beyond its commits_within among them) has every one
           of its changes named by a detection (a ``duplicate_detected`` event in its run's
           history, or a row in :meth:`Store.duplicates`); its run was then handed to a person
           (a ``queued`` event naming it); and each extra change was undone where the row
           declares a compensation effect (a compensation the provider made named its
           receipt), or a person was told to undo it by hand (its undo failed, or there is
           none).
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
        detections = self._detections()
        for provider in self.providers.values():
            for op_id, made in provider.changes.items():
                committed[op_id] = (provider, made)
                op = operations.get(op_id)
                if op is None:
                    self.violations.append(
                        f"{provider.name} made a change for op {op_id[:8]}, which no run recorded"
                    )
                if len(made) > 1 and not provider.dedup:
                    self._check_twice(provider, op_id, made, op, detections.get(op_id))
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

    def _detections(self) -> dict[str, Detection]:
        """What the runs recorded of changes found made more than once, by operation ID."""
        found: dict[str, Detection] = {}
        for run in self.store.list_runs(limit=100):
            history = self.store.history(run.id)
            for n, event in enumerate(history):
                if event.kind != "duplicate_detected":
                    continue
                data = event.data
                seen = found.setdefault(str(data["operation_id"]), Detection(run))
                seen.receipts.append(dict(data.get("kept") or {}))
                undos = list(data.get("undo_operations") or [])
                for index, receipt in enumerate(data.get("extra") or []):
                    undo = undos[index] if index < len(undos) else None
                    seen.extra.append((dict(receipt), undo, data.get("cannot_undo")))
                    seen.receipts.append(dict(receipt))
                seen.handed |= any(
                    later.kind == "queued"
                    and data["operation_id"] in later.data.get("duplicates", ())
                    for later in history[n + 1 :]
                )
        for row in self.store.duplicates():
            seen = found.setdefault(row.operation_id, Detection(self.store.get_run(row.run_id)))
            seen.receipts += [dict(r) for r in row.receipts]
        return found

    def _undetected(self) -> list[str]:
        """The operation IDs whose change a provider that does not deduplicate made more than
        once, and which no detection names every change of."""
        detections = self._detections()
        missing = []
        for provider in self.providers.values():
            if provider.dedup:
                continue
            for op_id, made in provider.changes.items():
                seen = detections.get(op_id)
                if len(made) > 1 and (
                    seen is None or any(m["receipt"] not in seen.receipts for m in made)
                ):
                    missing.append(op_id)
        return missing

    def _unbelieved(self) -> list[str]:
        """The operation IDs under which a provider made a change that the operation's run does
        not record as made (the operation not ``done``), and which no detection names."""
        detections = self._detections()
        missing = []
        for provider in self.providers.values():
            for op_id, made in provider.changes.items():
                op = self.store.operation(op_id)
                if not made or op is None or op.status == "done":
                    continue
                seen = detections.get(op_id)
                if seen is None or any(m["receipt"] not in seen.receipts for m in made):
                    missing.append(op_id)
        return missing

    def _check_twice(
        self,
        provider: Provider,
        op_id: str,
        made: list[dict[str, Any]],
        op: OperationRecord | None,
        seen: Detection | None,
    ) -> None:
        """Invariants 1 and 5 for an operation ID whose change ``provider`` made more than
        once."""
        steps = ", ".join(
            f"step {m['step']} by {m['by']}"
            + (" (beyond its commits_within)" if m["beyond"] else "")
            for m in made
        )
        where = f" of {short(op.run_id)}" if op is not None else ""
        what = (
            f"{made[0]['effect']} (op {op_id[:8]}{where}) was made {len(made)} times at "
            f"{provider.name}, which does not deduplicate: {steps}"
        )
        within = [m for m in made if not m["beyond"]]
        if len(within) > 1:
            self.violations.append(
                what + f"; {len(within)} of them committed within its commits_within "
                f"({self.commits_within:g} s)"
            )
            return
        self.seen["change made twice"] += 1
        missing = [m["receipt"] for m in made if seen is None or m["receipt"] not in seen.receipts]
        if missing or seen is None:
            self.violations.append(
                what + f"; never detected: no duplicate_detected names {_receipts(missing)}"
            )
            return
        self.seen["change made twice, detected"] += 1
        if not seen.handed:
            self.violations.append(
                what + "; detected, but its run was never handed to a person for it"
            )
        if op is None:
            return
        undo = _undo_effect(load(seen.run.workflow)[0], op.effect) if op.role == "forward" else None
        undone = set().union(*(p.undone for p in self.providers.values()))
        for receipt, undo_id, cannot in seen.extra:
            if undo is None or cannot:
                continue  # no undo to make: the person is told to undo it by hand
            if any(v in undone for v in receipt.values()):
                continue
            undo_op = self.store.operation(undo_id) if undo_id else None
            if undo_op is not None and undo_op.status != "done" and seen.handed:
                self.seen["extra change left to a person (its undo failed)"] += 1
                continue
            self.violations.append(
                what + f"; the extra change {_receipts([receipt])} was never undone by {undo} "
                f"(its undo {undo_id[:8] if undo_id else 'never registered'}"
                f"{', ' + undo_op.status if undo_op is not None else ''})"
            )

    def _left_to_person(self, op_id: str, receipt: dict[str, Any]) -> bool:
        """Whether ``receipt``, an extra change of ``op_id``, was handed to a person to undo
        by hand (its undo failed, or none can be made)."""
        seen = self._detections().get(op_id)
        if seen is None or not seen.handed:
            return False
        for extra, undo_id, cannot in seen.extra:
            if extra == receipt:
                undo_op = self.store.operation(undo_id) if undo_id else None
                return bool(cannot) or (undo_op is not None and undo_op.status != "done")
        return False

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
                if kept and self._left_to_person(op.operation_id, change["receipt"]):
                    continue  # an extra change whose undo failed: a person was told
                if kept and change["beyond"] and op.status != "done":
                    self.seen["change made beyond the window after its saga gave it up"] += 1
                    if self.late_changes_excused:
                        continue
                if kept:
                    self.violations.append(
                        f"run {short(run.id)} ({run.business_key}) ended {run.state} "
                        f"(compensated) but {op.effect} (op {op.operation_id[:8]}) still holds "
                        f"{kept[0]} at {provider.name}: no compensation undid it"
                    )


@dataclass
class Detection:
    """What a run recorded of one operation ID's change found made more than once: every
    receipt its detections named, each extra change with its undo (and why none can be made),
    and whether the run was handed to a person after it."""

    run: RunRecord
    receipts: list[dict[str, Any]] = field(default_factory=list)
    extra: list[tuple[dict[str, Any], str | None, Any]] = field(default_factory=list)
    handed: bool = False


def _receipts(receipts: list[dict[str, Any]]) -> str:
    return ", ".join("/".join(str(v) for v in r.values()) for r in receipts) or "them"


def _undo_effect(spec: Spec, effect: str) -> str | None:
    """The compensation effect the row performing ``effect`` declares, if it declares one."""
    for row in spec.transitions:
        if row.external_effect == effect and row.compensation is not None:
            return row.compensation.effect
    return None


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
