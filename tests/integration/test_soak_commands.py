"""Commands race workers over providers that commit late, with SIGKILLs (on SQLite and PostgreSQL).

One store and one practice world. Worker processes (``--lease 5``) are killed with SIGKILL at
random moments, mostly while they hold a run, and started again. Meanwhile real ``ratchet
approve`` and ``ratchet reject`` commands decide bookings, some killed at a random moment shortly
after they start and some while their call is on record (mid-call when the provider is slow); a
booking whose decision was not recorded is decided again. Several ``ratchet resume`` commands at
once race each other and the workers on one run, and ``ratchet signal`` commands race on parcels:
the same ``--id`` twice at once, and another ID (for either event) beside it. Every command leases
runs for 5 s too. A good share of the holds, confirmations and hotel releases reach a provider
that commits late (``slow_commit``: a lookup meanwhile finds nothing) and that does not
deduplicate by idempotency key (the practice travel services); a few find it unavailable.

Whoever calls holds the run's lease, and nobody reconciles while a live process's call may still
be in flight. So at the end no change was made twice, every run ended where its decision or
signal leads, none is stuck or leased, and every hold is released or part of its trip's
itinerary. A killed process takes its in-flight practice call with it; what no lease can close, a
provider committing after the lease ran out, is not what this test is about.

Sizes come from the environment, so CI and a longer soak share one test:
``RATCHET_SOAK_CMD_TRIPS`` (bookings; default 10), ``RATCHET_SOAK_CMD_PARCELS`` (parcels;
default 4), ``RATCHET_SOAK_CMD_WORKERS`` (worker processes; default 2),
``RATCHET_SOAK_CMD_KILLS`` (workers killed; default 4), ``RATCHET_SOAK_CMD_RESUMES`` (groups of
racing resumes; default 3), ``RATCHET_SOAK_CMD_PARALLEL`` (command processes at a time; default
4), ``RATCHET_SOAK_CMD_SEED`` (default 1) and ``RATCHET_SOAK_CMD_SECONDS`` (the longest the mix
may take; default 300).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from resource import RUSAGE_CHILDREN, RUSAGE_SELF, getrusage
from typing import Any

import pytest

from ratchet_runner.adapters.practice import PracticeWorld
from ratchet_runner.clock import SystemClock
from ratchet_runner.engine.runner import Runner
from ratchet_runner.spec.validate import load_spec
from ratchet_runner.store.records import EventRecord
from ratchet_runner.store.store import Store
from tests.conftest import ROOT, ratchet_process, spec_and_text
from tests.integration.test_soak import _size

PARCEL = ROOT / "tests" / "fixtures" / "parcel.yaml"

#: Every process leases runs for 5 s: a killed one keeps others off its run that long.
LEASE = ("--lease", "5")

#: Where a parcel's signal takes it.
SIGNALLED = {"parcel_received": "inspecting", "customer_kept_it": "kept"}
SIGNAL_DATA = {"parcel_received": '{"weight_kg": 2.5}', "customer_kept_it": "{}"}


@dataclass
class Command:
    """A ``ratchet`` command process this test started, and when (if ever) to kill it."""

    proc: subprocess.Popen[str]
    kind: str
    run_id: str
    kill_at: float | None = None
    kill_on_call: str | None = None  # kill it shortly after a call of this effect is on record
    killed: bool = False


class Soak:
    """The command processes under way, when to kill them, and how they ended."""

    def __init__(self, home: Path, url: str, store: Store, seed: int) -> None:
        self.home = home
        self.url = url
        self.store = store
        self.rng = random.Random(seed)
        self.live: list[Command] = []
        self.launched: Counter[str] = Counter()
        self.killed: Counter[str] = Counter()
        self.exits: Counter[str] = Counter()
        self.broken: list[str] = []  # commands that ended with an internal error or a traceback

    def launch(self, kind: str, run_id: str, *args: str) -> Command:
        proc = ratchet_process(self.home, self.url, *args, capture=True)
        command = Command(proc, kind, run_id)
        self.live.append(command)
        self.launched[kind] += 1
        return command

    def reap(self) -> None:
        for command in list(self.live):
            if command.proc.poll() is None:
                continue
            out, err = command.proc.communicate()
            self.live.remove(command)
            code = command.proc.returncode
            self.exits[f"{command.kind} {'killed' if command.killed else code}"] += 1
            if not command.killed and (code == 3 or code < 0 or "Traceback" in out + err):
                self.broken.append(f"{command.kind} {command.run_id}: exit {code}: {err.strip()}")

    def kill(self, command: Command) -> None:
        if not command.killed and command.proc.poll() is None:
            command.proc.send_signal(signal.SIGKILL)
            command.killed = True
            self.killed[command.kind] += 1

    def kill_due(self) -> None:
        now = time.monotonic()
        for command in self.live:
            if command.kill_on_call and command.kill_at is None and self._calling(command):
                command.kill_at = now + self.rng.uniform(0.0, 1.5)
            if command.kill_at is not None and now >= command.kill_at:
                self.kill(command)

    def _calling(self, command: Command) -> bool:
        return any(
            op.effect == command.kill_on_call and op.status == "pending" and op.attempts == 1
            for op in self.store.operations(command.run_id)
        )

    def busy(self, run_id: str, kinds: tuple[str, ...]) -> bool:
        return any(c.run_id == run_id and c.kind in kinds for c in self.live)


def _spawn_worker(home: Path, url: str) -> subprocess.Popen[str]:
    return ratchet_process(home, url, "worker", *LEASE, "--poll", "0.05", "--concurrency", "2")


def _victims(workers: list[subprocess.Popen[str]], store: Store) -> tuple[list[int], list[int]]:
    """Which workers to kill: those that hold a run at this moment, and those that may be killed
    at all. Not one holding a run whose call was sent twice already: each kill mid-call spends an
    attempt, and a third would rightly send the run to a person (its budget is spent)."""
    holders: dict[str, bool] = {}  # pid -> may be killed
    for lease in store.leases():
        pid = str(lease["lease_owner"]).split(":")[1]
        ops = store.operations(str(lease["id"]))
        spare = all(op.status != "pending" or op.attempts < 2 for op in ops)
        holders[pid] = holders.get(pid, True) and spare
    busy = [i for i, w in enumerate(workers) if holders.get(str(w.pid))]
    allowed = [i for i, w in enumerate(workers) if holders.get(str(w.pid), True)]
    return busy, allowed


def _cpu() -> tuple[float, float]:
    """CPU seconds used so far by this process, and by the processes it has waited for."""
    mine, children = getrusage(RUSAGE_SELF), getrusage(RUSAGE_CHILDREN)
    return mine.ru_utime + mine.ru_stime, children.ru_utime + children.ru_stime


def _mid_call(history: list[EventRecord]) -> bool:
    """Whether the last call in ``history`` has no outcome recorded after it."""
    for event in reversed(history):
        if event.kind == "call":
            return True
        if event.kind not in ("no_compensation", "compensation_registered"):
            return False
    return False


def _holds(world: PracticeWorld) -> list[dict[str, str]]:
    """Every hold the practice travel services made, and its status now."""
    db = sqlite3.connect(world.path, timeout=60)
    try:
        rows = db.execute("SELECT hold_id, kind, trip, status FROM holds ORDER BY rowid").fetchall()
    finally:
        db.close()
    return [dict(zip(("hold_id", "kind", "trip", "status"), r, strict=True)) for r in rows]


def _call_numbers(rng: random.Random, share: float, upto: int) -> list[int]:
    """About ``share`` of the call numbers 1 to ``upto``, at random."""
    return [n for n in range(1, upto + 1) if rng.random() < share]


@pytest.mark.slow
def test_commands_racing_workers_over_late_commits_make_each_change_once(
    store_url: str, tmp_path: Path
) -> None:
    postgres = store_url.startswith("postgresql")
    # The same sizes on both stores: starting a command process costs the most, on either.
    trips_n = _size("RATCHET_SOAK_CMD_TRIPS", postgres, 8, 8)
    parcels_n = _size("RATCHET_SOAK_CMD_PARCELS", postgres, 4, 4)
    workers_n = _size("RATCHET_SOAK_CMD_WORKERS", postgres, 2, 2)
    kills_target = _size("RATCHET_SOAK_CMD_KILLS", postgres, 4, 4)
    resume_groups = _size("RATCHET_SOAK_CMD_RESUMES", postgres, 3, 3)
    parallel = _size("RATCHET_SOAK_CMD_PARALLEL", postgres, 4, 4)
    seed = _size("RATCHET_SOAK_CMD_SEED", postgres, 1, 1)
    home = tmp_path / "home"
    world = PracticeWorld(home / "practice.db")
    store = Store(store_url)
    soak = Soak(home, store_url, store, seed)
    rng = soak.rng
    began, cpu = time.monotonic(), _cpu()

    # A provider that commits late on a good share of the calls that make or confirm a hold (and
    # of the hotel releases), unavailable on a few others: never on three calls in a row, so that no
    # operation runs out of its three attempts.
    for effect in ("hold_flight", "hold_hotel", "confirm_itinerary", "release_hotel"):
        slow = _call_numbers(rng, 0.8, 3 * trips_n)
        unavailable = [n for n in range(3, 3 * trips_n, 7) if n not in slow][:3]
        for kind, calls in (("slow_commit", slow), ("unavailable", unavailable)):
            if calls:  # a fault names at least one call
                world.add_fault(effect, kind, calls=calls)

    # Short leases need short effect timeouts: a call is started only when the lease outlasts it.
    booking, booking_text = spec_and_text("booking", timeout="3s")
    parcel, parcel_text = load_spec(PARCEL), PARCEL.read_text(encoding="utf-8")
    runner = Runner(store, lambda a: world.adapter(a.kind), SystemClock())
    decisions: dict[str, str] = {}  # trip run -> approve or reject
    trip_of: dict[str, str] = {}
    for i in range(trips_n):
        booked: dict[str, Any] = {
            "trip": f"TRIP-{i}",
            "traveller": f"PAX-{i}",
            "flight": "AC123-2026-12-20",
            "hotel": "HARBOUR-INN",
            "nights": 2,
        }
        run, _ = runner.start(booking, booking_text, booked)
        decisions[run.id] = "reject" if i % 3 == 1 else "approve"
        trip_of[run.id] = booked["trip"]
    world.seed(
        {
            "orders": [
                {"order": f"LK-{500000 + i}", "sku": "LADDER-3", "paid": 129.0, "currency": "CAD"}
                for i in range(parcels_n)
            ]
        }
    )
    sent: dict[str, list[tuple[str, str]]] = {}  # parcel run -> the (signal ID, event) sent
    for i in range(parcels_n):
        data = {"ticket": f"P-{i}", "order": f"LK-{500000 + i}", "sku": "LADDER-3"}
        run, _ = runner.start(parcel, parcel_text, data)
        sent[run.id] = []

    workers = [_spawn_worker(home, store_url) for _ in range(workers_n)]
    worker_kills = 0
    next_worker_kill = time.monotonic() + rng.uniform(2.0, 5.0)
    postponed = groups = 0
    deadline = time.monotonic() + float(os.environ.get("RATCHET_SOAK_CMD_SECONDS", 300))

    def decide(run_id: str) -> None:
        decision = decisions[run_id]
        who = ["--as", "agent-soak", "--role", "travel_agent"]
        if decision == "reject":
            who += ["--reason", "the soak says no"]
        command = soak.launch(decision, run_id, decision, run_id, *who, *LEASE)
        fate = rng.random()
        if fate < 0.15:  # at a random moment shortly after it starts
            command.kill_at = time.monotonic() + rng.uniform(0.3, 3.5)
        elif fate < 0.5:  # while its call is on record: mid-call if the provider is slow
            command.kill_on_call = "confirm_itinerary" if decision == "approve" else "release_hotel"

    def signal_parcel(run_id: str) -> None:
        event = rng.choice(sorted(SIGNALLED))
        other = rng.choice(sorted(SIGNALLED))
        first, second = f"evt-{rng.getrandbits(32):08x}", f"evt-{rng.getrandbits(32):08x}"
        for signal_id, name in ((first, event), (first, event), (second, other)):
            if (signal_id, name) not in sent[run_id]:
                sent[run_id].append((signal_id, name))
            command = soak.launch(
                "signal",
                run_id,
                *("signal", run_id, name, "--id", signal_id, "--data", SIGNAL_DATA[name]),
                *LEASE,
            )
            if rng.random() < 0.15:
                command.kill_at = time.monotonic() + rng.uniform(0.3, 2.5)

    def resume_group() -> None:
        """Two or three resumes at once on one run: one with a call in flight if there is one."""
        running = {r.id for r in store.list_runs("running", limit=10_000)}
        calling = sorted(
            {o.run_id for o in store.operations() if o.status == "pending" and o.attempts} & running
        )
        run_id = rng.choice(calling or sorted(running) or list(decisions))
        for _ in range(rng.choice((2, 3))):
            soak.launch("resume", run_id, "resume", run_id, *LEASE)

    try:
        while time.monotonic() < deadline:
            soak.reap()
            soak.kill_due()
            if worker_kills < kills_target and time.monotonic() >= next_worker_kill:
                busy, allowed = _victims(workers, store)
                if busy or (allowed and postponed >= 20):
                    victim = workers.pop(rng.choice(busy or allowed))
                    victim.send_signal(signal.SIGKILL)
                    victim.wait()
                    worker_kills += 1
                    workers.append(_spawn_worker(home, store_url))
                    next_worker_kill = time.monotonic() + rng.uniform(2.0, 5.0)
                    postponed = 0
                else:  # rather one that holds a run, if one does within the next 5 s
                    next_worker_kill += 0.25
                    postponed += 1
            runs = {r.id: r for r in store.list_runs(limit=10_000)}
            undecided = [
                i
                for i in decisions
                if runs[i].state in ("holding_flight", "holding_hotel", "approving")
            ]
            to_decide = [
                i
                for i in undecided
                if runs[i].state == "approving" and not soak.busy(i, ("approve", "reject"))
            ]
            unsignalled = [i for i in sent if runs[i].state in ("labelling", "awaiting")]
            to_signal = [
                i
                for i in unsignalled
                if runs[i].state == "awaiting" and not soak.busy(i, ("signal",))
            ]
            if (
                not undecided
                and not unsignalled
                and worker_kills >= kills_target
                and groups >= resume_groups
                and not soak.live
            ):
                break
            if len(soak.live) < parallel:
                choices = (
                    ["decide"] * bool(to_decide)
                    + ["signal"] * bool(to_signal)
                    + ["resume"] * (groups < resume_groups)
                )
                if choices:
                    choice = rng.choice(choices)
                    if choice == "decide":
                        decide(rng.choice(to_decide))
                    elif choice == "signal":
                        signal_parcel(rng.choice(to_signal))
                    else:
                        resume_group()
                        groups += 1
            time.sleep(0.1)
        mixed = time.monotonic() - began
        # No more kills: the workers drain what is left (a run a killed process held is taken
        # over once its lease has run out).
        drain = time.monotonic() + 120
        while store.status_counts().get("running", 0) and time.monotonic() < drain:
            soak.reap()
            time.sleep(0.2)
    finally:
        for command in soak.live:
            command.proc.kill()
            command.proc.communicate()
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            worker.wait(timeout=120)
    soak.live.clear()
    # A final pass once the longest lease has run out, for anything a killed process left.
    expiry = time.monotonic() + 30
    while any(float(lease["left"]) >= 0 for lease in store.leases()):
        assert time.monotonic() < expiry, store.leases()
        time.sleep(0.2)
    final = ratchet_process(home, store_url, "worker", "--once", capture=True)
    _, err = final.communicate(timeout=300)
    assert final.returncode == 0, err

    # -- what happened -----------------------------------------------------------------------
    problems: dict[str, list[str]] = defaultdict(list)
    changes = world.changes()
    operations = store.operations()
    run_of = {op.operation_id: op.run_id for op in operations}
    duplicates = lost = stuck = leaked = 0  # duplicates: changes made again under one op ID
    for op_id, times in Counter(c.operation_id for c in changes).items():
        if times > 1:
            duplicates += times - 1
            problems[run_of.get(op_id, "?")].append(f"{times} changes under op {op_id}")
    twice = 0  # runs with a change made more than once (under one op ID or several)
    holds = _holds(world)
    for run_id, decision in decisions.items():
        run = store.get_run(run_id)
        trip = trip_of[run_id]
        mine = [h for h in holds if h["trip"] == trip]
        itineraries = [c for c in changes if c.operation == "confirm" and c.args["trip"] == trip]
        for kind in ("flight", "hotel"):
            made = [h for h in mine if h["kind"] == kind]
            if len(made) != 1:  # twice under one op ID is counted above; this also catches two IDs
                lost += not made
                problems[run_id].append(f"{len(made)} {kind} holds for {trip}")
        if len(itineraries) > 1:
            problems[run_id].append(f"{len(itineraries)} itineraries for {trip}")
        twice += len(itineraries) > 1 or any(
            sum(h["kind"] == kind for h in mine) > 1 for kind in ("flight", "hotel")
        )
        wanted = "confirmed" if decision == "approve" else "released"
        if run.status in ("running", "needs_person"):
            stuck += 1
            problems[run_id].append(f"stuck in {run.state} ({run.status})")
        elif run.state != wanted:
            lost += 1
            problems[run_id].append(f"{decision}d, but ended in {run.state} ({run.status})")
        if (decision == "approve") != bool(itineraries):
            lost += 1
            problems[run_id].append(f"{decision}d, and {len(itineraries)} itineraries")
        if decision == "approve" and itineraries:
            kept = {itineraries[0].args["flight_hold"], itineraries[0].args["hotel_hold"]}
            strays = [h for h in mine if h["hold_id"] not in kept or h["status"] != "held"]
        else:
            strays = [h for h in mine if h["status"] != "released"]
        if strays:
            leaked += len(strays)
            problems[run_id].append(f"holds left behind: {strays}")
    for run_id, signals in sent.items():
        run = store.get_run(run_id)
        received = [
            (signal_id, event)
            for signal_id, event in dict(signals).items()
            if store.signal(run_id, signal_id) is not None
        ]
        labels = [
            c
            for c in changes
            if c.operation == "create_label" and run_of.get(c.operation_id) == run_id
        ]
        if len(labels) != 1:
            twice += len(labels) > 1
            lost += not labels
            problems[run_id].append(f"{len(labels)} labels")
        if run.status in ("running", "needs_person"):
            stuck += 1
            problems[run_id].append(f"stuck in {run.state} ({run.status})")
        elif len(received) != 1 or run.state != SIGNALLED[received[0][1]]:
            lost += 1
            problems[run_id].append(f"signals received {received}; ended in {run.state}")
    leases = store.leases()
    stuck += len(leases)
    rescued: Counter[str] = Counter()  # runs taken over from a dead holder (mid-call or not)
    for run_id in [*decisions, *sent]:
        history = store.history(run_id)
        for at, event in enumerate(history):
            if event.kind == "rescued":
                dead = str(event.data.get("previous", ""))
                who = "command" if dead.startswith("ratchet ") else "worker"
                rescued[f"{who}{' mid-call' if _mid_call(history[:at]) else ''}"] += 1
    print(
        f"\nsoak ({store_url.split(':')[0]}, seed {seed}): {trips_n} trips, {parcels_n} parcels, "
        f"{worker_kills} worker kills, mixed in {mixed:.1f} s, "
        f"{time.monotonic() - began:.1f} s in all\n"
        f"  commands launched {dict(soak.launched)}, killed {dict(soak.killed)}\n"
        f"  exits {dict(sorted(soak.exits.items()))}\n"
        f"  runs rescued from a dead {dict(rescued)}; "
        f"{sum(1 for c in world.calls() if c['outcome'] == 'lookup')} lookups\n"
        f"  cpu: {_cpu()[0] - cpu[0]:.1f} s in this process, {_cpu()[1] - cpu[1]:.1f} s in the "
        "ratchet processes\n"
        f"  found: {duplicates} duplicate change(s) ({twice} run(s) with a change made twice), "
        f"{lost} lost, {stuck} stuck, {leaked} leaked hold(s)"
    )
    report = _report(home, store_url, problems, changes, run_of, leases, soak.broken, seed)
    assert (duplicates, twice, lost, stuck, leaked, soak.broken) == (0, 0, 0, 0, 0, []), report
    assert worker_kills == kills_target
    store.close()


def _report(
    home: Path,
    url: str,
    problems: dict[str, list[str]],
    changes: list[Any],
    run_of: dict[str, str],
    leases: list[dict[str, Any]],
    broken: list[str],
    seed: int,
) -> str:
    """What a person needs to debug a failure: per run at fault, what is wrong, its
    ``ratchet trace --json`` and the world's changes for it."""
    lines = [f"seed {seed} (RATCHET_SOAK_CMD_SEED)", *broken]
    if leases:
        lines.append(f"leases left: {leases}")
    for run_id, found in list(problems.items())[:6]:
        lines.append(f"== run {run_id}: {'; '.join(found)}")
        trace = ratchet_process(home, url, "trace", run_id, "--json", capture=True)
        out, err = trace.communicate(timeout=120)
        lines.append(out or err)
        made = [c.__dict__ for c in changes if run_of.get(c.operation_id) == run_id]
        lines.append("world changes: " + json.dumps(made, indent=1, default=str))
    return "\n".join(lines)
