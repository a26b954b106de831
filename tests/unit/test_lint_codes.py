"""Every diagnostic code is proved by a failing and a fixed example, and documented from them.

``tests/lint_examples/CODE.fail.yaml`` produces CODE exactly on the lines marked ``# <- CODE``
at their end. A marker on a line of its own points at the next line that holds YAML (for places
where YAML allows no comment); in a file with no YAML at all, it points at itself.
``tests/lint_examples/CODE.fixed.yaml`` is the same spec with the problem fixed: it validates
cleanly. ``docs/reference/lint-codes.md`` has one section per code whose excerpts and output are
checked against those files, so the reference cannot drift from what the validator does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from ratchet_runner.errors import Diagnostic
from ratchet_runner.spec.codes import CODES, is_warning
from ratchet_runner.spec.loader import MAX_BYTES
from ratchet_runner.spec.validate import validate_path, validate_text

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "tests" / "lint_examples"
REFERENCE = ROOT / "docs" / "reference" / "lint-codes.md"

#: Codes with no committed failing file, and why; each is proved by a test below instead.
NO_FAIL_FILE = {
    "E100": "an unreadable spec is a missing path or a directory, which a file cannot be",
    "E102": "a spec over the 1 MiB size cap would bloat the repository; the test writes one",
}
FAILING = [code for code in CODES if code not in NO_FAIL_FILE]
MARKER = re.compile(r"#\s*<-\s*([EW][0-9]{3})\b")
#: Lines an excerpt may use to show that lines were left out.
ELISION = "# ..."


def display(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def read(path: Path) -> str:
    """A file's text; the E101 example is deliberately not UTF-8 (it is Windows-1252)."""
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("cp1252")


def marked_lines(text: str, code: str) -> set[int]:
    lines = text.splitlines()
    marked: set[int] = set()
    for number, line in enumerate(lines, 1):
        match = MARKER.search(line)
        if match is None or match.group(1) != code:
            continue
        if line[: match.start()].strip():  # something precedes the marker: this line
            marked.add(number)
            continue
        following = (
            n
            for n in range(number + 1, len(lines) + 1)
            if lines[n - 1].strip() and not lines[n - 1].lstrip().startswith("#")
        )
        marked.add(next(following, number))
    return marked


def diagnostics(path: Path) -> list[Diagnostic]:
    return validate_path(path, display(path)).diagnostics


# -- the examples -------------------------------------------------------------------------------


@pytest.mark.parametrize("code", CODES)
def test_every_code_has_a_fixed_example_and_a_failing_one_unless_exempt(code: str) -> None:
    assert (EXAMPLES / f"{code}.fixed.yaml").is_file()
    assert (EXAMPLES / f"{code}.fail.yaml").is_file() == (code not in NO_FAIL_FILE)


def test_only_unreadable_and_oversized_files_are_exempt_from_a_failing_example() -> None:
    assert set(NO_FAIL_FILE) == {"E100", "E102"}


def test_the_examples_folder_holds_nothing_but_examples_of_known_codes() -> None:
    expected = {f"{code}.fixed.yaml" for code in CODES} | {f"{code}.fail.yaml" for code in FAILING}
    assert {path.name for path in EXAMPLES.iterdir()} == expected


@pytest.mark.parametrize("code", FAILING)
def test_a_failing_example_marks_only_its_own_code(code: str) -> None:
    text = read(EXAMPLES / f"{code}.fail.yaml")
    assert marked_lines(text, code), f"mark the offending line with '# <- {code}'"
    assert set(MARKER.findall(text)) == {code}


@pytest.mark.parametrize("code", FAILING)
def test_a_failing_example_reports_its_code_exactly_on_the_marked_lines(code: str) -> None:
    path = EXAMPLES / f"{code}.fail.yaml"
    found = diagnostics(path)
    if code[1] in "12":  # loader and schema codes stop validation: theirs is the first finding
        assert found[0].code == code, found[0].format()
    lines = {d.line for d in found if d.code == code}
    assert lines == marked_lines(read(path), code), [d.format() for d in found]
    assert all(d.line >= 1 and d.column >= 1 for d in found)


