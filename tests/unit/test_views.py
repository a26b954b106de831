"""The views of runs, the queue, status, effects and check results: plain values in, text out."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pytest

from ratchet_runner.adapters.practice import Change
from ratchet_runner.check import report
from ratchet_runner.check.cases import Case, Result
from ratchet_runner.check.invariants import Violation, ViolationKind
from ratchet_runner.cli import serving
from ratchet_runner.review import views
from ratchet_runner.store.records import EventRecord, RunRecord, latest_event
from ratchet_runner.worker.pool import PoolReport
from tests.conftest import ROOT


def _run(**changed: Any) -> RunRecord:
    fields: dict[str, Any] = {
        "id": "run_0123456789abcdef",
        "workflow": "refund",
        "spec_digest": "d",
        "business_key": "T-90104",
        "state": "refunded",
        "status": "done",
        "version": 7,
        "input": {},
        "context": {},
        "created_at": 1.0,
        "updated_at": 2.0,
    }
    return RunRecord(**{**fields, **changed})


def _event(version: int, kind: str, **data: Any) -> EventRecord:
    return EventRecord(version, "run_0123456789abcdef", version, kind, data, float(version))


def test_latest_event_is_the_newest_of_the_kinds_asked_for() -> None:
    history = [
        _event(1, "queued", operator_action="first"),
        _event(2, "stuck", reason="second"),
        _event(3, "moved", to="x"),
    ]
    assert latest_event(history, ("queued",)) == {"operator_action": "first"}
    assert latest_event(history, ("queued", "stuck")) == {"reason": "second"}
    assert latest_event(history, ("approved",)) == {}


def test_run_json_and_trace_json_carry_the_run_and_its_events() -> None:
    run = _run()
    assert views.run_json(run) == {
        "run": run.id,
        "workflow": "refund",
        "business_key": "T-90104",
        "state": "refunded",
        "status": "done",
        "version": 7,
        "created_at": 1.0,
        "updated_at": 2.0,
    }
    traced = views.trace_json(run, [_event(1, "started", input={})])
    assert traced["events"] == [{"version": 1, "kind": "started", "at": 1.0, "input": {}}]


@dataclass
class _Outcome:
    run: RunRecord
    message: str
    then: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"message": self.message, "then": self.then}


def test_a_commands_headline_is_its_message_and_what_happened_then() -> None:
    outcome = _Outcome(_run(), "approved", then="a worker carries the run on")
    assert views.command_headline(outcome) == "approved\nthen: a worker carries the run on"
    assert views.command_headline(outcome, "") == "then: a worker carries the run on"
    assert views.command_headline(_Outcome(_run(), "approved"), "") == ""


def test_the_summary_of_a_waiting_run_says_how_to_decide() -> None:
    summary = {
        "run": "run_1",
        "workflow": "refund",
        "business_key": "T-90104",
        "state": "awaiting_approval",
        "status": "waiting",
        "waiting_for": {
            "approval": "refund_approval",
            "action": "refund 9.95 EUR",
            "roles": ["agent", "lead"],
            "digest": "sha256:abc",
        },
        "operator_action": None,
    }
    assert views.summary_text(summary, "started").splitlines() == [
        "started",
        "run run_1 · refund T-90104 · awaiting_approval (waiting)",
        "  waiting for a decision on refund_approval",
        "  action:  refund 9.95 EUR",
        "  who:     agent, lead",
        "  digest:  sha256:abc",
        "  approve: ratchet approve run_1 --as NAME --role agent",
        "  reject:  ratchet reject run_1 --as NAME --reason TEXT",
    ]


def test_the_summary_of_a_run_for_a_person_names_the_action_and_the_trace() -> None:
    summary = {
        "run": "run_1",
        "workflow": "refund",
        "business_key": "T-1",
        "state": "manual_review",
        "status": "needs_person",
        "waiting_for": None,
        "operator_action": "check the refund by hand",
    }
    assert views.summary_text(summary).splitlines() == [
        "run run_1 · refund T-1 · manual_review (needs_person)",
        "  for a person: check the refund by hand",
        "  trace:   ratchet trace run_1",
    ]


def test_runs_and_stuck_runs_are_one_line_each() -> None:
    run = _run(status="running", state="refunding", lease_owner="worker-1")
    assert views.runs_lines([run]) == [
        views.RUNS_HEADER,
        "run_0123456789abcdef   refund     T-90104        refunding        running       7",
    ]
    [line] = views.stuck_lines([(run, "lease expired")])
    assert line.endswith("refunding        lease expired (owner worker-1)")
    assert views.stuck_json([(run, "idle")])[0]["why"] == "idle"


def test_status_counts_runs_and_says_how_long_each_lease_was_held_and_has_left() -> None:
    lease = {
        "id": "run_1",
        "workflow": "refund",
        "business_key": "T-1",
        "state": "refunding",
        "lease_owner": "w1",
        "taken_at": 100.0,
        "left": -3.0,
    }
    counts = {"running": 1, "done": 2}
    assert views.status_lines(counts, [lease], now=112.0) == [
        "runs: 2 done, 1 running",
        "lease  run_1                  T-1            refunding        "
        "w1 · held 12 s · expired 3 s ago",
    ]
    assert views.status_lines({}, [], now=0.0) == ["runs: none", "leases: none"]
    [shown] = views.status_json(counts, [lease], now=112.0)["leases"]
    assert (shown["held_seconds"], shown["seconds_left"], shown["expired"]) == (12.0, -3.0, True)


def test_effects_show_each_change_and_tally_calls_and_lookups() -> None:
    change = Change(
        1,
        "a" * 32,
        "payments",
        "refund",
        "request_refund",
        {"order": "O-1"},
        {"refund_id": "re_1"},
        "",
    )
    [line] = views.effects_lines([change])
    assert line.startswith("#1   payments  refund       O-1")
    assert line.endswith("-> re_1  op aaaaaaaaaaaa")
    calls = [{"operation": "refund"}, {"operation": "lookup_refund"}]
    assert views.effects_tally([change], calls) == "1 change(s) · 1 call(s) · 1 lookup(s)"


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(5, "5 s"), (600, "10 min"), (9000, "2.5 h"), (259200, "3.0 d")],
)
def test_ages_are_in_the_unit_a_person_reads(seconds: float, shown: str) -> None:
    assert views.age(seconds) == shown


def test_the_queue_shows_what_to_do_and_the_evidence() -> None:
    item = {
        "run": "run_1",
        "workflow": "booking",
        "business_key": "B-1",
        "state": "stuck_undo",
        "age_seconds": 90,
        "operator_action": "release the hotel by hand",
        "evidence": {
            "done": [{"effect": "hold_flight"}, {"effect": "hold_hotel"}],
            "undone": [{"effect": "hold_flight"}],
            "left": [{"undo": "release_hotel", "effect": "hold_hotel", "status": "failed"}],
            "not_undoable": [],
            "failed": [],
        },
    }
    assert views.queue_lines([item]) == [
        "run_1 · booking B-1 · stuck_undo · waiting 90 s",
        "  to do:  release the hotel by hand",
        "  done:   hold_flight, hold_hotel",
        "  undone: hold_flight",
        "  left:   release_hotel (undoes hold_hotel; failed)",
    ]


def test_a_pool_that_met_outages_says_so() -> None:
    report = PoolReport(advanced=3, timers=1, fenced=0, outages=2, unreachable_seconds=4.25)
    assert serving.pool_line(report) == (
        "stopped: 3 run(s) advanced, 1 timer(s) fired, 0 fenced; the store was unreachable "
        "2 time(s), 4.2 s in all"
    )
    assert serving.pool_json("w1", report)["store_unreachable_seconds"] == 4.25


def test_reset_says_what_it_emptied() -> None:
    assert views.reset_line(everything=True, practice=True) == (
        "practice world reset and store emptied, now a practice store"
    )
    assert views.reset_json(everything=False, practice=False) == {
        "practice_world": "reset",
        "store": "kept",
    }


# -- ratchet check ------------------------------------------------------------------------------


def _result(*violations: Violation, strategy: str = "ratchet") -> Result:
    case = Case("T-90104", "request_refund", "none", "none", strategy)  # type: ignore[arg-type]
    return Result(case, list(violations), changes=1, amounts={"refund": 9.95}, calls=1)


def test_every_kind_of_violation_has_a_verdict() -> None:
    assert set(report.VERDICTS) == {kind.value for kind in ViolationKind}


def test_the_verdict_comes_from_the_kind_never_from_the_message() -> None:
    never = Violation(ViolationKind.NEVER_APPLIED, "request_refund was needed but never applied")
    unrecorded = Violation(
        ViolationKind.APPLIED_WITHOUT_WRITE_AHEAD, "request_refund applied with no pending record"
    )
    # a message that reads like a duplicate, of a kind that is not one
    assert report.verdict(_result(never)).endswith("· NEVER APPLIED")
    assert report.verdict(_result(unrecorded)).endswith("· NO WRITE-AHEAD")
    assert "DUPLICATE" not in report.verdict(_result(never, unrecorded))
    twice = Violation(ViolationKind.DUPLICATE, "wording that says nothing of it")
    assert report.verdict(_result(never, twice)).endswith("· DUPLICATE")  # the most serious
    assert report.verdict(_result()) == "1 change(s) 9.95 · 1 call(s) · ok"


def test_the_check_table_puts_the_naive_strategy_beside_ratchets() -> None:
    twice = Violation(ViolationKind.DUPLICATE, "operation 0123 applied 2 times")
    results = [_result(), _result(twice, strategy="naive")]
    header, row = report.check_table(results, compare=True)
    assert header == report.CHECK_HEADER + "NAIVE"
    assert row.endswith("· ok   1 change(s) 9.95 · 1 call(s) · DUPLICATE")
    assert report.check_table(results, compare=False)[1].endswith("· ok")
    assert report.failed_cases(results) == []
    assert report.check_tally(results, 2, kill=False, compare=True) == (
        "1 case(s), crashes in-process: 0 with violations under Ratchet's protocol; "
        "1 under the naive strategy"
    )


def test_check_json_counts_ratchets_violations_and_carries_their_kinds() -> None:
    stuck = Violation(ViolationKind.STUCK, "the run is stuck in refunding (running)")
    document = report.check_json("specs/refund.yaml", False, [_result(stuck)])
    assert document["violations"] == 1
    [result] = document["results"]
    assert result["violations"] == [stuck.message]
    assert result["violation_kinds"] == ["stuck"]


def test_the_check_how_to_documents_every_kind_with_its_verdict_in_order() -> None:
    page = (ROOT / "docs" / "how-to" / "check-a-spec.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `([a-z_]+)` \| `([^`]+)` \|", page, flags=re.M)
    assert rows == [(kind.value, report.VERDICTS[kind.value]) for kind in ViolationKind]


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (45, "in 45 s"),
        (720, "in 12m"),
        (72 * 60, "in 1h 12m"),
        (-72 * 60, "1h 12m ago"),
        (24 * 3600, "in 24h 0m"),
        (3 * 86400 + 4 * 3600 + 59, "in 3d 4h"),
    ],
)
def test_a_moment_is_said_as_how_long_from_now_in_the_units_a_person_reads(
    seconds: float, shown: str
) -> None:
    from ratchet_runner.review.decisions import relative

    assert relative(seconds) == shown


def test_a_related_run_that_made_nothing_says_so_and_a_cut_list_says_it_was_cut() -> None:
    from ratchet_runner.review.decisions import related_lines

    declared = {
        "by": "input.order",
        "value": "LK-1",
        "effects": ["request_refund"],
        "limit": 1,
        "more": True,
        "runs": [
            {
                "run": "run_2",
                "business_key": "T-2",
                "state": "rejected",
                "status": "done",
                "created_at": 1_900_000_000,
                "waiting_for": None,
                "effects": [],
            }
        ],
    }
    assert related_lines(declared) == [
        "  related: 1 or more other run(s) with input.order LK-1",
        "    run_2 · T-2 · rejected (done) · started 2030-03-17 17:46:40Z",
        "      no request_refund",
        "    (only the newest 1 are shown)",
    ]
