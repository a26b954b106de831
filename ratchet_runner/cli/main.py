"""The ``ratchet`` command line: a thin shell that parses, calls the library, and formats.

The group and the entry point: every command is one click command in the module of the
front it serves (:mod:`.specs`: the spec's commands; :mod:`.diffing`: ``diff``, two versions of
a spec compared; :mod:`.runs`: the commands that change a run; :mod:`.reading`: those that read
runs; :mod:`.histories`: ``export`` and ``replay``; :mod:`.publishing`: ``versions`` and
``migrate``; :mod:`.serving`: ``worker``, ``serve``, ``token`` and ``practice serve``), sharing
the options and the output helpers of :mod:`.options`; everything else is the library's. The
group imports a command's module when the command is asked for (:data:`COMMAND_MODULES`;
``ratchet --help`` lists them from :data:`COMMAND_SUMMARIES`, importing none), and a command
imports the library modules it uses when it runs, so that ``ratchet --version`` and ``ratchet
--help`` import no command and every ``--help`` no spec machinery, store or diagram
(docs/performance.md, "Starting the command").

Exit statuses: 0 success · 1 the spec is invalid (or, with ``--strict``, has warnings), or the
request was refused (an approval, a role, a run that cannot take that step) · 2 usage error ·
3 internal error · 4 the run moved on (another process changed it first) · 5 another input for a
business key that already names a run (nothing was written). With ``--json`` only JSON is
printed on stdout; messages go to stderr.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import click

from .. import __version__
from ..errors import RatchetError
from .logs import configure
from .options import EXIT_INTERNAL, EXIT_USAGE, echo_lines, not_utf8, show_usage_error

#: Each command's module in this package (its ``COMMANDS``): a command's module is imported when
#: the command is asked for, every one when they are listed (``--help``), none for
#: ``--version``. A test keeps this map equal to the modules' ``COMMANDS``.
COMMAND_MODULES: dict[str, str] = {
    **dict.fromkeys(("check", "diagram", "schema", "table", "validate"), "specs"),
    "diff": "diffing",
    **dict.fromkeys(("approve", "ops", "reject", "resume", "run", "signal"), "runs"),
    **dict.fromkeys(("effects", "queue", "reset", "runs", "status", "trace"), "reading"),
    **dict.fromkeys(("export", "replay"), "histories"),
    **dict.fromkeys(("migrate", "versions"), "publishing"),
    **dict.fromkeys(("practice", "serve", "token", "worker"), "serving"),
    **dict.fromkeys(("archive", "db", "prune"), "database"),
    **dict.fromkeys(("backup", "restore"), "restoring"),
}


#: Each command's summary, the first sentence of its help, as ``ratchet --help`` lists it (cut
#: to the width left, as click cuts it), so that the list imports no command's module. A test
#: keeps it equal to the commands' own.
COMMAND_SUMMARIES: dict[str, str] = {
    "approve": "Approve the action RUN is waiting for, then drive the run on.",
    "archive": "Archives of pruned runs (ratchet prune --archive): verify one, show a run from it.",
    "backup": "Copy the SQLite store to FILE, consistent as of one commit, while workers run.",
    "check": "Run every crash window of every effect for real, and prove no effect happens twice.",
    "db": "The store's schema revision: read it, check it, move it.",
    "diagram": "Draw SPEC for review: its states, its crash windows, or its saga.",
    "diff": "Compare two versions of a spec, and say what the change does to runs in flight.",
    "effects": (
        "List the changes in the practice database, with their operation IDs and call counts."
    ),
    "export": (
        "Write runs' histories as JSONL, one run a line (format ratchet.run/1): the run, its "
        "events in order, its operations with their IDs, attempts, statuses and receipts, its "
        "approvals with their digests, its timers and signals."
    ),
    "migrate": (
        "Move the live runs of a workflow to its version NEW: --plan (the default) gives each run"
        " its verdict, --apply moves the ready ones, --rollback MIGRATION moves them back."
    ),
    "ops": "Operator controls: pause, resume, cancel, retry, reconcile or compensate RUN.",
    "practice": "The practice world: its providers served over HTTP.",
    "prune": "Prune finished runs to their tombstones, a small batch per transaction.",
    "queue": (
        "List what waits for a person: the decisions waiting, then the runs waiting for a person."
    ),
    "reject": "Reject the action RUN is waiting for.",
    "replay": (
        "Replay recorded histories under SPEC, calling no adapter: for each recorded step, the "
        "same from-state and event select the same row, the guard holds as it did on the recorded"
        " context, and each effect's operation ID, each approval's digest and each registered "
        "undo are the same."
    ),
    "reset": (
        "Empty the practice world (orders, changes, calls, faults); with --all, the store too; "
        "with --all --practice, declare that store a practice store."
    ),
    "restore": "Put the SQLite backup FILE back as the store, without repeating any effect.",
    "resume": "Drive RUN on from where it stopped (after a crash, an interrupt, or a fix).",
    "run": "Start a run of SPEC and drive it until it waits, ends or needs a person.",
    "runs": "List runs, newest first (or, with --stuck, the ones nobody is moving).",
    "schema": "Print the JSON Schema (draft-07) that specs are validated against.",
    "serve": (
        "Serve the operator console and the HTTP API: runs, their traces and effects, the queue, "
        "approve, reject and operator actions, for operators who authenticate with their token."
    ),
    "signal": "Send EVENT to a paused RUN, once per --id.",
    "status": (
        "Runs by status, the leases workers hold (owner, how long held, time left by the "
        "database's clock), and the runs whose lease expired."
    ),
    "table": "Print the transition table of SPEC: one row per transition, all eleven columns.",
    "token": "Make a bearer token for operator NAME of 'ratchet serve'.",
    "trace": (
        "Show RUN's history, one line per event: approval, write-ahead record, call, timeout, "
        "reconcile found / not found, receipt, move."
    ),
    "validate": "Check spec files before they run.",
    "versions": (
        "List the stored versions of WORKFLOW with their open runs, newest first, and which one "
        "new runs start on; with --start-new-on, choose it."
    ),
    "worker": "Fire due timers and advance runnable runs under leases until stopped, or --once.",
}


#: Modules that add subcommands to a group of another (:mod:`.restoring` adds ``db
#: mark-restored`` and ``db restores`` to :mod:`.database`'s ``db``), loaded with it.
EXTENDED_BY: dict[str, tuple[str, ...]] = {"database": ("restoring",)}


class Commands(click.Group):
    """The group, its commands imported from their modules when first asked for."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._loaded: set[str] = set()
        super().__init__(*args, **kwargs)

    def _load(self, module: str) -> None:
        if module in self._loaded:
            return
        self._loaded.add(module)
        for command in importlib.import_module(f"{__package__}.{module}").COMMANDS:
            self.add_command(command)
        for extending in EXTENDED_BY.get(module, ()):
            self._load(extending)

    @property  # type: ignore[override]
    def commands(self) -> dict[str, click.Command]:
        """Every command, each module imported."""
        for module in dict.fromkeys(COMMAND_MODULES.values()):
            self._load(module)
        return self._commands

    @commands.setter
    def commands(self, value: dict[str, click.Command]) -> None:
        self._commands = value

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        name = name or cmd.name
        assert name is not None
        self._commands[name] = cmd

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = COMMAND_MODULES.get(cmd_name)
        if module is not None:
            self._load(module)
            return self._commands.get(cmd_name)
        return self.commands.get(cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every command's name, no module imported."""
        return sorted({*COMMAND_MODULES, *self._commands})

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands with their summaries (:data:`COMMAND_SUMMARIES`), as click lists them,
        no command's module imported (a command the table does not know: as click does)."""
        names = self.list_commands(ctx)
        if not set(names) <= set(COMMAND_SUMMARIES):
            super().format_commands(ctx, formatter)
            return
        limit = formatter.width - 6 - max(map(len, names))
        rows = [
            (name, click.Command(name, help=COMMAND_SUMMARIES[name]).get_short_help_str(limit))
            for name in names
        ]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(
    cls=Commands,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
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
      ratchet diff specs/refund.yaml --base main   what a new version does to runs in flight
      ratchet run specs/refund.yaml --example T-90104   run a workflow
      ratchet trace RUN                 what happened, event by event

    RUN is a run ID (run_...) or, when only one run has it, a business key such as T-90104.

    The store is SQLite at .ratchet/ratchet.db (set RATCHET_HOME to move it, or --db /
    RATCHET_DB to use PostgreSQL: postgresql+psycopg://USER@HOST/DB). The practice world,
    which stands in for payment, warehouse and travel providers, is .ratchet/practice.db.
    """
    configure()  # the library's log to stderr (worker, serve: --log-level, --log-format)


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
