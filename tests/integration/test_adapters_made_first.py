"""An adapter that cannot be made (its binding names a secret that is not set) refuses the command
before it writes anything: `ratchet run` creates no run, `ratchet approve` spends no decision.
Before, the run was created and the approval recorded, and the step after it failed and parked
the run for a person."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.conftest import run_cli as run

REFUND = str(ROOT / "specs" / "refund.yaml")
BINDING = """\
name = "staging"

[adapters.payments]
implementation = "http"
base_url = "http://127.0.0.1:9/payments"
dedupe = true

[adapters.payments.auth]
type = "bearer"
token_env = "PAYMENTS_TOKEN_FOR_TEST"

[adapters.payments.operations.refund]
path = "/refund"
receipt_field = "refund_id"

[adapters.payments.lookups.lookup_refund]
by = "endpoint"
path = "/operations/{operation_id}"
receipt_field = "refund_id"
"""


@pytest.fixture
def binding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("RATCHET_HOME", str(tmp_path / "home"))
    for name in ("RATCHET_DB", "RATCHET_BINDINGS", "RATCHET_NOW", "PAYMENTS_TOKEN_FOR_TEST"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "staging.toml"
    path.write_text(BINDING, encoding="utf-8")
    return str(path)


def _runs(capsys: pytest.CaptureFixture[str]) -> list[dict[str, object]]:
    code, out, _ = run(capsys, "runs", "--json")
    assert code == 0
    runs: list[dict[str, object]] = json.loads(out)
    return runs


def test_run_with_a_secret_not_set_is_refused_before_the_run_is_created(
    capsys: pytest.CaptureFixture[str], binding: str
) -> None:
    code, out, err = run(capsys, "run", REFUND, "--example", "T-90104", "--bindings", binding)
    assert code == 1
    assert out == ""
    assert "R203" in err
    assert "PAYMENTS_TOKEN_FOR_TEST, which is not set" in err
    assert _runs(capsys) == []


def test_approve_with_a_secret_not_set_spends_no_decision_and_leaves_the_run_waiting(
    capsys: pytest.CaptureFixture[str], binding: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PAYMENTS_TOKEN_FOR_TEST", "sk_test_made_first")
    code, _, _ = run(capsys, "run", REFUND, "--example", "T-90104", "--bindings", binding)
    assert code == 0
    monkeypatch.delenv("PAYMENTS_TOKEN_FOR_TEST")
    approve = ("approve", "T-90104", "--as", "agent-7", "--role", "agent", "--bindings", binding)
    code, _, err = run(capsys, *approve)
    assert code == 1
    assert "R203" in err
    [waiting] = _runs(capsys)
    assert (waiting["state"], waiting["status"]) == ("proposed", "waiting")
    code, out, _ = run(capsys, "trace", "T-90104", "--json")
    kinds = [event["kind"] for event in json.loads(out)["events"]]
    assert "approved" not in kinds
    assert "step_failed" not in kinds
