"""Two workers resume the same run at the same moment: one moves it, the other stands down.

Races are real: separate processes (``multiprocessing`` with the spawn context, released
together by a barrier; or two ``ratchet resume`` commands started together) on one store —
SQLite and PostgreSQL — and one practice world. Each race is repeated so that both orders, and
the near-misses in between, get their chance; whatever the interleaving, the practice world
holds exactly one change.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ratchet_runner.adapters.practice import PracticeWorld
from ratchet_runner.clock import Clock, FakeClock, SystemClock
from ratchet_runner.engine.deciding import decide
from ratchet_runner.engine.runner import Runner
from ratchet_runner.errors import VersionConflict
from ratchet_runner.store.records import RunRecord
from ratchet_runner.store.store import Store
from tests.conftest import PRACTICE_BINDING, ROOT, spec_and_text

pytestmark = pytest.mark.slow

ROUNDS = 5  # in-process races (cheap)
CLI_ROUNDS = 3  # command races: each round starts three `ratchet` processes
RATCHET = str(Path(sys.executable).with_name("ratchet"))
EXIT_CONFLICT = 4


class Crash(BaseException):
    """Ends a step where ``--interrupt`` would kill the process (nothing after it runs)."""


def crash_at(point: str) -> Any:
    def interrupt(reached: str, effect: str) -> None:
        if reached == point:
            raise Crash(f"{point} of {effect}")

    return interrupt


def runner_for(
    store: Store, world: PracticeWorld, interrupt: Any = None, clock: Clock | None = None
) -> Runner:
    return Runner(
        store,
        lambda adapter: world.adapter(adapter.kind),
        clock or FakeClock(),
        interrupt=interrupt,
    )


def sent(world: PracticeWorld) -> list[dict[str, Any]]:
    return [c for c in world.calls() if not str(c["operation"]).startswith("lookup")]


# -- the in-process race: two workers, one barrier, runner.step(run) --------------------------


@dataclass(frozen=True)
class Scenario:
    """How a round's run is left before the two workers race on it."""

    name: str

    def prepare(self, store: Store, world: PracticeWorld, round_: int) -> RunRecord:
        if self.name == "refund left pending by a crash":
            spec, text = spec_and_text("refund")
            example = spec.examples["T-90104"]
            world.seed(example.world)
            runner = runner_for(store, world, crash_at("before-write"))
            run, _ = runner.start(spec, text, {**example.input, "ticket": f"T-{90200 + round_}"})
            decide(runner, run.id, "approve", "agent-7", "agent")
            with pytest.raises(Crash):
                runner.advance(run.id)
            (op,) = store.operations(run.id)
            assert (op.status, op.attempts) == ("pending", 1)
        else:  # "label not yet asked for": the effect's first attempt
            spec, text = spec_and_text("returns")
            example = spec.examples["T-90604"]
            world.seed({"orders": example.world["orders"]})
            runner = runner_for(store, world)
            run, _ = runner.start(spec, text, {**example.input, "ticket": f"T-{90300 + round_}"})
            moved = runner.step(run)  # deciding --next--> labelling, no effect yet
            assert moved is not None
            assert moved.state == "labelling"
        return store.get_run(run.id)


SCENARIOS = [Scenario("refund left pending by a crash"), Scenario("label not yet asked for")]


@dataclass
class Workers:
    """Two worker processes on one store URL, each stepping the run it is sent."""

    inboxes: list[Any]
    outbox: Any
    processes: list[Any]

    def race(self, run: RunRecord, world_path: Path) -> list[tuple[Any, ...]]:
        for inbox in self.inboxes:
            inbox.put((run.id, str(world_path)))
        return sorted(self.outbox.get(timeout=120) for _ in self.inboxes)


@pytest.fixture
def workers(store_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Workers]:
    monkeypatch.syspath_prepend(str(ROOT))  # the spawned workers import this module
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(2)
    outbox = context.Queue()
    inboxes = [context.Queue(), context.Queue()]
    processes = [
        context.Process(target=_race_worker, args=(store_url, inbox, outbox, barrier), daemon=True)
        for inbox in inboxes
    ]
    for process in processes:
        process.start()
    yield Workers(inboxes, outbox, processes)
    for inbox in inboxes:
        inbox.put(None)
    for process in processes:
        process.join(timeout=30)


