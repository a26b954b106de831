"""The practice world's services as the adapter protocol sees them: payments' charge, the generic
service (declared operations, deduplicated or not), noop, and a change committed late."""

from __future__ import annotations

import dataclasses
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from ratchet_runner.adapters.base import (
    Ambiguous,
    Call,
    Done,
    Found,
    NotFound,
    Outcome,
    Refused,
    Semantics,
    Transient,
)
from ratchet_runner.adapters.practice import (
    COMMITS_LATE_SECONDS,
    COMMITS_WITHIN_SECONDS,
    PracticeWorld,
)
from ratchet_runner.errors import WorldError
from ratchet_runner.spec.validate import validate_text

ORDER = {"order": "SUB-7001", "item": "premium plan", "paid": 30.0, "currency": "CAD"}
PLANS = {"operations": {"change_plan": {"dedupe": True}, "send_email": {"dedupe": False}}}


@pytest.fixture
def world(tmp_path: Path) -> PracticeWorld:
    made = PracticeWorld(tmp_path / "practice.db")
    made.seed({"orders": [ORDER]})
    return made


def charge(amount: float = 12.5, currency: str = "CAD", order: str = "SUB-7001") -> dict[str, Any]:
    return {"order": order, "amount": amount, "currency": currency, "reason": "charge-back"}


def call(world: PracticeWorld, service: str, op: str, op_id: str, **args: Any) -> Outcome:
    config = PLANS if service == "service" else None
    return world.adapter(service, config).call(Call(op, op_id, args, effect=op))


# -- payments: charge -----------------------------------------------------------------------------


def test_a_charge_is_made_once_per_operation_id_and_returns_a_charge_id(
    world: PracticeWorld,
) -> None:
    first = call(world, "payments", "charge", "op-charge-1", **charge())
    again = call(world, "payments", "charge", "op-charge-1", **charge())
    assert isinstance(first, Done)
    assert first.receipt == {"charge_id": "ch_op-charge-1", "amount": 12.5, "currency": "CAD"}
    assert again == first
    assert [(c.operation, c.result) for c in world.changes()] == [("charge", first.receipt)]
    assert world.lookup("payments", "lookup_charge", "op-charge-1", "charge") == Found(
        first.receipt
    )


def test_a_charge_with_a_used_operation_id_and_other_arguments_is_refused(
    world: PracticeWorld,
) -> None:
    call(world, "payments", "charge", "op-charge-1", **charge())
    other = call(world, "payments", "charge", "op-charge-1", **charge(amount=13.0))
    assert other == Refused(
        "idempotency key reused with different arguments", {"operation_id": "op-charge-1"}
    )
    assert len(world.changes()) == 1


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (charge(order="SUB-0000"), "no order SUB-0000"),
        (charge(currency="EUR"), "order SUB-7001 was paid in CAD, not EUR"),
        (charge(amount=0), "a charge must be above zero, not 0.00"),
        ({"order": "SUB-7001", "amount": 5}, "bad request: 'currency'"),
    ],
)
def test_a_charge_is_refused_where_a_payment_provider_would_refuse_it(
    world: PracticeWorld, args: dict[str, Any], reason: str
) -> None:
    refused = call(world, "payments", "charge", "op-bad", **args)
    assert isinstance(refused, Refused)
    assert refused.reason == reason
    assert world.changes() == []


def test_a_refund_may_return_what_was_charged_after_the_order_was_paid(
    world: PracticeWorld,
) -> None:
    refund = {"order": "SUB-7001", "currency": "CAD", "reason": "RFD"}
    assert isinstance(call(world, "payments", "refund", "op-r1", **refund, amount=30.0), Done)
    over = call(world, "payments", "refund", "op-r2", **refund, amount=5.0)
    assert isinstance(over, Refused)
    assert over.evidence == {"paid": 30.0, "charged": 0.0, "refunded": 30.0}
    assert isinstance(call(world, "payments", "charge", "op-c1", **charge(amount=5.0)), Done)
    assert isinstance(call(world, "payments", "refund", "op-r3", **refund, amount=5.0), Done)


# -- the generic service --------------------------------------------------------------------------


def test_a_deduplicating_operation_returns_the_first_result_for_the_same_operation_id(
    world: PracticeWorld,
) -> None:
    first = call(world, "service", "change_plan", "op-plan", account="ACC-1", plan="basic")
    again = call(world, "service", "change_plan", "op-plan", account="ACC-1", plan="basic")
    other = call(world, "service", "change_plan", "op-plan", account="ACC-1", plan="pro")
    assert first == Done({"change_plan_id": "change_plan_op-plan", "operation": "change_plan"})
    assert again == first
    assert isinstance(other, Refused)
    assert other.reason == "idempotency key reused with different arguments"
    [change] = world.changes()
    assert (change.service, change.operation, change.args) == (
        "service",
        "change_plan",
        {"account": "ACC-1", "plan": "basic"},
    )


