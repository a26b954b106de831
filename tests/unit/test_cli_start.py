"""The ``ratchet`` command imports only what the command given needs (docs/performance.md, "Starting
the command").

``ratchet --version`` and every ``--help`` print from the command line's modules
(``ratchet_runner/cli/``) and a few light ones: no spec machinery (YAML, the JSON Schemas, CEL),
no diagrams, no store, no package metadata. ``ratchet validate`` loads the spec machinery, but no
store, no engine and no diagrams. Each command runs in a fresh interpreter, which reports the
modules it imported; nothing here is timed (the times are ``bench/bench_cli.py``'s).
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import subprocess
import sys
import tomllib

import click
import pytest

import ratchet_runner
from ratchet_runner.cli import cli
from tests.conftest import ROOT

# Runs the command line as the installed ``ratchet`` script does, then writes the names of the
# modules the process imported on stderr's last line.
_PROBE = """
import json, sys
try:
    from ratchet_runner.cli import main
    main(sys.argv[1:])
finally:
    sys.stderr.write("\\n" + json.dumps(sorted(sys.modules)) + "\\n")
"""

#: What ``ratchet validate`` must not import: it reads specs, nothing it runs or draws, and no
#: installed distribution's metadata (read only for a binding that names a plugin kind).
NOT_FOR_VALIDATE = (
    "graphviz",
    "sqlalchemy",
    "psycopg",
    "httpx",
    "importlib.metadata",
    "ratchet_runner.review.diagram",
    "ratchet_runner.store",
    "ratchet_runner.engine",
    "ratchet_runner.worker",
    "ratchet_runner.session",
    "ratchet_runner.adapters.practice.world",  # the practice world's database
    "ratchet_runner.adapters.practice.db",
    "ratchet_runner.adapters.practice.http",
)

#: What a command that only prints its own text must not import: nothing ``validate`` needs
#: either (the spec machinery), and none of what it must not import.
HEAVY = (
    "yaml",
    "jsonschema",
    "fastjsonschema",
    "celpy",
    "lark",
    "pendulum",
    "transitions",
    "ratchet_runner.spec",
    *NOT_FOR_VALIDATE,
)


def _imported(*argv: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Run ``ratchet ARGV...`` in a fresh interpreter: the process (its stderr without the
    probe's line), and the modules it imported."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RATCHET_")}
    done = subprocess.run(
        [sys.executable, "-P", "-c", _PROBE, *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    messages, _, modules = done.stderr.rstrip("\n").rpartition("\n")
    done.stderr = messages
    return done, json.loads(modules)


def _among(modules: list[str], names: tuple[str, ...]) -> list[str]:
    """The ``names`` imported: a module, or any module inside it."""
    return [n for n in names if any(m == n or m.startswith(n + ".") for m in modules)]


def _help_commands() -> list[tuple[str, ...]]:
    """Every command's ``--help``, the group's and its subcommands' too."""
    found: list[tuple[str, ...]] = []
    for name, command in sorted(cli.commands.items()):
        found.append((name, "--help"))
        for sub in sorted(getattr(command, "commands", {})):
            found.append((name, sub, "--help"))
    return found


@pytest.mark.parametrize(
    "argv", [("--version",), ("--help",), ("-h",), *_help_commands()], ids=" ".join
)
def test_printing_the_version_or_a_help_imports_nothing_heavy(argv: tuple[str, ...]) -> None:
    done, modules = _imported(*argv)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ratchet, version" if argv == ("--version",) else "Usage:")
    assert _among(modules, HEAVY) == []


def test_validate_loads_no_store_no_engine_and_no_diagram() -> None:
    done, modules = _imported("validate", "specs/refund.yaml")
    assert done.returncode == 0, done.stderr
    assert done.stderr.rstrip().endswith(": valid"), done.stderr
    assert _among(modules, NOT_FOR_VALIDATE) == []
    # it does validate: the spec machinery was loaded, so the list above is not vacuous
    assert {"yaml", "ratchet_runner.spec.lint"} <= set(modules)


#: The group's module (``ratchet_runner.cli.main``: the package's ``main`` is the function).
main_module = importlib.import_module("ratchet_runner.cli.main")
#: The command line's modules that hold commands.
COMMAND_MODULES = sorted(set(main_module.COMMAND_MODULES.values()))


def test_each_command_is_found_in_the_module_the_group_looks_in() -> None:
    """The group imports a command's module only when the command is asked for: its map of
    names to modules is every module's ``COMMANDS``, exactly."""
    declared = {
        command.name: module
        for module in COMMAND_MODULES
        for command in importlib.import_module(f"ratchet_runner.cli.{module}").COMMANDS
    }
    assert declared == main_module.COMMAND_MODULES


