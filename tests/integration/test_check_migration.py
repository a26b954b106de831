"""``ratchet check OLD --migrate-to NEW``: a migration's apply and rollback crash-checked.

The refund's migration to version 2 (its key recipe changed, a state added) is checked with real
SIGKILLs at every commit of both phases, and raced at every run it moves: every case ends with
every run on one version, one refund per run, and nothing else broken. A mapping that renames the
waiting state is checked the same way. Two deliberately broken migrations are caught by the same
check: one that writes a run's move without its compare-and-set (a run another process moved
meanwhile is written over: the raced windows), and one that writes it in two commits (a run is
half-migrated when the process dies between them: the commit windows). The booking saga's
migration is checked in ``make soak`` (``bench/soak.py``)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from ratchet_runner.check import migration
from ratchet_runner.check.interrupted import Versions
from ratchet_runner.errors import VersionConflict
from ratchet_runner.evolve import migrate
from ratchet_runner.spec.validate import load_spec
from ratchet_runner.store.records import Change
from ratchet_runner.store.store import Store
from tests.conftest import ROOT, run_cli

REFUND = str(ROOT / "specs" / "refund.yaml")
REFUND_V2 = str(ROOT / "tests" / "fixtures" / "refund-v2.yaml")


def kinds(result: dict) -> set[str]:
    return set(result["violation_kinds"])


def test_the_refunds_migration_survives_sigkill_at_every_window_of_apply_and_rollback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run_cli(capsys, "check", REFUND, "--migrate-to", REFUND_V2, "--kill", "--json")
    report = json.loads(out)
    assert (code, report["violations"]) == (0, 0), err
    results = report["results"]
    # per example and phase: each commit, the end, and each run read to move
    windows = Counter((r["example"], r["phase"], r["window"].split(":")[0]) for r in results)
    for example in ("T-90104", "T-90603"):
        # the new version saved, then the four runs that move (three waiting, one approved)
        assert windows[(example, "apply", "commit-1")] == 1
        assert windows[(example, "apply", "commit-5")] == 1
        assert windows[(example, "apply", "raced")] == 4
        assert windows[(example, "rollback", "commit-4")] == 1
        assert windows[(example, "rollback", "raced")] == 4
        assert windows[(example, "rollback", "after")] == 1
    assert report["cases"] == len(results) == 38
    killed = [r for r in results if r["crashed"]]
    assert len(killed) == 22  # every commit and every end, in a process killed with SIGKILL
    for result in results:
        # nine runs, each carried to its end: one refund each, whatever the crash
        assert (result["runs"], result["changes"]) == (9, 9), result
    # a migration killed before its first commit moved nothing: the one run again moved all four
    assert {r["moved"] for r in results if r["window"] == "commit-1"} == {4}


def test_a_migration_by_a_mapping_survives_the_same_windows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Version 3 renames the waiting state; the mapping moves runs into it, timers kept."""
    text = Path(REFUND).read_text(encoding="utf-8")
    renamed = text.replace("spec_version: 1", "spec_version: 3").replace("proposed", "asked")
    new = tmp_path / "refund-v3.yaml"
    new.write_text(renamed.replace("../ratchet_runner", str(ROOT / "ratchet_runner")), "utf-8")
    mapping = tmp_path / "mapping.yaml"
    mapping.write_text("states: {proposed: asked}\ntimers: keep\n", encoding="utf-8")
    code, out, err = run_cli(
        capsys,
        "check",
        REFUND,
        "--migrate-to",
        str(new),
        "--mapping",
        str(mapping),
        "--example",
        "T-90104",
        "--json",
    )
    report = json.loads(out)
    assert (code, report["violations"]) == (0, 0), err
    assert report["mapping"] == str(mapping)
    # the three waiting runs and the approved one move (mapped), the five past a call stay
    assert max(r["moved"] for r in report["results"]) == 4
    assert all(r["changes"] == 9 for r in report["results"])


def versions_of(old: str, new: str) -> Versions:
    return Versions(
        load_spec(old),
        Path(old).read_text(encoding="utf-8"),
        load_spec(new),
        Path(new).read_text(encoding="utf-8"),
    )


def run_all(kill: bool) -> list[migration.MigrationResult]:
    with migration.MigrationCheck(versions_of(REFUND, REFUND_V2), ["T-90104"]) as checking:
        return list(migration.run_cases(checking, checking.cases(), kill=kill))


def _blind(keeping_operations: bool) -> Callable[[Store, Change], None]:
    """A migration's write without its compare-and-set: whatever version the run is at now,
    another process's move is written over. ``keeping_operations``: the write also lists the
    operations the run lists now (which the store refuses to lose), so that it goes through."""

    def blind(store: Store, change: Change) -> None:
        now = store.get_run(change.run_id)
        change.expected_version = now.version
        change.base = None
        if keeping_operations and change.context is not None:
            change.context = {**change.context, "operations": now.context.get("operations", [])}
        store.commit(change)

    return blind


