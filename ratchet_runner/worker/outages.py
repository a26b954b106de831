"""The store's outages, as a pool's threads meet them: one outage however many threads see it.

A database restart or failover kills every connection of every thread at once. :class:`Outages`
turns what each thread meets into one story: the first thread to fail while the store is up
begins an outage (one line said, one outage counted); a thread that fails on a connection made
before the current outage began, or that is already behind it, only retries soon, with new
connections (its ``epoch`` says which outage it has caught up with); the first thread the store
answers again after the outage began ends it (one line, its duration added up). Each outage has
its event, set when it ends, on which the threads backing off wait, so that the pool goes back
to work at once rather than thread by thread.

It keeps no thread of its own and reads time from the clock it is given, so it is tested
without threads (``tests/unit/test_pool_outages.py``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


class Tally(Protocol):
    """Where the outages are counted as they happen (a pool's report): how many began, the
    seconds the store was unreachable in all, and whether it is now."""

    outages: int
    unreachable_seconds: float
    unreachable: bool


@dataclass(frozen=True)
class Met:
    """What a thread that met a store failure does: back off and wait on ``wake``, the event
    set when the outage ends; or, ``known`` (the outage it met is known already, or over since
    its work began), retry soon with new connections."""

    wake: threading.Event | None
    known: bool


class Outages:
    """The outages of one pool's store, counted in ``tally`` as they happen. ``say``: where its
    two lines an outage go; ``clock``: the monotonic clock it counts by."""

    def __init__(
        self,
        tally: Tally,
        say: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.tally = tally
        self._say = say
        self._clock = clock
        self._lock = threading.Lock()
        #: Outages begun so far: a thread that has caught up with fewer drops its connections.
        self.epoch = 0
        self._down_since: float | None = None
        self._up_at = float("-inf")
        self._recovered = threading.Event()

    @property
    def down(self) -> bool:
        """Whether an outage is going on."""
        return self._down_since is not None

    def met(self, epoch: int, began: float, reason: str, retry_in: str) -> Met:
        """A thread that had caught up with outage ``epoch``, and began its work at ``began``,
        met a store failure (``reason``; it retries in ``retry_in``, as said)."""
        with self._lock:
            if epoch != self.epoch or began < self._up_at:
                return Met(None, known=True)  # known already, or over since its work began
            if self._down_since is None:
                self._recovered = threading.Event()
                self.epoch += 1
                self._down_since = self._clock()
                self.tally.outages += 1
                self.tally.unreachable = True
                self._say(f"store unreachable ({reason}); retrying in {retry_in} s")
            return Met(self._recovered, known=False)

    def answered(self, epoch: int) -> None:
        """The store answered a thread that had caught up with outage ``epoch``: the current
        outage, if that thread's answer came after it began, is over."""
        if self._down_since is None:
            return
        with self._lock:
            if self._down_since is None or epoch != self.epoch:
                return  # its answer may have left before the outage began
            took = self._clock() - self._down_since
            self._down_since = None
            self._up_at = self._clock()
            self.tally.unreachable_seconds += took
            self.tally.unreachable = False
            self._recovered.set()  # the other threads stop backing off
            shown = f"{took:.2f}" if took < 1 else f"{took:.1f}"
            self._say(f"store reachable again after {shown} s")

    def stop(self) -> None:
        """The pool stops: an outage still going on is counted so far (and the store is still
        unreachable, as the tally says)."""
        with self._lock:
            if self._down_since is not None:
                self.tally.unreachable_seconds += self._clock() - self._down_since
                self._down_since = None
