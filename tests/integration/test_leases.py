"""Leases and fencing, on SQLite and PostgreSQL: a claimed run is one worker's; a worker paused
past its lease commits nothing when it wakes; a pool finishes every run once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ratchet_runner import trace_lines
from ratchet_runner.adapters.base import Call, not_sent
from ratchet_runner.adapters.practice import PracticeWorld
from ratchet_runner.engine.lease import Lease
from ratchet_runner.engine.protocol import UNSENT_PASSES
from ratchet_runner.engine.runner import Runner, RunnerOptions
from ratchet_runner.errors import LeaseLost, StoreError, VersionConflict
from ratchet_runner.store.records import RunRecord
from ratchet_runner.store.store import Store
from ratchet_runner.worker import pool as pool_module
from ratchet_runner.worker.passes import worker_pass
from ratchet_runner.worker.pool import Pool
from tests.conftest import PRACTICE_BINDING, ROOT, MakeRunner, connection_closed, spec_and_text


def labels(runner: Runner, world: PracticeWorld, count: int) -> list[RunRecord]:
    """``count`` return-label runs, started but not advanced (runnable)."""
    spec, text = spec_and_text("returns", timeout="100ms")  # leases here are short
    example = spec.examples["T-90604"]
    world.seed({"orders": example.world["orders"]})
    runs = []
    for i in range(count):
        run, _ = runner.start(spec, text, {**example.input, "ticket": f"T-{1000 + i}"})
        runs.append(run)
    return runs


def test_a_leased_run_cannot_be_moved_by_anyone_else_while_the_lease_lives(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    runner = make_runner()
    (run,) = labels(runner, world, 1)
    (claimed,) = store.claim("worker-a", 30.0, runner.clock.now())
    assert (claimed.id, claimed.lease_owner, claimed.version) == (run.id, "worker-a", 2)
    assert store.claim("worker-b", 30.0, runner.clock.now()) == []
    with pytest.raises(LeaseLost, match="leased by worker-a"):
        make_runner().advance(run.id)
    assert store.get_run(run.id).version == 2
    assert world.changes() == []


def test_claims_never_give_one_run_to_two_workers(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    runner = make_runner()
    runs = labels(runner, world, 24)
    taken: list[str] = []
    lock = threading.Lock()

    def claim(owner: str) -> None:
        mine = Store(store.url)
        while True:
            got = mine.claim(owner, 30.0, runner.clock.now())
            if not got:
                break
            with lock:
                taken.extend(r.id for r in got)
        mine.close()

    threads = [threading.Thread(target=claim, args=(f"w{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(taken) == sorted(r.id for r in runs)


def test_a_worker_paused_past_its_lease_commits_nothing_when_it_wakes(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    paused, resume = threading.Event(), threading.Event()

    def freeze(point: str, effect: str) -> None:
        if point == "after-write":  # the provider made the label; the worker freezes (SIGSTOP)
            paused.set()
            resume.wait(30)

    slow = make_runner(interrupt=freeze)
    (run,) = labels(slow, world, 1)
    (claimed,) = store.claim("worker-a", 0.5, slow.clock.now())
    slow.leases.hold(Lease(run.id, str(claimed.lease_token), 0.5))  # not counted: no deadline
    outcome: list[BaseException | RunRecord] = []

    def work() -> None:
        try:
            outcome.append(slow.advance(run.id))
        except BaseException as exc:
            outcome.append(exc)

    frozen = threading.Thread(target=work)
    frozen.start()
    assert paused.wait(30)
    time.sleep(0.8)  # the lease expires by the database's clock
    (rescued,) = store.claim("worker-b", 30.0, slow.clock.now())
    other = make_runner()
    other.leases.hold(Lease(run.id, str(rescued.lease_token), 30.0))
    done = other.advance(run.id)
    assert done.state == "labelled"
    resume.set()
    frozen.join(30)
    assert isinstance(outcome[0], VersionConflict)  # fenced: its commit affected no row
    assert [c.operation for c in world.changes()] == ["create_label"]
    kinds = [e.kind for e in store.history(run.id)]
    assert "rescued" in kinds
    assert kinds.index("rescued") < kinds.index("reconcile_found")
    assert store.get_run(run.id).version == done.version


def test_a_worker_frozen_before_its_request_past_its_lease_never_sends_it(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    """Frozen after its pending record and before the request left, past its lease: another
    worker rescues the run, reconciles (nothing found) and makes the label. The warehouse does
    not deduplicate by key, so had the frozen worker sent its request on waking, there would be
    two labels; it checks its lease by its own clock first, and sends nothing."""
    from ratchet_runner.worker.passes import PassReport, worker_pass

    paused, resume = threading.Event(), threading.Event()

    def freeze(point: str, effect: str) -> None:
        if point == "before-write":
            paused.set()
            resume.wait(30)

    slow = make_runner(interrupt=freeze)
    (run,) = labels(slow, world, 1)
    reports: list[PassReport | BaseException] = []

    def frozen_pass() -> None:
        try:
            reports.append(worker_pass(slow, lease_seconds=1.5))
        except BaseException as exc:  # kept for the assertion's message, not swallowed
            reports.append(exc)

    frozen = threading.Thread(target=frozen_pass)
    frozen.start()
    assert paused.wait(30)
    time.sleep(1.8)  # the lease expires by the database's clock
    rescuer = worker_pass(make_runner())
    said = f"rescuer: {rescuer}; history: {[(e.kind, e.data) for e in store.history(run.id)]}"
    assert [r.state for r in rescuer.advanced] == ["labelled"], said
    resume.set()
    frozen.join(30)

    assert not frozen.is_alive(), said
    # LeaseLost: dropped the run, sent nothing
    assert isinstance(reports[0], PassReport), f"{reports[0]!r}; {said}"
    assert reports[0].raced == [run.id], f"{reports[0]}; {said}"
    assert [c.operation for c in world.changes()] == ["create_label"]
    sent = [c for c in world.calls("create_label") if c["outcome"] != "lookup"]
    assert len(sent) == 1
    assert store.get_run(run.id).state == "labelled"


def test_a_pool_of_workers_finishes_every_run_once(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    runs = labels(make_runner(), world, 30)
    pool = Pool(make_runner, concurrency=4, lease_seconds=10.0, poll=0.05)
    report = pool.run(until_idle=True)
    assert report.failed == []
    assert {store.get_run(r.id).state for r in runs} == {"labelled"}
    orders = [c for c in world.changes() if c.operation == "create_label"]
    assert len(orders) == 30
    assert len({c.operation_id for c in orders}) == 30
    assert all(r.lease_token is None for r in store.list_runs())


def test_a_run_that_leaves_running_gives_its_lease_back_in_the_same_commit(
    make_runner: MakeRunner, world: PracticeWorld, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = labels(make_runner(), world, 3)
    released: list[str] = []
    release = store.release

    def counted(run_id: str, token: str) -> None:
        released.append(run_id)
        release(run_id, token)

    monkeypatch.setattr(store, "release", counted)
    Pool(make_runner, concurrency=1, lease_seconds=10.0, poll=0.01).run(until_idle=True)

    finished = [store.get_run(r.id) for r in runs]
    assert {(r.state, r.lease_owner, r.lease_token) for r in finished} == {("labelled", None, None)}
    assert released == []  # nothing left to give back after the last commit
    assert store.leases() == []


def test_a_pool_rides_out_a_database_that_fails_for_a_while(
    make_runner: MakeRunner, world: PracticeWorld, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Claims that fail (the server restarting, a network cut) are reported and retried after
    the poll interval; the worker does not die, and finishes the work once the store answers."""
    runs = labels(make_runner(), world, 3)
    claim = store.claim
    failures = iter([True, True])

    def flaky(*args: object, **kwargs: object) -> list[RunRecord]:
        if next(failures, False):
            raise StoreError("the store failed: server closed the connection unexpectedly")
        return claim(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "claim", flaky)
    log: list[str] = []
    report = Pool(make_runner, concurrency=1, lease_seconds=10.0, poll=0.01, log=log.append).run(
        until_idle=True
    )

    assert report.failed == []  # one outage, not one failure per failed claim
    assert (report.outages, report.unreachable) == (1, False)
    assert sum("store unreachable (the store failed: server closed" in line for line in log) == 1
    assert {store.get_run(r.id).state for r in runs} == {"labelled"}


