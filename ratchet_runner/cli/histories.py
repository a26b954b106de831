"""The commands of recorded histories: ``export`` (runs as JSONL, ``ratchet.run/1``) and
``replay`` (recorded histories re-derived under a spec version, calling no adapter).

Each parses, calls :mod:`ratchet_runner.evolve` and formats what it returns; each imports the
library when it runs, so that ``--help`` stays quick.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from ..words import RUN_STATUSES
from .options import (
    EXIT_INVALID,
    EXIT_OK,
    JSON_OPTION,
    How,
    echo_lines,
    emit_json,
    say,
    with_options,
)

if TYPE_CHECKING:  # the commands import the store and the replay only when they run
    from ..evolve.history import History
    from ..evolve.results import ReplayResult


def _since(value: str, now: float) -> float:
    """``--since``: a duration back from ``now`` (``24h``), or a time with its zone
    (``2030-01-01T00:00:00Z``), as epoch seconds; else a usage error."""
    from datetime import datetime

    from ..settings import parse_duration

    try:
        seconds = parse_duration(value)
    except ValueError:
        seconds = None
    if seconds is not None:
        return now - seconds
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise click.BadParameter(
            f"{value!r} is neither a duration (24h, 30m, 7d) nor a time with its zone "
            "(2030-01-01T00:00:00Z)",
            param_hint="--since",
        )
    return moment.timestamp()


def _write(output: str, histories: list[History]) -> None:
    """Write the histories to ``output`` (``-``: stdout) as JSONL; a file is replaced whole,
    once every line is written, so that a failed export leaves no half file."""
    import os
    import tempfile
    from pathlib import Path

    from ..evolve.history import write_histories

    if output == "-":
        write_histories(histories, sys.stdout)
        sys.stdout.flush()
        return
    target = Path(output)
    try:
        handle, temporary = tempfile.mkstemp(
            prefix=f".{target.name}.", suffix=".tmp", dir=target.parent if target.parent else "."
        )
    except OSError as exc:
        raise click.FileError(output, exc.strerror or str(exc)) from None
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="\n") as stream:
            write_histories(histories, stream)
        os.replace(temporary, target)
    except OSError as exc:
        raise click.FileError(output, exc.strerror or str(exc)) from None
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


@click.command("export")
@click.argument("runs", nargs=-1, metavar="[RUN]...")
@click.option("--workflow", metavar="NAME", help="Only runs of this workflow (the spec's name).")
@click.option(
    "--since",
    metavar="DURATION|TIME",
    help="Only runs created since then: a duration back from now (24h, 7d) or a time with its "
    "zone (2030-01-01T00:00:00Z).",
)
@click.option(
    "-o",
    "--output",
    required=True,
    metavar="FILE",
    help="The JSONL file to write (replaced whole), or - for stdout.",
)
@with_options("db", "json")
def export_command(
    runs: tuple[str, ...], workflow: str | None, since: str | None, output: str, how: How
) -> None:
    """Write runs' histories as JSONL, one run a line (format ratchet.run/1): the run, its
    events in order, its operations with their IDs, attempts, statuses and receipts, its
    approvals with their digests, its timers and signals. Plain JSON, never a pickled object:
    keep them beside a spec as golden histories, and replay them against the next version.

    RUN is a run ID or a business key; with none, every run (of --workflow, created since
    --since), oldest first. Exit status: 0 exported (none matching: an empty file), 1 refused
    (an unknown run or workflow), 2 usage error.

    \b
      ratchet export T-90104 -o golden/refund.jsonl
      ratchet export --workflow refund --since 7d -o -
    """
    from ..evolve.history import export_runs
    from ..session import Session

    if runs and (workflow is not None or since is not None):
        raise click.UsageError("name runs, or choose them with --workflow and --since: not both")
    if how.as_json and output == "-":
        raise click.UsageError("--json prints a summary on stdout: write the histories to a file")
    with Session(how.db) as session:
        after = None if since is None else _since(since, session.clock.now())
        histories = export_runs(session.store, runs, workflow=workflow, since=after)
    _write(output, histories)
    count = len(histories)
    if how.as_json:
        emit_json({"file": output, "runs": [h.run.id for h in histories], "exported": count})
    elif output != "-":
        say(f"exported {count} run{'s' if count != 1 else ''} to {output}")


def _matches(history: History, terms: list[str]) -> bool:
    """Whether ``history``'s run fits the ``--runs`` filter's terms."""
    from fnmatch import fnmatchcase

    from ..words import ENDED

    statuses = [t.partition("=")[2] for t in terms if t.startswith("status=")]
    globs = [t for t in terms if not t.startswith("status=")]
    run = history.run
    status = str(run.status)
    ended = "ended" if run.status in ENDED else "open"
    fits_status = not statuses or status in statuses or ended in statuses
    fits_name = not globs or any(
        fnmatchcase(run.id, glob) or fnmatchcase(run.business_key, glob) for glob in globs
    )
    return fits_status and fits_name


def _report(results: list[ReplayResult], spec: Any, source: str) -> dict[str, Any]:
    clean = sum(1 for r in results if r.clean)
    return {
        "spec": {
            "file": spec.document.file if spec.document is not None else None,
            "workflow": spec.name,
            "spec_version": spec.spec_version,
            "policy_version": str(spec.policy_version),
            "digest": spec.digest,
        },
        "source": source,
        "runs": len(results),
        "clean": clean,
        "diverged": len(results) - clean,
        "results": [r.to_json() for r in results],
    }


@click.command("replay")
@click.argument("spec", metavar="SPEC")
@click.option("--histories", metavar="FILE", help="A JSONL file 'ratchet export' wrote.")
@click.option(
    "--db",
    metavar="URL",
    help="Replay the spec's workflow's runs in this store instead (no environment default: "
    "say which).",
)
@click.option(
    "--runs",
    "runs_filter",
    metavar="FILTER",
    help="Only some runs: comma-separated globs over run IDs and business keys ('T-906*'), "
    "and status=WORD (a status, open or ended).",
)
@JSON_OPTION
def replay_command(
    spec: str, histories: str | None, db: str | None, runs_filter: str | None, as_json: bool
) -> None:
    """Replay recorded histories under SPEC, calling no adapter: for each recorded step, the
    same from-state and event select the same row, the guard holds as it did on the recorded
    context, and each effect's operation ID, each approval's digest and each registered undo
    are the same. Each run replays clean, or diverges at its first step that differs, with its
    V3xx code at FILE:LINE:COL of SPEC; an unfinished run is shown where it would continue.

    Exit status: 0 every run replays clean, 1 a run diverges (or the spec, the histories or
    the filter are refused), 2 usage error.

    \b
      ratchet replay specs/refund.yaml --histories golden/refund.jsonl
      ratchet replay specs/refund.yaml --db postgresql+psycopg://app@db/ratchet --runs status=open
    """
    from ..errors import UsageError
    from ..evolve.history import export_runs, read_histories
    from ..evolve.replay import replay
    from ..evolve.results import tally
    from ..session import Session
    from ..spec.validate import load_spec
    from ..store.dialects import redact

    if (histories is None) == (db is None):
        raise click.UsageError("give the runs to replay: --histories FILE or --db URL (one)")
    terms: list[str] = []
    if runs_filter is not None:
        terms = [t.strip() for t in runs_filter.split(",") if t.strip()]
        if not terms:
            raise click.BadParameter("an empty filter", param_hint="--runs")
        words = (*RUN_STATUSES, "open", "ended")
        unknown = [t for t in terms if t.startswith("status=") and t[7:] not in words]
        if unknown:
            raise click.BadParameter(
                f"{unknown[0]!r}: a status is one of {', '.join(words)}", param_hint="--runs"
            )
    loaded = load_spec(spec)
    if histories is not None:
        found, source = read_histories(histories), histories
    elif db is not None:
        with Session(db) as session:
            found = export_runs(session.store, workflow=loaded.name)
            source = f"the store at {redact(db)}"
    if runs_filter is not None:
        found = [h for h in found if _matches(h, terms)]
    if not found:
        chosen = f" matching {runs_filter!r}" if runs_filter is not None else ""
        raise UsageError(f"no runs{chosen} to replay in {source}")
    results = replay(loaded, found)
    against = f"{loaded.name} version {loaded.spec_version} ({spec})"
    if as_json:
        emit_json(_report(results, loaded, source))
    else:
        for result in results:
            echo_lines(result.lines())
        say(tally(results, against))
    sys.exit(EXIT_OK if all(r.clean for r in results) else EXIT_INVALID)


#: The commands, as :mod:`.main` adds them to the group.
COMMANDS = (export_command, replay_command)
