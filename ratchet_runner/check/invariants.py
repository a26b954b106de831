"""The invariants a ``ratchet check`` case must keep when its run is over, and their kinds.

* at most one applied change per operation ID, and per effect of a run (a retry that renamed the
  change shows up here); exactly one for each effect a completed run needed;
* every applied change preceded by a committed pending record of its operation;
* every stored receipt equal to what the practice database holds;
* attempts within budget;
* no run lost or stuck (it ends done, or with a person holding an operator item);
* in a run that compensated (it entered a ``compensate`` state) or ended ``compensated`` or
  ``cancelled`` (through a compensate state or not), every forward effect applied in the practice
  world is undone exactly once, or kept on purpose (its compensation is
  ``none: …``, recorded in the history as kept); one that cannot be undone (``impossible: …``,
  recorded too), declares no compensation, or whose registered undo never ran, is a violation
  unless the run ends with a person whose operator item names it: a run never ends compensated,
  or cancelled, with a change still made that nobody was told of.

Each broken invariant is a :class:`Violation` of one :class:`ViolationKind`: the kind, never the
wording of the message, says what broke (the check table's verdict is read from it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum

from ..adapters.practice import Change, PracticeWorld
from ..engine.identity import compensation_id
from ..engine.operator_queue import evidence
from ..engine.runner import Runner
from ..spec.model import Compensation, Spec
from ..store.records import EventRecord, OperationRecord, RunRecord, latest_event
from ..words import EventKind, OperationStatus, RunStatus


class ViolationKind(StrEnum):
    """What a violation broke, most serious first (a case's verdict is its most serious kind)."""

    DUPLICATE = "duplicate"  # a change made twice: per operation ID, per effect, or its undo
    # a migration's (``ratchet check --migrate-to``; see ``check.versions``)
    APPROVAL_ACROSS_VERSIONS = "approval_across_versions"  # given under one, consumed under another
    RUN_LOST = "run_lost"  # a run the migration found is gone
    HALF_MIGRATED = "half_migrated"  # record, history, context or timers on two versions
    STALE_MIGRATION = "stale_migration"  # moved from a state or version it had left
    APPLIED_WITHOUT_WRITE_AHEAD = "applied_without_write_ahead"  # no pending record before it
    NEVER_APPLIED = "never_applied"  # a completed run needed the effect; the provider has none
    LEFT_UNCOMPENSATED = "left_uncompensated"  # a saga ended with a change still made
    LEFT_UNREPORTED = "left_unreported"  # ... or its operator item does not name that change
    KEPT_UNRECORDED = "kept_unrecorded"  # kept on purpose, but the history never says so
    DONE_WITHOUT_CHANGE = "done_without_change"  # recorded done; the provider has no change
    RECEIPT_MISMATCH = "receipt_mismatch"  # the stored receipt differs from the provider's
    OVER_BUDGET = "over_budget"  # more attempts than the effect's retry budget
    STUCK = "stuck"  # the run neither ended nor reached a person
    RESUME_FAILED = "resume_failed"  # resuming after the crash raised an error


@dataclass(frozen=True)
class Violation:
    """One broken invariant: its kind, and a message naming the effect, operation or run."""

    kind: ViolationKind
    message: str

    def __str__(self) -> str:
        return self.message


def verify(spec: Spec, runner: Runner, world: PracticeWorld, run: RunRecord) -> list[Violation]:
    """Every invariant ``run`` (over, or waiting for a person) breaks, in the order above."""
    changes = world.changes()
    operations = {op.operation_id: op for op in runner.store.operations(run.id)}
    found = [
        *_duplicates(changes),
        *_unrecorded(changes, operations),
        *_overdone(spec, run, operations, changes),
        *_unfinished(spec, run, operations, changes),
    ]
    if _compensated(spec, runner.store.history(run.id)) or _ends_undone(spec, run):
        found += _saga(spec, runner, operations, changes, run)
    return found


def _duplicates(changes: list[Change]) -> Iterator[Violation]:
    """A change made more than once: per operation ID, per effect, per hold released."""
    per_id = Counter(c.operation_id for c in changes)
    forward = Counter(c.effect for c in changes if c.operation != "release")
    per_target = Counter(str(c.args.get("hold_id")) for c in changes if c.operation == "release")
    for message in (
        *(f"operation {i[:12]} applied {n} times" for i, n in per_id.items() if n > 1),
        *(f"{effect} applied {n} times" for effect, n in forward.items() if n > 1),
        *(f"hold {hold} released {n} times" for hold, n in per_target.items() if n > 1),
    ):
        yield Violation(ViolationKind.DUPLICATE, message)


def _unrecorded(
    changes: list[Change], operations: dict[str, OperationRecord]
) -> Iterator[Violation]:
    """A change with no write-ahead record, or whose stored receipt is not what was made."""
    per_id = Counter(c.operation_id for c in changes)
    for change in changes:
        op = operations.get(change.operation_id)
        if op is None:
            yield Violation(
                ViolationKind.APPLIED_WITHOUT_WRITE_AHEAD,
                f"{change.effect} applied with no pending record (op {change.operation_id[:12]})",
            )
        elif (
            op.status == OperationStatus.DONE
            and op.receipt != change.result
            and per_id[op.operation_id] == 1
        ):
            yield Violation(
                ViolationKind.RECEIPT_MISMATCH,
                f"{change.effect}: the stored receipt differs from the practice database",
            )


def _overdone(
    spec: Spec, run: RunRecord, operations: dict[str, OperationRecord], changes: list[Change]
) -> Iterator[Violation]:
    """An operation tried beyond its budget, or recorded done with no change made."""
    made = {c.operation_id for c in changes}
    for op in operations.values():
        limit = spec.effects[op.effect].retry.max_attempts + int(
            run.context.get("grants", {}).get(op.operation_id, 0)
        )
        if op.attempts > limit:
            yield Violation(
                ViolationKind.OVER_BUDGET,
                f"{op.effect}: {op.attempts} attempts, above its budget of {limit}",
            )
        if (
            op.status == OperationStatus.DONE
            and op.operation_id not in made
            and op.role == "forward"
        ):
            yield Violation(
                ViolationKind.DONE_WITHOUT_CHANGE,
                f"{op.effect} recorded done but the provider has no such change",
            )


def _unfinished(
    spec: Spec, run: RunRecord, operations: dict[str, OperationRecord], changes: list[Change]
) -> Iterator[Violation]:
    """A run stuck short of an end or a person, or a success missing a change it needed."""
    if run.status not in (RunStatus.DONE, RunStatus.NEEDS_PERSON, RunStatus.CANCELLED):
        yield Violation(ViolationKind.STUCK, f"the run is stuck in {run.state} ({run.status})")
    if run.status == RunStatus.DONE and spec.states[run.state].kind == "success":
        made = {c.effect for c in changes}
        for effect in {op.effect for op in operations.values() if op.role == "forward"}:
            if effect not in made:
                yield Violation(
                    ViolationKind.NEVER_APPLIED, f"{effect} was needed but never applied"
                )


def _compensated(spec: Spec, history: list[EventRecord]) -> bool:
    """Whether the run entered a ``compensate`` state."""
    return any(
        e.kind == EventKind.MOVED
        and str(e.data.get("to")) in spec.states
        and spec.states[str(e.data.get("to"))].kind == "compensate"
        for e in history
    )


def _ends_undone(spec: Spec, run: RunRecord) -> bool:
    """Whether the run ended in a state that says its changes were undone (``compensated``) or
    that it made none to keep (``cancelled``): reached through a compensate state or not, every
    change must then be undone, kept on purpose, or left to a person."""
    state = spec.states.get(run.state)
    return state is not None and state.kind in ("compensated", "cancelled")


def _saga(
    spec: Spec,
    runner: Runner,
    operations: dict[str, OperationRecord],
    changes: list[Change],
    run: RunRecord,
) -> Iterator[Violation]:
    """Every forward effect applied in the practice world is undone exactly once, kept on
    purpose (and recorded as kept), or named by the operator item the run is left in."""
    applied = {c.operation_id for c in changes}
    history = runner.store.history(run.id)
    kept = {e.data.get("operation_id") for e in history if e.kind == EventKind.NO_COMPENSATION}
    named = _named_in_queue(runner, run) if run.status == RunStatus.NEEDS_PERSON else set()
    ending = f"the run ended {run.state} ({run.status})"
    for op in operations.values():
        if op.role != "forward" or op.operation_id not in applied:
            continue
        where = f"{op.effect} (op {op.operation_id[:12]})"
        declared = _declared_undo(spec, op.effect)
        if declared is not None and declared.effect is None:  # none / impossible
            if op.operation_id not in kept:
                yield Violation(
                    ViolationKind.KEPT_UNRECORDED,
                    f"{where} is kept ({declared.kind}) but the run never recorded it as kept",
                )
            if declared.kind == "impossible":  # a change still made: a person must know
                yield from _left_to_a_person(op, where, ending, run, named, "cannot be undone")
            continue
        undo_ids = {u.operation_id for u in operations.values() if u.compensates == op.operation_id}
        if declared is not None and declared.effect is not None:
            undo_ids.add(compensation_id(op.operation_id, declared.effect))
        undone = sum(1 for c in changes if c.operation_id in undo_ids)
        if undone > 1:
            yield Violation(ViolationKind.DUPLICATE, f"{op.effect} undone {undone} times")
        elif undone == 0:
            yield from _left_to_a_person(op, where, ending, run, named, "was made and never undone")


def _left_to_a_person(
    op: OperationRecord, where: str, ending: str, run: RunRecord, named: set[str], what: str
) -> Iterator[Violation]:
    """A change still made at the end of a saga: a violation unless the run ends with a person
    whose operator item names it."""
    if run.status != RunStatus.NEEDS_PERSON:
        yield Violation(ViolationKind.LEFT_UNCOMPENSATED, f"{where} {what}, yet {ending}")
    elif op.effect not in named and op.operation_id not in named:
        yield Violation(
            ViolationKind.LEFT_UNREPORTED,
            f"{where} {what}, and the operator item {run.id} is left in does not name it",
        )


def _declared_undo(spec: Spec, effect: str) -> Compensation | None:
    for row in spec.transitions:
        if row.external_effect == effect and row.compensation is not None:
            return row.compensation
    return None


def _named_in_queue(runner: Runner, run: RunRecord) -> set[str]:
    """The effects and operation IDs the run's operator item names: in its evidence (left to
    undo, failed, or impossible to undo), or in what it asks the person to do."""
    found = evidence(runner, run)
    named = {str(d["effect"]) for d in found["left"]} | {str(d["effect"]) for d in found["failed"]}
    named |= {str(d["effect"]) for d in found["not_undoable"] if d.get("undo") == "impossible"}
    history = runner.store.history(run.id)
    queued = latest_event(history, (EventKind.QUEUED, EventKind.STUCK))
    named |= {str(queued[k]) for k in ("effect", "operation_id") if queued.get(k)}
    left = latest_event(history, (EventKind.COMPENSATION_INCOMPLETE,))
    named |= {str(v) for k in ("effects", "operation_ids") for v in left.get(k, ())}
    return named
