"""Where the library's log goes when the command line runs it.

The library logs through the standard :mod:`logging` module, each module under its own name
(``ratchet_runner.worker.pool``, ``ratchet_runner.serve.service``, ...), and installs no handler:
an application that embeds it decides where its records go (with none, Python prints warnings
and errors on stderr). The command line installs one handler on the ``ratchet_runner`` logger,
to stderr: ``text``, the message alone, one line each (what a terminal, journald or a container
runtime adds a time to); ``json``, one object a line, ``{"time", "level", "logger", "message"}``
(and ``"exception"``), for a log collector. ``--log-level`` and ``--log-format`` (env
``RATCHET_LOG_LEVEL``, ``RATCHET_LOG_FORMAT``) choose, on the commands that run until stopped
(``worker``, ``serve``, ``practice serve``); every other command logs at ``info`` as text.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import click

#: The logger the library's modules log under (each module's is a child of it).
ROOT = "ratchet_runner"

LEVELS = ("debug", "info", "warning", "error")
FORMATS = ("text", "json")


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """A handler that writes to whatever ``sys.stderr`` is when a record is emitted (a test's
    capture, a redirected stream), not the one there was when it was made, which may be closed
    by then: the standard library's last-resort handler does the same."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)

    @property
    def stream(self) -> Any:
        return sys.stderr


class JsonFormatter(logging.Formatter):
    """One JSON object a line: the record's time (UTC, ISO 8601), level, logger and message,
    and its exception's traceback when it has one."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def configure(level: str = "info", form: str = "text") -> None:
    """Send the library's records at ``level`` and above to stderr, as ``form`` says; called
    again, the handler it installed before is replaced (one per process)."""
    logger = logging.getLogger(ROOT)
    for handler in list(logger.handlers):
        if isinstance(handler, _Stderr):
            logger.removeHandler(handler)
    handler = _Stderr()
    handler.setFormatter(JsonFormatter() if form == "json" else logging.Formatter("%(message)s"))
    logger.addHandler(handler)
    logger.setLevel(level.upper())
    logger.propagate = False  # not twice, should the application have a root handler too


def _chosen(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    chosen = ctx.meta.setdefault("ratchet.log", {"level": "info", "form": "text"})
    chosen["level" if param.name == "log_level" else "form"] = value
    configure(chosen["level"], chosen["form"])
    return value


def log_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The ``--log-level`` and ``--log-format`` options of a command that runs until stopped."""
    level = click.option(
        "--log-level",
        type=click.Choice(LEVELS),
        default="info",
        show_default=True,
        envvar="RATCHET_LOG_LEVEL",
        expose_value=False,
        callback=_chosen,
        help="The least severe log records shown on stderr. Env: RATCHET_LOG_LEVEL.",
    )
    form = click.option(
        "--log-format",
        type=click.Choice(FORMATS),
        default="text",
        show_default=True,
        envvar="RATCHET_LOG_FORMAT",
        expose_value=False,
        callback=_chosen,
        help="text: the message alone, a line each; json: one object a line (time, level, "
        "logger, message), for a log collector. Env: RATCHET_LOG_FORMAT.",
    )
    return level(form(command))