def test_an_operation_that_does_not_deduplicate_makes_a_second_change_on_a_second_request(
    world: PracticeWorld,
) -> None:
    first = call(world, "service", "send_email", "op-mail", to="ana@example.com")
    second = call(world, "service", "send_email", "op-mail", to="ana@example.com")
    assert first == Done({"send_email_id": "send_email_op-mail", "operation": "send_email"})
    assert second == Done({"send_email_id": "send_email_op-mail_2", "operation": "send_email"})
    assert len(world.changes()) == 2
    # its lookup finds both: the first, and the second as a duplicate
    assert world.lookup("service", "lookup", "op-mail", "send_email") == Found(
        first.receipt, (second.receipt,)
    )
    assert world.lookup("service", "lookup", "op-none", "send_email") == NotFound()


def test_the_generic_service_refuses_an_operation_its_adapter_does_not_declare(
    world: PracticeWorld,
) -> None:
    refused = call(world, "service", "cancel_plan", "op-x", account="ACC-1")
    assert refused == Refused("service has no operation 'cancel_plan'")
    assert world.calls() == []


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (None, "a 'service' adapter declares its operations"),
        ({"operations": {}}, "a 'service' adapter declares its operations"),
        ({"operations": {"change_plan": {}}}, "'change_plan' of a 'service' adapter needs dedupe"),
        ({"operations": {"change_plan": {"dedupe": "yes"}}}, "needs dedupe: true|false"),
    ],
)
def test_a_generic_service_adapter_without_usable_operations_is_a_world_error(
    world: PracticeWorld, config: dict[str, Any] | None, message: str
) -> None:
    with pytest.raises(WorldError, match=message):
        world.adapter("service", config)


def test_noop_answers_with_the_operation_id_once_and_its_lookup_finds_it(
    world: PracticeWorld,
) -> None:
    first = call(world, "noop", "anything", "op-noop", n=1)
    assert first == Done({"id": "op-noop"})
    assert call(world, "noop", "anything", "op-noop", n=1) == first
    assert isinstance(call(world, "noop", "anything", "op-noop", n=2), Refused)
    assert world.lookup("noop", "lookup", "op-noop", "anything") == Found({"id": "op-noop"})
    assert len(world.changes()) == 1


# -- commits_late ---------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_commits_late_answers_nothing_and_commits_the_change_once_when_its_time_comes(
    world: PracticeWorld,
) -> None:
    clock = Clock()
    world.now = clock
    world.add_fault("refund_prorated", "commits_late")
    refund = Call("refund", "op-late", charge(), effect="refund_prorated")
    adapter = world.adapter("payments")
    assert adapter.call(refund) == Ambiguous("timeout: no reply")
    assert adapter.lookup("lookup_refund", "op-late", "refund_prorated") == NotFound()
    busy = adapter.call(refund)  # a retry while the first is still being processed
    assert busy == Ambiguous("409: a request with this operation ID is still being processed")
    assert world.changes() == []
    clock.now += COMMITS_LATE_SECONDS
    found = adapter.lookup("lookup_refund", "op-late", "refund_prorated")
    assert isinstance(found, Found)
    assert found.receipt["refund_id"] == "re_op-late"
    assert adapter.call(refund) == Done(found.receipt)
    assert len(world.changes()) == 1
    outcomes = [c["outcome"] for c in world.calls("refund_prorated")]
    assert outcomes == ["commits_late", "lookup", "in_processing", "lookup", "done"]


def test_commits_late_at_a_provider_that_does_not_deduplicate_lets_a_blind_retry_make_two(
    world: PracticeWorld,
) -> None:
    clock = Clock()
    world.now = clock
    world.add_fault("create_label", "commits_late")
    label = Call("create_label", "op-label", {"order": "SUB-7001"}, effect="create_label")
    adapter = world.adapter("warehouse")
    assert isinstance(adapter.call(label), Ambiguous)
    assert isinstance(adapter.call(label), Done)  # nothing says "still being processed"
    clock.now += COMMITS_LATE_SECONDS
    assert [c.result["label_id"] for c in world.changes()] == ["lbl_op-label", "lbl_op-label_2"]


