"""The one injectable clock: timers, expiries and back-off read time and sleep only through it.

For practice, ``RATCHET_NOW`` sets "now" for a command (:func:`clock_from_env`), but only on a
practice store, or with ``RATCHET_ALLOW_CLOCK_OVERRIDE=1`` (for tests): on any other store anyone
could otherwise back-date a decision past its expiry (:func:`command_clock`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Protocol

from .errors import UsageError

#: Sets "now" for practice: epoch seconds or an ISO 8601 time.
ENV_NOW = "RATCHET_NOW"
#: ``1`` lets ``RATCHET_NOW`` apply to a store that is not a practice store: for tests only.
ENV_ALLOW_OVERRIDE = "RATCHET_ALLOW_CLOCK_OVERRIDE"


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch."""
        ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class FakeClock:
    """A clock that only moves when told to; ``sleep`` moves it instead of waiting."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._now = start
        self.slept: list[float] = []

    def now(self) -> float:
        return self._now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self._now += max(0.0, seconds)

    def advance(self, seconds: float) -> None:
        self._now += seconds


def format_time(epoch: float | None) -> str:
    """An epoch time as ``2030-01-01 00:00:00Z``, for messages."""
    if epoch is None:
        return "no time"
    from datetime import UTC, datetime

    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def clock_from_env(value: str | None) -> Clock:
    """``RATCHET_NOW`` (epoch seconds or an ISO 8601 time) fixes "now" for practice and tests;
    unset, the system clock. A value that is neither is a :class:`UsageError`."""
    if not value:
        return SystemClock()
    try:
        return FakeClock(float(value))
    except ValueError:
        from datetime import datetime

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
