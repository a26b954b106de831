"""Adds: the index of live leases, for expired leases and stuck runs (CONCURRENTLY on PostgreSQL).

``ix_runs_lease`` (lease_expires_at, only the runs a lease holds: ``lease_token IS NOT NULL``)
lets ``ratchet runs --stuck``, ``ratchet leases`` and the metrics find the leases that ran out
without reading every run: it holds only the runs being worked on, a handful whatever the
history. On PostgreSQL it is built after the revision's transaction with ``CREATE INDEX
CONCURRENTLY`` (:data:`CONCURRENTLY`): workers go on writing while it builds, so the revision
may run while they run. On SQLite, an index made in the transaction (nothing copied).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

#: Built outside the transaction on PostgreSQL: (name, table, columns, the rows it holds).
CONCURRENTLY = (("ix_runs_lease", "runs", ("lease_expires_at",), "lease_token IS NOT NULL"),)


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        return  # built after the transaction
    for name, table, columns, where in CONCURRENTLY:
        op.create_index(name, table, list(columns), sqlite_where=sa.text(where))


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_runs_lease")  # built, half built, or never built
