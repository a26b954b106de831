"""The command line's shared options and output (imported only by the command line's modules).

The click options several commands share (``--db``, ``--json``, ``--bindings``, ``--lease``,
``--interrupt``), passed on to a command as one :class:`How` by :func:`with_options`; the
helpers that print (JSON on stdout, text, messages on stderr, a file or stdout); and the steps
every run command takes (its runner, its result shown). The commands themselves, with their
``--help`` text, are :mod:`.specs`', :mod:`.runs`' and :mod:`.serving`'s.

Light to import, as the command line is: ``ratchet --version`` and every ``--help`` import
this module, so the views, the session and the spec loader are imported by the helpers that use
them. Over 400 lines, as one concern: every option and output helper the commands share, kept
in one place so that each command's module holds only its commands.
"""

from __future__ import annotations

import functools
import io
import json
import math
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from ..errors import CommandLineError, UsageError
from ..settings import (
    INTERRUPT_POINTS,
    MAX_NAME,
    is_unicode,
    name_problem,
    parse_duration,
    shown,
    unstorable,
)

if TYPE_CHECKING:  # the run commands import the store and the runner only when they run
    from pathlib import Path

    from ..engine.commands import CommandResult
    from ..engine.runner import Runner
    from ..session import Session

#: A file a command writes (instead of stdout).
OUTPUT = click.Path(dir_okay=False, writable=True)

#: The command line's exit statuses (documented in docs/reference/cli.md, "Exit statuses").
EXIT_OK, EXIT_INVALID, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3


def emit_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


def echo_lines(lines: Iterable[str], err: bool = False) -> None:
    for line in lines:
        click.echo(line, err=err)


def say(line: str) -> None:
    click.echo(line, err=True)


def show(as_json: bool, data: Any, text: Callable[[], Iterable[str]], empty: str = "") -> None:
    """Print ``data`` as JSON, else the lines ``text()`` makes, or (on stderr) ``empty`` when
    there is no data and it says so."""
    if as_json:
        emit_json(data)
    elif not data and empty:
        say(empty)
    else:
        echo_lines(text())


def write_output(output: str | None, data: bytes) -> None:
    """Write ``data`` to the file ``output``, or (text) to stdout."""
    if not output:
        click.echo(data.decode("utf-8"), nl=False)
        return
    from pathlib import Path

    try:
        Path(output).write_bytes(data)
    except OSError as exc:
        raise click.FileError(output, exc.strerror or str(exc)) from None
    say(f"wrote {output}")


@contextmanager
def hinted(option: str) -> Iterator[None]:
    """A :class:`UsageError` from the library, shown as a bad value of ``option``."""
    try:
        yield
    except UsageError as exc:
        raise click.BadParameter(exc.message, param_hint=option) from None


def _no_constant(name: str) -> Any:
    raise UsageError(f"{name} is not a finite number (JSON has no {name})")


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise UsageError(f"{text} is not a finite number: too large (the largest is about 1.8e308)")
    return number


def json_object(text: str) -> dict[str, Any]:
    """``text`` as a JSON object (``--data``); else a :class:`UsageError` that says why. Numbers
    must be finite (no ``NaN``, ``Infinity``, or ``1e400``, which Python would read as
    infinity) and text valid Unicode (no lone surrogate such as ``"\\ud800"``): what no store
    keeps the same way is refused here, before anything is written."""
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except json.JSONDecodeError as exc:
        raise UsageError(f"not JSON: {exc}") from None
    except ValueError as exc:  # an integer of more digits than Python converts
        raise UsageError(f"not usable JSON: {exc}") from None
    if not isinstance(value, dict):
        raise UsageError("must be a JSON object")
    problem = unstorable(value, "")
    if problem is not None:
        raise UsageError(problem)
    return value


def interrupt_point(value: str) -> str:
    """``POINT[:EFFECT]`` as ``--interrupt`` takes it, checked: POINT is one of
    :data:`~ratchet_runner.settings.INTERRUPT_POINTS` (else a :class:`UsageError`)."""
    point = value.partition(":")[0]
    if point not in INTERRUPT_POINTS:
        raise UsageError(f"{point!r} is not one of {', '.join(INTERRUPT_POINTS)}")
    return value


def checked(check: Callable[[Any], Any]) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """A click callback that ``check``s a given value by the library's rule (a
    :class:`UsageError` shown as a bad value of the option)."""

    def callback(_ctx: click.Context, _param: click.Parameter, value: Any) -> Any:
        try:
            return None if value is None else check(value)
        except UsageError as exc:
            raise click.BadParameter(exc.message) from None

    return callback


def named(limit: int = MAX_NAME) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """A click callback for a name the store records (``--as``, ``--role``, ``--id``): not
    empty or blank, no control character, at most ``limit`` characters (what the store keeps,
    the same on every database); else a usage error, before anything is read or written."""

    def callback(_ctx: click.Context, _param: click.Parameter, value: Any) -> Any:
        if value is None:
            return None
        problem = name_problem(value, limit)
        if problem is not None:
            raise click.BadParameter(problem)
        return value

    return callback


