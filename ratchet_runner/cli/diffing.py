"""The command that compares two versions of a spec: ``ratchet diff``.

It parses, reads the two versions (two files, or a file and its version in a git revision, read
with ``git show``), calls the library (:mod:`ratchet_runner.evolve`) and prints what it returns;
it imports the library when it runs, so that ``--help`` stays quick.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import click

from ..errors import UsageError
from .options import EXIT_INVALID, EXIT_OK, echo_lines, emit_json, say

if TYPE_CHECKING:  # the library is imported when the command runs
    from ..evolve.render import FailOn


@click.command("diff")
@click.argument("specs", nargs=-1, required=True, metavar="OLD NEW")
@click.option(
    "--base",
    metavar="GIT_REF",
    help="Compare the one SPEC given with its version in the git revision GIT_REF (a branch, "
    "a tag, a commit: what `git show GIT_REF:SPEC` reads).",
)
@click.option(
    "--db",
    metavar="URL",
    help="Read the workflow's unfinished runs from this store, and name the runs each hazard "
    "touches (default: no store is read; the hazards are the change's own).",
)
@click.option(
    "--mapping",
    metavar="FILE",
    type=click.Path(dir_okay=False),
    help="A mapping file: where the runs of each old state go (states: {old: new}), and "
    "whether armed timers are kept or restarted and held approvals voided or kept.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "markdown"]),
    default="text",
    show_default=True,
    help="text for a terminal; markdown for a pull-request comment (tables and a Mermaid diagram).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
@click.option(
    "--fail-on",
    type=click.Choice(["error", "warning", "never"]),
    default="error",
    show_default=True,
    help="Exit 1 when a hazard of this severity or worse is found (never: exit 0 whatever is "
    "found, for a comment that must not fail the build).",
)
def diff_command(
    specs: tuple[str, ...],
    base: str | None,
    db: str | None,
    mapping: str | None,
    fmt: str,
    as_json: bool,
    fail_on: str,
) -> None:
    """Compare two versions of a spec, and say what the change does to runs in flight.

    \b
      ratchet diff specs/refund.yaml specs/refund-v2.yaml
      ratchet diff specs/refund.yaml --base origin/main --format markdown
      ratchet diff OLD NEW --db postgresql+psycopg://ratchet@db/ratchet --mapping move.yaml

    Prints every state, row, guard, effect, contract, approval, compensation and timer added,
    removed or changed (FILE:LINE:COL in the new version; in the old one for what was removed),
    then each hazard of moving runs from OLD to NEW as FILE:LINE:COL: CODE message, ending with
    what to do (V101 to V114, and V2xx for a mapping: docs/reference/versions.md). With --db,
    each hazard names the live runs it touches. Exit status: 0 no hazard at or above --fail-on,
    1 one is found (or a spec or the mapping is invalid), 2 usage error.
    """
    from ..evolve.diff import diff
    from ..evolve.hazards import hazards, live_summary
    from ..evolve.mapping import read_mapping
    from ..evolve.render import DiffReport, markdown, report_json, tally, text_lines
    from ..review import views
    from ..spec.validate import Report, validate_path, validate_text

    failing = cast("FailOn", fail_on)
    if as_json and fmt != "text":
        raise click.BadParameter("--json prints JSON; leave --format out", param_hint="--format")
    if base is not None:
        if len(specs) != 1:
            raise click.UsageError("with --base, give one SPEC: its version in GIT_REF is OLD")
        name, text = git_version(specs[0], base)
        reports: list[Report] = [validate_text(text, name), validate_path(specs[0])]
    else:
        if len(specs) != 2:
            raise click.UsageError("give OLD and NEW (two spec files), or one SPEC and --base")
        reports = [validate_path(specs[0]), validate_path(specs[1])]
    invalid = [r for r in reports if not r.ok() or r.spec is None]
    if invalid:
        if as_json:
            emit_json(views.validation_json(invalid, strict=False))
        else:
            echo_lines(d.format() for r in invalid for d in r.errors or r.diagnostics)
            say(f"ratchet: {', '.join(r.file for r in invalid)}: invalid; fix it, then compare")
        sys.exit(EXIT_INVALID)
    old, new = reports[0].spec, reports[1].spec
    assert old is not None
    assert new is not None
    moving = read_mapping(mapping) if mapping is not None else None
    live = None if db is None else _live(db, old.name)
    changes = diff(old, new)
    found = hazards(old, new, live, moving, changes=changes)
    report = DiffReport(
        changes,
        tuple(found),
        None if live is None else live_summary(old, live),
        mapping,
    )
    if as_json:
        emit_json(report_json(report, failing))
    elif fmt == "markdown":
        click.echo(markdown(report), nl=False)
    else:
        echo_lines(text_lines(report))
        say(tally(report, failing))
    sys.exit(EXIT_INVALID if report.failed(failing) else EXIT_OK)


def _live(url: str, workflow: str) -> list[Any]:
    """The unfinished runs of ``workflow`` in the store at ``url``, which is read, never
    created or changed (a SQLite file that is not there is refused before it would be made)."""
    from ..evolve.hazards import live_runs
    from ..store.dialects import missing_file, redact
    from ..store.store import Store

    missing = missing_file(url)
    if missing is not None:
        raise UsageError(
            f"no store at {redact(url)} ({missing} does not exist): --db reads the runs of an "
            "existing store"
        )
    store = Store(url, create=False)
    try:
        return live_runs(store, workflow)
    finally:
        store.close()


def git_version(spec: str, ref: str) -> tuple[str, bytes]:
    """The text of ``spec`` in the git revision ``ref`` (``git show REF:./SPEC``, run in the
    spec's folder), and the name to report it by (``REF:PATH``, the path from the checkout's
    top); a :class:`UsageError` saying why when it cannot be read."""
    if ref.startswith("-") or not ref.strip():
        raise UsageError(f"--base {ref!r} is not a git revision")
    path = Path(spec)
    folder = path.parent if path.parent != Path("") else Path(".")
    if not folder.is_dir():
        raise UsageError(f"{spec}: no such folder {str(folder)!r}")
    top = _git(folder, "rev-parse", "--show-toplevel")
    if top.returncode != 0:
        raise UsageError(
            f"{spec} is not in a git checkout ({_first(top.stderr)}): --base reads the spec's "
            "version from git; compare two files instead (ratchet diff OLD NEW)"
        )
    known = _git(folder, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if known.returncode != 0:
        raise UsageError(f"no git revision {ref!r} in the checkout of {spec}")
    prefix = _git(folder, "rev-parse", "--show-prefix").stdout.decode("utf-8", "replace").strip()
    shown = _git(folder, "show", f"{ref}:./{path.name}")
    where = f"{ref}:{prefix}{path.name}"
    if shown.returncode != 0:
        raise UsageError(f"{prefix}{path.name} does not exist in {ref} ({_first(shown.stderr)})")
    return where, shown.stdout


def _git(folder: Path, *args: str) -> subprocess.CompletedProcess[Any]:
    try:
        return subprocess.run(
            ["git", "-C", str(folder), *args], capture_output=True, check=False, timeout=60
        )
    except FileNotFoundError:
        raise UsageError("--base needs git, which is not installed (or not on PATH)") from None
    except subprocess.TimeoutExpired:
        raise UsageError("git did not answer within 60 seconds") from None


def _first(stderr: bytes) -> str:
    lines = stderr.decode("utf-8", "replace").strip().splitlines()
    return lines[0] if lines else "git failed"


#: The commands, as :mod:`.main` adds them to the group.
COMMANDS = (diff_command,)
