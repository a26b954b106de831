"""The ``ratchet`` command line: a thin shell that parses, calls the library, and formats.

Exit statuses: 0 success · 1 the spec is invalid (or, with ``--strict``, has warnings), or the
request was refused (an approval, a role, a run that cannot take that step) · 2 usage error ·
3 internal error · 4 the run moved on (another process changed it first). With ``--json`` only
JSON is printed on stdout; messages go to stderr.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ratchet_runner.adapters.practice import (
    FAULT_KINDS,
    PRACTICE_SERVICES,
    PracticeAdapter,
    PracticeWorld,
)
from ratchet_runner.errors import RatchetError, SpecError, UsageError, VersionConflict
from ratchet_runner.review import table as tables
from ratchet_runner.review.diagram import draw as diagrams
from ratchet_runner.settings import INTERRUPT_POINTS, OPERATOR_ACTIONS, home
from ratchet_runner.spec.loader import load_file
from ratchet_runner.spec.schema import spec_schema_text
from ratchet_runner.spec.validate import Report, load_spec, validate_path

if TYPE_CHECKING:  # the run commands import the store and the runner only when they run
    from ratchet_runner.clock import Clock
    from ratchet_runner.engine.runner import Runner
    from ratchet_runner.spec.model import Adapter as AdapterSpec
    from ratchet_runner.store.store import RunRecord, Store

EXIT_OK, EXIT_INVALID, EXIT_USAGE, EXIT_INTERNAL, EXIT_CONFLICT = 0, 1, 2, 3, 4


def _expand(paths: tuple[str, ...]) -> Iterator[tuple[Path, str]]:
    for given in paths:
        path = Path(given)
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml"))
            for p in found:
                yield p, str(p)
        else:
            yield path, given


def _emit_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="ratchet-runner", prog_name="ratchet")
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


@cli.command()
@click.argument("specs", nargs=-1, required=True, metavar="SPEC...")
@click.option("--strict", is_flag=True, help="Fail on warnings too (W codes), not only errors.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
@click.option("-q", "--quiet", is_flag=True, help="Print findings only, no summary.")
def validate(specs: tuple[str, ...], strict: bool, as_json: bool, quiet: bool) -> None:
    """Check spec files before they run.

    Each SPEC is a YAML file or a directory of them. Every problem is printed as

    \b
      FILE:LINE:COL: CODE message

    sorted by position; E codes are errors, W codes warnings (docs/reference/lint-codes.md
    explains each with a failing and a fixed example). Exit status: 0 valid, 1 invalid (with
    --strict, also when there are warnings), 2 usage error.
    """
    reports: list[Report] = []
    crashed: list[str] = []
    for path, name in _expand(specs):
        try:
            reports.append(validate_path(path, name))
        except Exception as exc:  # a bug; report it and go on with the other files
            if os.environ.get("RATCHET_DEBUG"):
                raise
            crashed.append(name)
            click.echo(
                f"ratchet: internal error validating {name}: {type(exc).__name__}: {exc} "
                "(please report it)",
                err=True,
            )
    if not reports and not crashed:
        raise click.UsageError("no .yaml or .yml files found in the given directories")
    failed = [r for r in reports if not r.ok(strict=strict)]
    if as_json:
        _emit_json(
            {
                "valid": not failed,
                "strict": strict,
                "files": [r.to_json(strict=strict) for r in reports],
            }
        )
    else:
        for report in reports:
            for diagnostic in report.diagnostics:
                click.echo(diagnostic.format())
        if not quiet:
            errors = sum(len(r.errors) for r in reports)
            warnings = sum(len(r.warnings) for r in reports)
            verdict = "invalid" if failed else "valid"
            if crashed:
                verdict = f"{len(crashed)} file(s) not checked (internal error)"
            click.echo(
                f"{len(reports)} file(s) checked: {errors} error(s), {warnings} warning(s): "
                f"{verdict}",
                err=True,
            )
    sys.exit(EXIT_INTERNAL if crashed else EXIT_INVALID if failed else EXIT_OK)


@cli.command()
def schema() -> None:
    """Print the JSON Schema (draft-07) that specs are validated against.

    Point your editor at it for autocompletion and hover help; the shipped specs start with

    \b
      # yaml-language-server: $schema=../runner/spec/spec.schema.json
    """
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
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, writable=True),
    help="Write to FILE instead of stdout.",
)
def table(spec: str, fmt: str, output: str | None) -> None:
    """Print the transition table of SPEC: one row per transition, all eleven columns."""
    loaded = load_spec(spec)
    text = tables.to_markdown(loaded) if fmt == "md" else tables.to_html(loaded)
    if output:
        try:
            Path(output).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise click.FileError(output, exc.strerror or str(exc)) from None
        click.echo(f"wrote {output}", err=True)
    else:
        click.echo(text, nl=False)


@cli.command()
@click.argument("spec", type=click.Path(dir_okay=False))
@click.option(
    "--view",
    type=click.Choice(diagrams.VIEWS),
    default="states",
    show_default=True,
    help="states: the state graph. crash-windows: each effect row's durable steps, the four "
    "windows a crash can fall into and each one's recovery. saga: the forward effects with "
    "their undo, and the undo path.",
)
@click.option(
    "--effect",
    metavar="NAME",
    help="With --view crash-windows: only the rows that perform effect NAME.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(diagrams.FORMATS),
    help="dot or mermaid: text (no Graphviz needed). svg, png or pdf: drawn by Graphviz's dot, "
    "written to -o FILE. Default: from FILE's suffix, else dot.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, writable=True),
    help="Write to FILE instead of stdout (required for svg, png and pdf).",
)
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
    fmt = fmt or diagrams.format_for(output) or "dot"
    if fmt in diagrams.IMAGE_FORMATS and not output:
        raise click.UsageError(
            f"--format {fmt} is drawn into a file: give -o FILE, or print text with --format dot "
            "or --format mermaid"
        )
    if effect is not None and view != "crash-windows":
        raise click.UsageError("--effect applies to --view crash-windows only")
    loaded, flagged = diagrams.load(spec, view)
    if effect is not None and effect not in diagrams.effect_names(loaded):
        performed = ", ".join(diagrams.effect_names(loaded)) or "none"
        raise click.BadParameter(
            f"no row of {spec} performs {effect!r}; the effects rows perform: {performed}",
            param_hint="--effect",
        )
    drawn = diagrams.build(loaded, view, effect=effect, diagnostics=flagged)
    if fmt in diagrams.IMAGE_FORMATS:
        data = diagrams.image(drawn, fmt)
    else:
        data = diagrams.text(drawn, fmt).encode("utf-8")
    if output:
        try:
            Path(output).write_bytes(data)
        except OSError as exc:
            raise click.FileError(output, exc.strerror or str(exc)) from None
        click.echo(f"wrote {output}", err=True)
    else:
        click.echo(data.decode("utf-8"), nl=False)
    for diagnostic in flagged:
        click.echo(diagnostic.format(), err=True)
    if any(d.severity == "error" for d in flagged):
        sys.exit(EXIT_INVALID)


# -- running workflows ------------------------------------------------------------------------


def _kill_at(target: str | None, leases: dict[str, str]) -> Callable[[str, str], None] | None:
    """The ``--interrupt`` hook: SIGKILL this process at the point named. No call is in flight
    at any of the points, so the leases this process holds (``leases``: the runner's) are given
    back first, and ``ratchet resume`` can go on at once; a real crash leaves them behind, and
    others wait until they run out."""
    if target is None:
        return None
    point, _, effect = target.partition(":")

    def interrupt(reached: str, reached_effect: str) -> None:
        if reached == point and effect in ("", reached_effect):
            click.echo(
                f"interrupted at {point} of {reached_effect}: the process ends here (SIGKILL)",
                err=True,
            )
            for store in _OPEN_STORES:
                for run_id, token in list(leases.items()):
                    with contextlib.suppress(Exception):
                        store.release(run_id, token)
            sys.stdout.flush()
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGKILL)

    return interrupt


def _check_interrupt(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    point = value.partition(":")[0]
    if point not in INTERRUPT_POINTS:
        raise click.BadParameter(f"{point!r} is not one of {', '.join(INTERRUPT_POINTS)}")
    return value


DB_OPTION = click.option(
    "--db",
    envvar="RATCHET_DB",
    metavar="URL",
    help="Store URL (default: sqlite:///.ratchet/ratchet.db; env RATCHET_DB).",
)
JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout.")


def _check_lease(_ctx: click.Context, _param: click.Parameter, value: float) -> float:
    from ratchet_runner.engine.lifecycle import validate_lease

    try:
        return validate_lease(value)
    except UsageError as exc:
        raise click.BadParameter(exc.message) from None


LEASE_OPTION = click.option(
    "--lease",
    "lease_seconds",
    type=float,
    default=30.0,
    show_default=True,
    envvar="RATCHET_LEASE",
    callback=_check_lease,
    metavar="SECONDS",
    help="How long this command leases the run while it changes it and drives it on (a "
    "heartbeat renews the lease; env RATCHET_LEASE). Workers cannot take the run meanwhile; if "
    "this process dies, they take it over once the lease has run out.",
)
INTERRUPT_OPTION = click.option(
    "--interrupt",
    metavar="POINT[:EFFECT]",
    callback=_check_interrupt,
    help="End the process at POINT of the next call (of EFFECT, if given), with no cleanup "
    "(SIGKILL), to practise recovery: before-write (call recorded, not sent), after-write (the "
    "provider made the change, the reply is lost), after-receipt (receipt stored). Then "
    "'ratchet resume RUN'.",
)


_OPEN_STORES: list[Store] = []


def _open_store(db: str | None) -> Store:
    """A store for this command; :func:`main` closes it (and its connections) at the end. The
    default store (no --db, no RATCHET_DB: SQLite under RATCHET_HOME, beside the practice world)
    is created as a practice store; a store named by URL is not (see ``reset --practice``)."""
    from ratchet_runner.store.store import Store

    store = Store(db, practice=db is None)
    _OPEN_STORES.append(store)
    return store


def _clock(store: Store) -> Clock:
    """This command's clock: RATCHET_NOW on a practice store (every event then records the real
    time beside it), else the system clock. RATCHET_NOW on another store is refused."""
    from ratchet_runner.clock import command_clock
    from ratchet_runner.store.store import redact

    clock, overridden = command_clock(os.environ, store.is_practice, redact(store.url))
    store.stamp_real_time = overridden
    return clock


def _session(
    db: str | None, interrupt: str | None = None, naive: bool = False
) -> tuple[Store, PracticeWorld, Runner]:
    from ratchet_runner.engine.runner import Runner

    store = _open_store(db)
    clock = _clock(store)
    world = PracticeWorld(home() / "practice.db")

    def adapter_for(adapter: AdapterSpec) -> PracticeAdapter:
        if adapter.kind not in PRACTICE_SERVICES:
            raise UsageError(
                f"adapter {adapter.name!r} is of kind {adapter.kind!r}, which has no "
                f"implementation yet; the practice world serves {', '.join(PRACTICE_SERVICES)}"
            )
        return world.adapter(adapter.kind)

    leases: dict[str, str] = {}
    runner = Runner(
        store,
        adapter_for,
        clock,
        interrupt=_kill_at(interrupt, leases),
        strategy="naive" if naive else "ratchet",
    )
    runner.leases = leases
    return store, world, runner


def _summary(runner: Runner, run: RunRecord) -> dict[str, Any]:
    from ratchet_runner.engine.approvals import pending_request

    request = pending_request(runner, run) if run.status == "waiting" else None
    queued = next(
        (e.data for e in reversed(runner.store.history(run.id)) if e.kind == "queued"), None
    )
    return {
        "run": run.id,
        "workflow": run.workflow,
        "business_key": run.business_key,
        "state": run.state,
        "status": run.status,
        "version": run.version,
        "waiting_for": request.to_json() if request else None,
        "operator_action": queued.get("operator_action")
        if queued and run.status == "needs_person"
        else None,
    }


def _show(summary: dict[str, Any], as_json: bool, headline: str = "") -> None:
    if as_json:
        _emit_json(summary)
        return
    if headline:
        click.echo(headline)
    click.echo(
        f"run {summary['run']} · {summary['workflow']} {summary['business_key']} · "
        f"{summary['state']} ({summary['status']})"
    )
    request = summary.get("waiting_for")
    if request:
        roles = ", ".join(request["roles"])
        click.echo(f"  waiting for a decision on {request['approval']}")
        click.echo(f"  action:  {request['action']}")
        click.echo(f"  who:     {roles}")
        click.echo(f"  digest:  {request['digest']}")
        click.echo(
            f"  approve: ratchet approve {summary['run']} --as NAME --role {request['roles'][0]}"
        )
        click.echo(f"  reject:  ratchet reject {summary['run']} --as NAME --reason TEXT")
    if summary.get("operator_action"):
        click.echo(f"  for a person: {summary['operator_action']}")
    if summary["status"] in ("done", "needs_person"):
        click.echo(f"  trace:   ratchet trace {summary['run']}")


def _read_input(path: str) -> dict[str, Any]:
    doc = load_file(path)
    data: dict[str, Any] = doc.data
    return data


def _parse_fault(spec_effects: dict[str, Any], text: str) -> tuple[str, str]:
    effect, _, kind = text.partition(":")
    if effect not in spec_effects:
        raise click.BadParameter(
            f"no effect {effect!r} (effects: {', '.join(spec_effects)})", param_hint="--fault"
        )
    if kind not in FAULT_KINDS:
        raise click.BadParameter(
            f"no fault {kind!r} (faults: {', '.join(FAULT_KINDS)})", param_hint="--fault"
        )
    return effect, kind


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
    "--fault",
    "faults",
    multiple=True,
    metavar="EFFECT:KIND",
    help="Inject a fault into EFFECT's next call: timeout_before_write, "
    "timeout_after_write, unavailable, refuse, malformed, lookup_fails, slow_reply, slow_commit. "
    "Repeatable.",
)
@INTERRUPT_OPTION
@LEASE_OPTION
@click.option(
    "--naive",
    is_flag=True,
    help="DEMONSTRATION ONLY: a new operation ID on every attempt and no reconcile, "
    "as a hand-rolled retry loop does. Shows how duplicates happen.",
)
@DB_OPTION
@JSON_OPTION
def run(
    spec_path: str,
    input_path: str | None,
    example: str | None,
    faults: tuple[str, ...],
    interrupt: str | None,
    lease_seconds: float,
    naive: bool,
    db: str | None,
    as_json: bool,
) -> None:
    """Start a run of SPEC and drive it until it waits, ends or needs a person.

    The input comes from --input FILE or --example NAME. Starting the same business key again
    finds the existing run and drives it on; it never makes a second run (or a second change).

    \b
    Example:
      ratchet run specs/refund.yaml --example T-90104
      ratchet approve RUN --as agent-7 --role agent
      ratchet trace RUN
    """
    if (input_path is None) == (example is None):
        raise click.UsageError("give exactly one of --input FILE and --example NAME")
    spec = load_spec(spec_path)
    text = Path(spec_path).read_text(encoding="utf-8")
    if example is not None and example not in spec.examples:
        known = ", ".join(spec.examples) or "none"
        raise click.BadParameter(
            f"no example {example!r} (examples: {known})", param_hint="--example"
        )
    parsed = [_parse_fault(spec.effects, f) for f in faults]
    if naive:
        click.echo(
            "warning: --naive makes a new operation ID on every attempt and never "
            "reconciles; it exists to show how duplicates happen",
            err=True,
        )
    from ratchet_runner.engine import commands

    _, world, runner = _session(db, interrupt, naive)
    chosen = spec.examples[example] if example is not None else None
    data = chosen.input if chosen is not None else _read_input(str(input_path))

    def prepare(_started: RunRecord, created: bool) -> None:
        if created:
            if chosen is not None and chosen.world:
                world.seed(chosen.world)
        elif parsed:
            click.echo("note: the run already existed; --fault applies to its next calls", err=True)
        for effect, kind in parsed:
            world.add_fault(effect, kind)

    result, created = commands.start(
        runner, spec, text, data, lease_seconds=lease_seconds, before_drive=prepare
    )
    headline = "" if created else f"run {result.run.id} already existed for this business key"
    _report(runner, result, as_json, "start", headline)


def _report(
    runner: Runner, result: Any, as_json: bool, key: str | None, headline: str | None = None
) -> None:
    """Show a command's result: what it did (and what happened after), then the run."""
    summary = _summary(runner, result.run)
    if key is not None:
        summary[key] = result.to_json()
    lines = [result.message] if headline is None else ([headline] if headline else [])
    if result.then:
        lines.append(f"then: {result.then}")
    _show(summary, as_json, "\n".join(lines))


