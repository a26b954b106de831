"""What a run is given (E302, E314): the input fields its business key and effect arguments read,
which the input schema must require, and the practice world its examples seed, whose faults must
name declared effects (the shape of an example's world is the schema's to check).

The registry of every check is :data:`ratchet_runner.spec.lint.CHECKS`.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from typing import Any

from ...errors import Diagnostic
from ..loader import pointer_join
from ..model import Spec
from ..reads import InputRead, input_reads
from .support import at


def check_input_reads(spec: Spec) -> Iterator[Diagnostic]:
    """E314: the business key or an effect argument reads an input field (outside a ``has()``
    test of it) that the input schema declares but does not require, at any depth."""
    for read in input_reads(spec):
        optional = _first_optional(spec.input_schema, read)
        if optional is None:
            continue
        depth, where = optional
        field, dotted = read.path[depth], ".".join(read.path[: depth + 1])
        yield at(
            spec,
            read.pointer,
            "E314",
            f"{read.reader} reads {dotted}, which the input schema does not require: an input "
            f"without it would be refused when the run starts; add {field!r} to {where}.required, "
            f"or test it in the expression (has({dotted}) ? {dotted} : DEFAULT)",
        )


def _first_optional(schema: Any, read: InputRead) -> tuple[int, str] | None:
    """The depth of the first step of ``read`` to a field its schema declares and does not
    require, with where that schema is (``input``, ``input.properties.stay``); None when every
    step is required, tested with ``has()``, or not declared (E306 reports that) or beyond a
    schema that lists no properties (the run checks those)."""
    where = "input"
    for depth in range(1, len(read.path)):
        properties = schema.get("properties") if isinstance(schema, dict) else None
        field = read.path[depth]
        if not isinstance(properties, dict) or field not in properties:
            return None
        required = schema.get("required")
        if read.untested(depth) and not (isinstance(required, list) and field in required):
            return depth, where
        schema, where = properties[field], f"{where}.properties.{field}"
    return None


def check_example_worlds(spec: Spec) -> Iterator[Diagnostic]:
    """E302: a fault in an example's practice world names an effect that is not declared (the
    practice world would inject it into calls that never come)."""
    for example in spec.examples.values():
        faults = example.world.get("faults", [])
        for i, fault in enumerate(faults if isinstance(faults, list) else []):
            effect = fault.get("effect") if isinstance(fault, dict) else None
            if not isinstance(effect, str) or effect in spec.effects:
                continue
            close = difflib.get_close_matches(effect, list(spec.effects), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            pointer = pointer_join(pointer_join("/examples", example.name), "world")
            yield at(
                spec,
                f"{pointer}/faults/{i}/effect",
                "E302",
                f"example {example.name!r} injects a fault into effect {effect!r}, which is not "
                f"declared: name an effect under effects: (effects: "
                f"{', '.join(spec.effects) or 'none'}){hint}",
            )
