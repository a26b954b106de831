"""Diagrams of a spec for review: the state graph, the crash windows, the saga plan.

Three layers, as in ``transitions``' diagrams, so that each can be tested alone::

    Spec ──► a view ──► Graph (model.py: plain dataclasses: nodes, edges, clusters, legend)
             states.py   states_graph          ──► dot.py      to_dot / dot_source (graphviz)
             crash.py    crash_windows_graph                   render_bytes (the dot program)
             saga.py     saga_graph            ──► mermaid.py  to_mermaid

The DOT and Mermaid texts are pure functions of the spec (generated node IDs, one font, one
direction, no timestamps), so they are compared as golden files; drawing SVG, PNG or PDF needs
Graphviz's ``dot`` program, and :class:`~ratchet_runner.errors.GraphvizNotFound` says how to
install it.
"""

from __future__ import annotations

from pathlib import Path

from ...errors import Diagnostic, GraphvizNotFound, SpecError, UsageError
from ...settings import DIAGRAM_IMAGE_FORMATS, DIAGRAM_TEXT_FORMATS, DIAGRAM_VIEWS
from ...spec.lint import lint
from ...spec.model import Spec
from ...spec.validate import validate_path
from .crash import (
    UNSAFE_CODES,
    compensation_rows,
    crash_windows_graph,
    effect_rows,
    findings,
    undo_findings,
)
from .dot import dot_source, render_bytes
from .mermaid import to_mermaid
from .model import Graph
from .saga import saga_graph
from .states import states_graph

__all__ = [
    "FORMATS",
    "IMAGE_FORMATS",
    "TEXT_FORMATS",
    "UNSAFE_CODES",
    "VIEWS",
    "Graph",
    "build",
    "drawn_findings",
    "effect_names",
    "format_for",
    "image",
    "load",
    "text",
]

VIEWS = DIAGRAM_VIEWS
TEXT_FORMATS = DIAGRAM_TEXT_FORMATS
IMAGE_FORMATS = DIAGRAM_IMAGE_FORMATS
FORMATS = TEXT_FORMATS + IMAGE_FORMATS
#: The format an output file's suffix implies when no format is given.
SUFFIXES = {
    ".dot": "dot",
    ".gv": "dot",
    ".mmd": "mermaid",
    ".mermaid": "mermaid",
    ".svg": "svg",
    ".png": "png",
    ".pdf": "pdf",
}
#: PNGs are drawn at this resolution: readable on a page, a few hundred kilobytes at most.
PNG_DPI = 110


def effect_names(spec: Spec) -> list[str]:
    """The effects that rows perform, in table order, then the compensating effects they
    register (what ``--effect`` may name)."""
    return [*_forward_names(spec), *_undo_names(spec)]


def _forward_names(spec: Spec) -> list[str]:
    return list(dict.fromkeys(effect.name for _, effect in effect_rows(spec)))


def _undo_names(spec: Spec) -> list[str]:
    forward = set(_forward_names(spec))
    return [
        name
        for name in dict.fromkeys(undo.name for _, undo in compensation_rows(spec))
        if name not in forward
    ]


def drawn_findings(spec: Spec, diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    """The findings the crash-windows view draws on an effect row or on a compensating effect
    (in the unsafe colour)."""
    drawn = {d for row, effect in effect_rows(spec) for d in findings(row, effect, diagnostics)}
    drawn |= {d for _, undo in compensation_rows(spec) for d in undo_findings(undo, diagnostics)}
    return sorted(drawn)


def load(path: str | Path, view: str) -> tuple[Spec, list[Diagnostic]]:
    """The spec at ``path`` and the findings ``view`` draws; raises :class:`SpecError` when it
    has errors the view cannot draw.

    The crash-windows view exists to show what is unsafe, so it draws a spec whose only errors
    are effect-safety findings on its effect rows (the caller reports them, and the spec stays
    invalid); every other view, like ``ratchet table``, needs a valid spec."""
    report = validate_path(path)
    if report.spec is None:
        raise SpecError(report.diagnostics)
    drawn = drawn_findings(report.spec, report.diagnostics) if view == "crash-windows" else []
    blocking = [d for d in report.errors if d not in drawn]
    if blocking:
        raise SpecError(report.errors)
    return report.spec, drawn


def build(
    spec: Spec,
    view: str,
    *,
    effect: str | None = None,
    diagnostics: list[Diagnostic] | None = None,
) -> Graph:
    """The plain graph of ``view`` (one of :data:`VIEWS`). ``diagnostics`` are the findings to
    draw on crash windows; by default the spec is linted for them. ``effect`` limits the
    crash-windows view to the rows that perform it, or to a compensating effect's own steps (a
    :class:`UsageError` if it is neither)."""
    if effect is not None and view != "crash-windows":
        raise UsageError("--effect applies to --view crash-windows only")
    if effect is not None and effect not in effect_names(spec):
        performed = ", ".join(_forward_names(spec)) or "none"
        undoing = ", ".join(_undo_names(spec))
        also = f"; the compensating effects they register: {undoing}" if undoing else ""
        raise UsageError(
            f"no row performs {effect!r}, nor registers it as an undo; the effects rows "
            f"perform: {performed}{also}"
        )
    if view == "states":
        return states_graph(spec)
    if view == "saga":
        return saga_graph(spec)
    if view == "crash-windows":
        if diagnostics is None:
            # Only a spec built from a document can be linted (a hand-built one has no lines).
            diagnostics = lint(spec) if spec.document is not None else []
        return crash_windows_graph(spec, diagnostics, effect)
    raise UsageError(f"unknown view {view!r}: use one of {', '.join(VIEWS)}")


def output_format(fmt: str | None, output: str | None) -> str:
    """The format to draw in: ``fmt``, else the one ``output``'s suffix names, else DOT; a
    :class:`UsageError` for an image format with no file to draw it into."""
    chosen = fmt or format_for(output) or "dot"
    if chosen in IMAGE_FORMATS and not output:
        raise UsageError(
            f"{chosen} is drawn into a file: give -o FILE, or print text with --format dot or "
            "--format mermaid"
        )
    return chosen


def format_for(output: str | None) -> str | None:
    """The format ``output``'s suffix names (``.svg`` → ``svg``), if any."""
    return SUFFIXES.get(Path(output).suffix.lower()) if output else None


def render(graph: Graph, fmt: str) -> bytes:
    """The graph in ``fmt``: DOT or Mermaid text (UTF-8), or an image Graphviz draws."""
    return image(graph, fmt) if fmt in IMAGE_FORMATS else text(graph, fmt).encode("utf-8")


def text(graph: Graph, fmt: str) -> str:
    """DOT or Mermaid text (byte-for-byte the same for the same spec)."""
    if fmt == "dot":
        return dot_source(graph)
    if fmt == "mermaid":
        return to_mermaid(graph)
    raise UsageError(f"{fmt!r} is not a text format: use one of {', '.join(TEXT_FORMATS)}")


def image(graph: Graph, fmt: str) -> bytes:
    """The graph drawn by Graphviz's ``dot`` as SVG, PNG or PDF."""
    if fmt not in IMAGE_FORMATS:
        raise UsageError(f"{fmt!r} is not an image format: use one of {', '.join(IMAGE_FORMATS)}")
    import graphviz

    try:
        return render_bytes(graph, fmt, PNG_DPI)
    except graphviz.ExecutableNotFound:
        raise GraphvizNotFound() from None
