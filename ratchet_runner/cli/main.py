"""The ``ratchet`` command line: a thin shell that parses, calls the library, and formats.

The group and the entry point: every command is one click command in the module of the
front it serves (:mod:`.specs`: the spec's commands; :mod:`.diffing`: ``diff``, two versions of
a spec compared; :mod:`.runs`: the commands that change a run; :mod:`.reading`: those that read
runs; :mod:`.histories`: ``export`` and ``replay``; :mod:`.publishing`: ``versions`` and
``migrate``; :mod:`.serving`: ``worker``, ``serve``, ``token`` and ``practice serve``), sharing
the options and the output helpers of :mod:`.options`; everything else is the library's. The
group imports a command's module when the command is asked for (:data:`COMMAND_MODULES`;
``ratchet --help`` lists them all), and a command imports the library modules it uses when it
runs, so that ``ratchet --version`` imports no command and every ``--help`` no spec machinery,
store or diagram (docs/performance.md, "Starting the command").

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
        return sorted(self.commands)


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
