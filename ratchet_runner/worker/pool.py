"""A pool of workers: claim runnable runs under leases, advance them, keep the leases alive.

Each worker thread claims one run at a time (``Store.claim``: ``FOR UPDATE SKIP LOCKED`` on
PostgreSQL, ``BEGIN IMMEDIATE`` on SQLite), advances it with every commit fenced by the lease
token, and releases it. A heartbeat renews the leases while work goes on; leases expire by the
database's clock. A worker that was paused past its lease (SIGSTOP, a long GC, a frozen VM)
sends no request on waking (it checks, by its own monotonic clock, that it can still count on
its lease before each call: :meth:`~ratchet_runner.engine.lease.Lease.check`) and its next commit
affects no row
(``LeaseLost``), so it drops the run: the worker that took it over reconciles any pending
operation before calling, and an in-flight call of the paused one carries the same operation ID.

A database restart or failover kills every connection. No thread of the pool dies of it: each
one (opening its store, firing timers, claiming, advancing a run, renewing leases) catches the
failure, waits (capped exponential back-off with jitter, from the poll interval up to
:data:`~ratchet_runner.worker.trouble.MAX_BACKOFF` seconds) and tries again with new
connections. The pool counts such a time as one *outage* of the store: it logs one line when the
store stops answering and one when it answers again, and its :class:`PoolReport` counts the
outages and the seconds they lasted. A run whose step an outage interrupted is not a failed run:
its lease is released (or runs out) and it is claimed again. Any other unexpected exception a
thread meets is reported once, and the thread goes on.

A run started under another binding than the pool's is left to a worker that has it: its lease is
given back unchanged, and the pool's claims skip it for :data:`LEFT_FOR` seconds. A pool with no
binding at all, on a store that is not a practice store, says so once, when its first runner is
made (:func:`~ratchet_runner.worker.passes.unbound_warning`): it parks the runs it claims.

A run whose spec needs a longer lease than the pool's is left the same way, to a worker whose
lease is long enough, and the pool warns once per spec version. With ``refuse_short_lease`` (what
``ratchet worker`` asks), the pool checks, once the store first answers and before any claim,
that its lease covers the spec of every live run, and otherwise stops at once: :meth:`Pool.run`
raises the refusal (:func:`~ratchet_runner.worker.passes.lease_refusal`).

Over 400 lines: one concern, the pool's threads and what each of them may meet (an outage of the
store, an unexpected error, a run left to another worker), which share the pool's lock and its
report; a step itself is :mod:`~ratchet_runner.worker.passes`'s, telling what a thread met
apart and its back-off :mod:`~ratchet_runner.worker.trouble`'s.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..engine.lease import Lease, Leases, owner_identity, validate_lease
from ..engine.runner import Runner, RunnerFactory, RunnerOptions
from ..errors import (
    BindingMismatch,
    LeaseTooShort,
    RatchetError,
    StoreCopiedBack,
    StoreError,
    StoreRevision,
    UsageError,
    VersionConflict,
)
from ..store.bell import Bell, Halt
from ..store.records import RunRecord
from ..store.watch import Watch, watch_for
from .outages import Outages
from .passes import advance_leased, fire_due, lease_refusal, unbound_warning
from .trouble import MIN_BACKOFF, backoff, connection_lost, describe, seconds_text, short

LOG = logging.getLogger(__name__)

#: The shortest wait, in seconds, of an idle thread for the next due time.
MIN_IDLE = 0.001

#: How long, in seconds, the pool's claims skip a run it left to another worker (one with the
#: run's binding, or with a longer lease).
LEFT_FOR = 60.0


@dataclass
class PoolReport:
    """What a pool did: runs advanced, runs fenced off (their lease was lost), timers fired,
    runs that failed (run ID and error; an empty run ID for an error outside any run), and the
    outages of its store: how many began, how many seconds the store was unreachable in all
    (counting an outage still going on when the pool stopped), and whether it was unreachable
    at the end; and the runs it left to a worker with their binding (``left``) or with a longer
    lease (``left_for_lease``)."""

    advanced: int = 0
    fenced: int = 0
    timers: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)
    outages: int = 0
    unreachable_seconds: float = 0.0
    unreachable: bool = False
    left: int = 0
    left_for_lease: int = 0


class _Link:
    """One thread's hold on the store: its runner (``None`` until opened), the outage count it
    has caught up with (an outage that began since may have killed its connections), its
    failures in a row (how long it backs off), and the last unexpected error it reported."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.runner: Runner | None = None
        self.epoch = 0
        self.began = 0.0  # time.monotonic() when its current attempt began
        self.failures = 0
        self.unexpected: str | None = None
        self.wake: threading.Event | None = None  # cuts its back-off short: the store is back
        self.ready = False  # its runner has been checked, warned of and watched with


