"""Providers that commit late and keep no key register: a lookup that finds nothing is believed
only once the provider's ``commits_within`` has passed since the request could have been sent.

The booking's agency does not deduplicate by key. Its ``commits_late`` fault answers nothing and
commits the itinerary 2 s later. Before the fix, the lookup made at once found nothing, the retry
confirmed a second itinerary, and the late commit a first: two itineraries for one approval, and
the run ended ``confirmed (done)`` with nothing to say so. Now the run waits out the agency's
window (3 s, as the practice providers declare it), looks again, finds the late commit, and
makes no second call: on SQLite, on PostgreSQL, and over HTTP.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ratchet_runner.adapters.base import (
    Ambiguous,
    Call,
    Done,
    Found,
    LookupResult,
    NotFound,
    Outcome,
    Semantics,
)
from ratchet_runner.adapters.practice import COMMITS_LATE_SECONDS, PracticeWorld
from ratchet_runner.clock import FakeClock, SystemClock
from ratchet_runner.engine.controls import operate
from ratchet_runner.engine.runner import Runner, RunnerOptions
from ratchet_runner.spec.validate import load_spec
from ratchet_runner.store.records import RunRecord
from ratchet_runner.store.store import Store
from ratchet_runner.worker.passes import fire_due, worker_pass
from tests.conftest import PRACTICE_BINDING, ROOT, spec_and_text
from tests.conftest import run_cli as run
from tests.integration.test_http_binding import binding as binding  # the served practice world

BOOKING = str(ROOT / "specs" / "booking.yaml")
AGENT = ("--as", "agent-3", "--role", "travel_agent")


def _itineraries(capsys: pytest.CaptureFixture[str]) -> Counter[str]:
    """The itineraries confirmed, once every late commit is due (the world commits those as it
    is read)."""
    time.sleep(COMMITS_LATE_SECONDS + 0.5)
    code, out, _ = run(capsys, "effects", "--json")
    assert code == 0
    changes: list[dict[str, Any]] = json.loads(out)["changes"]
    return Counter(c["args"]["trip"] for c in changes if c["operation"] == "confirm")


def _commits_late_booking(capsys: pytest.CaptureFixture[str], *where: str) -> str:
    """The booking's happy example, its confirmation meeting ``commits_late``, approved once:
    what ``approve`` printed."""
    code, _, err = run(
        capsys,
        *("run", BOOKING, "--example", "happy", "--fault", "confirm_itinerary:commits_late"),
        *where,
    )
    assert code == 0, err
    code, out, err = run(capsys, "approve", "TRIP-1001", *AGENT, *where)
    assert code == 0, err
    return out


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "home"
    monkeypatch.setenv("RATCHET_HOME", str(folder))
    for name in ("RATCHET_DB", "RATCHET_BINDINGS", "RATCHET_NOW"):
        monkeypatch.delenv(name, raising=False)
    return folder


def test_an_itinerary_committed_late_is_found_by_waiting_out_the_agencys_window_not_made_twice(
    home: Path, store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    where = ("--db", store_url, "--bindings", str(PRACTICE_BINDING))
    out = _commits_late_booking(capsys, *where)
    assert "confirmed (done)" in out
    assert _itineraries(capsys) == {"TRIP-1001": 1}
    code, trace, _ = run(capsys, "trace", "TRIP-1001", "--db", store_url)
    assert code == 0
    assert "not found yet" in trace  # the first lookup found nothing, and was not believed
    assert "reconcile found" in trace  # the second found the late commit
    assert trace.count("call  ") == 3  # hold_flight, hold_hotel, confirm once: no second confirm


def test_over_http_the_late_itinerary_is_found_and_confirmed_once(
    binding: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _commits_late_booking(capsys, "--bindings", binding)
    assert "confirmed (done)" in out
    assert _itineraries(capsys) == {"TRIP-1001": 1}
    _, trace, _ = run(capsys, "trace", "TRIP-1001")
    assert "not found yet" in trace
    assert "reconcile found" in trace


# -- a provider that holds its commit past the caller's timeout and past the lease ---------------

COURIER = ROOT / "tests" / "fixtures" / "courier.yaml"


class LateCourier:
    """A courier that keeps no key register (a second request makes a second booking) and
    declares ``commits_within``. Its first booking request it holds: no reply within the
    caller's deadline, and the booking committed ``hold`` seconds after it was sent."""

    def __init__(self, hold: float, commits_within: float) -> None:
        self.hold, self.within = hold, commits_within
        self.made: list[tuple[str, str, dict[str, Any]]] = []  # (operation ID, operation, receipt)
        self.sent: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._timers: list[threading.Timer] = []

    def _commit(self, request: Call) -> dict[str, Any]:
        with self._lock:
            number = sum(1 for _, op, _ in self.made if op == request.operation) + 1
            receipt = {f"{request.operation}_id": f"{request.operation}_{number}"}
            self.made.append((request.operation_id, request.operation, receipt))
            return receipt

    def call(self, request: Call) -> Outcome:
        with self._lock:
            self.sent.append((request.operation_id, request.operation))
            first = request.operation == "book" and len(self.sent) == 1
        if first:
            timer = threading.Timer(self.hold, self._commit, args=(request,))
            self._timers.append(timer)
            timer.start()
            if request.deadline is not None:
                time.sleep(max(0.0, request.deadline - time.monotonic()))
            return Ambiguous("timeout: no reply")
        return Done(self._commit(request))

    def lookup(self, operation: str, operation_id: str, effect: str = "") -> LookupResult:
        with self._lock:
            made = [receipt for oid, _, receipt in self.made if oid == operation_id]
        return Found(made[0], tuple(made[1:])) if made else NotFound()

    def semantics(self, operation: str, lookup: str | None = None) -> Semantics:
        return Semantics(dedupe=False, commits_within=self.within)

    def bookings(self) -> list[dict[str, Any]]:
        return [receipt for _, op, receipt in self.made if op == "book"]

    def close(self) -> None:
        for timer in self._timers:
            timer.cancel()


