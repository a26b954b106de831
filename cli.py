"""The ``ratchet`` command line: a thin shell that parses, calls the library, and formats.

Over 500 lines because it is the whole command line but its serving commands: one click command
per verb, each with the ``--help`` text that teaches it; everything else is the library's (the
options and output helpers the commands share are in ``ratchet_runner.cli_options``; ``worker``,
``serve``, ``token`` and ``practice serve`` are in ``ratchet_runner.cli_serving``). A command
imports the library modules it uses when it runs, so that ``ratchet --version`` and every
``--help`` import no spec machinery, store or diagram (docs/performance.md, "Starting the
command").

Exit statuses: 0 success · 1 the spec is invalid (or, with ``--strict``, has warnings), or the
request was refused (an approval, a role, a run that cannot take that step) · 2 usage error ·
3 internal error · 4 the run moved on (another process changed it first) · 5 another input for a
business key that already names a run (nothing was written). With ``--json`` only JSON is
printed on stdout; messages go to stderr.
"""

from __future__ import annotations

import io
import os
import sys
from typing import TYPE_CHECKING, Any

import click

from ratchet_runner import __version__
from ratchet_runner.adapters.practice_faults import FAULT_KINDS, parse_fault
from ratchet_runner.cli_options import (
    BINDINGS_OPTION,
    JSON_OPTION,
    LIMIT,
    OUTPUT,
    RUN_COMMAND,
    How,
    checked,
    command_runner,
    drive,
    echo_lines,
    emit_json,
    finite_seconds,
    hinted,
    named,
    not_utf8,
    report_result,
    run_checks,
    say,
    show,
    show_usage_error,
    with_options,
    world_fixture,
    write_output,
)
from ratchet_runner.cli_serving import practice, serve_command, token_command, worker
from ratchet_runner.errors import RatchetError
from ratchet_runner.settings import (
    DIAGRAM_IMAGE_FORMATS,
    DIAGRAM_TEXT_FORMATS,
    DIAGRAM_VIEWS,
    OPERATOR_ACTIONS,
    RUN_STATUSES,
    json_object,
)

if TYPE_CHECKING:  # the run commands import the store and the runner only when they run
    from ratchet_runner.review.naive import Strategy

EXIT_OK, EXIT_INVALID, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="ratchet")
def cli() -> None:
    """Ratchet runs workflows whose steps change the outside world, and makes each approved
    change happen exactly once.

    Workflows are YAML transition tables (see specs/). Start with:

    \b
      ratchet validate specs/*.yaml     check specs before they run
      ratchet table specs/refund.yaml   the transition table, for a pull request
      ratchet schema > spec.schema.json the JSON Schema editors autocomplete from
      ratchet diagram specs/refund.yaml --view crash-windows -o crash.svg
      ratchet check specs/refund.yaml   run every crash window, prove no duplicate
      ratchet run specs/refund.yaml --example T-90104   run a workflow
      ratchet trace RUN                 what happened, event by event

    RUN is a run ID (run_...) or, when only one run has it, a business key such as T-90104.

    The store is SQLite at .ratchet/ratchet.db (set RATCHET_HOME to move it, or --db /
    RATCHET_DB to use PostgreSQL: postgresql+psycopg://USER@HOST/DB). The practice world,
    which stands in for payment, warehouse and travel providers, is .ratchet/practice.db.
    """


for _serving in (worker, serve_command, token_command, practice):  # ratchet_runner.cli_serving
    cli.add_command(_serving)


@cli.command()
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
    from ratchet_runner.binding_check import Checker
    from ratchet_runner.review import views

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


@cli.command()
def schema() -> None:
    """Print the JSON Schema (draft-07) that specs are validated against.

    Point your editor at it for autocompletion and hover help; the shipped specs start with

    \b
      # yaml-language-server: $schema=../runner/spec/spec.schema.json
    """
    from ratchet_runner.spec.schema import spec_schema_text

    click.echo(spec_schema_text(), nl=False)


@cli.command()
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
    from ratchet_runner.review import table as tables
    from ratchet_runner.spec.validate import load_spec

    loaded = load_spec(spec)
    text = tables.to_markdown(loaded) if fmt == "md" else tables.to_html(loaded)
    write_output(output, text.encode("utf-8"))


@cli.command()
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
    from ratchet_runner.review.diagram import draw as diagrams

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


