"""The DOT renderer of a :class:`~ratchet_runner.review.diagram.model.Graph` (through the
``graphviz`` package), the styles of every role, and drawing with Graphviz's ``dot`` program.

The DOT text is a pure function of the graph, byte-for-byte the same on every run: one font
(Helvetica), one direction (top to bottom), no timestamps, node IDs as the view generated them.
Every label is an HTML-like label built from :func:`html.escape` d text, so no name can end a
string, open a tag or start a record field. :mod:`ratchet_runner.review.diagram.mermaid` renders the
same graph as Mermaid text, with the same colours.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

from .model import Edge, Graph, LegendEntry, Line, Node

if TYPE_CHECKING:
    import graphviz

FONT = "Helvetica"
RED = "#b91c1c"
#: The outline of the node where a run is (the console's run page).
HIGHLIGHT = "#c2410c"

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
    "compensated": {"fillcolor": "#fed7aa", "color": "#c2410c", "penwidth": "3"},
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
    # may have been made (its outcome not known on that way): the same colours, paler, dotted
    "undo_maybe": {
        "fillcolor": "#fff7ed",
        "color": "#c2410c",
        "style": "filled,dotted",
        "penwidth": "2",
    },
    "kept_none_maybe": {
        "fillcolor": "#f9fafb",
        "color": "#4b5563",
        "style": "filled,dotted",
        "penwidth": "2",
    },
    "kept_impossible_maybe": {
        "fillcolor": "#fdf2f8",
        "color": "#be185d",
        "style": "filled,dotted",
        "penwidth": "2.5",
    },
    "nothing": {"fillcolor": "#ffffff", "color": "#6b7280", "style": "filled"},
    "note": {"shape": "note", "fillcolor": "#ffffff", "color": "#6b7280", "style": "filled"},
}
#: Edge roles → DOT attributes.
EDGE_STYLES: dict[str, dict[str, str]] = {
    "start": {"color": "#111827"},
    "effect": {"color": "#1d4ed8", "penwidth": "2"},
    "move": {"color": "#111827"},
    "failure": {"color": "#b45309", "style": "dashed", "fontcolor": "#92400e"},
    "timer": {"color": "#6b7280", "style": "dotted", "penwidth": "1.6", "fontcolor": "#4b5563"},
    # Two ranks per step, so that each window hangs between its step and the next.
    "seq": {"color": "#1d4ed8", "penwidth": "2", "minlen": "2", "weight": "8"},
    "enter": {"color": "#1d4ed8", "penwidth": "2", "weight": "8"},
    "crash": {"color": "#b45309", "style": "dashed", "fontcolor": "#92400e", "arrowhead": "vee"},
    "recover": {"color": "#15803d", "penwidth": "1.6", "fontcolor": "#166534"},
    "recover_unsafe": {"color": RED, "penwidth": "2.5", "fontcolor": RED},
    "forward": {"color": "#1d4ed8", "penwidth": "2"},
    "fail": {"color": "#b45309", "style": "dashed", "fontcolor": "#92400e"},
    "undo": {"color": "#c2410c", "penwidth": "2"},
    "undo_failed": {"color": "#7e22ce", "style": "dashed", "fontcolor": "#6b21a8"},
}
#: Roles of the nodes that form a cluster's straight column (the durable sequence).
SPINE_ROLES = frozenset({"entry", "seq", "seq_unsafe", "moved_on"})
CLUSTER_STYLES: dict[str, dict[str, str]] = {
    "row": {"color": "#1d4ed8", "style": "rounded"},
    "row_unsafe": {
        "color": RED,
        "style": "rounded,filled",
        "fillcolor": "#fff5f5",
        "penwidth": "2.5",
    },
    "undo_path": {
        "color": "#c2410c",
        "style": "rounded,filled",
        "fillcolor": "#fffaf5",
        "penwidth": "1.6",
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


_STROKES = {"dashed": "╸ ╸ ╸ ╸", "dotted": "┅┅┅┅┅"}

# -- DOT ----------------------------------------------------------------------------------------


def _html(lines: tuple[Line, ...]) -> str:
    """An HTML-like DOT label: each line escaped, styled, and left on a line of its own."""
    # A <br/> aligns the line before it, so every line, the last one too, ends with one.
    body = "".join(
        f"{_LINE_TAGS[line.style][0]}{html.escape(line.text)}{_LINE_TAGS[line.style][1]}"
        '<br align="left"/>'
        for line in lines
    )
    return f"<{body}>"


def _legend_cells(entry: LegendEntry) -> str:
    text = f'<td align="left"><font point-size="10">{html.escape(entry.text)}</font></td>'
    if entry.what == "node":
        style = NODE_STYLES[entry.role]
        fill, color = style.get("fillcolor", "#ffffff"), style.get("color", "#111827")
        border = round(float(style.get("penwidth", "1")))
        return (
            f'<td bgcolor="{fill}" color="{color}" border="{border}" width="26" height="14"> </td>'
            f"{text}"
        )
    style = EDGE_STYLES[entry.role]
    stroke = _STROKES.get(style.get("style", ""), "━━━━━")
    return f'<td><font color="{style.get("color", "#111827")}">{stroke}</font></td>{text}'


def _legend_table(entries: tuple[LegendEntry, ...]) -> str:
    """A table of two halves: what the node colours mean, beside what the edge styles mean."""
    nodes = [_legend_cells(e) for e in entries if e.what == "node"]
    edges = [_legend_cells(e) for e in entries if e.what == "edge"]
    blank = "<td></td><td></td>"
    rows = []
    for i in range(max(len(nodes), len(edges))):
        left = nodes[i] if i < len(nodes) else blank
        right = edges[i] if i < len(edges) else blank
        rows.append(f'<tr>{left}<td width="16"></td>{right}</tr>')
    table = "".join(rows)
    return f'<table border="0" cellborder="0" cellspacing="2" cellpadding="1">{table}</table>'


def _title_html(graph: Graph) -> str:
    """The graph's label: its title lines, then the legend, kept out of the layout."""
    title = _html(graph.title)[1:-1]
    rows = f'<tr><td align="left" balign="left">{title}</td></tr>'
    if graph.legend:
        rows += f'<tr><td align="left">{_legend_table(graph.legend)}</td></tr>'
    return f'<<table border="0" cellborder="0" cellspacing="0" cellpadding="2">{rows}</table>>'


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
        # dot can leave the label of an edge that bends around other nodes outside its
        # cluster's border; an external label is placed after the layout, inside it.
        attrs["xlabel" if edge.external_label else "label"] = _html(edge.lines)
    if not edge.constraint:
        attrs["constraint"] = "false"
    return attrs


