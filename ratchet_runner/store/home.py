"""Where a command's store lives, and the clock a command on it runs by: what the session (the
composition root) reads from the environment when it opens a store.

The **home folder** (``$RATCHET_HOME``, else ``./.ratchet``) holds the default store and the
practice world: :func:`home_folder` makes it, or says why it cannot be a folder. The **command
clock** is the system clock, unless ``RATCHET_NOW`` sets "now" for practice
(:func:`clock_from_env`), but only on a practice store, or with
``RATCHET_ALLOW_CLOCK_OVERRIDE=1`` (for tests): on any other store anyone could otherwise
back-date a decision past its expiry (:func:`command_clock`).

Both refuse a value with a :class:`~ratchet_runner.errors.UsageError`, which is why they live
here and not beside the names they read on the ground floor (``settings.py`` and ``clock.py``
import nothing of the package).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING

from ..clock import ENV_ALLOW_OVERRIDE, ENV_NOW, Clock, FakeClock, SystemClock
from ..errors import UsageError
from ..settings import home, is_unicode, shown

if TYPE_CHECKING:  # pathlib is imported when a path is made: the command line starts without it
    from pathlib import Path


def _limit(name: str, fallback: int) -> int:
    try:
        return int(os.pathconf("/", name))
    except (OSError, ValueError):
        return fallback


def home_folder(path: Path | None = None) -> Path:
    """The home folder ``path`` (default: :func:`~ratchet_runner.settings.home`), made if it is
    missing; a :class:`UsageError` that says why when it cannot be a folder: a regular file (or
    a file on the way to it), a name or a path too long for the file system, text that is not
    UTF-8. Nothing is made when the path is too long."""
    where = home() if path is None else path
    text = str(where)
    named = f"the home folder '{shown(text, 100)}' (RATCHET_HOME)"
    if not is_unicode(text):
        raise UsageError(f"{named} is not valid UTF-8")
    longest_name = _limit("PC_NAME_MAX", 255)
    for part in where.parts:
        if len(os.fsencode(part)) > longest_name:
            raise UsageError(
                f"{named} has a name of {len(os.fsencode(part)):,} bytes: the file system "
                f"takes at most {longest_name}"
            )
    longest_path = _limit("PC_PATH_MAX", 4096)
    if len(os.fsencode(os.path.abspath(where))) + len("/practice.db-wal") >= longest_path:
        raise UsageError(
            f"{named} is {len(os.fsencode(os.path.abspath(where))):,} bytes long: with the "
            f"files in it, more than the {longest_path} the file system takes"
        )
    try:
        where.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise UsageError(f"{named} is not a folder: a file of that name is in the way") from None
    except OSError as exc:
        why = "too long" if exc.errno == errno.ENAMETOOLONG else exc.strerror or str(exc)
        raise UsageError(f"{named} cannot be made: {why}") from None
    if not where.is_dir():
        raise UsageError(f"{named} is not a folder")
    return where


def clock_from_env(value: str | None) -> Clock:
    """``RATCHET_NOW`` (epoch seconds or an ISO 8601 time) fixes "now" for practice and tests;
    unset, the system clock. A value that is neither is a :class:`UsageError`."""
    if not value:
        return SystemClock()
    try:
        return FakeClock(float(value))
    except ValueError:
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise UsageError(
                f"{ENV_NOW}={value!r} is neither epoch seconds nor an ISO 8601 time "
                "(e.g. 2030-01-01T00:00:00Z)"
            ) from None
        return FakeClock(moment.timestamp())


def command_clock(
    environ: Mapping[str, str], is_practice: Callable[[], bool], store: str
) -> tuple[Clock, bool]:
    """The clock a command runs on, and whether ``RATCHET_NOW`` overrides it. The override
    applies only on a practice store (``is_practice()``, asked only when the variable is set),
    or when ``RATCHET_ALLOW_CLOCK_OVERRIDE`` is ``1`` (tests); on any other store it is refused
    (:class:`UsageError`, nothing done), so nobody can back-date a decision on a real store.
    ``store`` names the store in the message."""
    value = environ.get(ENV_NOW)
    if not value:
        return SystemClock(), False
    if environ.get(ENV_ALLOW_OVERRIDE) != "1" and not is_practice():
        raise UsageError(
            f"{ENV_NOW} is set, but the store at {store} is not a practice store: on a real store "
            "decisions are judged by the real time. Unset RATCHET_NOW (nothing was done), or "
            "practise on a practice store: the default store under RATCHET_HOME, or one emptied "
            "and declared with 'ratchet reset --all --practice'"
        )
    return clock_from_env(value), True
