"""RATCHET_NOW on the command line: honoured only on a practice store, and never silently.

The default store under RATCHET_HOME is created as a practice store; a store named by --db or
RATCHET_DB is not, unless ``ratchet reset --all --practice`` declared it one (or, for tests,
RATCHET_ALLOW_CLOCK_OVERRIDE=1). Under the override every event records the real time beside
the one the clock claimed, and ``ratchet trace`` shows both.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ratchet_runner.store.store import Store
from tests.conftest import PRACTICE_BINDING, ROOT
from tests.conftest import run_cli as run

REFUND = str(ROOT / "specs" / "refund.yaml")
START = "2030-01-01T00:00:00Z"
START_EPOCH = datetime(2030, 1, 1, tzinfo=UTC).timestamp()


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RATCHET_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RATCHET_DB", raising=False)
    monkeypatch.delenv("RATCHET_NOW", raising=False)
    monkeypatch.delenv("RATCHET_ALLOW_CLOCK_OVERRIDE", raising=False)
    return tmp_path / "home"


@pytest.fixture
def named_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A store named by RATCHET_DB: not a practice store (its adapters bound to the practice
    world, which such a store needs)."""
    url = f"sqlite:///{tmp_path / 'real.db'}"
    monkeypatch.setenv("RATCHET_DB", url)
    monkeypatch.setenv("RATCHET_BINDINGS", str(PRACTICE_BINDING))
    return url


def test_ratchet_now_is_refused_on_a_store_that_is_not_a_practice_store(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, named_store: str
) -> None:
    assert run(capsys, "run", REFUND, "--example", "T-90104")[0] == 0
    monkeypatch.setenv("RATCHET_NOW", "2099-01-01T00:00:00Z")  # back-dating, or forward
    for args in (
        ("approve", "T-90104", "--as", "agent-7", "--role", "agent"),
        ("resume", "T-90104"),
        ("worker", "--once"),
        ("run", REFUND, "--example", "T-90603"),
        ("status",),
        ("runs", "--stuck"),
    ):
        code, out, err = run(capsys, *args)
        assert code == 1, args
        assert "RATCHET_NOW is set, but the store at" in err
        assert "not a practice store" in err
        assert "Traceback" not in out + err
    store = Store(named_store)
    try:
        (only,) = store.list_runs()
        assert (only.business_key, only.state, only.status) == ("T-90104", "proposed", "waiting")
        assert store.approvals(only.id) == []
        assert [t.outcome for t in store.timers(only.id)] == [None]
    finally:
        store.close()


def test_the_allow_flag_lets_a_test_set_the_clock_on_any_store(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, named_store: str
) -> None:
    monkeypatch.setenv("RATCHET_NOW", START)
    monkeypatch.setenv("RATCHET_ALLOW_CLOCK_OVERRIDE", "1")
    code, out, _ = run(capsys, "run", REFUND, "--example", "T-90104", "--json")
    assert code == 0
    code, out, _ = run(capsys, "trace", "T-90104", "--json")
    created = json.loads(out)["events"][0]
    assert (created["kind"], created["at"]) == ("created", START_EPOCH)
    assert "real_at" in created


def test_on_the_default_practice_store_ratchet_now_applies_and_events_record_the_real_time(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RATCHET_NOW", START)
    assert run(capsys, "run", REFUND, "--example", "T-90104")[0] == 0
    monkeypatch.setenv("RATCHET_NOW", str(START_EPOCH + 72 * 3600 + 1))  # past the pause
    code, out, err = run(capsys, "approve", "T-90104", "--as", "agent-7", "--role", "agent")
    assert code == 1
    assert "expired at 2030-01-04 00:00:00Z" in err
    assert "moved by 'expired' to 'lapsed'" in err
    assert "Traceback" not in out + err

    code, out, _ = run(capsys, "trace", "T-90104", "--json")
    trace = json.loads(out)
    assert trace["state"] == "lapsed"
    committed = [e for e in trace["events"] if e["kind"] not in ("leased", "rescued")]
    assert {"created", "paused", "decision_refused", "timer", "moved"} <= {
        e["kind"] for e in committed
    }
    for event in committed:
        assert event["at"] >= START_EPOCH  # the time the clock claimed ...
        assert abs(event["real_at"] - time.time()) < 600  # ... and the real one beside it
    code, out, _ = run(capsys, "trace", "T-90104")
    assert "[clock set to 2030-01-01 00:00:00Z; really " in out
    assert "approve by agent-7 (agent) came too late: the pause expired at" in out


def test_reset_all_practice_declares_a_named_store_a_practice_store(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, named_store: str
) -> None:
    code, _, err = run(capsys, "reset", "--practice")
    assert code == 2
    assert "give it with --all" in err
    code, out, _ = run(capsys, "reset", "--all", "--practice", "--json")
    assert (code, json.loads(out)) == (
        0,
        {"practice_world": "reset", "store": "emptied", "practice_store": True},
    )
    monkeypatch.setenv("RATCHET_NOW", START)
    code, out, err = run(capsys, "run", REFUND, "--example", "T-90104", "--json")
    assert code == 0, err
    code, out, _ = run(capsys, "trace", "T-90104", "--json")
    assert json.loads(out)["events"][0]["at"] == START_EPOCH
    # emptied again without --practice, it stays what it was declared
    assert run(capsys, "reset", "--all")[0] == 0
    assert run(capsys, "run", REFUND, "--example", "T-90104")[0] == 0


def test_a_ratchet_now_that_is_not_a_time_is_a_usage_error_not_a_traceback(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RATCHET_NOW", "next tuesday")
    code, out, err = run(capsys, "run", REFUND, "--example", "T-90104")
    assert code == 1
    assert "neither epoch seconds nor an ISO 8601 time" in err
    assert "Traceback" not in out + err