def test_the_version_imports_no_command_and_a_command_only_its_own() -> None:
    """``ratchet --version`` imports none of the command modules (they are a third of the
    start-up); ``ratchet validate`` only the spec commands' module."""
    done, modules = _imported("--version")
    assert done.returncode == 0, done.stderr
    commands = tuple(f"ratchet_runner.cli.{module}" for module in COMMAND_MODULES)
    assert _among(modules, commands) == []
    done, modules = _imported("validate", "specs/refund.yaml")
    assert done.returncode == 0, done.stderr
    assert _among(modules, commands) == ["ratchet_runner.cli.specs"]


def test_the_help_lists_every_command_from_its_table_as_click_would_from_the_commands() -> None:
    """``ratchet --help`` lists the commands from ``COMMAND_SUMMARIES``, importing none of their
    modules (it imported them all: 1.66x ``import click``, over the 1.5x target); each summary is
    the command's own, and the list is what click prints from the commands themselves, at every
    width."""
    done, modules = _imported("--help")
    assert done.returncode == 0, done.stderr
    commands = tuple(f"ratchet_runner.cli.{module}" for module in COMMAND_MODULES)
    assert _among(modules, commands) == []
    summaries = {name: command.get_short_help_str(10**6) for name, command in cli.commands.items()}
    assert summaries == main_module.COMMAND_SUMMARIES
    for width in (60, 80, 100, 140):
        from_table = _help_listing(width, from_table=True)
        assert from_table == _help_listing(width, from_table=False)
        assert "approve " in from_table


def _help_listing(width: int, *, from_table: bool) -> str:
    """The commands' listing of ``ratchet --help`` at ``width`` columns, from the table, or from
    the commands (as click's own group lists them)."""
    formatter = click.HelpFormatter(width=width, max_width=100)
    group = main_module.Commands(name="ratchet", context_settings=cli.context_settings)
    group.commands = dict(cli.commands) if not from_table else {}
    ctx = click.Context(group, info_name="ratchet")
    if from_table:
        group.format_commands(ctx, formatter)
    else:
        click.Group.format_commands(group, ctx, formatter)
    return formatter.getvalue()


def test_the_version_printed_is_the_one_the_distribution_declares() -> None:
    """The version ``ratchet --version`` prints is held in the package (not read from the
    installed distribution's metadata, which would cost the start-up), and is pyproject.toml's."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert ratchet_runner.__version__ == declared["project"]["version"]
    done, _ = _imported("--version")
    assert done.stdout == f"ratchet, version {ratchet_runner.__version__}\n"


#: Modules off the command line's start-up that still import inside a function, each with why.
LAZY_FOR_A_REASON = {
    "ratchet_runner": "the public API imports each name's module when the name is first used",
    "ratchet_runner.review.diagram.dot": "graphviz only when a picture is drawn in DOT",
    "ratchet_runner.review.diagram.draw": "graphviz only when a picture is rendered",
    "ratchet_runner.store.watch": "the driver of the store in use (psycopg or sqlite3), not both",
    "ratchet_runner.serve.webhooks": "httpx only when a webhook is sent (ratchet token reads it)",
    "ratchet_runner.serve.metrics": "the exporter's server only for ratchet worker --metrics-port",
    "ratchet_runner.store.schema": "Alembic only when a store's schema moves (at its head, not)",
}


def _imports_inside_functions() -> dict[str, list[int]]:
    """The lines of every import inside a function, by module."""
    found: dict[str, list[int]] = {}
    for path in sorted((ROOT / "ratchet_runner").rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = [
                    sub.lineno
                    for sub in ast.walk(node)
                    if isinstance(sub, ast.Import | ast.ImportFrom)
                ]
                if lines:
                    found.setdefault(module, []).extend(lines)
    return found


def test_an_import_inside_a_function_is_one_the_start_up_needs() -> None:
    """Imports sit at the top of a module, but in the modules the command line loads to print a
    help, its version, a table or a validation (there an import waits for the command that needs
    it, so that these stay quick) and in the few that say why (:data:`LAZY_FOR_A_REASON`)."""
    loaded: set[str] = set()
    # a command of each module asked for its help: each command module is loaded
    helps = {module: (name, "--help") for name, module in main_module.COMMAND_MODULES.items()}
    runs = (("validate", "specs/refund.yaml"), ("table", "specs/refund.yaml"), *helps.values())
    for argv in (("--help",), *runs):
        done, modules = _imported(*argv)
        assert done.returncode == 0, done.stderr
        loaded.update(modules)
    inside = _imports_inside_functions()
    assert "ratchet_runner.cli.runs" in inside  # the start-up's own lazy imports are seen
    stray = {
        module: lines
        for module, lines in inside.items()
        if module not in loaded and module not in LAZY_FOR_A_REASON
    }
    assert stray == {}