def _decide(
    run_id: str,
    decision: str,
    actor: str,
    role: str | None,
    reason: str | None,
    interrupt: str | None,
    lease_seconds: float,
    db: str | None,
    as_json: bool,
) -> None:
    from ratchet_runner.engine import commands

    _, _, runner = _session(db, interrupt)
    result = commands.decide(
        runner, run_id, decision, actor, role, reason, lease_seconds=lease_seconds
    )
    _report(runner, result, as_json, "decision")


@cli.command()
@click.argument("run_id", metavar="RUN")
@click.option("--as", "actor", required=True, help="Who approves (recorded).")
@click.option("--role", required=True, help="The approver's role; the spec lists who may.")
@INTERRUPT_OPTION
@LEASE_OPTION
@DB_OPTION
@JSON_OPTION
def approve(
    run_id: str,
    actor: str,
    role: str,
    interrupt: str | None,
    lease_seconds: float,
    db: str | None,
    as_json: bool,
) -> None:
    """Approve the action RUN is waiting for, then drive the run on.

    The approval is bound to a digest of the exact arguments shown; if they change, it no
    longer counts. A role the spec does not allow is refused with no change. The command holds
    the run's lease while it records the approval and makes the call, so a worker never calls
    for the same run meanwhile; the output says what happened after the approval ("then: ...")
    when the run did not simply go on.
    """
    _decide(run_id, "approve", actor, role, None, interrupt, lease_seconds, db, as_json)