def drive_with_workers(store: Store, courier: LateCourier, lease: float) -> RunRecord:
    """Start order O-1 and let worker passes (leases of ``lease`` seconds, no inline waits)
    take it until it ends or waits for a person, on the real clock."""
    spec = load_spec(COURIER)
    options = RunnerOptions(inline_wait=0.0)
    runner = Runner(store, lambda adapter: courier, SystemClock(), options=options)
    run, _ = runner.start(spec, COURIER.read_text(encoding="utf-8"), {"order": "O-1"})
    deadline = time.monotonic() + 30
    while True:
        worker_pass(runner, lease_seconds=lease)
        run = store.get_run(run.id)
        settled = run.status in ("done", "needs_person") and not run.context.get("verifying")
        if settled or time.monotonic() > deadline:
            return run
        time.sleep(0.1)


def test_a_commit_held_past_the_timeout_and_the_lease_but_within_commits_within_is_made_once(
    store: Store,
) -> None:
    """The first booking commits 3.5 s after it was sent: past the caller's 1 s timeout and its
    2.5 s lease. The courier declared 4 s: the run looks again only after that, finds the
    booking, and sends nothing more."""
    courier = LateCourier(hold=3.5, commits_within=4.0)
    try:
        run = drive_with_workers(store, courier, lease=2.5)
    finally:
        courier.close()
    assert (run.state, run.status) == ("booked", "done")
    assert courier.bookings() == [{"book_id": "book_1"}]
    assert courier.sent == [(courier.sent[0][0], "book")]  # one request, never sent again
    assert store.duplicates(run.id) == []


def test_a_commit_later_than_commits_within_is_detected_undone_and_queued_for_a_person(
    store: Store,
) -> None:
    """The courier declared 1 s, and commits its first booking 3 s after it was sent: the run
    believed the "not found" after the window and booked again. The verification of that retry
    finds both bookings: the duplicate is recorded and counted, the extra booking cancelled by
    the spec's own undo, and the run waits for a person with both receipts."""
    courier = LateCourier(hold=3.0, commits_within=1.0)
    try:
        run = drive_with_workers(store, courier, lease=2.5)
    finally:
        courier.close()
    assert courier.bookings() == [{"book_id": "book_1"}, {"book_id": "book_2"}]
    (found,) = store.duplicates(run.id)
    assert (found.effect, found.via) == ("book_courier", "verify")
    assert found.receipts == [{"book_id": "book_1"}, {"book_id": "book_2"}]
    cancels = [r for _, op, r in courier.made if op == "cancel"]
    assert len(cancels) == 1  # the extra booking undone, once
    (undo,) = [op for op in store.operations(run.id) if op.role == "undo_extra"]
    assert (undo.status, undo.args) == ("done", {"booking": "book_2"})  # the extra one
    assert (run.state, run.status) == ("booked", "needs_person")
    queued = [e for e in store.history(run.id) if e.kind == "queued"][-1]
    action = queued.data["operator_action"]
    assert "book_courier was made 2 times" in action
    assert "book_id=book_2" in action
    assert "book_id=book_1" in action
    assert "ratchet ops retry" in action


