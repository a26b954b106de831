"""The ratchet command line: exit statuses, formats, and no traceback ever."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from ratchet_runner.spec.schema import spec_schema_text
from tests.conftest import run_cli as run

ROOT = Path(__file__).resolve().parents[2]
REFUND = str(ROOT / "specs" / "refund.yaml")
BOOKING = str(ROOT / "specs" / "booking.yaml")


def broken_spec(tmp_path: Path) -> Path:
    text = (
        Path(REFUND)
        .read_text(encoding="utf-8")
        .replace("next_state: refunded,", "next_state: refundd,")
    )
    path = tmp_path / "broken.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_valid_specs_exit_zero_and_say_so(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "validate", REFUND, BOOKING)
    assert (code, out) == (0, "")
    assert "2 file(s) checked: 0 error(s), 0 warning(s): valid" in err


def test_an_invalid_spec_prints_file_line_col_code_and_exits_one(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = broken_spec(tmp_path)
    line, column = next(
        (i, t.index("refundd") + 1)
        for i, t in enumerate(path.read_text().splitlines(), 1)
        if "refundd" in t
    )
    code, out, _ = run(capsys, "validate", str(path))
    assert code == 1
    errors = [text for text in out.splitlines() if " E301 " in text]
    assert errors == [
        f"{path}:{line}:{column}: E301 unknown state 'refundd' (declare it under states:); "
        "did you mean 'refunded'?"
    ]


def test_json_output_is_one_document_on_stdout_only(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = run(capsys, "validate", "--json", REFUND, str(broken_spec(tmp_path)))
    assert code == 1
    assert err == ""
    document = json.loads(out)
    assert document["valid"] is False
    assert [f["valid"] for f in document["files"]] == [True, False]
    found = document["files"][1]["diagnostics"]
    assert all(
        set(d) == {"file", "line", "column", "code", "severity", "message", "pointer"}
        for d in found
    )
    error = next(d for d in found if d["severity"] == "error")
    assert (error["code"], error["pointer"]) == ("E301", "/transitions/3/next_state")


def test_strict_makes_warnings_fail(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    text = (
        Path(REFUND)
        .read_text(encoding="utf-8")
        .replace(
            "  needs_person: {kind: operator_queue}",
            "  needs_person: {kind: operator_queue}\n  orphan: {kind: success}",
        )
    )
    path = tmp_path / "warn.yaml"
    path.write_text(text, encoding="utf-8")
    code, out, _ = run(capsys, "validate", str(path))
    assert code == 0
    assert " W401 " in out
    code, _, _ = run(capsys, "validate", "--strict", str(path))
    assert code == 1


def test_a_directory_is_validated_file_by_file(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "validate", "--json", str(ROOT / "specs"))
    assert code == 0
    names = [Path(f["file"]).name for f in json.loads(out)["files"]]
    assert names == sorted(p.name for p in (ROOT / "specs").glob("*.yaml"))
    assert {"booking.yaml", "refund.yaml"} <= set(names)


def test_a_directory_skips_yaml_files_that_are_not_specs_with_a_note(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    shutil.copy(REFUND, tmp_path / "refund.yaml")
    (tmp_path / "input.yaml").write_text("ticket: T-1\norder: LK-1\namount: 5\n", "utf-8")
    (tmp_path / "ci").mkdir()
    (tmp_path / "ci" / "pipeline.yml").write_text("steps: [{run: make test}]\n", "utf-8")
    broken = tmp_path / "draft.yaml"  # a spec, broken: still checked, and its error reported
    broken.write_text("name: draft\ntransitions: [\n", "utf-8")
    code, out, err = run(capsys, "validate", "--json", str(tmp_path))
    assert code == 1
    report = json.loads(out)
    assert [Path(f["file"]).name for f in report["files"]] == ["draft.yaml", "refund.yaml"]
    assert report["skipped"] == [
        str(tmp_path / "ci" / "pipeline.yml"),
        str(tmp_path / "input.yaml"),
    ]
    assert f"ratchet: skipped {tmp_path / 'input.yaml'}: not a spec" in err
    # named explicitly, a file is always checked as a spec
    code, out, _ = run(capsys, "validate", str(tmp_path / "input.yaml"))
    assert code == 1
    assert "E201 unknown field 'ticket'" in out
    # a directory holding no spec at all is a usage error
    (tmp_path / "only").mkdir()
    (tmp_path / "only" / "input.yaml").write_text("ticket: T-1\n", "utf-8")
    code, _, err = run(capsys, "validate", str(tmp_path / "only"))
    assert code == 2
    assert "no spec" in err


def test_usage_errors_exit_two(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "validate")
    assert code == 2
    assert "Missing argument" in err
    code, _, _ = run(capsys, "table", REFUND, "--format", "pdf")
    assert code == 2


def test_schema_prints_the_shipped_schema(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "schema")
    assert code == 0
    assert out == spec_schema_text()


def test_table_prints_every_row_with_eleven_columns(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "table", REFUND)
    assert code == 0
    rows = [line for line in out.splitlines() if line.startswith("| ")]
    assert len(rows) == 1 + 8  # header + the refund's eight rows
    assert all(len(re.split(r"(?<!\\)\|", line)) == 11 + 2 for line in rows)
    assert "| refunding | ok | " in out
    assert "`input.amount <= 100.0 \\|\\| approval.role == 'team_lead'`" in out


def test_table_html_escapes_cells(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "table", REFUND, "--format", "html")
    assert code == 0
    assert "<td>input.amount &lt;= 100.0 || approval.role == &#x27;team_lead&#x27;</td>" in out


def test_table_of_an_invalid_spec_prints_diagnostics_not_a_traceback(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = run(capsys, "table", str(broken_spec(tmp_path)))
    assert code == 1
    assert "E301" in err
    assert "Traceback" not in out + err


def test_an_internal_error_is_one_line_with_exit_three(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def explode(*_: object, **__: object) -> None:
        raise RuntimeError("boom")

    from ratchet_runner.binding import check as binding_check  # where validate validates each file

    monkeypatch.setattr(binding_check, "validate_path", explode)
    monkeypatch.delenv("RATCHET_DEBUG", raising=False)
    code, out, err = run(capsys, "validate", REFUND)
    assert code == 3
    assert "internal error validating" in err
    assert "RuntimeError: boom" in err
    assert "1 file(s) not checked (internal error)" in err
    assert "Traceback" not in out + err


def test_an_unexpected_error_in_any_command_is_one_line_with_exit_three(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def explode() -> str:
        raise RuntimeError("kaboom")

    monkeypatch.setattr("ratchet_runner.spec.schema.spec_schema_text", explode)  # read by `schema`
    monkeypatch.delenv("RATCHET_DEBUG", raising=False)
    code, out, err = run(capsys, "schema")
    assert code == 3
    assert "internal error: RuntimeError: kaboom" in err
    assert "Traceback" not in out + err


def test_table_to_a_folder_that_does_not_exist_is_a_clear_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = run(capsys, "table", REFUND, "-o", str(tmp_path / "missing" / "t.md"))
    assert code == 1
    assert "No such file or directory" in err
    assert "Traceback" not in out + err


def test_strict_json_marks_a_file_with_warnings_invalid(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    text = (
        Path(REFUND)
        .read_text(encoding="utf-8")
        .replace(
            "  needs_person: {kind: operator_queue}",
            "  needs_person: {kind: operator_queue}\n  orphan: {kind: success}",
        )
    )
    path = tmp_path / "warn.yaml"
    path.write_text(text, encoding="utf-8")
    code, out, _ = run(capsys, "validate", "--json", "--strict", str(path))
    document = json.loads(out)
    assert (code, document["valid"], document["files"][0]["valid"]) == (1, False, False)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--format", "png"], "png is drawn into a file: give -o FILE"),
        (["--view", "states", "--effect", "request_refund"], "crash-windows only"),
        (["--view", "crash-windows", "--effect", "nope"], "no row performs 'nope'"),
    ],
)
def test_a_diagram_that_cannot_be_drawn_as_asked_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], args: list[str], said: str
) -> None:
    code, out, err = run(capsys, "diagram", REFUND, *args)
    assert code == 2
    assert said in err
    assert out == ""


@pytest.mark.parametrize(
    ("data", "said"), [("[1, 2]", "must be a JSON object"), ("{bad", "not JSON")]
)
def test_signal_data_that_is_no_json_object_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], data: str, said: str
) -> None:
    code, out, err = run(capsys, "signal", "T-1", "arrived", "--id", "s-1", "--data", data)
    assert (code, out) == (2, "")
    assert "Invalid value for '--data'" in err
    assert said in err