@cli.command()
@click.argument("run_id", metavar="RUN")
@click.option("--as", "actor", required=True, help="Who rejects (recorded).")
@click.option("--reason", required=True, help="Why (recorded, shown in the trace).")
@click.option("--role", help="The decider's role, checked against the spec when given.")
@LEASE_OPTION
@DB_OPTION
@JSON_OPTION
def reject(
    run_id: str,
    actor: str,
    reason: str,
    role: str | None,
    lease_seconds: float,
    db: str | None,
    as_json: bool,
) -> None:
    """Reject the action RUN is waiting for. Nothing is executed."""
    _decide(run_id, "reject", actor, role, reason, None, lease_seconds, db, as_json)


@cli.command()
@click.argument("run_id", metavar="RUN")
@INTERRUPT_OPTION
@LEASE_OPTION
@DB_OPTION
@JSON_OPTION
def resume(
    run_id: str, interrupt: str | None, lease_seconds: float, db: str | None, as_json: bool
) -> None:
    """Drive RUN on from where it stopped (after a crash, an interrupt, or a fix).

    A pending operation with a call on record is reconciled before anything else, so a resume
    never repeats a change. The command holds the run's lease while it works; a run that
    another live process (a worker, another command) holds is left to it, and the output says
    who carries it on (exit status 0). A run held by a process that died is taken over once
    that process's lease has run out.
    """
    from ratchet_runner.engine import commands

    _, _, runner = _session(db, interrupt)
    result = commands.resume(runner, run_id, lease_seconds=lease_seconds)
    _report(runner, result, as_json, "resume")


