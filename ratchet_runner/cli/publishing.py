"""The commands that publish a workflow's versions: ``versions`` lists the stored versions of a
workflow with their open runs, and sets the version new runs start on (so a bad version is
rolled back for new runs in one command).

Each parses, calls the store, and formats what it returns; each imports the library when it
runs, so that ``--help`` stays quick.
"""

from __future__ import annotations

from typing import Any

import click

from ..clock import format_time
from ..errors import UsageError
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
        how_chosen = "" if report["chosen"] else " (the newest: none chosen)"
        say(f"{workflow}: new runs start on version {starts}{how_chosen}")


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
    chosen = "chosen by an operator" if report["chosen"] else "the newest: none chosen"
    lines = [
        f"{report['workflow']}: new runs start on version {report['start_new_on']} ({chosen})",
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


COMMANDS = (versions_command,)
