"""CPU time per durable step, Ratchet against DBOS Transact: the worker, its database, the rest.

In one run, on the same machine and database server, each workload in a child process of its
own: Ratchet's three-effect workflow (``bench/specs/three_effects.yaml``, one runner, the no-op
adapter) and DBOS Transact's equivalent three-step workflow (``bench/dbos/three_steps.py``), each
on a fresh PostgreSQL database and on a fresh SQLite file. Each child starts, connects, drives one
run to warm up and says so; the benchmark then reads the CPU time (user + system, from
``/proc/<pid>/stat``) of the child, of every PostgreSQL backend serving the child's database
(whichever connections it opens: a backend's process title names its database) and of the
server's other processes (the postmaster and its background processes: checkpointer, background
writer, WAL writer, ...), lets the child drive its runs, and reads them again when it is done.
On SQLite the child's process is the whole cost. CPU µs per durable step (3 per run), split
between the worker, its database backends and the server's background; Ratchet and DBOS
alternate for 3 rounds (``python -m bench cpu --rounds N``), each going first every other
round; the figures are medians (a total, the sum of its parts' medians) and the
ratio the median of per-round ratios. DBOS on SQLite runs with Ratchet's settings (WAL,
``synchronous=FULL``: ``bench/dbos/three_steps.py`` checks them). Targets (#28): Ratchet's total
at most 0.35x DBOS's on SQLite and 0.25x on PostgreSQL, backends counted.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench.bench_pool import DBOS_SCRIPT, _dbos_python, _fresh_pg_database
from bench.bench_steps import PG_URL, SPEC
from bench.harness import ROOT, TICK, Row, Section, ServerWatch, postmaster_of, ticks

#: The most of DBOS's CPU per step Ratchet may take, per store (#28).
CPU_TARGET = {"sqlite": 0.35, "postgresql": 0.25}


@dataclass
class Cost:
    """CPU µs per durable step of one workload, split by who spent it, and its steps/s."""

    worker: float
    backends: float
    background: float
    rate: float
    connections: int = 0  # PostgreSQL backends serving it

    @property
    def total(self) -> float:
        return self.worker + self.backends + self.background


def measure(
    argv: list[str], steps: int, postmaster: int | None, database: str, root: Path = ROOT
) -> Cost:
    """Start the child ``argv`` in ``root`` (a checkout, whose code it runs), wait until it is
    ready, and read the CPU its ``steps`` durable steps cost: its own, and (with
    ``postmaster``) its database's and the server's."""
    child = subprocess.Popen(
        argv,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None
    assert child.stdout is not None
    try:
        said = child.stdout.readline().strip()
        if said != "ready":
            raise RuntimeError(f"a benchmark child did not start: {said!r}")
        watch = ServerWatch(postmaster, database) if postmaster is not None else None
        if watch is not None:
            watch.begin()
        before = ticks(child.pid)
        child.stdin.write("go\n")
        child.stdin.flush()
        rate = float(child.stdout.readline().split()[-1])
        after = ticks(child.pid)
        backends, background, connections = watch.end() if watch is not None else (0, 0, 0)
        child.stdin.write("exit\n")
        child.stdin.flush()
        child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    if before is None or after is None:
        raise RuntimeError("cannot read the child's CPU time from /proc")
    worker = (after - before) * TICK
    return Cost(worker / steps, backends / steps, background / steps, rate, connections)


def _ratchet(url: str, runs: int, postmaster: int | None, database: str) -> Cost:
    argv = [sys.executable, "-m", "bench.bench_cpu", url, str(runs)]
    return measure(argv, 3 * runs, postmaster, database)


def _dbos(python: Path, url: str, runs: int, postmaster: int | None, database: str) -> Cost:
    argv = [str(python), str(DBOS_SCRIPT), url, str(runs), "--gated"]
    return measure(argv, 3 * runs, postmaster, database)


def median(costs: list[Cost]) -> Cost:
    return Cost(
        statistics.median(c.worker for c in costs),
        statistics.median(c.backends for c in costs),
        statistics.median(c.background for c in costs),
        statistics.median(c.rate for c in costs),
        max(c.connections for c in costs),
    )


def _rows(section: Section, label: str, ours: list[Cost], theirs: list[Cost], pg: bool) -> None:
    mine, other = median(ours), median(theirs)
    target = CPU_TARGET["postgresql" if pg else "sqlite"]
    ratio = statistics.median(a.total / b.total for a, b in zip(ours, theirs, strict=True))
    rounds = len(ours)
    section.rows.append(
        Row(
            f"{label}: CPU µs per durable step, Ratchet vs DBOS, in all (medians of {rounds} "
            "alternating rounds; ratio: median of the per-round ratios)",
            mine.total if pg else mine.worker,
            "µs",
            other.total if pg else other.worker,
            f"<= {target}x DBOS",
            ratio <= target,
            measured_ratio=ratio,
        )
    )
    if pg:
        for name, field in (
            ("worker process", "worker"),
            ("database's backends", "backends"),
            ("server's background processes", "background"),
        ):
            section.rows.append(
                Row(
                    f"{label}: of which the {name}",
                    getattr(mine, field),
                    "µs",
                    getattr(other, field),
                )
            )
        section.rows.append(
            Row(f"{label}: connections (backends)", mine.connections, "", other.connections)
        )
    section.rows.append(
        Row(f"{label}: steps/s meanwhile (wall clock)", mine.rate, "steps/s", other.rate)
    )


def _in_turn(round_: int, first: str, second: str) -> tuple[str, str]:
    """The two sides in the order round ``round_`` runs them: each goes first every other
    round."""
    return (first, second) if round_ % 2 == 0 else (second, first)


def run(quick: bool = False, rounds: int | None = None) -> Section:
    """The benchmark, ``rounds`` alternating rounds (3; 1 with ``quick``): in each, which side
    goes first alternates too."""
    section = Section.of("CPU per durable step, Ratchet against DBOS", __doc__, "DBOS")
    runs = 150 if quick else 500
    rounds = rounds or (1 if quick else 3)
    python = _dbos_python()
    if python is None:
        section.rows.append(Row("DBOS could not be installed: not measured", float("nan"), ""))
        return section
    with tempfile.TemporaryDirectory() as tmp:
        ours: list[Cost] = []
        theirs: list[Cost] = []
        for i in range(rounds):
            mine = f"sqlite:///{Path(tmp) / f'r{i}.db'}"
            other = f"sqlite:///{Path(tmp) / f'd{i}.db'}"
            for side in _in_turn(i, "ratchet", "dbos"):
                if side == "ratchet":
                    ours.append(_ratchet(mine, runs, None, ""))
                else:
                    theirs.append(_dbos(python, other, runs, None, ""))
        _rows(section, "SQLite", ours, theirs, pg=False)
    postmaster = postmaster_of(PG_URL)
    if postmaster is None:
        section.rows.append(
            Row("PostgreSQL: its processes are not readable here: not measured", float("nan"), "")
        )
        return section
    ours, theirs = [], []
    for i in range(rounds):
        for side in _in_turn(i, "ratchet", "dbos"):
            if side == "ratchet":
                name = "ratchet_bench_cpu_r"
                ours.append(_ratchet(_fresh_pg_database(name), runs, postmaster, name))
            else:
                name = "ratchet_bench_cpu_d"
                theirs.append(_dbos(python, _fresh_pg_database(name), runs, postmaster, name))
    _rows(section, "PostgreSQL", ours, theirs, pg=True)
    return section


def child(url: str, runs: int) -> None:
    """Ratchet's side, in a process of its own: connect, drive one run to warm up, say
    ``ready``, wait for a line, drive ``runs`` runs, print the steps per second, and wait for
    another line before closing the store (the parent reads the CPU time in between)."""
    from bench.bench_steps import drive_runs
    from ratchet_runner.adapters.noop import NoopAdapter
    from ratchet_runner.session import Session
    from ratchet_runner.spec.validate import load_spec

    spec, spec_text = load_spec(SPEC), SPEC.read_text(encoding="utf-8")
    adapter = NoopAdapter()
    with Session(url) as session:
        runner = session.runner(adapters=lambda _: adapter)
        drive_runs(runner, spec, spec_text, 1)
        print("ready", flush=True)
        sys.stdin.readline()
        rate = drive_runs(runner, spec, spec_text, runs)
        print(rate, flush=True)
        sys.stdin.readline()
    assert adapter.calls == 3 * (runs + 1)


if __name__ == "__main__":
    if len(sys.argv) != 3 or not sys.argv[2].isdigit():
        sys.exit(
            "usage: python -m bench.bench_cpu URL RUNS (the benchmark's child process; the "
            "benchmark itself is `python -m bench cpu`)"
        )
    child(sys.argv[1], int(sys.argv[2]))