def test_a_duplicate_is_counted_and_ops_retry_takes_the_run_on_from_where_it_was(
    store: Store,
) -> None:
    courier = LateCourier(hold=3.0, commits_within=1.0)
    try:
        run = drive_with_workers(store, courier, lease=2.5)
        assert run.status == "needs_person"
        assert store.stats(time.time()).duplicates == {("courier", "book_courier"): 1}
        runner = Runner(store, lambda adapter: courier, SystemClock())
        outcome = operate(runner, run.id, "retry", "dana", "dispatcher")
    finally:
        courier.close()
    assert "the run goes on from booked (done)" in outcome.message
    after = store.get_run(run.id)
    assert (after.state, after.status) == ("booked", "done")
    assert "duplicate_was" not in after.context
    assert len(courier.bookings()) == 2  # nothing made or undone again
    assert len([op for _, op, _ in courier.made if op == "cancel"]) == 1


def test_an_undo_waits_out_the_window_of_a_hold_that_may_still_commit_and_releases_it(
    store: Store, world: PracticeWorld, clock: FakeClock
) -> None:
    """The hotel commits its hold late (no reply; the hold made 2 s later) and its lookup fails
    at once: the outcome is unknown, and the saga compensates. Its lookup before the undo finds
    nothing yet; believed, the hold would be skipped as "not made" and left held when it lands.
    Within the hotel's window the saga waits, looks again, finds the hold, and releases it."""
    world.now, world.sleep = clock.now, clock.sleep  # the world's late commits on the run's clock
    spec, text = spec_and_text("booking")
    world.add_fault("hold_hotel", "commits_late")
    world.add_fault("hold_hotel", "lookup_fails")  # the next lookup only
    runner = Runner(store, lambda adapter: world.adapter(adapter.kind), clock)
    run, _ = runner.start(spec, text, spec.examples["happy"].input)
    ended = runner.advance(run)
    if ended.status == "running":  # a wait too long for the process: a worker's, later
        clock.advance(ended.context["wake_at"] - clock.now())
        ended = runner.advance(run.id)
    assert (ended.state, ended.status) == ("released", "done")
    clock.advance(COMMITS_LATE_SECONDS)  # every late commit is due by now
    releases = [c for c in world.changes() if c.operation == "release"]
    holds = [c for c in world.changes() if c.operation.startswith("hold_")]
    assert len(holds) == 2  # the flight, and the hotel's late hold
    assert {c.args["hold_id"] for c in releases} == {h.result["hold_id"] for h in holds}
    kinds = [e.kind for e in store.history(run.id)]
    assert "reconcile_unsettled" in kinds


# -- a duplicate found again by a later lookup -------------------------------------------------


class HeldCourier:
    """A courier that keeps no key register and declares a 1 s ``commits_within``, whose
    booking requests it holds, unanswered, until the test commits them (``commit_held``), later
    than it declared; a cancel it makes at once."""

    def __init__(self) -> None:
        self.held: list[Call] = []
        self.made: list[tuple[str, str, dict[str, Any]]] = []

    def commit_held(self) -> None:
        for request in self.held:
            number = sum(1 for _, op, _ in self.made if op == request.operation) + 1
            receipt = {f"{request.operation}_id": f"{request.operation}_{number}"}
            self.made.append((request.operation_id, request.operation, receipt))
        self.held = []

    def call(self, request: Call) -> Outcome:
        self.held.append(request)
        if request.operation == "book":
            return Ambiguous("timeout: no reply")
        self.commit_held()
        return Done(self.made[-1][2])

    def lookup(self, operation: str, operation_id: str, effect: str = "") -> LookupResult:
        made = [receipt for oid, _, receipt in self.made if oid == operation_id]
        return Found(made[0], tuple(made[1:])) if made else NotFound()

    def semantics(self, operation: str, lookup: str | None = None) -> Semantics:
        return Semantics(dedupe=False, commits_within=1.0)

    def cancels(self) -> list[dict[str, Any]]:
        return [receipt for _, op, receipt in self.made if op == "cancel"]


def booked_twice(store: Store) -> tuple[Runner, FakeClock, HeldCourier, RunRecord]:
    """Order O-1 booked twice: the first request held past the courier's window, the run's
    lookup believed after it, a second request sent (its verification armed) and held too; then
    both committed, and the run waiting to look again."""
    clock, courier = FakeClock(), HeldCourier()
    options = RunnerOptions(inline_wait=0.0, monotonic=clock.now)
    runner = Runner(store, lambda adapter: courier, clock, options=options)
    spec = load_spec(COURIER)
    run, _ = runner.start(spec, COURIER.read_text(encoding="utf-8"), {"order": "O-1"})
    for _ in range(6):  # not found yet; believed after the window (and a back-off): sent again
        run = runner.advance(run.id)
        if len(courier.held) == 2:
            break
        clock.advance(3.0)
    assert [request.attempt for request in courier.held] == [1, 2]
    assert run.context.get("verifying")  # the retry's verification is armed
    courier.commit_held()
    return runner, clock, courier, run


