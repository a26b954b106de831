"""Bad input gets a clear error: every file in tests/corpus/ is hostile or broken, and
``ratchet validate`` answers each with exit status 1 and one located ``FILE:LINE:COL: CODE``
line pointing at the offending line — never a traceback, never a hang, never code run.

Files too big to commit (the 2 MB file, 10,000-deep block mappings) are built in tmp_path.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import pytest
import yaml
from click.testing import CliRunner

from ratchet_runner.cli import cli
from ratchet_runner.spec import loader
from ratchet_runner.spec.codes import CODES
from ratchet_runner.spec.loader import MAX_BYTES, MAX_DEPTH
from ratchet_runner.spec.validate import validate_path

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "corpus"
REFUND = ROOT / "specs" / "refund.yaml"
#: The file that tag_python_object_apply.yaml would create (with `touch`) if its tag were built.
MARKER = "ratchet-corpus-pwned-marker"
LOCATED = re.compile(r"^(?P<file>.+?):(?P<line>\d+):(?P<column>\d+): (?P<code>[EW]\d{3}) \S")


@dataclass(frozen=True)
class Expect:
    """What validating one corpus file must report first.

    ``at`` is a regular expression matching exactly one line of the file: the line the first
    diagnostic must name. ``line`` names it directly where no text can (an empty file). Neither:
    any line > 0. ``bug`` marks a known bug in a file this suite does not own (the test is
    xfail(strict=True) until it is fixed); ``crashes`` says that bug takes the whole command down.
    """

    code: str
    at: str | None = None
    line: int | None = None
    bug: str | None = None
    crashes: bool = False


EXPECTED: dict[str, Expect] = {
    # E1xx: the file is not a safe YAML document
    "empty.yaml": Expect("E108", line=1),
    "comment_only.yaml": Expect("E108", line=1),
    "top_level_list.yaml": Expect("E110", at=r"^- name: refund$"),
    "top_level_scalar.yaml": Expect("E110", at=r"^refund$"),
    "tab_indentation.yaml": Expect("E104", at=r"^\toperation: refund$"),
    "duplicate_key_top_level.yaml": Expect("E106", at=r"^start: refunding$"),
    "duplicate_key_in_row.yaml": Expect("E106", at=r"^\s+next_state: refunded,$"),
    "tag_python_object_apply.yaml": Expect("E107", at=r"python/object/apply:os\.system"),
    "tag_python_name.yaml": Expect("E107", at=r"python/name:os\.system"),
    "tag_custom.yaml": Expect("E107", at=r"timeout: !foo"),
    "alias_bomb.yaml": Expect("E105", at=r"^a: &a "),
    "anchor_alias.yaml": Expect("E105", at=r"&cancelled"),
    "merge_key.yaml": Expect("E105", at=r"<<:"),
    "deep_flow_nesting.yaml": Expect("E103", at=r"^nest: \[\[\["),
    "deep_block_sequences.yaml": Expect("E103", at=r"^- - - "),
    # the mapping that opens nesting level MAX_DEPTH + 1 is the value of key k{MAX_DEPTH - 1}
    "deep_block_mappings.yaml": Expect("E103", at=rf"^ {{{MAX_DEPTH}}}k{MAX_DEPTH}:$"),
    "binary_garbage.yaml": Expect("E101", line=1),
    "latin1_text.yaml": Expect("E101", at=r"caf"),
    "utf16_bom.yaml": Expect("E101", line=1),
    "nul_byte.yaml": Expect("E104", at="\x00"),
    "unterminated_string.yaml": Expect("E104", at=r'description: "9\.95 CAD'),
    "unterminated_flow_mapping.yaml": Expect("E104", at=r"event: reject,"),
    "long_number.yaml": Expect("E111", at=r"^policy_version: 7{20}"),
    "two_documents.yaml": Expect("E109", at=r"^---$"),
    "complex_mapping_key.yaml": Expect("E112", at=r"^\s+\? \[roles"),
    # E2xx: the document does not match the schema
    "unknown_top_level_field.yaml": Expect("E201", at=r"^owner:"),
    "row_misspelled_column.yaml": Expect("E201", at=r"next_sate:"),
    "row_missing_next_state.yaml": Expect("E202", at=r"event: reject,"),
    "transitions_as_mapping.yaml": Expect("E203", at=r"^  approve: "),
    "spec_version_string.yaml": Expect("E203", at=r'^spec_version: "1"$'),
    "retry_max_attempts_string.yaml": Expect("E203", at=r"max_attempts: three"),
    # E3xx: references and expressions
    "unknown_state.yaml": Expect("E301", at=r"needs_persn"),
    "unknown_effect.yaml": Expect("E302", at=r"request_refnd"),
    "unknown_compensation_effect.yaml": Expect("E302", at=r"claw_back_refund"),
    "guard_python_import.yaml": Expect("E307", at=r'guard: "__import__'),
    "guard_python_class_bases.yaml": Expect("E305", at=r"__bases__"),
    "guard_python_input_class.yaml": Expect("E306", at=r'guard: "input\.__class__"'),
    "guard_incomplete.yaml": Expect("E305", at=r'guard: "input\.amount <="'),
    "guard_unbalanced_parens.yaml": Expect("E305", at=r"guard: "),
    "guard_deep_parens.yaml": Expect("E305", at=r"guard: "),
    "input_schema_dangling_ref.yaml": Expect("E205", at=r"^  \$ref: "),
}


def expected_line(name: str, expect: Expect) -> int | None:
    if expect.line is not None:
        return expect.line
    if expect.at is None:
        return None
    text = (CORPUS / name).read_bytes().decode("utf-8", "replace")
    hits = [n for n, line in enumerate(text.split("\n"), 1) if re.search(expect.at, line)]
    assert len(hits) == 1, f"{expect.at!r} must match exactly one line of {name}, not {hits}"
    return hits[0]


def corpus_params(*, include_crashes: bool = True) -> list[object]:
    params: list[object] = []
    for name, expect in sorted(EXPECTED.items()):
        if expect.crashes and not include_crashes:
            continue
        marks = [pytest.mark.xfail(strict=True, reason=expect.bug)] if expect.bug else []
        params.append(pytest.param(name, marks=marks, id=name))
    return params


def validate(*args: str) -> tuple[int, str, str]:
    """Run ``ratchet validate ARGS`` in-process; a crash fails the test, it is not an exit 1."""
    result = CliRunner().invoke(cli, ["validate", *args])
    if result.exc_info is not None and result.exc_info[0] is not SystemExit:
        raise AssertionError(f"validate crashed: {result.exc_info[1]!r}") from result.exc_info[1]
    return result.exit_code, result.stdout, result.stderr


def first_located(stdout: str) -> re.Match[str]:
    first = stdout.splitlines()[0] if stdout else ""
    match = LOCATED.match(first)
    assert match, f"the first line is not FILE:LINE:COL: CODE message: {first!r}"
    return match


# -- the corpus, file by file ------------------------------------------------------------------


def test_the_corpus_holds_at_least_32_files_and_each_has_an_expected_code() -> None:
    files = sorted(p.name for p in CORPUS.iterdir() if p.is_file())
    assert files == sorted(EXPECTED)
    assert len(files) >= 32
    assert all(expect.code in CODES for expect in EXPECTED.values())
    assert all((CORPUS / name).stat().st_size <= 100 * 1024 for name in files)


@pytest.mark.parametrize("name", corpus_params())
def test_each_hostile_file_fails_with_its_code_at_the_offending_line(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    expect = EXPECTED[name]
    path = f"tests/corpus/{name}"
    status, stdout, stderr = validate(path)

    assert status == 1
    assert "Traceback" not in stdout + stderr
    first = first_located(stdout)
    assert first["file"] == path
    assert first["code"] == expect.code, stdout
    assert int(first["line"]) >= 1
    assert int(first["column"]) >= 1
    line = expected_line(name, expect)
    if line is not None:
        assert int(first["line"]) == line, stdout
    assert all(LOCATED.match(text) for text in stdout.splitlines()), stdout
    assert "1 file(s) checked" in stderr


@pytest.mark.parametrize("name", corpus_params())
def test_each_hostile_file_reports_the_same_first_error_as_json(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    status, stdout, stderr = validate("--json", f"tests/corpus/{name}")

    assert status == 1
    assert "Traceback" not in stdout + stderr
    (report,) = json.loads(stdout)["files"]
    assert report["valid"] is False
    first = report["diagnostics"][0]
    assert first["code"] == EXPECTED[name].code
    assert first["line"] == (expected_line(name, EXPECTED[name]) or first["line"]) >= 1
    assert first["column"] >= 1


@pytest.mark.skipif(not hasattr(yaml, "CBaseLoader"), reason="only one YAML parser installed")
@pytest.mark.parametrize("name", corpus_params(include_crashes=False))
def test_libyaml_and_the_pure_python_parser_report_the_same_first_error(name: str) -> None:
    found = []
    for parser in (yaml.CBaseLoader, yaml.BaseLoader):
        with mock.patch.object(loader, "YAML_PARSER", parser):
            first = validate_path(CORPUS / name).diagnostics[0]
        found.append((first.code, first.line))
    assert found[0] == found[1]


# -- files too big to commit -------------------------------------------------------------------


def padded_refund(size: int) -> bytes:
    """specs/refund.yaml followed by comment lines, exactly ``size`` bytes long."""
    text = REFUND.read_bytes()
    filler = b"# " + b"x" * 97 + b"\n"
    body = text + filler * ((size - len(text)) // len(filler) + 1)
    return body[: size - 1] + b"\n"


def test_a_two_megabyte_file_is_rejected_for_its_size(tmp_path: Path) -> None:
    path = tmp_path / "two_megabytes.yaml"
    path.write_bytes(padded_refund(2 * 1024 * 1024))
    status, stdout, stderr = validate(str(path))
    assert status == 1
    assert "Traceback" not in stdout + stderr
    first = first_located(stdout)
    assert (first["file"], first["line"], first["code"]) == (str(path), "1", "E102")


def test_a_file_exactly_at_the_size_cap_is_not_rejected_for_its_size(tmp_path: Path) -> None:
    at_cap = tmp_path / "at_cap.yaml"
    at_cap.write_bytes(padded_refund(MAX_BYTES))
    assert at_cap.stat().st_size == MAX_BYTES
    status, stdout, stderr = validate(str(at_cap))
    assert (status, stdout) == (0, ""), stdout + stderr

    over = tmp_path / "one_byte_over.yaml"
    over.write_bytes(padded_refund(MAX_BYTES + 1))
    status, stdout, _ = validate(str(over))
    assert status == 1
    assert first_located(stdout)["code"] == "E102"


def block_mappings(depth: int) -> str:
    """``depth`` nested block mappings, one space of indentation per level."""
    return "".join(" " * level + f"k{level}:\n" for level in range(depth))


def test_ten_thousand_deep_block_mappings_are_rejected_without_a_crash(tmp_path: Path) -> None:
    # 10,000 levels need ~50 MB of indentation: the size cap stops them before any parsing.
    deep = tmp_path / "ten_thousand_deep.yaml"
    deep.write_text(block_mappings(10_000), encoding="utf-8")
    status, stdout, stderr = validate(str(deep))
    assert status == 1
    assert "Traceback" not in stdout + stderr
    assert first_located(stdout)["code"] == "E102"


def test_block_mappings_as_deep_as_fit_under_the_size_cap_hit_the_nesting_cap(
    tmp_path: Path,
) -> None:
    text = block_mappings(1_400)
    assert MAX_BYTES - 100_000 < len(text) <= MAX_BYTES
    deep = tmp_path / "deepest_that_fits.yaml"
    deep.write_text(text, encoding="utf-8")
    status, stdout, stderr = validate(str(deep))
    assert status == 1
    assert "Traceback" not in stdout + stderr
    first = first_located(stdout)
    assert (first["code"], first["line"]) == ("E103", str(MAX_DEPTH + 1))


# -- the real command, all at once, in 200 MB ---------------------------------------------------

ADDRESS_SPACE = 200 * 2**20


def _cap_address_space() -> None:  # pragma: no cover - runs in the child
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS caps memory only on Linux")
def test_the_ratchet_command_checks_the_whole_corpus_in_200_mb_and_runs_no_code(
    tmp_path: Path,
) -> None:
    ratchet = shutil.which("ratchet", path=str(Path(sys.executable).parent))
    assert ratchet is not None, "the ratchet console script is not installed next to python"
    big = tmp_path / "two_megabytes.yaml"
    big.write_bytes(padded_refund(2 * 1024 * 1024))
    deep = tmp_path / "deepest_that_fits.yaml"
    deep.write_text(block_mappings(1_400), encoding="utf-8")
    # A file whose bug takes the whole command down would hide the others; those have their own
    # xfail tests above.
    names = [name for name, expect in sorted(EXPECTED.items()) if not expect.crashes]
    paths = [str(CORPUS / name) for name in names] + [str(big), str(deep)]

    done = subprocess.run(
        [ratchet, "validate", *paths],
        cwd=tmp_path,  # where `touch ratchet-corpus-pwned-marker` would land
        capture_output=True,
        encoding="utf-8",
        errors="replace",
        preexec_fn=_cap_address_space,
        timeout=600,
        check=False,
    )

    assert "Traceback" not in done.stdout + done.stderr
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    matches = [LOCATED.match(line) for line in lines]
    assert all(matches), [line for line, m in zip(lines, matches, strict=True) if not m]
    by_file: dict[str, list[re.Match[str]]] = {}
    for match in matches:
        assert match is not None
        by_file.setdefault(match["file"], []).append(match)
    assert sorted(by_file) == sorted(paths)
    for name in names:
        first = by_file[str(CORPUS / name)][0]
        assert first["code"] == EXPECTED[name].code, (name, first.string)
    assert by_file[str(big)][0]["code"] == "E102"
    assert by_file[str(deep)][0]["code"] == "E103"
    assert f"{len(paths)} file(s) checked" in done.stderr
    assert not (tmp_path / MARKER).exists()
    assert not (ROOT / MARKER).exists()
