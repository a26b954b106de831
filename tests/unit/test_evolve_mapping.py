"""The mapping file of a version change: read by the spec's strict loader, refused with a code
and a place for every key, type and value it may not have, and checked against both versions."""

from __future__ import annotations

from pathlib import Path

import pytest

from ratchet_runner.errors import MappingInvalid
from ratchet_runner.evolve.mapping import (
    MAPPING_CODES,
    VersionMapping,
    check_mapping,
    mapping_from_text,
    read_mapping,
)
from ratchet_runner.spec.validate import load_spec
from tests.conftest import SPECS

REFUND = load_spec(SPECS / "refund.yaml")
BOOKING = load_spec(SPECS / "booking.yaml")


def refused(text: str) -> list[tuple[int, int, str]]:
    with pytest.raises(MappingInvalid) as caught:
        mapping_from_text(text, "move.yaml")
    assert caught.value.code == "R207"
    return [(d.line, d.column, d.code) for d in caught.value.diagnostics]


def test_a_mapping_reads_states_timers_and_approvals() -> None:
    mapping = mapping_from_text(
        "states:\n  proposed: proposed\n  refunding: refunding\ntimers: restart\napprovals: void\n",
        "move.yaml",
    )
    assert (mapping.states, mapping.timers, mapping.approvals) == (
        {"proposed": "proposed", "refunding": "refunding"},
        "restart",
        "void",
    )
    assert mapping.target("refunding") == "refunding"
    assert mapping.target("lapsed") == "lapsed"  # not mapped: the state of the same name
    assert check_mapping(mapping, REFUND, REFUND) == []


def test_every_key_is_optional_and_what_is_not_said_is_none() -> None:
    assert mapping_from_text("{}\n", "move.yaml") == VersionMapping("move.yaml")


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("state: {proposed: proposed}\n", [(1, 1, "V201")]),  # did you mean 'states'?
        ("states: {}\ntimer: keep\nvoid: true\n", [(2, 1, "V201"), (3, 1, "V201")]),
        ("states: [proposed]\n", [(1, 9, "V202")]),
        ("states:\n", [(1, 8, "V202")]),
        ("states: {proposed: 3}\n", [(1, 20, "V202")]),
        ("states: {proposed: [a, b]}\n", [(1, 20, "V202")]),
        ("timers: true\n", [(1, 9, "V202")]),
        ("timers: reset\n", [(1, 9, "V203")]),
        ("approvals: kept\n", [(1, 12, "V203")]),
        ("approvals: {void: yes}\n", [(1, 12, "V202")]),
    ],
)
def test_a_key_type_or_value_a_mapping_may_not_have_is_refused_where_it_is(
    text: str, found: list[tuple[int, int, str]]
) -> None:
    assert refused(text) == found


def test_a_close_misspelling_is_named() -> None:
    with pytest.raises(MappingInvalid) as caught:
        mapping_from_text("states: {}\napprovals: voided\ntimerz: keep\n", "move.yaml")
    messages = [d.format() for d in caught.value.diagnostics]
    assert messages == [
        "move.yaml:2:12: V203 approvals: 'voided' is not void or keep; did you mean 'void'?",
        "move.yaml:3:1: V201 unknown key 'timerz': a mapping has states, timers, approvals; "
        "did you mean 'timers'?",
    ]


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("states: &a {proposed: lapsed}\nold: *a\n", "E105"),  # no anchors, no aliases
        ("states: {}\nstates: {}\n", "E106"),  # no duplicate keys
        ("!!python/object/apply:os.system [ls]\n", "E107"),  # no tags
        ("- proposed\n", "E110"),  # a mapping at the top
        ("", "E108"),
        ("states: {proposed: [\n", "E104"),
    ],
)
def test_the_file_is_read_by_the_specs_strict_loader(text: str, code: str) -> None:
    assert [c for _, _, c in refused(text)] == [code]


def test_a_file_that_cannot_be_read_is_refused_with_its_name(tmp_path: Path) -> None:
    with pytest.raises(MappingInvalid) as caught:
        read_mapping(tmp_path / "missing.yaml", "missing.yaml")
    assert caught.value.report()[0].startswith("missing.yaml:1:1: E100 ")
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (1024 * 1024 + 1))
    with pytest.raises(MappingInvalid) as caught:
        read_mapping(big)
    assert caught.value.diagnostics[0].code == "E102"


def test_a_mapping_that_does_not_fit_the_two_versions_says_where() -> None:
    mapping = mapping_from_text(
        "states:\n"
        "  proposd: proposed\n"  # no such old state
        "  proposed: approving\n"  # no such new state
        "  refunding: needs_person\n"  # a step into an operator queue
        "  lapsed: rejected\n",  # two cancelled states: fine
        "move.yaml",
    )
    found = [(d.line, d.code) for d in check_mapping(mapping, REFUND, REFUND)]
    assert found == [(2, "V204"), (3, "V205"), (4, "V102")]
    (typo,) = [d for d in check_mapping(mapping, REFUND, REFUND) if d.code == "V204"]
    assert "did you mean 'proposed'?" in typo.message


def test_every_mapping_code_is_documented() -> None:
    page = (SPECS.parent / "docs" / "reference" / "versions.md").read_text(encoding="utf-8")
    for code in MAPPING_CODES:
        assert f"### {code}" in page, code
