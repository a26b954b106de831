"""A diff and its hazards shown: as text for a terminal, as JSON for a script, and as Markdown
ready to post as a pull-request comment.

The text is the changes, one per line (``FILE:LINE:COL: changed ...``), then the hazards as
``ratchet validate`` shows findings (``FILE:LINE:COL: CODE message``), each followed by the
runs it touches; :func:`tally` is the summary line. The Markdown is a heading with the counts,
the hazards as a table, the changed rows as a table diff (each changed row as it was and as it
is, its changed cells in bold), the other changes, the live runs, and the new version drawn as a
Mermaid state diagram (:mod:`.picture`) that GitHub renders in place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ..spec.model import COLUMNS, Row
from .basis import Hazard, plural
from .diff import SpecDiff, compensation_text
from .picture import CLASSES, mermaid

FailOn = Literal["error", "warning", "never"]

#: How many runs a hazard lists in text and Markdown (all of them are in the JSON).
SHOWN_RUNS = 10


@dataclass(frozen=True)
class DiffReport:
    """What ``ratchet diff`` found: the changes, the hazards, the live runs looked at (None:
    none were), and the mapping file given (None: none was)."""

    changes: SpecDiff
    hazards: tuple[Hazard, ...]
    live: dict[str, Any] | None = None
    mapping: str | None = None

    @property
    def errors(self) -> list[Hazard]:
        return [h for h in self.hazards if h.severity == "error"]

    @property
    def warnings(self) -> list[Hazard]:
        return [h for h in self.hazards if h.severity == "warning"]

    def failed(self, fail_on: FailOn) -> bool:
        """Whether a hazard at or above ``fail_on`` was found (``never``: never)."""
        if fail_on == "never":
            return False
        return bool(self.errors or (fail_on == "warning" and self.warnings))

    @property
    def title(self) -> str:
        old, new = self.changes.old, self.changes.new
        name = "" if new.name == old.name else f"{new.name} "
        return f"{old.name} version {old.spec_version} → {name}version {new.spec_version}"


def _file(spec: Any) -> str:
    return spec.document.file if spec.document is not None else f"<{spec.name}>"


def report_json(report: DiffReport, fail_on: FailOn) -> dict[str, Any]:
    """The report as one JSON document."""
    old, new = report.changes.old, report.changes.new
    return {
        "old": {
            "file": _file(old),
            "name": old.name,
            "spec_version": old.spec_version,
            "digest": old.digest,
        },
        "new": {
            "file": _file(new),
            "name": new.name,
            "spec_version": new.spec_version,
            "digest": new.digest,
        },
        "changes": report.changes.to_json(),
        "hazards": [h.to_json() for h in report.hazards],
        "errors": len(report.errors),
        "warnings": len(report.warnings),
        "live": report.live,
        "mapping": report.mapping,
        "fail_on": fail_on,
        "failed": report.failed(fail_on),
    }


# -- text ---------------------------------------------------------------------------------------


def _runs(hazard: Hazard) -> list[str]:
    if not hazard.runs:
        return []
    shown = [
        f"    {run}: {hazard.note(run)}" if hazard.note(run) else f"    {run}"
        for run in hazard.runs[:SHOWN_RUNS]
    ]
    if len(hazard.runs) > SHOWN_RUNS:
        shown.append(f"    ... and {len(hazard.runs) - SHOWN_RUNS} more (--json lists them all)")
    return shown


def text_lines(report: DiffReport) -> list[str]:
    """The changes, then the hazards with the runs each touches."""
    count = len(report.changes.changes)
    lines = [f"{report.title}: {plural(count, 'change') if count else 'no changes'}"]
    lines += [f"{c.where.format()}: {c.describe()}" for c in report.changes.changes]
    for hazard in report.hazards:
        lines.append(hazard.format())
        lines += _runs(hazard)
    return lines


def tally(report: DiffReport, fail_on: FailOn) -> str:
    """The summary line: the hazards, the live runs, and what the exit status says."""
    said = (
        f"{plural(len(report.errors), 'error')}, {plural(len(report.warnings), 'warning')}"
        if report.hazards
        else "no hazards"
    )
    old = report.changes.old
    if report.live is None:
        live = "no live runs looked at (--db)"
    else:
        live = f"{plural(report.live['on_old_version'], 'live run')} on version {old.spec_version}"
        others = sum(report.live["other_versions"].values())
        if others:
            live += f" ({plural(others, 'run')} on other versions not checked)"
    verdict = "fails" if report.failed(fail_on) else "passes"
    return f"ratchet: {said}; {live}; {verdict} --fail-on {fail_on}"


# -- Markdown -----------------------------------------------------------------------------------


def _md(text: str) -> str:
    """``text`` for a Markdown table cell: ``|`` and line breaks escaped everywhere, and, outside
    code spans, the characters HTML reads (no spec text can spell markup)."""
    parts = text.replace("\n", " ").split("`")
    for i, part in enumerate(parts):
        part = part.replace("\\", "\\\\").replace("|", "\\|")
        if i % 2 == 0:
            part = part.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        parts[i] = part
    return "`".join(parts)


def _cell(row: Row, column: str) -> str:
    value = row.cell(column)
    if value is None or value == ():
        return ""
    if column == "compensation":
        text = compensation_text(value) or ""
    elif isinstance(value, tuple):
        text = ", ".join(value)
    else:
        text = str(value)
    if column in ("guard", "idempotency_key") and "`" not in text:
        text = f"`{text}`"
    return _md(text)


def _rows_table(report: DiffReport) -> list[str]:
    pairs = report.changes.changed_rows
    if not pairs:
        return []
    lines = ["| | " + " | ".join(COLUMNS) + " |", "|---|" + "---|" * len(COLUMNS)]
    for pair in pairs:
        if pair.old is not None:
            mark = "removed" if pair.new is None else "was"
            cells = [_cell(pair.old, c) for c in COLUMNS]
            lines.append(f"| {mark} | " + " | ".join(cells) + " |")
        if pair.new is not None:
            mark = "added" if pair.old is None else "now"
            cells = [
                f"**{_cell(pair.new, c)}**"
                if c in pair.changed and _cell(pair.new, c)
                else _cell(pair.new, c)
                for c in COLUMNS
            ]
            lines.append(f"| {mark} | " + " | ".join(cells) + " |")
    return ["### Changed rows", "", *lines, ""]


def _hazards_table(report: DiffReport) -> list[str]:
    if not report.hazards:
        return ["### Hazards", "", "None.", ""]
    checked = report.live is not None
    head = (
        "| | code | where | runs | what it does, and what to do |"
        if checked
        else ("| | code | where | what it does, and what to do |")
    )
    lines = ["### Hazards", "", head, "|---|---|---|---|---|" if checked else "|---|---|---|---|"]
    for hazard in sorted(report.hazards, key=lambda h: h.sort_key):
        where = f"`{hazard.file}:{hazard.line}:{hazard.column}`"
        runs = f" {hazard.count} |" if checked else ""
        lines.append(
            f"| {hazard.severity} | {hazard.code} | {where} |{runs} {_md(hazard.message)} |"
        )
    touched = [h for h in report.hazards if h.runs]
    if touched:
        lines += ["", "<details><summary>The runs each hazard touches</summary>", ""]
        for hazard in sorted(touched, key=lambda h: h.sort_key):
            assert hazard.runs is not None
            shown = [
                f"`{run}`" + (f" ({_md(hazard.note(run) or '')})" if hazard.note(run) else "")
                for run in hazard.runs[:SHOWN_RUNS]
            ]
            more = len(hazard.runs) - SHOWN_RUNS
            extra = f", and {more} more" if more > 0 else ""
            lines.append(
                f"- {hazard.code} `{hazard.file}:{hazard.line}`: {', '.join(shown)}{extra}"
            )
        lines += ["", "</details>"]
    return [*lines, ""]


def _live(report: DiffReport) -> list[str]:
    old, new = report.changes.old, report.changes.new
    lines = ["### Live runs", ""]
    if report.live is None:
        lines.append(
            "None looked at: run `ratchet diff --db URL` to name the runs each hazard touches."
        )
    else:
        states = ", ".join(f"{s}: {n}" for s, n in sorted(report.live["by_state"].items()))
        count = report.live["on_old_version"]
        lines.append(
            f"{plural(count, 'live run')} on version {old.spec_version}"
            + (f" ({states})" if states else "")
            + "; "
            + plural(sum(report.live["other_versions"].values()), "run")
            + " on other versions, not checked against this change."
        )
    how = {
        "pin": "no run moves by itself; the hazards are what moving runs (a migration) would do",
        "revalidate": "a worker moves each run whose state still exists when it next takes it up",
        "cancel": "a worker cancels each run of an older version when it next takes it up",
    }[new.on_version_change]
    lines += ["", f"Under `on_version_change: {new.on_version_change}`, {how}."]
    return [*lines, ""]


def markdown(report: DiffReport) -> str:
    """The report as a pull-request comment."""
    changes = report.changes
    count = len(changes.changes)
    lines = [
        f"## `ratchet diff`: {report.title}",
        "",
        f"**{plural(len(report.errors), 'error')}, {plural(len(report.warnings), 'warning')}**"
        f" · {plural(count, 'change')}"
        + (f" · mapping `{report.mapping}`" if report.mapping else ""),
        "",
        *_hazards_table(report),
        *_rows_table(report),
    ]
    others = [c for c in changes.changes if c.thing != "row"]
    if others:
        lines += ["### Other changes", ""]
        lines += [f"- `{c.where.format()}` {_md(c.describe())}" for c in others]
        lines.append("")
    lines += _live(report)
    legend = ", ".join(f"{kind}" for kind in CLASSES)
    lines += [
        f"### Version {changes.new.spec_version}",
        "",
        f"States styled by what the change did to them ({legend}); each row added, removed "
        "or changed says so in its label.",
        "",
        "```mermaid",
        mermaid(changes).rstrip("\n"),
        "```",
    ]
    return "\n".join(lines) + "\n"