@cli.command()
@click.argument("spec_path", metavar="SPEC", type=click.Path(dir_okay=False))
@click.option(
    "--input",
    "input_path",
    type=click.Path(dir_okay=False, exists=True),
    help="The run's input: a JSON or YAML file.",
)
@click.option("--example", help="Use the spec's named example (its input and practice world).")
@click.option(
    "--world",
    "world_path",
    type=click.Path(dir_okay=False, exists=True),
    help="Seed the practice world from FILE (JSON or YAML, as an example's world: orders, "
    "stock, faults; see docs/reference/adapters.md) when the run is created; with --example, "
    "instead of the example's world.",
)
@click.option(
    "--fault",
    "faults",
    multiple=True,
    metavar="EFFECT:KIND",
    help=f"Inject a fault into EFFECT's next call: {', '.join(FAULT_KINDS)}. Repeatable.",
)
@click.option(
    "--naive",
    is_flag=True,
    help="DEMONSTRATION ONLY: a new operation ID on every attempt and no reconcile, "
    "as a hand-rolled retry loop does. Shows how duplicates happen.",
)
@with_options("interrupt", "leave", *RUN_COMMAND)
def run(
    spec_path: str,
    input_path: str | None,
    example: str | None,
    world_path: str | None,
    faults: tuple[str, ...],
    naive: bool,
    how: How,
) -> None:
    """Start a run of SPEC and drive it until it waits, ends or needs a person.

    The input comes from --input FILE or --example NAME; the practice world from the example,
    or from --world FILE. Starting the same business key again with the same input finds the
    existing run and drives it on; it never makes a second run (or a second change). Another
    input for that business key is refused, with nothing written (R409, exit status 5).

    A spec the binding file does not cover (an adapter unbound, an operation or lookup not
    implemented) is refused before the run is created.

    \b
    Example:
      ratchet run specs/refund.yaml --example T-90104
      ratchet approve RUN --as agent-7 --role agent
      ratchet trace RUN
    """
    from pathlib import Path

    from ratchet_runner.review import views
    from ratchet_runner.session import Session
    from ratchet_runner.spec.loader import load_file
    from ratchet_runner.spec.validate import load_spec

    if (input_path is None) == (example is None):
        raise click.UsageError("give exactly one of --input FILE and --example NAME")
    spec = load_spec(spec_path)
    text = Path(spec_path).read_text(encoding="utf-8")
    with hinted("--example"):
        chosen = spec.example(example) if example is not None else None
    with hinted("--fault"):
        parsed = [parse_fault(spec.effects, f) for f in faults]
    world = world_fixture(world_path, spec.effects) if world_path else None
    if world is None and chosen is not None:
        world = chosen.world
    if naive:
        say(views.NAIVE_WARNING)
    from ratchet_runner.engine import commands

    with Session(how.db, bindings=how.bindings, spec=spec_path) as session:
        if naive and not session.store.is_practice():  # it makes duplicates on purpose
            raise click.BadParameter(
                "the naive strategy runs only on a practice store: it makes duplicates on "
                "purpose, to show how they happen",
                param_hint="--naive",
            )
        runner = command_runner(session, how.interrupt, naive)
        data: dict[str, Any] = (
            chosen.input if chosen is not None else load_file(str(input_path)).data
        )
        prepare = session.practice_setup(world, parsed, say)
        result, created = commands.start(
            runner,
            spec,
            text,
            data,
            lease_seconds=how.lease_seconds,
            before_drive=prepare,
            drive=not how.leave,
        )
        headline = "" if created else f"run {result.run.id} already existed for this business key"
        report_result(runner, result, how, "start", headline)
        for effect, kind in dict.fromkeys(f for f in session.world.armed() if f in parsed):
            say(
                f"note: --fault {effect}:{kind} has met no call yet: it waits for {effect}'s "
                "next call, in whichever run makes it (ratchet reset disarms it)"
            )


def _decide(
    run_id: str, decision: str, actor: str, role: str | None, reason: str | None, how: How
) -> None:
    from ratchet_runner.engine import commands

    drive(
        how, "decision", commands.decide, run_id, decision, actor, role, reason, drive=not how.leave
    )


@cli.command()
@click.argument("run_id", metavar="RUN")
@click.option("--as", "actor", required=True, callback=named(), help="Who approves (recorded).")
@click.option(
    "--role",
    required=True,
    callback=named(),
    help="The approver's role; the spec lists who may.",
)
@with_options("interrupt", "leave", *RUN_COMMAND)
def approve(run_id: str, actor: str, role: str, how: How) -> None:
    """Approve the action RUN is waiting for, then drive the run on.

    The approval is bound to a digest of the exact arguments shown; if they change, it no
    longer counts. A role the spec does not allow is refused with no change. The command holds
    the run's lease while it records the approval and makes the call, so a worker never calls
    for the same run meanwhile; the output says what happened after the approval ("then: ...")
    when the run did not simply go on.
    """
    _decide(run_id, "approve", actor, role, None, how)


