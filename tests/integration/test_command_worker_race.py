"""`ratchet approve` racing a `ratchet worker` process over a provider that is slow to commit,
as the independent tester reproduced it: the practice database's write lock held for ~0.7 s at a
time, so each request (and each lookup) waits before it commits. Before the fix the approving
command called without a lease; the worker claimed the run while that request was in flight,
reconciled (nothing yet), and called again with the same ID — two itineraries for one trip at a
travel agency that does not deduplicate. Real processes, SQLite and PostgreSQL."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from ratchet_runner.adapters.practice import PracticeWorld
from ratchet_runner.clock import SystemClock
from ratchet_runner.engine.runner import Runner
from ratchet_runner.store.store import Store
from tests.conftest import ratchet_process, spec_and_text

TRIPS = 4


def hold_the_write_lock(path: Path, stop: threading.Event) -> None:
    """Keep the practice database busy: its write lock held 0.7 s at a time."""
    db = sqlite3.connect(path, timeout=60, isolation_level=None)
    try:
        while not stop.is_set():
            db.execute("BEGIN IMMEDIATE")
            stop.wait(0.7)
            db.execute("COMMIT")
            time.sleep(0.05)
    finally:
        db.close()


@pytest.mark.slow
def test_approve_commands_and_a_worker_on_a_slow_provider_confirm_each_trip_once(
    store_url: str, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    world = PracticeWorld(home / "practice.db")
    store = Store(store_url)
    spec, text = spec_and_text("booking", timeout="5s")  # leases of 8 s cover it
    example = spec.examples["happy"]
    runner = Runner(store, lambda a: world.adapter(a.kind), SystemClock())
    runs = []
    for i in range(TRIPS):
        run, _ = runner.start(spec, text, {**example.input, "trip": f"TRIP-{5000 + i}"})
        runs.append(runner.advance(run))
    assert {r.state for r in runs} == {"approving"}

    worker = ratchet_process(home, store_url, "worker", "--poll", "0.05", "--lease", "8")
    stop = threading.Event()
    locker = threading.Thread(target=hold_the_write_lock, args=(home / "practice.db", stop))
    locker.start()
    try:
        approvals = [
            ratchet_process(
                home,
                store_url,
                "approve",
                run.id,
                "--as",
                "agent-3",
                "--role",
                "travel_agent",
                "--lease",
                "8",
                capture=True,
            )
            for run in runs
        ]
        for process in approvals:
            _, err = process.communicate(timeout=120)
            assert process.returncode == 0, err
        deadline = time.monotonic() + 60
        while {store.get_run(r.id).status for r in runs} != {"done"}:
            assert time.monotonic() < deadline, "the runs did not finish"
            time.sleep(0.1)
    finally:
        stop.set()
        locker.join(30)
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
        store.close()

    confirmed = Counter(c.args["trip"] for c in world.changes() if c.operation == "confirm")
    assert confirmed == {f"TRIP-{5000 + i}": 1 for i in range(TRIPS)}
    per_id = Counter(c.operation_id for c in world.changes())
    assert max(per_id.values()) == 1
