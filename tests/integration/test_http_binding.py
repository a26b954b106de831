"""The shipped specs over real HTTP: the shipped binding specs/http.toml, the HTTP adapter, a real
socket and the practice world served by its HTTP server (as `ratchet practice serve` does), driven
by the `ratchet` commands. The examples' faults are served over the wire, so a lost reply is a
reset connection, and the reconcile is a GET of the provider's operation record. Every example of
refund.yaml, returns.yaml and booking.yaml ends over HTTP as it ends in process, with the same
changes in the practice world, each made once; booking's one lookup per adapter reconciles
operations with different receipt fields (a hold, a release).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ratchet_runner.adapters.practice import PracticeWorld
from ratchet_runner.adapters.practice.http import PracticeServer
from tests.conftest import ROOT
from tests.conftest import run_cli as run

REFUND = str(ROOT / "specs" / "refund.yaml")
RETURNS = str(ROOT / "specs" / "returns.yaml")
BOOKING = str(ROOT / "specs" / "booking.yaml")
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


def test_the_shipped_binding_validates_against_every_shipped_spec(
    binding: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "validate", REFUND, RETURNS, BOOKING, "--bindings", binding)
    assert code == 0, err
    assert "3 file(s) checked: 0 error(s)" in out + err


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


def test_a_request_still_in_progress_over_http_is_an_unknown_outcome_and_one_refund_is_made(
    binding: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The provider commits late (2 s): the first request's connection ends before it commits,
    the lookup finds nothing yet, and a retry with the same key meets the first request still in
    progress (409). That is an unknown outcome, never a refusal: looked up again and retried with
    the same key. However the retries fall against the late commit (done within the budget, or
    the budget spent first and the run left to a person, whose retry looks it up first), one
    refund is made."""
    code, _, err = run(
        capsys,
        *("run", REFUND, "--example", "T-90104", "--bindings", binding),
        *("--fault", "request_refund:commits_late"),
    )
    assert code == 0, err
    code, out, err = run(
        capsys, "approve", "T-90104", "--as", "agent-7", "--role", "agent", "--bindings", binding
    )
    assert code == 0, err
    code, trace, _ = run(capsys, "trace", "T-90104")
    assert "HTTP 409" in trace  # the key's first request was still being processed
    seen = [line for line in trace.splitlines() if "HTTP 409" in line]
    assert all("unclear reply" in line for line in seen)  # unknown, never the row's refused
    if "refunded (done)" not in out:
        assert "needs_person" in out, trace
        time.sleep(2.5)  # the late commit is made by now
        code, out, err = run(
            capsys,
            *("ops", "retry", "T-90104", "--as", "olu", "--role", "payments_ops"),
            *("--bindings", binding),
        )
        assert code == 0, err
        assert "refunded (done)" in out
    changes = _changes(capsys)
    assert [(c["operation"], c["args"]["amount"]) for c in changes] == [("refund", 9.95)]


@dataclass(frozen=True)
class Case:
    """An example run to its end: approved by ``approver`` (name, role) when it waits for
    approval, with ``faults`` added (``--fault``); ``reconcile``: how the lookup after its lost
    reply ends (an event of the trace), if a reply is lost."""

    spec: str
    example: str
    key: str  # the run's business key
    final: str
    approver: tuple[str, str] | None = None
    faults: tuple[str, ...] = ()
    reconcile: str | None = None


AGENT, TRAVEL_AGENT = ("agent-7", "agent"), ("agent-3", "travel_agent")
CASES = {
    "refund T-90104": Case(REFUND, "T-90104", "T-90104", "refunded", AGENT, (), "reconcile_found"),
    "refund T-90603": Case(REFUND, "T-90603", "T-90603", "refunded", AGENT, (), "reconcile_found"),
    "returns T-90604": Case(
        RETURNS, "T-90604", "T-90604/return_label", "labelled", None, (), "reconcile_not_found"
    ),
    "returns T-90605": Case(RETURNS, "T-90605", "T-90605/reship", "needs_person"),
    "booking happy": Case(BOOKING, "happy", "TRIP-1001", "confirmed", TRAVEL_AGENT),
    "booking hotel_refused": Case(BOOKING, "hotel_refused", "TRIP-1002", "released"),
    "booking confirm_refused": Case(
        BOOKING, "confirm_refused", "TRIP-1003", "released", TRAVEL_AGENT
    ),
    # airline's one lookup finds a hold's receipt (hold_id), then a release's (release_id)
    "booking happy, a hold's reply lost": Case(
        BOOKING,
        "happy",
        "TRIP-1001",
        "confirmed",
        TRAVEL_AGENT,
        ("hold_flight:timeout_after_write",),
        "reconcile_found",
    ),
    "booking hotel_refused, a release's reply lost": Case(
        BOOKING,
        "hotel_refused",
        "TRIP-1002",
        "released",
        None,
        ("release_flight:timeout_after_write",),
        "reconcile_found",
    ),
}


def _play(
    capsys: pytest.CaptureFixture[str], case: Case, *bindings: str
) -> tuple[str, list[dict[str, Any]], dict[str, Any]]:
    """Run ``case`` to its end: its final state, the practice world's changes (without their
    time) and its trace."""
    faults = [arg for fault in case.faults for arg in ("--fault", fault)]
    code, out, err = run(
        capsys, "run", case.spec, "--example", case.example, *faults, *bindings, "--json"
    )
    assert code == 0, err
    state = json.loads(out)["state"]
    if case.approver is not None:
        assert state != case.final
        name, role = case.approver
        code, out, err = run(
            capsys, "approve", case.key, "--as", name, "--role", role, *bindings, "--json"
        )
        assert code == 0, err
        state = json.loads(out)["state"]
    code, out, err = run(capsys, "trace", case.key, "--json")
    assert code == 0, err
    changes = [{k: v for k, v in c.items() if k != "at"} for c in _changes(capsys)]
    return state, changes, json.loads(out)


def _reconciled(case: Case, trace: dict[str, Any]) -> bool:
    """Whether the run's lookups were as ``case`` says: its lost reply's reconcile, or none."""
    events = [event["kind"] for event in trace["events"]]
    return case.reconcile in events if case.reconcile else "timeout" not in events


@pytest.mark.parametrize("case", CASES.values(), ids=list(CASES))
def test_every_example_ends_over_http_as_in_process_with_the_same_changes_each_made_once(
    binding: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    case: Case,
) -> None:
    monkeypatch.setenv("RATCHET_HOME", str(tmp_path / "in-process"))
    state, changes, trace = _play(capsys, case)  # no binding: the spec's own kinds, in process
    assert (state, trace["binding"]["name"]) == (case.final, None)
    assert _reconciled(case, trace)
    monkeypatch.setenv("RATCHET_HOME", str(tmp_path / "home"))  # the served practice world's
    over_http = _play(capsys, case, "--bindings", binding)
    assert over_http[:2] == (state, changes)
    assert over_http[2]["binding"]["name"] == "practice-http"
    assert _reconciled(case, over_http[2])
    made = [c["operation_id"] for c in changes]
    assert len(made) == len(set(made))  # each change once: nothing made twice under one ID
    assert (changes == []) == (case.final == "needs_person")  # a refused reship makes nothing
