"""Replaces events with history: a compact row per commit, not per event (stop old workers first).

A run's history was a row per event, each naming its run, version, kind and time, its data's
keys and, in most, its operation's 64-character ID. ``history`` holds one row per version of
the run, keyed by ``(run_id, version)`` (clustered on SQLite: no other index), with the commit's
events in the compact form of :mod:`ratchet_runner.store.compact`: a 3-step run's history goes
from 16 rows to 5 and to under half the bytes. Reading gives every event back exactly as it was
written, so ``trace`` and ``export`` are unchanged.

The upgrade converts every run's events, 500 runs at a time, in the revision's transaction, with
``events`` locked against writes meanwhile on PostgreSQL (``SHARE`` mode: reads go on); then
drops ``events``. It reads each event once: about 11 seconds per million events on SQLite and 23
on PostgreSQL on a 2-core machine (``python -m bench.bench_history --postgres``). Workers of an
older version write ``events``: stop them before this revision (a worker of this version
refuses an older store). The downgrade converts back.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-07
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from itertools import groupby
from typing import Any

import sqlalchemy as sa
from alembic import op

from ratchet_runner.store import compact

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

#: Runs converted per round trip.
BATCH = 500


def upgrade() -> None:
    bind = op.get_bind()
    postgres = bind.dialect.name == "postgresql"
    op.create_table(
        "history",
        sa.Column("run_id", sa.String(length=40), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("events", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"]),
        sa.PrimaryKeyConstraint("run_id", "version", name="pk_history"),
        sqlite_with_rowid=False,
    )
    _copy(
        bind,
        "events",
        'SELECT run_id, version, kind, data, "at" FROM events WHERE run_id IN :ids '
        "ORDER BY run_id, id",
        'INSERT INTO history (run_id, version, "at", events) VALUES (:r, :v, :a, '
        + ("CAST(:e AS json))" if postgres else ":e)"),
        _compacted,
    )
    op.drop_index("ix_events_run", table_name="events")
    op.drop_table("events")


def downgrade() -> None:
    bind = op.get_bind()
    postgres = bind.dialect.name == "postgresql"
    op.create_table(
        "events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(length=40), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=40), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_events_run", "events", ["run_id", "id"])
    _copy(
        bind,
        "history",
        'SELECT run_id, version, events, "at" FROM history WHERE run_id IN :ids '
        "ORDER BY run_id, version",
        'INSERT INTO events (run_id, version, kind, data, "at") VALUES (:r, :v, :k, '
        + ("CAST(:d AS json), :a)" if postgres else ":d, :a)"),
        _expanded,
    )
    op.drop_table("history")


def _copy(
    bind: sa.Connection,
    source: str,
    read: str,
    write: str,
    convert: Callable[[Sequence[Any]], list[dict[str, Any]]],
) -> None:
    """Every run's rows of ``source`` read by ``read`` (its runs' IDs bound as ``:ids``),
    ``convert``-ed, and written by ``write``, ``BATCH`` runs at a time; ``source`` held against
    writes meanwhile on PostgreSQL."""
    if bind.dialect.name == "postgresql":
        bind.execute(sa.text(f"LOCK TABLE {source} IN SHARE MODE"))
    query = sa.text(read).bindparams(sa.bindparam("ids", expanding=True))
    for ids in _batches(bind, source):
        rows = convert(bind.execute(query, {"ids": ids}).all())
        if rows:
            bind.execute(sa.text(write), rows)


def _compacted(rows: Sequence[Any]) -> list[dict[str, Any]]:
    """``events`` rows (run, version, kind, data, at; in order) as ``history`` rows."""
    return [
        {"r": run_id, "v": version, "a": at, "e": events}
        for (run_id, version), group in groupby(rows, key=lambda row: (row[0], row[1]))
        for at, events in [_row([(r[2], _parsed(r[3]), float(r[4])) for r in group])]
    ]


def _expanded(rows: Sequence[Any]) -> list[dict[str, Any]]:
    """``history`` rows (run, version, events, at; in order) as ``events`` rows."""
    return [
        {"r": run_id, "v": version, "k": kind, "d": json.dumps(data), "a": at}
        for run_id, version, events, row_at in rows
        for kind, data, at in compact.expand(
            _parsed(events), float(row_at), f"of run {run_id} version {version}"
        )
    ]


def _batches(bind: sa.Connection, table: str) -> Iterator[list[str]]:
    """The IDs of the runs with rows in ``table``, ``BATCH`` at a time, in order."""
    last = ""
    while True:
        ids = [
            str(row[0])
            for row in bind.execute(
                sa.text(
                    f"SELECT DISTINCT run_id FROM {table} WHERE run_id > :last "
                    "ORDER BY run_id LIMIT :n"
                ),
                {"last": last, "n": BATCH},
            )
        ]
        if not ids:
            return
        yield ids
        last = ids[-1]


def _parsed(value: Any) -> Any:
    """A JSON column's value as the driver gives it (text on SQLite, parsed on PostgreSQL)."""
    return json.loads(value) if isinstance(value, str) else value


def _row(events: Sequence[tuple[str, dict[str, Any], float]]) -> tuple[float, str]:
    """One version's events as a ``history`` row: its time (the first event's) and its
    ``events`` text; an event at another time keeps its own (``[kind, data, at]``)."""
    at = events[0][2]
    if all(when == at for _, _, when in events):
        return at, compact.encode([(kind, data) for kind, data, _ in events])
    entries = [[kind, data] if when == at else [kind, data, when] for kind, data, when in events]
    return at, json.dumps(entries, separators=(",", ":"))
