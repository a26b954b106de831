"""A pool of workers: claim runnable runs under leases, advance them, keep the leases alive.

Each worker thread claims one run at a time (``Store.claim``: ``FOR UPDATE SKIP LOCKED`` on
PostgreSQL, ``BEGIN IMMEDIATE`` on SQLite), advances it with every commit fenced by the lease
token, and releases it. A heartbeat renews the leases while work goes on; leases expire by the
database's clock. A worker that was paused past its lease (SIGSTOP, a long GC, a frozen VM)
sends no request on waking (it checks, by its own monotonic clock, that it can still count on
its lease before each call: :meth:`Runner.check_lease`) and its next commit affects no row
(``LeaseLost``), so it drops the run: the worker that took it over reconciles any pending
operation before calling, and an in-flight call of the paused one carries the same operation ID.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .errors import RatchetError, StoreError, VersionConflict
from .execute import Runner
from .lifecycle import advance_leased, lease_deadline, worker_identity
from .store import RunRecord


@dataclass
class PoolReport:
    advanced: int = 0
    fenced: int = 0
    timers: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)


class Pool:
    """``concurrency`` worker threads in this process, each with its own runner."""

    def __init__(
        self,
        make_runner: Callable[[], Runner],
        *,
        concurrency: int = 1,
        lease_seconds: float = 30.0,
        poll: float = 0.5,
        owner: str | None = None,
    ) -> None:
        self.make_runner = make_runner
        self.concurrency = max(1, concurrency)
        self.lease_seconds = lease_seconds
        self.poll = poll
        self.owner = owner or worker_identity()
        self.stop = threading.Event()
        self.report = PoolReport()
        self._held: dict[str, str] = {}
        self._deadlines: dict[str, float] = {}  # shared by this pool's runners (see Runner)
        self._lock = threading.Lock()

    def run(self, *, until_idle: bool = False) -> PoolReport:
        """Work until :attr:`stop` is set (or, with ``until_idle``, until nothing is left)."""
        threads = [
            threading.Thread(target=self._work, args=(i, until_idle), name=f"ratchet-{i}")
            for i in range(self.concurrency)
        ]
        beat = threading.Thread(target=self._heartbeat, name="ratchet-heartbeat", daemon=True)
        beat.start()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.stop.set()
        return self.report

    def _work(self, index: int, until_idle: bool) -> None:
        runner = self.make_runner()
        runner.stopping = self.stop.is_set  # SIGTERM: finish the current step, then release
        runner.lease_deadlines = self._deadlines  # the heartbeat extends them
        runner.spec_check_interval = self.poll  # a new spec version is seen within a poll
        next_timers = 0.0
        while not self.stop.is_set():
            try:
                if index == 0 and time.monotonic() >= next_timers:
                    # Due timers are looked for once per poll interval, not before every claim.
                    next_timers = time.monotonic() + self.poll
                    fired = runner.timers.fire_due()
                    with self._lock:
                        self.report.timers += sum(1 for f in fired if f.outcome == "fired")
                asked = time.monotonic()  # the lease starts no earlier than the claim is sent
                claimed = runner.store.claim(self.owner, self.lease_seconds, runner.clock.now())
            except StoreError as exc:  # the database restarted or is unreachable: try again
                with self._lock:
                    self.report.failed.append(("", str(exc)))
                self.stop.wait(self.poll)
                continue
            if not claimed:
                if until_idle:
                    return
                self.stop.wait(self.poll)
                continue
            self._advance(runner, claimed[0], lease_deadline(asked, self.lease_seconds))

    def _advance(self, runner: Runner, claimed: RunRecord, deadline: float) -> None:
        with self._lock:
            self._held[claimed.id] = str(claimed.lease_token)  # the heartbeat renews it
        try:
            advance_leased(runner, claimed, deadline)
            with self._lock:
                self.report.advanced += 1
        except VersionConflict:  # fenced: the lease was lost, or another process moved the run
            with self._lock:
                self.report.fenced += 1
        except RatchetError as exc:
            with self._lock:
                self.report.failed.append((claimed.id, str(exc)))
        finally:
            with self._lock:
                self._held.pop(claimed.id, None)
                self._deadlines.pop(claimed.id, None)  # a renewal may have set it again

    def _heartbeat(self) -> None:
        runner = self.make_runner()
        while not self.stop.wait(self.lease_seconds / 3):
            with self._lock:
                held = dict(self._held)
            for run_id, token in held.items():
                asked = time.monotonic()
                try:
                    renewed = runner.store.renew(run_id, token, self.lease_seconds)
                except StoreError:  # the database is away: the lease runs out; no call is made
                    continue
                if renewed:
                    with self._lock:
                        if self._held.get(run_id) == token:
                            self._deadlines[run_id] = lease_deadline(asked, self.lease_seconds)
