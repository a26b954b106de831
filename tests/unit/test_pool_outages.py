"""The pool's threads ride out a store that stops answering, without PostgreSQL: on SQLite, every
statement a pool thread sends fails for a while, as it does while a database restarts (the
failure comes from beneath SQLAlchemy, so the store handles it as it handles a real one). No
thread dies (an exception that killed one would fail the test), the outage is logged once and
counted in the report, not once per attempt in ``failed``, and the work is finished afterwards.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DataError, OperationalError

from ratchet_runner.adapters.practice import PracticeWorld
from ratchet_runner.engine.runner import Runner, RunnerOptions
from ratchet_runner.errors import StoreError
from ratchet_runner.spec.validate import load_spec_text
from ratchet_runner.store.records import RunRecord
from ratchet_runner.store.store import Store
from ratchet_runner.worker import pool as pool_module
from ratchet_runner.worker.passes import Fired
from ratchet_runner.worker.pool import Pool, PoolReport, connection_lost
from tests.conftest import PRACTICE_BINDING, RATCHET, ROOT, MakeRunner, spec_and_text


class Outage:
    """Makes every statement sent from a pool thread (``ratchet-*``) fail with the error SQLite
    gives for a database it cannot open: while :attr:`down` is set, or for the next ``fail_next``
    statements of one thread."""

    def __init__(self) -> None:
        self.down = threading.Event()
        self.refused = 0
        self.tried = threading.Event()  # set once `want` statements were refused
        self.want = 10**9
        self.fail_next: dict[str, int] = {}
        self._lock = threading.Lock()

    def __call__(self, *_: object) -> None:
        name = threading.current_thread().name
        if not name.startswith("ratchet-"):
            return
        with self._lock:
            if not self.down.is_set() and self.fail_next.get(name, 0) == 0:
                return
            if self.fail_next.get(name, 0) > 0:
                self.fail_next[name] -= 1
            self.refused += 1
            if self.refused >= self.want:
                self.tried.set()
        raise sqlite3.OperationalError("unable to open database file")


@pytest.fixture
def outage() -> Iterator[Outage]:
    hook = Outage()
    event.listen(Engine, "before_cursor_execute", hook)
    try:
        yield hook
    finally:
        event.remove(Engine, "before_cursor_execute", hook)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """The store ``make_runner`` (conftest) uses: SQLite only, here."""
    opened = Store(f"sqlite:///{tmp_path / 'ratchet.db'}")
    yield opened
    opened.close()


#: Leases the pools here take: longer than a label's timeout (10 s) and its margin, so that a
#: call may start (runs are not held for it: nobody dies here).
LEASE = 20.0


def labels(
    runner: Runner, world: PracticeWorld, count: int, timeout: str | None = None
) -> list[RunRecord]:
    """``count`` return-label runs, started and runnable (with the effects' ``timeout``
    changed, if given)."""
    spec, text = spec_and_text("returns")
    if timeout is not None:
        text = text.replace("timeout: 10s", f"timeout: {timeout}")
        spec = load_spec_text(text, "returns.yaml")
    example = spec.examples["T-90604"]
    world.seed({"orders": example.world["orders"]})
    return [
        runner.start(spec, text, {**example.input, "ticket": f"T-{4000 + i}"})[0]
        for i in range(count)
    ]


def in_background(pool: Pool) -> tuple[threading.Thread, list[PoolReport]]:
    reports: list[PoolReport] = []
    thread = threading.Thread(target=lambda: reports.append(pool.run(until_idle=True)))
    thread.start()
    return thread, reports


def outage_lines(log: list[str]) -> tuple[list[str], list[str]]:
    return (
        [line for line in log if "store unreachable (" in line],
        [line for line in log if "store reachable again after" in line],
    )


def test_threads_that_cannot_open_their_store_wait_and_finish_the_work_when_it_answers(
    make_runner: MakeRunner, world: PracticeWorld, store: Store, outage: Outage
) -> None:
    runs = labels(make_runner(), world, 6)
    opened: list[str] = []
    stores: list[Store] = []

    def make(options: RunnerOptions) -> Runner:
        stores.append(Store(store.url))  # fails while the store is down
        opened.append(threading.current_thread().name)
        return Runner(stores[-1], lambda a: world.adapter(a.kind), options=options)

    log: list[str] = []
    outage.want = 12  # several attempts from each of the three threads
    outage.down.set()
    pool = Pool(make, concurrency=3, lease_seconds=LEASE, poll=0.01, log=log.append)
    thread, reports = in_background(pool)
    assert outage.tried.wait(30)
    assert opened == []  # no thread has a store yet, and none has died of it
    assert pool.report.unreachable is True
    outage.down.clear()
    thread.join(30)
    for each in stores:
        each.close()

    (report,) = reports
    assert {store.get_run(r.id).state for r in runs} == {"labelled"}
    assert sorted(opened) == ["ratchet-0", "ratchet-1", "ratchet-2"]
    assert (report.outages, report.unreachable, report.failed) == (1, False, [])
    assert report.unreachable_seconds > 0
    down, up = outage_lines(log)
    assert (len(down), len(up)) == (1, 1), log
    assert down[0].startswith(f"worker {pool.owner}: store unreachable (cannot open the store")
    assert "unable to open database file" in down[0]
    assert "; retrying in " in down[0]


def test_claims_that_fail_for_a_while_are_one_outage_and_no_failed_runs(
    make_runner: MakeRunner, world: PracticeWorld, store: Store, outage: Outage
) -> None:
    runs = labels(make_runner(), world, 4)
    log: list[str] = []
    pool = Pool(make_runner, concurrency=2, lease_seconds=LEASE, poll=0.01, log=log.append)
    outage.want = 6  # timers and claims (the runners share a store that is open already)
    outage.down.set()
    thread, reports = in_background(pool)
    assert outage.tried.wait(30)
    outage.down.clear()
    thread.join(30)

    (report,) = reports
    assert report.failed == []  # not one entry per failed poll
    assert (report.outages, report.unreachable, report.advanced) == (1, False, 4), log
    assert {store.get_run(r.id).state for r in runs} == {"labelled"}
    down, up = outage_lines(log)
    assert (len(down), len(up)) == (1, 1), log


def test_a_step_cut_off_by_a_lost_connection_is_taken_again_and_its_change_made_once(
    make_runner: MakeRunner, world: PracticeWorld, store: Store, outage: Outage
) -> None:
    """The store drops the connection after the provider made the change: the receipt is not
    written, and the lease is not given back either. Once the store answers, the pool gives the
    lease back itself (it would otherwise hold the run for the 10 s of the lease, and a pool
    that stops when idle would stop with the run unfinished), claims the run again, reconciles,
    and finishes it: one label."""
    (run,) = labels(make_runner(), world, 1)
    cut: list[str] = []

    def after_the_call(point: str, effect: str) -> None:
        if point == "after-write" and not cut:  # the provider made the label; now the store
            cut.append(effect)  # fails the commit of the receipt and the release of the lease
            outage.fail_next[threading.current_thread().name] = 2

    log: list[str] = []
    report = Pool(
        lambda options: make_runner(interrupt=after_the_call, options=options),
        concurrency=1,
        lease_seconds=LEASE,
        poll=0.01,
        log=log.append,
    ).run(until_idle=True)

    assert cut == ["create_label"]
    assert report.failed == []  # not the run's fault: it was claimed again
    assert report.outages == 1
    assert store.get_run(run.id).state == "labelled"
    assert [e.kind for e in store.history(run.id)].count("leased") == 2
    assert [c.operation for c in world.changes()] == ["create_label"]
    down, up = outage_lines(log)
    assert (len(down), len(up)) == (1, 1), log
    assert "the store failed: unable to open database file" in down[0]


def test_the_heartbeat_outlives_a_store_it_cannot_open_and_renews_once_it_can(
    make_runner: MakeRunner, world: PracticeWorld, store: Store, outage: Outage
) -> None:
    (run,) = labels(make_runner(), world, 1, timeout="1s")  # a lease of 4 s covers a call
    heartbeat_opens = 0
    renewed = threading.Event()  # by the heartbeat, after its failed opens
    renew = store.renew

    def counted(run_id: str, token: str, lease_seconds: float) -> bool:
        done = renew(run_id, token, lease_seconds)
        if done and threading.current_thread().name == "ratchet-heartbeat":
            renewed.set()
        return done

    def make(options: RunnerOptions) -> Runner:
        nonlocal heartbeat_opens
        if threading.current_thread().name == "ratchet-heartbeat":
            heartbeat_opens += 1
            if heartbeat_opens <= 2:
                raise StoreError("cannot open the store: connection refused")
        return make_runner(interrupt=held_up, options=options)

    def held_up(point: str, effect: str) -> None:
        if point == "before-write":  # the step waits for the heartbeat's first renewal
            renewed.wait(30)

    store.renew = counted  # type: ignore[method-assign]
    log: list[str] = []
    report = Pool(make, concurrency=1, lease_seconds=4.0, poll=0.01, log=log.append).run(
        until_idle=True
    )

    assert renewed.is_set()
    assert heartbeat_opens == 3  # two failed opens, then one that worked
    assert (report.advanced, report.fenced, report.failed) == (1, 0, [])
    assert (report.outages, report.unreachable) == (1, False)
    assert store.get_run(run.id).state == "labelled"


def test_an_unexpected_error_is_reported_once_and_the_thread_goes_on(
    make_runner: MakeRunner, world: PracticeWorld, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = labels(make_runner(), world, 3)
    raised: list[int] = []
    fire_due = pool_module.fire_due

    def broken(runner: Runner, limit: int = 500) -> list[Fired]:
        if len(raised) < 3:
            raised.append(1)
            raise RuntimeError("a bug in the timers")
        return fire_due(runner, limit)

    monkeypatch.setattr(pool_module, "fire_due", broken)
    log: list[str] = []
    pool = Pool(make_runner, concurrency=1, lease_seconds=LEASE, poll=0.01, log=log.append)
    report = pool.run(until_idle=True)

    assert len(raised) == 3
    assert {store.get_run(r.id).state for r in runs} == {"labelled"}
    assert report.outages == 0
    ((run_id, error),) = report.failed  # once, not once per attempt
    assert run_id == ""
    assert error.startswith("unexpected RuntimeError: a bug in the timers (at test_pool_outages")
    (line,) = [said for said in log if "unexpected" in said]  # besides how the pool wakes
    assert line.startswith(f"worker {pool.owner}: ratchet-0: unexpected RuntimeError: a bug in")
    assert "the thread goes on in " in line


def test_a_lost_connection_is_told_from_a_refused_value() -> None:
    def raised(cause: BaseException) -> StoreError:
        try:
            try:
                raise cause
            except Exception:
                raise StoreError("the store failed") from None  # as the store raises it
        except StoreError as exc:
            return exc

    lost = OperationalError("UPDATE runs", {}, sqlite3.OperationalError("disk I/O error"))
    refused = DataError("UPDATE runs", {}, ValueError("value too long"))
    assert connection_lost(raised(lost))
    assert not connection_lost(raised(refused))
    assert not connection_lost(StoreError("no spec version in the store"))
    assert connection_lost(ConnectionResetError("reset by peer"))
    assert not connection_lost(RuntimeError("a bug"))


def test_a_worker_started_without_its_store_waits_says_so_and_reports_it_when_stopped(
    tmp_path: Path,
) -> None:
    """``ratchet worker`` on a store that cannot be opened (its folder does not exist): it does
    not exit, it says once that the store is unreachable, and when stopped its summary (text and
    JSON) says the store still was."""
    missing = f"sqlite:///{tmp_path / 'no-such-folder' / 'ratchet.db'}"
    workers = []
    for mode in ("text", "json"):
        args = [RATCHET, "worker", "--poll", "0.05"] + (["--json"] if mode == "json" else [])
        out, err = tmp_path / f"{mode}.out", tmp_path / f"{mode}.err"
        env = {
            **os.environ,
            "RATCHET_HOME": str(tmp_path / "home"),
            "RATCHET_DB": missing,
            "RATCHET_BINDINGS": str(PRACTICE_BINDING),
        }
        env.pop("RATCHET_NOW", None)
        with out.open("w") as stdout, err.open("w") as stderr:
            workers.append(
                (subprocess.Popen(args, stdout=stdout, stderr=stderr, env=env, cwd=ROOT), out, err)
            )
    try:
        deadline = time.monotonic() + 30
        while not all("store unreachable (" in err.read_text() for _, _, err in workers):
            assert time.monotonic() < deadline, [err.read_text() for _, _, err in workers]
            assert all(w.poll() is None for w, _, _ in workers)  # still waiting, not exited
            time.sleep(0.05)
        time.sleep(0.1)  # unreachable a moment by then, whenever each said so
    finally:
        for worker, _, _ in workers:
            worker.send_signal(signal.SIGTERM)
        codes = [worker.wait(30) for worker, _, _ in workers]

    assert codes == [0, 0]
    (_, _, text_err), (_, json_out, json_err) = workers
    for log in (text_err.read_text(), json_err.read_text()):
        assert "Traceback" not in log
        assert log.count("store unreachable (cannot open the store at sqlite:///") == 1, log
    last = text_err.read_text().rstrip().splitlines()[-1]
    assert re.fullmatch(
        r"stopped: 0 run\(s\) advanced, 0 timer\(s\) fired, 0 fenced; the store was "
        r"unreachable 1 time\(s\), [0-9.]+ s in all, and still was when the worker stopped",
        last,
    ), last
    summary = json.loads(json_out.read_text())
    assert (summary["store_outages"], summary["store_unreachable"]) == (1, True)
    assert summary["store_unreachable_seconds"] > 0
    assert summary["failed"] == []
