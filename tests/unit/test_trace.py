"""What `ratchet trace` says: which unknown outcome it was, the row a run really followed, and
each undo registered where it was written (with the pending record, before the call)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ratchet_runner.review.trace import describe, title
from ratchet_runner.store.records import EventRecord
from tests.conftest import ROOT
from tests.conftest import run_cli as run


def _event(kind: str, **data: object) -> EventRecord:
    return EventRecord(id=1, run_id="run_x", version=3, kind=kind, data=dict(data), at=0.0)


@pytest.mark.parametrize(
    ("reason", "said"),
    [
        ("timeout: no reply", "timeout"),
        ("timeout: the reply was lost", "timeout"),
        (
            "the request may have reached the provider: ReadTimeout: (the call's deadline: 10 s)",
            "timeout",
        ),
        ("malformed reply: '<html>502 Bad Gateway</html>'", "malformed reply"),
        ("malformed JSON in a success reply: 200 {", "malformed reply"),
        ("a success reply without the receipt ('refund_id' at ''): 200 {}", "malformed reply"),
        ("the request may have reached the provider: ReadError: Connection reset", "reply lost"),
        ("the provider's answer does not say whether it was made: 502", "unclear reply"),
        ("a reply larger than 1048576 bytes was not read", "reply too large"),
    ],
)
def test_an_unknown_outcome_is_titled_by_what_happened(reason: str, said: str) -> None:
    event = _event("timeout", reason=reason, operation_id="op1")
    assert title(event) == said
    assert describe(event) == f"{reason} · outcome unknown"


def test_a_move_by_another_row_than_the_event_says_which_row_was_followed() -> None:
    moved = _event("moved", **{"from": "labelling", "event": "exhausted", "to": "needs_person"})
    assert describe(moved) == "labelling --exhausted--> needs_person"
    instead = _event(
        "moved",
        **{
            "from": "labelling",
            "event": "exhausted",
            "to": "needs_person",
            "instead_of": "unknown",
        },
    )
    assert describe(instead) == (
        "labelling --exhausted--> needs_person (labelling has no row for unknown: its exhausted "
        "row was followed)"
    )


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RATCHET_HOME", str(tmp_path / "home"))
    for name in ("RATCHET_DB", "RATCHET_BINDINGS"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def _trace(capsys: pytest.CaptureFixture[str], key: str) -> list[str]:
    code, out, _ = run(capsys, "trace", key)
    assert code == 0
    return [" ".join(line.split()) for line in out.splitlines()]


def test_an_unknown_outcome_in_a_state_with_no_unknown_row_names_the_exhausted_row(
    capsys: pytest.CaptureFixture[str], home: Path
) -> None:
    faults = ("--fault", "create_label:timeout_after_write", "--fault", "create_label:lookup_fails")
    spec = str(ROOT / "specs" / "returns.yaml")
    code, _, _ = run(capsys, "run", spec, "--example", "T-90604", *faults)
    assert code == 0
    lines = _trace(capsys, "T-90604/return_label")
    assert (
        "v5 moved labelling --exhausted--> needs_person (labelling has no row for unknown: its "
        "exhausted row was followed)"
    ) in lines
    assert not any("--unknown-->" in line for line in lines)


def test_an_undo_is_shown_registered_with_its_pending_record_before_the_call(
    capsys: pytest.CaptureFixture[str], home: Path
) -> None:
    code, _, _ = run(capsys, "run", str(ROOT / "specs" / "booking.yaml"), "--example", "happy")
    assert code == 0
    code, out, _ = run(capsys, "trace", "TRIP-1001", "--json")
    kinds = [event["kind"] for event in json.loads(out)["events"]]
    pending = [i for i, kind in enumerate(kinds) if kind == "pending"]
    assert len(pending) == 2  # the two holds (the confirmation waits for its approval)
    for i in pending:  # each hold registers its release before it is sent
        assert kinds[i : i + 3] == ["pending", "compensation_registered", "call"]
    text = _trace(capsys, "TRIP-1001")
    registered = next(n for n, line in enumerate(text) if "undo registered" in line)
    assert "pending" in text[registered - 1]
    assert " call " in text[registered + 1]
