"""Bytes a finished run keeps on SQLite, table by table (target: at most 3 KB per 3-step run).

Workload: ``--runs`` runs (2,000 by default) of the three-effect workflow
(``bench/specs/three_effects.yaml``) driven to their end on a no-op adapter, in a fresh store.
The store is then checkpointed and vacuumed, so that the file holds exactly the pages its rows
and indexes need; a run's share is the file's size divided by the runs. Where the ``sqlite3``
module was built with the ``dbstat`` table, each table's and index's share is reported too, and
the tables a fresh store already holds (about 30 pages, whatever the number of runs) are counted
apart from the runs' share. The no-op adapter's receipt is the operation ID it was sent, so a
receipt is as long as an operation ID, as a provider's own identifier often is.

Then the same store is taken down to revision 0006 (every operation named in full, every
fingerprint stored: the same runs as revision 0006 wrote them) and measured again, then to
revision 0005 (a row per event, in ``events``) and measured again, and timed back up to the
head: how fast revisions 0006 and 0007 convert an older store's history, in events per
second. With ``--postgres``, both again on PostgreSQL in fresh databases (a run's share there:
its tables with their indexes and TOAST, after ``VACUUM FULL``).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
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
) -> tuple[int, float, int | None, int | None]:
    """(events, events per second, ``size()`` at revision 0006, ``size()`` at revision 0005):
    the store at ``url`` (a path: an SQLite file) taken down to revision 0006, where it holds
    the same runs as revision 0006 wrote them (every operation named in full, every fingerprint
    stored), then to revision 0005, where it holds them as the history held them before
    revision 0006 (a row per event), and timed back up to the head."""
    store = Store(url if isinstance(url, str) else f"sqlite:///{url}")
    try:
        schema.migrate_to(store, "0006")
        at_0006 = size() if size is not None else None
        schema.migrate_to(store, "0005")
        with store.engine.connect() as conn:
            events = int(conn.exec_driver_sql("SELECT count(*) FROM events").scalar_one())
        at_0005 = size() if size is not None else None
        start = time.perf_counter()
        schema.migrate_to(store, "head")
        return events, events / (time.perf_counter() - start), at_0006, at_0005
    finally:
        store.close()


@dataclass
class Kept:
    """What a store of finished runs keeps, per run, at this revision, at revision 0006 and at
    revision 0005 (the same runs, a row per event), and how fast they were converted up."""

    per_run: float  # bytes per run
    empty: float  # an empty store's bytes
    before: float  # bytes per run at revision 0006 (the same runs as it wrote them)
    oldest: float  # bytes per run at revision 0005 (a row per event)
    events: int  # events converted
    rate: float  # events converted per second
    per_table: dict[str, float] | None = None  # bytes per run of each table and index (SQLite)


def measure(runs: int) -> Kept:
    """SQLite: ``runs`` finished runs in a fresh file, vacuumed, against an empty store."""
    with tempfile.TemporaryDirectory() as tmp:
        empty, full = Path(tmp) / "empty.db", Path(tmp) / "full.db"
        fill(empty, 0)
        fill(full, runs)
        base = compacted_size(empty)
        size = compacted_size(full)
        tables, fresh = by_table(full), by_table(empty)
        old_tables: list[dict[str, int] | None] = []

        def measured() -> int:
            compacted = compacted_size(full)
            old_tables.append(by_table(full))
            return compacted

        events, rate, before, oldest = conversion_rate(full, measured)
    per_table = None
    if tables is not None and fresh is not None:
        per_table = {
            name: (size_ - fresh.get(name, 0)) / runs
            for name, size_ in sorted(tables.items(), key=lambda kv: -kv[1])
            if size_ - fresh.get(name, 0) > 0
        }
    if per_table is not None and len(old_tables) == 2 and None not in old_tables:
        at_0006, at_0005 = old_tables[0] or {}, old_tables[1] or {}
        for name in ("history", "operations", "runs"):
            per_table[f"{name} (revision 0006)"] = at_0006.get(name, 0) / runs
        per_table["events (revision 0005)"] = at_0005.get("events", 0) / runs
        per_table["ix_events_run (revision 0005)"] = at_0005.get("ix_events_run", 0) / runs
    per_run = (size - base) / runs
    return Kept(
        per_run, base, ((before or 0) - base) / runs, ((oldest or 0) - base) / runs, events,
        rate, per_table,
    )  # fmt: skip


#: The store's tables on PostgreSQL whose size a run adds to.
PG_TABLES = ("runs", "history", "events", "operations", "evidence_keys", "tallies")


def postgres_measure(runs: int) -> Kept:
    """PostgreSQL: ``runs`` finished runs in a fresh database, against an empty one: the
    store's tables with their indexes and TOAST, after ``VACUUM FULL``."""
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
    events, rate, before, oldest = conversion_rate(full, lambda: size(full))
    return Kept(
        per_run, empty_size, ((before or 0) - empty_size) / runs,
        ((oldest or 0) - empty_size) / runs, events, rate,
    )  # fmt: skip


def _rows(section: Section, store: str, runs: int, kept: Kept, how: str) -> None:
    """A store's rows: bytes per run (against the same runs at revision 0006, and at 0005),
    each table's share where known, and the conversion's rate."""
    target = f"<= {TARGET_BYTES:,} B" if store == "SQLite" else ""
    section.rows.append(
        Row(
            f"{store}: bytes per finished 3-step run ({runs:,} runs, {how})",
            kept.per_run,
            "B",
            baseline=kept.before,
            target=target,
            ok=kept.per_run <= TARGET_BYTES if target else None,
            digits=0,
        )
    )
    section.rows.append(
        Row("  the same runs at revision 0005 (a row per event)", kept.oldest, "B", digits=0)
    )
    for name, size in (kept.per_table or {}).items():
        if size >= 1:
            section.rows.append(Row(f"  of which `{name}`", size, "B", digits=0))
    section.rows.append(
        Row(
            f"{store}: revisions 0006 and 0007, an older store's {kept.events:,} events converted",
            kept.rate,
            "events/s",
            digits=0,
        )
    )


def run(quick: bool = False, runs: int | None = None, postgres: bool = False) -> Section:
    runs = runs or (500 if quick else RUNS)
    section = Section.of("History kept per finished run", __doc__, "the same runs at 0006")
    load = os.getloadavg()[0]
    kept = measure(runs)
    how = f"vacuumed; an empty store {kept.empty / 1024:.0f} KB apart"
    _rows(section, "SQLite", runs, kept, how)
    if postgres:
        how = "the tables with their indexes, after VACUUM FULL"
        _rows(section, "PostgreSQL", runs, postgres_measure(runs), how)
    section.what += f" Load average {load:.1f} to {os.getloadavg()[0]:.1f}."
    if kept.per_table is None:
        section.what += " (This Python's sqlite3 has no dbstat: no table-by-table figures.)"
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
