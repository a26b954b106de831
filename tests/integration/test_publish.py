"""Publishing a workflow's versions: ``ratchet versions`` lists them with their open runs, and
``--start-new-on`` chooses the version new runs start on (a bad version rolled back for new runs
in one command), on SQLite and on PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ratchet_runner.errors import UsageError
from ratchet_runner.spec.model import Spec
from ratchet_runner.spec.validate import load_spec_text
from ratchet_runner.store.store import Store
from tests.conftest import MakeRunner, run_cli, spec_and_text


def _version(text: str, number: int, *, policy: str | None = None) -> tuple[Spec, str]:
    """The refund spec's text as version ``number`` (and, given, ``on_version_change``)."""
    changed = text.replace("spec_version: 1", f"spec_version: {number}")
    if policy is not None:
        changed = changed.replace("on_version_change: pin", f"on_version_change: {policy}")
    return load_spec_text(changed, f"refund-v{number}.yaml"), changed


def _input(spec: Spec, ticket: str) -> dict[str, object]:
    return {**spec.examples["T-90104"].input, "ticket": ticket}


def test_new_runs_start_on_the_version_chosen_and_the_version_given_is_stored(
    make_runner: MakeRunner, store: Store
) -> None:
    one, one_text = spec_and_text("refund")
    two, two_text = _version(one_text, 2)
    runner = make_runner()
    first, _ = runner.start(one, one_text, _input(one, "T-1"))
    second, _ = runner.start(two, two_text, _input(two, "T-2"))
    assert (first.spec_digest, second.spec_digest) == (one.digest, two.digest)
    assert store.latest_spec("refund") == (two.digest, 2)

    assert store.publish("refund", 1, "ops-lead", 10.0) == (one.digest, 1)
    third, _ = make_runner().start(two, two_text, _input(two, "T-3"))
    assert third.spec_digest == one.digest  # the version chosen, though version 2 was given
    assert store.latest_spec("refund") == (one.digest, 1)  # older runs move on to it, no further
    counts = {v.spec_version: n for v, n in store.workflow_versions("refund")}
    assert counts == {2: 1, 1: 2}

    assert store.publish("refund", None, "ops-lead", 11.0) is None
    fourth, _ = make_runner().start(two, two_text, _input(two, "T-4"))
    assert fourth.spec_digest == two.digest
    assert store.published("refund") is None


def test_a_version_given_while_another_is_chosen_is_stored_to_be_chosen_later(
    make_runner: MakeRunner, store: Store
) -> None:
    one, one_text = spec_and_text("refund")
    two, two_text = _version(one_text, 2)
    make_runner().start(one, one_text, _input(one, "T-1"))
    store.publish("refund", 1, "ops-lead", 10.0)
    run, _ = make_runner().start(two, two_text, _input(two, "T-2"))
    assert run.spec_digest == one.digest
    assert [v.spec_version for v, _ in store.workflow_versions("refund")] == [2, 1]
    assert store.publish("refund", 2, "ops-lead", 12.0) == (two.digest, 2)


def test_choosing_a_version_not_stored_is_refused_and_keeps_the_choice_before(
    make_runner: MakeRunner, store: Store
) -> None:
    one, one_text = spec_and_text("refund")
    make_runner().start(one, one_text, _input(one, "T-1"))
    store.publish("refund", 1, "ops-lead", 10.0)
    with pytest.raises(UsageError, match=r"no stored version 7 \(stored: 1\)"):
        store.publish("refund", 7, "ops-lead", 11.0)
    assert store.published("refund") == (one.digest, 1)
    with pytest.raises(UsageError, match="no stored version 1 \\(stored: none\\)"):
        store.publish("nosuch", 1, "ops-lead", 11.0)


