"""Commands hold the run's lease for the calls they make (issue: a command drove a run without a
lease, and a worker called again while the command's request was still in flight).

A provider that commits late (within the call's timeout) is the seam: while the command's call
is in flight, a lookup finds nothing yet, so anyone who reconciles then and calls again makes a
second change at a provider that does not deduplicate (the practice travel agency). On SQLite and
PostgreSQL.
"""

from __future__ import annotations

import math
import threading
from typing import Any

import pytest

from ratchet_runner.adapters.base import Call, LookupResult, Outcome
from ratchet_runner.adapters.practice import PracticeWorld
from ratchet_runner.clock import FakeClock
from ratchet_runner.engine import commands
from ratchet_runner.engine.lease import validate_lease
from ratchet_runner.engine.runner import Runner
from ratchet_runner.errors import UsageError
from ratchet_runner.store.records import RunRecord
from ratchet_runner.store.store import Store
from ratchet_runner.worker.passes import worker_pass
from tests.conftest import PRACTICE_BINDING, MakeRunner, spec_and_text


class SlowToCommit:
    """The practice travel agency, except that ``effect`` is held in flight (received, not yet
    committed) until the test lets it go."""

    def __init__(self, world: PracticeWorld, effect: str) -> None:
        self.inner = world.adapter("travel")
        self.effect = effect
        self.in_flight = threading.Event()
        self.commit = threading.Event()

    def call(self, request: Call) -> Outcome:
        if request.effect == self.effect and not self.in_flight.is_set():
            self.in_flight.set()
            assert self.commit.wait(20), "the test never let the call commit"
        return self.inner.call(request)

    def lookup(self, operation: str, operation_id: str, effect: str = "") -> LookupResult:
        return self.inner.lookup(operation, operation_id, effect)


def booking_waiting_for_approval(runner: Runner, world: PracticeWorld) -> RunRecord:
    spec, text = spec_and_text("booking")
    example = spec.examples["happy"]
    world.seed(example.world)
    run, _ = runner.start(spec, text, example.input)
    waiting = runner.advance(run)
    assert waiting.state == "approving"
    return waiting


def command_runner(store: Store, world: PracticeWorld, slow: SlowToCommit) -> Runner:
    return Runner(
        store,
        lambda adapter: slow if adapter.kind == "travel" else world.adapter(adapter.kind),
        FakeClock(),
    )


def confirmations(world: PracticeWorld) -> list[Any]:
    return [c for c in world.changes() if c.effect == "confirm_itinerary"]


