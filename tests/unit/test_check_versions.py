"""The invariants of ``check.versions`` on histories written by hand: each flags what it names,
and a history that keeps them is clean (the migration check's cases run them on real ones)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ratchet_runner.check.versions import approvals, whole
from ratchet_runner.spec.validate import load_spec, load_spec_text
from ratchet_runner.store.records import EventRecord, RunRecord, TimerRecord
from tests.conftest import ROOT

REFUND = ROOT / "specs" / "refund.yaml"
OLD = load_spec(str(REFUND))
NEW = load_spec_text(
    REFUND.read_text(encoding="utf-8").replace("spec_version: 1", "spec_version: 2"), "v2.yaml"
)
SPECS = {OLD.digest: OLD, NEW.digest: NEW}


def events(*given: tuple[str, dict[str, Any]]) -> list[EventRecord]:
    return [EventRecord(n, "run_1", n, kind, data, 0.0) for n, (kind, data) in enumerate(given, 1)]


def run_on(spec: Any, state: str, **context: Any) -> RunRecord:
    return RunRecord(
        id="run_1",
        workflow="refund",
        spec_digest=spec.digest,
        business_key="T-1",
        state=state,
        status="waiting",
        version=3,
        input={},
        context=context,
        created_at=0.0,
        updated_at=0.0,
    )


MIGRATED = (
    "migrated",
    {"migration": "mig_1", "old": 1, "new": 2, "from_state": "proposed", "to_state": "proposed"},
)
APPROVED = ("approved", {"actor": "a", "role": "agent"})
MOVED = ("moved", {"from": "proposed", "event": "approve", "to": "refunding"})
PENDING = ("pending", {"effect": "request_refund", "role": "forward", "operation_id": "op"})


def test_a_run_wholly_on_the_new_version_is_clean_and_each_half_is_caught() -> None:
    moved = run_on(NEW, "proposed", migrated={"migration": "mig_1"})
    history = events(("created", {"state": "proposed"}), MIGRATED)
    assert whole(moved, history, [], OLD, SPECS) == []
    # the record moved, the history did not
    split = whole(moved, history[:1], [], OLD, SPECS)
    assert {v.kind.value for v in split} == {"half_migrated"}
    assert "its record is on version 2 in 'proposed', its history on version 1" in split[0].message
    # moved, but its context does not say where from: it could not be rolled back
    bare = replace(moved, context={})
    assert "could not be rolled back" in whole(bare, history, [], OLD, SPECS)[0].message
    # a timer of a state it is not in
    timer = TimerRecord(1, "run_1", "refunding", "expired", 9.0, 0.0, None, None)
    assert (
        "is armed while it is in 'proposed'"
        in whole(moved, history, [timer], OLD, SPECS)[0].message
    )
    # a receipt's later verification is armed for any state
    verify = replace(timer, state="*", event="verify:op")
    assert whole(moved, history, [verify], OLD, SPECS) == []


def test_a_migration_written_over_a_run_that_had_moved_on_is_stale() -> None:
    history = events(("created", {"state": "proposed"}), APPROVED, MOVED, MIGRATED)
    run = run_on(NEW, "proposed", migrated={"migration": "mig_1"})
    found = {v.kind.value for v in whole(run, history, [], OLD, SPECS)}
    assert "stale_migration" in found


def test_an_approval_is_consumed_only_under_the_version_it_was_given_under() -> None:
    run = run_on(NEW, "refunded")
    asked_again = events(MIGRATED, APPROVED, MOVED, PENDING)
    assert list(approvals(run, asked_again, OLD, SPECS)) == []
    crossed = events(APPROVED, MIGRATED, MOVED, PENDING)
    [found] = approvals(run, crossed, OLD, SPECS)
    assert found.kind.value == "approval_across_versions"
    assert "sent under version 2 on an approval given under version 1" in found.message
    [none] = approvals(run, events(MIGRATED, PENDING), OLD, SPECS)
    assert "on no approval" in none.message
