"""The store's schema migrations, for Alembic (the SQLAlchemy project's tool), shipped inside the
package: ``env.py`` and one file per revision in ``versions/``.

Not to be confused with ``ratchet migrate``, which moves runs between spec versions: these
change the store's tables. :mod:`ratchet_runner.store.schema` runs them, each revision in one
transaction it opens itself (holding the schema's lock, and on PostgreSQL a ``lock_timeout``),
SQLite included: Alembic takes SQLite's DDL for non-transactional, but it is transactional. A
statement that cannot run in a transaction (``CREATE INDEX CONCURRENTLY`` on PostgreSQL) is a
revision of its own that says so. A new revision is written by hand, or started with
``alembic revision --autogenerate`` against a store at head (``alembic.ini`` is not shipped:
``script_location`` is ``ratchet_runner.store:migrations``), and ends up in
:data:`ratchet_runner.store.schema.REVISIONS`, which a test keeps equal to this folder. Its
first line says whether it only adds (``Adds: …``, it may run while workers run) or rewrites.
On SQLite, a batch operation that must copy a table (most alterations but adding a column)
runs with foreign keys on: a revision that copies a table other tables refer to says how it
keeps their rows.
"""
