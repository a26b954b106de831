"""The plain graph description every diagram view produces and every renderer reads.

A view (:mod:`ratchet_runner.review.diagram.states`, :mod:`ratchet_runner.review.diagram.crash`,
:mod:`ratchet_runner.review.diagram.saga`) turns a spec into a :class:`Graph`: nodes, edges,
clusters and a legend, each with a *role* that the renderers
(:mod:`ratchet_runner.review.diagram.dot`) map to shapes and colours. Nothing here knows DOT or
Mermaid, and nothing here holds a user's name as an identifier: node IDs are generated (``n0``,
``n1``, … in the order the view adds them), so that a state called ``a"b<c>`` is only ever label
text, which each renderer escapes for its own syntax.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from typing import Literal

#: How one line of a label is set: a bold title, plain text, a smaller note, an italic
#: expression, muted grey, or the unsafe colour (a lint finding).
LineStyle = Literal["title", "plain", "note", "code", "muted", "unsafe"]
#: A ``stateDiagram`` or a ``flowchart``, for renderers with different syntaxes for each.
GraphKind = Literal["states", "flow"]


@dataclass(frozen=True)
class Line:
    text: str
    style: LineStyle = "plain"


@dataclass(frozen=True)
class Node:
    id: str
    role: str
    lines: tuple[Line, ...] = ()


@dataclass(frozen=True)
class Edge:
    tail: str
    head: str
    role: str
    lines: tuple[Line, ...] = ()
    #: False: the edge does not pull its head below its tail (a recovery drawn back upward).
    constraint: bool = True
    #: True: the label is placed after the layout, near the edge (for an edge that bends
    #: around other nodes, whose label would otherwise land outside its cluster).
    external_label: bool = False


@dataclass(frozen=True)
class Cluster:
    id: str
    role: str
    lines: tuple[Line, ...]
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class LegendEntry:
    what: Literal["node", "edge"]
    role: str
    text: str


@dataclass(frozen=True)
class Graph:
    kind: GraphKind
    title: tuple[Line, ...]
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]
    clusters: tuple[Cluster, ...] = ()
    legend: tuple[LegendEntry, ...] = ()
    #: Nodes after which the run ends (``[*]`` in a Mermaid state diagram).
    finals: tuple[str, ...] = ()
    #: The node drawn emphasised: where a run is.
    highlight: str | None = None

    def node(self, node_id: str) -> Node:
        return next(n for n in self.nodes if n.id == node_id)


@dataclass
class Builder:
    """Collects a graph in order, handing out generated IDs."""

    kind: GraphKind
    title: tuple[Line, ...]
    nodes: list[Node] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)
    clusters: list[Cluster] = field(default_factory=list)
    legend: list[LegendEntry] = field(default_factory=list)
    finals: list[str] = field(default_factory=list)
    highlight: str | None = None

    def node(self, role: str, *lines: Line) -> str:
        node_id = f"n{len(self.nodes)}"
        self.nodes.append(Node(node_id, role, tuple(lines)))
        return node_id

    def edge(
        self,
        tail: str,
        head: str,
        role: str,
        *lines: Line,
        constraint: bool = True,
        external_label: bool = False,
    ) -> None:
        self.edges.append(Edge(tail, head, role, tuple(lines), constraint, external_label))

    def cluster(self, role: str, lines: tuple[Line, ...], nodes: list[str]) -> None:
        cluster_id = f"c{len(self.clusters)}"
        self.clusters.append(Cluster(cluster_id, role, lines, tuple(nodes)))

    def explain(self, what: Literal["node", "edge"], role: str, text: str) -> None:
        entry = LegendEntry(what, role, text)
        if entry not in self.legend:
            self.legend.append(entry)

    def graph(self) -> Graph:
        """The graph collected; the legend explains only the roles it uses."""
        used = {("node", n.role) for n in self.nodes} | {("edge", e.role) for e in self.edges}
        return Graph(
            self.kind,
            self.title,
            tuple(self.nodes),
            tuple(self.edges),
            tuple(self.clusters),
            tuple(e for e in self.legend if (e.what, e.role) in used),
            tuple(self.finals),
            self.highlight,
        )


def wrap(text: str, width: int, style: LineStyle = "plain") -> list[Line]:
    """``text`` as lines of at most ``width`` characters (a longer word stays whole)."""
    flat = " ".join(text.split())
    pieces = textwrap.wrap(flat, width, break_long_words=False, break_on_hyphens=False)
    return [Line(piece, style) for piece in pieces or [""]]


def shorten(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters with an ellipsis (a long guard on an edge)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def duration(seconds: float) -> str:
    """86400.0 → ``'24h'``; the largest of h, m, s, ms that divides it."""
    millis = round(seconds * 1000)
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if millis and millis % size == 0:
            return f"{millis // size}{unit}"
    return f"{millis}ms"
