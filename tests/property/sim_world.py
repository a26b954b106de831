"""The world a simulated schedule runs in: its clock, its providers, and the store as the
drivers see it (see :mod:`tests.property.simulation`)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from sqlalchemy import event

from ratchet_runner.adapters.base import (
    Ambiguous,
    Call,
    Done,
    Found,
    LookupFailed,
    LookupResult,
    NotFound,
    Outcome,
    Refused,
    Semantics,
    Transient,
    not_sent,
)
from ratchet_runner.engine.runner import Runner
from ratchet_runner.spec.model import Spec
from ratchet_runner.store.records import Change, OperationRecord, RunRecord
from ratchet_runner.store.store import Store
from tests.property.sim_profiles import loaded

if TYPE_CHECKING:
    from tests.property.simulation import Simulation

#: Where every schedule's clock starts (epoch seconds).
START = 1_900_000_000.0

#: Provider kinds that deduplicate by idempotency key (as the practice world's payments do).
DEDUPLICATING = frozenset({"payments", "noop"})


class Killed(BaseException):
    """The driver was killed (SIGKILL): nothing it does from now on reaches the store or a
    provider. A BaseException, so that the code under test cannot catch it by accident."""


class HarnessError(Exception):
    """The simulation itself went wrong (a driver that never yields, say): not a finding."""


# -- the clock ------------------------------------------------------------------------------


class SimClock:
    """One simulated clock for the runners (``now``, ``sleep``), their monotonic clock and the
    store's lease clock. A driver that sleeps waits at a yield point until the scheduler has
    moved the clock past its wake-up time; nothing sleeps in real time."""

    def __init__(self, start: float = START) -> None:
        self._now = start
        self.sim: Simulation | None = None

    def now(self) -> float:
        return self._now

    def set(self, moment: float) -> None:
        self._now = max(self._now, moment)

    def reset(self, moment: float = START) -> None:
        self._now = moment

    def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            return
        sim = self.sim
        if sim is None or sim.current() is None:
            self._now += seconds
            return
        wake = self._now + seconds
        sim.park(f"sleeps {seconds:.2f} s", ready=lambda: self._now >= wake, wake=wake)


def open_store(path: str, clock: SimClock) -> Store:
    """The real store on an SQLite file, with its leases expiring by ``clock``, unsynchronised
    (a simulation has nothing to lose in a power cut)."""
    store = Store(f"sqlite:///{path}", clock=clock)

    @event.listens_for(store.engine, "connect")
    def _fast(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.execute("PRAGMA synchronous=OFF")

    store.engine.dispose()  # the connections made so far were made without it
    return store


@contextmanager
def simulation_store(directory: str) -> Iterator[Store]:
    """One store for many schedules (each schedule resets it)."""
    store = open_store(f"{directory}/simulation.db", SimClock())
    try:
        yield store
    finally:
        store.close()


# -- providers ------------------------------------------------------------------------------


@dataclass(eq=False)
class Request:
    """One request at a provider, from the moment it arrives until the provider settles it.

    In the late-commit profiles a late request has its commit moment drawn when it arrives
    (``commit_at``): the caller hears of it then if that is within its timeout, else it gives
    up at its ``deadline`` (a timeout) while the provider still holds the request, and commits
    it later, unheard. Otherwise (``commit_at`` None) the provider settles it at a moment the
    scheduler picks, by the call's timeout at the latest."""

    seq: int
    provider: Provider
    call: Call
    caller: str
    sent_at: float
    deadline: float  # when the caller gives up: the call's timeout
    fate: str  # now · late · lost_request · unavailable · refuse
    reply_lost: bool
    settled: bool = False  # the provider is done with it
    answered: bool = False  # the caller has its outcome (a reply, or its own timeout)
    outcome: Outcome | None = None
    commit_at: float | None = None  # when a late request is committed (late-commit profiles)

    def describe(self) -> str:
        return f"{self.call.effect} op {self.call.operation_id[:8]} #{self.call.attempt}"

    def due(self) -> float:
        """The next moment this request changes: the caller gives up, or the provider commits
        (or drops) it."""
        if self.commit_at is None:
            return self.deadline
        return self.commit_at if self.answered else min(self.commit_at, self.deadline)

    def last(self) -> float:
        """By when the provider is done with it."""
        return self.deadline if self.commit_at is None else max(self.commit_at, self.deadline)


