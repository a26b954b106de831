"""Wake-ups: a commit that makes a run runnable by another process wakes the idle workers, on
SQLite and PostgreSQL, within a process and across processes; only such commits do; a worker
whose listening connection is terminated listens again and loses no wake-up; a timer wakes the
worker at its due time.

Every worker here polls once a minute: a run carried on within the test's (much shorter) wait
was woken, not polled for.
"""

from __future__ import annotations

import select
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, create_engine, event, make_url, text

from ratchet_runner.adapters.noop import NoopAdapter
from ratchet_runner.engine import commands
from ratchet_runner.engine.runner import Runner, RunnerOptions
from ratchet_runner.session import Session
from ratchet_runner.spec.validate import load_spec
from ratchet_runner.store.bell import Bell
from ratchet_runner.store.store import Store
from ratchet_runner.store.watch import APPLICATION_NAME, Listener
from ratchet_runner.worker.pool import Pool
from tests.conftest import PG_URL, ROOT, ratchet_process

SPEC = ROOT / "bench" / "specs" / "wake.yaml"
SLOW_POLL = 60.0
#: How long a test waits for what a wake-up brings about: far less than SLOW_POLL.
PATIENCE = 20.0


def _runner(store: Store, adapter: NoopAdapter | None = None, **options: Any) -> Runner:
    noop = adapter or NoopAdapter()
    return Runner(
        store,
        lambda _: noop,
        store.clock,
        options=RunnerOptions(**options) if options else None,
    )


def _start(runner: Runner, key: str) -> str:
    spec = load_spec(SPEC)
    run, _ = runner.start(spec, SPEC.read_text(encoding="utf-8"), {"key": key})
    assert run.status == "waiting"
    return run.id


def _wait_until(store: Store, run_id: str, state: str) -> None:
    deadline = time.monotonic() + PATIENCE
    while store.get_run(run_id).state != state:
        assert time.monotonic() < deadline, f"run {run_id} is {store.get_run(run_id).state}"
        time.sleep(0.02)


@contextmanager
def pool_in_thread(url: str, adapter: NoopAdapter) -> Iterator[Pool]:
    with Session(url) as session:
        pool = Pool(
            lambda options: session.runner(adapters=lambda _: adapter, options=options),
            poll=SLOW_POLL,
            lease_seconds=30,
        )
        thread = threading.Thread(target=pool.run)
        thread.start()
        try:
            deadline = time.monotonic() + PATIENCE
            while pool.watch is None:
                assert time.monotonic() < deadline, "the pool never opened its store"
                time.sleep(0.01)
            if isinstance(pool.watch, Listener):
                assert pool.watch.listening.wait(PATIENCE)
            time.sleep(0.2)  # every thread in its idle wait
            yield pool
        finally:
            pool.stop.set()
            thread.join()


# -- which commits wake -------------------------------------------------------------------------


def test_only_commits_that_leave_a_run_runnable_by_another_process_ring_the_bell(
    store: Store,
) -> None:
    runner = _runner(store)
    bell = store.bell
    rings = bell.rings
    run_id = _start(runner, "k1")  # created waiting for a signal: nobody can carry it on
    assert bell.rings == rings
    commands.signal(runner, run_id, "go", "s1")  # delivered and driven here, under its lease
    assert store.get_run(run_id).state == "done"
    assert bell.rings == rings

    rings = bell.rings
    other = _start(runner, "k2")
    commands.signal(runner, other, "go", "s2", drive=False)  # left to the workers
    assert store.get_run(other).status == "running"
    assert bell.rings == rings + 1

    rings = bell.rings
    napping = _start(runner, "k3")
    commands.signal(runner, napping, "nap", "s3", drive=False)  # arms a timer due in 2 s
    assert store.get_run(napping).status == "waiting"
    assert bell.rings == rings + 1


