"""The spec's commands: ``validate``, ``schema``, ``table``, ``diagram`` and ``check``.

Each parses, calls one library function, and formats what it returns (text, or ``--json``);
each imports the library modules it uses when it runs, so that ``ratchet --version`` and every
``--help`` import no spec machinery, store or diagram.
"""

from __future__ import annotations

import io
import os
import sys
from typing import TYPE_CHECKING

import click

from ..settings import (
    DIAGRAM_IMAGE_FORMATS,
    DIAGRAM_TEXT_FORMATS,
    DIAGRAM_VIEWS,
)
from .options import (
    BINDINGS_OPTION,
    EXIT_INTERNAL,
    EXIT_INVALID,
    EXIT_OK,
    OUTPUT,
    How,
    echo_lines,
    emit_json,
    hinted,
    run_checks,
    say,
    with_options,
    write_output,
)

if TYPE_CHECKING:  # the run commands import the store and the runner only when they run
    from ..review.naive import Strategy


@click.command()
@click.argument("specs", nargs=-1, required=True, metavar="SPEC...")
@click.option("--strict", is_flag=True, help="Fail on warnings too (W codes), not only errors.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
@click.option("-q", "--quiet", is_flag=True, help="Print findings only, no summary.")
@BINDINGS_OPTION
def validate(
    specs: tuple[str, ...], strict: bool, as_json: bool, quiet: bool, bindings: str | None
) -> None:
    """Check spec files before they run.

    Each SPEC is a YAML file or a directory of them (of which files with no top-level name: or
    transitions: are skipped with a note: input files, configs). Every problem is printed as

    \b
      FILE:LINE:COL: CODE message

    sorted by position; E codes are errors, W codes warnings (docs/reference/lint-codes.md
    explains each with a failing and a fixed example). With a binding file (--bindings, or
    found), each spec is also checked against it: every adapter bound, every operation and
    lookup implemented; B codes locate its problems in the binding file (or at the spec's
    adapter). Exit status: 0 valid, 1 invalid (with --strict, also when there are warnings),
    2 usage error.
    """
    from ..binding.check import Checker
    from ..review import views

    done = Checker(bindings, os.environ).validate(specs, debug=bool(os.getenv("RATCHET_DEBUG")))
    for name, why in done.crashed:  # a bug: reported, and the other files went on
        say(f"ratchet: internal error validating {name}: {why} (please report it)")
    for name in done.skipped:
        say(f"ratchet: skipped {name}: not a spec (no top-level name: or transitions:)")
    if not done.reports and not done.crashed:
        raise click.UsageError("no spec (.yaml or .yml file) found in the given directories")
    failed = done.failed(strict)
    if as_json:
        emit_json(views.validation_json(done.reports, strict, done.skipped))
    else:
        echo_lines(d.format() for r in done.reports for d in r.diagnostics)
        if not quiet:
            say(views.validation_tally(done.reports, bool(failed), len(done.crashed)))
    sys.exit(EXIT_INTERNAL if done.crashed else EXIT_INVALID if failed else EXIT_OK)


@click.command()
def schema() -> None:
    """Print the JSON Schema (draft-07) that specs are validated against.

    Point your editor at it for autocompletion and hover help; the shipped specs start with

    \b
      # yaml-language-server: $schema=../ratchet_runner/spec/spec.schema.json
    """
    from ..spec.schema import spec_schema_text

    click.echo(spec_schema_text(), nl=False)


@click.command()
@click.argument("spec", type=click.Path(dir_okay=False))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["md", "html"]),
    default="md",
    show_default=True,
    help="Markdown for a pull-request description, or an HTML table.",
)
@click.option("-o", "--output", type=OUTPUT, help="Write to FILE instead of stdout.")
def table(spec: str, fmt: str, output: str | None) -> None:
    """Print the transition table of SPEC: one row per transition, all eleven columns."""
    from ..review import table as tables
    from ..spec.validate import load_spec

    loaded = load_spec(spec)
    text = tables.to_markdown(loaded) if fmt == "md" else tables.to_html(loaded)
    write_output(output, text.encode("utf-8"))