@pytest.mark.slow
def test_sigterm_stops_a_worker_gracefully(tmp_path: Path) -> None:
    env = {**os.environ, "RATCHET_HOME": str(tmp_path / "home")}
    env.pop("RATCHET_DB", None)
    ratchet = str(Path(sys.executable).with_name("ratchet"))
    worker = subprocess.Popen(
        [ratchet, "worker", "--concurrency", "2", "--poll", "0.1", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert worker.stderr is not None
    started = worker.stderr.readline()  # printed once the SIGTERM handler is in place
    assert "SIGTERM or Ctrl-C stops" in started, started
    worker.send_signal(signal.SIGTERM)
    out, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err
    assert '"runs_advanced": 0' in out


def test_status_and_runs_stuck_show_a_lease_whose_worker_died(
    make_runner: MakeRunner,
    world: PracticeWorld,
    store: Store,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.conftest import run_cli

    runner = make_runner()
    (run,) = labels(runner, world, 1)
    store.claim("host:4242:dead", 0.2, runner.clock.now())
    time.sleep(0.5)
    (stalled,) = store.stuck(runner.clock.now(), 300.0)
    assert (stalled[0].id, stalled[1]) == (run.id, "lease expired")
    monkeypatch.setenv("RATCHET_DB", store.url)
    monkeypatch.setenv("RATCHET_BINDINGS", str(PRACTICE_BINDING))
    code, out, _ = run_cli(capsys, "status", "--json")
    (lease,) = __import__("json").loads(out)["leases"]
    assert (code, lease["owner"], lease["expired"]) == (0, "host:4242:dead", True)
    monkeypatch.setenv("RATCHET_NOW", str(runner.clock.now() + 90))
    monkeypatch.setenv("RATCHET_ALLOW_CLOCK_OVERRIDE", "1")  # not a practice store: for tests
    code, out, _ = run_cli(capsys, "status")
    assert "host:4242:dead · held 90 s · expired" in out
    code, out, _ = run_cli(capsys, "runs", "--stuck")
    assert code == 0
    assert "lease expired (owner host:4242:dead)" in out
    # a worker rescues it, reconciling before calling
    rescued = worker_pass_once(runner)
    assert rescued == [run.id]
    assert "rescued" in [e.kind for e in store.history(run.id)]


def worker_pass_once(runner: Runner) -> list[str]:
    from ratchet_runner.worker.passes import worker_pass

    return [r.id for r in worker_pass(runner).advanced]


def test_a_pool_runner_asks_for_the_newest_spec_version_once_per_interval(
    make_runner: MakeRunner, store: Store
) -> None:
    now = [0.0]
    runner = make_runner(
        options=RunnerOptions(spec_check_interval=3600.0, monotonic=lambda: now[0])
    )
    spec, text = spec_and_text("returns")
    runner.start(spec, text, {**spec.examples["T-90604"].input, "ticket": "T-1"})
    assert runner.latest_spec("returns") == (spec.digest, spec.spec_version)

    store.save_spec("e" * 64, "returns", spec.spec_version + 1, "1", text, 0.0)  # elsewhere
    now[0] = 3599.0
    assert runner.latest_spec("returns") == (spec.digest, spec.spec_version)  # known
    now[0] = 3600.0
    assert runner.latest_spec("returns") == ("e" * 64, spec.spec_version + 1)  # asked again
    assert make_runner().latest_spec("returns") == ("e" * 64, spec.spec_version + 1)  # no wait


def test_the_heartbeat_keeps_a_long_step_leased_even_after_a_failed_renewal(
    make_runner: MakeRunner, world: PracticeWorld, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step that outlasts the lease (here 2 s against 1.5 s) keeps the run, because the
    heartbeat renews the lease in the database and this worker's own deadline with it; a
    renewal that fails (the database away for a moment) does not stop the heartbeat. The
    attempt it was about to send when it stalled is past its call's deadline by then: it is not
    sent, but made once more, and not counted twice."""
    (run,) = labels(make_runner(), world, 1)
    renew = store.renew
    renewals: list[bool] = []

    def flaky(run_id: str, token: str, lease_seconds: float) -> bool:
        # The heartbeat's first renewal fails (a step that renews for itself, when the
        # heartbeat is late on a loaded machine, is not the renewal this test breaks).
        if not renewals and threading.current_thread().name == "ratchet-heartbeat":
            renewals.append(False)
            raise StoreError("the store failed: connection refused")
        renewals.append(renew(run_id, token, lease_seconds))
        return renewals[-1]

    stalled: list[str] = []

    def slow(point: str, effect: str) -> None:
        if point == "before-write" and not stalled:
            stalled.append(effect)
            time.sleep(2.0)

    monkeypatch.setattr(store, "renew", flaky)
    report = Pool(
        lambda options: make_runner(interrupt=slow, options=options),
        concurrency=1,
        lease_seconds=1.5,
        poll=0.01,
    ).run(until_idle=True)

    assert (report.advanced, report.fenced, report.failed) == (1, 0, [])
    assert store.get_run(run.id).state == "labelled"
    assert renewals[0] is False
    assert renewals[1:3] == [True, True]
    (op,) = store.operations(run.id)
    assert op.attempts == 1  # the attempt not sent in time was made again, not counted again
    kinds = [e.kind for e in store.history(run.id)]
    assert "not_sent" in kinds


def test_a_busy_pool_looks_for_due_timers_once_per_poll_interval_not_per_claim(
    make_runner: MakeRunner, world: PracticeWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    labels(make_runner(), world, 20)
    looked: list[int] = []

    fire_due = pool_module.fire_due
    monkeypatch.setattr(pool_module, "fire_due", lambda *a: looked.append(1) or fire_due(*a))
    report = Pool(make_runner, concurrency=1, lease_seconds=10.0, poll=60.0).run(until_idle=True)

    assert report.advanced == 20
    assert len(looked) == 1  # 20 claims within one poll interval: one look


def test_a_pool_that_drops_its_connections_after_an_outage_closes_those_in_use_then(
    make_runner: MakeRunner, world: PracticeWorld, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After an outage each pool thread drops its pooled connections; one another thread was
    using at that moment (here held by the test) is closed once given back and the store closed,
    not left for the garbage collector to drop with its session still open."""
    labels(make_runner(), world, 2)
    held = store.engine.connect()
    raw = held.connection.dbapi_connection
    claim = store.claim
    failures = iter([True])

    def flaky(*args: object, **kwargs: object) -> list[RunRecord]:
        if next(failures, False):
            raise StoreError("the store failed: server closed the connection unexpectedly")
        return claim(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "claim", flaky)
    report = Pool(make_runner, concurrency=1, lease_seconds=10.0, poll=0.01).run(until_idle=True)
    assert (report.advanced, report.outages) == (2, 1)

    held.close()
    store.close()
    assert connection_closed(raw)


def test_a_pool_returns_only_once_its_heartbeat_has_stopped(
    make_runner: MakeRunner, world: PracticeWorld, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The heartbeat renews leases through the store; the pool's run returns only once it has
    stopped, so a caller that then closes the store closes it under nobody."""
    (run,) = labels(make_runner(), world, 1)
    renew = store.renew
    renewing = threading.Event()
    renewals: list[float] = []

    def slow(run_id: str, token: str, lease_seconds: float) -> bool:
        held = renew(run_id, token, lease_seconds)
        if threading.current_thread().name == "ratchet-heartbeat":
            renewing.set()
            time.sleep(1.0)  # still renewing when the step is over
            renewals.append(time.monotonic())
        return held

    def step(point: str, effect: str) -> None:
        if point == "before-write":
            assert renewing.wait(10.0)

    monkeypatch.setattr(store, "renew", slow)
    Pool(
        lambda options: make_runner(interrupt=step, options=options),
        concurrency=1,
        lease_seconds=1.5,
        poll=0.01,
    ).run(until_idle=True)
    returned = time.monotonic()

    assert store.get_run(run.id).state == "labelled"
    assert renewals
    assert max(renewals) <= returned
    assert not [t for t in threading.enumerate() if t.name == "ratchet-heartbeat"]


def _starved(times: int | None) -> tuple[list[str], Callable[[str, str], None]]:
    """A hook that stalls the process just before each send, past the call's 100 ms deadline,
    as a starved machine does: ``times`` times (None: every time)."""
    stalls: list[str] = []

    def stall(point: str, effect: str) -> None:
        if point == "before-write" and (times is None or len(stalls) < times):
            stalls.append(effect)
            time.sleep(0.15)

    return stalls, stall


def _drive(runner: Runner, store: Store, clock: Any, run: RunRecord, passes: int) -> RunRecord:
    """Worker passes, a minute apart on the runner's clock, until the run stops running."""
    for _ in range(passes):
        worker_pass(runner)
        run = store.get_run(run.id)
        if run.status != "running":
            break
        clock.advance(60)
    return run


def test_a_machine_too_starved_to_send_in_time_spends_no_attempt(
    make_runner: MakeRunner, world: PracticeWorld, store: Store, clock: Any
) -> None:
    """Five sends in a row find the call's deadline passed: none was sent, so none is counted,
    neither against the operation (3 attempts at most) nor against the run's budget, and the
    run is not sent to a person as though the provider had failed (it was, before: attempts
    spent on nothing, 'exhausted', under load in CI). The sixth is sent, once."""
    stalls, stall = _starved(5)
    runner = make_runner(interrupt=stall)
    (run,) = labels(runner, world, 1)
    run = _drive(runner, store, clock, run, passes=10)
    assert len(stalls) == 5
    assert (run.state, run.status) == ("labelled", "done")
    (op,) = store.operations(run.id)
    assert op.attempts == 1
    assert run.context["budget_used"]["attempts"] == 1
    events = store.history(run.id)
    assert [e.kind for e in events].count("not_sent") == 5
    given_back = [e for e in events if e.kind == "retry_scheduled" and e.data.get("unsent")]
    assert len(given_back) == 2  # two passes left for later, each after two sends not made
    assert [c["operation"] for c in world.calls()] == ["create_label"]  # one request, one label
    shown = "\n".join(trace_lines(run, events))
    assert shown.count("(the last was never sent: not counted)") == 2


class _LateToSend:
    """An adapter that finds each request's deadline passed ``times`` times (as an adapter
    does, checking it as its last step before the send), then sends through ``real``."""

    def __init__(self, real: Any, times: int) -> None:
        self.real, self.left = real, times

    def call(self, request: Call) -> Any:
        if self.left > 0:
            self.left -= 1
            return not_sent(request)
        return self.real.call(request)

    def lookup(self, *args: Any, **kwargs: Any) -> Any:
        return self.real.lookup(*args, **kwargs)

    def semantics(self, *args: Any) -> Any:
        return self.real.semantics(*args)


def test_a_send_the_adapter_finds_past_its_deadline_spends_no_attempt_either(
    world: PracticeWorld, store: Store, clock: Any
) -> None:
    """The adapter's own last check (``Call.deadline``) refuses four sends: a ``Transient``
    that says nothing was sent, counted as a failed call before (the run went ``exhausted``
    after three). None is counted; the fifth is sent, once."""
    adapter = _LateToSend(world.adapter("warehouse"), 4)
    runner = Runner(store, lambda spec_adapter: adapter, clock)
    (run,) = labels(runner, world, 1)
    run = _drive(runner, store, clock, run, passes=10)
    assert adapter.left == 0
    assert (run.state, run.status) == ("labelled", "done")
    (op,) = store.operations(run.id)
    assert op.attempts == 1
    assert [c["operation"] for c in world.calls()] == ["create_label"]


def test_an_effect_that_can_never_be_sent_in_time_goes_to_a_person_with_nothing_sent(
    make_runner: MakeRunner, world: PracticeWorld, store: Store, clock: Any
) -> None:
    stalls, stall = _starved(None)
    runner = make_runner(interrupt=stall)
    (run,) = labels(runner, world, 1)
    run = _drive(runner, store, clock, run, passes=UNSENT_PASSES + 2)
    assert run.status == "needs_person"
    assert len(stalls) == 2 * UNSENT_PASSES
    (op,) = store.operations(run.id)
    assert (op.status, op.attempts) == ("pending", 0)  # nothing sent, nothing counted
    assert run.context["budget_used"]["attempts"] == 0
    (escalated,) = [e for e in store.history(run.id) if e.kind == "escalated"]
    assert f"in {UNSENT_PASSES} passes" in escalated.data["reason"]
    assert "nothing was sent" in escalated.data["reason"]
    assert world.calls() == []
