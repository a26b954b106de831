"""Time and decisions, on SQLite and PostgreSQL: a decision is judged at the moment it is used.

* A decision after the pause expired, its timer not fired yet, is refused and the expiry is
  applied instead, once, even when a worker fires the same timer at that moment.
* A runner on the system clock judges decisions by the store's clock (``Store.db_now``).
* An approval consumed by a write-ahead record, then interrupted before the call, is re-checked
  when the call would be sent again: expired, it is never sent; a newer approval sends it.
* Spec versions: under ``pin`` a run keeps its version, its policy and its approvals; moved by
  ``revalidate``, an approval given under the old version no longer counts, consumed or not.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from ratchet_runner.adapters.practice import PracticeWorld
from ratchet_runner.clock import FakeClock, SystemClock
from ratchet_runner.engine.controls import operate
from ratchet_runner.engine.deciding import decide
from ratchet_runner.engine.runner import Runner
from ratchet_runner.engine.versions import migrate
from ratchet_runner.errors import ApprovalError, OperatorRefused
from ratchet_runner.spec.validate import load_spec_text
from ratchet_runner.store.records import RunRecord
from ratchet_runner.store.store import Store
from ratchet_runner.worker.passes import fire_due, worker_pass
from tests.conftest import MakeRunner, spec_and_text

AGENT = ("agent-7", "agent")
DAY = 24 * 3600

# spec, example, who approves, final state, the effect that needs approval, its operation, the
# state an expired approval leads to
CASES = {
    "refund": ("refund", "T-90104", AGENT, "refunded", "request_refund", "refund", "lapsed"),
    "booking": (
        "booking",
        "happy",
        ("agent-3", "travel_agent"),
        "confirmed",
        "confirm_itinerary",
        "confirm",
        "released",
    ),
}


class Crash(Exception):
    pass


def waiting(runner: Runner, world: PracticeWorld, name: str, example: str) -> RunRecord:
    """A run of ``name``'s ``example``, driven until it waits for a decision (no faults)."""
    spec, text = spec_and_text(name)
    chosen = spec.examples[example]
    run, created = runner.start(spec, text, chosen.input)
    assert created
    world.seed({k: v for k, v in chosen.world.items() if k != "faults"})
    return runner.advance(run.id)


def calls(world: PracticeWorld, effect: str) -> list[dict[str, Any]]:
    """The calls that ask the provider to make a change (not lookups)."""
    return [c for c in world.calls(effect) if not str(c["operation"]).startswith("lookup")]


def kinds(store: Store, run_id: str) -> list[str]:
    return [e.kind for e in store.history(run_id)]


def crash_before_the_call(make_runner: MakeRunner, run_id: str, effect: str) -> None:
    """Drive the approved run until its process dies after the write-ahead commit (the approval
    consumed, the pending record written), before the request is sent."""

    def crash(point: str, reached: str) -> None:
        if point == "before-write" and reached == effect:
            raise Crash(point)

    with pytest.raises(Crash):
        make_runner(interrupt=crash).advance(run_id)


# -- a decision after the pause expired -------------------------------------------------------


@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_a_decision_after_the_pause_expired_is_refused_and_the_run_moves_by_expired(
    make_runner: MakeRunner, world: PracticeWorld, store: Store, clock: FakeClock, decision: str
) -> None:
    runner = make_runner()
    run = waiting(runner, world, "refund", "T-90104")
    clock.advance(72 * 3600)  # the pause's expires_after; no worker has fired the timer
    role = "agent" if decision == "approve" else None
    with pytest.raises(ApprovalError) as refused:
        decide(runner, run.id, decision, "agent-7", role, reason="too late")
    message = str(refused.value)
    assert "expired at" in message
    assert "moved by 'expired' to 'lapsed'" in message
    assert "Nothing was" in message
    after = store.get_run(run.id)
    assert (after.state, after.status) == ("lapsed", "done")
    assert store.approvals(run.id) == []  # nothing recorded as decided
    history = kinds(store, run.id)
    assert "approved" not in history
    assert "rejected" not in history
    assert history[-3:] == ["decision_refused", "timer", "moved"]
    assert [(t.event, t.outcome) for t in store.timers(run.id)] == [("expired", "fired")]
    assert worker_pass(make_runner()).fired == []  # the timer fired once, with the refusal
    assert calls(world, "request_refund") == []


