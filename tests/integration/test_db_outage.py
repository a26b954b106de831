"""Workers ride out a database restart or failover (real processes, real PostgreSQL).

Two ``ratchet worker`` processes drain bookings of ``specs/booking.yaml`` while (a) a nemesis
terminates every backend of theirs again and again, as a failover does, or (b) the PostgreSQL
server itself is stopped, started and restarted under them. No thread dies and no traceback is
printed; each worker says in its log and its summary that the store was unreachable and that it
came back; both go on advancing runs afterwards; every booking ends, and the practice world holds
each of its changes exactly once.

The nemesis touches only the workers' connections (they connect with an ``application_name`` of
their own), so tests of other schemas in the same database are not disturbed. The restart test
restarts a PostgreSQL cluster of its own, made for it on a free port and dropped afterwards
(Debian's ``pg_createcluster``; root), so that no other test, in this run or in another one on
the same machine, loses its server.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from ratchet_runner.adapters.practice import PracticeWorld
from ratchet_runner.clock import SystemClock
from ratchet_runner.engine.approvals import pending_request
from ratchet_runner.engine.deciding import decide
from ratchet_runner.engine.runner import Runner
from ratchet_runner.errors import RatchetError
from ratchet_runner.spec.model import Spec
from ratchet_runner.store.records import RunRecord
from ratchet_runner.store.store import Store
from tests.conftest import PG_URL, PRACTICE_BINDING, RATCHET, ROOT, postgres_url, spec_and_text

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

BOOKINGS = 40
NEMESIS_SECONDS = 20.0
NEMESIS_EVERY = 0.4
DOWN_SECONDS = 2.0
# The default lease (30 s): a call of a booking (timeout 15 s) must fit in one. A run whose step
# an outage cut off is given back by its worker when the store answers, not when its lease ends.
WORKER_ARGS = ("worker", "--json", "--concurrency", "2", "--poll", "0.05")

TERMINATE = text(
    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
    "WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name = :app"
)


def trip(i: int) -> dict[str, Any]:
    """The booking example ``happy`` under trip reference ``TRIP-<i>``."""
    return {
        "trip": f"TRIP-{9000 + i}",
        "traveller": f"PAX-{i}",
        "flight": "AC123-2026-12-20",
        "hotel": "HARBOUR-INN",
        "nights": 3,
    }


@dataclass
class Worker:
    """A ``ratchet worker --json`` process, its stdout and stderr in files."""

    process: subprocess.Popen[str]
    out: Path
    err: Path

    def log(self) -> str:
        return self.err.read_text(encoding="utf-8")

    def back(self) -> bool:
        """Whether it has said that the store is unreachable, and, since, that it is back."""
        said = [
            line
            for line in self.log().splitlines()
            if "store unreachable (" in line or "store reachable again after" in line
        ]
        return bool(said) and "store reachable again after" in said[-1]

    def stop(self) -> None:
        """SIGTERM, as an operator stops a worker (SIGKILL if it has not stopped in a minute)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def summary(self) -> dict[str, Any]:
        """What it printed when it stopped (``--json``)."""
        printed = self.out.read_text(encoding="utf-8")
        assert printed, f"worker {self.process.pid} printed no summary: {self.log()}"
        summary: dict[str, Any] = json.loads(printed)
        return summary


@dataclass
class Drill:
    """A fresh store and practice world, the booking spec, a runner to start bookings with, and
    the workers: they reach the store through ``worker_url``, whose ``application_name`` is
    ``app``; the test's own connections do not carry it."""

    tmp: Path
    home: Path
    url: str
    worker_url: str
    app: str
    store: Store
    world: PracticeWorld
    runner: Runner
    spec: Spec
    text: str
    runs: list[RunRecord] = field(default_factory=list)
    workers: list[Worker] = field(default_factory=list)

    def start(self, count: int) -> None:
        """Start ``count`` more bookings."""
        for _ in range(count):
            self.runs.append(self.runner.start(self.spec, self.text, trip(len(self.runs)))[0])

    def spawn(self) -> Worker:
        n = len(self.workers)
        env = {
            **os.environ,
            "RATCHET_HOME": str(self.home),
            "RATCHET_DB": self.worker_url,
            "RATCHET_BINDINGS": str(PRACTICE_BINDING),
        }
        env.pop("RATCHET_NOW", None)
        out, err = self.tmp / f"worker-{n}.out", self.tmp / f"worker-{n}.err"
        with out.open("w") as stdout, err.open("w") as stderr:
            process = subprocess.Popen(
                [RATCHET, *WORKER_ARGS],
                stdout=stdout,
                stderr=stderr,
                env=env,
                cwd=ROOT,
                text=True,
            )
        worker = Worker(process, out, err)
        self.workers.append(worker)
        return worker

    def ended(self) -> int:
        """How many bookings are confirmed (0 while the store does not answer)."""
        try:
            return sum(1 for r in self.runs if self.store.get_run(r.id).state == "confirmed")
        except RatchetError:
            return 0