class Pool:
    """``concurrency`` worker threads in this process, each with its own runner.

    ``make_runner(options=...)`` makes each thread's runner with the options the pool sets: stop
    after the current step once the pool stops, and look for a newer spec version once per poll
    interval. ``log`` receives one line at a time about the store's outages and about unexpected
    errors (default: the module's :mod:`logging` logger, ``ratchet_runner.worker.pool``: the
    store's outages and the errors at ``warning``, the rest at ``info``). ``refuse_short_lease``:
    check at start that the lease covers the spec of every live run, and stop before claiming
    anything if not (:attr:`refused`, raised by :meth:`run`)."""

    def __init__(
        self,
        make_runner: RunnerFactory,
        *,
        concurrency: int = 1,
        lease_seconds: float = 30.0,
        poll: float = 0.5,
        owner: str | None = None,
        log: Callable[[str], None] | None = None,
        listen_url: str | None = None,
        wakeups: bool = True,
        refuse_short_lease: bool = False,
    ) -> None:
        if concurrency < 1:
            raise UsageError(f"a pool needs at least one worker thread, not {concurrency}")
        self.make_runner = make_runner
        self.concurrency = concurrency
        self.lease_seconds = validate_lease(lease_seconds)
        self.poll = poll
        self.owner = owner or owner_identity()
        self.stop = Halt()  # setting it rings the bell the idle threads wait on
        # SIGTERM: finish the current step, release; a new spec version is seen within a poll
        self.options = RunnerOptions(stopping=self.stop.is_set, spec_check_interval=poll)
        self.report = PoolReport()
        self._log = log  # None: the module's logger
        # run ID -> the lease a worker thread holds on it, and the leases of its runner, where
        # the heartbeat records each renewal
        self._held: dict[str, tuple[Lease, Leases]] = {}
        self._unreleased: dict[str, str] = {}  # leases an outage kept this pool from giving back
        self._foreign: dict[str, float] = {}  # runs of another binding -> skipped until when
        self._lock = threading.Lock()
        self.outages = Outages(self.report, self._warn)
        self._warned = False  # that it has no binding at all (said once)
        self._short: set[str] = set()  # spec versions it warned its lease is too short for
        self.refuse_short_lease = refuse_short_lease
        #: Why the pool stopped before claiming anything: its lease is too short for the spec of
        #: a live run (with ``refuse_short_lease``), or the store is one this Ratchet must not
        #: write (at another schema revision, or put back by a plain copy); :meth:`run` raises it.
        self.refused: UsageError | StoreRevision | StoreCopiedBack | None = None
        self._checked = False  # whether the lease was checked against the live runs' specs
        self._checking = threading.Lock()
        self.listen_url = listen_url
        self.wakeups = wakeups
        #: How the pool learns of wake-ups from other processes, once its first runner is open.
        self.watch: Watch | None = None
        self._bell: Bell | None = None

    def run(self, *, until_idle: bool = False) -> PoolReport:
        """Work until :attr:`stop` is set (or, with ``until_idle``, until nothing is left).
        Raises :attr:`refused` if the pool refused to start."""
        threads = [
            threading.Thread(target=self._work, args=(i, until_idle), name=f"ratchet-{i}")
            for i in range(self.concurrency)
        ]
        beat = threading.Thread(target=self._heartbeat, name="ratchet-heartbeat", daemon=True)
        beat.start()
        for thread in threads:
            thread.start()
        for thread in threads:  # in short waits: a signal's handler runs in this thread
            while thread.is_alive():
                thread.join(timeout=0.5)
        self.stop.set()
        while beat.is_alive():  # a renewal under way ends before the caller closes the store
            beat.join(timeout=0.5)
        if self.watch is not None:
            self.watch.close()
        self.outages.stop()
        if self.refused is not None:
            raise self.refused
        return self.report

    # -- the threads ----------------------------------------------------------------------------

    def _work(self, index: int, until_idle: bool) -> None:
        link = _Link(f"ratchet-{index}")
        next_timers = 0.0
        woken = False  # by the bell: a run another process made runnable waits for a claim
        while not self.stop.is_set():
            try:
                runner = self._open(link)
                if runner is None:  # refused: its lease is too short for a live run's spec
                    return
                bell = self._bell
                seen = bell.rings if bell is not None else 0  # before looking: none is missed
                if self._unreleased:
                    self._release_left(runner)
                if index == 0 and not woken and time.monotonic() >= next_timers:
                    # Due timers are looked for once per poll interval while there is work, and
                    # after every wait (for a wake-up, or for the next due time); after a
                    # wake-up, once the run it rang for is claimed and carried on (the wake-up's
                    # path is then one round trip shorter: bench/trace_wake.py).
                    next_timers = time.monotonic() + self.poll
                    fired = fire_due(runner)
                    with self._lock:
                        self.report.timers += sum(1 for f in fired if f.outcome == "fired")
                skipped, woken = woken, False  # the timers, left for after this claim
                asked = time.monotonic()  # the lease starts no earlier than the claim is sent
                claimed = runner.store.claim(
                    self.owner, self.lease_seconds, runner.clock.now(), skip=self._skipped()
                )
                idle = self._idle_for(runner) if not claimed and not until_idle else 0.0
            except Exception as exc:  # the database restarted or is unreachable: try again
                self._pause(link, self._trouble(link, exc, store_level=True))
                continue
            self._answered(link)
            if not claimed:
                if until_idle:
                    return
                if skipped and index == 0:  # nothing to claim: the due timers now
                    next_timers = 0.0
                    continue
                if bell is None:
                    self.stop.wait(idle)
                else:
                    woken = bell.wait(seen, idle) and not self.stop.is_set()
                next_timers = 0.0
                continue
            run = claimed[0]
            lease = Lease.asked(run.id, str(run.lease_token), self.lease_seconds, asked)
            pause = self._advance(link, runner, run, lease)
            if pause:
                self._pause(link, pause)

    def _advance(self, link: _Link, runner: Runner, claimed: RunRecord, lease: Lease) -> float:
        """Take a claimed run as far as it goes; how long to wait before the next claim."""
        with self._lock:
            self._held[claimed.id] = (lease, runner.leases)  # the heartbeat renews it
        try:
            advance_leased(runner, claimed, lease)
            with self._lock:
                self.report.advanced += 1
            self._answered(link)
            return 0.0
        except VersionConflict:  # fenced: the lease was lost, or another process moved the run
            with self._lock:
                self.report.fenced += 1
            return 0.0
        except BindingMismatch:  # another binding's run: given back unchanged, skipped a while
            with self._lock:
                self.report.left += 1
                self._foreign[claimed.id] = time.monotonic() + LEFT_FOR
            return 0.0
        except LeaseTooShort as short:  # likewise, for a worker with a longer lease
            digest = short.digest or claimed.spec_digest
            with self._lock:
                self.report.left_for_lease += 1
                self._foreign[claimed.id] = time.monotonic() + LEFT_FOR
                first = digest not in self._short
                self._short.add(digest)
            if first:
                spec = f"spec {short.spec}" if short.spec else "a spec"
                self._warn(
                    f"warning: the runs of {spec} are left, unchanged, to a worker with a longer "
                    f"--lease (the first: {claimed.id}): {short}"
                )
            return 0.0
        except Exception as exc:
            if connection_lost(exc):  # not the run's fault: it is claimed again
                with self._lock:  # as soon as the lease is given back, once the store answers
                    self._unreleased[claimed.id] = str(claimed.lease_token)
                return self._trouble(link, exc)
            if isinstance(exc, RatchetError):
                with self._lock:
                    self.report.failed.append((claimed.id, str(exc)))
                return 0.0
            return self._trouble(link, exc, run_id=claimed.id)
        finally:
            with self._lock:
                self._held.pop(claimed.id, None)

    def _idle_for(self, runner: Runner) -> float:
        """How long an idle thread waits for a wake-up: the poll interval, or less when a timer
        falls due or a run's back-off ends sooner (at least :data:`MIN_IDLE`)."""
        if not self.wakeups:
            return self.poll
        now = runner.clock.now()
        due = runner.store.next_due(now)
        if due is None:
            return self.poll
        return max(MIN_IDLE, min(self.poll, due - now))

    def _skipped(self) -> list[str]:
        """The runs the pool's claims skip now: the ones it left to another worker (with their
        binding, or a longer lease) less than :data:`LEFT_FOR` seconds ago."""
        now = time.monotonic()
        with self._lock:
            for run_id in [r for r, until in self._foreign.items() if until <= now]:
                del self._foreign[run_id]
            return list(self._foreign)

    def _release_left(self, runner: Runner) -> None:
        """Give back the leases of runs whose step an outage cut off (their release failed
        with it), so that they are claimed again now rather than when the lease runs out. Safe
        whatever happened since: a release matches only the lease token it names, and no call
        of this pool's is in flight for such a run."""
        with self._lock:
            left = list(self._unreleased.items())
            self._unreleased.clear()
        for i, (run_id, token) in enumerate(left):
            try:
                runner.store.release(run_id, token)
            except BaseException:
                with self._lock:
                    self._unreleased.update(left[i:])
                raise

    def _heartbeat(self) -> None:
        link = _Link("ratchet-heartbeat")
        beat = self.lease_seconds / 3
        wait = beat
        while not self.stop.wait(wait):
            wait = beat
            with self._lock:
                held = dict(self._held)
            if not held:
                continue
            try:
                runner = self._open(link)
                if runner is None:
                    return
                for run_id, (lease, leases) in held.items():
                    asked = time.monotonic()
                    if runner.store.renew(run_id, lease.token, lease.seconds):
                        leases.renewed(run_id, lease.token, asked)  # if the thread still holds it
            except Exception as exc:  # the database is away: try again soon; no call is made
                wait = min(beat, self._trouble(link, exc, store_level=True))  # past its lease
                continue
            self._answered(link)

    # -- the store's outages ----------------------------------------------------------------

    def _open(self, link: _Link) -> Runner | None:
        """The thread's runner, opened on first use (which fails while the database is away);
        once an outage has begun since the thread last looked, its pooled connections are
        dropped, so that its next statement opens a new one instead of finding a dead one.
        None when the pool refused to start (:meth:`_lease_fits`)."""
        link.began = time.monotonic()
        if link.runner is None:
            link.epoch = self.outages.epoch
            link.runner = self.make_runner(options=self.options)
        elif link.epoch != self.outages.epoch:
            link.epoch = self.outages.epoch
            drop = getattr(link.runner.store, "drop_connections", None)
            if drop is not None:
                drop()
        if not link.ready:
            if not self._lease_fits(link.runner):
                return None
            self._warn_unbound(link.runner)
            self._watch(link.runner)
            link.ready = True
        return link.runner

    def _lease_fits(self, runner: Runner) -> bool:
        """With ``refuse_short_lease``: whether the pool's lease covers the spec of every live
        run, checked once, by the first thread whose runner opens (the others wait for its
        answer); when it does not, the pool stops before any claim. A store that fails to
        answer raises, as when a runner is opened: the thread tries again."""
        if not self.refuse_short_lease:
            return True
        with self._checking:
            if not self._checked:
                refused = lease_refusal(runner, self.lease_seconds)
                self._checked = True
                if refused is not None:
                    self.refused = refused
                    self.stop.set()
        return self.refused is None

    def _watch(self, runner: Runner) -> None:
        """Once, with the first runner open: ring on the store's bell, and start the watch that
        rings it for other processes' wake-ups (:mod:`~ratchet_runner.store.watch`)."""
        with self._lock:
            if self._bell is not None or not self.wakeups:
                return
            self._bell = self.stop.bell = runner.store.bell
            watch = watch_for(runner.store, self._say, self.listen_url)
            self.watch = watch
        if watch is not None:
            self._say(f"{watch.describe()}; polls every {seconds_text(self.poll)} s as well")
            watch.start()

    def _warn_unbound(self, runner: Runner) -> None:
        """Say, once, that the pool's runners resolve no adapter (a runner is made only once
        the store answers: whether it is a practice store is read from it)."""
        warning = unbound_warning(runner)
        with self._lock:
            if warning is None or self._warned:
                return
            self._warned = True
        self._warn(warning)

    def _pause(self, link: _Link, seconds: float) -> None:
        """Back off for ``seconds``; less if the pool stops, or if the store answers another
        thread again meanwhile (the pool then goes back to work at once, not thread by thread
        as each one's back-off runs out)."""
        wake = link.wake
        if wake is None:
            self.stop.wait(seconds)
            return
        ends = time.monotonic() + seconds
        while not self.stop.is_set() and not wake.is_set():
            left = ends - time.monotonic()
            if left <= 0:
                return
            self.stop.wait(min(left, MIN_BACKOFF))

    def _trouble(
        self, link: _Link, exc: BaseException, *, store_level: bool = False, run_id: str = ""
    ) -> float:
        """Deal with an exception a thread met; how long it waits before it tries again.

        A store error where the store itself was asked (opening it, firing timers, claiming,
        renewing) or any error that says a connection was lost is an outage: the first thread
        to meet it logs it, once; a thread whose connections may have died in an outage that
        began since it last looked tries again soon with new ones. Anything else is unexpected:
        reported once (in the log and in ``failed``) until the thread gets on again."""
        if isinstance(exc, (StoreRevision, StoreCopiedBack)):  # no retry will change it
            with self._lock:
                if self.refused is None:
                    self.refused = exc
            self.stop.set()
            return 0.0
        link.failures += 1
        outage = connection_lost(exc) or (
            store_level and isinstance(exc, StoreError) and not isinstance(exc, VersionConflict)
        )
        if not outage:
            link.wake = None
            delay = backoff(self.poll, link.failures)
            what = describe(exc)
            if f"{run_id} {what}" != link.unexpected:
                link.unexpected = f"{run_id} {what}"
                with self._lock:
                    self.report.failed.append((run_id, what))
                run = f" with run {run_id}" if run_id else ""
                self._warn(
                    f"{link.name}{run}: {what}; the thread goes on in {seconds_text(delay)} s"
                )
            return delay
        delay = backoff(self.poll, link.failures)
        met = self.outages.met(link.epoch, link.began, short(str(exc)), seconds_text(delay))
        if met.known:
            link.failures = 0  # it met an outage already known, now over or being retried
            link.wake = None
            return backoff(self.poll, 1)
        link.wake = met.wake
        return delay

    def _answered(self, link: _Link) -> None:
        """The store answered the thread: an outage it had caught up with is over."""
        link.failures = 0
        link.unexpected = None
        self.outages.answered(link.epoch)

    def _say(self, line: str, level: int = logging.INFO) -> None:
        with contextlib.suppress(Exception):  # a log that cannot be written stops no work
            if self._log is None:
                LOG.log(level, "worker %s: %s", self.owner, line)
            else:
                self._log(f"worker {self.owner}: {line}")

    def note(self, line: str) -> None:
        """A line about this pool in its log (at ``info``), as ``worker OWNER: LINE``."""
        self._say(line)

    def _warn(self, line: str) -> None:
        self._say(line, logging.WARNING)