@cli.command("runs")
@click.option(
    "--status",
    type=click.Choice(["running", "waiting", "done", "needs_person", "paused", "cancelled"]),
)
@click.option("--limit", default=50, show_default=True)
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
    help="With --stuck: seconds without progress that count as stuck.",
)
@DB_OPTION
@JSON_OPTION
def runs_command(
    status: str | None, limit: int, stuck: bool, older_than: float, db: str | None, as_json: bool
) -> None:
    """List runs, newest first (or, with --stuck, the ones nobody is moving)."""
    store = _open_store(db)
    if stuck:
        now = _clock(store).now()
        stalled = store.stuck(now, older_than)
        if as_json:
            _emit_json(
                [{**_run_json(r), "why": why, "lease_owner": r.lease_owner} for r, why in stalled]
            )
            return
        if not stalled:
            click.echo("no stuck runs", err=True)
        for r, why in stalled:
            owner = f" (owner {r.lease_owner})" if r.lease_owner else ""
            click.echo(
                f"{r.id:<22} {r.workflow:<10} {r.business_key:<14} {r.state:<16} {why}{owner}"
            )
        return
    found = store.list_runs(status, limit)
    if as_json:
        _emit_json([_run_json(r) for r in found])
        return
    if not found:
        click.echo("no runs", err=True)
        return
    click.echo(f"{'RUN':<22} {'WORKFLOW':<10} {'KEY':<14} {'STATE':<16} {'STATUS':<13} VERSION")
    for r in found:
        click.echo(
            f"{r.id:<22} {r.workflow:<10} {r.business_key:<14} {r.state:<16} "
            f"{r.status:<13} {r.version}"
        )