def to_dot(graph: Graph) -> graphviz.Digraph:
    """The graph as a ``graphviz.Digraph`` (its ``.source`` is the DOT text)."""
    import graphviz  # here, so that a command that draws nothing does not pay for it

    dot = graphviz.Digraph(
        "ratchet",
        graph_attr={
            "rankdir": "TB",
            "fontname": FONT,
            "fontsize": "16",
            "label": _title_html(graph),
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
    home = {node_id: cluster.id for cluster in graph.clusters for node_id in cluster.nodes}
    for node in graph.nodes:
        if node.id not in home:
            attrs = _node_attrs(node)
            if node.id == graph.highlight:
                attrs.update(penwidth="4", color=HIGHLIGHT)
            dot.node(node.id, **attrs)
    for cluster in graph.clusters:
        with dot.subgraph(name=f"cluster_{cluster.id}") as sub:
            sub.attr(
                label=_html(cluster.lines),
                labeljust="l",
                fontsize="13",
                **CLUSTER_STYLES[cluster.role],
            )
            for node_id in cluster.nodes:
                node = graph.node(node_id)
                attrs = _node_attrs(node)
                if node.role in SPINE_ROLES:
                    attrs["group"] = cluster.id  # one straight column per cluster
                sub.node(node_id, **attrs)
            # An edge drawn inside its cluster keeps its label inside the cluster's border.
            for edge in graph.edges:
                if home.get(edge.tail) == home.get(edge.head) == cluster.id:
                    sub.edge(edge.tail, edge.head, **_edge_attrs(edge))
    for edge in graph.edges:
        if home.get(edge.tail) is None or home.get(edge.tail) != home.get(edge.head):
            dot.edge(edge.tail, edge.head, **_edge_attrs(edge))
    return dot


def dot_source(graph: Graph) -> str:
    return str(to_dot(graph).source)


# -- rendering with the dot program -------------------------------------------------------------


def render_bytes(graph: Graph, fmt: str, dpi: int = 110) -> bytes:
    """The graph laid out and drawn by Graphviz's ``dot`` as ``fmt`` (svg, png, pdf).

    Raises ``graphviz.ExecutableNotFound`` when ``dot`` is not installed."""
    dot = to_dot(graph)
    if fmt == "png":
        dot.attr(dpi=str(dpi))
    data: Any = dot.pipe(format=fmt, quiet=True)
    return bytes(data)
