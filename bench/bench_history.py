"""Bytes a finished run keeps on SQLite, table by table (target: at most 3 KB per 3-step run).

Workload: ``--runs`` runs (2,000 by default) of the three-effect workflow
(``bench/specs/three_effects.yaml``) driven to their end on a no-op adapter, in a fresh store.
The store is then checkpointed and vacuumed, so that the file holds exactly the pages its rows
and indexes need; a run's share is the file's size divided by the runs. Where the ``sqlite3``
module was built with the ``dbstat`` table, each table's and index's share is reported too, and
the tables a fresh store already holds (about 30 pages, whatever the number of runs) are counted
apart from the runs' share. The no-op adapter's receipt is the operation ID it was sent, so a
receipt is as long as an operation ID, as a provider's own identifier often is.

Then the same store is taken down to revision 0005 (a row per event, in ``events``) and timed
back up to the head: how fast revision 0006 converts an older store's history, in events per
second. With ``--postgres``, both again on PostgreSQL in fresh databases (a run's share there:
its tables with their indexes and TOAST, after ``VACUUM FULL``).
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.bench_steps import SPEC, drive_runs
from bench.harness import Row, Section
from ratchet_runner.adapters.noop import NoopAdapter
from ratchet_runner.session import Session
from ratchet_runner.spec.validate import load_spec
from ratchet_runner.store import schema
from ratchet_runner.store.store import Store

#: The most a finished 3-step run may keep (#28), in bytes.
TARGET_BYTES = 3 * 1024
RUNS = 2000


def fill(url: str | Path, runs: int) -> None:
    """A store at ``url`` (a path: an SQLite file) holding ``runs`` finished runs of the
    three-effect workflow."""
    with Session(url if isinstance(url, str) else f"sqlite:///{url}") as session:
        adapter = NoopAdapter()
        runner = session.runner(adapters=lambda _: adapter)
        drive_runs(runner, load_spec(SPEC), SPEC.read_text(encoding="utf-8"), runs)


def compacted_size(path: Path) -> int:
    """The store's file size once its write-ahead log is folded in and its free pages dropped."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return path.stat().st_size