@cli.command()
@click.argument("run_id", metavar="RUN")
@click.option("--as", "actor", required=True, callback=named(), help="Who rejects (recorded).")
@click.option("--reason", required=True, help="Why (recorded, shown in the trace).")
@click.option(
    "--role", callback=named(), help="The decider's role, checked against the spec when given."
)
@with_options("leave", *RUN_COMMAND)
def reject(run_id: str, actor: str, reason: str, role: str | None, how: How) -> None:
    """Reject the action RUN is waiting for. Nothing is executed."""
    _decide(run_id, "reject", actor, role, reason, how)


@cli.command()
@click.argument("run_id", metavar="RUN")
@with_options("interrupt", *RUN_COMMAND)
def resume(run_id: str, how: How) -> None:
    """Drive RUN on from where it stopped (after a crash, an interrupt, or a fix).

    A pending operation with a call on record is reconciled before anything else, so a resume
    never repeats a change. The command holds the run's lease while it works; a run that
    another live process (a worker, another command) holds is left to it, and the output says
    who carries it on (exit status 0). A run held by a process that died is taken over once
    that process's lease has run out.
    """
    from ratchet_runner.engine import commands

    drive(how, "resume", commands.resume, run_id)


@cli.command("runs")
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
    callback=finite_seconds,
    help="With --stuck: seconds without progress that count as stuck.",
)
@with_options("db", "json")
def runs_command(status: str | None, limit: int, stuck: bool, older_than: float, how: How) -> None:
    """List runs, newest first (or, with --stuck, the ones nobody is moving)."""
    from ratchet_runner.review import views
    from ratchet_runner.session import Session

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


@cli.command("status")
@with_options("db", "json")
def status_command(how: How) -> None:
    """Runs by status, the leases workers hold (owner, how long held, time left by the
    database's clock), and the runs whose lease expired."""
    from ratchet_runner.review import views
    from ratchet_runner.session import Session

    with Session(how.db) as session:
        now = session.clock.now()
        counts, leases = session.store.status_counts(), session.store.leases()
    show(
        how.as_json,
        views.status_json(counts, leases, now),
        lambda: views.status_lines(counts, leases, now),
    )


@cli.command()
@click.argument("run_id", metavar="RUN")
@with_options("db", "json")
def trace(run_id: str, how: How) -> None:
    """Show RUN's history, one line per event: approval, write-ahead record, call, timeout,
    reconcile found / not found, receipt, move."""
    from ratchet_runner.review import trace as traces
    from ratchet_runner.review import views
    from ratchet_runner.session import Session

    with Session(how.db) as session:
        found = session.store.resolve(run_id)
        history = session.store.history(found.id)
    show(how.as_json, views.trace_json(found, history), lambda: traces.lines(found, history))


@cli.command()
@JSON_OPTION
def effects(as_json: bool) -> None:
    """List the changes in the practice database, with their operation IDs and call counts."""
    from ratchet_runner.review import views
    from ratchet_runner.session import Session

    with Session() as session:
        changes, calls = session.world.changes(), session.world.calls()
    if as_json:
        emit_json(views.effects_json(changes, calls))
        return
    if not changes:
        say("no changes in the practice database")
    echo_lines(views.effects_lines(changes))
    say(views.effects_tally(changes, calls))


@cli.command()
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
    from ratchet_runner.review import views
    from ratchet_runner.session import Session

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


@cli.command("signal")
@click.argument("run_id", metavar="RUN")
@click.argument("event")
@click.option(
    "--id",
    "signal_id",
    required=True,
    callback=named(),
    help="The signal's own ID: the same ID twice is delivered once.",
)
@click.option(
    "--data",
    default="{}",
    callback=checked(json_object),
    help="A JSON object the row's guard sees as `signal`.",
)
@click.option(
    "--spec-version",
    type=click.IntRange(min=1),
    default=None,
    help="The spec version the sender means: a run pinned to another version refuses it.",
)
@click.option(
    "--to",
    "to_url",
    metavar="URL",
    help="Send it as a signed webhook to URL (a 'ratchet serve' /hooks/SENDER) instead of "
    "writing it to the store; signed with the secret(s) in --secret-env.",
)
@click.option(
    "--secret-env",
    metavar="VAR",
    default="RATCHET_WEBHOOK_SECRET",
    show_default=True,
    help="With --to: the variable holding the sender's whsec_ secret(s).",
)
@with_options("leave", *RUN_COMMAND)
def signal_command(
    run_id: str,
    event: str,
    signal_id: str,
    data: Any,
    spec_version: int | None,
    to_url: str | None,
    secret_env: str,
    how: How,
) -> None:
    """Send EVENT to a paused RUN, once per --id.

    A signal the run's state does not take (or whose guard does not hold, or sent with
    --spec-version for another version than the run's) is refused with nothing changed, never
    queued. Two signals racing: exactly one moves the run; the other is told the run moved on
    (exit status 4). With --to, the signal goes to a service as a signed webhook (Standard
    Webhooks; the body {"run", "event", "data"}), as a provider would send it.
    """
    from ratchet_runner.engine import commands

    if to_url is not None:
        from ratchet_runner.serve.client import send_signed

        send_signed(to_url, secret_env, run_id, event, signal_id, data, how.as_json)
        return

    drive(
        how,
        "signal",
        commands.signal,
        run_id,
        event,
        signal_id,
        data,
        spec_version,
        drive=not how.leave,
    )


