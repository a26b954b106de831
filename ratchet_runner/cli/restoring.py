"""Backups and restores: ``ratchet backup``, ``ratchet restore`` and ``ratchet db mark-restored``.

A store put back from a copy becomes a new incarnation with a restore window, during which every
operation is looked up before its first call, so that an effect made after the copy was taken is
found, not made again (:mod:`ratchet_runner.store.restores`; docs/how-to/operate-a-store.md,
"Back up and restore").
"""

from __future__ import annotations

import getpass
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click

from .database import db
from .options import How, emit_json, named, with_options

if TYPE_CHECKING:
    from ..store.restores import Restore
    from ..store.store import Store

#: The restore window when none is given (``--window``).
DEFAULT_WINDOW = "7d"

WINDOW_OPTION = click.option(
    "--window",
    metavar="DURATION",
    default=DEFAULT_WINDOW,
    show_default=True,
    help="How long every operation is looked up before its first call: a duration as a spec "
    "writes it. Days, not minutes: a run may be started again, or woken, days after the "
    "restore.",
)
AS_OPTION = click.option(
    "--as",
    "actor",
    callback=named(),
    help="Who puts the store back (recorded; default: the system user).",
)


def _window(text: str) -> float:
    from ..settings import parse_duration

    try:
        seconds = parse_duration(text)
    except ValueError:
        seconds = None
    if seconds is None or seconds <= 0:
        raise click.BadParameter(
            f"{text!r} is not a duration longer than 0 (7d, 72h)", param_hint="--window"
        )
    return seconds


def _actor(given: str | None) -> str:
    if given:
        return given
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "operator"


@contextmanager
def _unchecked(how: How) -> Iterator[tuple[Store, float]]:
    """The command's store, made usable at this code's revision but not refused for being
    behind its high-water mark (what a restore resolves), and now by its clock."""
    from ..session import Session
    from ..store import schema
    from ..store.store import Store

    with Session(how.db) as session:
        url, _writable = session.store_url()
        store = Store(url, checked=False)
        try:
            sqlite = store.dialect.name == "sqlite"
            schema.prepare(store, create=True, practice=session.url is None, upgrade=sqlite)
            yield store, session.clock_for(store).now()
        finally:
            store.close()


def _told(made: Restore, how: How, **more: object) -> None:
    from ..clock import format_time

    if how.as_json:
        emit_json({"restore": made.to_json(), **more})
        return
    for key, value in more.items():
        if value is not None:
            click.echo(f"{key.replace('_', ' ')}: {value}")
    taken = made.backup_taken_at
    click.echo(
        f"the store is incarnation {made.incarnation}, put back at {format_time(made.restored_at)}"
        + (f" from a copy taken at {format_time(taken)}" if taken else "")
    )
    click.echo(
        f"until {format_time(made.window_until)} every operation is looked up before its first "
        "call: an effect made after the copy was taken is found, not made again"
    )


@click.command("backup")
@click.argument("file", metavar="FILE", type=click.Path(dir_okay=False))
@with_options("db", "json")
def backup_command(file: str, how: How) -> None:
    """Copy the SQLite store to FILE, consistent as of one commit, while workers run.

    SQLite's backup API in one step: workers go on writing meanwhile, and the copy is the store
    as one commit left it. FILE must not exist; it is written beside itself and renamed when
    whole. For PostgreSQL use pg_dump or point-in-time recovery (the how-to says how), and
    `ratchet db mark-restored` after putting it back.

    \b
    Example:
      ratchet backup backups/ratchet-2026-12-06.db
    """
    from ..session import Session

    with Session(how.db) as session:
        now = session.clock.now()
        size = session.store.take_backup(Path(file), now)
    if how.as_json:
        emit_json({"backup": file, "bytes": size, "taken_at": now})
        return
    click.echo(f"backed up the store to {file} ({size / 1e6:.1f} MB)")


