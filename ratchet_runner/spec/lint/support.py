"""What the lint modules share: the check signature, locating a finding, and effect rows.

A finding is located by the JSON pointer of the node it is about. When that node is absent (a
column left out of a row, a field left out of an effect), it is located at the nearest thing the
author can see: the row, or the name of the state, effect or approval that lacks the field.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from ...errors import Diagnostic
from ..loader import Document, pointer_join
from ..model import Effect, Row, Spec

Check = Callable[[Spec], Iterator[Diagnostic]]


def doc_of(spec: Spec) -> Document:
    assert spec.document is not None, "lint needs a spec built from a document"
    return spec.document


def at(spec: Spec, pointer: str, code: str, message: str) -> Diagnostic:
    """A finding at the value ``pointer`` names (or its nearest located ancestor)."""
    return doc_of(spec).diagnostic(pointer, code, message)


def at_name(spec: Spec, pointer: str, code: str, message: str) -> Diagnostic:
    """A finding at the key that names ``pointer`` (``refunding:`` for ``/states/refunding``)."""
    return doc_of(spec).diagnostic(pointer, code, message, key=True)


def at_field(spec: Spec, parent: str, field: str, code: str, message: str) -> Diagnostic:
    """A finding at ``parent``'s ``field`` when it is written, else at ``parent``'s name."""
    pointer = pointer_join(parent, field)
    if pointer in doc_of(spec).marks:
        return at(spec, pointer, code, message)
    return at_name(spec, parent, code, message)


def col(row: Row, column: str) -> str:
    """The JSON pointer of one column of ``row``."""
    return pointer_join(row.pointer, column)


def line_of(spec: Spec, row: Row) -> int:
    """The line a row starts on, for messages that point from one row to another."""
    return doc_of(spec).locate(row.pointer)[0]


def effect_rows(spec: Spec) -> Iterator[tuple[Row, Effect]]:
    """Every row that names a known effect, with that effect."""
    for row in spec.transitions:
        if row.external_effect is not None and row.external_effect in spec.effects:
            yield row, spec.effects[row.external_effect]


def only_undoes(spec: Spec) -> set[str]:
    """The effects that run only as a compensation: named in some row's ``compensation`` column,
    never as a row's ``external_effect`` (E519)."""
    forward = {effect.name for _, effect in effect_rows(spec)}
    return {name for name in spec.compensating_effects if name in spec.effects} - forward