def test_a_decision_racing_a_worker_that_fires_the_same_expiry_fires_it_once(
    make_runner: MakeRunner,
    world: PracticeWorld,
    store: Store,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runner = make_runner()
    run = waiting(runner, world, "refund", "T-90104")
    clock.advance(72 * 3600 + 5)
    worker = make_runner()
    read_timers = store.timers
    fired: list[int] = []

    def timers_then_the_worker_fires(run_id: str) -> Any:
        found = read_timers(run_id)  # the decision sees the timer due and not fired ...
        fired.extend(f.timer.id for f in fire_due(worker))  # ... then a worker fires it
        return found

    monkeypatch.setattr(store, "timers", timers_then_the_worker_fires)
    with pytest.raises(ApprovalError, match="another process applied its expiry first"):
        decide(runner, run.id, "approve", *AGENT)
    monkeypatch.undo()
    assert len(fired) == 1
    assert store.get_run(run.id).state == "lapsed"
    assert kinds(store, run.id).count("timer") == 1
    assert [t.outcome for t in store.timers(run.id)] == ["fired"]
    assert store.approvals(run.id) == []


def test_a_runner_on_the_system_clock_judges_a_decision_by_the_stores_clock(
    store: Store, world: PracticeWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = Runner(store, lambda adapter: world.adapter(adapter.kind), SystemClock())
    run = waiting(runner, world, "refund", "T-90104")
    # This host's clock says the pause has three days left; the store's clock says it is over.
    monkeypatch.setattr(store, "db_now", lambda: time.time() + 73 * 3600, raising=False)
    with pytest.raises(ApprovalError, match="expired at"):
        decide(runner, run.id, "approve", *AGENT)
    assert store.get_run(run.id).state == "lapsed"
    assert store.approvals(run.id) == []


def test_db_now_reads_the_database_clock(store: Store) -> None:
    before = time.time()
    now = store.db_now()
    assert isinstance(now, float)
    # the test database runs on this host: its clock and this process's agree to well within
    # a minute (this bounds a wrong unit or epoch, not a speed)
    assert abs(now - before) < 60


# -- an approval consumed, then the call interrupted -------------------------------------------


@pytest.fixture(params=list(CASES))
def case(request: pytest.FixtureRequest) -> tuple[Any, ...]:
    return CASES[request.param]


def test_a_consumed_approval_that_expired_before_the_resend_is_not_sent_on_resume(
    make_runner: MakeRunner,
    world: PracticeWorld,
    store: Store,
    clock: FakeClock,
    case: tuple[Any, ...],
) -> None:
    name, example, who, _, effect, _, lapsed = case
    runner = make_runner()
    run = waiting(runner, world, name, example)
    assert decide(runner, run.id, "approve", *who).changed
    crash_before_the_call(make_runner, run.id, effect)
    (approval,) = store.approvals(run.id)
    assert approval.consumed_at is not None  # consumed by the write-ahead commit
    clock.advance(30 * DAY)  # resumed thirty days later

    resumed = make_runner().advance(run.id)

    assert calls(world, effect) == []
    assert resumed.state == lapsed
    history = kinds(store, run.id)
    assert history.index("reconcile_not_found") < history.index("approval_expired")
    (op,) = [o for o in store.operations(run.id) if o.effect == effect]
    assert (op.status, op.attempts) == ("expired", 1)
    assert "expired at" in str(op.last_error)
    # marked so that nothing sends it later: no operator retry, no further resume
    with pytest.raises(OperatorRefused):
        operate(make_runner(), run.id, "retry", "ops-1", "payments_ops")
    make_runner().advance(run.id)
    assert calls(world, effect) == []


ASK_AGAIN = (
    "  - {state: refunding, event: expired,   next_state: lapsed, durable_write: decision}",
    "  - {state: refunding, event: expired,   next_state: proposed, durable_write: decision}",
)


def test_an_operation_whose_approval_expired_is_sent_again_only_under_a_new_approval(
    make_runner: MakeRunner, world: PracticeWorld, store: Store, clock: FakeClock
) -> None:
    spec, text = spec_and_text("refund")
    assert ASK_AGAIN[0] in text
    asks_again = load_spec_text(text.replace(*ASK_AGAIN))  # an expired approval asks again
    runner = make_runner()
    chosen = spec.examples["T-90104"]
    run, _ = runner.start(asks_again, text.replace(*ASK_AGAIN), chosen.input)
    world.seed({k: v for k, v in chosen.world.items() if k != "faults"})
    decide(runner, run.id, "approve", *AGENT)
    crash_before_the_call(make_runner, run.id, "request_refund")
    clock.advance(30 * DAY)

    asked = make_runner().advance(run.id)
    assert (asked.state, asked.status) == ("proposed", "waiting")
    assert calls(world, "request_refund") == []

    decide(runner, run.id, "approve", *AGENT)
    done = make_runner().advance(run.id)
    assert done.state == "refunded"
    assert len(calls(world, "request_refund")) == 1
    assert len([c for c in world.changes() if c.operation == "refund"]) == 1
    (op,) = [o for o in store.operations(run.id) if o.effect == "request_refund"]
    assert (op.status, op.attempts) == ("done", 2)  # the same operation ID, sent once
    assert [a.consumed_at is not None for a in store.approvals(run.id)] == [True, True]


# -- spec versions: pin and revalidate ------------------------------------------------------------


def _newer(name: str, policy: str) -> tuple[str, Any]:
    """``name``'s spec as version 2 under policy 2, with ``policy`` as its on_version_change
    (``pin`` by leaving it out: the default)."""
    _, text = spec_and_text(name)
    text = re.sub(r"^on_version_change:.*\n", "", text, flags=re.M)  # drop the shipped choice
    extra = "" if policy == "pin" else f"\non_version_change: {policy}"
    bumped = text.replace("spec_version: 1", "spec_version: 2").replace(
        "policy_version: 1", f"policy_version: 2{extra}"
    )
    return bumped, load_spec_text(bumped)


def test_under_pin_a_policy_bump_keeps_the_run_on_its_version_and_its_approval_counts(
    make_runner: MakeRunner, world: PracticeWorld, store: Store, clock: FakeClock
) -> None:
    runner = make_runner()
    run = waiting(runner, world, "refund", "T-90104")
    decide(runner, run.id, "approve", *AGENT)
    text, newer = _newer("refund", "pin")
    store.save_spec(newer.digest, newer.name, 2, "2", text, clock.now())

    pinned = migrate(runner, store.get_run(run.id))
    done = runner.advance(pinned)

    assert pinned.spec_digest == run.spec_digest  # still version 1, policy 1
    assert done.state == "refunded"
    assert "decision_needed" not in kinds(store, run.id)
    assert len(calls(world, "request_refund")) == 1
    assert [a.policy_version for a in store.approvals(run.id)] == ["1"]


def test_revalidate_after_the_approval_was_consumed_asks_again_before_sending(
    make_runner: MakeRunner, world: PracticeWorld, store: Store, clock: FakeClock
) -> None:
    runner = make_runner()
    run = waiting(runner, world, "refund", "T-90104")
    decide(runner, run.id, "approve", *AGENT)
    crash_before_the_call(make_runner, run.id, "request_refund")
    text, newer = _newer("refund", "revalidate")
    store.save_spec(newer.digest, newer.name, 2, "2", text, clock.now())

    migrated = migrate(runner, store.get_run(run.id))
    asked = make_runner().advance(migrated)

    assert migrated.spec_digest == newer.digest
    assert (asked.state, asked.status) == ("proposed", "waiting")
    assert "decision_needed" in kinds(store, run.id)
    assert calls(world, "request_refund") == []  # not sent on the approval of policy 1
    decide(runner, run.id, "approve", *AGENT)
    done = make_runner().advance(run.id)
    assert done.state == "refunded"
    assert len(calls(world, "request_refund")) == 1
    assert [a.policy_version for a in store.approvals(run.id)] == ["1", "2"]
