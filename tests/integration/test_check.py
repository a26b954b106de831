"""`ratchet check`: every crash window of every effect run for real, invariants proven."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ratchet_runner import cli as cli_module
from ratchet_runner.adapters.base import Call, Done
from ratchet_runner.adapters.practice import world as practice
from ratchet_runner.check.cases import Case, cases, run_case
from ratchet_runner.check.invariants import ViolationKind
from ratchet_runner.engine.runner import Runner
from ratchet_runner.spec.model import Spec
from ratchet_runner.spec.validate import validate_text
from ratchet_runner.store.records import RunRecord
from tests.conftest import ROOT, spec_and_text

REFUND = ROOT / "specs" / "refund.yaml"


def test_every_case_of_the_refund_keeps_every_invariant() -> None:
    spec, text = spec_and_text("refund")
    selected = cases(spec, text, list(spec.examples), ("ratchet",))
    assert len(selected) == 2 * 5 * 10  # two examples, one effect, five windows, ten faults
    bad = [
        (r.case.name, r.violations) for r in (run_case(spec, text, c) for c in selected) if not r.ok
    ]
    assert bad == []


@pytest.mark.slow
def test_every_case_of_the_booking_saga_keeps_every_invariant() -> None:
    spec, text = spec_and_text("booking")
    selected = cases(spec, text, list(spec.examples), ("ratchet",))
    effects = {c.effect for c in selected}
    assert effects == set(spec.effects)  # forward and compensating effects are all reached
    bad = [
        (r.case.name, r.violations) for r in (run_case(spec, text, c) for c in selected) if not r.ok
    ]
    assert bad == []


@pytest.mark.parametrize(
    ("window", "fault", "ratchet", "naive"),
    [
        ("before-request", "none", (1, 9.95), (1, 9.95)),  # a crash before the write
        ("none", "timeout_after_write", (1, 9.95), (2, 19.90)),  # a timeout during the call
        ("response-lost", "none", (1, 9.95), (2, 19.90)),  # a crash after the write
    ],
)
def test_compare_naive_reproduces_the_known_refund_table(
    window: str, fault: str, ratchet: tuple[int, float], naive: tuple[int, float]
) -> None:
    spec, text = spec_and_text("refund")
    ours = run_case(spec, text, Case("T-90104", "request_refund", window, fault, "ratchet"))
    theirs = run_case(spec, text, Case("T-90104", "request_refund", window, fault, "naive"))
    assert (ours.changes, ours.amount, ours.ok) == (*ratchet, True)
    assert (theirs.changes, theirs.amount) == naive
    assert theirs.ok is (naive[0] == 1)


def test_a_crash_with_kill_really_kills_a_child_process_and_the_resume_makes_one_change() -> None:
    spec, text = spec_and_text("refund")
    result = run_case(
        spec, text, Case("T-90104", "request_refund", "response-lost", "none"), kill=True
    )
    assert result.crashed
    assert (result.changes, result.ok) == (1, True)


def _unsafe(name: str, old: str, new: str) -> tuple[str, Path]:
    _, text = spec_and_text(name)
    assert old in text
    return text.replace(old, new, 1), ROOT / "specs" / f"{name}.yaml"


def test_a_refund_without_an_idempotency_key_is_flagged_and_check_finds_its_duplicate() -> None:
    text, _ = _unsafe("refund", "idempotency_key: [business_key, effect, args],", "")
    report = validate_text(text)
    assert "E501" in {d.code for d in report.errors}
    assert report.spec is not None
    result = run_case(report.spec, text, Case("T-90104", "request_refund", "response-lost", "none"))
    assert result.changes == 2
    assert any("applied 2 times" in v.message for v in result.violations)
    assert {v.kind for v in result.violations} == {ViolationKind.DUPLICATE}


def test_a_booking_without_a_reconcile_lookup_is_flagged_and_check_finds_the_double_hold() -> None:
    text, _ = _unsafe("booking", "    reconcile: lookup\n", "    reconcile: none\n")
    report = validate_text(text)
    assert "E504" in {d.code for d in report.errors}
    assert report.spec is not None
    result = run_case(report.spec, text, Case("happy", "hold_flight", "response-lost", "none"))
    assert any("hold_flight applied 2 times" in v.message for v in result.violations)
    assert ViolationKind.DUPLICATE in {v.kind for v in result.violations}


def test_the_check_command_reports_a_violation_with_the_command_that_reproduces_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text, _ = _unsafe("refund", "idempotency_key: [business_key, effect, args],", "")
    path = tmp_path / "refund-no-key.yaml"
    path.write_text(text, encoding="utf-8")
    case = "T-90104:request_refund:response-lost:none"
    try:
        cli_module.main(["check", str(path), "--case", case])
    except SystemExit as exited:
        code = exited.code
    out, err = capsys.readouterr()
    assert code == 1
    assert "E501" in err
    assert f"reproduce: ratchet check {path} --case {case}" in err
    assert "DUPLICATE" in out


def test_the_check_command_prints_json(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli_module.main(
            [
                "check",
                str(REFUND),
                "--case",
                "T-90104:request_refund:response-lost:none",
                "--compare",
                "naive",
                "--json",
            ]
        )
    assert exited.value.code == 0
    document = json.loads(capsys.readouterr().out)
    assert document["violations"] == 0
    strategies = {r["strategy"]: (r["changes"], r["amount"]) for r in document["results"]}
    assert strategies == {"ratchet": (1, 9.95), "naive": (2, 19.9)}


def test_check_shows_progress_on_a_terminal(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    with pytest.raises(SystemExit) as exited:
        cli_module.main(["check", str(REFUND), "--case", "T-90104:request_refund:none:none"])
    assert exited.value.code == 0
    assert "checking" in capsys.readouterr().err


AMBIGUOUS = ("timeout_before_write", "timeout_after_write", "malformed")
PAIRED = tuple(f"{fault}+lookup_fails" for fault in AMBIGUOUS)
THE_ISSUE = "happy:hold_hotel:none:timeout_after_write+lookup_fails"


def test_check_pairs_each_ambiguous_fault_with_a_failing_lookup_and_runs_a_slow_reply() -> None:
    spec, text = spec_and_text("booking")
    names = {c.name for c in cases(spec, text, ["happy"], ("ratchet",))}
    for effect in ("hold_flight", "hold_hotel", "confirm_itinerary"):
        for fault in (*PAIRED, "slow_reply", "malformed"):
            assert f"happy:{effect}:none:{fault}" in names
    assert THE_ISSUE in names


def test_a_paired_fault_case_injects_both_faults_and_the_saga_undoes_the_hotel_hold() -> None:
    spec, text = spec_and_text("booking")
    result = run_case(spec, text, Case(*THE_ISSUE.split(":")))  # type: ignore[arg-type]
    assert (result.state, result.status, result.violations) == ("released", "done", [])
    assert result.changes == 4  # two holds, two releases


def _skip_every_undo(self: Runner, run: RunRecord, spec: Spec) -> RunRecord:
    """A deliberately broken compensation: it declares the saga compensated, undoing nothing."""
    change = self.change(run)
    change.event("compensated", undone=0)
    return self.move(run, spec, "ok", change)


def test_the_check_invariant_flags_a_saga_released_with_a_hold_in_place_and_says_how_to_rerun(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(Runner, "_compensate", _skip_every_undo)
    booking = ROOT / "specs" / "booking.yaml"
    with pytest.raises(SystemExit) as exited:
        cli_module.main(["check", str(booking), "--case", THE_ISSUE])
    err = capsys.readouterr().err
    assert exited.value.code == 1
    assert f"VIOLATION {THE_ISSUE}: " in err
    assert "hold_hotel (op " in err
    assert "was made and never undone, yet the run ended released (done)" in err
    assert f"reproduce: ratchet check {booking} --case {THE_ISSUE}" in err


def test_the_check_invariant_accepts_a_hold_kept_on_purpose() -> None:
    text, _ = _unsafe(
        "booking",
        "compensation: release_hotel}",
        'compensation: "none: the hotel keeps the hold; the traveller pays it"}',
    )
    report = validate_text(text)
    assert report.spec is not None
    result = run_case(report.spec, text, Case(*THE_ISSUE.split(":")))  # type: ignore[arg-type]
    assert (result.state, result.violations) == ("released", [])
    assert result.changes == 3  # two holds; only the flight is released


def test_a_slow_reply_case_runs_on_the_case_clock_and_never_sleeps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slept: list[float] = []
    monkeypatch.setattr(practice.time, "sleep", slept.append)
    spec, text = spec_and_text("booking")
    result = run_case(spec, text, Case("happy", "hold_hotel", "none", "slow_reply"))
    assert (result.state, result.violations) == ("confirmed", [])
    assert practice.SLOW_REPLY_SECONDS not in slept


def _says_done_and_makes_nothing(_self: practice.PracticeAdapter, request: Call) -> Done:
    """A provider that answers every call "done" and makes no change."""
    return Done({"refund_id": "re_never_made", "amount": request.args.get("amount")})


def test_a_change_never_applied_is_labeled_never_applied_not_duplicate(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The table's verdict is the violation's kind, never words in its message: "was needed but
    never applied" once read as DUPLICATE, because the message says "applied"."""
    monkeypatch.setattr(practice.PracticeAdapter, "call", _says_done_and_makes_nothing)
    case = "T-90104:request_refund:none:none"
    with pytest.raises(SystemExit) as exited:
        cli_module.main(["check", str(REFUND), "--case", case])
    out, err = capsys.readouterr()
    assert exited.value.code == 1
    assert "request_refund was needed but never applied" in err
    [row] = [line for line in out.splitlines() if line.startswith("T-90104")]
    assert "DUPLICATE" not in row
    assert row.endswith("· NEVER APPLIED")


def test_check_json_carries_each_violations_kind(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(practice.PracticeAdapter, "call", _says_done_and_makes_nothing)
    with pytest.raises(SystemExit) as exited:
        cli_module.main(
            ["check", str(REFUND), "--case", "T-90104:request_refund:none:none", "--json"]
        )
    assert exited.value.code == 1
    [result] = json.loads(capsys.readouterr().out)["results"]
    kinds = dict(zip(result["violations"], result["violation_kinds"], strict=True))
    assert kinds == {
        "request_refund recorded done but the provider has no such change": "done_without_change",
        "request_refund was needed but never applied": "never_applied",
    }
