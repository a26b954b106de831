"""Wake-ups: how soon an idle worker reacts to a signal, a decision or a due timer.

Signal → the effect's call starting at the provider: a run waits in a pause; the benchmark
delivers its signal through the library API without driving the run (``signal(...,
drive=False)``), and an idle worker process carries it on. Measured with 4 idle worker processes
on PostgreSQL, first woken by notifications, then polling at the default interval (1 s) as the
baseline; the same for an approval (``decide(..., drive=False)``); on SQLite with the workers in
the signalling process, and with worker processes that watch the database file. Then 1,000
timers, each due at a moment spread over 10 s: how late each fires. The listening connections of
the workers are terminated while signals flow, and every signal must still be handled (within the
poll fallback). Last, the CPU an idle worker spends, and steps/s with the creations notifying
against the same without.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import text

from bench.bench_pool import _fresh_pg_database
from bench.bench_steps import SPEC as STEPS_SPEC
from bench.harness import ROOT, Row, Section
from ratchet_runner.adapters.noop import NoopAdapter
from ratchet_runner.engine import commands
from ratchet_runner.engine.runner import Runner
from ratchet_runner.session import Session
from ratchet_runner.spec.validate import load_spec
from ratchet_runner.store.watch import APPLICATION_NAME
from ratchet_runner.worker.pool import Pool

SPEC = ROOT / "bench" / "specs" / "wake.yaml"
WORKERS = 4
TICKS = os.sysconf("SC_CLK_TCK")


class Workers:
    """``count`` worker processes (:mod:`bench.wake_child`) on ``url``, and when each call
    reached one of them, by run key."""

    def __init__(self, url: str, mode: str, count: int = WORKERS) -> None:
        self.children = spawn(["-m", "bench.wake_child", url, mode], count)
        self.called: dict[str, float] = {}
        self._arrived = threading.Condition()
        for child in self.children:
            said = child.stdout.readline().strip() if child.stdout is not None else ""
            if said != "ready":
                raise RuntimeError(f"a benchmark worker did not start: {said!r}")
            threading.Thread(target=self._read, args=(child,), daemon=True).start()

    def _read(self, child: subprocess.Popen[str]) -> None:
        assert child.stdout is not None
        for line in child.stdout:
            parts = line.split()
            if len(parts) == 3 and parts[0] == "called":
                with self._arrived:
                    self.called[parts[1]] = float(parts[2])
                    self._arrived.notify_all()

    def wait_for(self, keys: list[str], timeout: float) -> bool:
        with self._arrived:
            return self._arrived.wait_for(lambda: all(k in self.called for k in keys), timeout)

    def cpu_seconds(self) -> float:
        return sum(_cpu(child.pid) for child in self.children)

    def stop(self) -> None:
        for child in self.children:
            if child.stdin is not None:
                child.stdin.close()
        for child in self.children:
            child.wait(timeout=60)


def spawn(args: list[str], count: int) -> list[subprocess.Popen[str]]:
    """``count`` Python processes running ``args`` with this checkout's code, each read line by
    line (their standard output) and stopped by closing their standard input."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return [
        subprocess.Popen(
            [sys.executable, *args],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for _ in range(count)
    ]


