"""The docs say what the code does.

* Every field of the shipped JSON Schema is in the spec reference, and the reference documents no
  field the schema lacks (paths written as ``effects.<name>.retry.max_attempts``, in the first
  column of the tables headed ``field``); every field has a description in the schema.
* Every complete spec in the tutorial validates as its marker says: a ```yaml block right after
  ``<!-- ratchet-spec: valid -->`` or ``<!-- ratchet-spec: invalid CODE... -->``.
* Every ``ratchet`` command and option the CLI reference shows exists in ``ratchet --help``, and
  every option a command's ``--help`` lists is in that command's section of the reference.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from ratchet_runner.binding.files import CODES as BINDING_CODES
from ratchet_runner.cli import cli
from ratchet_runner.spec.codes import CODES
from ratchet_runner.spec.expressions import APPROVAL_FIELDS, FUNCTIONS, RUN_FIELDS
from ratchet_runner.spec.lint.references import expression_scopes
from ratchet_runner.spec.loader import load_file, load_text
from ratchet_runner.spec.model import RUNNER_EVENTS
from ratchet_runner.spec.schema import spec_schema
from ratchet_runner.spec.validate import validate_path, validate_text

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
SPEC_MD = DOCS / "reference" / "spec.md"
CLI_MD = DOCS / "reference" / "cli.md"
TUTORIAL_DIR = DOCS / "tutorial"
TUTORIAL_MD = TUTORIAL_DIR / "01-your-first-spec.md"
TUTORIAL_SPEC = TUTORIAL_DIR / "return_label.yaml"
#: The name under which the tutorial saves its draft, as its outputs show it.
TUTORIAL_FILE = "scratch/return_label.yaml"
#: Someone else owns this page; its own test keeps its codes true.
LINT_CODES_MD = DOCS / "reference" / "lint-codes.md"

MARKER = re.compile(r"<!--\s*ratchet-spec:\s*(valid|invalid((?:\s+[EW]\d{3})+))\s*-->")


# -- reading Markdown ------------------------------------------------------------------------------


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _blocks(text: str) -> Iterator[tuple[int, str, str]]:
    """Every fenced code block as (line of its opening fence, language, body)."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("```"):
            start, language, body = i + 1, lines[i][3:].strip(), []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            yield start, language, "\n".join(body) + "\n"
        i += 1


def _cells(line: str) -> list[str]:
    """The cells of one table row; a ``|`` inside backticks does not split."""
    cells, current, in_code = [], "", False
    for char in line.strip().strip("|"):
        if char == "`":
            in_code = not in_code
        if char == "|" and not in_code:
            cells.append(current.strip())
            current = ""
        else:
            current += char
    cells.append(current.strip())
    return cells


def _tables(text: str) -> Iterator[tuple[str, list[list[str]]]]:
    """Every table outside code blocks as (the ``##`` heading above it, rows with the header)."""
    heading, table, fenced = "", [], False
    for line in [*text.splitlines(), ""]:
        if line.startswith("```"):
            fenced = not fenced
        if not fenced and line.startswith("## "):
            heading = line
        if not fenced and line.startswith("|"):
            if not re.fullmatch(r"\|[\s:|-]+\|?", line.strip()):
                table.append(_cells(line))
            continue
        if table:
            yield heading, table
            table = []


def _table_rows(text: str, header: str) -> list[list[str]]:
    """The body rows of every table whose first header cell is ``header``."""
    return [row for _, table in _tables(text) if table[0][0] == header for row in table[1:]]


def _code(cell: str) -> str | None:
    match = re.fullmatch(r"`([^`]+)`", cell)
    return match.group(1) if match else None


# -- the schema ------------------------------------------------------------------------------------


def _schema_fields(
    node: dict[str, Any], path: str = ""
) -> Iterator[tuple[str, dict[str, Any], bool | None]]:
    """Every property path of the schema, with its subschema and whether its parent requires it
    (None for a map entry ``<name>`` or a list item ``[]``, which are not fields of their own)."""
    for alternative in node.get("oneOf", []) + node.get("anyOf", []):
        yield from _schema_fields(alternative, path)
    required = node.get("required", [])
    for name, sub in node.get("properties", {}).items():
        child = f"{path}.{name}" if path else name
        yield child, sub, name in required
        yield from _schema_fields(sub, child)
    entry = node.get("additionalProperties")
    if isinstance(entry, dict):
        child = f"{path}.{'<arg>' if path.endswith('.args') else '<name>'}"
        yield child, entry, None
        yield from _schema_fields(entry, child)
    item = node.get("items")
    if isinstance(item, dict) and item.get("type") == "object":
        yield f"{path}[]", item, None
        yield from _schema_fields(item, f"{path}[]")


