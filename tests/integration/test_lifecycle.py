"""The long-running life of a run, on SQLite and PostgreSQL: the booking saga, the eight cases
that break naive runners, approvals that resist tampering, timers, and operator controls."""

from __future__ import annotations

import re

import pytest

from ratchet_runner.adapters.practice import PracticeWorld
from ratchet_runner.clock import FakeClock
from ratchet_runner.engine.approvals import valid_approval
from ratchet_runner.engine.controls import operate
from ratchet_runner.engine.deciding import decide
from ratchet_runner.engine.operator_queue import queue
from ratchet_runner.engine.runner import Runner
from ratchet_runner.engine.versions import migrate
from ratchet_runner.errors import ApprovalError, OperatorRefused, VersionConflict
from ratchet_runner.store.records import RunRecord
from ratchet_runner.store.store import Store
from ratchet_runner.worker.passes import worker_pass
from tests.conftest import MakeRunner, spec_and_text

AGENT = ("agent-7", "agent")
TRAVEL_AGENT = ("agent-3", "travel_agent")
OPS = ("ops-1", "travel_ops")


def start(runner: Runner, world: PracticeWorld, name: str, example: str) -> RunRecord:
    spec, text = spec_and_text(name)
    chosen = spec.examples[example]
    run, created = runner.start(spec, text, chosen.input)
    assert created
    world.seed(chosen.world)
    return runner.advance(run.id)


def approve(runner: Runner, run: RunRecord, who: tuple[str, str]) -> RunRecord:
    assert decide(runner, run.id, "approve", *who).changed
    return runner.advance(run.id)


def made(world: PracticeWorld, operation: str) -> list[str]:
    return [c.operation_id for c in world.changes() if c.operation == operation]


def released(world: PracticeWorld) -> list[str]:
    return [str(c.args["hold_id"]) for c in world.changes() if c.operation == "release"]


def kinds(store: Store, run: RunRecord) -> list[str]:
    return [e.kind for e in store.history(run.id)]


# -- the booking saga ---------------------------------------------------------------------------


