"""What `ratchet check` passes is safe: a saga never ends compensated with a change still made that
nobody was told of. An applied effect whose undo is `impossible: …` is undone by nobody, so the
run ends with a person naming it (before, it ended "released" and check counted it as kept); a
spec mutated to drop a compensation, or to undo the wrong change, is caught, and each violation's
reproduce command reproduces it."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from ratchet_runner.check import cases as check
from ratchet_runner.check.cases import Case, run_case
from ratchet_runner.check.invariants import ViolationKind
from ratchet_runner.spec.validate import load_spec_text, validate_text
from tests.conftest import ROOT
from tests.conftest import run_cli as run

BOOKING = (ROOT / "specs" / "booking.yaml").read_text(encoding="utf-8")
HOTEL_UNDO = "compensation: release_hotel}"
IMPOSSIBLE = 'compensation: "impossible: the hotel keeps the deposit"}'


def _variant(tmp_path: Path, name: str, old: str, new: str) -> tuple[Path, str]:
    assert old in BOOKING
    text = BOOKING.replace(old, new, 1)
    path = tmp_path / f"{name}.yaml"
    path.write_text(text, encoding="utf-8")
    return path, text


def _kinds(text: str, case: str, strategy: str = "ratchet") -> list[ViolationKind]:
    spec = load_spec_text(text)
    example, effect, window, fault = case.split(":")
    result = run_case(spec, text, Case(example, effect, window, fault, strategy))  # type: ignore[arg-type]
    return [v.kind for v in result.violations]


def _first_violation_reproduces(capsys: pytest.CaptureFixture[str], *check: str) -> str:
    """``ratchet check CHECK...`` exits 1; its first violation's reproduce command, run, exits 1
    and reports that violation again, which is returned."""
    code, _, err = run(capsys, "check", *check)
    assert code == 1
    lines = err.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("VIOLATION"))
    reproduce = lines[first + 1].split("reproduce: ", 1)[1]
    code, _, again = run(capsys, *shlex.split(reproduce)[1:])
    assert code == 1
    assert lines[first] in again.splitlines()
    return lines[first]


def test_a_change_that_cannot_be_undone_leaves_the_saga_with_a_person_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RATCHET_HOME", str(tmp_path / "home"))
    for name in ("RATCHET_DB", "RATCHET_BINDINGS"):
        monkeypatch.delenv(name, raising=False)
    path, text = _variant(tmp_path, "booking_impossible", HOTEL_UNDO, IMPOSSIBLE)
    assert validate_text(text).ok(strict=True)
    assert run(capsys, "run", str(path), "--example", "confirm_refused")[0] == 0
    code, out, _ = run(capsys, "approve", "TRIP-1003", "--as", "a-1", "--role", "travel_agent")
    assert code == 0
    assert "needs_operator (needs_person)" in out  # not "released (done)"
    code, out, _ = run(capsys, "trace", "TRIP-1003")
    said = " ".join(out.split())
    assert "undo skipped hold_hotel is not undone: impossible: the hotel keeps the deposit" in said
    assert (
        "cannot undo all 1 compensation(s) done, newest first; hold_hotel cannot be undone" in said
    )
    assert "releasing --refused--> needs_operator" in said
    code, out, _ = run(capsys, "effects")
    assert "release" in out  # the flight's hold was released all the same


@pytest.mark.parametrize(
    "case",
    [
        "confirm_refused:confirm_itinerary:none:refuse",
        "confirm_refused:release_flight:response-lost:timeout_after_write",
        "confirm_refused:hold_hotel:receipt-stored:malformed+lookup_fails",  # may have been made
        "hotel_refused:hold_hotel:none:refuse",
    ],
)
def test_check_passes_a_saga_whose_impossible_undo_goes_to_a_person(
    tmp_path: Path, case: str
) -> None:
    _, text = _variant(tmp_path, "booking_impossible", HOTEL_UNDO, IMPOSSIBLE)
    assert _kinds(text, case) == []


def test_dropping_a_compensation_is_caught_and_its_reproduce_command_reproduces_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, text = _variant(
        tmp_path,
        "booking_no_flight_undo",
        "retry_owner: runner, compensation: release_flight}",
        "retry_owner: runner}",
    )
    assert [d.code for d in validate_text(text).errors] == ["E509"]  # check runs it anyway
    violation = _first_violation_reproduces(capsys, str(path), "--example", "hotel_refused")
    assert "hold_flight" in violation
    assert "was made and never undone, yet the run ended released (done)" in violation


@pytest.mark.parametrize("end", ["released", "no_flight"])
def test_a_saga_that_ends_undone_without_its_undo_path_is_caught_by_validate_and_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], end: str
) -> None:
    """A refused hotel sent straight to the compensated end (or a cancelled one), skipping the
    release: the flight stays held while the run says otherwise. validate names the row (W518);
    check, which runs it anyway, finds the change left in place, with a reproduce command."""
    path, text = _variant(
        tmp_path,
        f"booking_skips_undo_to_{end}",
        "{state: holding_hotel,  event: refused,   next_state: releasing,",
        f"{{state: holding_hotel,  event: refused,   next_state: {end},",
    )
    [found] = validate_text(text).warnings  # an error from 0.2.0
    assert found.code == "W518"
    assert f"holding_hotel --refused--> {end}" in found.message
    assert "hold_flight (made)" in found.message
    case = "hotel_refused:hold_hotel:none:none"
    violation = _first_violation_reproduces(capsys, str(path), "--case", case)
    assert "hold_flight" in violation
    assert "was made and never undone, yet the run ended" in violation


def test_undoing_the_wrong_change_is_caught(tmp_path: Path) -> None:
    _, text = _variant(
        tmp_path,
        "booking_wrong_undo",
        "args: {hold_id: receipts.hold_flight.hold_id}",
        "args: {hold_id: receipts.hold_hotel.hold_id}",
    )
    kinds = _kinds(text, "confirm_refused:confirm_itinerary:none:refuse")
    assert ViolationKind.DUPLICATE in kinds or ViolationKind.LEFT_UNCOMPENSATED in kinds


def test_the_naive_strategy_leaves_its_registered_undo_unrun_and_check_says_so() -> None:
    kinds = _kinds(BOOKING, "hotel_refused:hold_flight:none:none", "naive")
    assert kinds == [ViolationKind.LEFT_UNCOMPENSATED]
    assert _kinds(BOOKING, "hotel_refused:hold_flight:none:none") == []


def test_every_shipped_saga_keeps_the_invariant_in_its_undo_paths() -> None:
    spec = load_spec_text(BOOKING)
    for case in (
        "hotel_refused:hold_hotel:none:refuse",
        "confirm_refused:release_hotel:in-flight:timeout_after_write",
        "confirm_refused:release_flight:before-request:unavailable",
    ):
        example, effect, window, fault = case.split(":")
        assert run_case(spec, BOOKING, Case(example, effect, window, fault)).ok, case
    assert check.FAULTS  # the faults above are among those check injects


# -- which role check approves as -------------------------------------------------------------

REFUND = (ROOT / "specs" / "refund.yaml").read_text(encoding="utf-8")
BIG = """  T-90777:
    description: 150.00, above what an agent may approve alone
    input: {ticket: T-90777, order: LK-777001, amount: 150.0, currency: CAD, reason: RFD-DAMAGED}
    world:
      orders: [{order: LK-777001, item: lawn mower, paid: 400.00, currency: CAD}]
