"""What a spec's business key and effect arguments read of a run's input.

A run cannot start without its business key, and an effect cannot be called without its
arguments: a field either of them reads must be in the input. :func:`input_reads` lists every
field they read (as ``("input", "order")``), each with who reads it, except where the same
expression tests the field with ``has()`` (``has(input.note) ? input.note : ''`` reads
``input.note`` only when it is there). Guards and deadlines are not listed: a guard may test an
optional field, and its row simply does not fire.

The lint (``E314``) reports a read of a field the input schema does not require; the runner
refuses, before it creates the run, an input that lacks a field read (:func:`missing_read`),
which also covers fields validation cannot see into (a free-form ``{type: object}``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from lark import Tree

from ..errors import ExpressionError
from .expressions import Expression, compile_expression
from .model import Spec, per_version


@dataclass(frozen=True)
class InputRead:
    """One field of the input an expression reads: its ``path`` (``("input", "stay",
    "nights")``), how many of its steps the expression tests with ``has()`` first (``tested``:
    the path prefixes it tests), who reads it (``reader``, for messages), the expression's
    ``source`` and the JSON ``pointer`` of where it is written."""

    path: tuple[str, ...]
    tested: frozenset[tuple[str, ...]]
    reader: str
    source: str
    pointer: str

    @property
    def dotted(self) -> str:
        return ".".join(self.path)

    def untested(self, depth: int) -> bool:
        """Whether the step to ``path[depth]`` is read without a ``has()`` test of it."""
        return self.path[: depth + 1] not in self.tested


def input_reads(spec: Spec) -> list[InputRead]:
    """Every field of the input the business key and the effects' arguments read, in the order
    they are written (an expression that does not compile reads nothing here: E305 says why)."""
    found: list[InputRead] = []
    found += _reads(spec.business_key, "the business key", "/business_key")
    for effect in spec.effects.values():
        for name, value in effect.args.items():
            if isinstance(value, str):
                reader = f"argument {name!r} of effect {effect.name!r}"
                found += _reads(value, reader, f"{effect.pointer}/args/{name}")
    return found


def _reads(source: str, reader: str, pointer: str) -> list[InputRead]:
    try:
        expression = compile_expression(source)
    except ExpressionError:
        return []
    tested = frozenset(_tested(expression))
    paths = dict.fromkeys(p for p in expression.paths if p[0] == "input" and len(p) > 1)
    return [InputRead(path, tested, reader, source, pointer) for path in paths]


def tested(source: str) -> frozenset[tuple[str, ...]]:
    """The name paths the expression ``source`` tests with ``has()`` (none when it does not
    compile): a field it may read only when it is there."""
    try:
        return frozenset(_tested(compile_expression(source)))
    except ExpressionError:
        return frozenset()


def _tested(expression: Expression) -> Iterator[tuple[str, ...]]:
    """The name paths ``has()`` tests in ``expression`` (``has(input.a.b)``: ``input.a.b``)."""
    root = expression.tree
    if not isinstance(root, Tree):
        return
    for node in root.iter_subtrees():
        if node.data != "ident_arg" or len(node.children) != 2:
            continue
        name, arguments = node.children
        if str(name) != "has" or not isinstance(arguments, Tree) or len(arguments.children) != 1:
            continue
        path = _path(arguments.children[0])
        if path is not None:
            yield path


def _path(node: Any) -> tuple[str, ...] | None:
    """``input.a.b`` as ``("input", "a", "b")``; None for anything but a plain name path."""
    suffix: list[str] = []
    while isinstance(node, Tree):
        children = node.children
        if node.data == "ident" and children:
            return (str(children[0]), *reversed(suffix))
        if node.data == "member_dot" and len(children) == 2:
            suffix.append(str(children[1]))
            node = children[0]
        elif len(children) == 1:
            node = children[0]
        else:
            return None
    return None


#: The reads of each spec version, by its digest: every run's start checks its input against
#: them, and listing them walks each expression's tree.
_READS: dict[str, list[InputRead]] = {}


def missing_read(spec: Spec, data: Mapping[str, Any]) -> tuple[InputRead, str] | None:
    """The first field the business key or an argument reads (untested) that the input
    ``data`` lacks, with that field's dotted name under ``input`` (``stay.nights``); None when
    every one is there. A value that is no mapping where the path goes on is left to the input
    schema."""
    for read in per_version(_READS, spec, input_reads):
        value: Any = data
        for depth in range(1, len(read.path)):
            if not read.untested(depth) or not isinstance(value, Mapping):
                break
            step = read.path[depth]
            if step not in value:
                return read, ".".join(read.path[1 : depth + 1])
            value = value[step]
    return None
