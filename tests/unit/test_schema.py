"""The published JSON Schema: valid draft-07, described, and what the shipped specs obey."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from jsonschema import Draft7Validator

from ratchet_runner.errors import SpecError
from ratchet_runner.spec import schema
from ratchet_runner.spec.loader import Document, load_file, load_text
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
    assert first == "# yaml-language-server: $schema=../ratchet_runner/spec/spec.schema.json"
    assert (path.parent / "../ratchet_runner/spec/spec.schema.json").resolve().is_file()


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


REFUND_TEXT = (ROOT / "specs" / "refund.yaml").read_text(encoding="utf-8")


def _messages(old: str, new: str) -> list[str]:
    assert old in REFUND_TEXT
    doc = load_text(REFUND_TEXT.replace(old, new, 1), "refund.yaml")
    return [f"{d.line}:{d.code} {d.message}" for d in validate_document(doc)]


def test_a_bare_number_where_a_duration_goes_says_what_to_write() -> None:
    [whole] = _messages("timeout: 10s", "timeout: 10")
    assert whole.endswith(
        "timeout is a number, and a duration goes here: write 10s (or ms, m, h, d)"
        "; a duration is a whole number and a unit, ms, s, m, h or d (e.g. 30s, 24h)"
    )
    [fraction] = _messages("timeout: 10s", "timeout: 2.5")
    assert "write 2500ms" in fraction


def test_a_malformed_duration_says_what_a_duration_is() -> None:
    [found] = _messages("timeout: 10s", "timeout: 10 sec")
    assert found.endswith(
        'timeout is "10 sec"; a duration is a whole number and a unit, ms, s, m, h or d '
        "(e.g. 30s, 24h)"
    )


def test_an_unquoted_comma_that_splits_a_flow_mapping_says_to_quote_the_value() -> None:
    old = '"Read the provider\'s refusal; refund by hand or tell the customer why not"'
    [found] = _messages(old, "Read the refusal, then refund by hand")
    assert "E201 unknown field 'then refund by hand'" in found
    assert found.endswith(
        "a comma inside {...} ends a value: if this is the rest of the value before it, quote "
        "that whole value"
    )
    # a misspelt column (no space, or a value) keeps its plain "did you mean"
    typo = _messages("next_state: refunded,", "next_stat: refunded,")
    assert any("unknown field 'next_stat'" in found and "did you mean" in found for found in typo)
    assert not any("quote" in found for found in typo)


@pytest.mark.parametrize(
    ("old", "new", "what"),
    [
        (  # an argument's expression cut short: its rest becomes a name with no value
            "reason: input.reason}",
            "reason: input.reason + ', very late'}",
            'E204 /effects/request_refund/args has a name "very late\'" with no value',
        ),
        (  # a comma inside a quoted string of an unquoted guard: no space in the rest
            "guard: \"input.amount <= 100.0 || approval.role == 'team_lead'\"}",
            "guard: input.amount <= 100.0 || input.reason == 'a,b'}",
            'E201 unknown field "b\'"',
        ),
    ],
)
def test_more_values_split_by_an_unquoted_comma_say_to_quote_them(
    old: str, new: str, what: str
) -> None:
    found = _messages(old, new)
    hinted = [f for f in found if what in f]
    assert hinted, found
    assert hinted[0].endswith("if this is the rest of the value before it, quote that whole value")


def test_a_bracket_in_an_unquoted_value_of_a_flow_row_says_to_quote_it() -> None:
    old = "guard: \"input.amount <= 100.0 || approval.role == 'team_lead'\"}"
    new = "guard: input.amount <= 100.0 || approval.role in ['team_lead', 'agent']}"
    with pytest.raises(SpecError) as raised:  # not YAML: the loader refuses it
        _messages(old, new)
    [problem] = raised.value.diagnostics
    found = f"{problem.code} {problem.message}"
    assert "E104 the flow mapping '{' that starts here is never closed" in found
    assert found.endswith(
        "inside {...} or [...], a value holding a comma, a bracket or a brace must be quoted, "
        "whole: guard: \"... in ['a', 'b']\""
    )


def _with_nodes(doc: Document, count: int) -> Document:
    """``doc`` as a document of ``count`` nodes (its marks padded)."""
    marks = {**doc.marks, **{f"/padding/{i}": (1, 1) for i in range(count - len(doc.marks))}}
    return dataclasses.replace(doc, marks=marks)


def test_a_small_document_is_checked_without_compiling_the_fast_check() -> None:
    """Compiling the fast check costs about 75 ms a process, more than jsonschema takes for a
    shipped spec: ``ratchet validate`` of one compiles nothing. A document of more nodes than
    COMPILED_FROM_NODES is checked by the compiled check first, and so is any document once the
    check is compiled."""
    schema._fast_check.cache_clear()
    small = load_file(ROOT / "specs" / "refund.yaml")
    assert validate_document(small) == []
    assert schema._fast_check.cache_info().currsize == 0
    assert validate_document(_with_nodes(small, schema.COMPILED_FROM_NODES + 1)) == []
    assert schema._fast_check.cache_info().currsize == 1


def test_a_broken_document_has_the_same_findings_with_and_without_the_compiled_check() -> None:
    doc = load_text(_refund_with("spec_version: 1", "spec_version: one"), "r.yaml")
    schema._fast_check.cache_clear()
    direct = validate_document(doc)
    assert schema._fast_check.cache_info().currsize == 0
    assert not schema.is_valid(doc.data)  # compiles the check, which finds it broken too
    assert validate_document(doc) == direct
    assert [d.code for d in direct] == ["E203"]


def test_the_compiled_check_changes_nothing_in_the_document_it_checks() -> None:
    """Once compiled (a large spec validated first), the fast check checked every document;
    fastjsonschema wrote the schema's defaults into each, so a spec that left
    ``on_version_change`` out read as one that wrote it, and W520 was silent."""
    from ratchet_runner.spec.schema import is_valid

    doc = load_file(ROOT / "specs" / "returns.yaml")
    before = json.dumps(doc.data, sort_keys=True)
    assert is_valid(doc.data)
    assert json.dumps(doc.data, sort_keys=True) == before