def test_the_booking_happy_path_holds_both_confirms_and_releases_nothing(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    runner = make_runner()
    run = start(runner, world, "booking", "happy")
    assert (run.state, run.status) == ("approving", "waiting")
    run = approve(runner, run, TRAVEL_AGENT)
    assert (run.state, run.status) == ("confirmed", "done")
    assert [c.operation for c in world.changes()] == ["hold_flight", "hold_hotel", "confirm"]
    undo = [op for op in store.operations(run.id) if op.role == "compensation"]
    assert sorted(op.effect for op in undo) == ["release_flight", "release_hotel"]
    assert all(op.status == "registered" for op in undo)


def test_a_refused_hotel_releases_the_flight_hold_exactly_once_and_ends_compensated(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    runner = make_runner()
    run = start(runner, world, "booking", "hotel_refused")
    assert (run.state, run.status) == ("released", "done")
    flight = world.changes()[0]
    assert flight.operation == "hold_flight"
    assert released(world) == [flight.result["hold_id"]]
    assert made(world, "hold_hotel") == []


def test_a_refused_confirmation_releases_the_hotel_then_the_flight_each_once(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    runner = make_runner()
    run = approve(runner, start(runner, world, "booking", "confirm_refused"), TRAVEL_AGENT)
    assert run.state == "released"
    holds = {c.operation: c.result["hold_id"] for c in world.changes() if "hold" in c.operation}
    assert released(world) == [holds["hold_hotel"], holds["hold_flight"]]
    assert made(world, "confirm") == []


def test_a_flight_release_failing_three_times_queues_the_run_and_ops_compensate_finishes_it(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    runner = make_runner()
    world.add_fault("release_flight", "unavailable", times=3)
    run = start(runner, world, "booking", "hotel_refused")
    assert (run.state, run.status) == ("needs_operator", "needs_person")
    assert released(world) == []
    (item,) = queue(runner)
    assert item["run"] == run.id
    assert "ratchet ops compensate" in item["operator_action"]
    evidence = item["evidence"]
    assert [d["effect"] for d in evidence["done"]] == ["hold_flight"]
    assert evidence["left"] == [
        {"effect": "hold_flight", "undo": "release_flight", "status": "exhausted"}
    ]
    failed = {f["effect"]: (f["status"], f["attempts"]) for f in evidence["failed"]}
    assert failed == {"hold_hotel": ("refused", 1), "release_flight": ("exhausted", 3)}
    with pytest.raises(OperatorRefused):
        operate(runner, run.id, "compensate", "agent-3", "travel_agent")
    assert store.get_run(run.id).version == run.version
    result = operate(runner, run.id, "compensate", *OPS, note="airline is back")
    assert (result.run.state, result.run.status) == ("released", "done")
    assert len(released(world)) == 1
    audit = [e.data for e in store.history(run.id) if e.kind == "operator"]
    assert audit == [
        {"action": "compensate", "actor": "ops-1", "role": "travel_ops", "note": "airline is back"}
    ]


# -- the eight cases, for the refund and for the booking -----------------------------------------

CASES = {
    "refund": ("refund", "T-90104", AGENT, "refunded", "request_refund", "refund"),
    "booking": ("booking", "happy", TRAVEL_AGENT, "confirmed", "confirm_itinerary", "confirm"),
}


@pytest.fixture(params=list(CASES))
def case(request: pytest.FixtureRequest) -> tuple[str, str, tuple[str, str], str, str, str]:
    return CASES[request.param]


def waiting(runner: Runner, world: PracticeWorld, case: tuple) -> RunRecord:  # type: ignore[type-arg]
    spec_name, example, *_ = case
    spec, text = spec_and_text(spec_name)
    chosen = spec.examples[example]
    run, _ = runner.start(spec, text, chosen.input)
    world.seed({k: v for k, v in chosen.world.items() if k != "faults"})
    return runner.advance(run.id)


def test_case_1_a_duplicate_approval_changes_nothing_and_says_so(
    make_runner: MakeRunner,
    world: PracticeWorld,
    store: Store,
    case: tuple,  # type: ignore[type-arg]
) -> None:
    _, _, who, final, _, operation = case
    runner = make_runner()
    run = approve(runner, waiting(runner, world, case), who)
    again = decide(runner, run.id, "approve", *who)
    assert not again.changed
    assert "already approved" in again.message
    assert store.get_run(run.id).version == run.version
    assert (run.state, len(made(world, operation))) == (final, 1)


def test_case_2_an_approval_expired_by_one_second_is_refused_and_the_expired_row_followed(
    make_runner: MakeRunner,
    world: PracticeWorld,
    store: Store,
    clock: FakeClock,
    case: tuple,  # type: ignore[type-arg]
) -> None:
    spec_name, _, who, _, effect, operation = case
    runner = make_runner()
    run = waiting(runner, world, case)
    decide(runner, run.id, "approve", *who)
    spec, _ = spec_and_text(spec_name)
    lifetime = spec.approvals[spec.effects[effect].approval or ""].expires_after or 0
    clock.advance(lifetime + 1)
    after = runner.advance(run.id)
    assert "approval_expired" in kinds(store, after)
    assert made(world, operation) == []
    assert after.state in ("lapsed", "released")


def test_an_approval_one_second_before_expiry_still_counts(
    make_runner: MakeRunner, world: PracticeWorld, clock: FakeClock
) -> None:
    runner = make_runner()
    run = waiting(runner, world, CASES["refund"])
    decide(runner, run.id, "approve", *AGENT)
    clock.advance(24 * 3600 - 1)
    assert runner.advance(run.id).state == "refunded"
    assert len(made(world, "refund")) == 1


class Crash(Exception):
    pass


def approved_then_crashed(
    make_runner: MakeRunner,
    world: PracticeWorld,
    case: tuple,
    point: str,  # type: ignore[type-arg]
) -> RunRecord:
    """Approve the case's run, then let its process die at ``point`` of the case's effect."""
    _, _, who, _, effect, _ = case

    def crash(reached: str, reached_effect: str) -> None:
        if reached == point and reached_effect == effect:
            raise Crash(point)

    runner = make_runner(interrupt=crash)
    run = waiting(runner, world, case)
    decide(runner, run.id, "approve", *who)
    with pytest.raises(Crash):
        runner.advance(run.id)
    return run


def test_case_3_a_crash_before_the_call_is_resumed_with_one_change(
    make_runner: MakeRunner,
    world: PracticeWorld,
    store: Store,
    case: tuple,  # type: ignore[type-arg]
) -> None:
    """The process dies after committing the attempt and before sending it. The next process
    cannot know that: at a provider that deduplicates it may look up and call again at once;
    at one that does not (the booking's agency), the request might still arrive until its
    deadline and commit up to the provider's commits_within after, so it looks again only
    then, with no call before."""
    _, _, _, final, _, operation = case
    run = approved_then_crashed(make_runner, world, case, "before-write")
    resumer = make_runner()
    resumed = resumer.advance(run.id)
    if resumed.status == "running":  # the booking: waiting out the agency's window
        assert "reconcile_unsettled" in kinds(store, resumed)
        assert made(world, operation) == []
        assert isinstance(resumer.clock, FakeClock)
        resumer.clock.advance(resumed.context["wake_at"] - resumer.clock.now())
        resumed = resumer.advance(run.id)
    assert resumed.state == final
    assert len(made(world, operation)) == 1
    assert "reconcile_not_found" in kinds(store, resumed)


def test_case_4_a_timeout_after_the_call_is_reconciled_into_one_change(
    make_runner: MakeRunner,
    world: PracticeWorld,
    store: Store,
    case: tuple,  # type: ignore[type-arg]
) -> None:
    _, _, who, final, effect, operation = case
    runner = make_runner()
    run = waiting(runner, world, case)
    world.add_fault(effect, "timeout_after_write", times=1)
    run = approve(runner, run, who)
    assert run.state == final
    assert len(made(world, operation)) == 1
    assert "reconcile_found" in kinds(store, run)


def test_case_5_a_duplicate_resume_changes_nothing_more(
    make_runner: MakeRunner,
    world: PracticeWorld,
    store: Store,
    case: tuple,  # type: ignore[type-arg]
) -> None:
    _, _, _, final, _, operation = case
    run = approved_then_crashed(make_runner, world, case, "after-write")
    stale = store.get_run(run.id)
    first = make_runner().advance(run.id)
    second = make_runner().advance(run.id)
    assert (first.state, second.version) == (final, first.version)
    with pytest.raises(VersionConflict):
        make_runner().step(stale)  # a resume that read the run before the first one moved it
    assert len(made(world, operation)) == 1


def test_case_6_a_changed_policy_version_asks_for_a_new_decision(
    make_runner: MakeRunner,
    world: PracticeWorld,
    store: Store,
    clock: FakeClock,
    case: tuple,  # type: ignore[type-arg]
) -> None:
    spec_name, _, who, final, _, operation = case
    runner = make_runner()
    run = waiting(runner, world, case)
    decide(runner, run.id, "approve", *who)
    _, text = spec_and_text(spec_name)
    text = re.sub(r"^on_version_change:.*\n", "", text, flags=re.M)  # drop the shipped choice
    bumped = text.replace("spec_version: 1", "spec_version: 2").replace(
        "policy_version: 1", "policy_version: 2\non_version_change: revalidate"
    )
    from ratchet_runner.spec.validate import load_spec_text

    newer = load_spec_text(bumped)
    store.save_spec(newer.digest, newer.name, 2, "2", bumped, clock.now())
    migrated = migrate(runner, store.get_run(run.id))
    assert "revalidated" in kinds(store, migrated)
    asked = runner.advance(migrated.id)
    assert "decision_needed" in kinds(store, asked)
    assert asked.status == "waiting"
    assert made(world, operation) == []
    done = approve(runner, asked, who)
    assert done.state == final
    assert len(made(world, operation)) == 1


def test_case_7_an_exhausted_budget_goes_to_a_person_and_no_resume_refills_it(
    make_runner: MakeRunner,
    world: PracticeWorld,
    store: Store,
    case: tuple,  # type: ignore[type-arg]
) -> None:
    _, _, who, _, effect, operation = case
    runner = make_runner()
    run = waiting(runner, world, case)
    world.add_fault(effect, "unavailable", times=3)
    run = approve(runner, run, who)
    assert run.status == "needs_person"
    runner.advance(run.id)
    make_runner().advance(run.id)
    calls = [c for c in world.calls(effect) if not str(c["operation"]).startswith("lookup")]
    assert len(calls) == 3
    assert made(world, operation) == []


def test_case_8_a_failed_compensation_is_shown_to_a_person_never_skipped(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    runner = make_runner()
    world.add_fault("release_hotel", "refuse", times=1)
    run = approve(runner, start(runner, world, "booking", "confirm_refused"), TRAVEL_AGENT)
    assert run.state == "needs_operator"
    (item,) = queue(runner)
    assert {f["effect"] for f in item["evidence"]["failed"]} >= {"release_hotel"}
    assert released(world) == []  # the flight is not released before the hotel: reverse order


def test_case_8_for_the_refund_a_none_compensation_is_shown_as_kept(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    runner = make_runner()
    run = approve(runner, waiting(runner, world, CASES["refund"]), AGENT)
    from ratchet_runner.engine.operator_queue import evidence

    kept = evidence(runner, run)["not_undoable"]
    assert kept == [
        {
            "effect": "request_refund",
            "undo": "none",
            "reason": "a refund is money returned; taking it back is a new decision",
        }
    ]
    with pytest.raises(OperatorRefused, match="no compensate state"):
        operate(runner, run.id, "compensate", "ops-1", "payments_ops")


# -- tampering --------------------------------------------------------------------------------


def test_an_approval_from_another_run_is_not_accepted(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    runner = make_runner()
    spec, text = spec_and_text("refund")
    first = waiting(runner, world, CASES["refund"])
    decide(runner, first.id, "approve", *AGENT)
    other_input = {**spec.examples["T-90104"].input, "ticket": "T-90105"}
    other, _ = runner.start(spec, text, other_input)
    other = runner.advance(other.id)
    effect = spec.effects["request_refund"]
    args = {"order": "LK-793996", "amount": 9.95, "currency": "CAD", "reason": "RFD-LATE"}
    copied = store.approvals(first.id)[0]
    from ratchet_runner.store.records import Change

    forged = Change(other.id, other.version, other.updated_at, other)
    forged.new_approvals.append(
        {
            k: getattr(copied, k)
            for k in (
                "name",
                "effect",
                "digest",
                "decision",
                "actor",
                "role",
                "reason",
                "policy_version",
                "spec_digest",
                "decided_at",
                "expires_at",
            )
        }
    )
    other = store.commit(forged)
    with pytest.raises(ApprovalError):
        valid_approval(
            store.approvals(other.id), spec, other.id, effect, args, runner.decision_now()
        )


# -- timers and signals -----------------------------------------------------------------------


def test_a_pause_expiry_fires_once_however_many_workers_pass(
    make_runner: MakeRunner, world: PracticeWorld, store: Store, clock: FakeClock
) -> None:
    runner = make_runner()
    run = waiting(runner, world, CASES["refund"])
    (timer,) = store.timers(run.id)
    assert timer.event == "expired"
    clock.advance(72 * 3600 - 1)
    assert worker_pass(runner).fired == []  # never early
    clock.advance(1)
    first = worker_pass(runner)
    second = worker_pass(make_runner())
    assert [f.outcome for f in first.fired] == ["fired"]
    assert second.fired == []
    assert store.get_run(run.id).state == "lapsed"
    assert kinds(store, run).count("timer") == 1


def test_leaving_a_pause_cancels_its_timer(
    make_runner: MakeRunner, world: PracticeWorld, store: Store, clock: FakeClock
) -> None:
    runner = make_runner()
    run = approve(runner, waiting(runner, world, CASES["refund"]), AGENT)
    assert [t.outcome for t in store.timers(run.id)] == ["cancelled"]
    clock.advance(100 * 3600)
    assert worker_pass(runner).fired == []


# -- operator controls ------------------------------------------------------------------------


def test_operator_controls_are_authorised_audited_and_change_nothing_when_refused(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    runner = make_runner()
    run = waiting(runner, world, CASES["refund"])
    with pytest.raises(OperatorRefused, match="may not pause"):
        operate(runner, run.id, "pause", "agent-7", "agent")
    assert store.get_run(run.id).version == run.version
    paused = operate(runner, run.id, "pause", "ops-1", "payments_ops").run
    assert paused.status == "paused"
    with pytest.raises(ApprovalError, match="paused"):
        decide(runner, run.id, "approve", *AGENT)
    assert runner.advance(run.id).status == "paused"  # a paused run takes no step
    resumed = operate(runner, run.id, "resume", "ops-1", "payments_ops").run
    assert resumed.state == "proposed"
    assert approve(runner, resumed, AGENT).state == "refunded"
    actions = [e.data["action"] for e in store.history(run.id) if e.kind == "operator"]
    assert actions == ["pause", "resume"]


def test_ops_retry_grants_a_fresh_budget_with_the_same_operation_id(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    runner = make_runner()
    run = waiting(runner, world, CASES["refund"])
    world.add_fault("request_refund", "unavailable", times=3)
    run = approve(runner, run, AGENT)
    assert run.status == "needs_person"
    result = operate(runner, run.id, "retry", "ops-1", "payments_ops")
    assert result.run.state == "refunded"
    calls = {c["operation_id"] for c in world.calls("request_refund")}
    assert len(calls) == 1
    assert len(made(world, "refund")) == 1


def test_ops_reconcile_finishes_an_unknown_outcome_that_the_provider_has(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    runner = make_runner()
    run = waiting(runner, world, CASES["refund"])
    world.add_fault("request_refund", "timeout_after_write", times=1)
    world.add_fault("request_refund", "lookup_fails", times=1)
    run = approve(runner, run, AGENT)
    assert run.status == "needs_person"
    assert len(made(world, "refund")) == 1
    result = operate(runner, run.id, "reconcile", "ops-1", "payments_ops")
    assert result.run.state == "refunded"
    assert len(made(world, "refund")) == 1


def test_ops_cancel_ends_a_waiting_run_without_effects(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    runner = make_runner()
    run = waiting(runner, world, CASES["refund"])
    assert operate(runner, run.id, "cancel", "ops-1", "payments_ops").run.status == "cancelled"
    with pytest.raises(ApprovalError):
        decide(runner, run.id, "approve", *AGENT)
    assert made(world, "refund") == []


def test_a_run_budget_caps_calls_across_resumes(
    make_runner: MakeRunner, world: PracticeWorld, store: Store, clock: FakeClock
) -> None:
    from ratchet_runner.spec.validate import load_spec_text

    _, text = spec_and_text("refund")
    capped = text.replace("start: proposed", "start: proposed\nbudget: {max_attempts: 2}")
    spec = load_spec_text(capped)
    runner = make_runner()
    example = spec.examples["T-90104"]
    world.seed({"orders": example.world["orders"]})
    world.add_fault("request_refund", "unavailable", times=5)
    run, _ = runner.start(spec, capped, example.input)
    run = approve(runner, runner.advance(run.id), AGENT)
    assert run.status == "needs_person"
    calls = [c for c in world.calls("request_refund") if c["operation"] == "refund"]
    assert len(calls) == 2
    assert run.context["budget_used"]["attempts"] == 2
    assert make_runner().advance(run.id).version == run.version


def test_signal_ids_are_per_run(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    from ratchet_runner.engine.signals import send_signal
    from ratchet_runner.spec.validate import load_spec
    from tests.conftest import ROOT

    path = ROOT / "tests" / "fixtures" / "parcel.yaml"
    spec, text = load_spec(path), path.read_text(encoding="utf-8")
    runner = make_runner()
    world.seed(spec.examples["P-1"].world)
    moved = []
    for ticket in ("P-1", "P-2"):
        run, _ = runner.start(spec, text, {**spec.examples["P-1"].input, "ticket": ticket})
        waiting = runner.advance(run.id)
        result = send_signal(runner, waiting, "parcel_received", "evt-1", {"weight_kg": 1.0})
        moved.append(result.changed)
    assert moved == [True, True]