def _run_json(r: RunRecord) -> dict[str, Any]:
    return {
        "run": r.id,
        "workflow": r.workflow,
        "business_key": r.business_key,
        "state": r.state,
        "status": r.status,
        "version": r.version,
        "created_at": r.created_at,
        "updated_at": r.updated_at,
    }


@cli.command("status")
@DB_OPTION
@JSON_OPTION
def status_command(db: str | None, as_json: bool) -> None:
    """Runs by status, the leases workers hold (owner, how long held, time left by the
    database's clock), and the runs whose lease expired."""

    store = _open_store(db)
    now = _clock(store).now()
    counts = store.status_counts()
    leases = store.leases()

    def held(lease: dict[str, Any]) -> float | None:
        taken = lease["taken_at"]
        return None if taken is None else round(max(0.0, now - float(taken)), 1)

    if as_json:
        _emit_json(
            {
                "runs": counts,
                "leases": [
                    {
                        "run": lease["id"],
                        "workflow": lease["workflow"],
                        "business_key": lease["business_key"],
                        "state": lease["state"],
                        "owner": lease["lease_owner"],
                        "held_seconds": held(lease),
                        "seconds_left": round(float(lease["left"]), 1),
                        "expired": float(lease["left"]) < 0,
                    }
                    for lease in leases
                ],
            }
        )
        return
    click.echo("runs: " + (", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "none"))
    if not leases:
        click.echo("leases: none")
    for lease in leases:
        left = float(lease["left"])
        when = f"expired {-left:.0f} s ago" if left < 0 else f"{left:.0f} s left"
        age = held(lease)
        since = "" if age is None else f"held {age:.0f} s · "
        click.echo(
            f"lease  {lease['id']:<22} {lease['business_key']:<14} {lease['state']:<16} "
            f"{lease['lease_owner']} · {since}{when}"
        )


@cli.command()
@click.argument("run_id", metavar="RUN")
@DB_OPTION
@JSON_OPTION
def trace(run_id: str, db: str | None, as_json: bool) -> None:
    """Show RUN's history, one line per event: approval, write-ahead record, call, timeout,
    reconcile found / not found, receipt, move."""
    from ratchet_runner.review import trace as traces

    store = _open_store(db)
    found = store.resolve(run_id)
    history = store.history(found.id)
    if as_json:
        _emit_json(
            {
                **_run_json(found),
                "events": [
                    {"version": e.version, "kind": e.kind, "at": e.at, **e.data} for e in history
                ],
            }
        )
        return
    for line in traces.lines(found, history):
        click.echo(line)


@cli.command()
@JSON_OPTION
def effects(as_json: bool) -> None:
    """List the changes in the practice database, with their operation IDs and call counts."""
    world = PracticeWorld(home() / "practice.db")
    changes = world.changes()
    calls = world.calls()
    if as_json:
        _emit_json({"changes": [c.__dict__ for c in changes], "calls": calls})
        return
    if not changes:
        click.echo("no changes in the practice database", err=True)
    for c in changes:
        args = " ".join(str(v) for v in c.args.values())
        ids = [v for k, v in c.result.items() if k.endswith("_id")]
        result = next((v for v in ids if v not in c.args.values()), ids[0] if ids else "")
        click.echo(
            f"#{c.seq:<3} {c.service:<9} {c.operation:<12} {args:<40} -> {result}"
            f"  op {c.operation_id[:12]}"
        )
    made = sum(1 for c in calls if not c["operation"].startswith("lookup"))
    lookups = len(calls) - made
    click.echo(f"{len(changes)} change(s) · {made} call(s) · {lookups} lookup(s)", err=True)


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
@DB_OPTION
@JSON_OPTION
def reset(everything: bool, practice: bool, db: str | None, as_json: bool) -> None:
    """Empty the practice world (orders, changes, calls, faults); with --all, the store too;
    with --all --practice, declare that store a practice store."""
    if practice and not everything:
        raise click.UsageError(
            "--practice declares an emptied store a practice store: give it with --all"
        )
    PracticeWorld(home() / "practice.db").reset()
    if everything:
        store = _open_store(db)
        store.reset()
        if practice:
            store.mark_practice()
    if as_json:
        _emit_json(
            {
                "practice_world": "reset",
                "store": "emptied" if everything else "kept",
                **({"practice_store": True} if practice else {}),
            }
        )
    else:
        emptied = " and store emptied" if everything else ""
        declared = ", now a practice store" if practice else ""
        click.echo(f"practice world reset{emptied}{declared}", err=True)


@cli.command("signal")
@click.argument("run_id", metavar="RUN")
@click.argument("event")
@click.option(
    "--id",
    "signal_id",
    required=True,
    help="The signal's own ID: the same ID twice is delivered once.",
)
@click.option("--data", default="{}", help="A JSON object the row's guard sees as `signal`.")
@click.option(
    "--spec-version",
    type=click.IntRange(min=1),
    default=None,
    help="The spec version the sender means: a run pinned to another version refuses it.",
)
@LEASE_OPTION
@DB_OPTION
@JSON_OPTION
def signal_command(
    run_id: str,
    event: str,
    signal_id: str,
    data: str,
    spec_version: int | None,
    lease_seconds: float,
    db: str | None,
    as_json: bool,
) -> None:
    """Send EVENT to a paused RUN, once per --id.

    A signal the run's state does not take (or whose guard does not hold, or sent with
    --spec-version for another version than the run's) is refused with nothing changed, never
    queued. Two signals racing: exactly one moves the run; the other is told the run moved on
    (exit status 4).
    """
    from ratchet_runner.engine import commands

    try:
        payload = json.loads(data)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="--data") from None
    if not isinstance(payload, dict):
        raise click.BadParameter("must be a JSON object", param_hint="--data")
    _, _, runner = _session(db)
    result = commands.signal(
        runner, run_id, event, signal_id, payload, spec_version, lease_seconds=lease_seconds
    )
    _report(runner, result, as_json, "signal")


@cli.command()
@click.option("--once", is_flag=True, help="One pass, then exit (for cron).")
@click.option(
    "--concurrency",
    default=1,
    type=click.IntRange(min=1),
    show_default=True,
    help="Worker threads in this process (several processes on several machines "
    "may share one PostgreSQL store).",
)
@click.option(
    "--lease",
    "lease_seconds",
    type=float,
    default=30.0,
    show_default=True,
    callback=_check_lease,
    help="Seconds a claimed run stays leased without a heartbeat: a finite number above 0, "
    "longer than the longest effect timeout plus 1 s (a call is started only when the lease "
    "outlasts it).",
)
@click.option("--poll", default=1.0, show_default=True, help="Seconds to wait when idle.")
@DB_OPTION
@JSON_OPTION
def worker(
    once: bool, concurrency: int, lease_seconds: float, poll: float, db: str | None, as_json: bool
) -> None:
    """Fire due timers and advance runnable runs under leases until stopped, or --once.

    Runs are claimed with leases (FOR UPDATE SKIP LOCKED on PostgreSQL) that a heartbeat keeps
    alive and that expire by the database's clock; every commit is fenced by the lease, so a
    worker paused past its lease changes nothing when it wakes. Each timer fires once and never
    early. SIGTERM or Ctrl-C: finish the current step, release the leases, exit.
    """
    if once:
        from ratchet_runner.engine.lifecycle import worker_pass

        _, _, runner = _session(db)
        report = worker_pass(runner, lease_seconds=lease_seconds)
        if as_json:
            click.echo(json.dumps(report.to_json(), ensure_ascii=False))
            return
        for fired in report.fired:
            click.echo(f"timer  {fired.timer.event:<8} run {fired.timer.run_id} ({fired.outcome})")
        for moved in report.advanced:
            click.echo(f"run    {moved.id} -> {moved.state} ({moved.status})")
        for run_id_, error in report.failed:
            click.echo(f"failed {run_id_}: {error}", err=True)
        click.echo(
            f"{len(report.fired)} timer(s) fired, {len(report.advanced)} run(s) advanced", err=True
        )
        return
    from ratchet_runner.worker.pool import Pool

    # RATCHET_NOW on a store that is not a practice store is refused here, once. Otherwise the
    # pool opens the store itself: a worker started while the database is down waits for it.
    if os.environ.get("RATCHET_NOW"):
        _clock(_open_store(db))
    pool = Pool(
        lambda: _session(db)[2],
        concurrency=concurrency,
        lease_seconds=lease_seconds,
        poll=poll,
        log=lambda line: click.echo(line, err=True),  # store outages, unexpected errors
    )
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: pool.stop.set())
    click.echo(f"worker {pool.owner}: {concurrency} thread(s); SIGTERM or Ctrl-C stops", err=True)
    report = pool.run()
    summary = {
        "owner": pool.owner,
        "runs_advanced": report.advanced,
        "fenced": report.fenced,
        "timers_fired": report.timers,
        "failed": [{"run": r, "error": e} for r, e in report.failed],
        "store_outages": report.outages,
        "store_unreachable_seconds": round(report.unreachable_seconds, 2),
        "store_unreachable": report.unreachable,
    }
    if as_json:
        _emit_json(summary)
    else:
        outages = ""
        if report.outages:
            outages = (
                f"; the store was unreachable {report.outages} time(s), "
                f"{report.unreachable_seconds:.1f} s in all"
                + (", and still was when the worker stopped" if report.unreachable else "")
            )
        click.echo(
            f"stopped: {report.advanced} run(s) advanced, {report.timers} timer(s) "
            f"fired, {report.fenced} fenced{outages}",
            err=True,
        )