SCHEMA_FIELDS = {path: (sub, required) for path, sub, required in _schema_fields(spec_schema())}


def _documented_fields() -> dict[str, list[str]]:
    rows = _table_rows(_text(SPEC_MD), "field")
    return {_code(row[0]) or row[0]: row for row in rows}


# -- (a) every schema field is documented, and only those ------------------------------------------


def test_every_schema_field_is_documented_in_the_spec_reference() -> None:
    missing = sorted(set(SCHEMA_FIELDS) - set(_documented_fields()))
    assert not missing, (
        "fields in ratchet_runner/spec/spec.schema.json but not in docs/reference/spec.md: "
        f"{missing}"
    )


def test_every_field_the_spec_reference_documents_exists_in_the_schema() -> None:
    unknown = sorted(set(_documented_fields()) - set(SCHEMA_FIELDS))
    assert not unknown, f"fields in docs/reference/spec.md but not in the schema: {unknown}"


def test_the_spec_reference_documents_each_field_once() -> None:
    rows = [_code(row[0]) or row[0] for row in _table_rows(_text(SPEC_MD), "field")]
    assert sorted(name for name in set(rows) if rows.count(name) > 1) == []


def test_the_spec_reference_says_a_field_is_required_exactly_when_the_schema_does() -> None:
    wrong = []
    for path, row in _documented_fields().items():
        required = SCHEMA_FIELDS.get(path, (None, None))[1]
        if required is not None and row[2].split()[0] != ("yes" if required else "no"):
            wrong.append(f"{path}: says {row[2]!r}")
    assert not wrong


def test_the_spec_reference_gives_every_default_the_schema_declares() -> None:
    wrong = []
    for path, (sub, _) in SCHEMA_FIELDS.items():
        if "default" in sub:
            cell = _documented_fields()[path][3]
            if f"`{sub['default']}`" not in cell:
                wrong.append(f"{path}: schema default {sub['default']!r}, doc says {cell!r}")
    assert not wrong


# -- (b) every field explains itself in the schema -------------------------------------------------


def test_every_schema_property_has_a_description() -> None:
    bare = [
        path
        for path, (sub, _) in SCHEMA_FIELDS.items()
        if not str(sub.get("description", "")).strip()
    ]
    assert not bare, f"schema properties without a description: {bare}"


# -- (c) the tutorial's specs validate as the tutorial says ----------------------------------------


def _marked_specs() -> list[tuple[str, str, set[str]]]:
    """(id, YAML text, the codes expected) of every marked block in docs/tutorial/."""
    found = []
    for page in sorted(TUTORIAL_DIR.glob("*.md")):
        lines = _text(page).splitlines()
        for start, language, body in _blocks(_text(page)):
            previous = next((line for line in reversed(lines[: start - 1]) if line.strip()), "")
            marker = MARKER.search(previous)
            if marker is None:
                continue
            assert language == "yaml", f"{page.name}:{start}: a marked block must be ```yaml"
            codes = set((marker.group(2) or "").split())
            found.append((f"{page.name}:{start}", body, codes))
    return found


MARKED_SPECS = _marked_specs()


def test_the_tutorial_marks_both_valid_and_invalid_specs() -> None:
    assert any(not codes for _, _, codes in MARKED_SPECS)
    assert any(codes for _, _, codes in MARKED_SPECS)


@pytest.mark.parametrize(
    ("body", "codes"),
    [(body, codes) for _, body, codes in MARKED_SPECS],
    ids=[name for name, _, _ in MARKED_SPECS],
)
def test_each_complete_spec_in_the_tutorial_validates_as_the_tutorial_says(
    body: str, codes: set[str]
) -> None:
    report = validate_text(body, TUTORIAL_FILE)
    assert {d.code for d in report.diagnostics} == codes, [d.format() for d in report.diagnostics]


