"""The Mermaid renderer of a :class:`~ratchet_runner.review.diagram.model.Graph`: text GitHub draws.

The state view becomes a ``stateDiagram-v2``, the crash windows and the saga a ``flowchart TD``;
colours come from the DOT styles (:mod:`ratchet_runner.review.diagram.dot`). Every label is escaped
with Mermaid's entity codes (``#quot;``, ``#lt;`` …): a quote cannot end a label, a ``;`` or a ``#``
cannot end a statement, and no text can spell markup.
"""

from __future__ import annotations

from ...settings import mermaid_label
from .dot import CLUSTER_STYLES, EDGE_STYLES, NODE_STYLES
from .model import Graph, Line, Node


def _mm_lines(lines: tuple[Line, ...]) -> str:
    parts = []
    for line in lines:
        text = mermaid_label(line.text)
        if line.style in ("title", "unsafe"):
            text = f"<b>{text}</b>"
        elif line.style == "code":
            text = f"<i>{text}</i>"
        parts.append(text)
    return "<br/>".join(parts)


def _class_defs(graph: Graph) -> list[str]:
    roles = sorted({n.role for n in graph.nodes if n.role != "start"})
    lines = []
    for role in roles:
        style = NODE_STYLES[role]
        drawn = style.get("style", "")
        extra = (
            ",stroke-dasharray:5 3"
            if "dashed" in drawn
            else ",stroke-dasharray:2 2"
            if "dotted" in drawn
            else ""
        )
        width = style.get("penwidth", "1")
        lines.append(
            f"    classDef {role} fill:{style['fillcolor']},stroke:{style['color']},"
            f"stroke-width:{width}px,color:#111827{extra}"
        )
        members = ",".join(n.id for n in graph.nodes if n.role == role)
        lines.append(f"    class {members} {role}")
    return lines


def _mermaid_states(graph: Graph) -> str:
    out = ["stateDiagram-v2", "    direction TB"]
    starts = {n.id for n in graph.nodes if n.role == "start"}
    for node in graph.nodes:
        if node.id in starts:
            continue
        title, *rest = node.lines
        out.append(f'    state "{mermaid_label(title.text)}" as {node.id}')
        out.extend(f"    {node.id} : {mermaid_label(line.text)}" for line in rest)
    for edge in graph.edges:
        tail = "[*]" if edge.tail in starts else edge.tail
        label = " · ".join(mermaid_label(line.text) for line in _joined(edge.lines))
        out.append(f"    {tail} --> {edge.head}" + (f" : {label}" if label else ""))
    out.extend(f"    {final} --> [*]" for final in graph.finals)
    out.extend(_class_defs(graph))
    return "\n".join(out) + "\n"


def _joined(lines: tuple[Line, ...]) -> tuple[Line, ...]:
    """Wrapped lines of one style joined back into one line each (a state diagram's edge
    label is a single line)."""
    joined: list[Line] = []
    for line in lines:
        if joined and joined[-1].style == line.style and line.style in ("code", "note"):
            previous = joined.pop()
            joined.append(Line(f"{previous.text} {line.text}", line.style))
        else:
            joined.append(line)
    return tuple(joined)


_SHAPES = {
    "start": ('(("', '"))'),
    "window": ('[/"', '"/]'),
    "window_unsafe": ('[/"', '"/]'),
    "kept_none": ('(["', '"])'),
    "kept_impossible": ('(["', '"])'),
    "kept_none_maybe": ('(["', '"])'),
    "kept_impossible_maybe": ('(["', '"])'),
    "note": ('>"', '"]'),
}
_ARROWS = {"crash": "-.->", "fail": "-.->", "undo_failed": "-.->"}


def _mermaid_node(node: Node) -> str:
    opening, closing = _SHAPES.get(node.role, ('["', '"]'))
    label = "start" if node.role == "start" else _mm_lines(node.lines)
    return f"{node.id}{opening}{label}{closing}"


def _mermaid_flow(graph: Graph) -> str:
    out = ["flowchart TD"]
    in_cluster = {node_id for cluster in graph.clusters for node_id in cluster.nodes}
    out.extend(f"    {_mermaid_node(n)}" for n in graph.nodes if n.id not in in_cluster)
    for cluster in graph.clusters:
        out.append(f'    subgraph {cluster.id}["{_mm_lines(cluster.lines)}"]')
        out.append("        direction TB")
        out.extend(f"        {_mermaid_node(graph.node(node_id))}" for node_id in cluster.nodes)
        out.append("    end")
    link_styles = []
    for i, edge in enumerate(graph.edges):
        arrow = _ARROWS.get(edge.role, "-->")
        label = _mm_lines(edge.lines)
        out.append(
            f'    {edge.tail} {arrow}|"{label}"| {edge.head}'
            if label
            else f"    {edge.tail} {arrow} {edge.head}"
        )
        style = EDGE_STYLES[edge.role]
        link_styles.append(
            f"    linkStyle {i} stroke:{style['color']},stroke-width:{style.get('penwidth', '1')}px"
        )
    out.extend(_class_defs(graph))
    for cluster in graph.clusters:
        style = CLUSTER_STYLES[cluster.role]
        fill = style.get("fillcolor", "#ffffff")
        out.append(f"    style {cluster.id} fill:{fill},stroke:{style['color']}")
    out.extend(link_styles)
    return "\n".join(out) + "\n"


def to_mermaid(graph: Graph) -> str:
    """Mermaid text GitHub renders: ``stateDiagram-v2`` for states, ``flowchart TD`` else."""
    return _mermaid_states(graph) if graph.kind == "states" else _mermaid_flow(graph)
