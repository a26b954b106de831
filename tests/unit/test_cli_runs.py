"""The run commands of the CLI: run, approve, reject, resume, runs, trace, effects, reset."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.conftest import run_cli as run

REFUND = str(ROOT / "specs" / "refund.yaml")
RETURNS = str(ROOT / "specs" / "returns.yaml")


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RATCHET_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RATCHET_DB", raising=False)
    return tmp_path / "home"


def test_run_waits_for_approval_and_shows_the_exact_action(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, "run", REFUND, "--example", "T-90104", "--json")
    assert code == 0
    summary = json.loads(out)
    assert (summary["state"], summary["status"]) == ("proposed", "waiting")
    request = summary["waiting_for"]
    assert request["action"] == "request_refund LK-793996 9.95 CAD RFD-LATE"
    assert request["roles"] == ["agent", "team_lead"]


def test_approve_by_business_key_runs_the_refund_once_and_trace_shows_the_reconcile(
    capsys: pytest.CaptureFixture[str],
) -> None:
    run(capsys, "run", REFUND, "--example", "T-90104")
    code, out, _ = run(capsys, "approve", "T-90104", "--as", "agent-7", "--role", "agent", "--json")
    assert code == 0
    assert json.loads(out)["state"] == "refunded"
    code, out, _ = run(capsys, "trace", "T-90104")
    assert code == 0
    assert "reconcile found" in out
    assert "timeout: the reply was lost" in out
    code, out, _ = run(capsys, "effects", "--json")
    changes = json.loads(out)["changes"]
    assert [c["operation"] for c in changes] == ["refund"]


def test_a_disallowed_role_is_refused_with_exit_one_and_no_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    run(capsys, "run", REFUND, "--example", "T-90104")
    code, out, err = run(capsys, "approve", "T-90104", "--as", "x", "--role", "intern")
    assert code == 1
    assert "may not decide" in err
    assert "nothing changed" in err
    assert "Traceback" not in out + err


def test_an_unknown_run_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "trace", "run_doesnotexist")
    assert code == 1
    assert "no run 'run_doesnotexist'" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--example", "T-90104", "--input", "x.json"], "exactly one of"),
        (["--example", "nope"], "no example 'nope'"),
        (["--example", "T-90104", "--fault", "request_refund:explode"], "no fault 'explode'"),
        (["--example", "T-90104", "--fault", "nope:refuse"], "no effect 'nope'"),
    ],
)
def test_run_usage_errors_exit_two(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str, tmp_path: Path
) -> None:
    (tmp_path / "x.json").write_text("{}")
    args = [a if a != "x.json" else str(tmp_path / "x.json") for a in args]
    code, _, err = run(capsys, "run", REFUND, *args)
    assert code == 2
    assert message in err


def test_input_that_does_not_fit_the_spec_is_refused_before_anything_runs(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = tmp_path / "input.yaml"
    bad.write_text("ticket: T-1\norder: LK-1\namount: -5\ncurrency: CAD\nreason: RFD-LATE\n")
    code, out, err = run(capsys, "run", REFUND, "--input", str(bad))
    assert code == 1
    assert "amount" in err
    code, out, _ = run(capsys, "runs", "--json")
    assert (code, json.loads(out)) == (0, [])


def test_world_seeds_the_practice_world_for_a_run_started_from_an_input_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    given = tmp_path / "input.yaml"
    given.write_text("ticket: T-1\norder: LK-1\namount: 40.0\ncurrency: CAD\nreason: RFD-LATE\n")
    world = tmp_path / "world.yaml"
    world.write_text("orders: [{order: LK-1, item: kettle, paid: 40.0, currency: CAD}]\n")
    code, _, _ = run(capsys, "run", REFUND, "--input", str(given), "--world", str(world))
    assert code == 0
    code, out, _ = run(capsys, "approve", "T-1", "--as", "agent-7", "--role", "agent", "--json")
    assert code == 0
    assert json.loads(out)["state"] == "refunded"
    code, out, _ = run(capsys, "effects", "--json")
    [refund] = json.loads(out)["changes"]
    assert (refund["operation"], refund["args"]["order"]) == ("refund", "LK-1")


def test_without_a_world_the_practice_provider_refuses_an_order_it_does_not_know(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    given = tmp_path / "input.yaml"
    given.write_text("ticket: T-2\norder: LK-2\namount: 40.0\ncurrency: CAD\nreason: RFD-LATE\n")
    run(capsys, "run", REFUND, "--input", str(given))
    _, out, _ = run(capsys, "approve", "T-2", "--as", "agent-7", "--role", "agent", "--json")
    assert json.loads(out)["status"] == "needs_person"


def test_a_world_that_is_not_a_mapping_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    listed = tmp_path / "list.yaml"
    listed.write_text("- 1\n", encoding="utf-8")
    code, _, err = run(capsys, "run", REFUND, "--example", "T-90104", "--world", str(listed))
    assert code in (1, 2)
    assert "Traceback" not in err
    code, out, _ = run(capsys, "runs", "--json")
    assert json.loads(out) == []


def test_a_world_whose_fault_names_no_effect_of_the_spec_is_refused_before_the_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The fault would wait for calls that never come, and the refund would go through as if
    no fault had been asked for: refused, with the effect it may have meant."""
    misspelt = tmp_path / "world.json"
    misspelt.write_text('{"faults": [{"effect": "request_refnd", "kind": "refuse"}]}')
    code, _, err = run(capsys, "run", REFUND, "--example", "T-90104", "--world", str(misspelt))
    assert code == 2
    assert "R206" in err
    assert "a fault names effect 'request_refnd'" in err
    assert "did you mean 'request_refund'?" in err
    code, out, _ = run(capsys, "runs", "--json")
    assert json.loads(out) == []