class Seconds(click.ParamType[float, Any]):
    """An option's length of time: a duration as specs write it (``500ms``, ``30s``, ``5m``,
    ``2h``, ``1d``) or a number of seconds (``30``, ``0.5``), finite and not negative; in
    seconds."""

    name = "duration"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        seconds: float | None
        if isinstance(value, int | float) and not isinstance(value, bool):
            seconds = float(value)
        else:
            text = str(value).strip()
            try:
                seconds = float(text)
            except ValueError:
                try:
                    seconds = parse_duration(text)
                except ValueError:
                    self.fail(
                        f"{shown(text)!r} is not a duration (500ms, 30s, 5m, 2h, 1d) or a "
                        "number of seconds",
                        param,
                        ctx,
                    )
        if seconds is None or not (math.isfinite(seconds) and seconds >= 0):
            self.fail(f"{value} is not a finite number of seconds (0 or more)", param, ctx)
        return seconds


#: A length of time, in the spec's durations or seconds (see :class:`Seconds`).
SECONDS = Seconds()


#: How many runs ``ratchet runs --limit`` lists at most: past it, a database's integer
#: overflows (SQLite refuses 2**63, PostgreSQL's bigint too).
MAX_LIMIT = 1_000_000
LIMIT = click.IntRange(1, MAX_LIMIT)


def not_utf8(argv: Sequence[str]) -> CommandLineError | None:
    """The error for the first argument that is not valid UTF-8 (Python hands such bytes over
    as lone surrogates, which no store, file name in a message, or JSON output can carry), or
    None."""
    for number, argument in enumerate(argv, start=1):
        if not is_unicode(argument):
            return CommandLineError(
                f"argument {number} ('{shown(argument)}') is not valid UTF-8: ratchet takes "
                "its arguments as UTF-8 text (rename the file, or set a UTF-8 locale)"
            )
    return None


def show_usage_error(exc: click.ClickException) -> None:
    """Print click's own error as click does (the usage, the hint), with the code of a
    malformed command line in its ``Error:`` line (``Error: R206 ...``)."""
    text = io.StringIO()
    exc.show(file=text)
    shown_text = text.getvalue()
    if isinstance(exc, click.UsageError):
        head, found, tail = shown_text.partition("Error: ")
        if found:
            shown_text = f"{head}Error: {CommandLineError.code} {tail}"
    sys.stderr.write(shown_text)
    sys.stderr.flush()


def _lease(seconds: float) -> float:
    from ..engine.lease import validate_lease

    return validate_lease(seconds)


BINDINGS_OPTION = click.option(
    "--bindings",
    metavar="FILE",
    help="The binding file: how each adapter is reached (default: $RATCHET_BINDINGS, else "
    "ratchet.toml beside the spec, else in the working directory). Without one, only a practice "
    "store runs adapters as their kinds. See docs/reference/bindings.md.",
)
DB_OPTION = click.option(
    "--db",
    envvar="RATCHET_DB",
    metavar="URL",
    help="Store URL (default: sqlite:///.ratchet/ratchet.db; env RATCHET_DB).",
)
JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout.")


def lease_option(help: str, envvar: str | None = None) -> Callable[[Any], Any]:
    return click.option(
        "--lease",
        "lease_seconds",
        type=SECONDS,
        default=30.0,
        show_default=True,
        envvar=envvar,
        callback=checked(_lease),
        metavar="DURATION",
        help=help,
    )


LEASE_OPTION = lease_option(
    envvar="RATCHET_LEASE",
    help="How long this command leases the run while it changes it and drives it on (a "
    "duration, 30s or 2m, or seconds; a heartbeat renews the lease; env RATCHET_LEASE). "
    "Workers cannot take the run meanwhile; if this process dies, they take it over once the "
    "lease has run out.",
)
LEAVE_OPTION = click.option(
    "--leave-to-workers",
    "leave",
    is_flag=True,
    help="Record it and leave the run to the workers (the commit wakes them at once) instead "
    "of carrying it on in this command, which then never waits on a provider.",
)

INTERRUPT_OPTION = click.option(
    "--interrupt",
    metavar="POINT[:EFFECT]",
    callback=checked(interrupt_point),
    help="End the process at POINT of the next call (of EFFECT, if given), with no cleanup "
    "(SIGKILL), to practise recovery: before-write (call recorded, not sent), after-write (the "
    "provider made the change, the reply is lost), after-receipt (receipt stored). Then "
    "'ratchet resume RUN'.",
)


@dataclass(frozen=True)
class How:
    """How a command works: the store, JSON or text, the binding file its adapters resolve
    through, the lease it holds, where to crash."""

    db: str | None = None
    as_json: bool = False
    bindings: str | None = None
    lease_seconds: float = 30.0
    interrupt: str | None = None
    leave: bool = False


