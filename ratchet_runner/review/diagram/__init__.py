"""Diagrams of a spec: a plain graph model, built per view (states, crash windows, saga), rendered
as DOT (drawn by Graphviz) or Mermaid."""