def _cpu(pid: int) -> float:
    """CPU seconds (user + system) the process ``pid`` has used, from /proc."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def _runner(session: Session) -> tuple[Runner, Callable[[str, str], str]]:
    """A runner for the benchmark's spec, and ``start(key, state)``: a run waiting in ``state``
    (``waiting``, or ``asking`` for a decision)."""
    spec, spec_text = load_spec(SPEC), SPEC.read_text(encoding="utf-8")
    runner = session.runner(adapters=lambda _: NoopAdapter())

    def start(key: str, state: str) -> str:
        run, _ = runner.start(spec, spec_text, {"key": key}, wake=False)
        if state == "asking":
            commands.signal(runner, run.id, "ask", f"{key}-ask")
        return run.id

    return runner, start


def _percentiles(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return statistics.median(ordered), ordered[max(0, round(0.99 * len(ordered)) - 1)]


def _latencies(
    runner: Runner,
    start: Callable[[str, str], str],
    called: Callable[[list[str], float], dict[str, float]],
    n: int,
    how: str,
    spacing: float = 0.01,
    meanwhile: Callable[[int], None] | None = None,
) -> list[float]:
    """Milliseconds from sending each of ``n`` signals (``how``: ``signal``) or approvals
    (``approve``) to its call reaching a worker."""
    prefix = f"{how}{time.time_ns()}"
    keys = [f"{prefix}-{i}" for i in range(n)]
    runs = [start(key, "asking" if how == "approve" else "waiting") for key in keys]
    sent: dict[str, float] = {}
    for i, (key, run_id) in enumerate(zip(keys, runs, strict=True)):
        if meanwhile is not None:
            meanwhile(i)
        sent[key] = time.time()
        if how == "approve":
            commands.decide(runner, run_id, "approve", "bench", "agent", drive=False)
        else:
            commands.signal(runner, run_id, "go", f"{key}-go", drive=False)
        time.sleep(spacing)
    arrived = called(keys, 60.0)
    missing = [k for k in keys if k not in arrived]
    if missing:
        raise RuntimeError(f"{len(missing)} of {n} calls never came")
    return [(arrived[k] - sent[k]) * 1000 for k in keys]


def _row(
    name: str,
    values: list[float],
    base: list[float] | None,
    target: float | None,
    p50_target: float | None = None,
) -> Row:
    """A latency row: p50 as the value, p99 in the name, against ``target`` for p99 (and
    ``p50_target`` for p50)."""
    p50, p99 = _percentiles(values)
    b50 = _percentiles(base)[0] if base else None
    aims = [] if target is None else [f"p99 < {target:g} ms"]
    met = [] if target is None else [p99 < target]
    if p50_target is not None:
        aims.append(f"p50 < {p50_target:g} ms")
        met.append(p50 < p50_target)
    return Row(
        f"{name}: p50 (p99 {p99:.1f} ms, over {len(values)})",
        p50,
        "ms",
        b50,
        ", ".join(aims),
        all(met) if met else None,
    )


def _postgres(section: Section, n: int, timers: int) -> None:
    url = _fresh_pg_database("ratchet_bench_wake")
    with Session(url) as session:
        runner, start = _runner(session)
        polling = Workers(url, "poll")
        try:
            polled = _latencies(runner, start, _waiter(polling), n, "signal", spacing=0.02)
            polled_approvals = _latencies(runner, start, _waiter(polling), n, "approve", 0.02)
        finally:
            polling.stop()
        workers = Workers(url, "wake")
        try:
            woken = _latencies(runner, start, _waiter(workers), n, "signal")
            section.rows.append(
                _row("PostgreSQL, 4 idle workers: signal → call, woken", woken, polled, 50, 10)
            )
            approvals = _latencies(runner, start, _waiter(workers), n, "approve")
            section.rows.append(
                _row(
                    "PostgreSQL, 4 idle workers: approval → call, woken",
                    approvals,
                    polled_approvals,
                    50,
                    10,
                )
            )
            section.rows.append(_killed_listeners(session, runner, start, workers, n))
            section.rows.append(_timers(runner, session, timers, "PostgreSQL, 4 idle workers"))
            section.rows.append(_idle_cpu(workers, "PostgreSQL"))
        finally:
            workers.stop()


def _waiter(workers: Workers) -> Callable[[list[str], float], dict[str, float]]:
    def called(keys: list[str], timeout: float) -> dict[str, float]:
        workers.wait_for(keys, timeout)
        return dict(workers.called)

    return called


def _killed_listeners(
    session: Session, runner: Runner, start: Callable[[str, str], str], workers: Workers, n: int
) -> Row:
    """Signals flow while every worker's listening connection is terminated twice: each one is
    still handled."""
    killed = 0

    def terminate(i: int) -> None:
        nonlocal killed
        if i in (n // 3, 2 * n // 3):
            with session.store.engine.connect() as conn:
                killed += int(
                    conn.execute(
                        text(
                            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                            "WHERE application_name = :name AND datname = current_database()"
                        ),
                        {"name": APPLICATION_NAME},
                    ).scalar_one()
                )
                conn.commit()

    values = _latencies(runner, start, _waiter(workers), n, "signal", meanwhile=terminate)
    p50, p99 = _percentiles(values)
    return Row(
        f"PostgreSQL: signals handled while {killed} listening connections were terminated "
        f"(p50 {p50:.1f} ms, p99 {p99:.1f} ms, slowest {max(values):.0f} ms)",
        len(values),
        "of " + str(n),
        None,
        "all, within the poll fallback",
        len(values) == n and max(values) < 1000 * (1.0 + 5.0),
        digits=0,
    )


def _timers(runner: Runner, session: Session, count: int, label: str) -> Row:
    """``count`` runs each nap on a 2 s timer, their naps begun over 10 s: how late each timer
    fired (the timer's firing time by the worker's clock minus its due time)."""
    spec, spec_text = load_spec(SPEC), SPEC.read_text(encoding="utf-8")
    prefix = f"t{time.time_ns()}"
    runs = [
        runner.start(spec, spec_text, {"key": f"{prefix}-{i}"}, wake=False)[0].id
        for i in range(count)
    ]
    spacing = 10.0 / count
    for i, run_id in enumerate(runs):
        commands.signal(runner, run_id, "nap", f"{prefix}-{i}-nap", drive=False)
        time.sleep(spacing)
    deadline = time.monotonic() + 60
    store = session.store
    while time.monotonic() < deadline:
        left = [r for r in runs if store.get_run(r).state != "done"]
        if not left:
            break
        time.sleep(0.5)
    late = []
    for run_id in runs:
        for timer in store.timers(run_id):
            if timer.outcome == "fired" and timer.fired_at is not None:
                late.append((timer.fired_at - timer.due_at) * 1000)
    return _row(f"{label}: timer due → fired", late, None, 50)


def _idle_cpu(workers: Workers, label: str, seconds: float = 5.0) -> Row:
    before = workers.cpu_seconds()
    time.sleep(seconds)
    share = (workers.cpu_seconds() - before) / seconds / len(workers.children) * 100
    return Row(
        f"{label}: CPU of an idle worker process (% of a core, over {seconds:g} s)",
        share,
        "%",
        None,
        "< 1 %",
        share < 1.0,
    )


def _sqlite(section: Section, n: int, tmp: Path) -> None:
    url = f"sqlite:///{tmp / 'wake.db'}"
    with Session(url) as session:
        runner, start = _runner(session)
        called: dict[str, float] = {}
        arrived = threading.Condition()

        class Stamping(NoopAdapter):
            def call(self, request):  # type: ignore[no-untyped-def]
                with arrived:
                    called[request.args["key"]] = time.time()
                    arrived.notify_all()
                return super().call(request)

        adapter = Stamping()
        pool = Pool(
            lambda options: session.runner(adapters=lambda _: adapter, options=options),
            concurrency=2,
            lease_seconds=30,
            poll=1.0,
        )
        worker = threading.Thread(target=pool.run)
        worker.start()

        def waiter(keys: list[str], timeout: float) -> dict[str, float]:
            with arrived:
                arrived.wait_for(lambda: all(k in called for k in keys), timeout)
            return dict(called)

        try:
            time.sleep(0.5)
            inside = _latencies(runner, start, waiter, n, "signal")
        finally:
            pool.stop.set()
            worker.join()
        section.rows.append(
            _row("SQLite, 2 worker threads in the process: signal → call", inside, None, 20)
        )
        workers = Workers(url, "wake")
        try:
            across = _latencies(runner, start, _waiter(workers), n, "signal")
            section.rows.append(
                _row("SQLite, 4 worker processes: signal → call", across, None, None)
            )
            section.rows.append(_idle_cpu(workers, "SQLite (data_version every 10 ms)"))
        finally:
            workers.stop()


def _creations(url: str, runs: int, wake: bool) -> float:
    """Durable steps/s of the three-effect workflow, its runs created waking the workers or
    not (a notifying commit takes PostgreSQL's notification lock as it commits)."""
    spec, spec_text = load_spec(STEPS_SPEC), STEPS_SPEC.read_text(encoding="utf-8")
    with Session(url) as session:
        runner = session.runner(adapters=lambda _: NoopAdapter())
        prefix = f"c{time.time_ns()}"
        began = time.perf_counter()
        for i in range(runs):
            run, _ = runner.start(spec, spec_text, {"key": f"{prefix}-{i}"}, wake=wake)
            runner.advance(run)
        return 3 * runs / (time.perf_counter() - began)


def run(quick: bool = False) -> Section:
    section = Section.of("Wake-ups", __doc__, "polling (1 s)")
    n = 50 if quick else 200
    timers = 200 if quick else 1000
    with tempfile.TemporaryDirectory() as tmp:
        _sqlite(section, n, Path(tmp))
    try:
        _postgres(section, n, timers)
    except Exception as exc:  # report it; the SQLite figures still stand
        section.rows.append(Row(f"PostgreSQL: not measured ({str(exc)[:80]})", float("nan"), ""))
        return section
    url = _fresh_pg_database("ratchet_bench_wake")
    on, off = [], []
    for _ in range(1 if quick else 3):
        on.append(_creations(url, 100 if quick else 300, wake=True))
        off.append(_creations(url, 100 if quick else 300, wake=False))
    section.rows.append(
        Row(
            "PostgreSQL: steps/s, each run's creation notifying, vs not notifying (medians)",
            statistics.median(on),
            "steps/s",
            statistics.median(off),
        )
    )
    return section