@cli.command("ops")
@click.argument("action", type=click.Choice(OPERATOR_ACTIONS))
@click.argument("run_id", metavar="RUN")
@click.option(
    "--as", "actor", required=True, callback=named(), help="Who acts (recorded in the history)."
)
@click.option("--role", required=True, callback=named(), help="An operator role the spec declares.")
@click.option("--note", help="Why (recorded).")
@with_options(*RUN_COMMAND)
def ops_command(
    action: str, run_id: str, actor: str, role: str, note: str | None, how: How
) -> None:
    """Operator controls: pause, resume, cancel, retry, reconcile or compensate RUN.

    \b
      pause       stop taking steps (timers still record; resume picks up)
      resume      undo a pause and drive the run on
      cancel      end the run without further effects (compensate first if needed)
      retry       grant a failed effect a fresh budget; same operation ID, reconcile first
      reconcile   ask the provider about an unknown outcome; found: the run goes on
      compensate  undo the completed effects, newest first (again, after a failed undo)

    Each is authorised by the spec's operators.roles and recorded in the run's history; an
    unauthorised call changes nothing.
    """
    from ratchet_runner.engine import commands

    drive(how, "operator", commands.operate, run_id, action, actor, role, note)


@cli.command("queue")
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
    from ratchet_runner.engine.operator_queue import decisions, queue
    from ratchet_runner.review import views
    from ratchet_runner.review.decisions import decision_lines
    from ratchet_runner.session import Session

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


@cli.command()
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
@with_options("bindings", "json")
def check(
    spec_path: str,
    examples: tuple[str, ...],
    case: str | None,
    kill: bool,
    compare: str | None,
    results_path: str | None,
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
    """
    from ratchet_runner.review import check as checks
    from ratchet_runner.review import views
    from ratchet_runner.review.check_plan import plan

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
        click.echo(views.check_header(compared))
    # the rows stream as cases end; the bar only where they do not show (stdout not a terminal)
    shown = sys.stderr.isatty() and (not table or not sys.stdout.isatty())
    results, stopped = run_checks(
        checks.run_cases(spec, text, selected, kill=kill, wire=wire),
        len(selected),
        len(strategies),
        results_path,
        (lambda pair: click.echo(views.check_row(pair, compared))) if table else None,
        sys.stderr if shown else io.StringIO(),
    )
    failed = views.failed_cases(results)
    if how.as_json:
        emit_json(views.check_json(spec_path, kill, results, wire) | {"stopped": stopped})
    else:  # the tally under the table, or on stderr under JSON lines
        click.echo(views.check_tally(results, len(strategies), kill, compared, wire), err=not table)
        if views.slowest(results):
            click.echo(views.slowest(results), err=not table)
        echo_lines(views.violation_lines(failed, spec_path, kill, wire), err=True)
    if stopped:
        say(f"ratchet: stopped after {len(results)} of {len(selected)} run(s): see above")
        sys.exit(130)
    sys.exit(EXIT_INVALID if failed or planned.findings else EXIT_OK)  # an invalid spec fails too


def main(argv: list[str] | None = None) -> None:
    """Entry point: no traceback ever reaches the user (each command's session has closed what
    it opened by the time an error reaches here). Arguments that are not UTF-8 are refused
    before any is read (R206)."""
    arguments = sys.argv[1:] if argv is None else argv
    try:
        refused = not_utf8(arguments)
        if refused is not None:
            raise refused
        cli.main(args=arguments, prog_name="ratchet", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        show_usage_error(exc)  # a malformed command line: Error: R206 ...
        sys.exit(EXIT_USAGE if isinstance(exc, click.UsageError) else exc.exit_code)
    except RatchetError as exc:  # its code and message, or a spec's diagnostics
        echo_lines(exc.report(), err=True)
        sys.exit(exc.exit_status)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # the last line of defence
        if os.environ.get("RATCHET_DEBUG"):
            raise
        click.echo(
            f"ratchet: internal error: {type(exc).__name__}: {exc} "
            "(set RATCHET_DEBUG=1 to see the traceback, and please report it)",
            err=True,
        )
        sys.exit(EXIT_INTERNAL)


if __name__ == "__main__":
    main()