@click.command()
@click.argument("spec", type=click.Path(dir_okay=False))
@click.option(
    "--view",
    type=click.Choice(DIAGRAM_VIEWS),
    default="states",
    show_default=True,
    help="states: the state graph. crash-windows: each effect row's durable steps, the four "
    "windows a crash can fall into and each one's recovery. saga: the forward effects with "
    "their undo, and the undo path.",
)
@click.option(
    "--effect",
    metavar="NAME",
    help="With --view crash-windows: only the rows that perform effect NAME, or the steps "
    "of compensating effect NAME.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(DIAGRAM_TEXT_FORMATS + DIAGRAM_IMAGE_FORMATS),
    help="dot or mermaid: text (no Graphviz needed). svg, png or pdf: drawn by Graphviz's dot, "
    "written to -o FILE. Default: from FILE's suffix, else dot.",
)
@click.option("-o", "--output", type=OUTPUT, help="Write to FILE (required for svg, png, pdf).")
def diagram(spec: str, view: str, effect: str | None, fmt: str | None, output: str | None) -> None:
    """Draw SPEC for review: its states, its crash windows, or its saga.

    \b
      ratchet diagram specs/refund.yaml --view crash-windows --format png -o crash.png
      ratchet diagram specs/booking.yaml --view saga --format mermaid

    The spec must be valid, except that --view crash-windows also draws the effect rows that
    validation flags as unsafe to crash in (E501 to E505, E513, E516, W517): they are drawn in
    red with their codes, the findings are printed on stderr, and when any is an error (an E
    code) the exit status is 1.
    """
    from ..review.diagram import draw as diagrams

    with hinted("--format"):
        fmt = diagrams.output_format(fmt, output)
    loaded, flagged = diagrams.load(spec, view)
    with hinted("--effect"):
        drawn = diagrams.build(loaded, view, effect=effect, diagnostics=flagged)
    write_output(output, diagrams.render(drawn, fmt))
    echo_lines((d.format() for d in flagged), err=True)
    if any(d.severity == "error" for d in flagged):
        sys.exit(EXIT_INVALID)


# -- running workflows ------------------------------------------------------------------------


@click.command()
@click.argument("spec_path", metavar="SPEC", type=click.Path(dir_okay=False, exists=True))
@click.option(
    "--example",
    "examples",
    multiple=True,
    help="Check this example (repeatable; default: every example of the spec).",
)
@click.option(
    "--case",
    metavar="EXAMPLE:EFFECT:WINDOW:FAULT",
    help="Run one case (the command printed for a failing case).",
)
@click.option(
    "--kill",
    is_flag=True,
    help="Crash in a real child process killed with SIGKILL, not in-process (slower).",
)
@click.option(
    "--compare",
    type=click.Choice(["naive"]),
    help="Also run every case with the "
    "naive strategy (a new operation ID per attempt, no reconcile), side by side.",
)
@click.option(
    "--results",
    "results_path",
    metavar="FILE",
    help="Also write each case's result as a JSON line to FILE ('-': stdout, instead of the "
    "table) the moment the case ends, so that a stopped check leaves what it found.",
)
@click.option(
    "--migrate-to",
    "migrate_to",
    metavar="NEW",
    type=click.Path(dir_okay=False, exists=True),
    help="Check instead the migration of SPEC's runs to version NEW: ratchet migrate's apply "
    "and rollback, killed at each commit and raced at each run, on runs of each example left "
    "at every place a migration can find one.",
)
@click.option(
    "--mapping",
    metavar="FILE",
    type=click.Path(dir_okay=False, exists=True),
    help="With --migrate-to: the mapping file the migration moves runs by.",
)
@with_options("bindings", "json")
def check(
    spec_path: str,
    examples: tuple[str, ...],
    case: str | None,
    kill: bool,
    compare: str | None,
    results_path: str | None,
    migrate_to: str | None,
    mapping: str | None,
    how: How,
) -> None:
    """Run every crash window of every effect for real, and prove no effect happens twice.

    For each example, each effect it reaches (forward and compensating), each crash window
    (none, before-request, in-flight, response-lost, receipt-stored) and each fault (none,
    timeout_before_write, timeout_after_write, unavailable, refuse, malformed, slow_reply, and
    each ambiguous fault paired with lookup_fails on the same effect): a fresh store and practice
    world, a crash at that window, a resume to the end, and the invariants checked. Exit 1 if
    Ratchet's protocol breaks any (with the command that reproduces the case); violations of
    the naive strategy under --compare are the point of the comparison, not failures. Adapters
    the binding binds to http go through the HTTP adapter to the case's practice world, served
    on 127.0.0.1 (never to the host the binding names).

    With --migrate-to NEW, the migration of SPEC's runs to NEW is checked instead: for each
    example, runs left at its first decision, approved, at each crash window of each effect,
    and ended; ratchet migrate NEW --apply --only-ready, then its rollback, each killed as each
    of its commits is sent and once it is done (commit-K, after), and raced by another process
    between reading each run and writing it (raced:KEY). After each, the migration is run
    again and every run carried to its end; exit 1 if any run is lost, half-migrated, moved
    from where it no longer stood, makes an effect twice, has an approval consumed under another
    version than it was given under, or loses a compensation.

    \b
    Examples:
      ratchet check specs/refund.yaml --kill
      ratchet check specs/refund.yaml --migrate-to refund-v2.yaml --kill
    """
    if migrate_to is not None:
        _check_migration(
            spec_path, migrate_to, mapping, examples, case, kill, compare, results_path, how
        )
        return
    if mapping is not None:
        raise click.BadParameter("goes with --migrate-to NEW", param_hint="--mapping")
    from ..check import cases as checks
    from ..check import report
    from ..check.plan import plan

    if how.as_json and results_path == "-":
        raise click.BadParameter(
            "stdout holds one of them: --json or --results -", param_hint="--results"
        )
    strategies: tuple[Strategy, ...] = ("ratchet", "naive") if compare else ("ratchet",)
    planned = plan(spec_path, how.bindings, examples, case, strategies, hint=hinted, say=say)
    spec, text, wire, selected = planned.spec, planned.text, planned.wire, planned.selected
    compared = compare is not None
    table = not how.as_json and results_path != "-"  # else stdout holds JSON only
    if table:
        if wire is not None:
            click.echo(f"adapters: {wire.describe()}")
        click.echo(report.check_header(compared))
    # the rows stream as cases end; the bar only where they do not show (stdout not a terminal)
    shown = sys.stderr.isatty() and (not table or not sys.stdout.isatty())
    results, stopped = run_checks(
        checks.run_cases(spec, text, selected, kill=kill, wire=wire),
        len(selected),
        len(strategies),
        results_path,
        (lambda pair: click.echo(report.check_row(pair, compared))) if table else None,
        sys.stderr if shown else io.StringIO(),
    )
    failed = report.failed_cases(results)
    if how.as_json:
        emit_json(report.check_json(spec_path, kill, results, wire) | {"stopped": stopped})
    else:  # the tally under the table, or on stderr under JSON lines
        click.echo(
            report.check_tally(results, len(strategies), kill, compared, wire), err=not table
        )
        if report.slowest(results):
            click.echo(report.slowest(results), err=not table)
        echo_lines(report.violation_lines(failed, spec_path, kill, wire), err=True)
    if stopped:
        say(f"ratchet: stopped after {len(results)} of {len(selected)} run(s): see above")
        sys.exit(130)
    sys.exit(EXIT_INVALID if failed or planned.findings else EXIT_OK)  # an invalid spec fails too


