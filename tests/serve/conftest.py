"""What the service's tests share: a home of their own, three operators, and T-90104 waiting."""

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