def test_a_migration_without_compare_and_set_is_caught_where_another_process_raced_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert all(r.ok for r in run_all(kill=False))  # the same cases, as shipped: all pass
    monkeypatch.setattr(migrate, "_write", _blind(keeping_operations=True))
    results = run_all(kill=True)  # the raced windows run in this process, with the blind write
    raced = [r for r in results if r.case.window.startswith("raced:")]
    assert len(raced) == 8
    for result in raced:  # in both phases, each run raced is caught
        assert "stale_migration" in {v.kind.value for v in result.violations}, result.case
        assert "half_migrated" in {v.kind.value for v in result.violations}, result.case
    assert all(r.ok for r in results if not r.case.window.startswith("raced:"))


def test_a_blind_write_that_would_lose_the_runs_operations_is_refused_by_the_store(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The racer's move listed an operation the migration's older read did not: the store
    refuses the blind write as a version conflict (the history and the context name operations
    by their place in the list, so it only ever grows), the migration takes it as a run that
    moved on, and no raced case finds anything wrong."""
    refused: list[str] = []
    blind = _blind(keeping_operations=False)

    def counted(store: Store, change: Change) -> None:
        try:
            blind(store, change)
        except VersionConflict as exc:
            refused.append(str(exc))
            raise

    monkeypatch.setattr(migrate, "_write", counted)
    results = run_all(kill=True)
    raced = [r for r in results if r.case.window.startswith("raced:")]
    assert len(raced) == 8
    assert all(r.ok for r in raced), [r.violations for r in raced if not r.ok]
    assert len(refused) == 8
    assert all("made from an older read of the run; nothing was written" in m for m in refused)


def test_a_migration_written_in_two_commits_is_caught_half_migrated_between_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def in_two(store: Store, change: Change) -> None:
        """The run's version first, the rest (state, context, timers, event) in a second."""
        first = store.commit(
            Change(
                change.run_id, change.expected_version, change.at, spec_digest=change.spec_digest
            )
        )
        change.expected_version, change.base, change.spec_digest = first.version, None, None
        store.commit(change)

    monkeypatch.setattr(migrate, "_write", in_two)
    results = run_all(kill=False)
    half = [r for r in results if "half_migrated" in {v.kind.value for v in r.violations}]
    # every kill between a run's two commits leaves it half-migrated, in both phases
    assert {(r.case.phase, r.case.window) for r in half} >= {
        ("apply", "commit-3"),
        ("apply", "commit-5"),
        ("apply", "commit-7"),
        ("apply", "commit-9"),
        ("rollback", "commit-2"),
        ("rollback", "commit-4"),
        ("rollback", "commit-6"),
        ("rollback", "commit-8"),
    }
    assert all(r.ok for r in results if r.case.window.startswith("raced:"))


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--mapping", REFUND_V2], "goes with --migrate-to"),
        (["--migrate-to", REFUND_V2, "--compare", "naive"], "no --compare with --migrate-to"),
        (["--migrate-to", REFUND], "the same text"),
        (["--migrate-to", str(ROOT / "specs" / "booking.yaml")], "one workflow"),
        (["--migrate-to", REFUND_V2, "--case", "T-90104:apply:commit-99"], "no apply window"),
        (["--migrate-to", REFUND_V2, "--case", "T-1:land:commit-1"], "EXAMPLE:PHASE:WINDOW"),
        (["--migrate-to", REFUND_V2, "--example", "T-1"], "no example 'T-1'"),
    ],
)
def test_what_cannot_be_checked_is_a_usage_error_naming_it(
    args: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(capsys, "check", REFUND, *args)
    assert code == 2, (out, err)
    assert said in err
    assert "Traceback" not in err


def test_a_new_text_under_the_old_version_numbers_is_refused_before_any_case(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = Path(REFUND).read_text(encoding="utf-8").replace("Amount to refund", "How much")
    same = tmp_path / "refund.yaml"
    same.write_text(text.replace("../ratchet_runner", str(ROOT / "ratchet_runner")), "utf-8")
    code, _out, err = run_cli(capsys, "check", REFUND, "--migrate-to", str(same))
    assert code == 2
    assert "R208" in err
    assert "give it a new spec_version" in err


def test_the_table_names_each_case_and_a_failing_one_says_how_to_run_it_again(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(migrate, "_write", _blind(keeping_operations=True))
    code, out, err = run_cli(
        capsys, "check", REFUND, "--migrate-to", REFUND_V2, "--example", "T-90104"
    )
    assert code == 1
    assert out.startswith("migrating refund version 1 → version 2")
    assert "T-90104          apply     commit-1               4 moved · 9 change(s) · ok" in out
    assert "raced:T-90104" in out
    assert "HALF-MIGRATED" in out
    assert "19 case(s): 11 crashed in-process at a commit or the end, 8 raced" in out
    assert f"--migrate-to {REFUND_V2} --case T-90104:apply:raced:T-90104" in err
