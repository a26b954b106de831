"""The refund over real HTTP: the shipped binding specs/http.toml, the HTTP adapter, a real socket
and the practice world served by its HTTP server (as `ratchet practice serve` does), driven by the
`ratchet` commands. The examples' faults are served over the wire, so a lost reply is a reset
connection, and the reconcile is a GET of the provider's operation record.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ratchet_runner.adapters.practice import PracticeWorld
from ratchet_runner.adapters.practice_http import PracticeServer
from tests.conftest import ROOT
from tests.conftest import run_cli as run

REFUND = str(ROOT / "specs" / "refund.yaml")
SHIPPED = ROOT / "specs" / "http.toml"


@pytest.fixture
def binding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The shipped binding, pointed at a practice server on a free port over this test's home."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("RATCHET_HOME", str(home))
    for name in ("RATCHET_DB", "RATCHET_BINDINGS", "RATCHET_NOW"):
        monkeypatch.delenv(name, raising=False)
    server = PracticeServer(PracticeWorld(home / "practice.db"), "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    text = SHIPPED.read_text(encoding="utf-8")
    assert "http://127.0.0.1:8765/" in text  # the address `ratchet practice serve` listens on
    path = tmp_path / "http.toml"
    path.write_text(text.replace("http://127.0.0.1:8765/", f"{server.url}/"), encoding="utf-8")
    try:
        yield str(path)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def _changes(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    code, out, _ = run(capsys, "effects", "--json")
    assert code == 0
    changes: list[dict[str, Any]] = json.loads(out)["changes"]
    return changes


def test_the_shipped_binding_validates_against_the_refund_spec(
    binding: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "validate", REFUND, "--bindings", binding)
    assert code == 0, err


@pytest.mark.parametrize(("example", "amount"), [("T-90104", 9.95), ("T-90603", 45.95)])
def test_a_refund_whose_reply_is_lost_over_http_is_reconciled_and_made_once(
    binding: str, capsys: pytest.CaptureFixture[str], example: str, amount: float
) -> None:
    code, _, err = run(capsys, "run", REFUND, "--example", example, "--bindings", binding)
    assert code == 0, err
    code, out, err = run(
        capsys, "approve", example, "--as", "agent-7", "--role", "agent", "--bindings", binding
    )
    assert code == 0, err
    assert "refunded (done)" in out
    code, out, _ = run(capsys, "trace", example)
    assert "Connection reset" in out  # the reply was lost on the wire, after the refund was made
    assert "reconcile found" in out
    changes = _changes(capsys)
    assert [(c["operation"], c["args"]["amount"]) for c in changes] == [("refund", amount)]
