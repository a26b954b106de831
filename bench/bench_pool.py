"""Ratchet against DBOS Transact, and PostgreSQL throughput with 1, 2, 4 and 8 workers.

In one run, on the same machine and database server: Ratchet's durable effect steps per second
(the three-effect workflow of ``bench/specs/three_effects.yaml``, one runner, a no-op adapter)
against DBOS Transact running an equivalent three-step workflow (``bench/dbos/three_steps.py``,
installed only in the benchmark's own virtual environment), on SQLite and on PostgreSQL. Then
PostgreSQL throughput with 1, 2, 4 and 8 worker processes draining the same number of runs.
Targets: at least 2x DBOS's steps/s on each store; 4 workers at least 2.5x one worker.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sqlalchemy import create_engine, text

from bench.bench_steps import PG_URL, SPEC, step_rate
from bench.harness import ROOT, Row, Section
from runner.execute import Runner
from runner.store import Store
from runner.validate import load_spec

DBOS_VENV = ROOT / "bench" / "results" / "dbos-venv"
DBOS_SCRIPT = ROOT / "bench" / "dbos" / "three_steps.py"


def _dbos_python() -> Path | None:
    python = DBOS_VENV / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(DBOS_VENV)], check=True)
        done = subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "dbos"],
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


def _pool_rate(url: str, workers: int, runs: int) -> float:
    store = Store(url)
    spec, spec_text = load_spec(SPEC), SPEC.read_text(encoding="utf-8")
    runner = Runner(store, lambda _: None)  # type: ignore[arg-type,return-value]
    prefix = f"p{time.time_ns()}"
    for i in range(runs):
        runner.start(spec, spec_text, {"key": f"{prefix}-{i}"})
    store.close()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "bench.pool_child", url],
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
    start = time.time()
    for child in children:
        if child.stdin is not None:
            child.stdin.write("go\n")
            child.stdin.flush()
    finished = []
    for child in children:
        out, _ = child.communicate(timeout=900)
        finished.append(float(out.split()[-1]))
    elapsed = max(finished) - start
    check = Store(url)
    left = check.status_counts().get("running", 0)
    check.close()
    if left:
        raise RuntimeError(f"{left} run(s) were left running")
    return 3 * runs / elapsed


def run(quick: bool = False) -> Section:
    section = Section(
        "Ratchet against DBOS, and PostgreSQL workers",
        __doc__.strip().splitlines()[0] if __doc__ else "",
        baseline_name="baseline",
    )
    n = 100 if quick else 300
    python = _dbos_python()
    with tempfile.TemporaryDirectory() as tmp:
        ours_sqlite = step_rate(Store(f"sqlite:///{Path(tmp) / 'r.db'}"), n)
        theirs_sqlite = (
            _dbos_rate(python, f"sqlite:///{Path(tmp) / 'dbos.db'}", n) if python else float("nan")
        )
    ours_pg = step_rate(Store(_fresh_pg_database("ratchet_bench_steps")), n)
    theirs_pg = (
        _dbos_rate(python, _fresh_pg_database("ratchet_bench_dbos"), n) if python else float("nan")
    )
    section.rows += [
        Row(
            "SQLite: Ratchet steps/s vs DBOS steps/s",
            ours_sqlite,
            "steps/s",
            theirs_sqlite,
            ">= 2x DBOS",
            ours_sqlite >= 2 * theirs_sqlite,
        ),
        Row(
            "PostgreSQL: Ratchet steps/s vs DBOS steps/s",
            ours_pg,
            "steps/s",
            theirs_pg,
            ">= 2x DBOS",
            ours_pg >= 2 * theirs_pg,
        ),
    ]
    runs = 150 if quick else 600
    rates = {}
    for workers in (1, 2, 4, 8):
        rates[workers] = _pool_rate(
            _fresh_pg_database(f"ratchet_bench_pool{workers}"), workers, runs
        )
    for workers in (2, 4, 8):
        target = ">= 2.5x one worker" if workers == 4 else ""
        section.rows.append(
            Row(
                f"PostgreSQL, {workers} worker processes vs 1",
                rates[workers],
                "steps/s",
                rates[1],
                target,
                rates[workers] >= 2.5 * rates[1] if workers == 4 else None,
            )
        )
    return section
