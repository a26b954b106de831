"""Ratchet against DBOS Transact, and PostgreSQL throughput with 1, 2, 4 and 8 workers.

In one run, on the same machine and database server: Ratchet's durable effect steps per second
(the three-effect workflow of ``bench/specs/three_effects.yaml``, one runner, a no-op adapter)
against DBOS Transact running an equivalent three-step workflow (``bench/dbos/three_steps.py``,
installed only in the benchmark's own virtual environment), on SQLite and on PostgreSQL. Then
PostgreSQL throughput with 1, 2, 4 and 8 worker processes draining the same number of runs,
timed from the moment every worker is started and connected to the moment the last one is done.
DBOS on SQLite runs with Ratchet's settings (WAL, ``synchronous=FULL``), which its script checks
on every connection it opens, and goes through the same SQLAlchemy and psycopg versions.
Targets: at least 3x DBOS's steps/s on each store (#28); 4 workers at least 2.5x one worker.

With a no-op provider a worker never waits on anything but its database, so it keeps about one
core busy (its own process and its PostgreSQL backend, in turn), and the machine's cores cap what
more workers can add: the report prints that cap, measured. A second scaling run gives each call
and lookup a 10 ms provider round trip, as a real provider has, where the cap is the workers'
coordination (claims, leases, commits), not the CPU. Last, one claim's cost with 100,000
runnable runs waiting against 100: a claim must not grow with the backlog.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import create_engine, make_url, text

from bench.bench_steps import PG_URL, SPEC, step_rate
from bench.harness import ROOT, TICK, Row, Section, ServerWatch, postmaster_of, ticks
from ratchet_runner.adapters.noop import NoopAdapter
from ratchet_runner.session import Session
from ratchet_runner.spec.validate import load_spec

DBOS_VENV = ROOT / "bench" / "results" / "dbos-venv"
DBOS_SCRIPT = ROOT / "bench" / "dbos" / "three_steps.py"
PROVIDER_MS = 10.0  # the provider round trip of the scaling run that is not bound by the CPU


#: The DBOS Transact compared with (the issue's figures were measured with 3.4).
DBOS_VERSION = "3.4.0"


def _same_drivers() -> list[str]:
    """SQLAlchemy and psycopg pinned to the versions Ratchet runs with here, so that the two
    go through the same drivers."""
    from importlib.metadata import version

    return [f"sqlalchemy=={version('sqlalchemy')}", f"psycopg[binary]=={version('psycopg')}"]


def _dbos_python() -> Path | None:
    python = DBOS_VENV / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(DBOS_VENV)], check=True)
        done = subprocess.run(
            [str(python), "-m", "pip", "install", "-q", f"dbos=={DBOS_VERSION}", *_same_drivers()],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            return None
    return python


def _dbos_rate(python: Path, url: str, n: int) -> float:
    out = subprocess.run(
        [str(python), str(DBOS_SCRIPT), url, str(n)],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return float(out.stdout.strip().splitlines()[-1])


def _fresh_pg_database(name: str) -> str:
    admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return PG_URL.rsplit("/", 1)[0] + f"/{name}"


def _busy() -> tuple[int, int] | None:
    """Jiffies spent in all and idle, over every core (Linux's /proc/stat), or None."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = [int(x) for x in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return sum(fields), fields[3] + fields[4]


@dataclass
class Drain:
    """Steps per second of a pool draining the queue, how many cores the machine had busy
    meanwhile (the workers, their PostgreSQL backends, and anything else running), and the CPU
    time per step of the workers' processes and of the PostgreSQL server (the backends serving
    the store's database, and the server's own processes)."""

    workers: int
    rate: float
    cores_busy: float | None
    worker_cpu_ms: float = 0.0
    server_cpu_ms: float = 0.0


def _pool_rate(url: str, workers: int, runs: int, delay_ms: float = 0.0, threads: int = 1) -> Drain:
    """``workers`` processes of :mod:`bench.pool_child` draining ``runs`` runs started in the
    store at ``url``, timed from the moment every one is started and connected; the CPU times
    read before they let their connections go (on PostgreSQL on this host: the backends of the
    store's database and the server's own processes, :class:`~bench.harness.ServerWatch`)."""
    postmaster = postmaster_of(url) if make_url(url).get_backend_name() == "postgresql" else None
    spec, spec_text = load_spec(SPEC), SPEC.read_text(encoding="utf-8")
    with Session(url) as session:  # the runs to drain, started (not driven: no call is made)
        runner = session.runner(adapters=lambda _: NoopAdapter())
        prefix = f"p{time.time_ns()}"
        for i in range(runs):
            runner.start(spec, spec_text, {"key": f"{prefix}-{i}"})
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "bench.pool_child", url, str(delay_ms), str(threads)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(workers)
    ]
    for child in children:  # every worker started, imported and connected: then the clock
        said = child.stdout.readline().strip() if child.stdout is not None else ""
        if said != "ready":
            raise RuntimeError(f"a benchmark worker did not start: {said!r}")
    watch = ServerWatch(postmaster, make_url(url).database or "") if postmaster else None
    if watch is not None:
        watch.begin()
    mine, before = [ticks(child.pid) or 0 for child in children], _busy()
    start = time.time()
    for child in children:
        if child.stdin is not None:
            child.stdin.write("go\n")
            child.stdin.flush()
    finished = []
    for child in children:  # done, and still connected: their backends' CPU is still there
        said = child.stdout.readline() if child.stdout is not None else ""
        finished.append(float(said.split()[-1]))
    after = _busy()
    worker_us = sum((ticks(c.pid) or 0) - m for c, m in zip(children, mine, strict=True)) * TICK
    backends, background, _ = watch.end() if watch is not None else (0.0, 0.0, 0)
    for child in children:
        child.communicate(timeout=60)
    elapsed = max(finished) - start
    with Session(url) as check:
        left = check.store.status_counts().get("running", 0)
    if left:
        raise RuntimeError(f"{left} run(s) were left running")
    busy = None
    if before is not None and after is not None and after[0] > before[0]:
        total, idle = after[0] - before[0], after[1] - before[1]
        busy = (1 - idle / total) * (os.cpu_count() or 1)
    steps = 3 * runs
    server_us = backends + background
    return Drain(workers, steps / elapsed, busy, worker_us / steps / 1000, server_us / steps / 1000)


