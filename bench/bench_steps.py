"""Durable effect steps per second, against the raw commit ceiling of the same database.

Workload: runs of a three-effect workflow (``bench/specs/three_effects.yaml``) on an in-process
no-op adapter. A run takes 5 commits for its 3 steps: its creation; the first effect's pending
record with its attempt; then each receipt with the move, which carries the next effect's
pending record when there is one. The ceiling for steps is the raw commit rate divided by 5/3,
measured in the same run through the same driver: a single-row ``UPDATE … WHERE version = :v``
and ``COMMIT`` loop. Target: at least 50 % of that ceiling on SQLite (WAL, synchronous FULL).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

from sqlalchemy import Column, Integer, MetaData, Table, insert, text, update

from bench.harness import ROOT, Row, Section
from ratchet_runner.adapters.noop import NoopAdapter
from ratchet_runner.engine.runner import Runner
from ratchet_runner.session import Session
from ratchet_runner.spec.model import Spec
from ratchet_runner.spec.validate import load_spec
from ratchet_runner.store.store import Store

SPEC = ROOT / "bench" / "specs" / "three_effects.yaml"
COMMITS_PER_STEP = (
    5 / 3
)  # creation, first write-ahead, three receipts (each with the next write-ahead)
TARGET_RATIO = 0.5
PG_URL = os.environ.get("RATCHET_BENCH_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def commit_rate(store: Store, seconds: float) -> float:
    """Raw single-row compare-and-set commits per second through the store's own engine."""
    meta = MetaData()
    table = Table(
        "bench_ceiling",
        meta,
        Column("id", Integer, primary_key=True),
        Column("version", Integer, nullable=False),
    )
    writer = store.engine.execution_options(ratchet_write=True)
    with writer.begin() as conn:
        meta.drop_all(conn)
        meta.create_all(conn)
        conn.execute(insert(table).values(id=1, version=0))
    version, done = 0, 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        with writer.begin() as conn:
            result = conn.execute(
                update(table)
                .where(table.c.id == 1, table.c.version == version)
                .values(version=version + 1)
            )
            assert result.rowcount == 1
        version += 1
        done += 1
    elapsed = time.perf_counter() - start
    with writer.begin() as conn:
        meta.drop_all(conn)
    return done / elapsed


def drive_runs(runner: Runner, spec: Spec, spec_text: str, runs: int) -> float:
    """Durable effect steps per second: ``runs`` runs of the three-effect workflow started and
    driven to their end by ``runner``."""
    prefix = f"b{time.time_ns()}"
    start = time.perf_counter()
    for i in range(runs):
        run, _ = runner.start(spec, spec_text, {"key": f"{prefix}-{i}"})
        final = runner.advance(run)
        assert final.state == "done", final
    return 3 * runs / (time.perf_counter() - start)


def step_rate(session: Session, runs: int) -> float:
    adapter = NoopAdapter()
    runner = session.runner(adapters=lambda _: adapter)
    rate = drive_runs(runner, load_spec(SPEC), SPEC.read_text(encoding="utf-8"), runs)
    assert adapter.calls == 3 * runs
    return rate


def _measure(
    section: Section, label: str, url: str, runs: int, seconds: float, target: bool, rounds: int
) -> None:
    """Alternate ceiling and workload ``rounds`` times; report the median of each and of the
    per-round ratios, so load that comes and goes on the machine hits both alike."""
    ceilings, steps, ratios = [], [], []
    with Session(url) as session:
        for _ in range(rounds):
            ceiling = commit_rate(session.store, seconds) / COMMITS_PER_STEP
            rate = step_rate(session, runs)
            ceilings.append(ceiling)
            steps.append(rate)
            ratios.append(rate / ceiling)
    ratio = statistics.median(ratios)
    row = Row(
        f"{label}: durable effect steps/s (ceiling = commits/s ÷ 5/3; medians of {rounds} "
        "rounds; ratio = median of the per-round ratios)",
        statistics.median(steps),
        "steps/s",
        statistics.median(ceilings),
        f">= {TARGET_RATIO:.0%} of ceiling" if target else "",
        ratio >= TARGET_RATIO if target else None,
        measured_ratio=ratio,
    )
    section.rows.append(row)


def run(quick: bool = False) -> Section:
    section = Section.of("Durable effect steps per second", __doc__, "ceiling")
    runs = 100 if quick else 300
    seconds = 1.0 if quick else 3.0
    rounds = 3 if quick else 5
    with tempfile.TemporaryDirectory() as tmp:
        _measure(
            section,
            "SQLite (WAL, synchronous FULL)",
            f"sqlite:///{Path(tmp) / 'b.db'}",
            runs,
            seconds,
            target=True,
            rounds=rounds,
        )
    try:
        with Session(PG_URL) as probe, probe.store.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except Exception as exc:  # report it; the SQLite figures still stand
        section.rows.append(Row(f"PostgreSQL: not measured ({str(exc)[:60]})", float("nan"), ""))
        return section
    _measure(section, "PostgreSQL", PG_URL, runs, seconds, target=False, rounds=rounds)
    return section
