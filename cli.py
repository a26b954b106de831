"""The ``ratchet`` command line: a thin shell that parses, calls the library, and formats.

Exit statuses: 0 success · 1 the spec is invalid (or, with ``--strict``, has warnings) · 2 usage
error · 3 internal error. With ``--json`` only JSON is printed on stdout; messages go to stderr.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from runner import table as tables
from runner.errors import RatchetError, SpecError
from runner.schema import spec_schema_text
from runner.validate import Report, load_spec, validate_path

EXIT_OK, EXIT_INVALID, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3


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
    reports: list[Report] = [validate_path(path, name) for path, name in _expand(specs)]
    if not reports:
        raise click.UsageError("no .yaml or .yml files found in the given directories")
    failed = [r for r in reports if not r.ok(strict=strict)]
    if as_json:
        _emit_json(
            {
                "valid": not failed,
                "strict": strict,
                "files": [r.to_json() for r in reports],
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
            click.echo(
                f"{len(reports)} file(s) checked: {errors} error(s), {warnings} warning(s): "
                f"{verdict}",
                err=True,
            )
    sys.exit(EXIT_INVALID if failed else EXIT_OK)


@cli.command()
def schema() -> None:
    """Print the JSON Schema (draft-07) that specs are validated against.

    Point your editor at it for autocompletion and hover help; the shipped specs start with

    \b
      # yaml-language-server: $schema=../runner/spec.schema.json
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
        Path(output).write_text(text, encoding="utf-8")
        click.echo(f"wrote {output}", err=True)
    else:
        click.echo(text, nl=False)


def main(argv: list[str] | None = None) -> None:
    """Entry point: no traceback ever reaches the user."""
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
