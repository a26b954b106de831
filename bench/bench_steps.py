"""Durable effect steps per second, against the commit ceiling of the raw driver.

Workload: runs of a three-effect workflow (``bench/specs/three_effects.yaml``) on an in-process
no-op adapter. A run takes 5 commits for its 3 steps: its creation; the first effect's pending
record with its attempt; then each receipt with the move, which carries the next effect's
pending record when there is one. The ceiling for steps is a commit rate divided by 5/3: a loop
of single-row compare-and-set commits (``UPDATE … WHERE id = 1 AND version = :v``), in the same
process, on the same database and settings, measured two ways: through the raw driver (stdlib
``sqlite3``: ``BEGIN IMMEDIATE``, the update, ``COMMIT``, in WAL with ``synchronous=FULL``, as
the store runs; raw psycopg: the update in autocommit, one round trip and one WAL flush, as the
store commits), which is the ceiling; and through SQLAlchemy and the store's engine, reported
beside it. The three alternate for 5 rounds; a ratio is the median of the per-round ratios.
Targets (#28): at least 0.5 of the raw ceiling on SQLite, 0.6 on PostgreSQL.
"""

from __future__ import annotations

import os
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import Column, Integer, MetaData, Table, insert, make_url, text, update

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
#: The least share of the raw driver's ceiling, per store.
TARGETS = {"sqlite": 0.5, "postgresql": 0.6}
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


def raw_sqlite_rate(path: str, seconds: float) -> float:
    """Single-row compare-and-set commits per second through stdlib ``sqlite3``, with the
    store's settings (WAL, ``synchronous=FULL``, ``BEGIN IMMEDIATE``)."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=60)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("DROP TABLE IF EXISTS bench_raw")
        conn.execute("CREATE TABLE bench_raw (id INTEGER PRIMARY KEY, version INTEGER NOT NULL)")
        conn.execute("INSERT INTO bench_raw VALUES (1, 0)")
        return _loop(seconds, lambda v: _sqlite_commit(conn, v))
    finally:
        conn.execute("DROP TABLE IF EXISTS bench_raw")
        conn.close()


def _sqlite_commit(conn: sqlite3.Connection, version: int) -> None:
    conn.execute("BEGIN IMMEDIATE")
    done = conn.execute(
        "UPDATE bench_raw SET version = ? WHERE id = 1 AND version = ?", (version + 1, version)
    )
    assert done.rowcount == 1
    conn.execute("COMMIT")


def raw_psycopg_rate(url: str, seconds: float) -> float:
    """Single-row compare-and-set commits per second through raw psycopg, each one statement
    in autocommit (one round trip, one WAL flush: synchronous_commit as the server has it)."""
    import psycopg

    parsed = make_url(url)
    conninfo = parsed.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS bench_raw")
        conn.execute("CREATE TABLE bench_raw (id INTEGER PRIMARY KEY, version INTEGER NOT NULL)")
        conn.execute("INSERT INTO bench_raw VALUES (1, 0)")
        statement = "UPDATE bench_raw SET version = %s WHERE id = 1 AND version = %s"

        def commit(version: int) -> None:
            assert conn.execute(statement, (version + 1, version), prepare=True).rowcount == 1

        try:
            return _loop(seconds, commit)
        finally:
            conn.execute("DROP TABLE IF EXISTS bench_raw")


def _loop(seconds: float, commit: Callable[[int], None]) -> float:
    """Commits per second of ``commit(version)`` for ``seconds``."""
    version = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        commit(version)
        version += 1
    return version / (time.perf_counter() - start)


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
    section: Section, label: str, url: str, runs: int, seconds: float, rounds: int
) -> None:
    """Alternate the raw ceiling, SQLAlchemy's and the workload ``rounds`` times; report the
    median of each and of the per-round ratios, so load that comes and goes on the machine hits
    all alike."""
    dialect = make_url(url).get_backend_name()
    raw: list[float] = []
    sqlalchemy_: list[float] = []
    steps: list[float] = []
    raw_ratios: list[float] = []
    sqlalchemy_ratios: list[float] = []
    loads: list[float] = []
    with Session(url) as session:
        for _ in range(rounds):
            if dialect == "sqlite":
                ceiling = raw_sqlite_rate(str(make_url(url).database), seconds)
            else:
                ceiling = raw_psycopg_rate(url, seconds)
            through = commit_rate(session.store, seconds)
            rate = step_rate(session, runs)
            raw.append(ceiling / COMMITS_PER_STEP)
            sqlalchemy_.append(through / COMMITS_PER_STEP)
            steps.append(rate)
            raw_ratios.append(rate / raw[-1])
            sqlalchemy_ratios.append(rate / sqlalchemy_[-1])
            loads.append(os.getloadavg()[0])
    target = TARGETS[dialect]
    ratio = statistics.median(raw_ratios)
    load = f"load {min(loads):.1f} to {max(loads):.1f}"
    section.rows.append(
        Row(
            f"{label}: durable effect steps/s vs the raw driver's ceiling (commits/s ÷ 5/3; "
            f"medians of {rounds} interleaved rounds; {load})",
            statistics.median(steps),
            "steps/s",
            statistics.median(raw),
            f">= {target:.0%} of the raw ceiling",
            ratio >= target,
            measured_ratio=ratio,
            digits=0,
        )
    )
    section.rows.append(
        Row(
            f"{label}: the same steps/s vs the ceiling through SQLAlchemy (beside it)",
            statistics.median(steps),
            "steps/s",
            statistics.median(sqlalchemy_),
            measured_ratio=statistics.median(sqlalchemy_ratios),
            digits=0,
        )
    )
    section.rows.append(
        Row(
            f"{label}: SQLAlchemy's commit rate vs the raw driver's (same loop)",
            statistics.median(sqlalchemy_),
            "steps/s",
            statistics.median(raw),
            measured_ratio=statistics.median(
                [a / b for a, b in zip(sqlalchemy_, raw, strict=True)]
            ),
            digits=0,
        )
    )


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
            rounds,
        )
    try:
        with Session(PG_URL) as probe, probe.store.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except Exception as exc:  # report it; the SQLite figures still stand
        section.rows.append(Row(f"PostgreSQL: not measured ({str(exc)[:60]})", float("nan"), ""))
        return section
    _measure(section, "PostgreSQL (synchronous commit)", PG_URL, runs, seconds, rounds)
    return section
