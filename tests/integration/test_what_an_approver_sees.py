"""What an approver sees, on SQLite and PostgreSQL: the queue's item for a decision waiting.

* The verdict of approving in each role is what approving in that role does: the guard that
  refuses an agent a refund above 100 refuses them in the verdict, naming the guard and the
  value it read, and lets a team lead through; a role the approval does not allow, and a pause
  that has expired, are refused as approving refuses them. Weighing writes nothing.
* Both expiries: when the pause expires, and until when an approval given now would count.
* The declared evidence: the other refunds of the same order, newest first, each with where it
  is and the refunds it made (arguments, status, receipt); a refund of another order is not
  among them, nor is a run of another workflow, and the declared limit holds.
"""

from __future__ import annotations

from typing import Any

import pytest

from ratchet_runner.adapters.practice import PracticeWorld
from ratchet_runner.clock import FakeClock
from ratchet_runner.engine.deciding import decide, verdicts
from ratchet_runner.engine.evidence import digest_of, keys
from ratchet_runner.engine.operator_queue import decision, decisions
from ratchet_runner.engine.runner import Runner
from ratchet_runner.errors import ApprovalError
from ratchet_runner.spec.validate import load_spec_text
from ratchet_runner.store.records import RunRecord
from ratchet_runner.store.store import Store
from tests.conftest import MakeRunner, spec_and_text

HOUR = 3600.0
GUARD = "input.amount <= 100.0 || approval.role == 'team_lead'"
ORDER = "LK-512877"


def refund(
    runner: Runner, world: PracticeWorld, ticket: str, amount: float, order: str = ORDER
) -> RunRecord:
    """A refund of ``amount`` CAD for a double charge on ``order``, waiting for its decision."""
    spec, text = spec_and_text("refund")
    world.seed(
        {"orders": [{"order": order, "item": "garden hose", "paid": 500, "currency": "CAD"}]}
    )
    given = {
        "ticket": ticket,
        "order": order,
        "amount": amount,
        "currency": "CAD",
        "reason": "RFD-DOUBLE",
    }
    run, created = runner.start(spec, text, given)
    assert created
    return runner.advance(run.id)


def refunded(runner: Runner, world: PracticeWorld, ticket: str, amount: float) -> RunRecord:
    """A refund on the order, approved by an agent and made."""
    run = refund(runner, world, ticket, amount)
    decide(runner, run.id, "approve", "agent-7", "agent")
    done = runner.advance(run.id)
    assert done.state == "refunded"
    return done


def test_the_verdict_of_each_role_is_what_approving_in_it_does_and_weighing_writes_nothing(
    make_runner: MakeRunner, world: PracticeWorld, store: Store, clock: FakeClock
) -> None:
    runner = make_runner()
    run = refund(runner, world, "T-90603", 145.00)
    history = store.history(run.id)

    agent, lead = verdicts(runner, run, ["agent", "team_lead"], "lee", clock.now())

    assert (agent.role, agent.may_approve) == ("agent", False)
    assert agent.reason == f"the guard `{GUARD}` refuses agent (input.amount is 145)"
    assert (lead.role, lead.may_approve, lead.reason) == ("team_lead", True, None)
    assert store.get_run(run.id) == run  # weighing moved nothing
    assert store.history(run.id) == history
    assert store.approvals(run.id) == []
    with pytest.raises(ApprovalError, match="does not hold for role 'agent'"):
        decide(runner, run.id, "approve", "lee", "agent")
    assert decide(runner, run.id, "approve", "lee", "team_lead").changed


def test_a_role_the_approval_does_not_allow_and_an_expired_pause_are_refused_as_approving_is(
    make_runner: MakeRunner, world: PracticeWorld, clock: FakeClock
) -> None:
    runner = make_runner()
    run = refund(runner, world, "T-90603", 45.95)

    [viewer, agent] = verdicts(runner, run, ["viewer", "agent"], "lee", clock.now())
    assert not viewer.may_approve
    assert (
        viewer.reason
        == "role 'viewer' may not decide 'refund_approval' (allowed: agent, team_lead)"
    )
    assert (agent.may_approve, agent.reason) == (True, None)

    clock.advance(72 * HOUR)  # the pause's expires_after; no worker has fired its timer
    [late] = verdicts(runner, run, ["agent"], "lee", clock.now())
    assert not late.may_approve
    assert late.reason is not None
    assert late.reason.startswith("the pause expired at ")
    with pytest.raises(ApprovalError, match="expired at"):
        decide(runner, run.id, "approve", "lee", "agent")


