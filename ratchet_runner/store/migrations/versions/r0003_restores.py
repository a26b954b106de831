"""Adds: the restores table, and the store's ID and sequence in meta.

A store put back from a copy becomes a new incarnation, recorded in ``restores`` with its restore
window (until it closes, every operation is looked up before its first call). ``meta`` gains
``store_id`` (the same in every copy of the store) and ``sequence`` (the attempts committed,
which an SQLite store writes to the high-water mark beside its file, to catch a copy put back by
hand). A new table and two rows: quick on any store, with workers running or not; but a
Ratchet older than this revision refuses the store afterwards, as it would not honour a restore
window.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-06
"""

from __future__ import annotations

import uuid

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "restores",
        sa.Column("incarnation", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("restored_at", sa.Float(), nullable=False),
        sa.Column("window_until", sa.Float(), nullable=False),
        sa.Column("backup_taken_at", sa.Float(), nullable=True),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("by", sa.String(length=200), nullable=False),
        sa.PrimaryKeyConstraint("incarnation"),
    )
    conn = op.get_bind()
    known = {row[0] for row in conn.execute(sa.select(_META.c.key))}
    rows = [{"key": "store_id", "value": uuid.uuid4().hex}, {"key": "sequence", "value": "0"}]
    fresh = [row for row in rows if row["key"] not in known]
    if fresh:
        conn.execute(_META.insert(), fresh)


def downgrade() -> None:
    # ``store_id`` and ``sequence`` stay in meta: older code reads no key it does not know, and
    # the store keeps its ID (a copy of it is still known for one) if it is upgraded again.
    op.drop_table("restores")


_META = sa.table("meta", sa.column("key", sa.String), sa.column("value", sa.Text))