def test_reset_forgets_a_change_not_yet_committed(world: PracticeWorld) -> None:
    clock = Clock()
    world.now = clock
    world.add_fault("charge", "commits_late")
    call(world, "payments", "charge", "op-late", **charge())
    world.reset()
    clock.now += COMMITS_LATE_SECONDS
    assert world.changes() == []


# -- what validate says of the new kinds ----------------------------------------------------------

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "downgrade.yaml"


def validate_variant(old: str, new: str) -> list[str]:
    text = FIXTURE.read_text(encoding="utf-8")
    assert old in text
    report = validate_text(text.replace(old, new, 1), "downgrade.yaml")
    return [f"{d.code} {d.pointer}: {d.message}" for d in report.diagnostics]


def test_the_downgrade_spec_validates_strictly() -> None:
    assert validate_variant("name: downgrade", "name: downgrade") == []


def test_an_effect_naming_an_operation_its_generic_service_does_not_declare_is_e309() -> None:
    found = validate_variant("    operation: send_email", "    operation: send_mail")
    assert found == [
        "E309 /effects/send_email/operation: adapter 'mailer' declares no operation 'send_mail': "
        "declare it under adapters.mailer.config.operations, with dedupe: true or false; did you "
        "mean 'send_email'?"
    ]


def test_an_effect_naming_an_operation_the_payment_provider_lacks_is_e309() -> None:
    found = validate_variant("    operation: charge", "    operation: charge_back")
    assert found == [
        "E309 /effects/charge_back/operation: the contract of adapter 'payments' declares no "
        "operation 'charge_back': declare it under adapters.payments.operations, or use one of "
        "refund, charge; did you mean 'charge'?"
    ]


def test_a_generic_service_adapter_must_declare_its_operations() -> None:
    found = validate_variant(
        "    config:\n      operations:\n        send_email: {dedupe: false}\n", ""
    )
    assert found == ["E202 /adapters/mailer: /adapters/mailer needs the field 'config'"]
    found = validate_variant("send_email: {dedupe: false}", "send_email: {dedupe: maybe}")
    assert [f.split(":")[0] for f in found] == [
        "E203 /adapters/mailer/config/operations/send_email/dedupe"
    ]


def test_lookup_fails_by_call_number_fails_the_lookups_after_that_call(
    world: PracticeWorld,
) -> None:
    """``calls: [1]`` on ``lookup_fails``: the lookups made after call 1 (and before call 2)
    fail; once call 2 is made, lookups answer again."""
    from ratchet_runner.adapters.base import LookupFailed

    world.add_fault("charge", "timeout_after_write", calls=[1])
    world.add_fault("charge", "lookup_fails", calls=[1])
    adapter = world.adapter("payments")
    assert isinstance(adapter.call(Call("charge", "op-1", charge(), effect="charge")), Ambiguous)
    for _ in range(2):
        assert isinstance(adapter.lookup("lookup", "op-1", "charge"), LookupFailed)
    assert isinstance(adapter.call(Call("charge", "op-1", charge(), effect="charge")), Done)
    assert isinstance(adapter.lookup("lookup", "op-1", "charge"), Found)


def test_a_provider_that_does_not_deduplicate_abandons_a_request_it_cannot_commit_in_time(
    world: PracticeWorld,
) -> None:
    """The warehouse declares commits_within: it commits a request within that time of
    receiving it, or abandons it. Its database busy for longer, the request is not made."""
    world.seed({"orders": [{"order": "LK-1", "paid": 10.0, "currency": "CAD"}]})
    blocker = sqlite3.connect(world.path, timeout=60, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        began = time.monotonic()
        outcome = world.adapter("warehouse").call(
            Call("create_label", "op-busy", {"order": "LK-1", "sku": "X"}, "label")
        )
        waited = time.monotonic() - began
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert isinstance(outcome, Transient)
    assert "abandoned" in outcome.reason
    assert waited < COMMITS_WITHIN_SECONDS + 2
    assert world.changes() == []
    assert world.adapter("warehouse").semantics("create_label") == Semantics(
        dedupe=False, commits_within=COMMITS_WITHIN_SECONDS, sees_every_change=True
    )
    assert world.adapter("payments").semantics("refund") == Semantics(dedupe=True)


def test_a_request_past_its_deadline_never_reaches_the_practice_provider(
    world: PracticeWorld,
) -> None:
    late = Call("hold_flight", "op-late", {"trip": "T", "flight": "F"}, "hold_flight")
    late = dataclasses.replace(late, deadline=time.monotonic() - 0.01)
    outcome = world.adapter("travel").call(late)
    assert isinstance(outcome, Transient)
    assert world.calls() == []
    assert world.changes() == []