def test_a_duplicate_a_reconcile_finds_is_recorded_in_the_stores_duplicates_on_every_store(
    store: Store,
) -> None:
    """The run looks again once the courier's window has passed and finds both bookings: the
    duplicate is recorded (the event and the store's row, which ``/metrics`` counts), the extra
    booking cancelled, and the run handed to a person where it stood. Before the fix, on
    PostgreSQL, the commit that recorded it went out as one statement that left the row out."""
    runner, clock, courier, run = booked_twice(store)
    clock.advance(1.5)  # past the courier's window, before the verification is due
    run = runner.advance(run.id)
    assert (run.state, run.status) == ("booking", "needs_person")  # held where it stood
    (found,) = store.duplicates(run.id)
    assert (found.via, found.receipts) == (
        "reconcile",
        [{"book_id": "book_1"}, {"book_id": "book_2"}],
    )
    assert [e.kind for e in store.history(run.id)].count("duplicate_detected") == 1
    assert courier.cancels() == [{"cancel_id": "cancel_1"}]


def test_a_duplicate_a_reconcile_found_is_not_recorded_again_by_the_retrys_verification(
    store: Store,
) -> None:
    """After the reconcile recorded the duplicate, the verification armed by the retry finds
    the same two bookings. Before the fix it recorded them again, registered the same undo a
    second time, and every worker pass died on that timer (DuplicateOperation) from then on;
    now it knows them, and looks again later for a third."""
    runner, clock, courier, run = booked_twice(store)
    clock.advance(1.5)
    run = runner.advance(run.id)
    clock.advance(60.0)  # the verification is due
    fired = fire_due(runner)
    assert [f.outcome for f in fired] == ["again"]
    assert [e.kind for e in store.history(run.id)].count("duplicate_detected") == 1
    assert len(courier.cancels()) == 1
    after = store.get_run(run.id)
    assert (after.state, after.status) == ("booking", "needs_person")


def test_a_duplicate_the_verification_found_is_not_recorded_again_when_ops_retry_reconciles(
    store: Store,
) -> None:
    """The verification finds both bookings first, before the run looked again: the duplicate
    is recorded, the extra cancelled, the run handed to a person. ``ops retry`` takes it on from
    where it was, which looks the booking up: the same two. Before the fix that recorded them
    again and the step failed (DuplicateOperation); now the run is booked with the one it kept."""
    runner, clock, courier, run = booked_twice(store)
    clock.advance(60.0)  # the verification is due before the run looks again
    assert [f.outcome for f in fire_due(runner)] == ["duplicate"]
    run = runner.advance(run.id)  # the extra booking cancelled, then a person asked
    assert run.status == "needs_person"
    outcome = operate(runner, run.id, "retry", "dana", "dispatcher")
    assert outcome.then is None, outcome.then
    after = store.get_run(run.id)
    assert (after.state, after.status) == ("booked", "done")
    assert after.context["receipts"]["book_courier"] == {"book_id": "book_1"}
    assert len(store.duplicates(run.id)) == 1
    assert courier.cancels() == [{"cancel_id": "cancel_1"}]


def test_over_http_a_commit_later_than_the_window_is_seen_by_the_lookup_of_every_change(
    binding: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The agency said 1 s and commits 2 s late: the run believed the "not found" and confirmed
    again, so two itineraries exist. The shipped binding reconciles through the lookup that
    lists every change under the ID (``every_change``): a later verification over HTTP finds
    both, records the duplicate and hands the run to a person. (An endpoint that answers with
    one change would never see the second: ``W207``.)"""
    text = Path(binding).read_text(encoding="utf-8")
    assert text.count("commits_within = 3 ") == 4
    short = tmp_path / "short.toml"
    short.write_text(text.replace("commits_within = 3 ", "commits_within = 1 "), "utf-8")
    out = _commits_late_booking(capsys, "--bindings", str(short))
    assert "confirmed (done)" in out  # as far as the run can tell, yet
    assert _itineraries(capsys) == {"TRIP-1001": 2}  # the agency broke its word
    deadline = time.monotonic() + 60
    while True:
        code, _, err = run(capsys, "worker", "--once", "--bindings", str(short))
        assert code == 0, err
        code, out, _ = run(capsys, "trace", "TRIP-1001", "--json")
        kinds = [event["kind"] for event in json.loads(out)["events"]]
        if "duplicate_detected" in kinds or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert kinds.count("duplicate_detected") == 1
    code, out, _ = run(capsys, "queue", "--json")
    waiting = json.loads(out)["needs_person"]
    [held] = [item for item in waiting if item["business_key"] == "TRIP-1001"]
    assert "confirm_itinerary was made 2 times" in json.dumps(held)