def test_a_run_under_revalidate_moves_on_to_the_version_chosen_not_to_a_newer_one(
    make_runner: MakeRunner, store: Store
) -> None:
    _, text = spec_and_text("refund")
    one, one_text = _version(text, 1, policy="revalidate")
    two, two_text = _version(text, 2, policy="revalidate")
    three, three_text = _version(text, 3, policy="revalidate")
    runner = make_runner()
    run, _ = runner.start(one, one_text, _input(one, "T-1"))
    runner.start(two, two_text, _input(two, "T-2"))
    store.publish("refund", 2, "ops-lead", 10.0)
    make_runner().start(three, three_text, _input(three, "T-3"))  # stored, started on 2
    from ratchet_runner.engine.versions import migrate

    moved = migrate(make_runner(), store.get_run(run.id))
    assert moved.spec_digest == two.digest


def test_ratchet_versions_lists_chooses_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RATCHET_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RATCHET_DB", raising=False)
    one, one_text = spec_and_text("refund")
    _, two_text = _version(one_text, 2)
    v1, v2 = tmp_path / "refund.yaml", tmp_path / "refund-v2.yaml"
    v1.write_text(one_text, encoding="utf-8")
    v2.write_text(two_text, encoding="utf-8")

    def data(ticket: str) -> str:
        path = tmp_path / f"{ticket}.json"
        path.write_text(json.dumps(_input(one, ticket)), encoding="utf-8")
        return str(path)

    assert run_cli(capsys, "run", str(v1), "--input", data("T-1"), "--leave-to-workers")[0] == 0
    assert run_cli(capsys, "run", str(v2), "--input", data("T-2"), "--leave-to-workers")[0] == 0

    code, out, _ = run_cli(capsys, "versions", "refund")
    assert code == 0
    first = "refund: new runs start on the version they are given (none chosen); the newest is 2"
    assert out.splitlines()[0] == first
    assert "version 1 still has 1 open run" in out

    code, _, err = run_cli(capsys, "versions", "refund", "--start-new-on", "1")
    assert code == 2
    assert "give --as NAME" in err
    code, out, err = run_cli(capsys, "versions", "refund", "--start-new-on", "1", "--as", "lead")
    assert code == 0
    assert out.splitlines()[0] == "refund: new runs start on version 1 (chosen by an operator)"
    assert "version 2 still has 1 open run" in out

    code, out, err = run_cli(
        capsys, "run", str(v2), "--input", data("T-3"), "--leave-to-workers", "--json"
    )
    assert code == 0, err
    assert "start on version 1, the version an operator set" in err
    code, out, _ = run_cli(capsys, "versions", "refund", "--json")
    shown = json.loads(out)
    assert shown["start_new_on"] == 1
    assert shown["chosen"] is True
    assert [(v["version"], v["open_runs"]) for v in shown["versions"]] == [(2, 1), (1, 2)]

    code, _, err = run_cli(capsys, "versions", "refund", "--start-new-on", "9", "--as", "lead")
    assert code == 1
    assert "R200 workflow 'refund' has no stored version 9" in err
    code, _, err = run_cli(capsys, "versions", "nosuch")
    assert code == 1
    assert "no version of workflow 'nosuch' is stored" in err


def test_starting_work_a_run_already_does_finds_it_whatever_version_is_chosen(
    make_runner: MakeRunner, store: Store
) -> None:
    """Starting the same piece of work twice is no error, also once another version is chosen
    for new runs, even one whose input schema the input does not fit."""
    one, one_text = spec_and_text("refund")
    first, _ = make_runner().start(one, one_text, _input(one, "T-1"))
    strict = one_text.replace("spec_version: 1", "spec_version: 2").replace(
        'pattern: "^T-[0-9]+$"', 'pattern: "^T-9[0-9]+$"', 1
    )
    assert strict.count("^T-9[0-9]+$") == 1  # version 2 takes tickets T-9... only
    two = load_spec_text(strict, "refund-v2.yaml")
    make_runner().start(two, strict, _input(one, "T-92"))
    store.publish("refund", 2, "ops-lead", 10.0)
    again, created = make_runner().start(one, one_text, _input(one, "T-1"))
    assert (again.id, created) == (first.id, False)
