"""The new version of a workflow drawn for a pull request: a Mermaid state diagram of the diff.

Every state of the new version, and the states the change removed, each styled by what the
change did to it (``classDef`` ``added``, ``changed``, ``removed``; ``same`` for the rest). A
Mermaid state diagram cannot style a transition, so each row the change added, removed or
changed says so in its label (``approve · guard changed``), and a removed row is drawn to (or
from) the state it joined. Every label is escaped with Mermaid's entity codes, as the review's
diagrams are: no text of a spec can end a label or a statement, or spell markup.
"""

from __future__ import annotations

from ..settings import mermaid_label
from .diff import ENDED_KINDS, RowPair, SpecDiff

#: The classes a state is drawn in, by what the change did to it.
CLASSES = {
    "added": "fill:#dcfce7,stroke:#15803d,stroke-width:3px,color:#111827",
    "changed": "fill:#fef9c3,stroke:#a16207,stroke-width:3px,color:#111827",
    "removed": "fill:#fee2e2,stroke:#b91c1c,stroke-width:2px,color:#111827,stroke-dasharray:5 3",
    "same": "fill:#f9fafb,stroke:#6b7280,stroke-width:1px,color:#111827",
}


def state_class(changes: SpecDiff, name: str) -> str:
    """What the change did to state ``name``: ``added``, ``removed``, ``changed`` (its kind,
    timer, signals, approval or operator action, a row out of it, or the effect it performs)
    or ``same``."""
    old, new = changes.old.states, changes.new.states
    if name not in old:
        return "added"
    if name not in new:
        return "removed"
    own = [
        c
        for c in changes.changes
        if c.thing == "state" and c.subject == name and c.what != "description"
    ]
    rows = [p for p in changes.rows if p.kind != "same" and p.row.state == name]
    effect = next((r.external_effect for r in changes.new.rows_from(name) if r.external_effect), "")
    made = [c for c in changes.changes if c.thing == "effect" and c.subject == effect]
    return "changed" if own or rows or made else "same"


def _label(pair: RowPair, effects: set[str]) -> str:
    row = pair.row
    parts = [row.event]
    if row.guard:
        parts.append(f"[{row.guard}]")
    if pair.kind == "added":
        parts.append("added")
    elif pair.kind == "removed":
        parts.append("removed")
    elif pair.kind == "changed":
        parts.append(f"changed {', '.join(pair.changed)}")
    if row.external_effect is not None and row.external_effect in effects:
        parts.append(f"effect {row.external_effect} changed")
    return " · ".join(parts)


def mermaid(changes: SpecDiff) -> str:
    """The Mermaid text of the new version, with what the change did drawn on it."""
    old, new = changes.old, changes.new
    names = [*new.states, *[s for s in old.states if s not in new.states]]
    ids = {name: f"s{i}" for i, name in enumerate(names, start=1)}
    lines = ["stateDiagram-v2", "    direction TB"]
    for name in names:
        state = new.states.get(name) or old.states[name]
        lines.append(f'    state "{mermaid_label(name)}" as {ids[name]}')
        lines.append(f"    {ids[name]} : {mermaid_label(state.kind)}")
    lines.append(f"    [*] --> {ids[new.start]}")
    effects = {c.subject for c in changes.changes if c.thing == "effect" and c.what == "effect"}
    for pair in changes.rows:
        row = pair.row
        label = mermaid_label(_label(pair, effects))
        lines.append(f"    {ids[row.state]} --> {ids[row.next_state]} : {label}")
    for name in names:
        state = new.states.get(name) or old.states[name]
        if state.kind in ENDED_KINDS or state.kind == "operator_queue":
            lines.append(f"    {ids[name]} --> [*]")
    classes: dict[str, list[str]] = {}
    for name in names:
        classes.setdefault(state_class(changes, name), []).append(ids[name])
    for kind, members in classes.items():
        lines.append(f"    classDef {kind} {CLASSES[kind]}")
        lines.append(f"    class {','.join(members)} {kind}")
    return "\n".join(lines) + "\n"