class Provider:
    """An in-memory provider behind one adapter of a spec. It records every change it commits
    under the operation ID it was sent with; one that does not deduplicate makes a second change
    for a second request with the same ID, as the travel and warehouse services do."""

    def __init__(self, sim: Simulation, name: str, kind: str) -> None:
        self.sim = sim
        self.name = name
        self.dedup = kind in sim.dedup_kinds
        self.changes: dict[str, list[dict[str, Any]]] = {}
        # what compensations made here undid: the receipts (a hold's ID) their arguments name
        self.undone: set[str] = set()

    def receive(self, call: Call, caller: str) -> Request:
        sim = self.sim
        faults = sim.profile.faults_for(call.effect)
        draw = sim.fates.random()
        fate = "now"
        for name in ("unavailable", "refuse", "lost_request", "late"):
            chance = float(getattr(faults, name))
            if draw < chance:
                fate = name
                break
            draw -= chance
        reply_lost = sim.fates.random() < faults.reply_lost
        now = sim.clock.now()
        request = Request(
            sim.next_seq(),
            self,
            call,
            caller,
            now,
            now + (call.timeout or 10.0),
            fate,
            reply_lost,
        )
        if fate == "late" and sim.profile.timed:
            request.commit_at = now + self._delay()
        if fate == "unavailable":
            self._settle(request, Transient("503: service unavailable"))
        elif fate == "refuse":
            self._settle(request, Refused("the provider refused", {"provider": self.name}))
        elif fate == "now":
            self._commit(request)
        else:
            sim.in_flight.append(request)
        return request

    def _delay(self) -> float:
        """How long after it arrives a late request is committed (late-commit profiles): within
        the declared commits_within, or, with the schedule's chance of it, beyond it."""
        sim = self.sim
        window = sim.commits_within
        if sim.fates.random() < sim.beyond:
            return window * (1.0 + sim.fates.uniform(0.01, sim.profile.beyond_factor - 1.0))
        return sim.fates.uniform(0.0, sim.delay_spread * window)

    def settle(self, request: Request) -> str:
        """Settle a request the provider holds: commit it (late), or drop it (lost); in the
        late-commit profiles, what happens to it at its next moment (:meth:`Request.due`)."""
        gives_up = request.commit_at is not None and request.deadline < request.commit_at
        if gives_up and not request.answered:
            timeout = request.call.timeout or 10.0
            self._answer(request, Ambiguous(f"timeout: no reply in {timeout:g} s"))
            return (
                f"{request.caller} gives up on {request.describe()} (its {timeout:g} s "
                f"timeout); {self.name} still holds it"
            )
        self.sim.in_flight.remove(request)
        if request.fate == "late":
            heard = not request.answered
            self._commit(request)
            delay = self.sim.clock.now() - request.sent_at
            said = f"{delay:.1f} s after it arrived"
            if request.commit_at is not None and not self.dedup:
                if delay > self.sim.commits_within:
                    said += f", beyond its commits_within ({self.sim.commits_within:g} s)"
                elif delay > (request.call.timeout or 10.0):
                    said += ", after the caller's timeout"
            if not heard:
                said += ", unheard"
            return (
                f"{self.name} commits {request.describe()} (late, sent by {request.caller}, {said})"
            )
        self._settle(request, Ambiguous("timeout: no reply (the request was lost)"))
        return f"{self.name} never got {request.describe()} (sent by {request.caller}: lost)"

    def _commit(self, request: Request) -> None:
        call = request.call
        sim = self.sim
        made = self.changes.setdefault(call.operation_id, [])
        if made and self.dedup:
            receipt = dict(made[0]["receipt"])
        else:
            field_name = sim.receipt_fields.get(call.effect) or "receipt"
            receipt = {field_name: f"{self.name}-{call.operation_id[:8]}-{len(made) + 1}"}
            delay = sim.clock.now() - request.sent_at
            made.append(
                {
                    "effect": call.effect,
                    "args": call.args,
                    "receipt": receipt,
                    "by": request.caller,
                    "step": sim.step_no,
                    "delay": delay,
                    # committed later than the provider declared it would: its contract broken
                    "beyond": delay > sim.commits_within + 1e-9,
                }
            )
            if self.dedup:
                pass  # a second request there makes no second change, whenever it comes
            elif delay > sim.commits_within + 1e-9:
                sim.seen["late commit beyond the window"] += 1
            elif delay > (call.timeout or 10.0):
                sim.seen["late commit after the caller's timeout"] += 1
            if call.effect in sim.undoing:
                self.undone.update(v for v in call.args.values() if isinstance(v, str))
        if request.reply_lost:
            self._settle(request, Ambiguous("timeout: the reply was lost"))
        else:
            self._settle(request, Done(receipt))

    @staticmethod
    def _settle(request: Request, outcome: Outcome) -> None:
        request.settled = True
        Provider._answer(request, outcome)

    @staticmethod
    def _answer(request: Request, outcome: Outcome) -> None:
        """Give the caller its outcome, unless it has had one (it gave up on its timeout)."""
        if not request.answered:
            request.outcome = outcome
            request.answered = True

    def lookup(self, operation_id: str, effect: str) -> LookupResult:
        if self.sim.fates.random() < self.sim.profile.faults_for(effect).lookup_fails:
            return LookupFailed("the provider's lookup failed")
        made = self.changes.get(operation_id)
        if not made:
            return NotFound()
        first, *rest = (dict(change["receipt"]) for change in made)
        return Found(first, tuple(rest))