def test_a_signal_left_to_the_workers_reads_only_the_run_before_its_commit(
    store: Store,
) -> None:
    """The sender's half of a wake-up: the run read once (it was read twice), then the commit.
    Whether the signal ID was seen before is the signal row's to say as it commits, and the
    database's clock and the run's timers are read only for a pause that expires (before: 5
    reads on PostgreSQL, 4 on SQLite). A duplicate still says it is one, before and after the
    run has moved on."""
    runner = _runner(store)
    commands.signal(
        runner, _start(runner, "k0"), "go", "s0", drive=False
    )  # what a process reads once
    run_id = _start(runner, "k1")
    sent: list[str] = []

    def keep(_c: object, _cur: object, sql: str, *_rest: object) -> None:
        sent.append(" ".join(sql.split()))

    event.listen(store.engine, "before_cursor_execute", keep)
    try:
        result = commands.signal(runner, run_id, "go", "s1", drive=False)
    finally:
        event.remove(store.engine, "before_cursor_execute", keep)

    assert result.changed
    reads = [sql for sql in sent if sql.startswith("SELECT")]
    assert len(reads) == 1, reads
    assert not [sql for sql in sent if "FROM signals" in sql or "FROM timers" in sql]
    again = commands.signal(runner, run_id, "go", "s1", drive=False)  # the run takes "go" still
    assert (again.changed, again.message) == (
        False,
        "signal s1 was already received (go); nothing changed",
    )
    assert store.get_run(run_id).version == result.run.version
    assert runner.advance(run_id).state == "done"  # ... and once it has moved on
    moved = commands.signal(runner, run_id, "go", "s1")
    assert (moved.changed, moved.message) == (False, again.message)


STEP_THEN_NAP = """
name: step_then_nap
spec_version: 1
policy_version: 1
business_key: input.key
start: poking
input: {type: object, required: [key], properties: {key: {type: string}}}
adapters:
  nothing:
    kind: noop
    operations:
      touch: {args: [key], receipt: id, lookup: lookup}
effects:
  poke: {adapter: nothing, operation: touch, args: {key: input.key}, reconcile: lookup}
states:
  poking:  {kind: step}
  poked:   {kind: step}
  napping: {kind: wait, after: 2s}
  done:    {kind: success}
  queue:   {kind: operator_queue, operator_action: Look at the evidence}
transitions:
  - state: poking
    event: ok
    next_state: poked
    durable_write: [pending, receipt]
    external_effect: poke
    idempotency_key: [business_key, effect, args]
    receipt: id
    retry_owner: runner
    compensation: "none: test"
  - {state: poking, event: refused, next_state: queue, durable_write: outcome}
  - {state: poking, event: exhausted, next_state: queue, durable_write: outcome}
  - {state: poked, event: next, next_state: NEXT}
  - {state: napping, event: due, next_state: done, durable_write: timer}
"""


@pytest.mark.parametrize(("then", "rings"), [("done", 0), ("napping", 1)])
def test_a_run_carried_on_with_no_lease_wakes_the_workers_once_at_most_when_it_is_let_go(
    store: Store, tmp_path: Path, then: str, rings: int
) -> None:
    """Runner.advance with no lease (library code, ``ratchet check``): each of its commits
    leaves the run running with no lease, which alone would wake the workers every step; they
    are woken once, at the end, and only if the run is left to them (here: to its timer)."""
    path = tmp_path / "spec.yaml"
    path.write_text(STEP_THEN_NAP.replace("NEXT", then), encoding="utf-8")
    runner = _runner(store)
    run, _ = runner.start(
        load_spec(path), path.read_text(encoding="utf-8"), {"key": "k1"}, wake=False
    )
    before = store.bell.rings
    left = runner.advance(run)
    assert left.state == then
    assert left.version >= run.version + 3  # the pending record, the receipt, the next move
    assert store.bell.rings == before + rings


def test_the_store_says_whether_a_worker_could_claim_a_run_now(store: Store) -> None:
    runner = _runner(store)
    run_id = _start(runner, "k1")
    assert not store.has_runnable(time.time())  # waiting for its signal
    commands.signal(runner, run_id, "go", "s1", drive=False)
    assert store.has_runnable(time.time())
    (claimed,) = store.claim("worker-1", 30, time.time())
    assert not store.has_runnable(time.time())  # held by a live lease
    store.release(run_id, str(claimed.lease_token))
    assert store.has_runnable(time.time())


