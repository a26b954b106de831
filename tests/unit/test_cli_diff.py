"""``ratchet diff``: its exit statuses, its JSON, its Markdown (with the Mermaid picture), a
spec's version read from git with ``--base``, and what it refuses."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ratchet_runner.evolve.diff import diff
from ratchet_runner.evolve.picture import CLASSES, mermaid
from ratchet_runner.settings import mermaid_label as escape
from ratchet_runner.spec.validate import load_spec
from tests.conftest import ROOT, SPECS, run_cli

REFUND = str(SPECS / "refund.yaml")
V2 = str(ROOT / "tests" / "fixtures" / "refund-v2.yaml")


def edited(tmp_path: Path, name: str, *edits: tuple[str, str]) -> str:
    """A copy of the shipped spec ``name`` with ``edits`` made, in ``tmp_path``."""
    text = (SPECS / f"{name}.yaml").read_text(encoding="utf-8")
    for before, after in edits:
        assert before in text
        text = text.replace(before, after)
    path = tmp_path / f"{name}.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_a_change_with_an_error_hazard_exits_1_and_prints_changes_then_hazards(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run_cli(capsys, "diff", REFUND, V2)
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == "refund version 1 → version 2: 4 changes"
    assert re.match(r"\S+refund-v2\.yaml:\d+:\d+: added state escalated$", lines[2])
    found = [line for line in lines if re.match(r"\S+:\d+:\d+: V1\d\d ", line)]
    assert [line.split(": ")[1].split()[0] for line in found] == ["V103", "V104", "V108"]
    assert err.strip() == (
        "ratchet: 2 errors, 1 warning; no live runs looked at (--db); fails --fail-on error"
    )


@pytest.mark.parametrize(("fail_on", "expected"), [("error", 1), ("warning", 1), ("never", 0)])
def test_fail_on_sets_the_severity_that_fails(
    capsys: pytest.CaptureFixture[str], fail_on: str, expected: int
) -> None:
    assert run_cli(capsys, "diff", REFUND, V2, "--fail-on", fail_on)[0] == expected


def test_a_change_with_only_warnings_passes_unless_warnings_fail(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    new = edited(tmp_path, "refund", ("roles: [agent, team_lead]", "roles: [team_lead]"))
    code, out, _ = run_cli(capsys, "diff", REFUND, new)
    assert code == 0
    assert " V106 " in out
    assert run_cli(capsys, "diff", REFUND, new, "--fail-on", "warning")[0] == 1


def test_the_same_spec_has_no_changes_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "diff", REFUND, REFUND)
    assert (code, out) == (0, "refund version 1 → version 1: no changes\n")
    assert "no hazards" in err


def test_json_is_one_document_with_the_changes_hazards_and_verdict(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run_cli(capsys, "diff", REFUND, V2, "--json")
    assert (code, err) == (1, "")
    document = json.loads(out)
    assert set(document) == {
        "old",
        "new",
        "changes",
        "hazards",
        "errors",
        "warnings",
        "live",
        "mapping",
        "fail_on",
        "failed",
    }
    assert (document["old"]["spec_version"], document["new"]["spec_version"]) == (1, 2)
    assert (document["errors"], document["warnings"], document["failed"]) == (2, 1, True)
    assert document["live"] is None
    (key,) = [c for c in document["changes"] if c["what"] == "idempotency_key"]
    assert key["kind"] == "changed"
    assert key["old"] == ["business_key", "effect", "args"]
    assert key["pointer"] == "/transitions/3/idempotency_key"
    (v104,) = [h for h in document["hazards"] if h["code"] == "V104"]
    assert set(v104) == {
        "code",
        "severity",
        "message",
        "file",
        "line",
        "column",
        "pointer",
        "runs",
        "count",
        "notes",
    }
    assert (v104["severity"], v104["runs"], v104["count"]) == ("error", None, None)


def test_markdown_is_a_pull_request_comment_with_the_table_diff_and_the_picture(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run_cli(capsys, "diff", REFUND, V2, "--format", "markdown")
    assert code == 1
    assert out.startswith("## `ratchet diff`: refund version 1 → version 2\n")
    assert "| | state | event | guard | next_state |" in out
    assert "| was | refunding | unknown |  | needs_person |" in out
    assert "| now | refunding | unknown |  | **escalated** |" in out
    assert "| error | V104 |" in out
    assert "```mermaid\nstateDiagram-v2\n" in out
    assert "    classDef added " in out
    assert "unknown · changed next_state" in out
    assert out.endswith("```\n")


def test_json_and_markdown_together_are_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "diff", REFUND, V2, "--json", "--format", "markdown")
    assert code == 2
    assert "R206" in err


@pytest.mark.parametrize("specs", [(REFUND,), (REFUND, V2, REFUND)])
def test_one_spec_without_base_or_three_are_a_usage_error(
    capsys: pytest.CaptureFixture[str], specs: tuple[str, ...]
) -> None:
    code, _, err = run_cli(capsys, "diff", *specs)
    assert code == 2
    assert "give OLD and NEW" in err


def test_an_invalid_version_is_reported_as_validate_reports_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    broken = edited(tmp_path, "refund", ("next_state: refunded,", "next_state: refundd,"))
    code, out, err = run_cli(capsys, "diff", REFUND, broken)
    assert code == 1
    assert re.match(rf"{re.escape(broken)}:\d+:\d+: E301 ", out)
    assert "invalid; fix it, then compare" in err
    code, out, _ = run_cli(capsys, "diff", REFUND, broken, "--json")
    assert (code, json.loads(out)["valid"]) == (1, False)


def test_a_hostile_mapping_file_is_refused_with_its_codes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    mapping = tmp_path / "move.yaml"
    mapping.write_text("states: {proposed: 3}\ntimerz: keep\n", encoding="utf-8")
    code, out, err = run_cli(capsys, "diff", REFUND, V2, "--mapping", str(mapping))
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        f"{mapping}:1:20: V202 state 'proposed' is mapped to a number (3); map it to the name "
        "of one state of the new version",
        f"{mapping}:2:1: V201 unknown key 'timerz': a mapping has states, timers, approvals; "
        "did you mean 'timers'?",
    ]


def test_a_mapping_that_does_not_fit_the_versions_is_a_hazard_in_the_report(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    mapping = tmp_path / "move.yaml"
    mapping.write_text("states: {proposed: escalatd}\ntimers: keep\n", encoding="utf-8")
    code, out, _ = run_cli(capsys, "diff", REFUND, V2, "--mapping", str(mapping), "--json")
    assert code == 1
    document = json.loads(out)
    assert document["mapping"] == str(mapping)
    (v205,) = [h for h in document["hazards"] if h["code"] == "V205"]
    assert (v205["file"], v205["line"]) == (str(mapping), 1)
    assert "did you mean 'escalated'?" in v205["message"]


# -- --base: the version in git -------------------------------------------------------------------


def git(folder: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(folder), *args],
        check=True,
        capture_output=True,
        env={
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@example.com",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@example.com",
            "HOME": str(folder),
            "PATH": "/usr/bin:/bin",
        },
    )


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    top = tmp_path / "repo"
    (top / "specs").mkdir(parents=True)
    shutil.copy(SPECS / "refund.yaml", top / "specs" / "refund.yaml")
    git(top, "init", "-q", "-b", "main")
    git(top, "add", ".")
    git(top, "commit", "-q", "-m", "refund 1")
    shutil.copy(V2, top / "specs" / "refund.yaml")
    return top


def test_base_compares_a_spec_with_its_version_in_a_git_revision(
    capsys: pytest.CaptureFixture[str], checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(checkout / "specs")
    code, out, _ = run_cli(capsys, "diff", "refund.yaml", "--base", "main", "--json")
    assert code == 1
    document = json.loads(out)
    assert document["old"]["file"] == "main:specs/refund.yaml"
    assert (document["old"]["spec_version"], document["new"]["spec_version"]) == (1, 2)
    assert {h["code"] for h in document["hazards"]} == {"V103", "V104", "V108"}


@pytest.mark.parametrize(
    ("base", "said"),
    [
        ("nothere", "no git revision 'nothere' in the checkout of "),
        ("--output=x", "--base '--output=x' is not a git revision"),
    ],
)
def test_base_says_why_a_revision_cannot_be_read(
    capsys: pytest.CaptureFixture[str], checkout: Path, base: str, said: str
) -> None:
    code, _, err = run_cli(capsys, "diff", str(checkout / "specs" / "refund.yaml"), "--base", base)
    assert code == 1
    assert err.startswith(f"ratchet: R200 {said}")


def test_base_says_when_the_spec_was_not_in_that_revision(
    capsys: pytest.CaptureFixture[str], checkout: Path
) -> None:
    shutil.copy(V2, checkout / "specs" / "refund-v2.yaml")
    code, _, err = run_cli(
        capsys, "diff", str(checkout / "specs" / "refund-v2.yaml"), "--base", "main"
    )
    assert code == 1
    assert err.startswith("ratchet: R200 specs/refund-v2.yaml does not exist in main (")


def test_base_outside_a_git_checkout_says_so(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    spec = tmp_path / "loose" / "refund.yaml"
    spec.parent.mkdir()
    shutil.copy(SPECS / "refund.yaml", spec)
    code, _, err = run_cli(capsys, "diff", str(spec), "--base", "main")
    assert code == 1
    assert err.startswith(f"ratchet: R200 {spec} is not in a git checkout (")
    assert "compare two files instead" in err


def test_base_with_two_specs_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "diff", REFUND, V2, "--base", "main")
    assert code == 2
    assert "with --base, give one SPEC" in err


# -- the picture ---------------------------------------------------------------------------------

#: Every statement the picture may hold (Mermaid's stateDiagram-v2 grammar, the part it uses).
STATEMENTS = [
    re.compile(r"^stateDiagram-v2$"),
    re.compile(r"^    direction TB$"),
    re.compile(r'^    state "(?P<label>[^"]+)" as (?P<declared>s\d+)$'),
    re.compile(r"^    (?P<described>s\d+) : [^:\n]+$"),
    re.compile(r"^    \[\*\] --> (?P<start>s\d+)$"),
    re.compile(r"^    (?P<source>s\d+) --> (?P<target>s\d+) : (?P<edge>.+)$"),
    re.compile(r"^    (?P<ended>s\d+) --> \[\*\]$"),
    re.compile(r"^    classDef (?P<classdef>\w+) [\w#:,.-]+(?: [\w#:,.-]+)*$"),
    re.compile(r"^    class (?P<members>s\d+(?:,s\d+)*) (?P<klass>\w+)$"),
]


def parse(text: str) -> dict[str, list[str]]:
    """Each named part of each statement of the picture; every line must be a statement."""
    found: dict[str, list[str]] = {}
    for line in text.rstrip("\n").split("\n"):
        match = next((m for p in STATEMENTS if (m := p.match(line))), None)
        assert match is not None, f"not a statement of the picture: {line!r}"
        for name, value in match.groupdict().items():
            if value is not None:
                found.setdefault(name, []).append(value)
    return found


def test_the_picture_is_a_state_diagram_whose_every_line_is_a_statement_it_knows() -> None:
    changes = diff(load_spec(REFUND), load_spec(V2))
    parts = parse(mermaid(changes))
    declared = set(parts["declared"])
    used = {*parts["start"], *parts["source"], *parts["target"], *parts["ended"]}
    used |= {m for members in parts["members"] for m in members.split(",")}
    assert used <= declared  # every state drawn is declared
    assert set(parts["klass"]) <= set(parts["classdef"]) <= set(CLASSES)
    labels = dict(zip(parts["declared"], parts["label"], strict=True))
    classes = {
        labels[m]: klass
        for members, klass in zip(parts["members"], parts["klass"], strict=True)
        for m in members.split(",")
    }
    assert classes["escalated"] == "added"
    assert classes["proposed"] == "same"
    assert classes["refunding"] == "changed"  # two of its rows changed
    assert sum(1 for edge in parts["edge"] if "changed next_state" in edge) == 1
    assert sum(1 for edge in parts["edge"] if "changed idempotency_key" in edge) == 1


def test_a_removed_state_is_drawn_removed_with_its_rows_labelled_removed(tmp_path: Path) -> None:
    old = load_spec(V2)
    new = load_spec(REFUND)  # the other way round: escalated is removed
    parts = parse(mermaid(diff(old, new)))
    labels = dict(zip(parts["declared"], parts["label"], strict=True))
    removed = [
        labels[m]
        for members, klass in zip(parts["members"], parts["klass"], strict=True)
        if klass == "removed"
        for m in members.split(",")
    ]
    assert removed == ["escalated"]


def test_no_label_can_end_a_statement_or_spell_markup() -> None:
    hostile = 'a"b;c#d<e>f&g%h`i|j[k]l{m}n\\o style classDef'
    escaped = escape(hostile)
    assert not set(escaped) & set('"<>;`|[]{}\\') - {";"}  # ; only in entities
    assert escaped.count(";") == escaped.count("#")
    assert "style" not in escaped
    assert "classDef" not in escaped


def test_db_reads_an_existing_store_and_creates_none(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    missing = tmp_path / "nothere.db"
    code, _, err = run_cli(capsys, "diff", REFUND, V2, "--db", f"sqlite:///{missing}")
    assert code == 1
    assert err.startswith(f"ratchet: R200 no store at sqlite:///{missing} (")
    assert not missing.exists()
