"""What a ``ratchet check`` runs, settled before its first case (:func:`plan`): the spec and the
findings it is checked despite, that it has examples, how the binding has the cases reach their
adapters (over HTTP or in-process), the cases chosen (:func:`select`), and, over HTTP, that a
clean run ends as it does in-process (:func:`calibrate`). Running the cases is
:mod:`~ratchet_runner.check.cases`'s.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from ..binding.check import Checker
from ..errors import Diagnostic, SpecError, UsageError
from ..review.naive import Strategy
from ..spec.model import Spec
from ..spec.validate import validate_path
from . import cases as check
from .cases import FAULTS, WINDOWS, Case, cases
from .http import OverHttp, over_http


def load_checkable(
    spec_path: str, bindings: str | None = None, environ: Mapping[str, str] | None = None
) -> tuple[Spec, str, list[Diagnostic]]:
    """The spec at ``spec_path``, its text, and its errors: only effect-safety findings (``E5``),
    which a check runs anyway to show what they cause; any other error is a :class:`SpecError`.
    A binding file (``bindings``, or the one found for the spec) that does not cover the spec is
    a :class:`~ratchet_runner.errors.BindingInvalid`."""
    report = validate_path(spec_path)
    if report.spec is None or any(not d.code.startswith(("E5", "W")) for d in report.errors):
        raise SpecError(report.errors or report.diagnostics)
    Checker(bindings, os.environ if environ is None else environ).require(spec_path, report.spec)
    return report.spec, Path(spec_path).read_text(encoding="utf-8"), report.errors


@dataclass(frozen=True)
class Plan:
    """What ``ratchet check`` will run: the spec, its text and the findings it is checked
    despite, the binding's HTTP adapters (``wire``, None: all in-process), and the cases."""

    spec: Spec
    text: str
    findings: list[Diagnostic]
    wire: OverHttp | None
    selected: list[Case]


def _as_is(_option: str) -> AbstractContextManager[None]:
    return nullcontext()


def plan(
    spec_path: str,
    bindings: str | None,
    examples: Sequence[str],
    case: str | None,
    strategies: tuple[Strategy, ...],
    *,
    hint: Callable[[str], AbstractContextManager[None]] = _as_is,
    say: Callable[[str], None] | None = None,
) -> Plan:
    """Everything a check settles before its first case: the spec (:func:`load_checkable`; its
    effect-safety findings, each said with ``say``), that it has examples, how the binding has
    the cases reach their adapters (:func:`over_http`, each HTTP adapter made once), the cases
    (:func:`select`), and, over HTTP, that a clean run ends as it does in-process
    (:func:`calibrate`). A :class:`UsageError` for what cannot be checked, raised inside
    ``hint(OPTION)`` for the option it is about."""
    spec, text, findings = load_checkable(spec_path, bindings)
    if not spec.examples:  # nothing to run: say so, rather than blame an --example
        with hint("SPEC"):
            raise UsageError(
                f"{spec_path} has no examples: check runs each example (its input, and the "
                "practice world it runs against) through every crash window and fault; add one "
                "under examples: (docs/reference/spec.md#examples)"
            )
    with hint("--bindings"):
        wire = over_http(spec, spec_path, bindings)
    if wire is not None:
        wire.prove(spec)
    if say is not None:
        for finding in findings:
            say(f"{finding.format()} (checking anyway, to show what it causes)")
    with hint("--case" if case else "--example"):
        selected = select(spec, text, examples, case, strategies)
    if wire is not None:  # a binding that misses the practice server's routes proves nothing
        with hint("--bindings"):
            calibrate(spec, text, sorted({c.example for c in selected}), wire)
    return Plan(spec, text, findings, wire, selected)


def case_named(spec: Spec, name: str, strategies: tuple[Strategy, ...]) -> list[Case]:
    """The case ``EXAMPLE:EFFECT:WINDOW:FAULT`` (as :func:`reproduce` prints it), once per
    strategy; a :class:`UsageError` if it names no known example, effect, window or fault."""
    parts = name.split(":")
    if (
        len(parts) != 4
        or parts[0] not in spec.examples
        or parts[1] not in spec.effects
        or parts[2] not in WINDOWS
        or parts[3] not in FAULTS
    ):
        raise UsageError(
            f"expected EXAMPLE:EFFECT:WINDOW:FAULT with a known example and effect, a window "
            f"of {', '.join(WINDOWS)} and a fault of {', '.join(FAULTS)}"
        )
    example, effect, window, fault = parts
    return [Case(example, effect, window, fault, s) for s in strategies]


def select(
    spec: Spec,
    text: str,
    examples: Sequence[str],
    case_name: str | None,
    strategies: tuple[Strategy, ...],
) -> list[Case]:
    """The cases ``ratchet check`` runs: the one ``case_name`` names (once per strategy), or every
    case of the ``examples`` asked for (default: all); a :class:`UsageError` for an unknown one."""
    if case_name:
        return case_named(spec, case_name, strategies)
    return cases(spec, text, examples_to_check(spec, examples), strategies)


def examples_to_check(spec: Spec, examples: Sequence[str]) -> list[str]:
    """The examples asked for (default: every example of the spec); a :class:`UsageError` for
    one the spec does not have, or when it has none."""
    chosen = list(examples) or list(spec.examples)
    unknown = [e for e in chosen if e not in spec.examples]
    if unknown or not chosen:
        known = ", ".join(spec.examples) or "none"
        raise UsageError(f"no example {unknown[0] if unknown else ''!r} (examples: {known})")
    return chosen


# -- one case ---------------------------------------------------------------------------------


def calibrate(spec: Spec, text: str, examples: Sequence[str], wire: OverHttp) -> None:
    """Before any case over HTTP: each example's clean run (no crash, no fault) must end over
    HTTP as it ends in-process, with as many changes. Otherwise the binding does not reach the
    practice server's operations as the practice world's own (a wrong path, receipt field or
    lookup), every case would end with a person, and the check would prove nothing: a
    :class:`UsageError` naming the example and both endings."""
    for example in examples:
        clean = Case(example, "", "none", "none")
        # through the module, as the cases run: one seam for what runs a case
        here, there = (
            check.run_case(spec, text, clean),
            check.run_case(spec, text, clean, wire=wire),
        )
        if (here.state, here.status, here.changes) == (there.state, there.status, there.changes):
            continue
        raise UsageError(
            f"with {wire.describe()}, the clean run of example {example!r} ends in "
            f"{there.state} ({there.status}) with {there.changes} change(s); in-process it ends "
            f"in {here.state} ({here.status}) with {here.changes}: the binding does not reach "
            "the practice server's operations as the practice world's own (check its paths, "
            'receipt fields and lookups against docs/reference/adapters.md, "The practice world '
            'over HTTP"), so no case over it would prove anything'
        )
