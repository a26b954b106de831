"""What the how-tos rely on, command by command (the pages themselves are followed literally by
tests/integration/test_docs_commands.py):

* ``run --fault`` reaches the effect's next call, before a fault the example brings for the same
  call, and says so when the run stopped before any call met it (it waits for the next one, in
  whichever run makes it);
* ``reset`` numbers the practice world's changes from 1 again;
* a business key that names no run, but starts the keys of some (a returns ticket,
  ``T-90604/return_label``), is refused with those keys named;
* ``check`` of a spec with no ``examples:`` says that, not that an ``--example`` nobody gave is
  unknown.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.conftest import run_cli as run

REFUND = str(ROOT / "specs" / "refund.yaml")
RETURNS = str(ROOT / "specs" / "returns.yaml")
TUTORIAL_SPEC = str(ROOT / "docs" / "tutorial" / "return_label.yaml")


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RATCHET_HOME", str(tmp_path / "home"))
    for name in ("RATCHET_DB", "RATCHET_BINDINGS", "RATCHET_NOW"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "home"


def _events(capsys: pytest.CaptureFixture[str], run_key: str) -> list[dict[str, object]]:
    code, out, err = run(capsys, "trace", run_key, "--json")
    assert code == 0, err
    events: list[dict[str, object]] = json.loads(out)["events"]
    return events


def test_a_fault_given_to_run_meets_the_next_call_before_the_examples_own(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # T-90603's world loses the reply to the first refund call; the fault asked for comes first.
    code, _, err = run(
        capsys, "run", REFUND, "--example", "T-90603", "--fault", "request_refund:unavailable"
    )
    assert code == 0, err
    code, _, err = run(capsys, "approve", "T-90603", "--as", "agent-7", "--role", "agent")
    assert code == 0, err
    kinds = [event["kind"] for event in _events(capsys, "T-90603")]
    assert "unavailable" in kinds
    assert "timeout" not in kinds  # the example's fault was for call 1, which met the other
    code, out, _ = run(capsys, "effects", "--json")
    assert len(json.loads(out)["changes"]) == 1


def test_run_says_when_a_fault_it_was_given_has_met_no_call_yet(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = run(
        capsys, "run", REFUND, "--example", "T-90104", "--fault", "request_refund:unavailable"
    )
    assert code == 0
    assert (
        "note: --fault request_refund:unavailable has met no call yet: it waits for "
        "request_refund's next call, in whichever run makes it (ratchet reset disarms it)"
    ) in err
    code, _, err = run(
        capsys, "run", RETURNS, "--example", "T-90604", "--fault", "create_label:refuse"
    )
    assert code == 0
    assert "has met no call yet" not in err  # the run made its call, which met the fault


def test_reset_numbers_the_practice_worlds_changes_from_one_again(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for _ in range(2):
        assert run(capsys, "run", RETURNS, "--example", "T-90604")[0] == 0
        _, out, _ = run(capsys, "effects", "--json")
        assert [change["seq"] for change in json.loads(out)["changes"]] == [1]
        _, out, _ = run(capsys, "effects")
        assert out.startswith("#1 ")
        assert run(capsys, "reset", "--all")[0] == 0


def test_a_ticket_that_starts_business_keys_is_refused_with_the_keys_it_starts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run(capsys, "run", RETURNS, "--example", "T-90604")[0] == 0
    assert run(capsys, "run", RETURNS, "--example", "T-90605")[0] == 0
    code, _, err = run(capsys, "trace", "T-90604")
    assert code == 1
    assert err.strip() == (
        "ratchet: R302 no run has the ID or business key 'T-90604'; business keys that start "
        "with it: 'T-90604/return_label' (returns)"
    )
    code, _, err = run(capsys, "trace", "T-906")
    assert "'T-90604/return_label' (returns), 'T-90605/reship' (returns)" in err
    code, _, err = run(capsys, "trace", "T-1%")  # LIKE's wildcards are not wildcards here
    assert err.strip() == "ratchet: R302 no run has the ID or business key 'T-1%'"
    code, out, _ = run(capsys, "trace", "T-90604/return_label")
    assert code == 0
    assert "labelled (done)" in out


def test_check_of_a_spec_without_examples_says_it_has_none(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = run(capsys, "check", TUTORIAL_SPEC)
    assert code == 2
    assert f"R206 Invalid value for SPEC: {TUTORIAL_SPEC} has no examples" in err
    assert "--example" not in err
