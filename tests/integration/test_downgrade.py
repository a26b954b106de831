"""A subscription downgrade end to end through the command line: a prorated refund, a plan change
and an e-mail on the practice world's generic service, and, when the plan change is refused, the
refund charged back as a compensation — exactly once, also when its reply is lost or the process
dies after the charge was made."""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import RATCHET, ROOT, run_cli

SPEC = str(ROOT / "tests" / "fixtures" / "downgrade.yaml")


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RATCHET_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RATCHET_DB", raising=False)
    return tmp_path / "home"


def ratchet(capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    code, out, err = run_cli(capsys, *args, "--json")
    assert code == 0, err
    return json.loads(out)


def world(capsys: pytest.CaptureFixture[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    shown = ratchet(capsys, "effects")
    return shown["changes"], shown["calls"]


def sent(calls: list[dict[str, Any]], effect: str) -> list[str]:
    """The outcomes of ``effect``'s calls, lookups included."""
    return [c["outcome"] for c in calls if c["effect"] == effect]


def test_the_validator_passes_the_downgrade_spec_strictly(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = run_cli(capsys, "validate", "--strict", SPEC)
    assert code == 0, err


def test_a_downgrade_refunds_changes_the_plan_and_sends_the_e_mail_once_each(
    capsys: pytest.CaptureFixture[str],
) -> None:
    run = ratchet(capsys, "run", SPEC, "--example", "happy")
    assert (run["state"], run["status"]) == ("downgraded", "done")
    changes, _ = world(capsys)
    assert [(c["service"], c["operation"]) for c in changes] == [
        ("payments", "refund"),
        ("service", "change_plan"),
        ("service", "send_email"),
    ]
    refund, plan, mail = (c["result"] for c in changes)
    assert refund["amount"] == 12.5
    assert plan == {"change_plan_id": plan["change_plan_id"], "operation": "change_plan"}
    assert mail["send_email_id"].startswith("send_email_")
    assert changes[1]["args"] == {"account": "ACC-1001", "plan": "basic"}


def test_a_refused_plan_change_charges_the_refund_back_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    run = ratchet(capsys, "run", SPEC, "--example", "plan_refused")
    assert (run["state"], run["status"]) == ("charged_back", "done")
    changes, calls = world(capsys)
    assert Counter(c["operation"] for c in changes) == {"refund": 1, "charge": 1}
    refund, charge = changes
    assert charge["args"] == {
        "order": "SUB-7002",
        "amount": 12.5,
        "currency": "CAD",
        "reason": f"charge-back of {refund['result']['refund_id']}",
    }
    assert sent(calls, "change_plan") == ["refused"]
    assert sent(calls, "charge_back") == ["done"]


def test_a_charge_back_whose_reply_is_lost_is_reconciled_not_charged_again(
    capsys: pytest.CaptureFixture[str],
) -> None:
    run = ratchet(capsys, "run", SPEC, "--example", "charge_back_reply_lost")
    assert (run["state"], run["status"]) == ("charged_back", "done")
    changes, calls = world(capsys)
    assert Counter(c["operation"] for c in changes) == {"refund": 1, "charge": 1}
    assert sent(calls, "charge_back") == ["timeout_after_write", "lookup"]
    events = ratchet(capsys, "trace", "ACC-1003/basic")["events"]
    [done] = [e for e in events if e["kind"] == "done" and e.get("effect") == "charge_back"]
    assert (done["role"], done["via"]) == ("compensation", "reconcile")
    assert done["receipt"] == {"charge_id": changes[1]["result"]["charge_id"]}


@pytest.mark.slow
def test_a_process_killed_after_the_charge_back_was_made_resumes_without_a_second_charge(
    home: Path,
) -> None:
    env = {**os.environ, "RATCHET_HOME": str(home)}
    env.pop("RATCHET_DB", None)

    def ratchet_process(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [RATCHET, *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120
        )

    killed = ratchet_process(
        "run", SPEC, "--example", "plan_refused", "--interrupt", "after-write:charge_back"
    )
    assert killed.returncode == -9, killed.stderr
    assert "interrupted at after-write of charge_back" in killed.stderr
    resumed = ratchet_process("resume", "ACC-1002/basic", "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["state"] == "charged_back"
    shown = json.loads(ratchet_process("effects", "--json").stdout)
    assert Counter(c["operation"] for c in shown["changes"]) == {"refund": 1, "charge": 1}
    charge_calls = [c for c in shown["calls"] if c["effect"] == "charge_back"]
    assert [c["outcome"] for c in charge_calls] == ["done", "lookup"]
