"""Renderers of a :class:`~runner.diagram_model.Graph`: DOT (through the ``graphviz`` package) and
Mermaid text.

Both are pure functions of the graph, so their text is byte-for-byte the same on every run: one
font (Helvetica), one direction (top to bottom), no timestamps, node IDs as the view generated
them. Every label is escaped for its syntax: DOT labels are HTML-like labels built from
:func:`html.escape` d text; Mermaid labels use Mermaid's entity codes (``#quot;`` and friends).
"""

from __future__ import annotations

import html
from typing import Any

import graphviz

from .diagram_model import Edge, Graph, LegendEntry, Line, Node

FONT = "Helvetica"
RED = "#b91c1c"

#: Node roles → DOT attributes. ``fillcolor`` and ``color`` also style Mermaid's classes.
NODE_STYLES: dict[str, dict[str, str]] = {
    # states view
    "start": {
        "shape": "circle",
        "style": "filled",
        "fillcolor": "#111827",
        "color": "#111827",
        "width": "0.2",
        "fixedsize": "true",
    },
    "step": {"fillcolor": "#e8f0fe", "color": "#1d4ed8"},
    "pause": {
        "fillcolor": "#fff4ce",
        "color": "#b45309",
        "style": "rounded,filled,dashed",
        "penwidth": "1.6",
    },
    "wait": {
        "fillcolor": "#fdf2d0",
        "color": "#92400e",
        "style": "rounded,filled,dotted",
        "penwidth": "1.6",
    },
    "compensate": {"fillcolor": "#ffedd5", "color": "#c2410c"},
    "success": {"fillcolor": "#dcfce7", "color": "#15803d", "penwidth": "3"},
    "cancelled": {"fillcolor": "#f3f4f6", "color": "#4b5563", "penwidth": "3"},
    "compensated": {"fillcolor": "#fde8d0", "color": "#c2410c", "penwidth": "3"},
    "operator_queue": {
        "fillcolor": "#f3e8ff",
        "color": "#7e22ce",
        "penwidth": "3",
        "style": "filled",
    },
    # crash-windows view
    "entry": {"fillcolor": "#ffffff", "color": "#4b5563"},
    "seq": {"fillcolor": "#e8f0fe", "color": "#1d4ed8", "style": "filled"},
    "seq_unsafe": {"fillcolor": "#fee2e2", "color": RED, "style": "filled", "penwidth": "2.5"},
    "window": {"shape": "note", "fillcolor": "#fffbeb", "color": "#b45309", "style": "filled"},
    "window_unsafe": {
        "shape": "note",
        "fillcolor": "#fee2e2",
        "color": RED,
        "style": "filled",
        "penwidth": "2.5",
    },
    "moved_on": {"fillcolor": "#dcfce7", "color": "#15803d"},
    # saga view
    "forward": {"fillcolor": "#e8f0fe", "color": "#1d4ed8", "style": "filled"},
    "undo": {"fillcolor": "#ffedd5", "color": "#c2410c", "style": "filled"},
    "kept_none": {
        "fillcolor": "#f3f4f6",
        "color": "#4b5563",
        "style": "filled,dashed",
        "penwidth": "1.6",
    },
    "kept_impossible": {
        "fillcolor": "#fce7f3",
        "color": "#be185d",
        "style": "filled,dashed",
        "penwidth": "2.5",
    },
    "note": {"shape": "note", "fillcolor": "#ffffff", "color": "#6b7280", "style": "filled"},
}
#: Edge roles → DOT attributes.
EDGE_STYLES: dict[str, dict[str, str]] = {
    "start": {"color": "#111827"},
    "effect": {"color": "#1d4ed8", "penwidth": "2"},
    "signal": {"color": "#111827"},
    "next": {"color": "#111827"},
    "failure": {"color": "#b45309", "style": "dashed", "fontcolor": "#92400e"},
    "timer": {"color": "#6b7280", "style": "dotted", "penwidth": "1.6", "fontcolor": "#4b5563"},
    "seq": {"color": "#1d4ed8", "penwidth": "2"},
    "crash": {"color": "#b45309", "style": "dashed", "fontcolor": "#92400e", "arrowhead": "vee"},
    "recover": {"color": "#15803d", "penwidth": "1.6", "fontcolor": "#166534"},
    "recover_unsafe": {"color": RED, "penwidth": "2.5", "fontcolor": RED},
    "forward": {"color": "#1d4ed8", "penwidth": "2"},
    "fail": {"color": "#b45309", "style": "dashed", "fontcolor": "#92400e"},
    "undo": {"color": "#c2410c", "penwidth": "2"},
    "pair": {"color": "#9ca3af", "style": "dotted", "arrowhead": "none", "fontcolor": "#6b7280"},
}
CLUSTER_STYLES: dict[str, dict[str, str]] = {
    "row": {"color": "#1d4ed8", "style": "rounded"},
    "row_unsafe": {
        "color": RED,
        "style": "rounded,filled",
        "fillcolor": "#fff5f5",
        "penwidth": "2.5",
    },
}
_LINE_TAGS = {
    "title": ("<b>", "</b>"),
    "plain": ("", ""),
    "note": ('<font point-size="10">', "</font>"),
    "code": ('<font point-size="10"><i>', "</i></font>"),
    "muted": ('<font color="#4b5563" point-size="10">', "</font>"),
    "unsafe": (f'<font color="{RED}"><b>', "</b></font>"),
}


