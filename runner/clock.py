"""The one injectable clock: timers, expiries and back-off read time and sleep only through it."""

from __future__ import annotations

import time
from typing import Protocol


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


def clock_from_env(value: str | None) -> Clock:
    """``RATCHET_NOW`` (epoch seconds or an ISO 8601 time) fixes "now" for practice and tests;
    unset, the system clock."""
    if not value:
        return SystemClock()
    try:
        return FakeClock(float(value))
    except ValueError:
        from datetime import datetime

        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        return FakeClock(moment.timestamp())
