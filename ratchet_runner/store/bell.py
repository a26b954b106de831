"""A bell per store in this process: rung by every commit that makes a run runnable by someone
else, waited on by idle worker threads.

A commit that leaves a run ``running`` with no lease on it (a new run, a signal or a decision
recorded for the workers to carry on, an operator's action, a timer fired, a lease given back),
or that arms a timer due soon, is a *wake-up*: some worker should look now rather than at its
next poll. The store rings this process's bell for its database after such a commit, so workers
in the same process (a service that runs its own) wake at once; other processes learn of it from
the database (:mod:`ratchet_runner.store.watch`), which rings their bells.

A waiter reads :meth:`Bell.rings` *before* it looks for work and hands that count to
:meth:`Bell.wait`, which returns at once if the bell rang in between: a wake-up that lands while
the worker is busy claiming is never lost.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from ..words import RunStatus
from .records import Change, NewTimer, RunRecord

#: A timer armed to fire sooner than this many seconds from its commit wakes the workers, so that
#: one waits for it rather than finding it on its next poll; one due later is found by a poll
#: first (a worker polls at least this often by default), and waited for from there.
WAKE_TIMERS_WITHIN = 30.0


class Bell:
    """A counter of wake-ups that threads can wait on."""

    def __init__(self) -> None:
        self._rung = threading.Condition()
        self._rings = 0

    @property
    def rings(self) -> int:
        """How many times the bell has rung so far."""
        return self._rings

    def ring(self) -> None:
        """Wake every thread waiting on the bell."""
        with self._rung:
            self._rings += 1
            self._rung.notify_all()

    def wait(self, seen: int, timeout: float) -> bool:
        """Wait until the bell has rung more than ``seen`` times, or ``timeout`` seconds; whether
        it rang."""
        with self._rung:
            return self._rung.wait_for(lambda: self._rings != seen, max(0.0, timeout))


def wakes(change: Change, after: RunRecord) -> bool:
    """Whether committing ``change`` (which leaves the run as ``after``) is a wake-up
    (see above): it leaves the run running with no lease on it, so any
    worker may carry it on now, or it arms a timer due within
    :data:`WAKE_TIMERS_WITHIN` seconds. A worker's commits under its
    lease are not: the run stays its own."""
    if after.status == RunStatus.RUNNING and after.lease_token is None:
        return True
    return arms_soon(change.new_timers, change.at)


def left_to_workers(run: RunRecord) -> bool:
    """Whether a caller that carried ``run`` on itself with no lease, and made commits that woke
    nobody, leaves it to the workers as it stands: running with no lease on it (its back-off
    ends later, or the caller stopped), or standing in a state whose timers it armed."""
    if run.status == RunStatus.RUNNING and run.lease_token is None:
        return True
    return run.context.get("timers_of") == run.state


def arms_soon(timers: Iterable[NewTimer], at: float) -> bool:
    """Whether one of ``timers``, armed at ``at``, falls due within :data:`WAKE_TIMERS_WITHIN`."""
    return any(timer["due_at"] - at < WAKE_TIMERS_WITHIN for timer in timers)


class Halt(threading.Event):
    """An event whose setting also rings :attr:`bell`, once it has one: how a pool's stop
    reaches threads waiting on the bell."""

    bell: Bell | None = None

    def set(self) -> None:
        super().set()
        if self.bell is not None:
            self.bell.ring()


_BELLS: dict[str, Bell] = {}
_BELLS_LOCK = threading.Lock()


def bell_for(url: str) -> Bell:
    """This process's bell for the store at ``url``: one per URL, shared by every
    :class:`~ratchet_runner.store.store.Store` opened on it here."""
    with _BELLS_LOCK:
        bell = _BELLS.get(url)
        if bell is None:
            bell = _BELLS[url] = Bell()
        return bell