@cli.command("ops")
@click.argument("action", type=click.Choice(OPERATOR_ACTIONS))
@click.argument("run_id", metavar="RUN")
@click.option("--as", "actor", required=True, help="Who acts (recorded in the history).")
@click.option("--role", required=True, help="An operator role the spec declares.")
@click.option("--note", help="Why (recorded).")
@LEASE_OPTION
@DB_OPTION
@JSON_OPTION
def ops_command(
    action: str,
    run_id: str,
    actor: str,
    role: str,
    note: str | None,
    lease_seconds: float,
    db: str | None,
    as_json: bool,
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

    _, _, runner = _session(db)
    result = commands.operate(
        runner, run_id, action, actor, role, note, lease_seconds=lease_seconds
    )
    _report(runner, result, as_json, "operator")


@cli.command("queue")
@DB_OPTION
@JSON_OPTION
def queue_command(db: str | None, as_json: bool) -> None:
    """List the runs waiting for a person: what to do, how long they have waited, and the
    evidence (what was done, undone, left, and what failed)."""
    from ratchet_runner.engine.lifecycle import queue

    _, _, runner = _session(db)
    items = queue(runner)
    if as_json:
        _emit_json(items)
        return
    if not items:
        click.echo("nobody is needed: the queue is empty", err=True)
    for item in items:
        ev = item["evidence"]
        click.echo(
            f"{item['run']} · {item['workflow']} {item['business_key']} · {item['state']}"
            f" · waiting {_age(item['age_seconds'])}"
        )
        click.echo(f"  to do:  {item['operator_action']}")
        for label, key in (("done", "done"), ("undone", "undone")):
            if ev[key]:
                click.echo(f"  {label + ':':<7} " + ", ".join(e["effect"] for e in ev[key]))
        for left in ev["left"]:
            click.echo(f"  left:   {left['undo']} (undoes {left['effect']}; {left['status']})")
        for kept in ev["not_undoable"]:
            click.echo(f"  kept:   {kept['effect']} ({kept['undo']}: {kept['reason']})")
        for failed in ev["failed"]:
            click.echo(
                f"  failed: {failed['effect']} {failed['status']} after "
                f"{failed['attempts']} attempt(s): {failed['error']}"
            )


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


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
    "case_name",
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
@JSON_OPTION
def check(
    spec_path: str,
    examples: tuple[str, ...],
    case_name: str | None,
    kill: bool,
    compare: str | None,
    as_json: bool,
) -> None:
    """Run every crash window of every effect for real, and prove no effect happens twice.

    For each example, each effect it reaches (forward and compensating), each crash window
    (none, before-request, in-flight, response-lost, receipt-stored) and each fault (none,
    timeout_before_write, timeout_after_write, unavailable, refuse, malformed, slow_reply, and
    each ambiguous fault paired with lookup_fails on the same effect): a fresh store and practice
    world, a crash at that window, a resume to the end, and the invariants checked. Exit 1 if
    Ratchet's protocol breaks any (with the command that reproduces the case); violations of
    the naive strategy under --compare are the point of the comparison, not failures.
    """
    from ratchet_runner.review.check import FAULTS, WINDOWS, Case, cases, reproduce, run_cases

    report = validate_path(spec_path)
    if report.spec is None or any(not d.code.startswith(("E5", "W")) for d in report.errors):
        raise SpecError(report.errors or report.diagnostics)
    spec = report.spec
    for diagnostic in report.errors:
        click.echo(f"{diagnostic.format()} (checking anyway, to show what it causes)", err=True)
    text = Path(spec_path).read_text(encoding="utf-8")
    strategies: tuple[Any, ...] = ("ratchet", "naive") if compare else ("ratchet",)
    if case_name:
        parts = case_name.split(":")
        if (
            len(parts) != 4
            or parts[0] not in spec.examples
            or parts[1] not in spec.effects
            or parts[2] not in WINDOWS
            or parts[3] not in FAULTS
        ):
            raise click.BadParameter(
                f"expected EXAMPLE:EFFECT:WINDOW:FAULT with a known example and effect, a window "
                f"of {', '.join(WINDOWS)} and a fault of {', '.join(FAULTS)}",
                param_hint="--case",
            )
        selected = [Case(*parts, strategy=s) for s in strategies]  # type: ignore[arg-type]
    else:
        chosen = list(examples) or list(spec.examples)
        unknown = [e for e in chosen if e not in spec.examples]
        if unknown or not chosen:
            known = ", ".join(spec.examples) or "none"
            raise click.BadParameter(
                f"no example {unknown[0] if unknown else ''!r} (examples: {known})",
                param_hint="--example",
            )
        selected = cases(spec, text, chosen, strategies)
    show_progress = not as_json and sys.stderr.isatty()
    with (
        click.progressbar(length=len(selected), label="checking", file=sys.stderr, show_pos=True)
        if show_progress
        else _NoBar() as bar
    ):
        results = list(
            run_cases(spec, text, selected, kill=kill, progress=lambda _r: bar.update(1))
        )
    failed = [r for r in results if r.case.strategy == "ratchet" and not r.ok]
    if as_json:
        _emit_json(
            {
                "spec": spec_path,
                "kill": kill,
                "cases": len(results),
                "violations": sum(len(r.violations) for r in failed),
                "results": [r.to_json() for r in results],
            }
        )
    else:
        _check_table(results, compare is not None)
        naive_bad = sum(1 for r in results if r.case.strategy == "naive" and not r.ok)
        mode = "killed with SIGKILL" if kill else "in-process"
        click.echo(
            f"{len(selected) // len(strategies)} case(s), crashes {mode}: "
            f"{len(failed)} with violations under Ratchet's protocol"
            + (f"; {naive_bad} under the naive strategy" if compare else "")
        )
        for result in failed:
            click.echo(f"VIOLATION {result.case.name}: {'; '.join(result.violations)}", err=True)
            click.echo(f"  reproduce: {reproduce(spec_path, result.case, kill)}", err=True)
    sys.exit(EXIT_INVALID if failed else EXIT_OK)


class _NoBar:
    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *_: object) -> None:
        return None

    def update(self, _n: int) -> None:
        return None