@pytest.mark.parametrize("code", CODES)
def test_a_fixed_example_validates_cleanly(code: str) -> None:
    path = EXAMPLES / f"{code}.fixed.yaml"
    report = validate_path(path, display(path))
    assert report.ok(strict=True), [d.format() for d in report.diagnostics]
    assert code not in {d.code for d in report.diagnostics}
    assert not MARKER.search(read(path)), "a fixed example marks no line"


def test_a_missing_spec_file_is_reported_as_e100_on_line_one(tmp_path: Path) -> None:
    [found] = validate_path(tmp_path / "refnd.yaml", "specs/refnd.yaml").diagnostics
    assert (found.code, found.line, found.column) == ("E100", 1, 1)


def test_a_directory_given_as_a_spec_is_reported_as_e100(tmp_path: Path) -> None:
    [found] = validate_path(tmp_path, "specs/").diagnostics
    assert found.code == "E100"


def oversized(tmp_path: Path) -> Path:
    """The E102 fixed example, grown one byte past the cap by a trailing comment."""
    text = (EXAMPLES / "E102.fixed.yaml").read_bytes()
    path = tmp_path / "big.yaml"
    path.write_bytes(text + b"#" * (MAX_BYTES - len(text)) + b"\n")
    assert path.stat().st_size == MAX_BYTES + 1
    return path


def test_a_spec_one_byte_over_the_size_cap_is_reported_as_e102(tmp_path: Path) -> None:
    path = oversized(tmp_path)
    [found] = validate_path(path, "big.yaml").diagnostics
    assert (found.code, found.line, found.column) == ("E102", 1, 1)
    [in_memory] = validate_text(path.read_bytes(), "big.yaml").diagnostics
    assert in_memory.code == "E102"


def test_the_size_cap_itself_is_allowed(tmp_path: Path) -> None:
    text = (EXAMPLES / "E102.fixed.yaml").read_bytes()
    path = tmp_path / "at_cap.yaml"
    path.write_bytes(text + b"#" * (MAX_BYTES - len(text) - 1) + b"\n")
    assert path.stat().st_size == MAX_BYTES
    assert validate_path(path).ok(strict=True)


# -- the reference ------------------------------------------------------------------------------

HEADING = re.compile(r"^## ([EW][0-9]{3}) — (.+)$", re.MULTILINE)
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Section:
    code: str
    title: str
    body: str

    def blocks(self, language: str) -> list[str]:
        return [text for lang, text in FENCE.findall(self.body) if lang == language]

    def field(self, label: str) -> str:
        match = re.search(
            rf"^\*\*{re.escape(label)}\*\*\s*(.+?)(?:\n\n|\Z)", self.body, re.S | re.M
        )
        assert match is not None, f"{self.code}: no '**{label}**' paragraph"
        return " ".join(match.group(1).split())


def sections() -> list[Section]:
    text = REFERENCE.read_text(encoding="utf-8")
    heads = list(HEADING.finditer(text))
    ends = [h.start() for h in heads[1:]] + [len(text)]
    found = []
    for head, end in zip(heads, ends, strict=True):
        body = text[head.end() : end]
        body = body.split("\n## ", 1)[0]  # a non-code section after the last code ends it
        found.append(Section(head.group(1), head.group(2), body))
    return found


def section(code: str) -> Section:
    return next(s for s in sections() if s.code == code)


def normalise(line: str) -> str:
    return " ".join(line.split())


def missing_from(excerpt: str, text: str) -> str | None:
    """The first excerpt line that does not appear, in order, among ``text``'s lines."""
    lines = [normalise(line) for line in text.splitlines()]
    at = 0
    for line in excerpt.splitlines():
        wanted = normalise(line)
        if not wanted or wanted == ELISION:
            continue
        try:
            at = lines.index(wanted, at) + 1
        except ValueError:
            return line
    return None


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    kept = "".join(c for c in heading.lower() if c.isalnum() or c in " -_")
    return kept.replace(" ", "-")


