"""How Alembic runs the store's migrations: on the connection, and inside the transaction,
:mod:`ratchet_runner.store.schema` gives it (never a connection of its own), with the store's
tables as the target and ``ratchet_schema_version`` as the revision table; SQLite's tables are
altered in batch mode (copied), the only way SQLite alters most things."""

from __future__ import annotations

from alembic import context

from ratchet_runner.store.schema import REVISION_TABLE
from ratchet_runner.store.tables import metadata

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=metadata,
    version_table=REVISION_TABLE,
    transactional_ddl=True,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():  # the schema's own transaction: nothing is begun here
    context.run_migrations()
