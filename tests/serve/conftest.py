"""What the service's tests share: a home of their own, four operators, and T-90104 waiting."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import SPECS
from tests.conftest import run_cli as run
from tests.serve.serving import People

REFUND = SPECS / "refund.yaml"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RATCHET_HOME", str(tmp_path / "home"))
    for name in ("RATCHET_DB", "RATCHET_BINDINGS", "RATCHET_NOW", "RATCHET_SERVE_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path / "home"


@pytest.fixture
def people(tmp_path: Path) -> People:
    return People(tmp_path)


@pytest.fixture
def waiting(capsys: pytest.CaptureFixture[str], home: Path) -> str:
    """The run of T-90104, waiting for an approval of its refund."""
    code, out, err = run(capsys, "run", str(REFUND), "--example", "T-90104", "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["status"] == "waiting"
    return str(summary["run"])


@pytest.fixture
def double_charge(
    capsys: pytest.CaptureFixture[str], home: Path, tmp_path: Path
) -> tuple[str, str]:
    """Order LK-512877 charged twice: T-90602's refund of 45.95 approved by an agent and made,
    then T-90603 asking to refund 145.00 on the same order, above what an agent may approve
    (the guard wants a team lead), waiting. The two runs' IDs, the earlier first."""
    world = tmp_path / "double-charge-world.json"
    world.write_text(
        json.dumps({"orders": [{"order": "LK-512877", "paid": 300, "currency": "CAD"}]})
    )
    made = []
    for ticket, amount in (("T-90602", 45.95), ("T-90603", 145.00)):
        given = tmp_path / f"{ticket}.json"
        data = {"ticket": ticket, "order": "LK-512877", "currency": "CAD", "reason": "RFD-DOUBLE"}
        given.write_text(json.dumps({**data, "amount": amount}))
        seeded = ("--world", str(world)) if ticket == "T-90602" else ()
        code, out, err = run(capsys, "run", str(REFUND), "--input", str(given), *seeded, "--json")
        assert code == 0, err
        made.append(str(json.loads(out)["run"]))
        if ticket == "T-90602":
            code, out, err = run(
                capsys, "approve", ticket, "--as", "agent-7", "--role", "agent", "--json"
            )
            assert (code, json.loads(out)["state"]) == (0, "refunded"), err
    return made[0], made[1]
