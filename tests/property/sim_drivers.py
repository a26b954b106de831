"""The drivers of a simulated schedule: each a process with its own runner, driving runs by
the real commands and worker passes (see :mod:`tests.property.simulation`)."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ratchet_runner.engine import commands
from ratchet_runner.engine.runner import Runner
from ratchet_runner.worker.passes import worker_pass
from tests.property.sim_profiles import Workload, load
from tests.property.sim_world import short

if TYPE_CHECKING:
    from tests.property.simulation import Simulation


@dataclass(eq=False)
class Driver:
    """One process driving runs: its own runner, its own thread, scheduled by the simulation."""

    name: str
    body: Callable[[Runner], str]
    runner: Runner
    gate: Callable[[dict[str, tuple[str, str]]], bool] | None = None
    command: bool = False  # a command: its lease is renewed by a heartbeat companion
    companion_of: Driver | None = None
    go: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))
    thread: threading.Thread | None = None
    point: str = "starts"
    ready: Callable[[], bool] | None = None
    wake: float | None = None
    stall: str | None = None  # where it stands, if between a lease check and its send
    call_deadline: float | None = None  # the deadline of the call it is about to make
    started: bool = False
    killed: bool = False
    done: bool = False
    outcome: str = ""
    crash: str | None = None


Factory = Callable[["Simulation", str], Driver]


@dataclass(frozen=True)
class Arrival:
    """A driver the schedule will start, when the scheduler picks it."""

    name: str
    make: Factory


# -- what each driver does ------------------------------------------------------------------


def _said(result: Any) -> str:
    message = str(getattr(result, "message", result))
    then = getattr(result, "then", None)
    return f"{message}; then: {then}" if then else message


def run_command(workload: Workload, key: str, n: int) -> Factory:
    def make(sim: Simulation, name: str) -> Driver:
        spec, text = load(workload.spec)

        def body(runner: Runner) -> str:
            result, _created = sim.commands.start(
                runner, spec, text, workload.input(key, n), **sim.command_options(name)
            )
            return _said(result)

        return sim.driver(name, body)

    return make


def decision(workload: Workload, key: str, verb: str, strict: bool) -> Factory:
    def make(sim: Simulation, name: str) -> Driver:
        def body(runner: Runner) -> str:
            reason = None if verb == "approve" else "simulated"
            result = sim.commands.decide(
                runner,
                key,
                verb,
                f"agent-{name}",
                workload.approver,
                reason,
                **sim.command_options(name),
            )
            return _said(result)

        def gate(runs: dict[str, tuple[str, str]]) -> bool:
            return key in runs and (not strict or runs[key][0] == "waiting")

        return sim.driver(name, body, gate)

    return make


def resume_command(key: str) -> Factory:
    def make(sim: Simulation, name: str) -> Driver:
        def body(runner: Runner) -> str:
            return _said(sim.commands.resume(runner, key, **sim.command_options(name)))

        return sim.driver(name, body, lambda runs: key in runs)

    return make


def operator(workload: Workload, key: str, rng: random.Random) -> Factory:
    action = rng.choice(("retry", "reconcile", "compensate"))

    def make(sim: Simulation, name: str) -> Driver:
        def body(runner: Runner) -> str:
            result = sim.commands.operate(
                runner, key, action, "ops-1", workload.operator, **sim.command_options(name)
            )
            return f"ops {action}: {_said(result)}"

        def gate(runs: dict[str, tuple[str, str]]) -> bool:
            return runs.get(key, ("", ""))[0] == "needs_person"

        return sim.driver(name, body, gate)

    return make


def worker(gated: bool, passes: int = 1, poll: float = 1.0) -> Factory:
    """``ratchet worker``: ``passes`` worker passes, ``poll`` seconds apart (one pass is
    ``ratchet worker --once``)."""

    def make(sim: Simulation, name: str) -> Driver:
        def body(runner: Runner) -> str:
            parts = []
            for n in range(passes):
                if n:
                    runner.clock.sleep(poll)
                report = worker_pass(runner, owner=name, lease_seconds=sim.lease)
                parts += [f"advanced {short(r.id)} to {r.state}" for r in report.advanced]
                parts += [f"raced {short(r)}" for r in report.raced]
                parts += [f"failed {short(r)}: {e}" for r, e in report.failed]
            return f"{passes} pass(es): " + ("; ".join(parts) or "nothing to do")

        gate = (lambda runs: bool(runs)) if gated else None
        return sim.driver(name, body, gate, command=False)

    return make


class _Stop:
    """What a heartbeat waits on (``threading.Event.wait`` in a real command): it sleeps on the
    simulated clock, and is set once the command has let go of the lease, or has ended."""

    def __init__(self, sim: Simulation, command: Driver, run_id: str, token: str) -> None:
        self.sim, self.command, self.run_id, self.token = sim, command, run_id, token

    def is_set(self) -> bool:
        held = self.command.runner.leases.get(self.run_id)
        return self.command.done or held is None or held.token != self.token

    def wait(self, seconds: float) -> bool:
        clock = self.sim.clock
        wake = clock.now() + seconds
        self.sim.park(
            f"heartbeat sleeps {seconds:.0f} s",
            ready=lambda: self.is_set() or clock.now() >= wake,
            wake=wake,
        )
        return self.is_set()


def heartbeat(sim: Simulation, command: Driver) -> Callable[[Runner], str]:
    """A command's heartbeat thread, scheduled like any driver and killed with its command: the
    real ``ratchet_runner.engine.commands.heartbeat``, over a stop event that sleeps on the
    simulated clock."""

    def body(runner: Runner) -> str:
        held = 0
        while not command.done:
            if runner.leases:
                lease = runner.leases.held()[0]
                stop = _Stop(sim, command, lease.run_id, lease.token)
                beat: Any = commands.heartbeat  # its stop is a threading.Event; this is _Stop
                beat(runner, lease, stop)
                held += 1
            sim.park(
                "waits for its command to hold a lease",
                ready=lambda: command.done or bool(runner.leases),
            )
        return f"kept {held} lease(s) alive while they were held"

    return body
