"""The commands that publish a workflow's versions: ``versions`` lists the stored versions of a
workflow with their open runs, and sets the version new runs start on (so a bad version is
rolled back for new runs in one command); ``migrate`` moves live runs to a new version (a plan,
its apply, its rollback).

Each parses, calls the store, and formats what it returns; each imports the library when it
runs, so that ``--help`` stays quick.
"""

from __future__ import annotations

from typing import Any

import click

from ..clock import format_time
from ..errors import UsageError, VersionConflict
from .options import How, emit_json, named, say, with_options

#: What ``--start-new-on`` takes besides a version number: clear the choice.
NEWEST = "newest"


def _version(_ctx: click.Context, _param: click.Parameter, value: str | None) -> int | None:
    """``--start-new-on``: a version number from 1, or ``newest`` (0 here: clear the choice)."""
    if value is None:
        return None
    if value.strip().lower() == NEWEST:
        return 0
    try:
        number = int(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is no version number (or {NEWEST!r})") from None
    if number < 1:
        raise click.BadParameter(f"a version is a whole number from 1, not {number}")
    return number


@click.command("versions")
@click.argument("workflow")
@click.option(
    "--start-new-on",
    "start_new_on",
    metavar="N|newest",
    callback=_version,
    help="Start new runs of the workflow on its stored version N (its runs already started stay "
    "on theirs); 'newest' clears the choice: each start then runs the version it is given.",
)
@click.option(
    "--as",
    "actor",
    callback=named(),
    help="Who sets it (recorded; needed with --start-new-on).",
)
@with_options("db", "json")
def versions_command(workflow: str, start_new_on: int | None, actor: str | None, how: How) -> None:
    """List the stored versions of WORKFLOW with their open runs, newest first, and which one new
    runs start on; with --start-new-on, choose it.

    A version is stored when a run first starts on it. Until an operator chooses one, a new run
    starts on the version of the spec file it is given, and the newest stored version moves
    older runs on (by their spec's on_version_change). Once one is chosen, every new run starts
    on it (a newer spec file given to ratchet run is stored, not started on), and older runs
    move on to it, not to a newer one.

    \b
    Examples:
      ratchet versions refund
      ratchet versions refund --start-new-on 1 --as ops-lead   roll back a bad version 2
      ratchet versions refund --start-new-on newest --as ops-lead
    """
    from ..session import Session

    if start_new_on is not None and actor is None:
        raise click.BadParameter(
            "--start-new-on records who chose: give --as NAME", param_hint="--as"
        )
    with Session(how.db) as session:
        store = session.store
        if start_new_on is not None:
            store.publish(workflow, start_new_on or None, str(actor), session.clock.now())
        stored = store.workflow_versions(workflow)
        if not stored:
            raise UsageError(
                f"no version of workflow {workflow!r} is stored: a version is stored when a run "
                "first starts on it"
            )
        chosen = store.published(workflow)
        report = _report(workflow, stored, chosen)
    if how.as_json:
        emit_json(report)
        return
    for line in _lines(report):
        click.echo(line)
    if start_new_on is not None:
        starts = report["start_new_on"]
        if report["chosen"]:
            say(f"{workflow}: new runs start on version {starts}")
        else:
            say(f"{workflow}: new runs start on the version they are given (none chosen)")


def _report(workflow: str, stored: list[Any], chosen: tuple[str, int] | None) -> dict[str, Any]:
    """What ``ratchet versions`` shows, as its ``--json`` prints it."""
    newest = stored[0][0]
    starts = chosen[1] if chosen is not None else newest.spec_version
    return {
        "workflow": workflow,
        "start_new_on": starts,
        "chosen": chosen is not None,
        "versions": [
            {
                "version": v.spec_version,
                "digest": v.digest,
                "policy_version": v.policy_version,
                "stored_at": v.created_at,
                "open_runs": open_runs,
                "new_runs_start_here": (
                    v.digest == chosen[0] if chosen is not None else v.digest == newest.digest
                ),
            }
            for v, open_runs in stored
        ],
    }


def _lines(report: dict[str, Any]) -> list[str]:
    """The table of versions, and a line for each older version that still has open runs."""
    if report["chosen"]:
        head = f"new runs start on version {report['start_new_on']} (chosen by an operator)"
    else:
        head = (
            f"new runs start on the version they are given (none chosen); the newest is "
            f"{report['start_new_on']}"
        )
    lines = [
        f"{report['workflow']}: {head}",
        f"{'':2}{'version':>7}  {'digest':<12}  {'stored':<20}  {'open runs':>9}",
    ]
    for v in report["versions"]:
        mark = "→" if v["new_runs_start_here"] else " "
        lines.append(
            f"{mark:2}{v['version']:>7}  {v['digest'][:12]:<12}  "
            f"{format_time(v['stored_at']):<20}  {v['open_runs']:>9}"
        )
    for v in report["versions"]:
        if v["open_runs"] and not v["new_runs_start_here"]:
            runs = "open run" if v["open_runs"] == 1 else "open runs"
            lines.append(f"version {v['version']} still has {v['open_runs']} {runs}")
    return lines


@click.command("migrate")
@click.argument("spec_path", metavar="NEW", type=click.Path(dir_okay=False))
@click.option("--plan", "action", flag_value="plan", default=True, help="Say what would move.")
@click.option("--apply", "action", flag_value="apply", help="Move the runs the plan finds ready.")
@click.option(
    "--rollback",
    "migration",
    metavar="MIGRATION",
    help="Move the runs migration MIGRATION moved back, where they did nothing since.",
)
@click.option(
    "--only-ready",
    is_flag=True,
    help="With --apply: move the runs that can move, and leave the others (listed).",
)
@click.option(
    "--mapping",
    type=click.Path(dir_okay=False),
    help="Where the runs of each old state go (states: {old: new}), timers: keep|restart.",
)
@click.option(
    "--as", "actor", callback=named(), help="Who migrates (recorded; --apply, --rollback)."
)
@with_options("db", "json")
def migrate_command(
    spec_path: str,
    action: str,
    migration: str | None,
    only_ready: bool,
    mapping: str | None,
    actor: str | None,
    how: How,
) -> None:
    """Move the live runs of a workflow to its version NEW: --plan (the default) gives each run
    its verdict, --apply moves the ready ones, --rollback MIGRATION moves them back.

    Each run's verdict comes from the hazards of moving it (ratchet diff, against the version it
    is on): it stays (already on NEW), moves, moves with mapping, asks for a new decision (an
    approval it holds or awaits no longer counts), must first reach a wait state (inside an
    effect window), or is refused (the hazard named). --apply moves each ready run in one
    transaction, compare-and-set on its version, only while no worker holds it, and records a
    migrated event with the migration's ID and who did it; it is safe while workers run. A plan
    with runs that cannot move is refused whole unless --only-ready. --rollback moves a
    migration's runs back while they stand where it put them and made no call, took no decision
    and received no signal since.

    \b
    Exit status: 0 done (a --plan in which every run can move); 1 a run cannot move or was
    left, a refused apply or rollback, an invalid spec or mapping; 2 usage error; 4 every run
    left was left because another process moved or held it meanwhile (run it again).

    \b
    Examples:
      ratchet migrate specs/refund-v2.yaml --plan
      ratchet migrate specs/refund-v2.yaml --apply --only-ready --as ops-lead
      ratchet migrate specs/refund-v2.yaml --rollback mig_0123456789abcdef --as ops-lead
    """
    from pathlib import Path

    from ..evolve import migrate
    from ..evolve.mapping import read_mapping
    from ..session import Session
    from ..spec.validate import load_spec

    if migration is not None:
        if action == "apply":
            raise click.BadParameter(
                "give --apply or --rollback, not both", param_hint="--rollback"
            )
        if mapping is not None:
            raise click.BadParameter(
                "a rollback moves runs back as the migration recorded them: no --mapping",
                param_hint="--mapping",
            )
        action = "rollback"
    if action != "plan" and actor is None:
        raise click.BadParameter(
            f"--{action} records who migrates: give --as NAME", param_hint="--as"
        )
    if only_ready and action != "apply":
        raise click.BadParameter("--only-ready goes with --apply", param_hint="--only-ready")
    new = load_spec(spec_path)
    text = Path(spec_path).read_text(encoding="utf-8")
    moving = read_mapping(mapping) if mapping is not None else None
    with Session(how.db) as session:
        store, now = session.store, session.clock.now()
        if action == "rollback":
            done = migrate.rollback(store, new.name, str(migration), str(actor), now)
        elif action == "apply":
            done = migrate.apply(
                store, new, text, str(actor), now, mapping=moving, only_ready=only_ready
            )
        else:
            found = migrate.plan(store, new, moving)
            _show_plan(found, how)
            if found.held:
                raise SystemExit(1)
            return
    if how.as_json:
        emit_json(done.to_json())
    else:
        verb = "rolled back" if action == "rollback" else "migrated"
        click.echo(f"{done.migration}: {len(done.moved)} run(s) of {new.name!r} {verb}")
        for run in done.moved:
            click.echo(f"  {run.run_id}  {run.state} → {run.to_state}  ({run.verdict})")
        for run_id, why in done.left:
            click.echo(f"  {run_id}  left: {why}")
        for run_id, why in done.skipped:
            click.echo(f"  {run_id}  skipped: {why}")
    if done.left:
        raise SystemExit(VersionConflict.exit_status if done.busy else 1)


def _show_plan(found: Any, how: How) -> None:
    """A migration's plan: each run with its verdict and why, then the counts."""
    if how.as_json:
        emit_json(found.to_json())
        return
    runs = len(found.runs)
    click.echo(f"{found.workflow} → version {found.new.spec_version}: {runs} unfinished run(s)")
    for run in found.runs:
        click.echo(
            f"  {run.run_id}  {run.business_key}  v{run.from_version} {run.state} → "
            f"{run.to_state}  {run.verdict}"
        )
        codes = [f"{h.code} " for h in run.hazards]
        for i, why in enumerate(run.reasons()):
            click.echo(f"      {codes[i] if i < len(codes) else ''}{why}")
    counts = found.to_json()["counts"]
    click.echo(", ".join(f"{n} {verdict}" for verdict, n in counts.items()) or "no run to move")


COMMANDS = (versions_command, migrate_command)
