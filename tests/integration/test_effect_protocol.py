"""The reference cases of the effect protocol, in-process, on SQLite and on PostgreSQL."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ratchet_runner.adapters.practice import PracticeWorld
from ratchet_runner.engine.approvals import pending_request, valid_approval
from ratchet_runner.engine.deciding import decide
from ratchet_runner.engine.identity import evaluate_args, operation_id
from ratchet_runner.engine.runner import Runner
from ratchet_runner.errors import ApprovalError, ApprovalStale
from ratchet_runner.store.records import Change, RunRecord
from ratchet_runner.store.store import Store
from tests.conftest import ROOT, MakeRunner, spec_and_text


def start(runner: Runner, world: PracticeWorld, spec_name: str, example: str) -> RunRecord:
    spec, text = spec_and_text(spec_name)
    chosen = spec.examples[example]
    run, created = runner.start(spec, text, chosen.input)
    assert created
    world.seed(chosen.world)
    return runner.advance(run.id)


def approve(runner: Runner, run: RunRecord, role: str = "agent") -> RunRecord:
    decision = decide(runner, run.id, "approve", "agent-7", role)
    assert decision.changed
    return runner.advance(run.id)


def refund_with_fault(runner: Runner, world: PracticeWorld, kind: str, times: int) -> RunRecord:
    """Refund T-90104, approved, with ``kind`` injected into its next ``times`` calls (and not
    the example's own fault)."""
    spec, text = spec_and_text("refund")
    example = spec.examples["T-90104"]
    world.seed({"orders": example.world["orders"]})
    world.add_fault("request_refund", kind, times=times)
    run, _ = runner.start(spec, text, example.input)
    return approve(runner, runner.advance(run.id))


def kinds(store: Store, run: RunRecord) -> list[str]:
    return [event.kind for event in store.history(run.id)]


def calls(world: PracticeWorld, effect: str) -> list[dict[str, object]]:
    return [c for c in world.calls(effect) if not str(c["operation"]).startswith("lookup")]


def test_t90104_a_timeout_after_the_write_is_reconciled_not_repeated(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    runner = make_runner()
    run = start(runner, world, "refund", "T-90104")
    assert (run.state, run.status) == ("proposed", "waiting")
    run = approve(runner, run)
    assert (run.state, run.status) == ("refunded", "done")
    history = kinds(store, run)
    protocol = [
        k for k in history if k in ("pending", "call", "timeout", "reconcile_found", "done")
    ]
    assert protocol == ["pending", "call", "timeout", "reconcile_found", "done"]
    refunds = [c for c in world.changes() if c.operation == "refund"]
    assert [(c.args["order"], c.args["amount"], c.args["currency"]) for c in refunds] == [
        ("LK-793996", 9.95, "CAD")
    ]
    assert len(calls(world, "request_refund")) == 1
    (op,) = store.operations(run.id)
    assert (op.status, op.attempts) == ("done", 1)
    assert op.receipt == refunds[0].result


def test_the_naive_strategy_refunds_twice_after_a_lost_reply_which_is_why_it_is_not_the_default(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    runner = make_runner(strategy="naive")
    run = approve(runner, start(runner, world, "refund", "T-90104"))
    assert run.state == "refunded"
    refunds = [c for c in world.changes() if c.operation == "refund"]
    assert len(refunds) == 2
    assert round(sum(float(c.args["amount"]) for c in refunds), 2) == 19.90
    assert len({c.operation_id for c in refunds}) == 2
    assert "reconcile_found" not in kinds(store, run)


def test_t90603_a_double_charge_refund_with_a_lost_reply_is_made_once(
    make_runner: MakeRunner, world: PracticeWorld
) -> None:
    runner = make_runner()
    run = approve(runner, start(runner, world, "refund", "T-90603"))
    assert run.state == "refunded"
    refunds = [c for c in world.changes() if c.operation == "refund"]
    assert [c.args["amount"] for c in refunds] == [45.95]


def test_t90604_a_label_lost_before_the_write_is_retried_with_the_same_id(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    runner = make_runner()
    run = start(runner, world, "returns", "T-90604")
    assert run.state == "labelled"
    made = calls(world, "create_label")
    assert len(made) == 2
    assert len({c["operation_id"] for c in made}) == 1
    assert [c.operation for c in world.changes()] == ["create_label"]
    history = kinds(store, run)
    assert history.index("reconcile_not_found") < len(history) - history[::-1].index("call") - 1


def test_t90605_a_refused_reship_is_not_retried_goes_to_a_person_and_changes_nothing(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    runner = make_runner()
    run = start(runner, world, "returns", "T-90605")
    assert (run.state, run.status) == ("needs_person", "needs_person")
    assert world.changes() == []
    assert len(calls(world, "reship")) == 1
    queued = [e for e in store.history(run.id) if e.kind == "queued"]
    assert "offer a refund or a substitute" in str(queued[0].data["operator_action"])


def test_a_service_unavailable_once_is_retried_with_the_same_id(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    runner = make_runner()
    run = refund_with_fault(runner, world, "unavailable", 1)
    assert run.state == "refunded"
    made = calls(world, "request_refund")
    assert [c["outcome"] for c in made] == ["unavailable", "done"]
    assert len({c["operation_id"] for c in made}) == 1
    assert len(world.changes()) == 1


def test_unavailable_three_times_exhausts_the_budget_and_goes_to_a_person(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    runner = make_runner()
    run = refund_with_fault(runner, world, "unavailable", 3)
    assert (run.state, run.status) == ("needs_person", "needs_person")
    assert world.changes() == []
    (op,) = store.operations(run.id)
    assert (op.status, op.attempts) == ("exhausted", 3)
    # a resume does not refill the budget: nothing more is called
    runner.advance(run.id)
    assert len(calls(world, "request_refund")) == 3


def test_a_malformed_reply_is_never_taken_for_success(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    runner = make_runner()
    run = refund_with_fault(runner, world, "malformed", 1)
    history = store.history(run.id)
    timeout = next(e for e in history if e.kind == "timeout")
    assert "malformed" in str(timeout.data["reason"])
    assert "reconcile_found" in [e.kind for e in history]
    assert len(world.changes()) == 1


def _force_into(store: Store, run: RunRecord, state: str) -> RunRecord:
    change = Change(run.id, run.version, run.updated_at, state=state, status="running")
    return store.commit(change.event("moved", **{"from": run.state, "to": state, "event": "test"}))


def test_nothing_executes_without_an_approval(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    runner = make_runner()
    run = start(runner, world, "refund", "T-90104")
    forced = _force_into(store, run, "refunding")
    with pytest.raises(ApprovalError, match="no valid approval"):
        runner.advance(forced.id)
    assert world.changes() == []
    assert world.calls() == []
    assert store.operations(run.id) == []


def test_after_a_rejection_execution_is_refused_with_no_change(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    runner = make_runner()
    run = start(runner, world, "refund", "T-90104")
    decision = decide(runner, run.id, "reject", "agent-7", None, "customer withdrew the request")
    assert decision.run.state == "rejected"
    with pytest.raises(ApprovalError):
        decide(runner, run.id, "approve", "agent-9", "agent")
    forced = _force_into(store, store.get_run(run.id), "refunding")
    with pytest.raises(ApprovalError, match="rejected"):
        runner.advance(forced.id)
    assert world.changes() == []


def test_running_an_executed_approved_run_again_changes_nothing_more(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    runner = make_runner()
    run = approve(runner, start(runner, world, "refund", "T-90104"))
    version = run.version
    spec, text = spec_and_text("refund")
    again, created = runner.start(spec, text, spec.examples["T-90104"].input)
    assert (again.id, created) == (run.id, False)
    assert runner.advance(run.id).version == version
    decision = decide(runner, run.id, "approve", "agent-7", "agent")
    assert not decision.changed
    assert len(world.changes()) == 1


def test_a_role_the_spec_does_not_allow_is_refused_with_no_change(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    runner = make_runner()
    run = start(runner, world, "refund", "T-90104")
    with pytest.raises(ApprovalError, match="may not decide"):
        decide(runner, run.id, "approve", "intern-1", "intern")
    after = store.get_run(run.id)
    assert (after.state, after.version) == (run.state, run.version)
    assert store.approvals(run.id) == []


def test_an_agent_cannot_approve_above_the_guard_but_a_team_lead_can(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    runner = make_runner()
    spec, text = spec_and_text("refund")
    big = {**spec.examples["T-90603"].input, "ticket": "T-1", "amount": 150.0}
    world.seed({"orders": [{"order": big["order"], "paid": 500.0, "currency": "CAD"}]})
    run, _ = runner.start(spec, text, big)
    run = runner.advance(run.id)
    with pytest.raises(ApprovalError, match="does not apply"):
        decide(runner, run.id, "approve", "agent-7", "agent")
    assert store.get_run(run.id).state == "proposed"
    assert approve(runner, run, role="team_lead").state == "refunded"


def test_the_approval_request_shows_the_exact_action_who_may_approve_and_the_digest(
    make_runner: MakeRunner, world: PracticeWorld
) -> None:
    runner = make_runner()
    run = start(runner, world, "refund", "T-90104")
    request = pending_request(runner, run)
    assert request is not None
    assert request.action == "request_refund LK-793996 9.95 CAD RFD-LATE"
    assert request.roles == ("agent", "team_lead")
    assert len(request.digest) == 64


_OPERATION_ID_IN_ANOTHER_PROCESS = """
import json, sys
from ratchet_runner.engine.identity import evaluate_args, operation_id
from ratchet_runner.spec.validate import load_spec
spec = load_spec(sys.argv[1])
effect = spec.effects["request_refund"]
row = next(r for r in spec.transitions if r.external_effect == "request_refund")
ctx = {"input": json.loads(sys.argv[2]), "receipts": {}, "business_key": "T-90104", "run": {}}
print(operation_id(spec, row, effect, evaluate_args(effect, ctx), ctx))
"""


def test_the_same_business_key_and_action_give_the_same_operation_id_in_another_process() -> None:
    spec, _ = spec_and_text("refund")
    effect = spec.effects["request_refund"]
    row = next(r for r in spec.transitions if r.external_effect == "request_refund")
    data = spec.examples["T-90104"].input

    def here(input_: dict[str, object]) -> str:
        ctx = {"input": input_, "receipts": {}, "business_key": "T-90104", "run": {}}
        return operation_id(spec, row, effect, evaluate_args(effect, ctx), ctx)

    import json

    there = subprocess.run(
        [
            sys.executable,
            "-c",
            _OPERATION_ID_IN_ANOTHER_PROCESS,
            str(ROOT / "specs" / "refund.yaml"),
            json.dumps(data),
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout.strip()
    assert here(data) == there
    assert here({**data, "amount": 9.96}) != there


def test_a_one_cent_change_to_the_amount_needs_a_new_approval(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    runner = make_runner()
    run = start(runner, world, "refund", "T-90104")
    decide(runner, run.id, "approve", "agent-7", "agent")
    moved = store.get_run(run.id)
    spec = runner.spec_of(moved)
    effect = spec.effects["request_refund"]
    approved = {"order": "LK-793996", "amount": 9.95, "currency": "CAD", "reason": "RFD-LATE"}
    records, now = store.approvals(moved.id), runner.decision_now()
    assert valid_approval(records, spec, moved.id, effect, approved, now).actor == "agent-7"
    with pytest.raises(ApprovalStale, match="covers other arguments"):
        valid_approval(records, spec, moved.id, effect, {**approved, "amount": 9.96}, now)
    assert world.changes() == []


def test_a_run_resumes_under_the_spec_version_it_started_with(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    runner = make_runner()
    run = start(runner, world, "refund", "T-90104")
    spec, _ = spec_and_text("refund")
    fresh = make_runner()  # a new process would have no cache either
    pinned = fresh.spec_of(store.get_run(run.id))
    assert pinned.digest == spec.digest
    assert pinned.effects["request_refund"].retry.max_attempts == 3
    assert store.spec_text(run.spec_digest) == (ROOT / "specs" / "refund.yaml").read_text()


def test_the_machine_has_no_auto_transitions_and_picks_rows_by_guard() -> None:
    from ratchet_runner.engine.machine import machine_for

    spec, _ = spec_and_text("refund")
    machine = machine_for(spec)
    assert machine is machine_for(spec)
    assert machine.fire("proposed", "to_refunded", {})[0] is None
    small = {"input": {"amount": 9.95}, "approval": {"role": "agent"}}
    big = {"input": {"amount": 150.0}, "approval": {"role": "agent"}}
    row, _ = machine.fire("proposed", "approve", small)
    assert row is not None
    assert row.next_state == "refunding"
    assert machine.fire("proposed", "approve", big)[0] is None
