"""``ratchet db``: the store's schema revision, read and moved (``current``, ``check``,
``upgrade``, ``downgrade``, ``history``). Not ``ratchet migrate``, which moves runs between spec
versions: these change the store's tables (docs/how-to/operate-a-store.md)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import click

from .options import EXIT_INVALID, EXIT_OK, How, emit_json, say, with_options

if TYPE_CHECKING:
    from ..store.store import Store


@contextmanager
def _opened(how: How) -> Iterator[tuple[Store, bool]]:
    """The command's store (``--db``, ``$RATCHET_DB`` or the default), opened whatever its
    revision, and nothing of it changed by the opening; and whether it is the default store (a
    practice store, if it is made here)."""
    from ..session import Session
    from ..store.store import Store

    with Session(how.db) as session:
        url, _writable = session.store_url()
        store = Store(url, checked=False)
        try:
            yield store, session.url is None
        finally:
            store.close()


def _said(standing_json: dict[str, object]) -> str:
    status = standing_json["status"]
    revision = standing_json["revision"] or "none"
    head = standing_json["head"]
    words = {
        "current": f"at this Ratchet's revision ({head})",
        "older": f"older than this Ratchet's {head}: run `ratchet db upgrade`",
        "newer": f"newer than this Ratchet's {head}: a newer Ratchet upgraded it; use that one",
        "new": f"empty: opening it makes it at revision {head}",
        "unversioned": (
            f"made before revisions were kept (the first revision's tables): `ratchet db "
            f"upgrade` records it and moves it to {head}"
        ),
    }
    return f"revision {revision}: {words[str(status)]}"


@click.group()
def db() -> None:
    """The store's schema revision: read it, check it, move it.

    Every command that opens a store checks its revision first: an SQLite store older than this
    Ratchet is upgraded as it opens (a copy of the file kept beside it first); a PostgreSQL store
    is refused until `ratchet db upgrade` runs; a store newer than this Ratchet is refused on
    every database. Not `ratchet migrate`, which moves runs between spec versions.

    \b
    Examples:
      ratchet db current
      ratchet db check --db postgresql+psycopg://ratchet@db/ratchet
      ratchet db upgrade --db postgresql+psycopg://ratchet@db/ratchet
    """


@db.command()
@with_options("db", "json")
def current(how: How) -> None:
    """Say the store's schema revision and how it stands to this Ratchet's."""
    from ..store.schema import standing

    with _opened(how) as (store, _practice), store.schema_transaction() as conn:
        found = standing(conn).to_json()
    if how.as_json:
        emit_json(found)
    else:
        click.echo(_said(found))


@db.command()
@with_options("db", "json")
def check(how: How) -> None:
    """Exit 0 when the store is at this Ratchet's revision, 1 otherwise (for deploy scripts).

    A new, empty store counts as ready (the first command makes it); an older, unversioned or
    newer one does not, and the reason is printed on stderr.
    """
    from ..store.schema import CURRENT, NEW, standing

    with _opened(how) as (store, _practice), store.schema_transaction() as conn:
        found = standing(conn)
    ready = found.status in (CURRENT, NEW)
    if how.as_json:
        emit_json(found.to_json() | {"ready": ready})
    elif ready:
        click.echo(_said(found.to_json()))
    else:
        say(f"ratchet: {_said(found.to_json())}")
    sys.exit(EXIT_OK if ready else EXIT_INVALID)


@db.command()
@click.argument("revision", default="head")
@with_options("db", "json")
def upgrade(revision: str, how: How) -> None:
    """Move the store's schema up to REVISION (default: head, this Ratchet's).

    Each revision runs in one transaction (on PostgreSQL with a lock timeout of a few seconds:
    a revision that cannot take its locks gives up and changes nothing; run it again). An SQLite
    store is copied beside itself first (FILE.rREVISION.bak). A store made before revisions were
    kept is recorded at the first revision first.
    """
    from ..store.schema import HEAD, OLDER, UNVERSIONED, backup, migrate_to, standing

    with _opened(how) as (store, practice):
        with store.schema_transaction() as conn:
            before = standing(conn)
        copy = None
        if store.dialect.name == "sqlite" and before.status in (OLDER, UNVERSIONED):
            copy = backup(store, before)
        steps = migrate_to(store, revision, practice=practice)
        with store.schema_transaction() as conn:
            after = standing(conn)
    if how.as_json:
        emit_json({"steps": steps, "backup": str(copy) if copy else None} | after.to_json())
        return
    if copy is not None:
        click.echo(f"backup: {copy}")
    for step in steps:
        click.echo(f"upgraded: {step}")
    target = HEAD if revision == "head" else revision
    if not steps:
        click.echo(f"already at revision {after.revision} (asked: {target})")
    click.echo(_said(after.to_json()))


@db.command()
@click.argument("revision")
@click.option(
    "--yes",
    is_flag=True,
    help="Downgrade for real: a downgrade drops what later revisions added (their tables and "
    "columns, and what is in them).",
)
@with_options("db", "json")
def downgrade(revision: str, yes: bool, how: How) -> None:
    """Move the store's schema down to REVISION (a revision, or base: no tables at all).

    What later revisions added is dropped with what it holds, so it runs only with --yes; back
    the store up first (`ratchet backup`, or pg_dump). The Ratchet that runs on it afterwards
    must be one whose head is REVISION.
    """
    from ..store.schema import migrate_to, standing

    if not yes:
        raise click.BadParameter(
            f"a downgrade to {revision} drops what later revisions added, with what it holds: "
            "give --yes to run it",
            param_hint="--yes",
        )
    with _opened(how) as (store, _practice):
        steps = migrate_to(store, revision)
        with store.schema_transaction() as conn:
            after = standing(conn)
    if how.as_json:
        emit_json({"steps": steps} | after.to_json())
        return
    for step in steps:
        click.echo(f"downgraded: {step}")
    if not steps:
        click.echo(f"already at revision {after.revision or 'base'}")


@db.command()
@with_options("json")
def history(how: How) -> None:
    """List this Ratchet's schema revisions, oldest first, each with what it does."""
    from ..store.schema import HEAD, revisions

    found = revisions()
    if how.as_json:
        emit_json({"head": HEAD, "revisions": found})
        return
    for revision in found:
        head = " (head)" if revision["revision"] == HEAD else ""
        click.echo(f"{revision['revision']}{head}  {revision['doc']}")


#: The commands, as :mod:`.main` adds them to the group.
COMMANDS = (db,)
