"""The store as Ratchet 0.1 made it, before its schema had revisions: the first revision.

A store made by that code has these tables and no revision table; opening it stamps it with
this revision (its missing tables, added since it was made, created first), and upgrades it
from here.

Revision ID: 0001
Revises:
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def schema() -> sa.MetaData:
    """The tables and indexes of this revision, frozen here (the code's models move on): what
    :func:`upgrade` makes, and what a store made before revisions were kept is completed with
    (``ratchet_runner.store.schema.stamp_unversioned``)."""
    metadata = sa.MetaData()
    sa.Table(
        "meta",
        metadata,
        sa.Column("key", sa.String(length=100), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("key"),
    )
    sa.Table(
        "published",
        metadata,
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("spec_version", sa.Integer(), nullable=False),
        sa.Column("set_by", sa.String(length=200), nullable=False),
        sa.Column("set_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    sa.Table(
        "spec_versions",
        metadata,
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("spec_version", sa.Integer(), nullable=False),
        sa.Column("policy_version", sa.String(length=100), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("digest"),
    )
    sa.Table(
        "runs",
        metadata,
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("workflow", sa.String(length=200), nullable=False),
        sa.Column("spec_digest", sa.String(length=64), nullable=False),
        sa.Column("business_key", sa.String(length=400), nullable=False),
        sa.Column("state", sa.String(length=200), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("input", sa.JSON(), nullable=False),
        sa.Column("context", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.Column("wake_at", sa.Float(), nullable=True),
        sa.Column("lease_owner", sa.String(length=200), nullable=True),
        sa.Column("lease_token", sa.String(length=64), nullable=True),
        sa.Column("lease_expires_at", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(
            ["spec_digest"],
            ["spec_versions.digest"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("workflow", "business_key", name="uq_runs_business_key"),
    )
    sa.Index(
        "ix_runs_claim",
        metadata.tables["runs"].c.status,
        metadata.tables["runs"].c.updated_at,
        metadata.tables["runs"].c.id,
    )
    sa.Index("ix_runs_status", metadata.tables["runs"].c.status, metadata.tables["runs"].c.wake_at)
    sa.Table(
        "approvals",
        metadata,
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(length=40), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("effect", sa.String(length=200), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("decision", sa.String(length=20), nullable=False),
        sa.Column("actor", sa.String(length=200), nullable=False),
        sa.Column("role", sa.String(length=200), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("policy_version", sa.String(length=100), nullable=False),
        sa.Column("spec_digest", sa.String(length=64), nullable=False),
        sa.Column("decided_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=True),
        sa.Column("consumed_at", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["runs.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    sa.Index("ix_approvals_run", metadata.tables["approvals"].c.run_id)
    sa.Table(
        "duplicates",
        metadata,
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(length=40), nullable=False),
        sa.Column("operation_id", sa.String(length=64), nullable=False),
        sa.Column("workflow", sa.String(length=200), nullable=False),
        sa.Column("effect", sa.String(length=200), nullable=False),
        sa.Column("role", sa.String(length=20), nullable=False),
        sa.Column("receipts", sa.JSON(), nullable=False),
        sa.Column("via", sa.String(length=20), nullable=False),
        sa.Column("detected_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["runs.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    sa.Index("ix_duplicates_run", metadata.tables["duplicates"].c.run_id)
    sa.Table(
        "events",
        metadata,
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(length=40), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=40), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["runs.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    sa.Index("ix_events_run", metadata.tables["events"].c.run_id, metadata.tables["events"].c.id)
    sa.Table(
        "evidence_keys",
        metadata,
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(length=40), nullable=False),
        sa.Column("workflow", sa.String(length=200), nullable=False),
        sa.Column("path", sa.String(length=200), nullable=False),
        sa.Column("value", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["runs.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    sa.Index(
        "ix_evidence_keys_lookup",
        metadata.tables["evidence_keys"].c.workflow,
        metadata.tables["evidence_keys"].c.path,
        metadata.tables["evidence_keys"].c.value,
        metadata.tables["evidence_keys"].c.created_at,
    )
    sa.Table(
        "operations",
        metadata,
        sa.Column("operation_id", sa.String(length=64), nullable=False),
        sa.Column("run_id", sa.String(length=40), nullable=False),
        sa.Column("effect", sa.String(length=200), nullable=False),
        sa.Column("role", sa.String(length=20), nullable=False),
        sa.Column("args", sa.JSON(), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("receipt", sa.JSON(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("compensates", sa.String(length=64), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["runs.id"],
        ),
        sa.PrimaryKeyConstraint("operation_id"),
    )
    sa.Index("ix_operations_run", metadata.tables["operations"].c.run_id)
    sa.Table(
        "signals",
        metadata,
        sa.Column("signal_id", sa.String(length=200), nullable=False),
        sa.Column("run_id", sa.String(length=40), nullable=False),
        sa.Column("event", sa.String(length=200), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.Column("received_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["runs.id"],
        ),
        sa.PrimaryKeyConstraint("signal_id", "run_id"),
    )
    sa.Table(
        "timers",
        metadata,
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(length=40), nullable=False),
        sa.Column("state", sa.String(length=200), nullable=False),
        sa.Column("event", sa.String(length=200), nullable=False),
        sa.Column("due_at", sa.Float(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("fired_at", sa.Float(), nullable=True),
        sa.Column("outcome", sa.String(length=20), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["runs.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    sa.Index(
        "ix_timers_due", metadata.tables["timers"].c.fired_at, metadata.tables["timers"].c.due_at
    )
    sa.Index("ix_timers_run", metadata.tables["timers"].c.run_id)

    return metadata


def upgrade() -> None:
    schema().create_all(op.get_bind())


def downgrade() -> None:
    op.drop_index("ix_timers_run", table_name="timers")
    op.drop_index("ix_timers_due", table_name="timers")
    op.drop_table("timers")
    op.drop_table("signals")
    op.drop_index("ix_operations_run", table_name="operations")
    op.drop_table("operations")
    op.drop_index("ix_evidence_keys_lookup", table_name="evidence_keys")
    op.drop_table("evidence_keys")
    op.drop_index("ix_events_run", table_name="events")
    op.drop_table("events")
    op.drop_index("ix_duplicates_run", table_name="duplicates")
    op.drop_table("duplicates")
    op.drop_index("ix_approvals_run", table_name="approvals")
    op.drop_table("approvals")
    op.drop_index("ix_runs_status", table_name="runs")
    op.drop_index("ix_runs_claim", table_name="runs")
    op.drop_table("runs")
    op.drop_table("spec_versions")
    op.drop_table("published")
    op.drop_table("meta")