class SimAdapter:
    """The adapter protocol over a simulated provider: the caller may stall (a yield point, at
    which the scheduler may move the clock) between the runner's last lease check and the send;
    as a real adapter does, it sends nothing once the call's deadline has passed. A call is then
    in flight until the provider settles it (or, in the late-commit profiles, until the caller's
    timeout); a lookup is one step. It declares its provider's semantics: a provider that does
    not deduplicate declares the schedule's ``commits_within`` (15 s, the call's timeout, within
    which it then commits every request; in the late-commit profiles, drawn per schedule, and in
    ``late-commits-beyond`` not always kept)."""

    def __init__(self, sim: Simulation, provider: Provider) -> None:
        self.sim = sim
        self.provider = provider

    def semantics(self, operation: str, lookup: str | None = None) -> Semantics:
        if self.provider.dedup:
            return Semantics(dedupe=True)
        return Semantics(dedupe=False, commits_within=self.sim.commits_within)

    def call(self, request: Call) -> Outcome:
        sim = self.sim
        sim.park(
            f"about to send {request.effect} op {request.operation_id[:8]}",
            stall="about to send",
            deadline=request.deadline,
        )
        if request.deadline is not None and sim.clock.now() > request.deadline:
            sim.note("; past the call's deadline: not sent")
            sim.seen["not sent: past the call's deadline"] += 1
            return not_sent(request)
        sent = self.provider.receive(request, sim.current_name())
        sim.note(f"; call {sent.describe()} → {_fate(sent)}")
        # a late request committed at a drawn moment: the caller sleeps until then, or until
        # its timeout
        wake = sent.due() if sent.commit_at is not None and not sent.answered else None
        sim.park(f"awaits {sent.describe()}", ready=lambda: sent.answered, wake=wake)
        assert sent.outcome is not None
        sim.note(f"← {_outcome(sent.outcome)}")
        return sent.outcome

    def lookup(self, operation: str, operation_id: str, effect: str = "") -> LookupResult:
        self.sim.park(f"lookup {effect} op {operation_id[:8]}")
        found = self.provider.lookup(operation_id, effect)
        self.sim.note(f"→ {found.kind.replace('_', ' ')}")
        return found


def _fate(request: Request) -> str:
    if request.fate == "late":
        when = "late"
        if request.commit_at is not None:
            when = f"in {request.commit_at - request.sent_at:.1f} s"
            if request.commit_at - request.sent_at > request.provider.sim.commits_within:
                when += ", beyond its commits_within"
        return f"in flight (commits {when})" + (", reply to be lost" if request.reply_lost else "")
    if request.fate == "lost_request":
        return "in flight (request lost)"
    if request.fate == "now":
        return "committed" + (", reply lost" if request.reply_lost else "")
    return request.fate


def _outcome(outcome: Outcome) -> str:
    if isinstance(outcome, Done):
        return "done"
    return f"{outcome.kind} ({outcome.reason})"


# -- the store, seen by a driver ------------------------------------------------------------

