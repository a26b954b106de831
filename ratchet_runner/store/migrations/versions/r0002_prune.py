"""Adds: runs.pruned_at and the index prune walks (built CONCURRENTLY on PostgreSQL).

``ratchet prune`` compacts a finished run to its tombstone and records when in
``runs.pruned_at``; ``ix_runs_prune`` (status, pruned_at, updated_at, id) lets it find the
finished runs not yet pruned that finished longest ago without walking those pruned before.
The column is nullable: adding it rewrites nothing, on SQLite or PostgreSQL. On PostgreSQL the
index is built after the revision's transaction with ``CREATE INDEX CONCURRENTLY``
(:data:`CONCURRENTLY`, :func:`ratchet_runner.store.schema.build_outside`): workers' writes go
on while it builds. On SQLite it is built in the transaction, which copies the table (batch
mode) and holds every write meanwhile: SQLite's stores upgrade as they open, workers stopped.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlite3

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


#: Built outside the transaction on PostgreSQL: (name, table, columns).
CONCURRENTLY = (("ix_runs_prune", "runs", ("status", "pruned_at", "updated_at", "id")),)


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("pruned_at", sa.Float(), nullable=True))
        if not postgres:
            for name, _table, columns in CONCURRENTLY:
                batch.create_index(name, list(columns), unique=False)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":  # built, half built, or never built
        op.execute("DROP INDEX IF EXISTS ix_runs_prune")
        op.drop_column("runs", "pruned_at")
        return
    if sqlite3.sqlite_version_info >= (3, 35):
        # SQLite drops a column in place: batch mode would copy runs and drop the original,
        # which the foreign keys of every run's events and operations refuse once it has runs.
        op.drop_index("ix_runs_prune", table_name="runs")
        op.execute("ALTER TABLE runs DROP COLUMN pruned_at")
        return
    with op.batch_alter_table("runs") as batch:
        batch.drop_index("ix_runs_prune")
        batch.drop_column("pruned_at")