def _verdict(result: Any) -> str:
    amount = f" {result.amount:.2f}" if result.amount is not None else ""
    verdict = (
        "ok"
        if result.ok
        else "DUPLICATE"
        if any("applied" in v or "times" in v for v in result.violations)
        else "VIOLATION"
    )
    return f"{result.changes} change(s){amount} · {result.calls} call(s) · {verdict}"


def _check_table(results: list[Any], compare: bool) -> None:
    by_case: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for result in results:
        c = result.case
        by_case.setdefault((c.example, c.effect, c.window, c.fault), {})[c.strategy] = result
    head = f"{'EXAMPLE':<16} {'EFFECT':<18} {'WINDOW':<15} {'FAULT':<21} {'RATCHET':<36}"
    click.echo(head + ("NAIVE" if compare else ""))
    for (example, effect, window, fault), pair in by_case.items():
        line = (
            f"{example:<16} {effect:<18} {window:<15} {fault:<21} {_verdict(pair['ratchet']):<36}"
        )
        if compare and "naive" in pair:
            line += _verdict(pair["naive"])
        click.echo(line.rstrip())


def main(argv: list[str] | None = None) -> None:
    """Entry point: no traceback ever reaches the user."""
    try:
        _main(argv)
    finally:
        while _OPEN_STORES:
            _OPEN_STORES.pop().close()


def _main(argv: list[str] | None) -> None:
    try:
        cli.main(args=argv, prog_name="ratchet", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(EXIT_USAGE if isinstance(exc, click.UsageError) else exc.exit_code)
    except SpecError as exc:
        for diagnostic in exc.diagnostics:
            click.echo(diagnostic.format(), err=True)
        sys.exit(EXIT_INVALID)
    except VersionConflict as exc:
        click.echo(f"ratchet: {exc.code} {exc.message}; this command changed nothing", err=True)
        sys.exit(EXIT_CONFLICT)
    except RatchetError as exc:
        click.echo(f"ratchet: {exc.code} {exc.message}", err=True)
        sys.exit(EXIT_INVALID)
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
