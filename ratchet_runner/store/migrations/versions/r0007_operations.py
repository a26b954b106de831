"""A run names each operation once; a fingerprint is worked out when read (stop old workers first).

A 3-step run wrote each operation's 64-character ID nine times: the operation's row and its
key, the run's context (``operations``, then ``completed``) and its history (the call, then the
done event), and, beside it, a fingerprint of the arguments that the arguments themselves give.
From this revision:

* ``operations.fingerprint`` may be null: the fingerprint of the arguments as they stand, worked
  out when the record is read (:func:`ratchet_runner.store.records.fingerprint`); a prune, which
  empties the arguments, writes it first;
* the context's lists of operations (``completed``, ``undone``, ...) name an operation the run
  lists by its place in ``operations`` (:mod:`ratchet_runner.store.context`);
* the history names an operation the run lists by its place there too, and, on SQLite, a
  ``done`` event whose receipt the same commit stores on the operation reads it from there
  (:mod:`ratchet_runner.store.compact`).

On SQLite an operation's receipt is written once: a trigger (``operations_receipt_once``)
refuses a receipt written over another, since a done event may read it from there.

Rows written before are read as they are: the upgrade only lets the column be null (on SQLite,
the operations table is copied; on PostgreSQL, the constraint is dropped), makes the trigger (on
SQLite), and converts nothing.
Workers of an older version cannot read what this version writes: stop them first. The
downgrade drops the trigger and writes every shortened name, fingerprint and receipt back in
full.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-07
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa
from alembic import op

from ratchet_runner.store import compact
from ratchet_runner.store.context import loaded
from ratchet_runner.store.records import fingerprint

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

#: Runs converted per round trip by the downgrade.
BATCH = 500


#: The trigger that writes an operation's receipt once on SQLite, as this revision makes it.
RECEIPT_ONCE = "ratchet: the receipt of an operation is written once"
TRIGGER = (
    "CREATE TRIGGER IF NOT EXISTS operations_receipt_once BEFORE UPDATE OF receipt ON "
    "operations WHEN coalesce(OLD.receipt, 'null') != 'null' "
    "AND NEW.receipt IS NOT OLD.receipt "
    f"BEGIN SELECT RAISE(ABORT, '{RECEIPT_ONCE}'); END"
)


def upgrade() -> None:
    with op.batch_alter_table("operations") as batch:
        batch.alter_column("fingerprint", existing_type=sa.String(length=64), nullable=True)
    if op.get_bind().dialect.name == "sqlite":
        op.execute(TRIGGER)


def downgrade() -> None:
    bind = op.get_bind()
    postgres = bind.dialect.name == "postgresql"
    if not postgres:
        op.execute("DROP TRIGGER IF EXISTS operations_receipt_once")
    for ids in _batches(bind):
        _runs_back(bind, ids, "CAST(:c AS json)" if postgres else ":c")
        _history_back(bind, ids, "CAST(:e AS json)" if postgres else ":e")
    derived = bind.execute(
        sa.text("SELECT operation_id, args FROM operations WHERE fingerprint IS NULL")
    ).all()
    if derived:
        bind.execute(
            sa.text("UPDATE operations SET fingerprint = :f WHERE operation_id = :i"),
            [{"i": i, "f": fingerprint(_parsed(args))} for i, args in derived],
        )
    with op.batch_alter_table("operations") as batch:
        batch.alter_column("fingerprint", existing_type=sa.String(length=64), nullable=False)


def _runs_back(bind: sa.Connection, ids: list[str], context: str) -> None:
    """The contexts of the runs ``ids`` with their operations named in full."""
    query = sa.text("SELECT id, context FROM runs WHERE id IN :ids").bindparams(
        sa.bindparam("ids", expanding=True)
    )
    rows = []
    for run_id, stored in bind.execute(query, {"ids": ids}):
        full = loaded(_parsed(stored))
        if full is not None:
            rows.append({"i": run_id, "c": json.dumps(full)})
    if rows:
        bind.execute(sa.text(f"UPDATE runs SET context = {context} WHERE id = :i"), rows)


def _history_back(bind: sa.Connection, ids: list[str], events: str) -> None:
    """The history rows of the runs ``ids`` in revision 0006's form: each operation the row
    names by its place, and each receipt it reads from the operation's, written in full."""
    rows = bind.execute(
        sa.text(
            "SELECT h.run_id, h.version, h.events, h.at, r.context FROM history h "
            "JOIN runs r ON r.id = h.run_id WHERE h.run_id IN :ids"
        ).bindparams(sa.bindparam("ids", expanding=True)),
        {"ids": ids},
    ).all()
    receipts: dict[str, Any] = {
        str(operation_id): _parsed(receipt)
        for operation_id, receipt in bind.execute(
            sa.text(
                "SELECT operation_id, receipt FROM operations "
                "WHERE run_id IN :ids AND receipt IS NOT NULL"
            ).bindparams(sa.bindparam("ids", expanding=True)),
            {"ids": ids},
        )
    }
    changed = []
    for run_id, version, stored, at, context in rows:
        where = f"of run {run_id} version {version}"
        listed = compact.listed_in(_parsed(context))
        expanded = compact.expand(_parsed(stored), float(at), where, listed, receipts)
        if any(when != float(at) for _, _, when in expanded):
            continue  # a row converted from revision 0005 with times of its own: never shortened
        full = compact.encode([(kind, data) for kind, data, _ in expanded])
        if json.loads(full) != _parsed(stored):
            changed.append({"r": run_id, "v": version, "e": full})
    if changed:
        bind.execute(
            sa.text(f"UPDATE history SET events = {events} WHERE run_id = :r AND version = :v"),
            changed,
        )


def _batches(bind: sa.Connection) -> Iterator[list[str]]:
    """The IDs of every run, ``BATCH`` at a time, in order."""
    last = ""
    while True:
        ids = [
            str(row[0])
            for row in bind.execute(
                sa.text("SELECT id FROM runs WHERE id > :last ORDER BY id LIMIT :n"),
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