def test_a_store_opened_twice_in_one_process_shares_its_bell(store_url: str) -> None:
    first, second = Store(store_url), Store(store_url)
    try:
        assert first.bell is second.bell
        rings = first.bell.rings
        run_id = _start(_runner(first), "k1")
        commands.signal(_runner(second), run_id, "go", "s1", drive=False)
        assert first.bell.rings == rings + 1
    finally:
        first.close()
        second.close()


def test_a_bell_wait_returns_at_once_for_a_ring_that_came_after_the_count_was_read() -> None:
    bell = Bell()
    seen = bell.rings
    bell.ring()  # lands between the look for work and the wait
    assert bell.wait(seen, timeout=SLOW_POLL) is True
    assert bell.wait(bell.rings, timeout=0.01) is False


# -- PostgreSQL: notifications ------------------------------------------------------------------


def _listen(url: str, channel: str) -> psycopg.Connection[Any]:
    parsed = make_url(url)
    args, params = create_engine(parsed).dialect.create_connect_args(parsed)
    conn = psycopg.connect(*args, **params, autocommit=True)
    conn.execute(f'LISTEN "{channel}"')
    return conn


def _notes(conn: psycopg.Connection[Any], wait: float) -> list[str]:
    """The notifications that arrive within ``wait`` seconds (or until one does, and what has
    arrived with it)."""
    got = [n.payload for n in conn.notifies(timeout=wait, stop_after=1)]
    got += [n.payload for n in conn.notifies(timeout=0.2)]
    return got


@pytest.mark.postgres
def test_on_postgresql_a_wake_up_is_notified_in_its_own_statement_and_a_leased_step_is_not() -> (
    None
):
    from tests.conftest import postgres_url

    url = postgres_url()
    store = Store(url)
    listener = _listen(url, str(store.notification_channel()))
    statements: list[str] = []

    def seen(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement)

    from sqlalchemy import event

    try:
        runner = _runner(store)
        run_id = _start(runner, "k1")
        assert _notes(listener, 0.5) == []  # created waiting: no notification
        event.listen(store.engine, "before_cursor_execute", seen)
        commands.signal(runner, run_id, "go", "s1", drive=False)
        event.remove(store.engine, "before_cursor_execute", seen)
        assert _notes(listener, PATIENCE) == [""]
        writes = [s for s in statements if "pg_notify" in s]
        assert len(writes) == 1
        assert writes[0].startswith("WITH cas AS (UPDATE runs")

        leased = store.claim("worker-1", 30, time.time())
        assert [r.id for r in leased] == [run_id]
        runner.leases.hold(_lease(leased[0]))
        assert runner.advance(run_id).state == "done"  # the pending record and the receipt
        assert _notes(listener, 0.5) == []  # under the lease, and the lease went with the end
    finally:
        listener.close()
        store.close()


def _lease(run: Any) -> Any:
    from ratchet_runner.engine.lease import Lease

    return Lease.asked(run.id, str(run.lease_token), 30, time.monotonic())


@pytest.mark.postgres
def test_two_schemas_of_one_database_notify_on_different_channels() -> None:
    from tests.conftest import postgres_url

    first, second = Store(postgres_url()), Store(postgres_url())
    try:
        assert first.notification_channel() != second.notification_channel()
        assert str(first.notification_channel()).startswith("ratchet_wake:ratchet_test_")
    finally:
        first.close()
        second.close()