def test_an_approval_no_guard_accepts_names_the_guard_and_the_roles_it_would_accept(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    given = tmp_path / "input.yaml"
    given.write_text("ticket: T-3\norder: LK-3\namount: 150.0\ncurrency: CAD\nreason: RFD-LATE\n")
    run(capsys, "run", REFUND, "--input", str(given))
    code, _, err = run(capsys, "approve", "T-3", "--as", "agent-7", "--role", "agent")
    assert code == 1
    assert (
        'R401 approve does not apply here (the guard "input.amount <= 100.0 || approval.role '
        "== 'team_lead'\" does not hold for role 'agent'; it would for team_lead); nothing changed"
    ) in err
    code, _, _ = run(capsys, "approve", "T-3", "--as", "lead-1", "--role", "team_lead")
    assert code == 0


def test_a_run_started_naive_stays_naive_when_approved_and_refunds_twice(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = run(capsys, "run", REFUND, "--example", "T-90104", "--naive")
    assert code == 0
    assert "--naive makes a new operation ID on every attempt" in err
    code, _, _ = run(capsys, "approve", "T-90104", "--as", "agent-7", "--role", "agent")
    assert code == 0
    code, out, _ = run(capsys, "effects", "--json")
    refunds = [c for c in json.loads(out)["changes"] if c["operation"] == "refund"]
    assert len(refunds) == 2  # the lost reply retried blind: the double refund, 19.90
    assert round(sum(float(c["args"]["amount"]) for c in refunds), 2) == 19.9


def test_the_naive_strategy_is_refused_on_a_store_that_is_not_a_practice_store(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'production.db'}"
    code, _, err = run(capsys, "run", REFUND, "--example", "T-90104", "--naive", "--db", url)
    assert code == 2
    assert "the naive strategy runs only on a practice store" in err
    code, out, _ = run(capsys, "runs", "--json", "--db", url)
    assert json.loads(out) == []


def test_a_fault_from_the_command_line_goes_to_a_person(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(
        capsys, "run", RETURNS, "--example", "T-90604", "--fault", "create_label:refuse", "--json"
    )
    assert code == 0
    summary = json.loads(out)
    assert summary["status"] == "needs_person"
    assert "tell the customer" in summary["operator_action"]


def test_the_naive_flag_warns(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "run", REFUND, "--example", "T-90104", "--naive")
    assert code == 0
    assert "warning: --naive" in err


def test_runs_lists_and_reset_all_empties(capsys: pytest.CaptureFixture[str]) -> None:
    run(capsys, "run", RETURNS, "--example", "T-90605")
    assert run(capsys, "runs", "--json")[0] == 0
    code, out, _ = run(capsys, "runs", "--json")
    assert (code, [r["business_key"] for r in json.loads(out)]) == (0, ["T-90605/reship"])
    code, out, _ = run(capsys, "reset", "--all", "--json")
    assert (code, json.loads(out)) == (0, {"practice_world": "reset", "store": "emptied"})
    code, out, _ = run(capsys, "runs", "--json")
    assert (code, json.loads(out)) == (0, [])


def _input_file(folder: Path, name: str, **changed: object) -> str:
    """T-90104's input, as a JSON file, with ``changed`` fields replaced."""
    given = {
        "ticket": "T-90104",
        "order": "LK-793996",
        "amount": 9.95,
        "currency": "CAD",
        "reason": "RFD-LATE",
        **changed,
    }
    path = folder / name
    path.write_text(json.dumps(given), encoding="utf-8")
    return str(path)


def test_another_input_for_an_existing_business_key_is_refused_with_exit_five_and_nothing_written(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Starting is idempotent for the same input only: 19.90 for the T-90104 that asked for 9.95
    is a conflict (as a reused idempotency key with other parameters is), never the 9.95 run."""
    code, out, _ = run(capsys, "run", REFUND, "--example", "T-90104", "--json")
    assert code == 0
    first = json.loads(out)["run"]
    code, out, err = run(
        capsys, "run", REFUND, "--input", _input_file(tmp_path, "more.json", amount=19.90)
    )
    assert code == 5, err
    assert out == ""
    assert err.startswith("ratchet: R409 ")
    assert f"run {first} (business key 'T-90104')" in err
    assert "input/amount is 9.95 there, 19.9 here" in err
    assert "nothing was written" in err
    assert "Traceback" not in err
    code, _, err = run(
        capsys,
        "run",
        REFUND,
        "--input",
        _input_file(tmp_path, "long.json", order="LK-" + "7" * 200),
    )
    assert code == 5
    assert (
        'input/order is "LK-793996" there, "LK-7777777777777777...7777777777777777777" here' in err
    )
    code, out, _ = run(capsys, "trace", "T-90104", "--json")
    traced = json.loads(out)
    assert (traced["run"], traced["version"]) == (first, 1)
    code, out, _ = run(capsys, "run", REFUND, "--input", _input_file(tmp_path, "same.json"))
    assert (code, f"run {first} already existed for this business key") == (0, out.splitlines()[0])
    code, out, _ = run(capsys, "run", REFUND, "--example", "T-90104")
    assert (code, f"run {first} already existed for this business key") == (0, out.splitlines()[0])
    code, out, _ = run(capsys, "runs", "--json")
    assert [r["run"] for r in json.loads(out)] == [first]


def test_an_integral_float_is_the_same_input_as_the_integer(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Inputs are compared as normalised JSON, as arguments are: ``40.0`` is ``40``."""
    code, out, _ = run(
        capsys, "run", REFUND, "--input", _input_file(tmp_path, "a.json", amount=40.0), "--json"
    )
    assert code == 0
    code, again, err = run(
        capsys, "run", REFUND, "--input", _input_file(tmp_path, "b.json", amount=40), "--json"
    )
    assert code == 0, err
    assert json.loads(again)["run"] == json.loads(out)["run"]
    code, _, err = run(capsys, "run", REFUND, "--input", _input_file(tmp_path, "c.json", amount=41))
    assert code == 5
    assert "input/amount is 40 there, 41 here" in err


def test_a_run_and_each_decision_record_the_ratchet_version_that_made_them(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Beside the spec and policy versions, which Ratchet started the run and which recorded
    each decision: in the run's context, the ``created`` event and each decision's event."""
    from ratchet_runner import __version__

    run(capsys, "run", REFUND, "--example", "T-90104")
    code, _, _ = run(capsys, "approve", "T-90104", "--as", "agent-7", "--role", "agent")
    assert code == 0
    run(capsys, "run", REFUND, "--input", _input_file(tmp_path, "t2.json", ticket="T-2"))
    code, _, _ = run(capsys, "reject", "T-2", "--as", "agent-7", "--reason", "not late")
    assert code == 0
    for key, decision in (("T-90104", "approved"), ("T-2", "rejected")):
        code, out, _ = run(capsys, "trace", key, "--json")
        traced = json.loads(out)
        assert traced["ratchet_version"] == __version__
        recorded = {e["kind"]: e.get("ratchet_version") for e in traced["events"]}
        assert (recorded["created"], recorded[decision]) == (__version__, __version__)
        code, out, _ = run(capsys, "trace", key)
        [created] = [line for line in out.splitlines() if line.split()[1] == "created"]
        [decided] = [line for line in out.splitlines() if line.split()[1] == decision]
        assert created.endswith(f" · ratchet {__version__}")
        assert decided.endswith(f" · ratchet {__version__}")
    code, out, _ = run(capsys, "run", REFUND, "--example", "T-90104", "--json")
    assert json.loads(out)["ratchet_version"] == __version__
