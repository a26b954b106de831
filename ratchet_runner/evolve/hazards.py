"""The hazards of a change: what moving a workflow's runs from one version to another would do.

:func:`hazards` compares two versions (:func:`~ratchet_runner.evolve.diff.diff`) and runs every
check (``V101`` to ``V114``; each is documented in ``docs/reference/versions.md`` with what it
checks and what it does not), each :class:`Hazard` located and ending with what to do. Given
the live runs (:func:`live_runs`: the workflow's unfinished runs, read through the store), it
names the runs each hazard touches; given a :class:`~ratchet_runner.evolve.mapping.VersionMapping`,
it checks the mapping too (``V102``, ``V204``, ``V205``) and moves each run as the mapping says.
When a hazard is reported without live runs, and when with them, is :mod:`.basis`'s rule.

A hazard describes a move: what a run of the old version would meet on the new one, whether
``on_version_change: revalidate`` moves it when a worker takes it up, or an operator migrates it.
Under ``pin`` (the default) no run moves by itself; the hazards are then what migrating would do
(and ``V106`` says what staying means for the approvals runs hold).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from ..spec.model import Spec
from .basis import HAZARD_CODES, Check, Hazard
from .diff import SpecDiff, diff
from .effects import (
    check_arguments,
    check_name,
    check_recipes,
    check_retries,
    check_undos,
    check_windows,
)
from .mapping import VersionMapping, check_mapping
from .reads import check_approvals, check_inputs, check_receipts
from .runs import LiveRun, live_runs
from .states import check_routes, check_states, check_timers, check_waiting

__all__ = ["HAZARD_CODES", "Hazard", "LiveRun", "by_run", "hazards", "live_runs", "live_summary"]

#: The checks, in the order of their codes.
CHECKS = (
    check_states,  # V101, V102, V114
    check_windows,  # V103
    check_name,  # V104
    check_recipes,  # V104
    check_arguments,  # V105
    check_approvals,  # V106
    check_undos,  # V107
    check_routes,  # V108
    check_timers,  # V109
    check_inputs,  # V110
    check_waiting,  # V111
    check_receipts,  # V112
    check_retries,  # V113
)


def hazards(
    old: Spec,
    new: Spec,
    live: Sequence[LiveRun] | None = None,
    mapping: VersionMapping | None = None,
    *,
    changes: SpecDiff | None = None,
) -> list[Hazard]:
    """Every hazard of moving runs of ``old`` to ``new``: for the change itself (``live`` None),
    or naming the runs of ``live`` on ``old`` each touches; with ``mapping``, its own problems
    first and each run moved as it says. ``changes``: the diff of the two, if already made.
    Sorted by file and place."""
    check = Check(old, new, changes or diff(old, new), live, mapping)
    if mapping is not None:
        for found in check_mapping(mapping, old, new):
            state = found.pointer.rsplit("/", 1)[-1]
            touched = [r.id for r in check.runs_in(state)] if found.code != "V204" else []
            check.found.append(
                Hazard(
                    found.code,
                    "error",
                    found.message,
                    found.file,
                    found.line,
                    found.column,
                    found.pointer,
                    tuple(touched) if check.checked else None,
                )
            )
    for run_check in CHECKS:
        run_check(check)
    return sorted(check.found, key=lambda h: (h.file, h.line, h.column, h.code, h.message))


def live_summary(old: Spec, live: Sequence[LiveRun]) -> dict[str, Any]:
    """How many live runs are on ``old`` (and in which states), and how many on other versions
    of the workflow, which a diff against ``old`` does not check."""
    mine = [r for r in live if r.spec_digest == old.digest]
    others = Counter(r.spec_digest for r in live if r.spec_digest != old.digest)
    return {
        "on_old_version": len(mine),
        "by_state": dict(Counter(r.state for r in mine)),
        "by_status": dict(Counter(str(r.status) for r in mine)),
        "other_versions": dict(others),
    }


def by_run(found: Sequence[Hazard]) -> dict[str, list[Hazard]]:
    """Each live run the hazards touch, with the hazards that touch it, errors first: what a
    migration's plan gives each run its verdict from (a run no hazard touches is not in it)."""
    touched: dict[str, list[Hazard]] = {}
    for hazard in sorted(found, key=lambda h: h.sort_key):
        for run in hazard.runs or ():
            touched.setdefault(run, []).append(hazard)
    return touched
