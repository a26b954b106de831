"""The store's upkeep: ``ratchet db``, its schema revision read and moved (``current``,
``check``, ``upgrade``, ``downgrade``, ``history``; not ``ratchet migrate``, which moves runs
between spec versions), and ``ratchet prune``, finished runs compacted to their tombstones
(docs/how-to/operate-a-store.md).

Over 400 lines: one concern, the store's upkeep as an operator runs it, each command a thin
layer over the store's own functions, with the words and exit statuses they share."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import click

from .options import EXIT_INVALID, EXIT_OK, JSON_OPTION, How, emit_json, say, show, with_options

if TYPE_CHECKING:
    from ..store.records import RunRecord
    from ..store.schema import Outside, Standing
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


def _where(store: Store) -> tuple[Standing, list[Outside], str]:
    """Where the store's schema stands, the indexes its revision left unbuilt (PostgreSQL: a
    concurrent build stopped midway), and both in words."""
    from ..store.schema import CURRENT, read, unbuilt

    found = read(store)
    missing = unbuilt(store) if found.status == CURRENT else []
    said = _said(found.to_json())
    if missing:
        names = ", ".join(f"{index.name} (revision {index.revision})" for index in missing)
        said += (
            f"; but index {names} is not built (its build outside a transaction stopped "
            "midway; the store works without it, slower): run `ratchet db upgrade`"
        )
    return found, missing, said


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
    with _opened(how) as (store, _practice):
        found, missing, said = _where(store)
    if how.as_json:
        emit_json(found.to_json() | {"unbuilt": [index.name for index in missing]})
    else:
        click.echo(said)


@db.command()
@with_options("db", "json")
def check(how: How) -> None:
    """Exit 0 when the store is at this Ratchet's revision, 1 otherwise (for deploy scripts).

    A new, empty store counts as ready (the first command makes it); an older, unversioned or
    newer one does not, nor (on PostgreSQL) one whose index a revision builds concurrently
    was left unbuilt by a build stopped midway; the reason is printed on stderr.
    """
    from ..store.schema import CURRENT, NEW

    with _opened(how) as (store, _practice):
        found, missing, said = _where(store)
    ready = found.status in (CURRENT, NEW) and not missing
    if how.as_json:
        emit_json(found.to_json() | {"ready": ready, "unbuilt": [index.name for index in missing]})
    elif ready:
        click.echo(said)
    else:
        say(f"ratchet: {said}")
    sys.exit(EXIT_OK if ready else EXIT_INVALID)


@db.command()
@click.argument("revision", default="head")
@with_options("db", "json")
def upgrade(revision: str, how: How) -> None:
    """Move the store's schema up to REVISION (default: head, this Ratchet's).

    Each revision runs in one transaction (on PostgreSQL with a lock timeout of a few seconds:
    a revision that cannot take its locks gives up and changes nothing; run it again). On
    PostgreSQL an index on a table workers write is built after its revision's transaction, with
    CREATE INDEX CONCURRENTLY (writes go on meanwhile); a build stopped midway is built again by
    the next upgrade, even at head. An SQLite store is copied beside itself first
    (FILE.rREVISION.bak). A store made before revisions were kept is recorded at the first
    revision first.
    """
    from ..store.schema import HEAD, OLDER, UNVERSIONED, backup, migrate_to, read

    with _opened(how) as (store, practice):
        before = read(store)
        copy = None
        if store.dialect.name == "sqlite" and before.status in (OLDER, UNVERSIONED):
            copy = backup(store, before)
        steps = migrate_to(store, revision, practice=practice)
        after = read(store)
    if how.as_json:
        emit_json({"steps": steps, "backup": str(copy) if copy else None} | after.to_json())
        return
    if copy is not None:
        click.echo(f"backup: {copy}")
    for step in steps:
        built = step.removeprefix("built ")
        click.echo(f"upgraded: {step}" if built == step else f"built: {built} (concurrently)")
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
    from ..store.schema import migrate_to, read

    if not yes:
        raise click.BadParameter(
            f"a downgrade to {revision} drops what later revisions added, with what it holds: "
            "give --yes to run it",
            param_hint="--yes",
        )
    with _opened(how) as (store, _practice):
        _warn_of_an_open_window(store, revision)
        steps = migrate_to(store, revision)
        after = read(store)
    if how.as_json:
        emit_json({"steps": steps} | after.to_json())
        return
    for step in steps:
        click.echo(f"downgraded: {step}")
    if not steps:
        click.echo(f"already at revision {after.revision or 'base'}")


def _warn_of_an_open_window(store: Store, revision: str) -> None:
    """Say so on stderr when a downgrade below the revision that keeps restores (0003) drops a
    restore window still open: the lookups before each first call stop with it."""
    import time

    from ..errors import StoreError
    from ..store.schema import REVISIONS

    keeps = REVISIONS.index("0003")  # the revision that made the restores table
    if revision != "base" and (revision not in REVISIONS or REVISIONS.index(revision) >= keeps):
        return
    try:
        latest = store.restores()[-1:]
    except StoreError:  # no restores table (an older store): no window to lose
        return
    if latest and latest[0].open_at(time.time()):
        say(
            "ratchet: warning: the store's restore window is open (incarnation "
            f"{latest[0].incarnation}); going below revision 0003 drops it, and with it the "
            "lookups before each operation's first call that keep an effect made after the "
            "backup from being made again"
        )


@db.command()
@with_options("db", "json")
def recount(how: How) -> None:
    """Count the ended runs' tallies again from the runs the store holds.

    Metrics and `ratchet status` read what the ended runs add up to from summary rows that each
    run's end updates. A worker of a Ratchet older than revision 0005 ends runs without counting
    them: after one ran on the upgraded store, this makes the rows again, in one transaction (on
    PostgreSQL, writes to the runs wait meanwhile). Prints each figure that changed, before and
    after; the attempts of pruned runs then count as their tombstones keep them.
    """
    from ..session import Session

    with Session(how.db) as session:
        changed = session.store.recount()
    if how.as_json:
        emit_json({"changed": changed})
        return
    if not changed:
        click.echo("recounted: every figure was right")
        return
    for figure in changed:
        where = " ".join(
            str(figure[key]) for key in ("workflow", "effect", "role", "status") if key in figure
        )
        counts = ", ".join(
            f"{name} {figure[name][0]} → {figure[name][1]}"
            for name in ("runs", "operations", "attempts")
            if name in figure
        )
        click.echo(f"recounted: {where}: {counts}")


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


@click.command()
@click.option(
    "--finished-before",
    "finished_before",
    metavar="DURATION",
    required=True,
    help="Prune the runs that finished (done or cancelled) longer ago than this: a duration "
    "as a spec writes it (30d, 72h).",
)
@click.option("--dry-run", is_flag=True, help="Count what would be pruned; change nothing.")
@click.option(
    "--archive",
    metavar="FILE",
    help="First write each run's whole history to FILE (compressed JSONL, the format of "
    "ratchet export, each record chained to the one before by its SHA-256), on disk before the "
    "run is pruned; an archive is appended to. Check it with ratchet archive verify.",
)
@click.option(
    "--batch",
    type=click.IntRange(1, 10_000),
    default=100,
    show_default=True,
    help="Runs compacted per transaction (smaller: shorter waits for workers).",
)
@with_options("db", "json")
def prune(finished_before: str, dry_run: bool, archive: str | None, batch: int, how: How) -> None:
    """Prune finished runs to their tombstones, a small batch per transaction.

    What stays of a pruned run answers for it: its row (business key, final state, receipts,
    its input as a digest), its done operations with their receipts, its evidence keys and
    one `pruned` event; its history, approvals, timers, signals and other operations are
    removed. Starting its business key again finds it done and makes nothing again; another
    input for it is still refused. Never pruned: a run not finished (waiting, running, with a
    person, paused), one with a timer still armed, one with an operation whose outcome is not
    settled. Safe while workers run; stopped midway (Ctrl-C, SIGKILL), every run is whole or
    pruned, and running it again goes on.

    \b
    Examples:
      ratchet prune --finished-before 90d --dry-run
      ratchet prune --finished-before 90d --db postgresql+psycopg://ratchet@db/ratchet
    """
    from datetime import UTC, datetime

    from ..engine.pruning import Pruned
    from ..engine.pruning import prune as pruning
    from ..evolve.archive import Writer
    from ..evolve.history import export_runs
    from ..session import Session
    from ..settings import parse_duration

    try:
        age = parse_duration(finished_before)
    except ValueError:
        age = None
    if age is None or age < 0:
        raise click.BadParameter(
            f"{finished_before!r} is not a duration (30d, 72h, 90m)", param_hint="--finished-before"
        )
    shown = sys.stderr.isatty() and not how.as_json

    def progress(so_far: Pruned) -> None:
        if shown:
            click.echo(
                f"\r{'counted' if dry_run else 'pruned'} {so_far.pruned:,} …", nl=False, err=True
            )

    if archive is not None and dry_run:
        raise click.BadParameter(
            "a dry run writes no archive: leave one out", param_hint="--archive"
        )
    with Session(how.db) as session:
        now = session.clock.now()
        store = session.store
        writer = Writer.open(archive) if archive is not None else None

        def keep(runs: list[RunRecord]) -> str | None:
            if writer is None:
                return None
            writer.write(export_runs(store, [r.id for r in runs]))
            return str(archive)

        try:
            done = pruning(
                store, now - age, now, batch=batch, dry_run=dry_run, progress=progress, keep=keep
            )
        finally:
            if writer is not None:
                writer.close()
    if shown:
        click.echo("", err=True)
    if how.as_json:
        emit_json(done.to_json())
        return
    when = datetime.fromtimestamp(done.before, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    verb = "would prune" if dry_run else "pruned"
    click.echo(
        f"{verb} {done.pruned:,} run(s) finished before {when}, in {done.batches} batch(es), "
        f"{done.seconds:.1f} s"
    )
    for workflow, count in sorted(done.by_workflow.items()):
        click.echo(f"  {workflow}: {count:,}")
    if done.forgotten:
        verb = "would forget" if dry_run else "forgot"
        click.echo(
            f"{verb} {done.forgotten:,} tombstone(s) past their workflow's retention.operation_ids"
        )
    if done.left:
        click.echo(f"left {done.left} run(s) that moved on meanwhile: run it again")


@click.group()
def archive() -> None:
    """Archives of pruned runs (ratchet prune --archive): verify one, show a run from it."""


@archive.command("verify")
@click.argument("file", metavar="FILE")
@click.option(
    "--db",
    envvar="RATCHET_DB",
    metavar="URL",
    help="Also check FILE against this store (env RATCHET_DB): every run whose tombstone names "
    "an archive of FILE's name must be in it, which finds whole prunes cut from its end.",
)
@JSON_OPTION
def verify_command(file: str, db: str | None, as_json: bool) -> None:
    """Check FILE's chain and counts: a line changed, removed, inserted or moved is named.

    The chain alone cannot show prunes cut whole from the end of the file; with --db (or
    RATCHET_DB) the store's tombstones, which name the archive each pruned run went to, can.

    Exit status: 0 the archive is whole (a write cut off by a crash at its end is said, not a
    fault: its runs were not pruned) · 1 a line is named, or runs the store says it holds are
    missing.
    """
    from ..evolve.archive import against, verify

    found = verify(file)
    if db:
        from ..session import Session

        with Session(db) as session:
            against(found, file, session.store.tombstones())
    if as_json:
        emit_json(found.to_json())
    else:
        click.echo(
            f"{file}: {found.histories:,} run history(ies), {found.closed} prune(s) closed"
            + ("; its end was cut off by a crash (those runs were not pruned)" if found.cut else "")
            + (
                ""
                if found.named is None
                else f"; {found.named:,} tombstone(s) in the store name it"
            )
        )
        for problem in found.problems:
            say(f"ratchet: {problem}")
    sys.exit(EXIT_OK if found.ok else EXIT_INVALID)


@archive.command("show")
@click.argument("file", metavar="FILE")
@click.argument("run", metavar="RUN")
@JSON_OPTION
def show_command(file: str, run: str, as_json: bool) -> None:
    """Show RUN's history (an ID, or a business key) from FILE alone, as ratchet trace does."""
    from ..evolve.archive import find
    from ..review import trace as traces
    from ..review import views

    history = find(file, run)
    events = list(history.events)
    show(as_json, views.trace_json(history.run, events), lambda: traces.lines(history.run, events))


