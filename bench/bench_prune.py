"""Pruning finished runs while workers run: its rate, its memory, and the workers' longest wait.

A store is filled with N finished runs of the three-effect workflow (``bench/specs/
three_effects.yaml``: one run driven to its end through the runner, then its rows copied N times
with new IDs, business keys and operation IDs, all finished a day ago). Then ``ratchet prune``'s
engine (batches of 100) runs in a process of its own, its peak memory measured there, while two
worker threads here start and drive new runs of the same workflow as fast as they finish, every
commit they make timed; then, as the baseline on the same store and settings, the same two
workers for as long with no prune. The same is done with N/10 runs, in the same run: the
pruner's peak memory must not grow with N. Targets: no worker error; no worker commit waiting
a second or more; peak memory at N within 10 % (and 10 MB) of that at N/10.

``python -m bench.bench_prune --runs 100000 [--store sqlite|postgresql]`` runs it alone;
``python -m bench prune`` runs it with 20,000 runs (``--quick``: 5,000) on SQLite.
``--alone`` prunes with no workers running (and no baseline): the time and peak memory of a
prune of a million runs (``--runs 1000000 --alone``), with the pauses SQLite's prune takes for
workers all the same, as ``ratchet prune`` does.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, insert, select, text

from bench.harness import ROOT, Row, Section
from ratchet_runner.adapters.noop import NoopAdapter
from ratchet_runner.engine.runner import Runner
from ratchet_runner.spec.validate import load_spec
from ratchet_runner.store.store import Store
from ratchet_runner.store.tables import history, operations, runs

SPEC = ROOT / "bench" / "specs" / "three_effects.yaml"
PG_URL = os.environ.get("RATCHET_BENCH_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
DAY = 86400.0
CHUNK = 1000  # runs inserted per transaction by the fill

#: The pruner, in a process of its own: its report and its peak memory (KB) as JSON.
PRUNER = """
import json, resource, sys
from ratchet_runner.engine.pruning import prune
from ratchet_runner.store.store import Store
store = Store(sys.argv[1])
done = prune(store, float(sys.argv[2]), float(sys.argv[2]), batch=int(sys.argv[3]))
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({**done.to_json(), "peak_kb": peak}))
"""


def runner_on(store: Store) -> Runner:
    return Runner(store, lambda adapter: NoopAdapter())


def fill(store: Store, count: int, finished_at: float, prefix: str = "fill") -> None:
    """``count`` finished runs of the three-effect workflow, copied from one driven to its end
    (its runs row, history and operations), each with its own ID, business key and operation
    IDs, last changed at ``finished_at``."""
    spec = load_spec(str(SPEC))
    text_ = SPEC.read_text(encoding="utf-8")
    template, _ = runner_on(store).start(spec, text_, {"key": f"{prefix}-template"})
    assert runner_on(store).advance(template.id).state == "done"
    with store.engine.connect() as conn:
        run_row = dict(conn.execute(select(runs).where(runs.c.id == template.id)).one()._mapping)
        history_rows = [
            dict(r._mapping)
            for r in conn.execute(select(history).where(history.c.run_id == template.id))
        ]
        op_rows = [
            dict(r._mapping)
            for r in conn.execute(select(operations).where(operations.c.run_id == template.id))
        ]
    writer = store.engine.execution_options(ratchet_write=True)
    for start in range(0, count, CHUNK):
        new_runs, new_history, new_ops = [], [], []
        for i in range(start, min(count, start + CHUNK)):
            run_id = f"run_{prefix}{i:012d}"
            new_runs.append(
                {
                    **run_row,
                    "id": run_id,
                    "business_key": f"{prefix}-{i}",
                    "input": {"key": f"{prefix}-{i}"},
                    "created_at": finished_at - 60,
                    "updated_at": finished_at,
                }
            )
            new_history += [{**h, "run_id": run_id} for h in history_rows]
            new_ops += [
                {
                    **o,
                    "run_id": run_id,
                    "operation_id": hashlib.sha256(
                        f"{run_id}:{o['operation_id']}".encode()
                    ).hexdigest(),
                }
                for o in op_rows
            ]
        with writer.begin() as conn:
            conn.execute(insert(runs), new_runs)
            conn.execute(insert(history), new_history)
            conn.execute(insert(operations), new_ops)


@dataclass
class Workers:
    """Two worker threads driving new runs to their end, every commit timed."""

    url: str
    waits: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    runs: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def work(self, number: int) -> None:
        spec, text_ = load_spec(str(SPEC)), SPEC.read_text(encoding="utf-8")
        store = Store(self.url)
        commit = store.commit

        def timed(change: Any) -> Any:
            began = time.perf_counter()
            try:
                return commit(change)
            finally:
                self.waits.append(time.perf_counter() - began)

        store.commit = timed  # type: ignore[method-assign]
        runner = runner_on(store)
        try:
            while not self.stop.is_set():
                key = f"live-{number}-{uuid.uuid4().hex[:12]}"
                try:
                    run, _ = runner.start(spec, text_, {"key": key})
                    runner.advance(run.id)
                    self.runs += 1
                except Exception as exc:  # counted, never hidden
                    self.errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            store.close()

    def __enter__(self) -> Workers:
        self.threads = [threading.Thread(target=self.work, args=(n,)) for n in (1, 2)]
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=60)


def measure(url: str, count: int, batch: int = 100, *, alone: bool = False) -> dict[str, Any]:
    """Fill ``count`` finished runs into the store at ``url``, then prune them in a process of
    its own while two workers run here: the pruner's report, and the workers' figures
    (``alone``: no workers, no baseline)."""
    store = Store(url)
    now = time.time()
    began = time.perf_counter()
    fill(store, count, now - DAY, prefix=f"f{uuid.uuid4().hex[:6]}")
    filled = time.perf_counter() - began
    store.close()
    load_before = os.getloadavg()[0]
    if alone:
        report = _prune(url, now, batch)
        return _figures(count, filled, report) | {"load": (load_before, os.getloadavg()[0])}
    with Workers(url) as workers:
        time.sleep(0.5)  # the workers are under way before the prune starts
        report = _prune(url, now, batch)
        load = os.getloadavg()[0]
    waits = sorted(workers.waits)
    # the baseline, on the same store and settings: the same workers for as long, no prune
    with Workers(url) as alone:
        time.sleep(max(5.0, float(report["seconds"])))
        load_alone = os.getloadavg()[0]
    baseline = sorted(alone.waits)
    return _figures(count, filled, report) | {
        "worker_runs": workers.runs,
        "worker_commits": len(waits),
        "worker_errors": workers.errors[:5],
        "longest_wait_s": waits[-1] if waits else 0.0,
        "p99_wait_s": waits[int(len(waits) * 0.99)] if waits else 0.0,
        "load": (load_before, load),
        "baseline_commits": len(baseline),
        "baseline_longest_wait_s": baseline[-1] if baseline else 0.0,
        "baseline_p99_wait_s": baseline[int(len(baseline) * 0.99)] if baseline else 0.0,
        "baseline_load": load_alone,
    }


def _figures(count: int, filled: float, report: dict[str, Any]) -> dict[str, Any]:
    """What every measurement reports: the runs, the fill's time, the pruner's own figures."""
    return {
        "runs": count,
        "filled_s": round(filled, 1),
        "pruned": report["pruned"],
        "prune_s": report["seconds"],
        "rate": report["pruned"] / report["seconds"] if report["seconds"] else 0.0,
        "peak_mb": report["peak_kb"] / 1024,
    }


def _prune(url: str, now: float, batch: int) -> dict[str, Any]:
    """The pruner's report, from a process of its own, with its peak memory."""
    child = subprocess.run(
        [sys.executable, "-c", PRUNER, url, str(now - DAY / 2), str(batch)],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    if child.returncode != 0:
        raise RuntimeError(f"the pruner failed: {child.stderr[-800:]}")
    report: dict[str, Any] = json.loads(child.stdout)
    return report


def _fresh(store: str, folder: Path, name: str) -> str:
    if store == "sqlite":
        return f"sqlite:///{folder / f'{name}.db'}"
    schema = f"bench_prune_{uuid.uuid4().hex[:10]}"
    engine = create_engine(PG_URL)
    with engine.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    engine.dispose()
    return f"{PG_URL}?options=-csearch_path%3D{schema}"


def compare(
    count: int, store: str = "sqlite", *, alone: bool = False
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The measurement at ``count`` runs and at a tenth of it, in this run, on fresh stores."""
    with tempfile.TemporaryDirectory(prefix="ratchet-bench-prune-") as tmp:
        small = measure(_fresh(store, Path(tmp), "small"), max(1, count // 10), alone=alone)
        large = measure(_fresh(store, Path(tmp), "large"), count, alone=alone)
    return small, large


def rows(small: dict[str, Any], large: dict[str, Any], store: str) -> list[Row]:
    grows = large["peak_mb"] - small["peak_mb"]
    alone = "worker_commits" not in large
    found = [
        Row(
            f"{store}: runs pruned per second ({large['runs']:,} runs)",
            large["rate"],
            "runs/s",
            digits=0,
        ),
        Row(
            f"{store}: pruner's peak memory at {large['runs']:,} runs (vs {small['runs']:,})",
            large["peak_mb"],
            "MB",
            baseline=small["peak_mb"],
            target="within 10 % and 10 MB",
            ok=grows <= max(10.0, 0.1 * small["peak_mb"]),
            digits=1,
        ),
        Row(
            f"{store}: seconds to prune {large['runs']:,} runs"
            + (" (no workers; its pauses for them kept)" if alone else " (two workers running)"),
            large["prune_s"],
            "s",
            digits=0,
        ),
    ]
    if alone:
        return found
    return [
        *found,
        Row(
            f"{store}: a worker's longest commit during the prune "
            f"({large['worker_commits']:,} commits, load {large['load'][1]:.2f}; baseline: the "
            f"same workers as long with no prune, {large['baseline_commits']:,} commits, load "
            f"{large['baseline_load']:.2f})",
            large["longest_wait_s"],
            "s",
            baseline=large["baseline_longest_wait_s"],
            target="< 1 s",
            ok=large["longest_wait_s"] < 1.0,
        ),
        Row(
            f"{store}: a worker's 99th-percentile commit during the prune (baseline: no prune)",
            large["p99_wait_s"],
            "s",
            baseline=large["baseline_p99_wait_s"],
        ),
        Row(
            f"{store}: worker errors during the prune",
            len(large["worker_errors"]),
            "",
            target="0",
            ok=not large["worker_errors"],
            digits=0,
        ),
    ]


def run(quick: bool) -> Section:
    section = Section.of("Prune", __doc__, "at a tenth of the runs")
    small, large = compare(5_000 if quick else 20_000)
    section.rows = rows(small, large, "sqlite")
    return section


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_prune", description=__doc__)
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--store", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--alone", action="store_true", help="no workers, no baseline")
    args = parser.parse_args()
    small, large = compare(args.runs, args.store, alone=args.alone)
    for figures in (small, large):
        print(json.dumps(figures))
    failed = [r for r in rows(small, large, args.store) if r.ok is False]
    for r in rows(small, large, args.store):
        base = "" if r.baseline is None else f" (baseline {r.baseline:.3f} {r.unit})"
        verdict = "" if r.ok is None else f" ({'ok' if r.ok else 'MISSED'} {r.target})"
        print(f"{r.name}: {r.value:.3f} {r.unit}{base}{verdict}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
