"""The commands that read runs and the practice world: ``runs``, ``status``, ``trace``,
``queue`` and ``effects``; and ``reset``, which empties the practice world (and, asked, the
store).

Each parses, calls the session and the read models, and formats what they return; each imports
the library when it runs, so that ``--help`` stays quick.
"""

from __future__ import annotations

import click

from ..words import RUN_STATUSES
from .options import (
    JSON_OPTION,
    LIMIT,
    SECONDS,
    How,
    echo_lines,
    emit_json,
    named,
    say,
    show,
    with_options,
)


@click.command("runs")
@click.option("--status", type=click.Choice(RUN_STATUSES))
@click.option(
    "--limit", default=50, show_default=True, type=LIMIT, help="List at most this many runs."
)
@click.option(
    "--stuck",
    is_flag=True,
    help="Only runs nobody is moving: a worker's lease "
    "expired, or runnable and untouched for --older-than seconds.",
)
@click.option(
    "--older-than",
    default=300.0,
    show_default=True,
    type=SECONDS,
    help="With --stuck: how long without progress counts as stuck: a duration (30s, 5m, 2h) "
    "or seconds.",
)
@with_options("db", "json")
def runs_command(status: str | None, limit: int, stuck: bool, older_than: float, how: How) -> None:
    """List runs, newest first (or, with --stuck, the ones nobody is moving)."""
    from ..review import views
    from ..session import Session

    with Session(how.db) as session:
        if stuck:
            stalled = session.store.stuck(session.clock.now(), older_than)
            show(
                how.as_json,
                views.stuck_json(stalled),
                lambda: views.stuck_lines(stalled),
                "no stuck runs",
            )
            return
        found = session.store.list_runs(status, limit)
    show(
        how.as_json, [views.run_json(r) for r in found], lambda: views.runs_lines(found), "no runs"
    )


@click.command("status")
@with_options("db", "json")
def status_command(how: How) -> None:
    """Runs by status, the leases workers hold (owner, how long held, time left by the
    database's clock), and the runs whose lease expired."""
    from ..review import views
    from ..session import Session

    with Session(how.db) as session:
        now = session.clock.now()
        counts, leases = session.store.status_counts(), session.store.leases()
    show(
        how.as_json,
        views.status_json(counts, leases, now),
        lambda: views.status_lines(counts, leases, now),
    )


@click.command()
@click.argument("run_id", metavar="RUN")
@with_options("db", "json")
def trace(run_id: str, how: How) -> None:
    """Show RUN's history, one line per event: approval, write-ahead record, call, timeout,
    reconcile found / not found, receipt, move."""
    from ..review import trace as traces
    from ..review import views
    from ..session import Session

    with Session(how.db) as session:
        found = session.store.resolve(run_id)
        history = session.store.history(found.id)
    show(how.as_json, views.trace_json(found, history), lambda: traces.lines(found, history))


@click.command()
@JSON_OPTION
def effects(as_json: bool) -> None:
    """List the changes in the practice database, with their operation IDs and call counts."""
    from ..review import views
    from ..session import Session

    with Session() as session:
        changes, calls = session.world.changes(), session.world.calls()
    if as_json:
        emit_json(views.effects_json(changes, calls))
        return
    if not changes:
        say("no changes in the practice database")
    echo_lines(views.effects_lines(changes))
    say(views.effects_tally(changes, calls))


@click.command()
@click.option(
    "--all",
    "everything",
    is_flag=True,
    help="Also delete every run in the store (not only the practice world).",
)
@click.option(
    "--practice",
    is_flag=True,
    help="With --all: also declare the emptied store a practice store, on which RATCHET_NOW may "
    "set the time (the default store under RATCHET_HOME is one already). Never for a store "
    "that does real work.",
)
@with_options("db", "json")
def reset(everything: bool, practice: bool, how: How) -> None:
    """Empty the practice world (orders, changes, calls, faults); with --all, the store too;
    with --all --practice, declare that store a practice store."""
    from ..review import views
    from ..session import Session

    if practice and not everything:
        raise click.UsageError(
            "--practice declares an emptied store a practice store: give it with --all"
        )
    with Session(how.db) as session:
        session.reset(everything, practice)
    if how.as_json:
        emit_json(views.reset_json(everything, practice))
    else:
        say(views.reset_line(everything, practice))


@click.command("queue")
@click.option(
    "--as", "actor", callback=named(), help="Weigh approving as this person (guards may read it)."
)
@click.option(
    "--role", callback=named(), help="Weigh approving in this role only (default: each allowed)."
)
@with_options("db", "json")
def queue_command(actor: str | None, role: str | None, how: How) -> None:
    """List what waits for a person: the decisions waiting, then the runs waiting for a person.

    A decision shows the exact action and digest, when the pause expires and when an approval
    given now would, whether approving in each role would be taken (the checks 'ratchet
    approve' makes: the role, the pause's expiry, the row's guard; nothing is changed), and the
    evidence the approval declares (the other runs on the same order, with their effects). A
    run waiting for a person shows what to do, how long it has waited, and the evidence (what
    was done, undone, left, and what failed).
    """
    from ..engine.operator_queue import decisions, queue
    from ..review import views
    from ..review.decisions import decision_lines
    from ..session import Session

    with Session(how.db) as session:
        runner = session.runner()
        now = runner.decision_now()
        weighed = None if role is None else [role]
        asked, _ = decisions(runner, now=now, actor=actor or "", roles=weighed)
        people = queue(runner)
    data = {"decisions": asked, "needs_person": people}
    show(
        how.as_json,
        data if how.as_json or asked or people else {},
        lambda: decision_lines(asked, now) + views.queue_lines(people),
        "nobody is needed: the queue is empty",
    )


#: The commands, as :mod:`.main` adds them to the group.
COMMANDS = (runs_command, status_command, trace, queue_command, effects, reset)
