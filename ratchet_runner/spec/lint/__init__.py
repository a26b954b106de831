"""Semantic checks of a schema-valid spec: references, expressions, the graph, effect safety.

Each check is a function ``(spec) -> Iterator[Diagnostic]`` registered in :data:`CHECKS`; each
finding carries a stable code from :mod:`ratchet_runner.spec.codes` and the JSON pointer of the
offending node, so it is reported at its line and column. Checks never raise on odd input: the
document already passed the schema, and every lookup tolerates a dangling reference (reported by
another check). Every message says what is wrong and what to do about it.

:mod:`~ratchet_runner.spec.lint.references` holds the E2xx/E3xx checks (references, expressions,
the input schema), :mod:`~ratchet_runner.spec.lint.inputs` those of what a run is given (the
input fields its business key and arguments read, its example's practice world),
:mod:`~ratchet_runner.spec.lint.graph` the state-graph checks (E4xx/W4xx),
:mod:`~ratchet_runner.spec.lint.effects` the effect-safety checks (E5xx/W5xx),
:mod:`~ratchet_runner.spec.lint.keys` those of the idempotency keys,
:mod:`~ratchet_runner.spec.lint.types` the types of expressions' operands (E313), and
:mod:`~ratchet_runner.spec.lint.support` what they share.
"""

from __future__ import annotations

from ...errors import Diagnostic
from ..model import Spec
from .effects import (
    check_approvals,
    check_compensation,
    check_compensation_approvals,
    check_effect_states,
    check_operator_actions,
    check_pinned_approvals,
    check_retry_and_hope,
    check_retry_owners,
)
from .endings import check_saga_endings
from .graph import check_event_names, check_events, check_graph
from .inputs import check_example_worlds, check_input_reads
from .keys import check_idempotency_keys
from .references import (
    check_evidence,
    check_expressions,
    check_input_schema,
    check_references,
)
from .support import Check
from .types import check_expression_types

__all__ = ["CHECKS", "Check", "lint"]

CHECKS: tuple[Check, ...] = (
    check_references,
    check_evidence,
    check_expressions,
    check_expression_types,
    check_input_schema,
    check_input_reads,
    check_example_worlds,
    check_graph,
    check_events,
    check_event_names,
    check_effect_states,
    check_idempotency_keys,
    check_retry_and_hope,
    check_retry_owners,
    check_compensation,
    check_saga_endings,
    check_approvals,
    check_compensation_approvals,
    check_pinned_approvals,
    check_operator_actions,
)


def lint(spec: Spec) -> list[Diagnostic]:
    """Every semantic finding in ``spec``, in no particular order."""
    found: list[Diagnostic] = []
    for check_fn in CHECKS:
        found.extend(check_fn(spec))
    return found