#: Store methods that write: the scheduler re-reads the runs' statuses only after one of them.
_WRITES = frozenset(
    {"commit", "create_run", "save_spec", "claim", "claim_run", "renew", "release", "discard_timer"}
)


class StoreProxy:
    """The real store, with a yield point before every call: the scheduler decides when the call
    is made. A killed driver's calls raise :class:`Killed` and touch nothing."""

    def __init__(self, store: Store, sim: Simulation) -> None:
        self._store = store
        self._sim = sim

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if name.startswith("_") or not callable(attr):
            return attr
        sim = self._sim

        def call(*args: Any, **kwargs: Any) -> Any:
            attempt = name == "commit" and _records_a_call(args)
            if attempt:  # the commit of an attempt: between its lease check and its send
                sim.park(_describe(name, args), stall="before committing the attempt")
            else:
                sim.park(_describe(name, args))
            try:
                result = attr(*args, **kwargs)
            except Exception as exc:
                sim.note(f"→ {type(exc).__name__}")
                raise
            finally:
                if name in _WRITES:
                    sim.writes += 1
            summary = _summary(result)
            if summary:
                sim.note(summary)
            if attempt:
                sim.pause_point("after committing the attempt")
            return result

        return call


def _records_a_call(args: tuple[Any, ...]) -> bool:
    """Whether a commit's change records an attempt (a ``call`` event): its request is sent
    next, unless its deadline passes first."""
    return (
        bool(args) and isinstance(args[0], Change) and any(k == "call" for k, _ in args[0].events)
    )


def short(run_id: str) -> str:
    return run_id[:10] if run_id.startswith("run_") else run_id


def _describe(name: str, args: tuple[Any, ...]) -> str:
    if name == "commit" and args and isinstance(args[0], Change):
        change = args[0]
        kinds = ",".join(kind for kind, _ in change.events) or "change"
        fence = " (leased)" if change.lease_token else ""
        return f"commit {short(change.run_id)} v{change.expected_version} [{kinds}]{fence}"
    if args and isinstance(args[0], str) and args[0].startswith("run_"):
        return f"{name} {short(args[0])}"
    if name == "operation" and args:
        return f"operation {str(args[0])[:8]}"
    return name


def _summary(result: Any) -> str:
    if isinstance(result, RunRecord):
        return f"→ {result.state} ({result.status}) v{result.version}"
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], RunRecord):
        return f"→ {'created' if result[1] else 'found'} {short(result[0].id)}"
    if isinstance(result, list) and (not result or isinstance(result[0], RunRecord)):
        return "→ " + (", ".join(f"{short(r.id)} v{r.version}" for r in result) or "none")
    if isinstance(result, OperationRecord):
        return f"→ {result.status} #{result.attempts}"
    if isinstance(result, bool):
        return "→ yes" if result else "→ no"
    return ""


class SimRunner(Runner):
    """The real runner, with each shipped spec parsed once per process rather than once per
    driver (parsing is pure; the store still records the spec's text as always), and, in the
    profiles that stall drivers (``Profile.stall_points``), a yield point before and after each
    lease check an effect step makes between fixing an attempt's deadline and sending it: when
    it secures its lease for the attempt, before the attempt commits
    (``EffectStep._secure_and_fix``), and its last check before the send (``EffectStep._call``).
    The store's proxy yields before and after the attempt's commit, and the adapter before the
    send."""

    sim: Simulation | None = None

    #: The effect step's methods whose lease checks stand between an attempt and its send.
    CHECKS: ClassVar[dict[str, str]] = {
        "_secure_and_fix": "securing its lease for the attempt",
        "_call": "its last lease check",
    }

    def secure_lease(self, run_id: str, timeout: float | None) -> None:
        sim = self.sim
        check = self.CHECKS.get(sys._getframe(1).f_code.co_name)
        if sim is None or check is None:
            super().secure_lease(run_id, timeout)
            return
        # called with the call's time (then its deadline is being fixed) or what is left of it
        deadline = None if timeout is None else self.monotonic() + timeout
        sim.pause_point(f"before {check}", deadline)
        super().secure_lease(run_id, timeout)
        sim.pause_point(f"after {check}")

    def spec_for_digest(self, digest: str) -> Spec:
        for spec in loaded():
            if spec.digest == digest:
                return spec
        return super().spec_for_digest(digest)