def by_table(path: Path) -> dict[str, int] | None:
    """Bytes of each table and index (``dbstat``), or None where SQLite was built without it."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name").fetchall()
    except sqlite3.OperationalError:
        return None
    finally:
        conn.close()
    return {str(name): int(size) for name, size in rows}


def conversion_rate(
    url: str | Path, size: Callable[[], int] | None = None
) -> tuple[int, float, int | None]:
    """(events, events per second, ``size()`` at revision 0005): the store at ``url`` (a path:
    an SQLite file) taken down to revision 0005, where it holds the same runs as the history
    held before revision 0006, and timed back up to the head."""
    store = Store(url if isinstance(url, str) else f"sqlite:///{url}")
    try:
        schema.migrate_to(store, "0005")
        with store.engine.connect() as conn:
            events = int(conn.exec_driver_sql("SELECT count(*) FROM events").scalar_one())
        before = size() if size is not None else None
        start = time.perf_counter()
        schema.migrate_to(store, "head")
        return events, events / (time.perf_counter() - start), before
    finally:
        store.close()


def measure(
    runs: int, convert: bool = False
) -> tuple[float, float, dict[str, float] | None, tuple[int, float, float] | None]:
    """(bytes per run, an empty store's bytes, bytes per run of each table and index, and with
    ``convert`` the conversion's events, events per second, and bytes per run at revision
    0005)."""
    with tempfile.TemporaryDirectory() as tmp:
        empty, full = Path(tmp) / "empty.db", Path(tmp) / "full.db"
        fill(empty, 0)
        fill(full, runs)
        base = compacted_size(empty)
        size = compacted_size(full)
        tables, fresh = by_table(full), by_table(empty)
        converted = None
        old_tables: dict[str, int] | None = None
        if convert:

            def at_0005() -> int:
                nonlocal old_tables
                compacted = compacted_size(full)
                old_tables = by_table(full)
                return compacted

            events, rate, before = conversion_rate(full, at_0005)
            converted = (events, rate, ((before or 0) - base) / runs)
    per_table = None
    if tables is not None and fresh is not None:
        per_table = {
            name: (size_ - fresh.get(name, 0)) / runs
            for name, size_ in sorted(tables.items(), key=lambda kv: -kv[1])
            if size_ - fresh.get(name, 0) > 0
        }
    if per_table is not None and old_tables is not None:  # the history before revision 0006
        per_table["events (revision 0005)"] = old_tables.get("events", 0) / runs
        per_table["ix_events_run (revision 0005)"] = old_tables.get("ix_events_run", 0) / runs
    return (size - base) / runs, base, per_table, converted


#: The store's tables on PostgreSQL whose size a run adds to.
PG_TABLES = ("runs", "history", "events", "operations", "evidence_keys", "tallies")


def postgres_measure(runs: int) -> tuple[float, float, tuple[int, float]]:
    """On PostgreSQL, in a fresh database: (bytes per finished run of the store's tables with
    their indexes and TOAST, after ``VACUUM FULL``, over an empty store's; the same at revision
    0005; the conversion's events and events per second)."""
    from sqlalchemy import create_engine, text

    from bench.bench_pool import _fresh_pg_database

    def size(url: str) -> int:
        engine = create_engine(url, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as conn:
                total = 0
                present = {
                    str(name)
                    for (name,) in conn.execute(
                        text("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
                    )
                }
                for table in (t for t in PG_TABLES if t in present):
                    conn.execute(text(f"VACUUM FULL {table}"))
                    total += int(
                        conn.execute(text(f"SELECT pg_total_relation_size('{table}')")).scalar_one()
                    )
                return total
        finally:
            engine.dispose()

    empty = _fresh_pg_database("ratchet_bench_history_empty")
    fill(empty, 0)
    full = _fresh_pg_database("ratchet_bench_history")
    fill(full, runs)
    empty_size = size(empty)
    per_run = (size(full) - empty_size) / runs
    events, rate, before = conversion_rate(full, lambda: size(full))
    return per_run, ((before or 0) - empty_size) / runs, (events, rate)


def run(quick: bool = False, runs: int | None = None, postgres: bool = False) -> Section:
    runs = runs or (500 if quick else RUNS)
    section = Section.of("History kept per finished run", __doc__, "target")
    per_run, base, per_table, converted = measure(runs, convert=True)
    section.rows.append(
        Row(
            f"SQLite: bytes per finished 3-step run ({runs:,} runs, vacuumed; an empty store "
            f"{base / 1024:.0f} KB apart)",
            per_run,
            "B",
            baseline=TARGET_BYTES,
            target=f"<= {TARGET_BYTES:,} B",
            ok=per_run <= TARGET_BYTES,
            digits=0,
        )
    )
    if converted is not None:
        section.rows.append(
            Row(
                "SQLite: the same runs at revision 0005 (a row per event), vacuumed",
                converted[2],
                "B",
                digits=0,
            )
        )
    for name, size in (per_table or {}).items():
        if size >= 1:
            section.rows.append(Row(f"  of which `{name}`", size, "B", digits=0))
    if converted is not None:
        events, rate, _ = converted
        section.rows.append(
            Row(
                f"revision 0006: an older store's {events:,} events converted",
                rate,
                "events/s",
                digits=0,
            )
        )
    if postgres:
        pg_per_run, pg_before, (pg_events, pg_rate) = postgres_measure(runs)
        section.rows.append(
            Row(
                f"PostgreSQL: bytes per finished 3-step run ({runs:,} runs, tables with their "
                "indexes, after VACUUM FULL), against the same runs at revision 0005",
                pg_per_run,
                "B",
                baseline=pg_before,
                digits=0,
            )
        )
        section.rows.append(
            Row(
                f"PostgreSQL: revision 0006, an older store's {pg_events:,} events converted",
                pg_rate,
                "events/s",
                digits=0,
            )
        )
    if per_table is None:
        section.what += " (this Python's sqlite3 has no dbstat: no table-by-table figures)"
    return section


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.bench_history", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--runs", type=int, default=RUNS, metavar="N", help="finished runs")
    parser.add_argument(
        "--postgres",
        action="store_true",
        help="PostgreSQL too (the server of RATCHET_BENCH_PG, fresh databases in it)",
    )
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    print(run(runs=args.runs, postgres=args.postgres).markdown())
    return 0


if __name__ == "__main__":
    sys.exit(main())
