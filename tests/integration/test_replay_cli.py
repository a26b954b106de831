"""``ratchet export`` and ``ratchet replay`` as a user and a CI job call them: the golden
histories the repository keeps (tests/fixtures/histories/) replay clean against the shipped
specs, a changed spec fails with each divergence located, the exit statuses and ``--json`` are
as documented, hostile files and bad command lines are refused with codes and no traceback, and
a store is exported and replayed on SQLite and PostgreSQL.

The pytest helper is tested as a project uses it: the reference page's snippet, written into a
project's tests and run by pytest, passes on its golden histories and fails on a changed spec."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ratchet_runner import ReplayResult, assert_replays_clean, replay_histories
from ratchet_runner.adapters.practice import PracticeWorld
from ratchet_runner.clock import FakeClock
from ratchet_runner.engine.deciding import decide
from ratchet_runner.evolve.history import read_histories
from ratchet_runner.store.store import Store
from tests.conftest import ROOT, SPECS, MakeRunner, spec_and_text
from tests.conftest import run_cli as run
from tests.integration.replay_runs import PARCEL, SCENARIOS

GOLDEN = ROOT / "tests" / "fixtures" / "histories"
NEW_KEY = ROOT / "tests" / "fixtures" / "refund-new-key.yaml"
REFUND = str(SPECS / "refund.yaml")


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RATCHET_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RATCHET_DB", raising=False)
    return tmp_path / "home"


@pytest.mark.parametrize("workflow", ["refund", "returns", "booking", "parcel"])
def test_the_golden_histories_kept_in_the_repository_replay_clean_against_their_spec(
    workflow: str,
) -> None:
    """If a change to a shipped spec makes a recorded run go another way, this fails: write
    the histories anew (tests/integration/replay_runs.py says how) only when that is meant."""
    spec = PARCEL if workflow == "parcel" else SPECS / f"{workflow}.yaml"
    results = assert_replays_clean(spec, GOLDEN / f"{workflow}.jsonl")
    assert all(isinstance(r, ReplayResult) and r.clean for r in results)
    assert len(results) == sum(1 for _, w, _, _ in SCENARIOS if w == workflow)


def test_replay_exits_0_when_every_run_replays_clean(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "replay", REFUND, "--histories", str(GOLDEN / "refund.jsonl"))
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 4
    assert all(re.match(r".*refund\.jsonl:\d: run_\w+ \(T-9\d+\): replays clean", x) for x in lines)
    assert err == f"replay: 4 runs replay clean against refund version 1 ({REFUND})\n"


def test_replay_exits_1_with_each_divergence_located_in_the_new_version(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(
        capsys, "replay", str(NEW_KEY), "--histories", str(GOLDEN / "refund.jsonl")
    )
    assert code == 1
    located = re.findall(r"^  (\S+):(\d+):(\d+): (V\d{3}) (.*)$", out, re.M)
    assert [(c, Path(f).name) for f, _, _, c, _ in located] == [
        ("V305", "refund-new-key.yaml"),
        ("V305", "refund-new-key.yaml"),
    ]
    line = int(located[0][1])
    assert "idempotency_key:" in NEW_KEY.read_text().splitlines()[line - 1]
    assert "diverges at event 6 of 12 (pending)" in out
    assert err.endswith(f"replay: 2 of 4 runs diverge from refund version 2 ({NEW_KEY})\n")


def test_replay_json_is_one_document_with_every_verdict(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(
        capsys, "replay", str(NEW_KEY), "--histories", str(GOLDEN / "refund.jsonl"), "--json"
    )
    assert code == 1
    found = json.loads(out)
    assert (found["runs"], found["clean"], found["diverged"]) == (4, 2, 2)
    assert found["spec"]["workflow"] == "refund"
    assert found["spec"]["spec_version"] == 2
    diverged = [r for r in found["results"] if not r["clean"]]
    assert {r["business_key"] for r in diverged} == {"T-90104", "T-90105"}
    first = diverged[0]["divergence"]
    assert (first["code"], first["class"], first["event"], first["kind"]) == (
        "V305",
        "operation ID differs",
        6,
        "pending",
    )
    assert first["file"] == str(NEW_KEY)
    assert first["pointer"] == "/transitions/3/idempotency_key"


def test_replay_runs_a_filter_of_globs_and_statuses(capsys: pytest.CaptureFixture[str]) -> None:
    histories = str(GOLDEN / "refund.jsonl")

    def keys(*args: str) -> list[str]:
        code, out, err = run(capsys, "replay", REFUND, "--histories", histories, "--json", *args)
        assert code == 0, err
        return sorted(r["business_key"] for r in json.loads(out)["results"])

    assert keys("--runs", "T-9010*") == ["T-90104", "T-90105", "T-90106"]
    assert keys("--runs", "T-90603,T-90106") == ["T-90106", "T-90603"]
    assert keys("--runs", "status=done") == ["T-90104", "T-90105", "T-90106", "T-90603"]
    assert keys("--runs", "status=ended,T-90104") == ["T-90104"]
    code, _, err = run(capsys, "replay", REFUND, "--histories", histories, "--runs", "status=open")
    assert code == 1
    assert err == (f"ratchet: R200 no runs matching 'status=open' to replay in {histories}\n")


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["replay", REFUND], "give the runs to replay: --histories FILE or --db URL (one)"),
        (["replay", REFUND, "--histories", "x", "--db", "sqlite://"], "--histories FILE or --db"),
        (["export", "T-1", "--workflow", "refund", "-o", "x"], "name runs, or choose them"),
        (["export", "--json", "-o", "-"], "--json prints a summary on stdout"),
        (["export", "--since", "yesterday", "-o", "x"], "'yesterday' is neither a duration"),
        (["export", "--since", "2030-01-01T00:00:00", "-o", "x"], "a time with its zone"),
        (["export", "--workflow", "refund"], "Missing option '-o' / '--output'"),
        (
            ["replay", REFUND, "--histories", "x", "--runs", "status=flying"],
            "'status=flying': a status is one of running, waiting, done",
        ),
        (["replay", REFUND, "--histories", "x", "--runs", " , "], "an empty filter"),
    ],
)
def test_a_malformed_command_line_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], args: list[str], said: str
) -> None:
    code, out, err = run(capsys, *args)
    assert code == 2
    assert "Error: R206 " in err
    assert said in err
    assert "Traceback" not in out + err


def test_a_hostile_histories_file_is_refused_line_by_line_with_no_traceback(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    good = (GOLDEN / "refund.jsonl").read_text().splitlines()[0]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(f'{good}\n{{"format": "ratchet.run/9"}}\n{good[:40]}\nNaN\n', encoding="utf-8")
    code, out, err = run(capsys, "replay", REFUND, "--histories", str(bad))
    assert code == 1
    assert out == ""
    assert err.splitlines() == [
        f'{bad}:2: V405 format "ratchet.run/9": this Ratchet reads ratchet.run/1',
        f"{bad}:3: V402 not JSON: Unterminated string starting at (column 39)",
        f"{bad}:4: V403 NaN is not a number JSON carries (no NaN or Infinity)",
    ]


def test_histories_of_another_workflow_and_an_invalid_spec_are_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = run(capsys, "replay", REFUND, "--histories", str(GOLDEN / "returns.jsonl"))
    assert code == 1
    assert re.match(r"ratchet: R200 .*returns\.jsonl:1: run run_\w+ is a run of 'returns'", err)
    broken = tmp_path / "broken.yaml"
    broken.write_text(Path(REFUND).read_text().replace("start: proposed", "start: nowhere"))
    code, _, err = run(capsys, "replay", str(broken), "--histories", str(GOLDEN / "refund.jsonl"))
    assert code == 1
    assert re.search(r"broken\.yaml:\d+:\d+: E\d{3} ", err)


def test_export_writes_the_runs_a_store_holds_and_replay_reads_the_store_itself(
    capsys: pytest.CaptureFixture[str],
    make_runner: MakeRunner,
    world: PracticeWorld,
    clock: FakeClock,
    store: Store,
    store_url: str,
    tmp_path: Path,
) -> None:
    runner = make_runner()
    spec, text = spec_and_text("refund")
    for ticket in ("T-90104", "T-90603"):
        example = spec.examples[ticket]
        world.reset()
        world.seed(example.world)
        run_record, _ = runner.start(spec, text, example.input)
        runner.advance(run_record.id)
        clock.advance(60)  # the second is created a minute later: exported second
    decide(runner, store.resolve("T-90104").id, "approve", "agent-7", "agent")
    runner.advance(store.resolve("T-90104").id)
    golden = tmp_path / "golden" / "refund.jsonl"
    golden.parent.mkdir()
    code, out, err = run(
        capsys, "export", "--db", store_url, "--workflow", "refund", "-o", str(golden)
    )
    assert code == 0, err
    assert (out, err) == ("", f"exported 2 runs to {golden}\n")
    assert [h.run.business_key for h in read_histories(golden)] == ["T-90104", "T-90603"]
    assert [p.name for p in golden.parent.iterdir()] == ["refund.jsonl"]  # no temporary left
    code, out, _ = run(capsys, "export", "T-90603", "--db", store_url, "-o", "-")
    assert code == 0
    (line,) = out.splitlines()
    assert json.loads(line)["run"]["business_key"] == "T-90603"
    code, out, _ = run(
        capsys, "export", "T-90104", "--db", store_url, "-o", str(tmp_path / "one.jsonl"), "--json"
    )
    assert code == 0
    assert json.loads(out) == {
        "file": str(tmp_path / "one.jsonl"),
        "runs": [store.resolve("T-90104").id],
        "exported": 1,
    }
    code, out, err = run(capsys, "replay", REFUND, "--db", store_url)
    assert code == 0, err
    assert "(T-90603): replays clean (2 events; proposed, waiting)" in out
    assert "would continue in proposed (pause, waiting) here:" in out
    code, out, _ = run(capsys, "replay", str(NEW_KEY), "--db", store_url, "--runs", "T-90104")
    assert code == 1
    assert "V305" in out
    code, _, err = run(capsys, "export", "T-1", "--db", store_url, "-o", str(tmp_path / "x"))
    assert code == 1
    assert err.startswith("ratchet: R302 no run has the ID or business key 'T-1'")


def test_the_pytest_helper_of_the_reference_page_passes_then_fails_a_changed_spec(
    tmp_path: Path,
) -> None:
    """The snippet of docs/reference/histories.md, in a project's tests, run by pytest."""
    page = (ROOT / "docs" / "reference" / "histories.md").read_text(encoding="utf-8")
    (snippet,) = re.findall(r"<!-- histories: pytest -->\s*```python\n(.*?)```", page, re.S)
    project = tmp_path / "project"
    (project / "tests" / "golden").mkdir(parents=True)
    (project / "specs").mkdir()
    shutil.copy(SPECS / "refund.yaml", project / "specs" / "refund.yaml")
    shutil.copy(GOLDEN / "refund.jsonl", project / "tests" / "golden" / "refund.jsonl")
    (project / "tests" / "test_golden_histories.py").write_text(snippet, encoding="utf-8")

    def pytest_in_project() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
            cwd=project,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    passed = pytest_in_project()
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "1 passed" in passed.stdout
    shutil.copy(NEW_KEY, project / "specs" / "refund.yaml")
    failed = pytest_in_project()
    assert failed.returncode == 1
    assert "2 of 4 runs diverge" in failed.stdout
    assert re.search(r"specs/refund\.yaml:74:56: V305 request_refund is made under", failed.stdout)


def test_replay_histories_takes_a_spec_and_histories_in_hand() -> None:
    from ratchet_runner import load_spec

    histories = read_histories(GOLDEN / "returns.jsonl")
    results = replay_histories(load_spec(SPECS / "returns.yaml"), histories)
    assert [r.business_key for r in results] == [h.run.business_key for h in histories]
    with pytest.raises(AssertionError, match="no histories to replay"):
        assert_replays_clean(SPECS / "returns.yaml", [])