def _race_worker(store_url: str, inbox: Any, outbox: Any, barrier: Any) -> None:
    """Load the run, wait for the other worker, then take one step; report what happened."""
    store = Store(store_url)
    for run_id, world_path in iter(inbox.get, None):
        world = PracticeWorld(world_path)
        runner = runner_for(store, world)
        run = store.get_run(run_id)
        barrier.wait(timeout=60)
        try:
            moved = runner.step(run)
        except VersionConflict:
            outbox.put(("conflict", run.version, None))
        except BaseException as exc:
            outbox.put(("error", run.version, f"{type(exc).__name__}: {exc}"))
        else:
            outbox.put(("moved", run.version, moved.version if moved else None))
    store.close()


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name.replace(" ", "-"))
def test_two_workers_stepping_one_run_at_once_one_moves_it_and_the_other_gets_version_conflict(
    scenario: Scenario, workers: Workers, store_url: str, tmp_path: Path
) -> None:
    store = Store(store_url)
    try:
        for round_ in range(ROUNDS):
            world_path = tmp_path / f"practice-{round_}.db"
            world = PracticeWorld(world_path)
            run = scenario.prepare(store, world, round_)

            outcomes = workers.race(run, world_path)

            (conflict, moved) = outcomes
            assert conflict[:2] == ("conflict", run.version), outcomes
            assert moved[:2] == ("moved", run.version), outcomes
            assert moved[2] is not None
            assert moved[2] > run.version
            after = store.get_run(run.id)
            assert after.status == "done"
            (change,) = world.changes()
            (op,) = store.operations(run.id)
            assert change.operation_id == op.operation_id
            assert op.status == "done"
            assert len(sent(world)) == 1  # the loser sent nothing
    finally:
        store.close()


def test_a_worker_that_loses_the_race_to_an_approved_effect_is_told_the_run_moved_on(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deterministic interleaving of the race on an approved refund not yet begun: worker A
    finds no operation on record, then worker B begins and finishes the effect (consuming the
    approval), then A looks for its approval. A must hear VersionConflict (CLI exit 4, "moved
    on"), not ApprovalError ("has no valid approval", exit 1) — as it did before
    runner/effects.py learnt to tell a lost race from a missing approval."""
    spec, text = spec_and_text("refund")
    example = spec.examples["T-90104"]
    world = PracticeWorld(tmp_path / "practice.db")
    world.seed(example.world)
    store_a, store_b = Store(store_url), Store(store_url)
    a, b = runner_for(store_a, world), runner_for(store_b, world)
    run, _ = a.start(spec, text, example.input)
    decide(a, run.id, "approve", "agent-7", "agent")
    run = store_a.get_run(run.id)
    assert run.state == "refunding"

    look_up_approvals = store_a.approvals

    def b_wins_first(run_id: str) -> Any:
        b.step(store_b.get_run(run_id))
        return look_up_approvals(run_id)

    monkeypatch.setattr(store_a, "approvals", b_wins_first)
    try:
        with pytest.raises(VersionConflict):
            a.step(run)
        assert len(world.changes()) == 1
    finally:
        store_a.close()
        store_b.close()


# -- the CLI race: two `ratchet resume` processes started together ----------------------------


def ratchet(home: Path, db: str, *args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "RATCHET_DEBUG"}
    env |= {"RATCHET_HOME": str(home), "RATCHET_DB": db, "RATCHET_BINDINGS": str(PRACTICE_BINDING)}
    return subprocess.Popen(
        [RATCHET, *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=120)
    return process.returncode, out, err


def test_two_resume_commands_started_together_make_the_change_once(
    store_url: str, tmp_path: Path
) -> None:
    """refund T-90104, approved by a process killed before its request left; then two
    `ratchet resume` race to finish it."""
    spec, text = spec_and_text("refund")
    example = spec.examples["T-90104"]
    store = Store(store_url)
    try:
        for round_ in range(CLI_ROUNDS):
            store.reset()
            home = tmp_path / f"home-{round_}"
            # what `ratchet run specs/refund.yaml --example T-90104` does, without a process
            world = PracticeWorld(home / "practice.db")
            world.seed(example.world)
            cli_clock = SystemClock()  # the approving process reads the system clock too
            run, _ = runner_for(store, world, clock=cli_clock).start(spec, text, example.input)
            run_id = run.id
            code, _, err = finish(
                ratchet(
                    home,
                    store_url,
                    "approve",
                    run_id,
                    "--as",
                    "agent-7",
                    "--role",
                    "agent",
                    "--interrupt",
                    "before-write",
                )
            )
            assert code == -9, err

            racers = [ratchet(home, store_url, "resume", run_id) for _ in range(2)]
            results = sorted(finish(p) for p in racers)

            codes = [code for code, _, _ in results]
            assert codes in ([0, 0], [0, EXIT_CONFLICT]), results
            for code, _, err in results:
                if code == EXIT_CONFLICT:
                    assert "moved on" in err
            assert len(world.changes()) == 1
            assert store.get_run(run_id).status == "done"
    finally:
        store.close()
