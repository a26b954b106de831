"""Adds: the ended runs' tallies (stop old workers first), and two partial indexes of operations.

``tallies`` holds what the ended runs add up to (:mod:`ratchet_runner.store.tallies`): metrics
and ``ratchet status`` read it instead of every finished run. It is filled here from the runs the
store holds, in the revision's transaction, with the runs table locked against writes meanwhile
on PostgreSQL (``SHARE`` mode: reads go on), so that no run ends uncounted while it is filled.
Workers of an older version do not keep it: stop them before this revision (a worker of this
version refuses an older store, so none of them runs before it).

``ix_operations_unknown`` and ``ix_operations_failed_undo`` hold only the operations whose
outcome is unknown and the compensations that failed for good, which the metrics count; on
PostgreSQL they are built after the transaction with ``CREATE INDEX CONCURRENTLY``
(:data:`CONCURRENTLY`).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from ratchet_runner.store import tallies

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

#: Built outside the transaction on PostgreSQL: (name, table, columns, the rows it holds).
CONCURRENTLY = (
    ("ix_operations_unknown", "operations", ("run_id",), "status = 'unknown'"),
    (
        "ix_operations_failed_undo",
        "operations",
        ("run_id",),
        "role = 'compensation' AND status IN ('refused', 'exhausted')",
    ),
)


def upgrade() -> None:
    bind = op.get_bind()
    postgres = bind.dialect.name == "postgresql"
    op.create_table(
        "tallies",
        sa.Column("workflow", sa.String(200), nullable=False),
        sa.Column("effect", sa.String(200), nullable=False),
        sa.Column("role", sa.String(20), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("slot", sa.Integer(), nullable=False),
        sa.Column("n", sa.BigInteger(), nullable=False),
        sa.Column("attempts", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("workflow", "effect", "role", "status", "slot", name="pk_tallies"),
    )
    tallies.recount(bind)  # the runs locked against writes meanwhile on PostgreSQL
    if postgres:
        return  # the indexes are built after the transaction
    for name, table, columns, where in CONCURRENTLY:
        op.create_index(name, table, list(columns), sqlite_where=sa.text(where))


def downgrade() -> None:
    for name, _table, _columns, _where in CONCURRENTLY:
        op.execute(f"DROP INDEX IF EXISTS {name}")  # built, half built, or never built
    op.drop_table("tallies")