def _claim_seconds(backlog: int, claims: int) -> float:
    """Median seconds per claim (one worker) with ``backlog`` runnable runs waiting."""
    with Session(_fresh_pg_database("ratchet_bench_claims")) as session:
        store = session.store
        spec, spec_text = load_spec(SPEC), SPEC.read_text(encoding="utf-8")
        session.runner(adapters=lambda _: NoopAdapter()).start(spec, spec_text, {"key": "seed"})
        with store.engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO runs (id, workflow, spec_digest, business_key, state, status, "
                    "version, input, context, created_at, updated_at) SELECT 'run_b' || g, "
                    "workflow, spec_digest, 'b' || g, state, 'running', 1, input, '{}', g, g "
                    "FROM runs, generate_series(1, :n) AS g WHERE business_key = 'seed'"
                ),
                {"n": backlog},
            )
            conn.execute(text("ANALYZE runs"))
        times = []
        for _ in range(claims):
            start = time.perf_counter()
            store.claim("bench", 30.0, time.time())
            times.append(time.perf_counter() - start)
        return statistics.median(times)


def _steps(url: str, runs: int) -> float:
    with Session(url) as session:
        return step_rate(session, runs)


def _alternate(
    ours: Callable[[], float], theirs: Callable[[], float], rounds: int
) -> tuple[float, float, float]:
    """Ratchet and DBOS in turn, ``rounds`` times: the medians, and the median of the
    per-round ratios (load that comes and goes on the machine hits both alike)."""
    mine, other, ratios = [], [], []
    for _ in range(rounds):
        mine.append(ours())
        other.append(theirs())
        ratios.append(mine[-1] / other[-1])
    return statistics.median(mine), statistics.median(other), statistics.median(ratios)


def versus_dbos_sqlite(n: int, rounds: int) -> tuple[float, float, float]:
    """Ratchet and DBOS on SQLite (both WAL, ``synchronous=FULL``), ``n`` runs a round, in turn
    for ``rounds`` rounds: the medians and the median of the per-round ratios."""
    python = _dbos_python()
    with tempfile.TemporaryDirectory() as tmp:
        counter = iter(range(1_000_000))

        def ours_sqlite() -> float:
            return _steps(f"sqlite:///{Path(tmp) / f'r{next(counter)}.db'}", n)

        def theirs_sqlite() -> float:
            if python is None:
                return float("nan")
            return _dbos_rate(python, f"sqlite:///{Path(tmp) / f'd{next(counter)}.db'}", n)

        return _alternate(ours_sqlite, theirs_sqlite, rounds)


