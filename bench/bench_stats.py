"""Metrics, status and stuck runs against the size of the history: a thousand finished runs and a
million.

Two stores of each kind are filled by :func:`fill`, in the database: one run of the three-effect
workflow (``bench/specs/three_effects.yaml``) is driven to its end through the runner, then its
rows (the run, its 5 history rows, its 3 operations) are copied N times by ``INSERT … SELECT``
over a generated series, each copy with its own ID, business key and operation IDs; the ended runs'
tallies are counted (:func:`ratchet_runner.store.tallies.recount`, what revision 0005 does) and
the planner's statistics gathered. Each store then gets the same live runs: 300 started and not
moved, 20 of them leased to a worker.

Measured on each store, alternating between the small and the large one for every round (a
value is the median of the rounds, the ratio large ÷ small the median of the per-round ratios):

- ``GET /metrics``'s work: the service's store collector read and rendered in the exposition
  format (``generate_latest``), as a scrape does, without the HTTP exchange;
- ``ratchet status``'s: the counts by status and the leases;
- ``ratchet runs --stuck``'s: the expired leases and the runs nobody moved.

Targets (issue #28): each at most 100 ms with 1,000,000 finished runs and a few hundred live
ones, and growing less than 2 times from 1,000 to 1,000,000. The load average is printed beside.

``python -m bench.bench_stats [--runs 1000000] [--store sqlite|postgresql]`` runs it alone;
``python -m bench stats`` runs it with 100,000 runs (``--quick``: 20,000) on SQLite.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from sqlalchemy import create_engine, text

from bench.harness import ROOT, Row, Section
from ratchet_runner.adapters.noop import NoopAdapter
from ratchet_runner.engine.runner import Runner
from ratchet_runner.serve.metrics import StoreCollector
from ratchet_runner.spec.validate import load_spec
from ratchet_runner.store import tallies
from ratchet_runner.store.store import Store

SPEC = ROOT / "bench" / "specs" / "three_effects.yaml"
PG_URL = os.environ.get("RATCHET_BENCH_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
CHUNK = 100_000  # runs copied per statement
LIVE, LEASED = 300, 20
SMALL = 1000
LIMIT_MS, GROWTH = 100.0, 2.0


def runner_on(store: Store) -> Runner:
    return Runner(store, lambda adapter: NoopAdapter())


def _series(dialect: str, start: int, stop: int) -> str:
    """A table ``g(n)`` of the integers from ``start`` to ``stop - 1``, and the SQL of a run's
    number padded to 12 digits."""
    if dialect == "sqlite":
        return (
            f"WITH RECURSIVE g(n) AS (SELECT {start} UNION ALL SELECT n + 1 FROM g "
            f"WHERE n < {stop - 1}) "
        )
    return f"WITH g(n) AS (SELECT generate_series({start}, {stop - 1})) "


def _padded(dialect: str) -> str:
    return "printf('%012d', g.n)" if dialect == "sqlite" else "lpad(g.n::text, 12, '0')"


def fill(store: Store, count: int, progress: Callable[[int], None] | None = None) -> None:
    """``count`` finished runs copied from one driven to its end, in the database; then the
    tallies counted and the planner's statistics gathered."""
    spec, text_ = load_spec(str(SPEC)), SPEC.read_text(encoding="utf-8")
    template, _ = runner_on(store).start(spec, text_, {"key": "fill-template"})
    assert runner_on(store).advance(template.id).state == "done"
    dialect = store.dialect.name
    run_columns = [
        "workflow",
        "spec_digest",
        "state",
        "status",
        "version",
        "input",
        "context",
        "created_at",
        "updated_at",
    ]
    writer = store.engine.execution_options(ratchet_write=True)
    padded = _padded(dialect)
    for start in range(0, count, CHUNK):
        series = _series(dialect, start, min(count, start + CHUNK))
        with writer.begin() as conn:
            conn.execute(
                text(
                    series + f"INSERT INTO runs (id, business_key, {', '.join(run_columns)}) "
                    f"SELECT 'run_fill' || {padded}, 'fill-' || {padded}, "
                    f"{', '.join('t.' + c for c in run_columns)} "
                    "FROM g CROSS JOIN runs t WHERE t.id = :template"
                ),
                {"template": template.id},
            )
            conn.execute(
                text(
                    series + 'INSERT INTO history (run_id, version, "at", events) '
                    f"SELECT 'run_fill' || {padded}, h.version, h.at, h.events "
                    "FROM g CROSS JOIN history h WHERE h.run_id = :template "
                    "ORDER BY g.n, h.version"
                ),
                {"template": template.id},
            )
            columns = (
                "effect, role, args, fingerprint, status, attempts, receipt, last_error, "
                "compensates, created_at, updated_at"
            )
            conn.execute(
                text(
                    series + f"INSERT INTO operations (operation_id, run_id, {columns}) "
                    f"SELECT {padded} || substr(o.operation_id, 1, 52), "
                    f"'run_fill' || {padded}, "
                    + ", ".join(f"o.{c.strip()}" for c in columns.split(","))
                    + " FROM g CROSS JOIN operations o WHERE o.run_id = :template"
                ),
                {"template": template.id},
            )
        if progress is not None:
            progress(min(count, start + CHUNK))
    with writer.begin() as conn:
        tallies.recount(conn)
    with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("ANALYZE")


