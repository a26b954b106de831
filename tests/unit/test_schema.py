"""The published JSON Schema: valid draft-07, described, and what the shipped specs obey."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jsonschema import Draft7Validator

from ratchet_runner.spec.loader import load_file, load_text
from ratchet_runner.spec.model import COLUMNS
from ratchet_runner.spec.schema import spec_schema, spec_schema_text, validate_document

ROOT = Path(__file__).resolve().parents[2]
SPECS = sorted((ROOT / "specs").glob("*.yaml"))


def test_the_schema_is_a_valid_draft_07_schema() -> None:
    schema = spec_schema()
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    Draft7Validator.check_schema(schema)
    assert json.loads(spec_schema_text()) == schema


def test_a_transition_row_has_exactly_the_eleven_columns() -> None:
    row = spec_schema()["properties"]["transitions"]["items"]
    assert tuple(row["properties"]) == COLUMNS
    assert row["additionalProperties"] is False


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.name)
def test_each_shipped_spec_validates_against_the_schema(path: Path) -> None:
    assert validate_document(load_file(path)) == []
    Draft7Validator(spec_schema()).validate(load_file(path).data)


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.name)
def test_each_shipped_spec_names_the_schema_for_editors(path: Path) -> None:
    first = path.read_text(encoding="utf-8").splitlines()[0]
    assert first == "# yaml-language-server: $schema=../runner/spec/spec.schema.json"
    assert (path.parent / "../runner/spec/spec.schema.json").resolve().is_file()


def _refund_with(old: str, new: str) -> str:
    text = (ROOT / "specs" / "refund.yaml").read_text(encoding="utf-8")
    assert old in text
    return text.replace(old, new, 1)


def test_a_misspelled_column_is_reported_at_its_key_with_a_suggestion() -> None:
    text = _refund_with(
        "event: reject,  next_state: rejected", "event: reject,  next_sate: rejected"
    )
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "next_sate" in t)
    found = validate_document(load_text(text, "r.yaml"))
    codes = {(d.code, d.line) for d in found}
    assert ("E201", line) in codes
    assert any("did you mean 'next_state'" in d.message for d in found)
    assert any(d.code == "E202" and "next_state" in d.message for d in found)


def test_a_wrong_type_says_what_was_expected() -> None:
    found = validate_document(load_text(_refund_with("spec_version: 1", "spec_version: one")))
    assert [(d.code, d.pointer) for d in found] == [("E203", "/spec_version")]
    assert "expected a whole number" in found[0].message


def test_a_value_outside_its_enum_lists_the_allowed_values() -> None:
    found = validate_document(load_text(_refund_with("{kind: success}", "{kind: succes}")))
    assert found[0].code == "E204"
    assert "allowed: step, pause" in found[0].message