def retention_options(command: Callable[..., None]) -> Callable[..., None]:
    """``ratchet worker``'s ``--prune-every`` and ``--prune-finished-before``."""
    every = click.option(
        "--prune-every",
        "prune_every",
        metavar="DURATION",
        envvar="RATCHET_PRUNE_EVERY",
        help="Also prune finished runs, as ratchet prune does, when the worker starts and every "
        "DURATION after (1h, 1d), those finished before the age the next option gives "
        "(env RATCHET_PRUNE_EVERY).",
    )
    age = click.option(
        "--prune-finished-before",
        "prune_age",
        metavar="DURATION",
        envvar="RATCHET_PRUNE_FINISHED_BEFORE",
        help="With --prune-every: prune the runs that finished longer ago than this (90d; env "
        "RATCHET_PRUNE_FINISHED_BEFORE).",
    )
    return every(age(command))


def retention(every: str | None, age: str | None) -> tuple[float, float] | None:
    """``ratchet worker``'s ``--prune-every`` and ``--prune-finished-before`` as seconds (both,
    or neither): the worker's retention, as ``ratchet prune`` prunes."""
    from ..settings import parse_duration

    if every is None and age is None:
        return None
    if every is None or age is None:
        raise click.BadParameter(
            "--prune-every and --prune-finished-before go together",
            param_hint="--prune-every" if every is None else "--prune-finished-before",
        )
    found: list[float] = []
    for text, hint in ((every, "--prune-every"), (age, "--prune-finished-before")):
        try:
            seconds = parse_duration(text)
        except ValueError:
            seconds = None
        if seconds is None or seconds < 0:
            raise click.BadParameter(f"{text!r} is not a duration (1h, 90d)", param_hint=hint)
        if seconds == 0 and hint == "--prune-every":  # an age of 0s is one, as for prune
            raise click.BadParameter(
                f"{text!r}: the time between two prunes must be more than 0s (1h, 1d)",
                param_hint=hint,
            )
        found.append(seconds)
    return found[0], found[1]


#: The commands, as :mod:`.main` adds them to the group.
COMMANDS = (db, prune, archive)