def add_live(store: Store) -> None:
    """300 runs started and not moved, 20 of them leased to a worker."""
    spec, text_ = load_spec(str(SPEC)), SPEC.read_text(encoding="utf-8")
    runner = runner_on(store)
    for i in range(LIVE):
        runner.start(spec, text_, {"key": f"live-{i}"})
    store.claim("bench-worker", 3600.0, time.time(), limit=LEASED)


def metrics_text(store: Store) -> Callable[[], bytes]:
    registry = CollectorRegistry()
    runner = runner_on(store)
    registry.register(StoreCollector(lambda: runner))
    return lambda: generate_latest(registry)


def measures(store: Store) -> dict[str, Callable[[], object]]:
    scrape = metrics_text(store)
    return {
        "GET /metrics (collect and render)": scrape,
        "ratchet status (counts by status, leases)": lambda: (
            store.status_counts(),
            store.leases(),
        ),
        "ratchet runs --stuck": lambda: store.stuck(time.time(), 300.0),
    }


def timed(fn: Callable[[], object]) -> float:
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began


def _store_url(kind: str, folder: Path, name: str) -> str:
    if kind == "sqlite":
        return f"sqlite:///{folder / f'{name}.db'}"
    database = f"ratchet_bench_stats_{name}_{uuid.uuid4().hex[:8]}"
    admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{database}"')
    admin.dispose()
    return PG_URL.rsplit("/", 1)[0] + f"/{database}"


def _drop(kind: str, url: str) -> None:
    if kind == "sqlite":
        return
    database = url.rsplit("/", 1)[1]
    admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    admin.dispose()


def measure(kind: str, large: int, rounds: int) -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="ratchet-bench-stats-") as folder:
        urls = {n: _store_url(kind, Path(folder), f"r{n}") for n in (SMALL, large)}
        stores: dict[int, Store] = {}
        try:
            for n, url in urls.items():
                began = time.perf_counter()
                store = stores[n] = Store(url)
                fill(store, n, lambda done: print(f"  {kind}: {done:,} runs", flush=True))
                add_live(store)
                print(f"{kind}: {n:,} finished runs in {time.perf_counter() - began:.0f} s")
            ways = {n: measures(store) for n, store in stores.items()}
            for n in stores:  # warm each once
                for fn in ways[n].values():
                    fn()
            times: dict[tuple[str, int], list[float]] = {}
            loads = []
            for i in range(rounds):
                loads.append(os.getloadavg()[0])
                order = [SMALL, large] if i % 2 == 0 else [large, SMALL]
                for name in ways[SMALL]:
                    for n in order:
                        times.setdefault((name, n), []).append(timed(ways[n][name]))
            load = f"load {min(loads):.1f} to {max(loads):.1f}"
            rows = []
            for name in ways[SMALL]:
                small, big = times[(name, SMALL)], times[(name, large)]
                ratio = statistics.median(b / s for b, s in zip(big, small, strict=True))
                ms = statistics.median(big) * 1000
                rows.append(
                    Row(
                        f"{kind}: {name}, {large:,} finished runs ({load})",
                        ms,
                        "ms",
                        statistics.median(small) * 1000,
                        f"≤ {LIMIT_MS:.0f} ms, < {GROWTH:.0f}x",
                        ms <= LIMIT_MS and ratio < GROWTH,
                        measured_ratio=ratio,
                        digits=1,
                    )
                )
            return rows
        finally:
            for store in stores.values():
                store.close()
            for url in urls.values():
                _drop(kind, url)


def run(quick: bool = False) -> Section:
    large, kinds = (20_000 if quick else 100_000), ("sqlite",)
    rounds = 7 if quick else 21
    section = Section.of(
        "Metrics, status and stuck runs against the history (`bench/bench_stats.py`)",
        __doc__,
        f"{SMALL:,} finished runs",
    )
    for kind in kinds:
        section.rows.extend(measure(kind, large, rounds))
    return section


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_stats", description=__doc__)
    parser.add_argument(
        "--runs", type=int, default=100_000, help="finished runs in the large store"
    )
    parser.add_argument("--store", choices=["sqlite", "postgresql", "both"], default="sqlite")
    parser.add_argument("--rounds", type=int, default=21)
    args = parser.parse_args()
    kinds = ("sqlite", "postgresql") if args.store == "both" else (args.store,)
    section = Section.of(
        "Metrics, status and stuck runs against the history (`bench/bench_stats.py`)",
        __doc__,
        f"{SMALL:,} finished runs",
    )
    for kind in kinds:
        section.rows.extend(measure(kind, args.runs, args.rounds))
    print(section.markdown())


if __name__ == "__main__":
    main()
