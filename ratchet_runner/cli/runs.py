"""The run commands that change a run: starting one, deciding, resuming, signalling and
operating (``run``, ``approve``, ``reject``, ``resume``, ``signal``, ``ops``); the commands that
read runs are :mod:`.reading`'s.

Each parses, calls one library function (:mod:`ratchet_runner.engine.commands` for what changes a
run, the session and the read models for what reads one), and formats what it returns; each
imports the library when it runs, so that ``--help`` stays quick.
"""

from __future__ import annotations

from typing import Any

import click

from ..adapters.practice.faults import FAULT_KINDS, parse_fault
from ..settings import OPERATOR_ACTIONS
from .options import (
    RUN_COMMAND,
    How,
    checked,
    command_runner,
    drive,
    hinted,
    json_object,
    named,
    open_session,
    report_result,
    say,
    with_options,
    world_fixture,
)


@click.command()
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

    from ..review import views
    from ..spec.loader import load_file
    from ..spec.validate import load_spec

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
    from ..engine import commands

    with open_session(how.db, how.bindings, spec_path) as session:
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
        if created and result.run.spec_digest != spec.digest:
            started = runner.spec_of(result.run).spec_version
            say(
                f"note: new runs of {spec.name!r} start on version {started}, the version an "
                f"operator set (ratchet versions {spec.name} --start-new-on ...); {spec_path} is "
                f"version {spec.spec_version}: stored, not started on"
            )
        for effect, kind in dict.fromkeys(f for f in session.world.armed() if f in parsed):
            say(
                f"note: --fault {effect}:{kind} has met no call yet: it waits for {effect}'s "
                "next call, in whichever run makes it (ratchet reset disarms it)"
            )


def _decide(
    run_id: str, decision: str, actor: str, role: str | None, reason: str | None, how: How
) -> None:
    from ..engine import commands

    drive(
        how, "decision", commands.decide, run_id, decision, actor, role, reason, drive=not how.leave
    )


@click.command()
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


@click.command()
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


@click.command()
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
    from ..engine import commands

    drive(how, "resume", commands.resume, run_id)


@click.command("signal")
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
    from ..engine import commands

    if to_url is not None:
        from ..serve.client import send_signed

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


@click.command("ops")
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
    from ..engine import commands

    drive(how, "operator", commands.operate, run_id, action, actor, role, note)


#: The commands, as :mod:`.main` adds them to the group.
COMMANDS = (
    run,
    approve,
    reject,
    resume,
    signal_command,
    ops_command,
)
