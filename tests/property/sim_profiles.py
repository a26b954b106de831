"""What a simulated schedule may contain: its profiles (drivers, faults, events) and the
shipped specs it runs (see :mod:`tests.property.simulation`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ratchet_runner.spec.model import Spec
from tests.conftest import spec_and_text


@dataclass(frozen=True)
class Faults:
    """The chance of each fate a request meets at a provider (the rest commit at once)."""

    unavailable: float = 0.06  # 503: nothing made
    refuse: float = 0.02  # the provider says no: nothing made
    lost_request: float = 0.05  # the request never arrives: nothing made; the caller times out
    late: float = 0.35  # the provider commits later, within the call's timeout
    reply_lost: float = 0.2  # of the requests committed: the reply is lost (Ambiguous)
    lookup_fails: float = 0.08  # a lookup fails (LookupFailed)


@dataclass(frozen=True)
class Profile:
    """The mix of drivers, faults and events a family of schedules draws from."""

    name: str
    workflows: tuple[str, ...] = ("booking", "booking", "booking", "refund")
    max_runs: int = 2
    max_steps: int = 260
    # How long workers and commands lease runs for (``--lease``), one length per schedule; a
    # lease that covers a booking call (15 s) only just, as 20 s does, leaves the least slack.
    leases: tuple[float, ...] = (20.0, 30.0, 30.0, 45.0)
    kills: tuple[int, ...] = (0, 0, 1, 1, 2)  # how many kills a schedule may make
    faults: Faults = Faults()
    effect_faults: tuple[tuple[str, Faults], ...] = ()  # per effect, instead of ``faults``
    decide: float = 0.9  # the chance a run gets a decision
    approve: float = 0.85  # the chance a decision approves (else it rejects)
    second_decision: float = 0.2
    second_start: float = 0.25
    resumes: tuple[int, ...] = (0, 0, 1, 1, 2)
    workers: tuple[int, ...] = (1, 1, 2, 2, 3)
    passes: tuple[int, ...] = (1, 1, 2, 4, 8)  # how many passes a worker makes, polling
    polls: tuple[float, float] = (0.2, 2.0)  # the shortest and longest poll between passes
    # How many rescues a schedule may make: while a request is in flight and a run is leased,
    # the clock jumps just past every lease on record and a worker arrives (a request sent
    # under a lease that expires before the request's timeout is then still in flight).
    rescues: tuple[int, ...] = (0, 1, 1, 2)
    rescue_weight: float = 0.08
    operator: float = 0.15
    # The weight of a clock jump, and of a provider settling one request it holds, against 1
    # for each driver that can go on: one of each per schedule (a slow provider keeps requests
    # in flight across many steps; a quick one settles them at once).
    jump_weights: tuple[float, ...] = (0.05, 0.12, 0.3)
    settle_weights: tuple[float, ...] = (0.05, 0.2, 0.6)
    spawn_weight: float = 0.4
    kill_weight: float = 0.04  # per live driver, while the schedule may still kill
    # (chance, shortest, longest) of each size of clock jump; hours pass approval and pause
    # expiries
    jumps: tuple[tuple[float, float, float], ...] = (
        (0.4, 0.1, 3.0),
        (0.3, 3.0, 20.0),
        (0.27, 20.0, 65.0),
        (0.03, 2 * 3600.0, 5 * 3600.0),
    )

    # -- late commits at drawn moments (the late-commit profiles) --------------------------
    # What a provider that does not deduplicate declares as its commits_within, one per
    # schedule. Empty: it declares 15 s, and a late request is committed at a moment the
    # scheduler picks, within the call's timeout (the other profiles). Given: each late request
    # is committed at a moment drawn when it arrives, its delay up to ``delay_spread`` (one per
    # schedule) of the declared window, which may be past the caller's timeout, or, with the
    # chance ``beyond`` (one per schedule), beyond the window, up to ``beyond_factor`` times it:
    # a provider breaking the contract its binding declares.
    commits_within: tuple[float, ...] = ()
    delay_spread: tuple[float, ...] = (1.0,)
    beyond: tuple[float, ...] = (0.0,)
    beyond_factor: float = 3.0
    # -- stalls (SIGSTOP) between the lease check and the send -------------------------------
    # ``stall_points``: a driver yields at every point between securing its lease for an
    # attempt and sending it (before and after each lease check, before and after the
    # attempt's commit), not only before its store calls and the send. At any of them the
    # scheduler may stall it: the clock moves on by a moment, just past every lease on record
    # (then, with the chance ``stall_rescue``, a rescuer arrives) or just past the call's
    # deadline, while the driver stays where it is. ``stalls``: how many a schedule may make;
    # ``stall_weight``: the weight of stalling a driver that stands at such a point.
    stall_points: bool = False
    stalls: tuple[int, ...] = (0,)
    stall_weight: float = 0.0
    stall_rescue: float = 0.6
    # How long a runner waits in the process (``RunnerOptions.inline_wait``) before it leaves a
    # back-off or a settle window to a stored wake-up time for a worker, one per schedule.
    inline_waits: tuple[float, ...] = (0.0, 5.0)
    # How many workers a schedule may call in once its arrivals are spent and nothing is left
    # to move but the clock, while a run is still running or a request in flight: each arrives
    # at the next moment something is due (a run's wake-up, a lease's end, a provider's
    # commit), as a pool of workers polling would, instead of the final passes jumping past
    # them all at once.
    standby: int = 0

    @property
    def timed(self) -> bool:
        """Whether late requests are committed at drawn moments (the late-commit profiles)."""
        return bool(self.commits_within)

    def faults_for(self, effect: str) -> Faults:
        return dict(self.effect_faults).get(effect, self.faults)


#: Faults of the late-commit profiles: most requests are committed late, few fail outright.
LATE_FAULTS = Faults(
    unavailable=0.03, refuse=0.01, lost_request=0.04, late=0.6, reply_lost=0.25, lookup_fails=0.05
)

#: What the late-commit profiles share: a travel provider (never deduplicating) that commits
#: most requests late, holders stalled between their lease check and the send, rescuers
#: arriving once the leases have run out, kills.
_LATE: dict[str, Any] = {
    "workflows": ("booking", "booking", "booking", "refund"),
    "faults": LATE_FAULTS,
    "kills": (0, 0, 1),
    "second_start": 0.1,
    "second_decision": 0.1,
    "operator": 0.1,
    "rescues": (0, 1, 2),
    "delay_spread": (0.3, 1.0, 1.0),
    "stall_points": True,
    "stalls": (2, 4, 6),
    "stall_weight": 0.6,
    "standby": 6,
    "max_steps": 320,
    "jumps": ((0.4, 0.1, 3.0), (0.35, 3.0, 20.0), (0.22, 20.0, 65.0), (0.03, 600.0, 3600.0)),
}

#: Every kind of schedule: the broad mix CI and the soak run, focused ones, and the two
#: late-commit ones.
PROFILES = {
    "mixed": Profile("mixed"),
    # A command's call in flight while workers and resumes come and go (bug 1).
    "command-vs-worker": Profile(
        "command-vs-worker",
        workflows=("booking",),
        max_runs=1,
        kills=(0,),
        faults=Faults(
            unavailable=0, refuse=0, lost_request=0, late=0.7, reply_lost=0.2, lookup_fails=0
        ),
        decide=1.0,
        approve=1.0,
        second_decision=0.0,
        second_start=0.0,
        resumes=(0, 1, 2),
        workers=(1, 2),
        passes=(4, 8, 12),
        rescues=(0,),
        operator=0.0,
        jumps=((0.4, 0.1, 3.0), (0.35, 3.0, 20.0), (0.25, 20.0, 65.0)),
    ),
    # A holder that stalls between securing its lease and sending its request (a slow commit,
    # a paused process), under a lease that only just covers the call, while rescuers arrive
    # the moment the lease has expired and the request is still in flight.
    "stalled-holder": Profile(
        "stalled-holder",
        workflows=("booking",),
        max_runs=1,
        leases=(20.0,),
        kills=(0,),
        faults=Faults(
            unavailable=0, refuse=0, lost_request=0, late=0.9, reply_lost=0.1, lookup_fails=0
        ),
        decide=1.0,
        approve=1.0,
        second_decision=0.0,
        second_start=0.0,
        resumes=(0,),
        workers=(1, 2),
        passes=(4, 8),
        rescues=(2, 4),
        rescue_weight=0.3,
        operator=0.0,
        settle_weights=(0.05,),
        jump_weights=(0.15,),
        jumps=((1.0, 5.0, 17.0),),
    ),
    # A hold whose reply is lost and whose lookup fails, then a saga that compensates (bug 4).
    "unknown-undo": Profile(
        "unknown-undo",
        workflows=("booking",),
        max_runs=1,
        kills=(0,),
        faults=Faults(
            unavailable=0, refuse=0, lost_request=0, late=0.2, reply_lost=0, lookup_fails=0
        ),
        effect_faults=(
            (
                "hold_hotel",
                Faults(
                    unavailable=0,
                    refuse=0,
                    lost_request=0,
                    late=0.3,
                    reply_lost=0.9,
                    lookup_fails=0.8,
                ),
            ),
        ),
        decide=0.3,
        approve=0.0,
        second_decision=0.0,
        second_start=0.0,
        resumes=(0, 1),
        workers=(1, 2),
        rescues=(0, 1),
        operator=0.0,
        jumps=((0.4, 0.1, 3.0), (0.35, 3.0, 20.0), (0.25, 20.0, 65.0)),
    ),
    # A provider that keeps its contract: every late request committed within the commits_within
    # it declares (15 s, the call's timeout; or 25 or 45 s, past the caller's timeout), at a
    # moment drawn per request; holders stalled at every point between their lease check and
    # the send. No change may be made twice.
    "late-commits": Profile("late-commits", commits_within=(15.0, 25.0, 45.0), **_LATE),
    # A provider that breaks it: some late requests committed beyond the commits_within it
    # declares, up to three times it. A change may then be made twice, but never silently:
    # every duplicate is detected, its run handed to a person, its extra change undone.
    "late-commits-beyond": Profile(
        "late-commits-beyond",
        commits_within=(15.0, 25.0),
        beyond=(0.15, 0.35, 0.6),
        **_LATE,
    ),
}

#: The late-commit profiles, which ``python -m bench.simulate --profile late`` runs in turn.
LATE_PROFILES = ("late-commits", "late-commits-beyond")


@dataclass(frozen=True)
class Workload:
    """How the simulation starts and decides runs of one shipped spec."""

    spec: str
    key: Callable[[int], str]
    input: Callable[[str, int], dict[str, Any]]
    approver: str
    operator: str


WORKLOADS = {
    "booking": Workload(
        "booking",
        lambda n: f"TRIP-{n}",
        lambda key, n: {
            "trip": key,
            "traveller": f"PAX-{n:04d}",
            "flight": "AC123-2026-12-20",
            "hotel": "HARBOUR-INN",
            "nights": 3,
        },
        "travel_agent",
        "travel_ops",
    ),
    "refund": Workload(
        "refund",
        lambda n: f"T-{90000 + n}",
        lambda key, n: {
            "ticket": key,
            "order": f"LK-{700000 + n}",
            "amount": 9.95,
            "currency": "CAD",
            "reason": "RFD-LATE",
        },
        "agent",
        "payments_ops",
    ),
}

_SPECS: dict[str, tuple[Spec, str]] = {}


def load(name: str) -> tuple[Spec, str]:
    """A shipped spec and its text, parsed once per process."""
    if name not in _SPECS:
        _SPECS[name] = spec_and_text(name)
    return _SPECS[name]


def loaded() -> list[Spec]:
    """The shipped specs parsed so far."""
    return [spec for spec, _text in _SPECS.values()]