def test_the_reference_has_one_section_per_code_in_code_order() -> None:
    assert [s.code for s in sections()] == list(CODES)


@pytest.mark.parametrize("code", CODES)
def test_a_section_is_headed_by_the_codes_title(code: str) -> None:
    assert section(code).title == CODES[code]


def test_the_summary_table_lists_every_code_with_its_severity_title_and_link() -> None:
    text = REFERENCE.read_text(encoding="utf-8")
    rows = re.findall(r"^\| \[([EW][0-9]{3})\]\(#([^)]+)\) \| (\w+) \| (.+?) \|$", text, re.M)
    assert [code for code, *_ in rows] == list(CODES)
    for code, anchor, severity, title in rows:
        assert severity == ("warning" if is_warning(code) else "error")
        assert title == CODES[code]
        assert anchor == slug(f"{code} — {CODES[code]}")


def test_every_relative_link_in_the_reference_points_to_a_file_and_heading_that_exist() -> None:
    text = re.sub(r"```.*?```", "", REFERENCE.read_text(encoding="utf-8"), flags=re.S)
    anchors = {slug(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        path, _, anchor = target.partition("#")
        if re.match(r"[a-z]+:", path):
            continue
        assert (REFERENCE.parent / path).exists() if path else anchor in anchors, target


@pytest.mark.parametrize("code", CODES)
def test_a_section_states_the_codes_severity(code: str) -> None:
    assert section(code).field("Severity:") == ("warning" if is_warning(code) else "error")


@pytest.mark.parametrize("code", CODES)
def test_a_section_says_why_the_problem_matters_in_a_paragraph(code: str) -> None:
    assert len(section(code).field("Why it matters.").split()) >= 25


@pytest.mark.parametrize("code", FAILING)
def test_a_sections_failing_excerpt_comes_from_the_failing_example(code: str) -> None:
    [failing, _] = section(code).blocks("yaml")
    assert f"# <- {code}" in failing, "the excerpt shows the marked line"
    assert missing_from(failing, read(EXAMPLES / f"{code}.fail.yaml")) is None


@pytest.mark.parametrize("code", CODES)
def test_a_sections_fixed_excerpt_comes_from_the_fixed_example(code: str) -> None:
    fixed = section(code).blocks("yaml")[-1]
    assert fixed.strip()
    assert missing_from(fixed, read(EXAMPLES / f"{code}.fixed.yaml")) is None


@pytest.mark.parametrize("code", FAILING)
def test_a_sections_output_is_what_validating_the_failing_example_prints(code: str) -> None:
    [output] = section(code).blocks("text")
    found = [d.format() for d in diagnostics(EXAMPLES / f"{code}.fail.yaml") if d.code == code]
    assert output.splitlines() == found


def test_the_e100_output_is_what_a_missing_file_prints() -> None:
    [output] = section("E100").blocks("text")
    found = validate_path(ROOT / "specs" / "refnd.yaml", "specs/refnd.yaml").diagnostics
    assert output.splitlines() == [d.format() for d in found]


def test_the_e102_output_is_what_an_oversized_file_prints(tmp_path: Path) -> None:
    [output] = section("E102").blocks("text")
    found = validate_path(oversized(tmp_path), "big.yaml").diagnostics
    assert output.splitlines() == [d.format() for d in found]


# -- lint behaviour the examples do not show ----------------------------------------------------

REFUND = EXAMPLES / "E501.fixed.yaml"
BOOKING = EXAMPLES / "E509.fixed.yaml"


def lint_codes(base: Path, *edits: tuple[str, str]) -> list[tuple[str, int]]:
    text = read(base)
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return [(d.code, d.line) for d in validate_text(text, "t.yaml").diagnostics]


def test_an_unguarded_row_listed_before_a_guarded_one_is_ambiguous() -> None:
    found = lint_codes(
        REFUND,
        (
            "  - {state: proposed, event: approve,",
            "  - {state: proposed, event: approve, next_state: needs_person}\n"
            "  - {state: proposed, event: approve,",
        ),
    )
    assert found == [("E405", 39)]


def test_rows_with_exclusive_guards_are_not_ambiguous() -> None:
    assert lint_codes(EXAMPLES / "E405.fixed.yaml") == []


def test_a_loop_with_no_way_to_a_terminal_state_is_a_state_with_no_way_out() -> None:
    found = lint_codes(
        REFUND,
        ("resumes_on: [approve, reject]}", "resumes_on: [approve, reject, remind]}"),
        (
            "  refunded:     {kind: success}\n",
            "  refunded:     {kind: success}\n  nudge: {kind: step}\n",
        ),
        (
            "  - {state: proposed, event: reject,",
            "  - {state: proposed, event: remind, next_state: nudge}\n"
            "  - {state: nudge, event: next, next_state: nudging}\n"
            "  - {state: nudging, event: next, next_state: nudge}\n"
            "  - {state: proposed, event: reject,",
        ),
        (
            "  rejected:     {kind: cancelled}\n",
            "  rejected:     {kind: cancelled}\n  nudging: {kind: step}\n",
        ),
    )
    assert sorted(found) == [("E402", 35), ("E402", 37)]


def test_a_run_that_starts_in_the_state_of_an_effect_needing_approval_never_records_it() -> None:
    found = lint_codes(REFUND, ("start: proposed", "start: refunding"))
    assert ("E515", 6) in found


def test_a_compensating_effect_retried_by_two_layers_is_reported_too() -> None:
    found = lint_codes(
        BOOKING, ("  airline: {kind: travel}", "  airline: {kind: travel, attempts: 2}")
    )
    assert [code for code, _ in found].count("E507") == 2  # hold_flight and release_flight


def test_a_compensate_state_makes_a_spec_a_saga_before_any_step_names_a_compensation() -> None:
    found = lint_codes(BOOKING, ("     compensation: release_flight}", "     }"))
    assert ("E509", 35) in found


def test_a_key_naming_each_argument_by_its_input_path_leaves_none_out() -> None:
    key = "    idempotency_key: [business_key, effect, args]"
    assert lint_codes(REFUND, (key, f"{key[:-5]}input.order, input.amount]")) == []


def test_a_misspelt_effect_does_not_also_make_its_outcome_rows_impossible() -> None:
    assert [c for c, _ in lint_codes(EXAMPLES / "E302.fail.yaml")] == ["E302"]


def test_a_row_out_of_a_terminal_state_is_reported_once_as_e404() -> None:
    assert [c for c, _ in lint_codes(EXAMPLES / "E404.fail.yaml")] == ["E404"]


def test_a_row_claiming_the_wrong_retry_owner_is_reported_at_its_retry_owner() -> None:
    found = lint_codes(REFUND, ("    retry_owner: runner", "    retry_owner: adapter"))
    assert found == [("E507", 49)]


def test_three_layers_of_three_attempts_are_27_calls() -> None:
    text = read(REFUND).replace(
        "  payments: {kind: payments}",
        "  payments: {kind: payments, attempts: 3, upstream_attempts: 3}",
    )
    found = validate_text(text, "t.yaml").diagnostics
    assert {d.code for d in found} == {"E507", "W508"}
    assert "27 times" in next(d.message for d in found if d.code == "W508")


@pytest.mark.parametrize("item", ["now", "attempt", "random", "uuid", "run.attempts"])
def test_a_key_from_a_value_that_changes_between_attempts_is_unstable(item: str) -> None:
    key = "    idempotency_key: [business_key, effect, args]"
    assert lint_codes(REFUND, (key, f"{key[:-1]}, {item}]")) == [("E502", 47)]


@pytest.mark.parametrize("event", ["trigger", "to_refunded", "may_approve", "is_done", "state"])
def test_an_event_named_like_a_machine_or_model_attribute_collides(event: str) -> None:
    found = lint_codes(
        REFUND,
        ("resumes_on: [approve, reject]}", f"resumes_on: [{event}, reject]}}"),
        ("{state: proposed, event: approve,", f"{{state: proposed, event: {event},"),
    )
    assert found == [("E407", 39)]


def test_a_runner_event_used_as_a_signal_collides() -> None:
    found = lint_codes(
        REFUND, ("resumes_on: [approve, reject]}", "resumes_on: [approve, reject, expired]}")
    )
    assert ("E407", 32) in found


def test_a_misspelt_next_state_is_one_e301_with_a_suggestion_not_also_a_w401() -> None:
    """The state the row meant stays reachable: only the typo is reported."""
    text = (ROOT / "specs" / "refund.yaml").read_text(encoding="utf-8")
    assert text.count("next_state: refunded,") == 1
    found = validate_text(text.replace("next_state: refunded,", "next_state: refundd,"), "x.yaml")
    assert [(d.code, d.message) for d in found.diagnostics] == [
        (
            "E301",
            "unknown state 'refundd' (declare it under states:); did you mean 'refunded'?",
        )
    ]


SHIPPED = ROOT / "specs"


def without_version_policy(text: str) -> str:
    """``text`` with any written ``on_version_change`` line taken out: the default applies."""
    return re.sub(r"^on_version_change:.*\n", "", text, flags=re.M)


def line_holding(text: str, wanted: str) -> int:
    [number] = [n for n, line in enumerate(text.splitlines(), 1) if line == wanted]
    return number


def an_approved_undo(text: str) -> str:
    """The booking saga with its hotel release asking for an approval (bound both ways, so no
    reference check objects): ``release_hotel`` runs only as a compensation."""
    release = "    args: {hold_id: receipts.hold_hotel.hold_id}\n"
    assert text.count(release) == 1
    text = text.replace(release, "    approval: release_approval\n" + release)
    return text.replace(
        "\noperators:",
        "  release_approval:\n"
        "    description: Release this hotel hold?\n"
        "    effect: release_hotel\n"
        "    binds: all\n"
        "    roles: [travel_ops]\n"
        "    expires_after: 2h\n"
        "\noperators:",
        1,
    )


def test_an_approval_on_an_effect_that_only_ever_undoes_a_change_is_refused() -> None:
    """A compensation runs without asking for a decision: an approval on it would be ignored."""
    text = an_approved_undo((SHIPPED / "booking.yaml").read_text(encoding="utf-8"))
    found = validate_text(text, "t.yaml").diagnostics
    assert [(d.code, d.line) for d in found if d.severity == "error"] == [
        ("E519", line_holding(text, "    effect: release_hotel"))
    ]
    [message] = [d.message for d in found if d.code == "E519"]
    assert "'release_approval' is on 'release_hotel'" in message
    assert "would run without one" in message
    assert "pause state" in message
    assert "operator_queue state" in message


def test_an_approval_on_an_undo_the_undo_does_not_name_back_is_one_e519_not_also_an_e303() -> None:
    """E303 would say to add the approval to the effect, which E519 then refuses: one finding,
    with the advice that holds."""
    text = an_approved_undo((SHIPPED / "booking.yaml").read_text(encoding="utf-8"))
    text = text.replace("    approval: release_approval\n", "", 1)
    found = validate_text(text, "t.yaml").diagnostics
    assert [(d.code, d.line) for d in found if d.severity == "error"] == [
        ("E519", line_holding(text, "    effect: release_hotel"))
    ]


def test_an_approval_on_a_compensation_that_also_runs_forward_is_not_refused() -> None:
    """On its forward row the approval is asked for and honoured, so it is not ignored."""
    text = (SHIPPED / "booking.yaml").read_text(encoding="utf-8")
    assert text.count("compensation: release_hotel}") == 1
    text = text.replace("compensation: release_hotel}", "compensation: confirm_itinerary}")
    report = validate_text(text, "t.yaml")
    assert "E519" not in {d.code for d in report.diagnostics}
    assert report.errors == []


@pytest.mark.parametrize(
    ("spec", "effect", "kept"),
    [
        ("refund.yaml", "refund_approval", "none: a refund is money returned"),
        ("booking.yaml", "itinerary_approval", "impossible: an itinerary issued stays issued"),
    ],
)
def test_an_approved_change_never_undone_is_warned_about_under_the_default_pin(
    spec: str, effect: str, kept: str
) -> None:
    text = without_version_policy((SHIPPED / spec).read_text(encoding="utf-8"))
    text = re.sub(r'compensation: "none: [^"]*"', f'compensation: "{kept}"', text)
    found = validate_text(text, "t.yaml").diagnostics
    assert [(d.code, d.line) for d in found] == [
        ("W520", line_holding(text, f"    approval: {effect}"))
    ]
    assert "policy_version" in found[0].message
    assert "on_version_change: revalidate" in found[0].message


@pytest.mark.parametrize("policy", ["pin", "revalidate", "cancel"])
def test_an_on_version_change_written_out_is_a_choice_and_not_warned_about(policy: str) -> None:
    text = without_version_policy((SHIPPED / "refund.yaml").read_text(encoding="utf-8"))
    text = text.replace("policy_version: 1\n", f"policy_version: 1\non_version_change: {policy}\n")
    report = validate_text(text, "t.yaml")
    assert report.diagnostics == []
    assert report.spec is not None
    assert report.spec.on_version_change == policy


def test_the_default_pin_is_still_pin_whether_written_or_not() -> None:
    """Whether it was written changes what the lint says, never what the runner does."""
    text = without_version_policy((SHIPPED / "refund.yaml").read_text(encoding="utf-8"))
    left_out = validate_text(text, "t.yaml").spec
    written = validate_text(
        text.replace("policy_version: 1\n", "policy_version: 1\non_version_change: pin\n")
    ).spec
    assert left_out is not None
    assert written is not None
    assert left_out.on_version_change == written.on_version_change == "pin"
    assert (left_out.on_version_change_written, written.on_version_change_written) == (False, True)


def test_an_approved_change_the_saga_can_undo_is_not_warned_about() -> None:
    text = without_version_policy((SHIPPED / "booking.yaml").read_text(encoding="utf-8"))
    last = 'compensation: "none: the last step; nothing after it can fail"'
    assert text.count(last) == 1
    codes = {
        d.code
        for d in validate_text(
            text.replace(last, "compensation: release_hotel"), "t.yaml"
        ).diagnostics
    }
    assert "W520" not in codes


#: Every spec the repository ships or runs: the workflows, the test fixtures, and the specs of
#: the benchmarks and of the examples. Each validates with --strict.
SHIPPED_SPECS = sorted(
    [
        *SHIPPED.glob("*.yaml"),
        *(ROOT / "tests" / "fixtures").glob("*.yaml"),
        *(ROOT / "bench" / "specs").glob("*.yaml"),
        *(ROOT / "examples").rglob("*.yaml"),
    ]
)


@pytest.mark.parametrize("path", SHIPPED_SPECS, ids=display)
def test_every_shipped_spec_validates_without_a_warning(path: Path) -> None:
    assert [d.format() for d in diagnostics(path)] == []


def test_a_check_arriving_is_a_warning_until_its_version_and_the_docs_list_it() -> None:
    """A new check that would reject a spec valid yesterday is a warning for one minor version
    first; once the package reaches the version named, it must be promoted (this test fails
    until it is, so the release cannot forget it)."""
    from ratchet_runner.settings import VERSION
    from ratchet_runner.spec.codes import ARRIVING, CODES

    page = (ROOT / "docs" / "reference" / "lint-codes.md").read_text(encoding="utf-8")
    table = page.split("## How a check changes level", 1)[1].split("## ", 1)[0]
    listed = re.findall(r"^\| `(W\d{3})` \| `(E\d{3})` \| ([\d.]+) \|$", table, re.M)
    assert sorted(listed) == sorted((w, e, v) for w, (e, v) in ARRIVING.items())
    current = tuple(int(p) for p in re.findall(r"\d+", VERSION)[:3])
    for warning, (error, version) in ARRIVING.items():
        assert warning in CODES
        assert error not in CODES
        assert warning[1:] == error[1:]
        assert current < tuple(int(p) for p in version.split(".")), (
            f"{warning} was to become {error} in {version}: promote it"
        )
