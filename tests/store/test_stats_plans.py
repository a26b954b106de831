"""The queries behind ``GET /metrics``, ``ratchet status`` and ``ratchet runs --stuck`` read no
finished run: with thousands of finished runs and their operations in the store and a few live
ones, every statement they send is planned on an index of the live rows (or of the leases, the
unknown outcomes, the failed undos) or on the ended runs' tallies, never as a full scan of
``runs`` or ``operations``. ``bench/bench_stats.py`` measures the time at a million runs; this
pins the plans, which is what keeps that time flat."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from sqlalchemy import event, text

from ratchet_runner.store import tallies
from ratchet_runner.store.store import Store
from tests.store.test_store import DIGEST, T0

#: Indexes that hold only the rows these queries want: walking one whole reads no history.
PARTIAL = {"ix_runs_lease", "ix_operations_unknown", "ix_operations_failed_undo"}
ENDED, LIVE = 3000, 12


def fill(store: Store) -> None:
    """3,000 finished runs of three operations each, and 12 live ones: waiting, running (three
    leased, one of those expired, and some nobody moved), one with an unknown outcome, one with
    a compensation refused; the tallies counted; the planner's statistics gathered."""
    store.save_spec(DIGEST, "refund", 1, "1", "text\n", T0)
    with store.engine.begin() as conn:
        conn.exec_driver_sql(
            f"WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < {ENDED}) "
            "INSERT INTO runs (id, workflow, spec_digest, business_key, state, status, version, "
            "input, context, created_at, updated_at) "
            f"SELECT 'run_' || n, 'refund', '{DIGEST}', 'T-' || n, 'refunded', 'done', 5, "
            "'{}', '{}', n, n FROM g"
        )
        # the statistics first gathered with only finished runs, as when a store's history is
        # loaded before its live runs (the plans are checked again with the live ones counted)
        conn.exec_driver_sql(analyze(store))
        for i in range(3):
            conn.exec_driver_sql(
                "INSERT INTO operations (operation_id, run_id, effect, role, args, fingerprint, "
                "status, attempts, created_at, updated_at) "
                f"SELECT 'op_{i}_' || id, id, 'e{i}', 'forward', '{{}}', 'f', 'done', 1, 1, 1 "
                "FROM runs"
            )
        for n in range(LIVE):
            status = ("waiting", "running", "running", "needs_person")[n % 4]
            leased = n < 3
            conn.execute(
                text(
                    "INSERT INTO runs (id, workflow, spec_digest, business_key, state, status, "
                    "version, input, context, created_at, updated_at, lease_owner, lease_token, "
                    "lease_expires_at) VALUES (:id, 'refund', :digest, :key, 'proposed', "
                    ":status, 1, '{}', '{}', 10, 10, :owner, :token, :expires)"
                ),
                {
                    "id": f"live_{n}",
                    "digest": DIGEST,
                    "key": f"L-{n}",
                    "status": "running" if leased else status,
                    "owner": "w" if leased else None,
                    "token": f"t{n}" if leased else None,
                    "expires": (1.0 if n == 0 else 1e12) if leased else None,
                },
            )
        for run_id, role, status in (
            ("live_3", "forward", "unknown"),
            ("live_7", "compensation", "refused"),
        ):
            conn.execute(
                text(
                    "INSERT INTO operations (operation_id, run_id, effect, role, args, "
                    "fingerprint, status, attempts, created_at, updated_at) VALUES "
                    "(:id, :run, 'e0', :role, '{}', 'f', :status, 2, 1, 1)"
                ),
                {"id": f"op_{run_id}", "run": run_id, "role": role, "status": status},
            )
        tallies.recount(conn)


def analyze(store: Store) -> str:
    """Gather the planner's statistics of the tables read (on PostgreSQL only those: the test
    database holds other tests' schemas, whose tables a bare ``ANALYZE`` would lock too)."""
    if store.dialect.name == "sqlite":
        return "ANALYZE"
    return "ANALYZE runs, operations, tallies, history, duplicates"


def statements(store: Store) -> list[tuple[str, Any]]:
    """Every statement (and its parameters) the metrics, ``status`` and ``runs --stuck`` send."""
    sent: list[tuple[str, Any]] = []

    def keep(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        sent.append((statement, parameters))

    event.listen(store.engine, "before_cursor_execute", keep)
    try:
        stats = store.stats(T0, stuck_after=300.0)
        counts = store.status_counts()
        stuck = store.stuck(T0, 300.0)
        leases = store.leases()
    finally:
        event.remove(store.engine, "before_cursor_execute", keep)
    # what they say, so that the plans below are those of queries that work
    assert counts == {"done": ENDED, "waiting": 2, "running": 7, "needs_person": 3}
    assert stats.runs[("refund", "done")] == ENDED
    assert stats.attempts[("refund", "e0", "forward")] == (ENDED + 1, ENDED + 2)
    assert stats.unknown == {("refund", "e0"): 1}
    assert stats.failed_undos == {("refund", "e0"): 1}
    assert sorted(why for _, why in stuck).count("lease expired") == 1
    assert len(leases) == 3
    return [(sql, params) for sql, params in sent if sql.lstrip().upper().startswith("SELECT")]


def sqlite_problems(plan: list[str]) -> Iterator[str]:
    """Full scans of runs or operations in an SQLite plan (``SCAN`` of the table, or of an
    index of every row)."""
    for line in plan:
        words = line.split()
        if "SCAN" not in words:
            continue
        table = words[words.index("SCAN") + 1]
        if table not in ("runs", "operations"):
            continue
        if not any(index in words for index in PARTIAL):
            yield line


def postgres_problems(node: dict[str, Any]) -> Iterator[str]:
    """Full scans of runs or operations in a PostgreSQL plan: a sequential scan, or an index
    walked whole (no condition on it) unless it holds only live rows."""
    relation = node.get("Relation Name")
    if relation in ("runs", "operations"):
        if node["Node Type"] == "Seq Scan":
            yield f"Seq Scan on {relation}"
        index = node.get("Index Name")
        if index and index not in PARTIAL and "Index Cond" not in node:
            yield f"{node['Node Type']} of all {index} on {relation}"
    bitmap = node.get("Node Type") == "Bitmap Index Scan"
    if bitmap and node.get("Index Name") not in PARTIAL and "Index Cond" not in node:
        yield f"Bitmap Index Scan of all {node.get('Index Name')}"
    for child in node.get("Plans", []):
        yield from postgres_problems(child)


def test_metrics_status_and_stuck_read_no_finished_run(store: Store) -> None:
    fill(store)
    assert full_scans(store) == {}
    with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql(analyze(store))
    assert full_scans(store) == {}


def full_scans(store: Store) -> dict[str, list[str]]:
    """Each statement whose plan reads runs or operations whole, with how."""
    sent = statements(store)
    assert len(sent) >= 12
    found: dict[str, list[str]] = {}
    with store.engine.begin() as conn:
        if store.dialect.name == "postgresql":
            # a small table is cheaper to read whole: ask whether an index *can* serve
            conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
        for sql, params in sent:
            if store.dialect.name == "sqlite":
                rows = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql, params).all()
                problems = list(sqlite_problems([str(row[-1]) for row in rows]))
            else:
                raw = conn.exec_driver_sql("EXPLAIN (FORMAT JSON) " + sql, params).scalar_one()
                plan = raw if isinstance(raw, list) else json.loads(raw)
                problems = list(postgres_problems(plan[0]["Plan"]))
            if problems:
                found[sql[:300]] = problems
    return found
