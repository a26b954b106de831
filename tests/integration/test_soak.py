"""The pool at scale: worker processes share one store, the booking saga and the refund run by
the thousand with 1 % of calls failing transiently, and workers are killed with SIGKILL at random
moments. Every run ends; the practice database holds exactly the expected changes.

Sizes come from the environment so CI and a longer soak share one test:
``RATCHET_SOAK_RUNS`` (runs per workflow; default 1,000 on PostgreSQL, 150 on SQLite),
``RATCHET_SOAK_WORKERS`` (processes; default 8 on PostgreSQL, 3 on SQLite) and
``RATCHET_SOAK_KILLS`` (default 50 on PostgreSQL, 10 on SQLite).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ratchet_runner.adapters.practice import PracticeWorld
from ratchet_runner.clock import SystemClock
from ratchet_runner.engine.approvals import pending_request
from ratchet_runner.engine.deciding import decide
from ratchet_runner.engine.runner import Runner
from ratchet_runner.errors import RatchetError
from ratchet_runner.spec.model import Spec
from ratchet_runner.store.store import Store
from tests.conftest import ratchet_process, spec_and_text


def _size(name: str, postgres: bool, pg_default: int, sqlite_default: int) -> int:
    return int(os.environ.get(name, pg_default if postgres else sqlite_default))


def _spawn(home: Path, url: str) -> subprocess.Popen[str]:
    return ratchet_process(
        home, url, "worker", "--concurrency", "2", "--lease", "3", "--poll", "0.05"
    )


def _approver(store: Store, world: PracticeWorld, stop: threading.Event) -> None:
    """Pre-approve what waits for a decision, as an agent would."""
    runner = Runner(store, lambda a: world.adapter(a.kind), SystemClock())
    while not stop.is_set():
        for run in store.list_runs("waiting", limit=500):
            request = pending_request(runner, run)
            if request is None:
                continue
            with contextlib.suppress(RatchetError):  # moved meanwhile: seen again next pass
                decide(runner, run.id, "approve", "agent-soak", request.roles[0])
        stop.wait(0.1)


@pytest.mark.slow
def test_workers_at_scale_with_kills_make_exactly_the_expected_changes(
    store_url: str, tmp_path: Path
) -> None:
    postgres = store_url.startswith("postgresql")
    runs_each = _size("RATCHET_SOAK_RUNS", postgres, 1000, 150)
    workers_n = _size("RATCHET_SOAK_WORKERS", postgres, 8, 3)
    kills_target = _size("RATCHET_SOAK_KILLS", postgres, 50, 10)
    home = tmp_path / "home"
    world = PracticeWorld(home / "practice.db")
    store = Store(store_url)
    # The workers' leases are short (3 s): so are the effects' timeouts, which a lease must cover.
    refund, refund_text = spec_and_text("refund", timeout="500ms")
    booking, booking_text = spec_and_text("booking", timeout="500ms")
    orders = [
        {"order": f"LK-{100000 + i}", "paid": 50.0, "currency": "CAD"} for i in range(runs_each)
    ]
    world.seed({"orders": orders})
    every_hundredth = list(range(100, 10 * runs_each, 100))
    for effect in ("request_refund", "hold_flight", "hold_hotel", "confirm_itinerary"):
        world.add_fault(effect, "unavailable", calls=every_hundredth)
    runner = Runner(store, lambda a: world.adapter(a.kind), SystemClock())
    todo: list[tuple[Spec, str, dict[str, Any]]] = []
    for i in range(runs_each):
        refund_input = {
            "ticket": f"T-{700000 + i}",
            "order": f"LK-{100000 + i}",
            "amount": 9.95,
            "currency": "CAD",
            "reason": "RFD-LATE",
        }
        trip = {
            "trip": f"TRIP-{i}",
            "traveller": f"PAX-{i}",
            "flight": "AC123-2026-12-20",
            "hotel": "HARBOUR-INN",
            "nights": 2,
        }
        todo += [(refund, refund_text, refund_input), (booking, booking_text, trip)]
    # New work arrives in as many batches as there are kills, one before each: every kill falls
    # while runs are in progress, however fast the workers drain them.
    per_kill = -(-len(todo) // kills_target)
    started = [runner.start(*job)[0] for job in todo[:per_kill]]
    todo = todo[per_kill:]
    stop = threading.Event()
    approver = threading.Thread(target=_approver, args=(store, world, stop), daemon=True)
    approver.start()
    rng = random.Random(11)
    workers = [_spawn(home, store_url) for _ in range(workers_n)]
    kills = 0
    deadline = time.monotonic() + float(os.environ.get("RATCHET_SOAK_SECONDS", 600))
    try:
        while time.monotonic() < deadline:
            counts = store.status_counts()
            if not todo and counts.get("done", 0) + counts.get("needs_person", 0) == len(started):
                break
            time.sleep(rng.uniform(0.1, 0.5))
            started += [runner.start(*job)[0] for job in todo[:per_kill]]
            todo = todo[per_kill:]
            if kills < kills_target:
                victim = workers.pop(rng.randrange(len(workers)))
                victim.send_signal(signal.SIGKILL)
                victim.wait()
                kills += 1
                workers.append(_spawn(home, store_url))
    finally:
        stop.set()
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            worker.wait(timeout=120)
    final = Counter(store.get_run(r.id).state for r in started)
    assert final == {"refunded": runs_each, "confirmed": runs_each}, final
    made = Counter(c.operation for c in world.changes())
    assert made == {
        "refund": runs_each,
        "hold_flight": runs_each,
        "hold_hotel": runs_each,
        "confirm": runs_each,
    }
    per_id = Counter(c.operation_id for c in world.changes())
    assert max(per_id.values()) == 1
    assert kills == kills_target
    store.close()