# -- DOT ----------------------------------------------------------------------------------------


def _html(lines: tuple[Line, ...]) -> str:
    """An HTML-like DOT label: each line escaped, styled, and left on a line of its own."""
    body = '<br align="left"/>'.join(
        f"{_LINE_TAGS[line.style][0]}{html.escape(line.text)}{_LINE_TAGS[line.style][1]}"
        for line in lines
    )
    return f"<{body}>"


def _legend_html(entries: tuple[LegendEntry, ...]) -> str:
    rows = ['<tr><td colspan="2" align="left"><b>legend</b></td></tr>']
    for entry in entries:
        text = html.escape(entry.text)
        if entry.what == "node":
            style = NODE_STYLES[entry.role]
            swatch = (
                f'<td bgcolor="{style.get("fillcolor", "#ffffff")}" width="28" '
                f'border="1" color="{style.get("color", "#111827")}"> </td>'
            )
        else:
            style = EDGE_STYLES[entry.role]
            stroke = {"dashed": "– – –", "dotted": "· · · · ·"}.get(style.get("style", ""), "———")
            swatch = (
                f'<td><font color="{style.get("color", "#111827")}"><b>{stroke}</b></font></td>'
            )
        rows.append(f'<tr>{swatch}<td align="left"><font point-size="10">{text}</font></td></tr>')
    table = "".join(rows)
    return f'<<table border="0" cellborder="0" cellspacing="2" cellpadding="3">{table}</table>>'


def _node_attrs(node: Node) -> dict[str, str]:
    attrs = dict(NODE_STYLES[node.role])
    if node.role != "start":
        attrs["label"] = _html(node.lines)
    else:
        attrs["label"] = ""
    return attrs


def _edge_attrs(edge: Edge) -> dict[str, str]:
    attrs = dict(EDGE_STYLES[edge.role])
    if edge.lines:
        attrs["label"] = _html(edge.lines)
    if not edge.constraint:
        attrs["constraint"] = "false"
    return attrs