@pytest.mark.postgres
def test_a_closed_listener_stops_at_once_and_closes_its_connection() -> None:
    """A pool run until idle returns when its work is done: closing its listener cuts the
    listening thread's wait short (it waits for a notification or a stop, up to the next
    keepalive ping 10 s away), rather than letting it run out. Five closes take far less than
    one wait each would (half a second before)."""
    from tests.conftest import postgres_url

    url = postgres_url()
    store = Store(url)
    try:
        took = []
        for _ in range(5):
            listener = Listener(
                url, str(store.notification_channel()), store.bell, store.wake_workers, print
            )
            listener.start()
            assert listener.listening.wait(PATIENCE)
            time.sleep(0.05)  # waiting by now
            began = time.monotonic()
            listener.close()
            took.append(time.monotonic() - began)
            assert listener._thread is not None
            assert not listener._thread.is_alive()
        assert sum(took) < 0.5, took
        # A backend ends a moment after its client hangs up: give the server that moment.
        deadline = time.monotonic() + PATIENCE
        while True:
            with store.engine.connect() as conn:
                left = conn.execute(
                    text(
                        "SELECT count(*) FROM pg_stat_activity WHERE application_name = :name "
                        "AND datname = current_database() "
                        "AND query LIKE 'LISTEN %' || :channel || '%'"
                    ),
                    {"name": APPLICATION_NAME, "channel": store.notification_channel()},
                ).scalar_one()
            if left == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert left == 0
    finally:
        store.close()


@pytest.mark.postgres
def test_a_worker_whose_listening_connection_is_terminated_listens_again_and_misses_nothing(
    tmp_path: Path,
) -> None:
    from tests.conftest import postgres_url

    url = postgres_url()
    adapter = NoopAdapter()
    with pool_in_thread(url, adapter) as pool:
        watch = pool.watch
        assert isinstance(watch, Listener)
        with Session(url) as session:
            runner = session.runner(adapters=lambda _: NoopAdapter())
            runs = [_start(runner, f"k{i}") for i in range(3)]
            for i in range(2):
                with session.store.engine.connect() as conn:
                    killed = conn.execute(
                        text(
                            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                            "WHERE application_name = :name AND datname = current_database() "
                            "AND query LIKE 'LISTEN %ratchet_wake:' || current_schema() || '%'"
                        ),
                        {"name": APPLICATION_NAME},
                    ).scalar_one()
                    conn.commit()
                assert killed == 1
                # Sent while it may not be listening: the listener looks again once it is back.
                commands.signal(runner, runs[i], "go", f"s{i}", drive=False)
                _wait_until(session.store, runs[i], "done")
                assert watch.listening.wait(PATIENCE)
            commands.signal(runner, runs[2], "go", "s2", drive=False)
            _wait_until(session.store, runs[2], "done")
    assert adapter.calls == 3


@pytest.mark.postgres
def test_a_worker_that_receives_no_notification_of_its_own_says_so_and_polls(
    tmp_path: Path,
) -> None:
    """A listening connection that never hears the store's notifications (here: another
    database, as behind a proxy that cannot carry LISTEN) fails the start-up check."""
    from tests.conftest import postgres_url

    url = postgres_url()
    elsewhere = PG_URL.rsplit("/", 1)[0] + "/postgres"
    said: list[str] = []
    with Session(url) as session:
        pool = Pool(
            lambda options: session.runner(adapters=lambda _: NoopAdapter(), options=options),
            poll=0.05,
            lease_seconds=30,
            listen_url=elsewhere,
            log=said.append,
        )
        thread = threading.Thread(target=pool.run)
        thread.start()
        try:
            deadline = time.monotonic() + PATIENCE
            while not any("did not arrive" in line for line in said):
                assert time.monotonic() < deadline, said
                time.sleep(0.05)
            watch = pool.watch
            assert isinstance(watch, Listener)
            assert watch.gave_up is not None
            assert "--listen-db" in watch.gave_up
            runner = session.runner(adapters=lambda _: NoopAdapter())
            run_id = _start(runner, "k1")
            commands.signal(runner, run_id, "go", "s1", drive=False)
            _wait_until(session.store, run_id, "done")  # by polling
        finally:
            pool.stop.set()
            thread.join()


# -- across processes ---------------------------------------------------------------------------