def test_every_tutorial_block_that_looks_like_a_whole_spec_is_marked() -> None:
    marked = {body for _, body, _ in MARKED_SPECS}
    for page in sorted(TUTORIAL_DIR.glob("*.md")):
        for start, language, body in _blocks(_text(page)):
            whole = re.search(r"^name:", body, re.M) and re.search(r"^transitions:", body, re.M)
            if language == "yaml" and whole:
                assert body in marked, f"{page.name}:{start} is a whole spec but is not marked"


def test_the_tutorials_saved_spec_validates_without_findings() -> None:
    report = validate_path(TUTORIAL_SPEC)
    assert report.diagnostics == []


def test_the_tutorials_saved_spec_is_the_last_valid_spec_it_shows() -> None:
    valid = [body for _, body, codes in MARKED_SPECS if not codes]
    assert load_text(valid[-1]).data == load_file(TUTORIAL_SPEC).data


def test_the_findings_the_tutorial_prints_are_the_ones_its_draft_produces() -> None:
    draft = next(body for _, body, codes in MARKED_SPECS if codes)
    real = {
        d.format().split(" ", 2)[0] + " " + d.code
        for d in validate_text(draft, TUTORIAL_FILE).diagnostics
    }
    pattern = re.compile(rf"^({re.escape(TUTORIAL_FILE)}:\d+:\d+: [EW]\d{{3}})\b", re.M)
    shown = set(pattern.findall(_text(TUTORIAL_MD)))
    assert shown == real


# -- (d) the CLI reference shows only commands and options that exist ------------------------------


def _help(*args: str) -> str:
    result = CliRunner().invoke(cli, [*args, "--help"])
    assert result.exit_code == 0, result.output
    return result.output


def _listed(*group: str) -> set[str]:
    """The commands ``ratchet [GROUP] --help`` lists (none for a command that is no group)."""
    text = _help(*group)
    if "Commands:" not in text:
        return set()
    listing = text.split("Commands:", 1)[1]
    return {line.split()[0] for line in listing.splitlines() if line.startswith("  ")}


@functools.cache
def _commands() -> frozenset[str]:
    """Every command ``ratchet --help`` lists; a group's commands as ``GROUP COMMAND``."""
    commands: set[str] = set()
    for name in _listed():
        inner = _listed(name)
        commands |= {f"{name} {sub}" for sub in inner} if inner else {name}
    return frozenset(commands)


def _command_lines() -> Iterator[str]:
    """Every ``ratchet ...`` command line in a code block of the CLI reference."""
    for _, _, body in _blocks(_text(CLI_MD)):
        for line in body.splitlines():
            line = line.removeprefix("$ ")
            if re.match(r"ratchet(\s|$)", line):
                yield re.split(r" [>#] ", line)[0]


