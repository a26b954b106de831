"""The one injectable clock: timers, expiries and back-off read time and sleep only through it.

For practice, ``RATCHET_NOW`` sets "now" for a command, but only on a practice store, or with
``RATCHET_ALLOW_CLOCK_OVERRIDE=1`` (for tests): on any other store anyone could otherwise
back-date a decision past its expiry. The session asks
:func:`ratchet_runner.store.home.command_clock`, which refuses with an error; this module, on the
ground floor, imports nothing of the package.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol

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

    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%SZ")