def _check_migration(
    spec_path: str,
    new_path: str,
    mapping_path: str | None,
    examples: tuple[str, ...],
    case: str | None,
    kill: bool,
    compare: str | None,
    results_path: str | None,
    how: How,
) -> None:
    """``ratchet check SPEC --migrate-to NEW``: the migration's cases, as ``check`` runs its
    own (a table streamed, or JSON lines; a progress bar; the tally; the failed cases)."""
    from ..check import report
    from ..check.migration import MigrationCheck, load_versions, run_cases
    from ..check.plan import examples_to_check

    if how.as_json and results_path == "-":
        raise click.BadParameter(
            "stdout holds one of them: --json or --results -", param_hint="--results"
        )
    if compare is not None:
        raise click.BadParameter(
            "the naive strategy is never migrated: no --compare with --migrate-to",
            param_hint="--compare",
        )
    if how.bindings is not None:
        raise click.BadParameter(
            "a migration check runs each run against its own practice world in-process: no "
            "--bindings with --migrate-to",
            param_hint="--bindings",
        )
    versions, findings = load_versions(spec_path, new_path, mapping_path, hint=hinted)
    for finding in findings:
        say(f"{finding.format()} (checking anyway, to show what it causes)")
    with hinted("--example"):
        chosen = examples_to_check(versions.old, examples)
    table = not how.as_json and results_path != "-"
    with MigrationCheck(versions, chosen) as checking:
        with hinted("--case"):
            selected = [checking.case_named(case)] if case else checking.cases()
        if table:
            click.echo(report.migration_intro(versions, new_path, mapping_path))
            click.echo(report.MIGRATION_HEADER)
        shown = sys.stderr.isatty() and (not table or not sys.stdout.isatty())
        results, stopped = run_checks(
            run_cases(checking, selected, kill=kill),
            len(selected),
            1,
            results_path,
            (lambda pair: click.echo(report.migration_row(pair["ratchet"]))) if table else None,
            sys.stderr if shown else io.StringIO(),
        )
    failed = [r for r in results if not r.ok]
    if how.as_json:
        emit_json(
            report.migration_json(spec_path, new_path, mapping_path, kill, results)
            | {"stopped": stopped}
        )
    else:
        click.echo(report.migration_tally(results, kill), err=not table)
        echo_lines(
            report.migration_violations(failed, spec_path, new_path, mapping_path, kill), err=True
        )
    if stopped:
        say(f"ratchet: stopped after {len(results)} of {len(selected)} case(s): see above")
        sys.exit(130)
    sys.exit(EXIT_INVALID if failed or findings else EXIT_OK)


#: The commands, as :mod:`.main` adds them to the group.
COMMANDS = (validate, schema, table, diagram, check)