def test_a_worker_cannot_call_while_an_approving_command_is_in_flight(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    run = booking_waiting_for_approval(make_runner(), world)
    slow = SlowToCommit(world, "confirm_itinerary")
    results: list[commands.CommandResult] = []
    approving = threading.Thread(
        target=lambda: results.append(
            commands.decide(
                command_runner(store, world, slow), run.id, "approve", "agent-3", "travel_agent"
            )
        )
    )
    approving.start()
    try:
        assert slow.in_flight.wait(20)
        # A worker polls while the command's request is in flight: the run is leased to the
        # command, so the worker neither claims it nor reconciles nor calls.
        report = worker_pass(make_runner(), lease_seconds=30.0)
        assert report.advanced == []
        held = store.get_run(run.id)
        assert held.lease_owner is not None
        assert held.lease_owner.startswith("ratchet approve ")
    finally:
        slow.commit.set()
        approving.join(30)
    assert len(confirmations(world)) == 1
    (result,) = results
    assert (result.run.state, result.changed, result.then) == ("confirmed", True, None)
    after = store.get_run(run.id)
    assert (after.status, after.lease_token) == ("done", None)  # the lease went with the end
    leased = [e.data["owner"] for e in store.history(run.id) if e.kind == "leased"]
    assert leased[-1].startswith("ratchet approve ")  # the trace names who held the run


def test_a_second_resume_leaves_a_run_in_flight_to_the_command_carrying_it(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    run = booking_waiting_for_approval(make_runner(), world)
    slow = SlowToCommit(world, "confirm_itinerary")
    approving = threading.Thread(
        target=lambda: commands.decide(
            command_runner(store, world, slow), run.id, "approve", "agent-3", "travel_agent"
        )
    )
    approving.start()
    try:
        assert slow.in_flight.wait(20)
        result = commands.resume(make_runner(), run.id, patience=0.2)
    finally:
        slow.commit.set()
        approving.join(30)
    assert result.changed is False
    assert result.carried_on_by is not None
    assert result.carried_on_by.startswith("ratchet approve ")
    assert "carried on by" in result.message
    assert len(confirmations(world)) == 1
    assert len(world.calls("confirm_itinerary")) == 1  # no reconcile, no second call


def test_a_command_that_dies_leaves_the_run_to_a_rescuer_only_after_its_lease_ran_out(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    """A command holding the run (as a killed one would leave it): a worker takes it over only
    once the lease has expired by the database's clock, then reconciles before calling."""
    run = booking_waiting_for_approval(make_runner(), world)
    store.claim_run(run.id, "ratchet approve dead:1:x", 0.3, 0.0)
    assert worker_pass(make_runner(), lease_seconds=30.0).advanced == []
    import time

    time.sleep(0.4)  # the lease runs out (by the database's clock)
    still = store.get_run(run.id)
    assert still.state == "approving"  # a waiting run: nothing for a worker to claim
    result = commands.decide(make_runner(), run.id, "approve", "agent-3", "travel_agent")
    assert result.run.state == "confirmed"
    assert len(confirmations(world)) == 1


def test_a_refused_decision_takes_no_lease_and_changes_nothing(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    run = booking_waiting_for_approval(make_runner(), world)
    with pytest.raises(Exception, match="may not decide"):
        commands.decide(make_runner(), run.id, "approve", "agent-3", "intern")
    after = store.get_run(run.id)
    assert (after.version, after.lease_token) == (run.version, None)


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf, -math.inf])
def test_a_lease_must_be_a_finite_number_of_seconds_above_zero(bad: float) -> None:
    with pytest.raises(UsageError, match="finite number of seconds above 0"):
        validate_lease(bad)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("worker", "--once", "--lease", "0"), "finite number of seconds above 0"),
        (("worker", "--once", "--lease", "-1"), "not a finite number of seconds"),
        (("worker", "--once", "--lease", "nan"), "not a finite number of seconds"),
        (("worker", "--once", "--lease", "inf"), "not a finite number of seconds"),
        (("worker", "--once", "--lease", "0s"), "finite number of seconds above 0"),
        (("worker", "--once", "--lease", "soon"), "'soon' is not a duration (500ms, 30s, 5m"),
        (("worker", "--once", "--poll", "1x"), "'1x' is not a duration"),
        (("runs", "--stuck", "--older-than", "-5m"), "'-5m' is not a duration"),
        (("worker", "--concurrency", "0"), "0 is not in the range x>=1"),
        (("resume", "T-1", "--lease", "0"), "finite number of seconds above 0"),
        (("approve", "T-1", "--as", "a", "--role", "r", "--lease", "nan"), "finite number"),
    ],
)
def test_the_cli_refuses_a_lease_or_a_concurrency_that_cannot_work(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
    args: tuple[str, ...],
    message: str,
) -> None:
    from tests.conftest import run_cli

    monkeypatch.setenv("RATCHET_HOME", str(tmp_path))
    monkeypatch.delenv("RATCHET_DB", raising=False)
    code, _, err = run_cli(capsys, *args)
    assert code == 2
    assert message in err


@pytest.mark.parametrize(
    "args",
    [
        ("worker", "--once", "--lease", "2m", "--poll", "500ms"),
        ("worker", "--once", "--lease", "45", "--poll", "0.5"),
        ("runs", "--stuck", "--older-than", "5m"),
    ],
)
def test_every_length_of_time_takes_the_specs_durations_or_seconds(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
    args: tuple[str, ...],
) -> None:
    """One convention for lengths of time: ``--lease``, ``--poll`` and ``--older-than`` take a
    duration as specs write them (``2m``, ``500ms``), as ``--window`` and ``--finished-before``
    do, or a number of seconds (before: a number only, ``--poll 500ms`` refused)."""
    from tests.conftest import run_cli

    monkeypatch.setenv("RATCHET_HOME", str(tmp_path))
    monkeypatch.delenv("RATCHET_DB", raising=False)
    code, _, err = run_cli(capsys, *args)
    assert code == 0, err


def test_a_decision_on_a_waiting_run_another_process_holds_changes_nothing_and_names_it(
    make_runner: MakeRunner,
    world: PracticeWorld,
    store: Store,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.conftest import run_cli

    run = booking_waiting_for_approval(make_runner(), world)
    held = store.claim_run(run.id, "ratchet resume elsewhere:1:x", 30.0, 0.0)
    monkeypatch.setenv("RATCHET_DB", store.url)
    monkeypatch.setenv("RATCHET_BINDINGS", str(PRACTICE_BINDING))
    monkeypatch.setenv("RATCHET_HOME", str(world.path.parent))
    code, _, err = run_cli(capsys, "approve", run.id, "--as", "agent-3", "--role", "travel_agent")
    assert code == 4
    assert "leased by ratchet resume elsewhere:1:x" in err
    assert "changed nothing" in err
    assert store.get_run(run.id).version == held.version
    assert store.approvals(run.id) == []
    assert world.calls("confirm_itinerary") == []