def _options(text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", text))


def _command_of(line: str) -> str | None:
    """The subcommand a command line runs (``GROUP COMMAND`` in a group), or None for
    ``ratchet`` itself."""
    words = [w for w in line.split()[1:] if not w.startswith(("-", "["))]
    if not words or words[0].isupper():
        return None
    if len(words) > 1 and not words[1].isupper() and f"{words[0]} {words[1]}" in _commands():
        return f"{words[0]} {words[1]}"
    return words[0]


def test_the_cli_reference_shows_every_command_ratchet_help_lists() -> None:
    shown = {_command_of(line) for line in _command_lines()} - {None}
    assert shown == _commands()


def test_every_command_the_cli_reference_shows_is_listed_by_ratchet_help() -> None:
    commands = _commands()
    for line in _command_lines():
        command = _command_of(line)
        assert command is None or command in commands, line


def test_every_option_the_cli_reference_shows_is_in_its_commands_help() -> None:
    for line in _command_lines():
        command = _command_of(line)
        help_text = _help(*(command.split() if command else []))
        for option in _options(line.split(maxsplit=1)[1] if " " in line else ""):
            assert option in _options(help_text), f"{line}: {option} is not in its --help"


def test_every_option_the_cli_reference_tabulates_is_in_its_commands_help() -> None:
    for heading, table in _tables(_text(CLI_MD)):
        if table[0][0] != "option":
            continue
        match = re.search(r"`ratchet ([\w-]+(?: [\w-]+)?)`", heading)
        help_text = _help(*(match.group(1).split() if match else []))
        for row in table[1:]:
            for option in _options(row[0]):
                assert option in _options(help_text), f"{heading}: {option}"


def _sections() -> dict[str, str]:
    """Each command's section of the CLI reference: the text under its heading
    ``## `ratchet COMMAND` ``, up to the next ``##``."""
    found = re.finditer(r"^## `ratchet ([\w -]+)`\n(.*?)(?=^## |\Z)", _text(CLI_MD), re.M | re.S)
    return {match.group(1): match.group(2) for match in found}


def test_every_option_of_a_commands_help_is_in_its_section_of_the_cli_reference() -> None:
    sections = _sections()
    for command in sorted(_commands()):
        assert command in sections, f"no section `ratchet {command}` in the CLI reference"
        documented = _options(sections[command])
        for option in sorted(_options(_help(*command.split())) - {"-h", "--help"}):
            assert option in documented, f"`ratchet {command}`: {option} is not documented"


def test_the_json_example_in_the_cli_reference_is_what_validate_prints_for_the_draft(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    draft = next(body for _, body, codes in MARKED_SPECS if codes)
    (tmp_path / "scratch").mkdir()
    (tmp_path / TUTORIAL_FILE).write_text(draft, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["validate", "--json", TUTORIAL_FILE])
    assert result.exit_code == 1
    shown = json.loads(
        next(body for _, language, body in _blocks(_text(CLI_MD)) if language == "json")
    )
    real = json.loads(result.stdout)

    def without_messages(document: dict[str, Any]) -> dict[str, Any]:
        for file in document["files"]:
            for diagnostic in file["diagnostics"]:
                assert diagnostic.pop("message")
        return document

    assert without_messages(shown) == without_messages(real)


# -- the rest of the spec reference ----------------------------------------------------------------


def _section(text: str, heading: str) -> str:
    return text.split(heading, 1)[1].split("\n#", 1)[0]


def test_the_functions_the_spec_reference_lists_are_the_ones_expressions_may_call() -> None:
    first_paragraph = _section(_text(SPEC_MD), "### Functions").strip().split("\n\n")[0]
    listed = set(re.findall(r"`(\w+)\(\)`", first_paragraph))
    assert listed == FUNCTIONS


def test_the_spec_reference_lists_the_fields_of_run_and_approval_that_are_checked() -> None:
    rows = {_code(row[0]): row[1] for row in _table_rows(_text(SPEC_MD), "variable")}
    assert set(re.findall(r"`run\.(\w+)`", rows["run"])) == RUN_FIELDS
    assert set(re.findall(r"`approval\.(\w+)`", rows["approval"])) == APPROVAL_FIELDS


def test_the_spec_reference_lists_the_variables_each_kind_of_expression_may_name() -> None:
    spec = validate_path(ROOT / "specs" / "refund.yaml").spec
    assert spec is not None
    scopes = expression_scopes(spec)
    places = {
        "business_key": "business_key",
        "effects.<name>.args.<arg>": "args",
        "transitions[].guard": "guard",
        "states.<name>.until": "until",
    }
    rows = {_code(row[0]): row[1] for row in _table_rows(_text(SPEC_MD), "place")}
    assert set(rows) == set(places)
    for place, scope in places.items():
        assert set(re.findall(r"`(\w+)`", rows[place])) == set(scopes[scope].variables), place


def test_the_spec_reference_lists_exactly_the_events_the_runner_fires() -> None:
    events = {_code(row[0]) for row in _table_rows(_text(SPEC_MD), "event")}
    assert events == RUNNER_EVENTS


def _pages() -> list[Path]:
    pages = [p for p in sorted(DOCS.rglob("*.md")) if p != LINT_CODES_MD]
    return [*pages, ROOT / "specs" / "README.md"]


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_code_a_page_mentions_exists(page: Path) -> None:
    unknown = set(re.findall(r"\b([EW]\d{3})\b", _text(page))) - set(CODES) - set(BINDING_CODES)
    assert not unknown


def _anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the headings of ``page``."""
    headings = re.findall(r"^#+ (.+)$", re.sub(r"```.*?```", "", _text(page), flags=re.S), re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_on_a_page_points_to_a_file_and_heading_that_exist(page: Path) -> None:
    text = re.sub(r"```.*?```", "", _text(page), flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        path, _, anchor = target.partition("#")
        if re.match(r"[a-z]+:", path):
            continue
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists(), f"{page.name} links to missing {target}"
        if anchor and linked.suffix == ".md":
            assert anchor in _anchors(linked), f"{page.name} links to missing heading {target}"