@contextmanager
def drilling(tmp_path: Path, url: str | None = None) -> Iterator[Drill]:
    """A drill on ``url`` (default: a new schema of the test PostgreSQL); at the end, its
    workers are stopped and its store closed."""
    url = url or postgres_url()
    app = f"ratchet_outage_{uuid.uuid4().hex[:10]}"
    home = tmp_path / "home"
    world = PracticeWorld(home / "practice.db")
    store = Store(url)
    spec, spec_text = spec_and_text("booking")
    runner = Runner(store, lambda a: world.adapter(a.kind), SystemClock())
    setup = Drill(
        tmp_path, home, url, f"{url}{'&' if '?' in url else '?'}application_name={app}", app,
        store, world, runner, spec, spec_text,
    )  # fmt: skip
    try:
        yield setup
    finally:
        for worker in setup.workers:
            worker.stop()
        store.close()


def wait_for(what: str, condition: Callable[[], bool], seconds: float) -> None:
    """Wait until ``condition`` holds; fail, naming ``what``, if it does not within ``seconds``."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds:g} s: {what}")
        time.sleep(0.1)


def approver(runner: Runner, stop: threading.Event) -> None:
    """Approve each booking that waits for a decision, as a travel agent would; a pass that
    fails (the run moved meanwhile, the database away) is done again."""
    while not stop.is_set():
        try:
            for run in runner.store.list_runs("waiting", limit=500):
                request = pending_request(runner, run)
                if request is not None:
                    decide(runner, run.id, "approve", "agent-outage", request.roles[0])
        except RatchetError:
            pass
        stop.wait(0.1)


@contextmanager
def approving(setup: Drill) -> Iterator[None]:
    """An approver at work, on a store of its own, for the time of the block."""
    store = Store(setup.url)
    runner = Runner(store, lambda a: setup.world.adapter(a.kind), SystemClock())
    stop = threading.Event()
    thread = threading.Thread(target=approver, args=(runner, stop), daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(30)
        store.close()


def claims_since(setup: Drill, runs: list[RunRecord], since: float) -> Counter[str]:
    """Claims of ``runs`` made after ``since`` (epoch seconds), per worker process ID."""
    by: Counter[str] = Counter()
    for run in runs:
        for event in setup.store.history(run.id):
            if event.kind in ("leased", "rescued") and event.at >= since:
                by[str(event.data["owner"]).split(":")[-2]] += 1
    return by


def check(setup: Drill, since: float) -> None:
    """What every outage test asserts once the workers have stopped (the last outage ended at
    ``since``, epoch seconds, and the last ten bookings were started after it)."""
    for worker in setup.workers:
        worker.stop()
    summaries = [w.summary() for w in setup.workers]
    logs = [w.log() for w in setup.workers]
    assert [r.state for r in (setup.store.get_run(r.id) for r in setup.runs)] == [
        "confirmed"
    ] * len(setup.runs)
    for log, summary in zip(logs, summaries, strict=True):
        assert "Traceback" not in log, log
        assert "Exception in thread" not in log, log
        assert "store unreachable (" in log, log
        assert "store reachable again after" in log, log
        assert summary["store_outages"] >= 1, summary
        assert summary["store_unreachable_seconds"] > 0, summary
        assert summary["store_unreachable"] is False, summary
        assert summary["failed"] == [], summary
    # Both processes went on claiming runs after the last outage.
    post = setup.runs[-10:]
    claimed = claims_since(setup, post, since)
    pids = [str(w.process.pid) for w in setup.workers]
    assert all(claimed[pid] > 0 for pid in pids), (claimed, pids)
    # Each booking's changes were made exactly once in the practice world.
    changes = setup.world.changes()
    made = Counter(c.operation for c in changes)
    assert made == {"hold_flight": BOOKINGS, "hold_hotel": BOOKINGS, "confirm": BOOKINGS}, made
    per_trip = Counter((c.operation, c.args["trip"]) for c in changes)
    assert set(per_trip.values()) == {1}
    assert max(Counter(c.operation_id for c in changes).values()) == 1


def test_workers_ride_out_their_backends_terminated_every_few_hundred_ms(
    tmp_path: Path,
) -> None:
    terminated: list[int] = []
    failures: list[BaseException] = []
    stop = threading.Event()

    def nemesis(app: str) -> None:
        engine = create_engine(PG_URL, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as conn:
                ends = time.monotonic() + NEMESIS_SECONDS
                while time.monotonic() < ends and not stop.is_set():
                    terminated.append(int(conn.execute(TERMINATE, {"app": app}).scalar_one()))
                    stop.wait(NEMESIS_EVERY)
        except BaseException as exc:  # reported by the test, not by the threading module
            failures.append(exc)
        finally:
            engine.dispose()

    with drilling(tmp_path) as setup:
        setup.start(10)
        chaos = threading.Thread(target=nemesis, args=(setup.app,), daemon=True)
        try:
            with approving(setup):
                chaos.start()
                setup.spawn()
                setup.spawn()
                while chaos.is_alive() and len(setup.runs) < BOOKINGS - 10:
                    chaos.join(NEMESIS_SECONDS / 5)  # more work comes while the nemesis strikes
                    setup.start(5)
                chaos.join()
                wait_for("both workers back", lambda: all(w.back() for w in setup.workers), 15)
                since = time.time()
                setup.start(BOOKINGS - len(setup.runs))
                wait_for("every booking confirmed", lambda: setup.ended() == BOOKINGS, 30)
        finally:
            stop.set()
            if chaos.ident is not None:
                chaos.join(10)
        assert failures == []
        # Once the workers were up (their processes take a few seconds to start), most strikes
        # found connections of theirs to terminate, for a good part of the nemesis' time.
        up = next((i for i, n in enumerate(terminated) if n), len(terminated))
        assert len(terminated[up:]) >= NEMESIS_SECONDS / NEMESIS_EVERY / 4, terminated
        assert sum(1 for n in terminated[up:] if n) > len(terminated[up:]) / 2, terminated
        check(setup, since)


# -- restarting the server itself ---------------------------------------------------------------


@dataclass
class Cluster:
    """A PostgreSQL cluster of the test's own (Debian's ``pg_createcluster``), on a free port:
    stopping and restarting it cannot disturb any other test, whatever else runs."""

    version: str
    name: str
    port: int

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def ctl(self, action: str) -> None:
        """``pg_ctlcluster VERSION NAME ACTION`` (stop and restart are in fast mode: every
        connection is terminated at once, as in a failover)."""
        subprocess.run(
            ["pg_ctlcluster", "--skip-systemctl-redirect", self.version, self.name, action],
            check=True,
            capture_output=True,
            timeout=60,
        )


def cannot_make_a_cluster() -> str | None:
    """Why this machine cannot make and restart a PostgreSQL cluster of its own, if it cannot."""
    tools = ("pg_createcluster", "pg_ctlcluster", "pg_dropcluster")
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        return f"no {', '.join(missing)} (Debian's postgresql-common) on this machine"
    if os.geteuid() != 0:
        return "making a PostgreSQL cluster needs root"
    if not installed_versions():
        return "no PostgreSQL server installed under /usr/lib/postgresql"
    return None


def installed_versions() -> list[str]:
    base = Path("/usr/lib/postgresql")
    found = (
        [p.name for p in base.iterdir() if (p / "bin" / "postgres").exists()]
        if base.exists()
        else []
    )
    return sorted(found, key=lambda v: [int(part) for part in v.split(".") if part.isdigit()])


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


CREATE = ("pg_createcluster", "--start-conf=manual")
TRUSTING = ("--", "--auth-host=trust", "--auth-local=trust")  # like the test server's


@contextmanager
def own_cluster() -> Iterator[Cluster]:
    """A new cluster, started; stopped and dropped at the end, whatever happened."""
    cluster = Cluster(
        installed_versions()[-1], f"ratchet_outage_{uuid.uuid4().hex[:8]}", free_port()
    )
    made = subprocess.run(
        [*CREATE, cluster.version, cluster.name, "-p", str(cluster.port), *TRUSTING],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    try:
        assert made.returncode == 0, made.stdout + made.stderr
        cluster.ctl("start")
        yield cluster
    finally:
        subprocess.run(
            ["pg_dropcluster", "--stop", cluster.version, cluster.name],
            check=False,
            capture_output=True,
            timeout=120,
        )


def test_workers_ride_out_a_postgresql_restart_even_one_that_finds_them_starting(
    tmp_path: Path,
) -> None:
    why_not = cannot_make_a_cluster()
    if why_not is not None:
        if os.environ.get("CI"):
            pytest.fail(f"{why_not}; CI must run this test")
        pytest.skip(why_not)
    with own_cluster() as cluster, drilling(tmp_path, cluster.url) as setup:
        setup.start(BOOKINGS - 10)
        with approving(setup):
            cluster.ctl("stop")  # the workers start while the server is down
            workers = [setup.spawn(), setup.spawn()]
            wait_for(
                "both workers say the store is unreachable",
                lambda: all("store unreachable (" in w.log() for w in workers),
                20,
            )
            time.sleep(DOWN_SECONDS)  # the server stays down a while: they back off, retry
            cluster.ctl("start")
            wait_for("the first bookings confirmed", lambda: setup.ended() >= 3, 20)
            # Both back before the next outage, or one still backing off from the first would
            # (rightly) see a single outage that lasts through the restart.
            wait_for("both workers back", lambda: all(w.back() for w in workers), 15)
            cluster.ctl("restart")  # and again, with work in progress
            wait_for("every booking confirmed", lambda: setup.ended() == len(setup.runs), 30)
            wait_for("both workers back", lambda: all(w.back() for w in setup.workers), 15)
            since = time.time()
            setup.start(10)
            wait_for("every booking confirmed", lambda: setup.ended() == BOOKINGS, 30)
        check(setup, since)
        logs = [w.log() for w in setup.workers]
        assert all(log.count("store unreachable (") >= 2 for log in logs), logs  # two outages
        # Each counted at least the time the server was kept down, not less: only an answer of
        # the store after the outage began ends it.
        unreachable = [w.summary()["store_unreachable_seconds"] for w in setup.workers]
        assert min(unreachable) >= DOWN_SECONDS, unreachable