def main() -> int:
    """``python -m bench.bench_pool --runs 1000 --rounds 5``: the SQLite comparison alone, with
    longer rounds than ``python -m bench pool`` takes (what docs/performance.md quotes)."""
    import argparse
    import os

    parser = argparse.ArgumentParser(prog="python -m bench.bench_pool", description=main.__doc__)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    before = os.getloadavg()[0]
    ours, theirs, ratio = versus_dbos_sqlite(args.runs, args.rounds)
    print(
        f"SQLite (WAL, FULL both), {args.runs} runs a round, {args.rounds} alternating rounds: "
        f"Ratchet {ours:.0f} steps/s, DBOS {theirs:.0f} steps/s, ratio {ratio:.2f} "
        f"(load {before:.1f} to {os.getloadavg()[0]:.1f})"
    )
    return 0


def run(quick: bool = False) -> Section:
    section = Section.of("Ratchet against DBOS, and PostgreSQL workers", __doc__, "baseline")
    n = 100 if quick else 300
    rounds = 1 if quick else 3
    python = _dbos_python()
    sqlite = versus_dbos_sqlite(n, rounds)
    postgres = _alternate(
        lambda: _steps(_fresh_pg_database("ratchet_bench_steps"), n),
        lambda: (
            _dbos_rate(python, _fresh_pg_database("ratchet_bench_dbos"), n)
            if python
            else float("nan")
        ),
        rounds,
    )
    for label, (ours, theirs, ratio) in (("SQLite", sqlite), ("PostgreSQL", postgres)):
        section.rows.append(
            Row(
                f"{label}: Ratchet steps/s vs DBOS steps/s (medians of {rounds} alternating "
                "rounds)",
                ours,
                "steps/s",
                theirs,
                ">= 3x DBOS",
                ratio >= 3,
                measured_ratio=ratio,
            )
        )
    default, unprepared, gain = _alternate(
        lambda: _steps(_fresh_pg_database("ratchet_bench_steps"), n),
        lambda: _steps(_fresh_pg_database("ratchet_bench_steps") + "?prepare_threshold=none", n),
        rounds,
    )
    section.rows.append(
        Row(
            "PostgreSQL: Ratchet steps/s with server-side prepared statements (the default) vs "
            "with ?prepare_threshold=none (for old transaction-pooling proxies)",
            default,
            "steps/s",
            unprepared,
            measured_ratio=gain,
        )
    )
    runs = 150 if quick else 600
    drains = {
        workers: _pool_rate(_fresh_pg_database(f"ratchet_bench_pool{workers}"), workers, runs)
        for workers in (1, 2, 4, 8)
    }
    for workers in (2, 4, 8):
        section.rows.append(
            Row(
                f"PostgreSQL, {workers} worker processes vs 1 (no-op provider)",
                drains[workers].rate,
                "steps/s",
                drains[1].rate,
                ">= 2.5x one worker" if workers == 4 else "",
                drains[workers].rate >= 2.5 * drains[1].rate if workers == 4 else None,
            )
        )
    cores = os.cpu_count() or 1
    one = drains[1].cores_busy
    if one:
        # One worker alternates between its own process and its PostgreSQL backend: with a
        # no-op provider it is never idle, so the machine's cores bound what more workers add.
        section.rows.append(
            Row(
                f"cores busy while one no-op worker drains (of {cores}); the most any number "
                f"of workers can reach on this machine is {cores / one:.2f}x one worker",
                one,
                "cores",
            )
        )
    small, large = _claim_seconds(100, 200), _claim_seconds(100_000, 200)
    section.rows.append(
        Row(
            "PostgreSQL: one claim with 100,000 runnable runs waiting vs with 100 (median of 200)",
            large * 1000,
            "ms",
            small * 1000,
            "<= 2x",
            large <= 2 * small,
        )
    )
    slow_runs = 60 if quick else 200
    slow = {
        workers: _pool_rate(
            _fresh_pg_database(f"ratchet_bench_slow{workers}"), workers, slow_runs, PROVIDER_MS
        )
        for workers in (1, 4)
    }
    section.rows.append(
        Row(
            f"PostgreSQL, 4 worker processes vs 1, each call and lookup taking {PROVIDER_MS:g} ms "
            "(a provider over the network)",
            slow[4].rate,
            "steps/s",
            slow[1].rate,
            ">= 2.5x one worker",
            slow[4].rate >= 2.5 * slow[1].rate,
        )
    )
    threaded = _pool_rate(
        _fresh_pg_database("ratchet_bench_threads"), 1, slow_runs, PROVIDER_MS, threads=4
    )
    section.rows.append(
        Row(
            f"PostgreSQL, 1 worker process with 4 threads vs 1 thread, {PROVIDER_MS:g} ms provider",
            threaded.rate,
            "steps/s",
            slow[1].rate,
        )
    )
    return section


if __name__ == "__main__":
    raise SystemExit(main())