def test_a_worker_process_is_woken_by_a_signal_another_process_delivers(
    store_url: str, tmp_path: Path
) -> None:
    """A `ratchet worker` polling once a minute carries on, within seconds, a run whose signal
    this process delivered without driving it (PostgreSQL: a notification; SQLite: the
    database file changed)."""
    binding = tmp_path / "wake.toml"
    binding.write_text('name = "wake"\n[adapters.nothing]\nimplementation = "noop"\n')
    worker = ratchet_process(
        tmp_path,
        store_url,
        "worker",
        "--poll",
        str(SLOW_POLL),
        "--lease",
        "30",
        capture=True,
        bindings=binding,
    )
    try:
        said = _lines_until(worker, "wakes on")
        if "PostgreSQL" in said[-1]:  # and its start-up check's notification arrived
            _lines_until(worker, "listening for wake-ups")
        with Session(store_url, bindings=binding) as session:
            runner = session.runner()
            runs = [_start(runner, f"x{i}") for i in range(3)]
            for i, run_id in enumerate(runs):
                commands.signal(runner, run_id, "go", f"s{i}", drive=False)
                _wait_until(session.store, run_id, "done")
    finally:
        worker.terminate()
        worker.communicate(timeout=60)


def _lines_until(process: Any, words: str) -> list[str]:
    """The lines ``process`` writes to its standard error up to one that holds ``words``."""
    assert process.stderr is not None
    lines: list[str] = []
    deadline = time.monotonic() + PATIENCE
    while not lines or words not in lines[-1]:
        left = deadline - time.monotonic()
        assert left > 0, lines
        assert select.select([process.stderr], [], [], left)[0], lines
        lines.append(process.stderr.readline())
        assert lines[-1], f"the worker ended: {lines}"
    return lines


def test_a_timer_wakes_the_worker_at_its_due_time(store_url: str) -> None:
    adapter = NoopAdapter()
    with pool_in_thread(store_url, adapter):
        store = Store(store_url)
        try:
            runner = _runner(store)
            run_id = _start(runner, "k1")
            commands.signal(runner, run_id, "nap", "s1", drive=False)
            (timer,) = store.timers(run_id)
            _wait_until(store, run_id, "done")  # 2 s, not the minute's poll
            (fired,) = store.timers(run_id)
            assert fired.outcome == "fired"
            assert fired.fired_at is not None
            assert fired.fired_at >= timer.due_at  # never early
        finally:
            store.close()


def test_a_woken_worker_claims_the_run_before_it_looks_for_due_timers(tmp_path: Path) -> None:
    """A wake-up's path is one round trip shorter: the worker it woke claims first, and looks
    for due timers once the run is carried on (before, every wake-up first asked for due timers,
    on the way to the claim: ``bench/trace_wake.py``). Timers still fire: a run that naps after
    the wake-up is done at its due time."""
    url = f"sqlite:///{tmp_path / 'ratchet.db'}"
    adapter = NoopAdapter()
    sent: list[str] = []

    def seen(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if threading.current_thread() is threading.main_thread():
            return  # the test's own statements (delivering the signal)
        if statement.startswith("SELECT timers.id"):  # the due timers (fire_due)
            sent.append("timers")
        elif statement.startswith("SELECT runs.id") and "LIMIT" in statement:
            sent.append("claim")

    from sqlalchemy import event

    with pool_in_thread(url, adapter):
        store = Store(url)
        try:
            runner = _runner(store)
            run_id = _start(runner, "k1")
            napping = _start(runner, "k2")
            event.listen(Engine, "before_cursor_execute", seen)
            try:
                commands.signal(runner, run_id, "go", "s1", drive=False)
                _wait_until(store, run_id, "done")
                commands.signal(runner, napping, "nap", "s2", drive=False)
                _wait_until(store, napping, "done")  # 2 s, not the minute's poll
            finally:
                event.remove(Engine, "before_cursor_execute", seen)
        finally:
            store.close()
    assert adapter.calls == 1  # the signalled run's call; the nap makes none
    assert sent[:2] == ["claim", "timers"], sent
