"""The transition table of a spec, as Markdown or HTML, for a pull-request description."""

from __future__ import annotations

import html
from typing import Any

from ..spec.model import COLUMNS, Compensation, Row, Spec


def _cell(value: Any) -> str:
    if value is None or value == ():
        return ""
    if isinstance(value, Compensation):
        if value.kind == "effect":
            return str(value.effect)
        return f"{value.kind}: {value.reason}" if value.reason else value.kind
    if isinstance(value, tuple):
        return ", ".join(str(v) for v in value)
    return str(value)


def cells(row: Row) -> list[str]:
    """The row's eleven cells as text, in column order."""
    return [_cell(row.cell(column)) for column in COLUMNS]


def _md_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def to_markdown(spec: Spec) -> str:
    title = f"### `{spec.name}` v{spec.spec_version} (policy {spec.policy_version})"
    lines = [title, "", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in spec.transitions:
        parts = []
        for column, text in zip(COLUMNS, cells(row), strict=True):
            text = _md_escape(text)
            if text and column in ("guard", "idempotency_key"):
                text = f"`{text}`" if "`" not in text else text
            parts.append(text)
        lines.append("| " + " | ".join(parts) + " |")
    return "\n".join(lines) + "\n"


def to_html(spec: Spec) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in COLUMNS)
    body = "\n".join(
        "<tr>" + "".join(f"<td>{html.escape(text)}</td>" for text in cells(row)) + "</tr>"
        for row in spec.transitions
    )
    caption = html.escape(f"{spec.name} v{spec.spec_version} (policy {spec.policy_version})")
    return (
        f"<table>\n<caption>{caption}</caption>\n<thead><tr>{head}</tr></thead>\n"
        f"<tbody>\n{body}\n</tbody>\n</table>\n"
    )
