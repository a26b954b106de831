"""``docs/reference/versions.md`` stays true to ``ratchet diff``: every hazard and mapping code
has its section, each section's example is a line the tool prints for that case (the mutations
of ``test_evolve_hazards``, as a version 2), and the Markdown example is what ``ratchet diff
--format markdown`` prints for the refund's second version."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from ratchet_runner.errors import MappingInvalid
from ratchet_runner.evolve.basis import HAZARD_CODES
from ratchet_runner.evolve.hazards import hazards
from ratchet_runner.evolve.mapping import MAPPING_CODES, check_mapping, mapping_from_text
from tests.conftest import ROOT, run_cli
from tests.unit.test_evolve_hazards import MUTATIONS, mutated, shipped

PAGE = ROOT / "docs" / "reference" / "versions.md"
BEGIN = "<!-- ratchet diff --format markdown: begin -->"
END = "<!-- ratchet diff --format markdown: end -->"
BUMP = ("spec_version: 1", "spec_version: 2")


def _text() -> str:
    return PAGE.read_text(encoding="utf-8")


def _sections() -> dict[str, str]:
    """Each code's section: the text under ``### CODE`` up to the next heading."""
    found = re.finditer(r"^### (V\d{3})\n(.*?)(?=^#{2,3} |\Z)", _text(), re.M | re.S)
    return {m.group(1): m.group(2) for m in found}


def _hazard_lines(code: str) -> list[str]:
    if code == "V105":
        edits: tuple[tuple[str, str], ...] = (
            ("nights: input.nights}", 'nights: "input.nights + 1"}'),
        )
        name = "booking"
    else:
        name, edits, _ = MUTATIONS[code]
    old, new, _ = mutated(name, *edits, BUMP)
    return [h.format() for h in hazards(old, new)]


def _refused(text: str) -> list[str]:
    with pytest.raises(MappingInvalid) as caught:
        mapping_from_text(text, "move.yaml")
    return caught.value.report()


def _checked(text: str) -> list[str]:
    old, _ = shipped("refund")
    _, new, _ = mutated("refund", *MUTATIONS["V101"][1], BUMP)
    return [d.format() for d in check_mapping(mapping_from_text(text, "move.yaml"), old, new)]


MAPPING_CASES: dict[str, Callable[[], list[str]]] = {
    "V201": lambda: _refused("states: {}\napprovals: voided\ntimerz: keep\n"),
    "V202": lambda: _refused("states: {proposed: 3}\n"),
    "V203": lambda: _refused("states: {}\napprovals: voided\ntimerz: keep\n"),
    "V204": lambda: _checked("states:\n  proposd: deciding\n"),
    "V205": lambda: _checked("states:\n  proposed: decidng\n"),
}


def test_every_code_has_its_section_and_no_section_names_another() -> None:
    assert set(_sections()) == set(HAZARD_CODES) | set(MAPPING_CODES)


@pytest.mark.parametrize("code", sorted({*HAZARD_CODES, *MAPPING_CODES}))
def test_each_codes_example_is_what_the_tool_prints_for_its_case(code: str) -> None:
    blocks = re.findall(r"```text\n(.*?)```", _sections()[code], re.S)
    assert blocks, f"{code} has no example"
    shown = blocks[0].splitlines()[0]
    printed = MAPPING_CASES[code]() if code in MAPPING_CASES else _hazard_lines(code)
    assert shown in printed, "\n".join(printed)


def test_the_markdown_example_is_what_the_command_prints(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    code, out, _ = run_cli(
        capsys,
        "diff",
        "specs/refund.yaml",
        "tests/fixtures/refund-v2.yaml",
        "--format",
        "markdown",
    )
    assert code == 1
    shown = _text().split(BEGIN)[1].split(END)[0]
    assert shown.strip("\n") == out.strip("\n")
    assert "```mermaid\nstateDiagram-v2\n" in shown  # the picture GitHub draws in place