def with_options(
    *names: str, lease: Any = None
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Give a command the shared options ``names`` (``interrupt``, ``leave``, ``lease``, ``db``,
    ``bindings``, ``json``; ``lease``: another ``--lease`` option than a run command's), passed
    on to it as one ``how: How``."""
    shared = {
        "interrupt": INTERRUPT_OPTION,
        "leave": LEAVE_OPTION,
        "lease": lease or LEASE_OPTION,
        "db": DB_OPTION,
        "bindings": BINDINGS_OPTION,
        "json": JSON_OPTION,
    }

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(command)
        def wrapper(*args: Any, **kwargs: Any) -> None:
            fields = ("db", "as_json", "bindings", "lease_seconds", "interrupt", "leave")
            how = How(**{name: kwargs.pop(name) for name in fields if name in kwargs})
            command(*args, how=how, **kwargs)

        for name in reversed(names):
            wrapper = shared[name](wrapper)
        return wrapper

    return decorate


#: The options of every command that drives a run.
RUN_COMMAND = ("lease", "db", "bindings", "json")


def open_session(
    db: str | None = None, bindings: str | None = None, spec: str | Path | None = None
) -> Session:
    """The session of a command that drives runs: with the naive strategy's step chooser, so
    that a run started with ``ratchet run --naive`` stays naive whichever command drives it on
    (the session's ``steps``)."""
    from ..review.naive import step_for
    from ..session import Session

    return Session(db, bindings=bindings, spec=spec, steps=step_for)


def command_runner(session: Session, interrupt: str | None = None, naive: bool = False) -> Runner:
    """The command's runner on the session's store, clock and practice world; ``interrupt``:
    the ``--interrupt`` point to end the process at; ``naive``: the runs it starts are the naive
    strategy's."""
    from ..review.naive import MARKS

    marks = MARKS if naive else None
    return session.runner(interrupt=session.kill_at(interrupt, say), marks=marks)


def report_result(
    runner: Runner, result: CommandResult, how: How, key: str, head: str | None = None
) -> None:
    """Show a command's result: what it did (and what happened after), then the run."""
    from ..review import views

    summary = views.command_summary(runner, result, key)
    if how.as_json:
        emit_json(summary)
    else:
        click.echo(views.summary_text(summary, views.command_headline(result, head)))


def drive(how: How, key: str, command: Callable[..., CommandResult], *args: Any, **kw: Any) -> None:
    """Call the run command ``command`` (of :mod:`~ratchet_runner.engine.commands`) with the
    session's runner, ``args``, ``kw`` and the lease ``how`` gives, then show its result under
    ``key``."""
    with open_session(how.db, how.bindings) as session:
        runner = command_runner(session, how.interrupt)
        result = command(runner, *args, lease_seconds=how.lease_seconds, **kw)
        report_result(runner, result, how, key)


# -- check and run ----------------------------------------------------------------------------


def world_fixture(path: str, effects: Iterable[str]) -> dict[str, Any]:
    """The practice world fixture in the file at ``path``: a mapping whose faults name the
    spec's ``effects`` (a usage error otherwise, before any run is created: a fault meant for
    an effect that does not exist would wait for calls that never come)."""
    import difflib

    from ..spec.loader import load_file

    fixture = load_file(path).data
    if not isinstance(fixture, dict):
        raise click.BadParameter("a practice world fixture is a mapping", param_hint="--world")
    known = list(effects)
    faults = fixture.get("faults")
    for fault in faults if isinstance(faults, list) else []:
        effect = fault.get("effect") if isinstance(fault, dict) else None
        if isinstance(effect, str) and effect not in known:
            close = difflib.get_close_matches(effect, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise click.BadParameter(
                f"{path}: a fault names effect {effect!r}, which the spec does not declare "
                f"(effects: {', '.join(known) or 'none'}){hint}",
                param_hint="--world",
            )
    return fixture


def run_checks(
    running: Iterable[Any],
    total: int,
    per_case: int,
    results_path: str | None,
    row: Callable[[dict[str, Any]], None] | None,
    bar_file: Any,
) -> tuple[list[Any], bool]:
    """Run the cases, streaming each case's row (``row``) as its last strategy ends and each
    result as a JSON line to ``results_path`` (``-``: stdout), flushed, so that a check stopped
    by Ctrl-C leaves what it found. Returns the results and whether it was stopped."""
    results: list[Any] = []
    pairs: dict[str, dict[str, Any]] = {}
    record = None
    if results_path == "-":
        record = sys.stdout
    elif results_path:
        record = open(results_path, "w", encoding="utf-8")  # noqa: SIM115 (closed below)
    try:
        with click.progressbar(length=total, label="checking", file=bar_file, show_pos=True) as bar:
            for result in running:
                results.append(result)
                if record is not None:
                    record.write(json.dumps(result.to_json(), ensure_ascii=False) + "\n")
                    record.flush()
                pair = pairs.setdefault(result.case.name, {})
                pair[result.case.strategy] = result
                if row is not None and len(pair) == per_case:
                    row(pairs.pop(result.case.name))
                bar.update(1)
    except KeyboardInterrupt:
        return results, True
    finally:
        if record is not None and record is not sys.stdout:
            record.close()
    return results, False
