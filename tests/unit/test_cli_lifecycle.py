"""The lifecycle commands: signal, worker, ops and queue."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.conftest import run_cli as run

REFUND = str(ROOT / "specs" / "refund.yaml")
PARCEL = str(ROOT / "tests" / "fixtures" / "parcel.yaml")
RETURNS = str(ROOT / "specs" / "returns.yaml")
NOW = 1_900_000_000


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RATCHET_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("RATCHET_NOW", str(NOW))
    monkeypatch.delenv("RATCHET_DB", raising=False)
    return tmp_path / "home"


def at(monkeypatch: pytest.MonkeyPatch, seconds_later: float) -> None:
    monkeypatch.setenv("RATCHET_NOW", str(NOW + seconds_later))


def test_worker_once_run_twice_past_the_expiry_fires_it_once(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run(capsys, "run", REFUND, "--example", "T-90104")[0] == 0
    at(monkeypatch, 72 * 3600 - 1)
    code, out, _ = run(capsys, "worker", "--once", "--json")
    assert (code, json.loads(out)["timers_fired"]) == (0, [])
    at(monkeypatch, 72 * 3600 + 1)
    code, out, _ = run(capsys, "worker", "--once", "--json")
    fired = json.loads(out)["timers_fired"]
    assert [(t["event"], t["outcome"]) for t in fired] == [("expired", "fired")]
    code, out, _ = run(capsys, "worker", "--once", "--json")
    assert json.loads(out)["timers_fired"] == []
    code, out, _ = run(capsys, "trace", "T-90104", "--json")
    trace = json.loads(out)
    assert trace["state"] == "lapsed"
    assert [e["kind"] for e in trace["events"]].count("timer") == 1


def test_a_signal_moves_a_paused_run_once_per_id(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run(capsys, "run", PARCEL, "--example", "P-1")[0] == 0
    args = [
        "signal",
        "P-1",
        "parcel_received",
        "--id",
        "carrier-evt-1",
        "--data",
        '{"weight_kg": 4.2}',
        "--json",
    ]
    code, out, _ = run(capsys, *args)
    first = json.loads(out)
    assert (code, first["state"], first["signal"]["changed"]) == (0, "inspecting", True)
    code, out, _ = run(capsys, *args)
    again = json.loads(out)
    assert (code, again["signal"]["changed"]) == (0, False)
    assert "already received" in again["signal"]["message"]
    at(monkeypatch, 3600)
    code, out, _ = run(capsys, "worker", "--once", "--json")
    assert [t["event"] for t in json.loads(out)["timers_fired"]] == ["due"]
    code, out, _ = run(capsys, "trace", "P-1", "--json")
    assert json.loads(out)["state"] == "returned"


@pytest.mark.parametrize(
    ("event", "data", "message"),
    [
        ("parcel_lost", "{}", "takes parcel_received, customer_kept_it, not 'parcel_lost'"),
        ("expired", "{}", "not 'expired'"),
        ("parcel_received", '{"weight_kg": 0}', "does not apply"),
    ],
)
def test_a_signal_that_does_not_fit_is_refused_and_changes_nothing(
    capsys: pytest.CaptureFixture[str], event: str, data: str, message: str
) -> None:
    run(capsys, "run", PARCEL, "--example", "P-1")
    before = json.loads(run(capsys, "trace", "P-1", "--json")[1])["version"]
    code, _, err = run(capsys, "signal", "P-1", event, "--id", "x-1", "--data", data)
    assert code == 1
    assert message in err
    assert "nothing changed" in err
    assert json.loads(run(capsys, "trace", "P-1", "--json")[1])["version"] == before


def test_a_signal_sent_for_another_spec_version_is_refused_and_changes_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    run(capsys, "run", PARCEL, "--example", "P-1")
    before = json.loads(run(capsys, "trace", "P-1", "--json")[1])["version"]
    signal = ["signal", "P-1", "parcel_received", "--data", '{"weight_kg": 4.2}']

    code, _, err = run(capsys, *signal, "--id", "evt-1", "--spec-version", "2")

    assert code == 1
    assert "runs version 1 of parcel; this signal was sent for version 2" in err
    assert json.loads(run(capsys, "trace", "P-1", "--json")[1])["version"] == before
    code, out, _ = run(capsys, *signal, "--id", "evt-2", "--spec-version", "1", "--json")
    assert (code, json.loads(out)["state"]) == (0, "inspecting")


def test_approve_through_signal_is_refused_with_the_right_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    run(capsys, "run", REFUND, "--example", "T-90104")
    code, _, err = run(capsys, "signal", "T-90104", "approve", "--id", "s-1")
    assert code == 1
    assert "ratchet approve" in err


def test_ops_are_refused_for_a_role_the_spec_does_not_declare_and_queue_lists_the_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    run(capsys, "run", RETURNS, "--example", "T-90605")
    code, _, err = run(capsys, "ops", "retry", "T-90605/reship", "--as", "x", "--role", "agent")
    assert (code, "may not retry" in err) == (1, True)
    code, out, _ = run(capsys, "queue", "--json")
    listed = json.loads(out)
    assert listed["decisions"] == []
    (item,) = listed["needs_person"]
    assert item["business_key"] == "T-90605/reship"
    assert "offer a refund or a substitute" in item["operator_action"]
    code, out, _ = run(capsys, "queue")
    assert "failed: reship refused after 1 attempt(s): LADDER-3 is out of stock" in out
    code, _, err = run(
        capsys, "ops", "retry", "T-90605/reship", "--as", "ops-1", "--role", "warehouse_ops"
    )
    assert code == 1
    assert "refused by the provider" in err


def test_ops_pause_and_resume_round_trip(capsys: pytest.CaptureFixture[str]) -> None:
    run(capsys, "run", REFUND, "--example", "T-90104")
    code, out, _ = run(
        capsys, "ops", "pause", "T-90104", "--as", "ops-1", "--role", "payments_ops", "--json"
    )
    assert (code, json.loads(out)["status"]) == (0, "paused")
    code, out, _ = run(
        capsys, "ops", "resume", "T-90104", "--as", "ops-1", "--role", "payments_ops", "--json"
    )
    assert (code, json.loads(out)["status"]) == (0, "waiting")


def _refund(tmp_path: Path, capsys: pytest.CaptureFixture[str], ticket: str, amount: float) -> str:
    """A double-charge refund of ``amount`` on order LK-512877, waiting for its decision."""
    given = tmp_path / f"{ticket}.json"
    data = {"ticket": ticket, "order": "LK-512877", "currency": "CAD", "reason": "RFD-DOUBLE"}
    given.write_text(json.dumps({**data, "amount": amount}))
    world = tmp_path / "world.json"
    world.write_text(
        json.dumps({"orders": [{"order": "LK-512877", "paid": 300, "currency": "CAD"}]})
    )
    code, out, err = run(
        capsys, "run", REFUND, "--input", str(given), "--world", str(world), "--json"
    )
    assert code == 0, err
    return str(json.loads(out)["run"])


def test_the_queue_shows_both_expiries_each_roles_verdict_and_the_earlier_refund_of_the_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    earlier = _refund(tmp_path, capsys, "T-90602", 45.95)
    assert run(capsys, "approve", "T-90602", "--as", "agent-7", "--role", "agent")[0] == 0
    at(monkeypatch, 600)
    waiting = _refund(tmp_path, capsys, "T-90603", 145.00)
    at(monkeypatch, 600 + 72 * 60)  # 1h 12m later

    code, out, err = run(capsys, "queue")

    assert code == 0, err
    lines = out.splitlines()
    digest = lines[2].split()[-1]
    receipt = lines[-1].split("refund_id=")[1].split()[0]
    assert lines == [
        f"{waiting} · refund T-90603 · proposed · waiting 72 min",
        "  decide:   refund_approval: request_refund LK-512877 145 CAD RFD-DOUBLE",
        f"  digest:   {digest}",
        "  pause:    expires 2030-03-20 17:56:40Z (in 2d 22h)",
        "  approval: given now, expires 2030-03-18 19:08:40Z (in 24h 0m)",
        "  agent:     may not approve: the guard `input.amount <= 100.0 || approval.role == "
        "'team_lead'` refuses agent (input.amount is 145)",
        f"  team_lead: may approve: ratchet approve {waiting} --as NAME --role team_lead",
        "  related: 1 other run(s) with input.order LK-512877",
        f"    {earlier} · T-90602 · refunded (done) · started 2030-03-17 17:46:40Z",
        "      request_refund done · order=LK-512877 amount=45.95 currency=CAD reason=RFD-DOUBLE"
        f" · receipt refund_id={receipt} amount=45.95 currency=CAD",
    ]

    code, out, _ = run(capsys, "queue", "--as", "lee", "--role", "agent", "--json")
    listed = json.loads(out)
    assert listed["needs_person"] == []
    [asked] = listed["decisions"]
    assert asked["verdicts"] == [
        {
            "role": "agent",
            "may_approve": False,
            "reason": "the guard `input.amount <= 100.0 || approval.role == 'team_lead'` "
            "refuses agent (input.amount is 145)",
        }
    ]
    assert asked["pause_expires_at"] == NOW + 600 + 72 * 3600
    assert asked["approval_expires_at"] == NOW + 600 + 72 * 60 + 24 * 3600
    [other] = asked["evidence"]["related_runs"]["runs"]
    assert other["run"] == earlier
    assert [op["receipt"]["refund_id"] for op in other["effects"]] == [receipt]
    code, _, err = run(capsys, "approve", waiting, "--as", "lee", "--role", "agent")
    assert code == 1
    assert "does not hold for role 'agent'" in err  # as the verdict said


def test_an_empty_queue_says_so_and_its_json_has_both_lists(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run(capsys, "queue") == (0, "", "nobody is needed: the queue is empty\n")
    code, out, _ = run(capsys, "queue", "--json")
    assert (code, json.loads(out)) == (0, {"decisions": [], "needs_person": []})
