"""The world a simulated schedule runs in: its clock, its providers, and the store as the
drivers see it (see :mod:`tests.property.simulation`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

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
    """One request at a provider, from the moment it arrives until the provider settles it."""

    seq: int
    provider: Provider
    call: Call
    caller: str
    sent_at: float
    deadline: float  # by when the provider has settled it: the call's timeout
    fate: str  # now · late · lost_request · unavailable · refuse
    reply_lost: bool
    settled: bool = False
    outcome: Outcome | None = None

    def describe(self) -> str:
        return f"{self.call.effect} op {self.call.operation_id[:8]} #{self.call.attempt}"


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
        if fate == "unavailable":
            self._settle(request, Transient("503: service unavailable"))
        elif fate == "refuse":
            self._settle(request, Refused("the provider refused", {"provider": self.name}))
        elif fate == "now":
            self._commit(request)
        else:
            sim.in_flight.append(request)
        return request

    def settle(self, request: Request) -> str:
        """Settle a request the provider holds: commit it (late), or drop it (lost)."""
        self.sim.in_flight.remove(request)
        if request.fate == "late":
            self._commit(request)
            return f"{self.name} commits {request.describe()} (late, sent by {request.caller})"
        self._settle(request, Ambiguous("timeout: no reply (the request was lost)"))
        return f"{self.name} never got {request.describe()} (sent by {request.caller}: lost)"

    def _commit(self, request: Request) -> None:
        call = request.call
        made = self.changes.setdefault(call.operation_id, [])
        if made and self.dedup:
            receipt = dict(made[0]["receipt"])
        else:
            field_name = self.sim.receipt_fields.get(call.effect) or "receipt"
            receipt = {field_name: f"{self.name}-{call.operation_id[:8]}-{len(made) + 1}"}
            made.append(
                {
                    "effect": call.effect,
                    "args": call.args,
                    "receipt": receipt,
                    "by": request.caller,
                    "step": self.sim.step_no,
                }
            )
            if call.effect in self.sim.undoing:
                self.undone.update(v for v in call.args.values() if isinstance(v, str))
        if request.reply_lost:
            self._settle(request, Ambiguous("timeout: the reply was lost"))
        else:
            self._settle(request, Done(receipt))

    @staticmethod
    def _settle(request: Request, outcome: Outcome) -> None:
        request.outcome = outcome
        request.settled = True

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
    in flight until the provider settles it; a lookup is one step. It declares its provider's
    semantics: a provider that does not deduplicate commits every request within the call's
    timeout (:attr:`Request.deadline`), which is its ``commits_within``."""

    def __init__(self, sim: Simulation, provider: Provider) -> None:
        self.sim = sim
        self.provider = provider

    def semantics(self, operation: str, lookup: str | None = None) -> Semantics:
        if self.provider.dedup:
            return Semantics(dedupe=True)
        return Semantics(dedupe=False, commits_within=self.sim.commits_within)

    def call(self, request: Call) -> Outcome:
        sim = self.sim
        sim.park(f"about to send {request.effect} op {request.operation_id[:8]}")
        if request.deadline is not None and sim.clock.now() > request.deadline:
            sim.note("; past the call's deadline: not sent")
            return not_sent(request)
        sent = self.provider.receive(request, sim.current_name())
        sim.note(f"; call {sent.describe()} → {_fate(sent)}")
        sim.park(f"awaits {sent.describe()}", ready=lambda: sent.settled)
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
        return "in flight (commits late)" + (", reply to be lost" if request.reply_lost else "")
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
            return result

        return call


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
    driver (parsing is pure; the store still records the spec's text as always)."""

    def spec_for_digest(self, digest: str) -> Spec:
        for spec in loaded():
            if spec.digest == digest:
                return spec
        return super().spec_for_digest(digest)