def to_dot(graph: Graph) -> graphviz.Digraph:
    """The graph as a ``graphviz.Digraph`` (its ``.source`` is the DOT text)."""
    dot = graphviz.Digraph(
        "ratchet",
        graph_attr={
            "rankdir": "TB",
            "fontname": FONT,
            "fontsize": "16",
            "label": _html(graph.title),
            "labelloc": "t",
            "labeljust": "l",
            "nodesep": "0.45",
            "ranksep": "0.55",
            "pad": "0.3",
            "bgcolor": "white",
        },
        node_attr={
            "fontname": FONT,
            "fontsize": "12",
            "shape": "box",
            "style": "rounded,filled",
            "margin": "0.15,0.08",
        },
        edge_attr={"fontname": FONT, "fontsize": "11", "arrowsize": "0.8"},
    )
    in_cluster = {node_id for cluster in graph.clusters for node_id in cluster.nodes}
    for node in graph.nodes:
        if node.id not in in_cluster:
            dot.node(node.id, **_node_attrs(node))
    for cluster in graph.clusters:
        with dot.subgraph(name=f"cluster_{cluster.id}") as sub:
            sub.attr(label=_html(cluster.lines), labeljust="l", **CLUSTER_STYLES[cluster.role])
            for node_id in cluster.nodes:
                sub.node(node_id, **_node_attrs(graph.node(node_id)))
            for rank in cluster.ranks:
                sub.body.append("\t{rank=same; " + " ".join(rank) + "}\n")
    for rank in graph.ranks:
        dot.body.append("\t{rank=same; " + " ".join(rank) + "}\n")
    for edge in graph.edges:
        dot.edge(edge.tail, edge.head, **_edge_attrs(edge))
    if graph.legend:
        dot.node("legend", label=_legend_html(graph.legend), shape="plain", style="")
    return dot


def dot_source(graph: Graph) -> str:
    return str(to_dot(graph).source)


# -- Mermaid ------------------------------------------------------------------------------------

#: Characters that mean something to Mermaid, as its entity codes. ``#`` itself is escaped, so
#: that no text can spell an entity, and so are the words its pre-parser looks for.
_MERMAID = {
    '"': "#quot;",
    "#": "#35;",
    ";": "#59;",
    "<": "#lt;",
    ">": "#gt;",
    "&": "#amp;",
    "%": "#37;",
    "`": "#96;",
    "|": "#124;",
    "[": "#91;",
    "]": "#93;",
    "{": "#123;",
    "}": "#125;",
    "\\": "#92;",
}


def mermaid_escape(text: str) -> str:
    escaped = "".join(_MERMAID.get(char, char) for char in " ".join(text.split()))
    # Mermaid's pre-parser rewrites "style ...:#...;" and "classDef ...:#...;" lines.
    return escaped.replace("style", "#115;tyle").replace("classDef", "#99;lassDef")


def _mm_lines(lines: tuple[Line, ...]) -> str:
    parts = []
    for line in lines:
        text = mermaid_escape(line.text)
        if line.style == "title":
            text = f"<b>{text}</b>"
        elif line.style == "unsafe":
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
        extra = ",stroke-dasharray:5 3" if "dashed" in style.get("style", "") else ""
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
        out.append(f'    state "{mermaid_escape(title.text)}" as {node.id}')
        out.extend(f"    {node.id} : {mermaid_escape(line.text)}" for line in rest)
    for edge in graph.edges:
        tail = "[*]" if edge.tail in starts else edge.tail
        label = " · ".join(mermaid_escape(line.text) for line in _joined(edge.lines))
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
    "note": ('>"', '"]'),
}
_ARROWS = {"crash": "-.->", "fail": "-.->", "pair": "-.-", "timer": "-.->", "failure": "-.->"}


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


# -- rendering with the dot program -------------------------------------------------------------


def render_bytes(graph: Graph, fmt: str, dpi: int = 110) -> bytes:
    """The graph laid out and drawn by Graphviz's ``dot`` as ``fmt`` (svg, png, pdf).

    Raises ``graphviz.ExecutableNotFound`` when ``dot`` is not installed."""
    dot = to_dot(graph)
    if fmt == "png":
        dot.attr(dpi=str(dpi))
    data: Any = dot.pipe(format=fmt, quiet=True)
    return bytes(data)
