"""The words a run is stored in are enums that are their plain words: what the store keeps and
what JSON gives out are the same as when they were bare strings."""

from __future__ import annotations

import json

import pytest

from ratchet_runner.adapters.practice import PracticeWorld
from ratchet_runner.engine import commands
from ratchet_runner.engine.controls import operate
from ratchet_runner.store.context import RunContext
from ratchet_runner.store.records import RunRecord
from ratchet_runner.store.store import Store
from ratchet_runner.words import RUN_STATUSES, EventKind, OperationStatus, RunStatus
from tests.conftest import MakeRunner, spec_and_text


def test_a_status_is_its_plain_word_in_json_in_text_and_in_comparisons() -> None:
    assert json.dumps(RunStatus.NEEDS_PERSON) == '"needs_person"'
    assert json.dumps({"status": OperationStatus.DONE, "kind": EventKind.RECONCILE_FOUND}) == (
        '{"status": "done", "kind": "reconcile_found"}'
    )
    assert (str(RunStatus.WAITING), f"{OperationStatus.UNKNOWN}") == ("waiting", "unknown")
    assert RunStatus.DONE == "done"
    assert OperationStatus.DONE == "done"
    assert {"needs_person": 1}[RunStatus.NEEDS_PERSON] == 1  # a member finds its word's key


def test_the_statuses_the_command_line_offers_are_the_plain_words() -> None:
    assert RUN_STATUSES == ("running", "waiting", "done", "needs_person", "paused", "cancelled")
    assert all(type(status) is str for status in RUN_STATUSES)  # click offers member names


def test_a_word_the_store_does_not_know_is_refused_when_read_back() -> None:
    record = RunRecord(
        **{**_run_fields(), "status": "needs_person"}  # as a row read back holds it
    )
    assert record.status is RunStatus.NEEDS_PERSON
    with pytest.raises(ValueError, match="finished"):
        RunRecord(**{**_run_fields(), "status": "finished"})


def _run_fields() -> dict[str, object]:
    return {
        "id": "run_1",
        "workflow": "refund",
        "spec_digest": "0" * 64,
        "business_key": "T-1",
        "state": "start",
        "version": 1,
        "input": {},
        "context": {},
        "created_at": 0.0,
        "updated_at": 0.0,
    }


def _many_runs(make_runner: MakeRunner, world: PracticeWorld, store: Store) -> list[RunRecord]:
    """Runs that wait for a decision, lose a reply, compensate, and are paused, resumed and
    cancelled by an operator, as the store keeps them."""
    runner = make_runner()
    world.add_fault("hold_hotel", "timeout_after_write")
    world.add_fault("hold_hotel", "lookup_fails")
    booking, text = spec_and_text("booking")
    trip, _ = runner.start(booking, text, booking.examples["happy"].input)
    runner.advance(trip.id)
    refund, text = spec_and_text("refund")
    world.add_fault("request_refund", "timeout_after_write")
    first, _ = runner.start(refund, text, refund.examples["T-90104"].input)
    runner.advance(first.id)
    commands.decide(make_runner(), first.id, "approve", "agent-7", "agent")
    second, _ = runner.start(refund, text, {**refund.examples["T-90104"].input, "ticket": "T-2"})
    runner.advance(second.id)
    for action in ("pause", "resume", "cancel"):
        operate(make_runner(), second.id, action, "ops-1", "payments_ops")
    return [store.get_run(run.id) for run in (trip, first, second)]


def test_every_word_the_store_writes_is_a_member(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    runs = _many_runs(make_runner, world, store)
    statuses = {run.status for run in runs}
    operations = [op for run in runs for op in store.operations(run.id)]
    kinds = {event.kind for run in runs for event in store.history(run.id)}
    assert all(type(status) is RunStatus for status in statuses)
    assert all(type(op.status) is OperationStatus for op in operations)
    assert kinds <= set(EventKind), kinds - set(EventKind)
    # not vacuous: the runs went through the words that matter most
    assert {RunStatus.DONE, RunStatus.CANCELLED} <= statuses
    assert {OperationStatus.DONE} <= {op.status for op in operations}
    assert {"created", "moved", "pending", "call", "timeout", "done", "operator"} <= kinds
    assert {"compensation_registered", "reconcile_failed", "approved", "paused"} <= kinds


def test_every_key_the_runner_writes_in_a_context_is_a_key_of_its_type(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    runs = _many_runs(make_runner, world, store)
    keys = {key for run in runs for key in run.context}
    assert keys <= RunContext.__optional_keys__, keys - RunContext.__optional_keys__
    assert {"receipts", "completed", "undone", "approval", "paused_from", "budget_used"} <= keys