@click.command("restore")
@click.argument("file", metavar="[FILE]", required=False, type=click.Path(dir_okay=False))
@click.option(
    "--mark",
    is_flag=True,
    help="Put nothing back: confirm that the store as it stands was put back from a copy by "
    "hand (a store refused with R307), and make it a new incarnation with its window.",
)
@click.option(
    "--yes",
    is_flag=True,
    help="Put FILE back for real: the store as it stands is replaced (and kept beside it as "
    "STORE.before-restore-N.db first).",
)
@WINDOW_OPTION
@AS_OPTION
@with_options("db", "json")
def restore_command(
    file: str | None, mark: bool, yes: bool, window: str, actor: str | None, how: How
) -> None:
    """Put the SQLite backup FILE back as the store, without repeating any effect.

    The store becomes a new incarnation: until the restore window closes (--window, 7 days by
    default), every operation is looked up at its provider before its first call, so an effect
    made after the backup was taken is found and recorded, not made again; an effect with no
    lookup goes to a person. The store as it stands is kept beside it first. Stop every worker
    first: a store a worker holds a live lease on is refused. Killed at any point, the store is
    either as it was or put back and marked: run it again.

    With --mark (no FILE): confirm a store put back by a plain file copy, which every command
    refuses (R307) until then.

    \b
    Examples:
      ratchet restore backups/ratchet-2026-12-06.db --yes
      ratchet restore --mark --window 14d
    """
    seconds = _window(window)
    if mark == (file is not None):
        raise click.UsageError("give FILE (a backup to put back) or --mark, not both or neither")
    if file is not None and not yes:
        raise click.BadParameter(
            f"putting {file} back replaces the store as it stands (kept beside it first): "
            "give --yes to run it",
            param_hint="--yes",
        )
    with _unchecked(how) as (store, now):
        if mark:
            made = store.mark_restored(
                at=now,
                window=seconds,
                source="a copy put back by hand, confirmed with ratchet restore --mark",
                by=_actor(actor),
            )
            _told(made, how)
            return
        from ..store.backup import check_backup

        if store.database_file() is not None:  # PostgreSQL is sent to pg_restore
            check_backup(Path(str(file)))  # a file that is no backup: refused before any copy
        kept = _keep_current(store, now)
        made = store.restore_from(Path(str(file)), at=now, window=seconds, by=_actor(actor))
    _told(made, how, kept_the_store_it_replaced_as=kept)


def _keep_current(store: Store, now: float) -> str | None:
    """Copy the store as it stands beside itself (``STORE.before-restore-N.db``) before a backup
    is put over it; None for a store with no run."""
    database = store.database_file()
    if database is None or not store.list_runs(limit=1):
        return None
    number = 1
    while (kept := database.with_name(f"{database.stem}.before-restore-{number}.db")).exists():
        number += 1
    store.take_backup(kept, now)
    return str(kept)


@db.command("mark-restored")
@WINDOW_OPTION
@AS_OPTION
@click.option(
    "--source",
    metavar="TEXT",
    default="a PostgreSQL restore",
    show_default=True,
    help="What was put back, recorded (the dump's name, the recovery target time).",
)
@with_options("db", "json")
def mark_restored(window: str, actor: str | None, source: str, how: How) -> None:
    """Record that the store was put back from a copy (pg_restore, point-in-time recovery).

    Run it after the database is back and before any worker starts: the store becomes a new
    incarnation, and until the restore window closes every operation is looked up at its
    provider before its first call. Refused while a worker holds a live lease.

    \b
    Example:
      ratchet db mark-restored --db postgresql+psycopg://ratchet@db/ratchet --window 7d
    """
    seconds = _window(window)
    with _unchecked(how) as (store, now):
        made = store.mark_restored(at=now, window=seconds, source=source, by=_actor(actor))
    _told(made, how)


def _printed(restores: list[Restore]) -> Iterator[str]:
    from ..clock import format_time

    for made in restores:
        yield (
            f"incarnation {made.incarnation}: put back at {format_time(made.restored_at)} by "
            f"{made.by} ({made.source}); window until {format_time(made.window_until)}"
        )


@db.command("restores")
@with_options("db", "json")
def restores_command(how: How) -> None:
    """List every time the store was put back from a copy, oldest first, with its window."""
    with _unchecked(how) as (store, _now):
        found = store.restores()
    if how.as_json:
        emit_json({"restores": [r.to_json() for r in found]})
        return
    if not found:
        click.echo("never put back from a copy (incarnation 1)")
    for line in _printed(found):
        click.echo(line)


COMMANDS = (backup_command, restore_command)
