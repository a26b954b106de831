"""Adds: runs.pruned_at and the index prune walks (its build holds writes to runs).

``ratchet prune`` compacts a finished run to its tombstone and records when in
``runs.pruned_at``; ``ix_runs_prune`` (status, pruned_at, updated_at, id) lets it find the
finished runs not yet pruned that finished longest ago without walking those pruned before.
The column is nullable: adding it rewrites nothing, on SQLite or PostgreSQL. The index is built
inside the revision's transaction, which holds writes to ``runs`` while it builds, for a time
that grows with the table: on a large store, run it with the workers stopped.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("pruned_at", sa.Float(), nullable=True))
        batch.create_index(
            "ix_runs_prune", ["status", "pruned_at", "updated_at", "id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_index("ix_runs_prune")
        batch.drop_column("pruned_at")
