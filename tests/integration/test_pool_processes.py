"""Several worker processes share one store; workers are killed with SIGKILL at random moments
and replaced; every run ends, and the practice world holds each change exactly once."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from ratchet_runner.adapters.practice import PracticeWorld
from ratchet_runner.clock import SystemClock
from ratchet_runner.engine.runner import Runner
from ratchet_runner.spec.model import Example, Spec
from ratchet_runner.spec.validate import load_spec_text
from ratchet_runner.store.store import Store
from tests.conftest import PRACTICE_BINDING, RATCHET, ROOT, ratchet_process, spec_and_text

RUNS = 60
KILLS = 6


@dataclass
class Labels:
    """The return-label workflow on a fresh store and practice world, with one fault."""

    home: Path
    world: PracticeWorld
    store: Store
    runner: Runner
    spec: Spec
    text: str
    example: Example


def labels_with(tmp_path: Path, store_url: str, fault: str, times: int) -> Labels:
    home = tmp_path / "home"
    world = PracticeWorld(home / "practice.db")
    store = Store(store_url)
    spec, text = spec_and_text("returns", timeout="200ms")  # the workers' leases are short
    # An attempt cut short by a kill counts against the budget: with 3 (the shipped figure), one
    # label's unavailable reply, a kill mid-call and another unavailable reply exhaust it, which
    # is right, but no run here should end with a person. 10 is more than faults and kills.
    text = text.replace("max_attempts: 3", "max_attempts: 10")
    spec = load_spec_text(text, "returns.yaml")
    example = spec.examples["T-90604"]
    world.seed({"orders": example.world["orders"]})
    world.add_fault("create_label", fault, times=times)
    runner = Runner(store, lambda a: world.adapter(a.kind), SystemClock())
    return Labels(home, world, store, runner, spec, text, example)


def freeze_outside_writes(process: subprocess.Popen[str], databases: list[Path]) -> None:
    """Freeze ``process`` (SIGSTOP) at a moment it holds no write lock on any of the SQLite
    ``databases``: frozen inside a write (its heartbeat renewing its lease, a connection that
    checkpoints as it closes), it would keep every other process out of that file until it
    thaws, and the test would wait for that, not for its lease. If it holds one, it runs on a
    moment and is frozen again."""
    for _ in range(200):
        process.send_signal(signal.SIGSTOP)
        if not any(write_locked(path) for path in databases):
            return
        process.send_signal(signal.SIGCONT)
        time.sleep(0.02)
    raise AssertionError("the worker was always inside a write when it was frozen")


def write_locked(path: Path) -> bool:
    """Whether another connection holds a write lock on the SQLite database at ``path``."""
    conn = sqlite3.connect(path, timeout=0.2, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return False
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            return True
        raise
    finally:
        conn.close()


def spawn(home: Path, store_url: str) -> subprocess.Popen[str]:
    return ratchet_process(
        home, store_url, "worker", "--concurrency", "2", "--lease", "2", "--poll", "0.05"
    )


@pytest.mark.slow
def test_workers_killed_at_random_moments_leave_every_change_made_exactly_once(
    store_url: str, tmp_path: Path
) -> None:
    setup = labels_with(tmp_path, store_url, "unavailable", 3)  # a few transient failures
    home, world, store, runner = setup.home, setup.world, setup.store, setup.runner
    spec, text, example = setup.spec, setup.text, setup.example
    tickets = [{**example.input, "ticket": f"T-{5000 + i}"} for i in range(RUNS)]
    per_kill = -(-RUNS // KILLS)  # new work before each kill: every kill falls mid-work
    runs = [runner.start(spec, text, ticket)[0] for ticket in tickets[:per_kill]]
    tickets = tickets[per_kill:]
    rng = random.Random(7)
    workers = [spawn(home, store_url) for _ in range(3)]
    kills = 0
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            done = sum(1 for r in runs if store.get_run(r.id).status != "running")
            if done == RUNS:
                break
            time.sleep(rng.uniform(0.2, 0.6))
            runs += [runner.start(spec, text, ticket)[0] for ticket in tickets[:per_kill]]
            tickets = tickets[per_kill:]
            if kills < KILLS:
                victim = workers.pop(rng.randrange(len(workers)))
                victim.send_signal(signal.SIGKILL)
                victim.wait()
                kills += 1
                workers.append(spawn(home, store_url))
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            worker.wait(timeout=60)
    states = Counter(store.get_run(r.id).state for r in runs)
    strays = {
        r.id: [(e.kind, e.data) for e in store.history(r.id)]
        for r in runs
        if store.get_run(r.id).state != "labelled"
    }
    assert states == {"labelled": RUNS}, strays
    labels = [c for c in world.changes() if c.operation == "create_label"]
    assert len(labels) == RUNS
    per_order_ticket = Counter(c.operation_id for c in labels)
    assert set(per_order_ticket.values()) == {1}
    assert kills == KILLS
    for run in runs:  # a rescuer that finds the label pending looks it up before any call
        kinds = [e.kind for e in store.history(run.id)]
        for at in (i for i, kind in enumerate(kinds) if kind == "rescued"):
            after = kinds[at:]
            if "pending" in kinds[:at] and "call" in after:
                assert "resumed" in after[: after.index("call")], kinds
    assert all(r.lease_token is None for r in store.list_runs(limit=RUNS))
    store.close()


@pytest.mark.slow
def test_a_timer_due_while_every_worker_was_down_fires_exactly_once_when_they_return(
    store_url: str, tmp_path: Path
) -> None:
    from ratchet_runner.engine.signals import send_signal
    from ratchet_runner.spec.validate import load_spec

    home = tmp_path / "home"
    world = PracticeWorld(home / "practice.db")
    store = Store(store_url)
    path = ROOT / "tests" / "fixtures" / "parcel.yaml"
    spec, text = load_spec(path), path.read_text(encoding="utf-8")
    world.seed(spec.examples["P-1"].world)
    runner = Runner(store, lambda a: world.adapter(a.kind), SystemClock())
    run, _ = runner.start(spec, text, spec.examples["P-1"].input)
    waiting = runner.advance(run.id)
    send_signal(runner, waiting, "parcel_received", "evt-1", {"weight_kg": 2.0})
    assert store.get_run(run.id).state == "inspecting"
    later = str(time.time() + 2 * 3600)  # the workers come back two hours later
    workers = [
        ratchet_process(home, store_url, "worker", "--once", "--json", now=later, capture=True)
        for _ in range(3)
    ]
    outputs = [w.communicate(timeout=60) for w in workers]
    assert [w.returncode for w in workers] == [0, 0, 0], outputs
    assert store.get_run(run.id).state == "returned"
    assert [e.kind for e in store.history(run.id)].count("timer") == 1
    store.close()


@pytest.mark.slow
def test_a_worker_sigstopped_in_the_call_window_past_its_lease_commits_nothing_after_sigcont(
    store_url: str, tmp_path: Path
) -> None:
    import json

    setup = labels_with(tmp_path, store_url, "slow_reply", 1)
    home, world, store = setup.home, setup.world, setup.store
    run, _ = setup.runner.start(setup.spec, setup.text, setup.example.input)
    env = {
        **os.environ,
        "RATCHET_HOME": str(home),
        "RATCHET_DB": store_url,
        "RATCHET_BINDINGS": str(PRACTICE_BINDING),
    }
    env.pop("RATCHET_NOW", None)
    frozen = ratchet_process(
        home, store_url, "worker", "--lease", "2", "--poll", "0.05", "--json", capture=True
    )
    try:
        deadline = time.monotonic() + 30
        while not any(c["outcome"] == "slow_reply" for c in world.calls("create_label")):
            assert time.monotonic() < deadline, "the worker never reached the call"
            time.sleep(0.05)
        # Inside the call window: the label is made and the provider's reply is 3 s away. A
        # moment's wait first, so the freeze cannot fall while the worker's practice-database
        # connection closes (SQLite checkpoints then, under a lock the rescuer's lookup needs).
        time.sleep(0.5)
        databases = [home / "practice.db"]
        if store_url.startswith("sqlite"):
            databases.append(Path(store_url.removeprefix("sqlite:///")))
        freeze_outside_writes(frozen, databases)
        time.sleep(2.5)  # its lease expires by the database's clock
        rescuer = subprocess.run(
            [RATCHET, "worker", "--once", "--json"],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=60,
        )
        assert rescuer.returncode == 0, rescuer.stderr
        assert store.get_run(run.id).state == "labelled"
        version = store.get_run(run.id).version
        frozen.send_signal(signal.SIGCONT)
        time.sleep(4.0)  # the slow reply arrives; the woken worker tries to commit
    finally:
        frozen.send_signal(signal.SIGCONT)
        frozen.send_signal(signal.SIGTERM)
        out, err = frozen.communicate(timeout=60)
    summary = json.loads(out)
    assert (summary["runs_advanced"], summary["fenced"]) == (0, 1), err
    assert store.get_run(run.id).version == version  # none of its commits took
    assert [c.operation for c in world.changes()] == ["create_label"]
    kinds = [e.kind for e in store.history(run.id)]
    assert kinds.index("rescued") < kinds.index("reconcile_found")
    store.close()