def test_the_queue_shows_when_the_pause_expires_and_until_when_an_approval_given_now_counts(
    make_runner: MakeRunner, world: PracticeWorld, clock: FakeClock
) -> None:
    runner = make_runner()
    started = clock.now()
    run = refund(runner, world, "T-90603", 45.95)
    clock.advance(2 * HOUR)

    item = decision(runner, run, clock.now())

    assert item is not None
    assert item["pause_expires_at"] == started + 72 * HOUR
    assert item["approval_expires_at"] == clock.now() + 24 * HOUR
    assert item["expires_after_seconds"] == 24 * HOUR
    assert item["age_seconds"] == 2 * HOUR
    assert [v["role"] for v in item["verdicts"]] == ["agent", "team_lead"]  # every allowed role
    held = decision(runner, run, clock.now(), actor="ana", holding=("agent", "viewer"))
    assert held is not None
    assert [v["role"] for v in held["verdicts"]] == ["agent"]  # those the operator holds


def test_the_approver_sees_the_other_refunds_of_the_same_order_newest_first_with_what_they_made(
    make_runner: MakeRunner, world: PracticeWorld, clock: FakeClock
) -> None:
    runner = make_runner()
    first = refunded(runner, world, "T-90601", 20.00)
    clock.advance(60)
    refund(runner, world, "T-90700", 30.00, order="LK-999999")  # another order
    clock.advance(60)
    second = refund(runner, world, "T-90602", 45.95)  # waiting, on the same order
    clock.advance(60)
    run = refund(runner, world, "T-90603", 145.00)

    [item] = [d for d in decisions(runner)[0] if d["run"] == run.id]

    related: dict[str, Any] = item["evidence"]["related_runs"]
    assert (related["by"], related["value"], related["more"]) == ("input.order", ORDER, False)
    assert related["effects"] == ["request_refund"]
    assert [r["business_key"] for r in related["runs"]] == ["T-90602", "T-90601"]
    waiting, made = related["runs"]
    assert (waiting["run"], waiting["state"], waiting["status"]) == (
        second.id,
        "proposed",
        "waiting",
    )
    assert waiting["waiting_for"] == "request_refund LK-512877 45.95 CAD RFD-DOUBLE"
    assert waiting["effects"] == []
    assert (made["run"], made["state"], made["status"]) == (first.id, "refunded", "done")
    [op] = made["effects"]
    assert (op["effect"], op["status"]) == ("request_refund", "done")
    assert op["args"] == {"order": ORDER, "amount": 20, "currency": "CAD", "reason": "RFD-DOUBLE"}
    assert op["receipt"]["refund_id"] == runner.store.operations(first.id)[0].receipt["refund_id"]


def test_no_more_related_runs_are_shown_than_the_spec_declares_and_the_queue_says_so(
    make_runner: MakeRunner, clock: FakeClock
) -> None:
    _, text = spec_and_text("refund")
    text = text.replace("effects: [request_refund]}", "effects: [request_refund], limit: 2}")
    spec = load_spec_text(text, "refund.yaml")
    runner = make_runner()
    runs = []
    for i in range(4):
        run, _ = runner.start(spec, text, {**spec.examples["T-90603"].input, "ticket": f"T-{i}"})
        runs.append(run)
        clock.advance(1)

    item = decision(runner, runs[0], clock.now())

    assert item is not None
    related = item["evidence"]["related_runs"]
    assert [r["business_key"] for r in related["runs"]] == ["T-3", "T-2"]
    assert (related["limit"], related["more"]) == (2, True)


def test_a_run_is_related_by_the_normalised_value_it_started_with() -> None:
    spec, _ = spec_and_text("refund")
    given = spec.examples["T-90603"].input
    assert list(keys(spec, given)) == ["input.order"]
    assert keys(spec, given) == keys(spec, {**given, "amount": 1, "ticket": "T-1"})
    assert keys(spec, given) != keys(spec, {**given, "order": "LK-1"})
    assert keys(spec, {k: v for k, v in given.items() if k != "order"}) == {}
    assert digest_of(10.0) == digest_of(10) != digest_of("10")