"""


def _refund_with_big_example(tmp_path: Path, guard: str | None = None) -> Path:
    text = REFUND.replace("examples:\n", f"examples:\n{BIG}", 1)
    if guard is not None:
        old = "input.amount <= 100.0 || approval.role == 'team_lead'"
        assert old in text
        text = text.replace(old, guard, 1)
    path = tmp_path / "refund_big.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_check_approves_as_the_first_role_the_guard_accepts_for_the_example(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _refund_with_big_example(tmp_path)
    code, out, err = run(
        capsys, "check", str(path), "--case", "T-90777:request_refund:none:none", "--json"
    )
    assert code == 0, err
    assert '"violations": 0' in out
    assert '"changes": 1' in out  # approved by a team lead, as the guard asks above 100


def test_an_example_no_allowed_role_can_approve_is_named_not_a_bare_r401(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _refund_with_big_example(tmp_path, guard="input.amount <= 100.0")
    code, out, err = run(capsys, "check", str(path), "--example", "T-90777")
    assert code == 2
    assert out == ""
    said = " ".join(err.split())
    assert "example 'T-90777' waits for an approval that no role it allows can give" in said
    assert "agent: " in said
    assert "team_lead: " in said


def test_check_exits_1_on_a_spec_validate_rejects_even_when_no_case_breaks_an_invariant(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "refund_e510.yaml"
    path.write_text(
        REFUND.replace("    binds: all", "    binds: [order, amount, currency]"), "utf-8"
    )
    assert [d.code for d in validate_text(path.read_text()).errors] == ["E510"]
    code, out, err = run(capsys, "check", str(path), "--case", "T-90104:request_refund:none:none")
    assert "0 with violations" in out
    assert "E510" in err
    assert "(checking anyway, to show what it causes)" in err
    assert code == 1


def test_a_refund_and_its_charge_back_are_two_figures_and_one_case_counts_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    downgrade = str(ROOT / "tests" / "fixtures" / "downgrade.yaml")
    case = "happy:change_plan:none:refuse"  # the plan change refused: the refund charged back
    code, out, _ = run(capsys, "check", downgrade, "--case", case, "--compare", "naive", "--json")
    assert code == 0
    document = json.loads(out)
    assert (document["cases"], document["runs"]) == (1, 2)
    ours, naive = document["results"]
    assert ours["amounts"] == {"refund": 12.5, "charge": 12.5}
    assert ours["amount"] is None  # never 25.00, which would read like a double refund
    assert (naive["amounts"], naive["amount"]) == ({"refund": 12.5}, 12.5)  # never charged back
    code, out, _ = run(capsys, "check", downgrade, "--case", case)
    assert "2 change(s) refund 12.50 charge 12.50" in out


# -- results stream as cases end ----------------------------------------------------------------


def test_check_streams_each_result_to_a_file_and_names_the_slowest_cases(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record = tmp_path / "results.jsonl"
    refund = str(ROOT / "specs" / "refund.yaml")
    code, out, _ = run(capsys, "check", refund, "--example", "T-90104", "--results", str(record))
    assert code == 0
    lines = [json.loads(line) for line in record.read_text(encoding="utf-8").splitlines()]
    assert len(lines) == 50
    assert all(line["seconds"] > 0 for line in lines)
    rows = [line for line in out.splitlines() if line.startswith("T-90104")]
    assert len(rows) == 50
    slowest = next(line for line in out.splitlines() if line.startswith("slowest: "))
    assert slowest.count(" s") == 3


def test_a_check_stopped_midway_leaves_what_it_found(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    real, ran = check.run_case, []

    def stopped_after_five(*args: object, **kwargs: object) -> object:
        if len(ran) == 5:
            raise KeyboardInterrupt  # Ctrl-C during the sixth case
        ran.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(check, "run_case", stopped_after_five)
    record = tmp_path / "results.jsonl"
    refund = str(ROOT / "specs" / "refund.yaml")
    code, out, err = run(capsys, "check", refund, "--example", "T-90104", "--results", str(record))
    assert code == 130
    assert len(record.read_text(encoding="utf-8").splitlines()) == 5
    assert len([line for line in out.splitlines() if line.startswith("T-90104")]) == 5
    assert "5 case(s)" in out
    assert "stopped after 5 of 50 run(s)" in err


def test_results_to_stdout_are_json_lines_only_and_the_tally_goes_to_stderr(
    capsys: pytest.CaptureFixture[str],
) -> None:
    refund = str(ROOT / "specs" / "refund.yaml")
    case = "T-90104:request_refund:response-lost:none"
    code, out, err = run(capsys, "check", refund, "--case", case, "--results", "-")
    assert code == 0
    [line] = out.splitlines()  # no header, no row, no tally: stdout is JSON lines
    assert json.loads(line)["case"] == case
    assert "1 case(s), crashes in-process" in err
    code, out, err = run(capsys, "check", refund, "--case", case, "--results", "-", "--json")
    assert code == 2
    assert out == ""
    assert "--json or --results -" in err


def test_an_undo_path_that_ends_compensated_after_its_undo_failed_is_flagged(
    tmp_path: Path,
) -> None:
    """W518 on a compensate state's own failure row: the release exhausted, yet the run would
    end released with the holds still made; the fix is a person, not the undo path."""
    _, text = _variant(
        tmp_path,
        "booking_released_after_a_failed_release",
        "{state: releasing,      event: exhausted, next_state: needs_operator,",
        "{state: releasing,      event: exhausted, next_state: released,",
    )
    [found] = validate_text(text).warnings  # an error from 0.2.0
    assert found.code == "W518"
    assert "releasing --exhausted--> released" in found.message
    assert "hold_flight (made)" in found.message
    assert "hold_hotel (made)" in found.message
    assert "the undo exhausted: go to an operator queue" in found.message
