"""How long ``ratchet check specs/booking.yaml`` takes in-process (target: under 1 minute).

Baseline, measured in the same run: one clean case (no crash, no fault) of the booking's happy
example on a fresh store and practice world; the ratio says what the whole check costs in clean
cases.
"""

from __future__ import annotations

import time

from bench.harness import ROOT, Row, Section, best_of
from ratchet_runner.check.cases import Case, cases, run_case
from ratchet_runner.spec.validate import load_spec

SPEC = ROOT / "specs" / "booking.yaml"
TARGET_SECONDS = 60.0


def run(quick: bool = False) -> Section:
    spec = load_spec(SPEC)
    text = SPEC.read_text(encoding="utf-8")
    section = Section.of(
        "Checking every crash window of the booking saga", __doc__, "one clean case"
    )
    clean = best_of(lambda: run_case(spec, text, Case("happy", "hold_flight", "none", "none")), 3)
    start = time.perf_counter()
    selected = cases(spec, text, list(spec.examples), ("ratchet",))
    results = [run_case(spec, text, case) for case in selected]
    elapsed = time.perf_counter() - start
    violations = sum(len(r.violations) for r in results)
    section.rows = [
        Row(
            f"`ratchet check specs/booking.yaml`, in-process, {len(selected)} cases",
            elapsed,
            "s",
            clean,
            f"< {TARGET_SECONDS:.0f} s",
            elapsed < TARGET_SECONDS,
        ),
        Row("violations", float(violations), "", None, "0", violations == 0),
    ]
    return section
