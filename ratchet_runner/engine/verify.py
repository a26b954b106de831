"""Verifying a retry at a provider that keeps no key register, and a saga's undo skipped as not
made: later lookups of the operation.

A provider that does not deduplicate (``dedupe = false``) is sent a request again only once a
lookup has found nothing for longer than its ``commits_within`` (:mod:`.providers`). If it breaks
that promise, committing the first request later still, the operation's change is made twice,
and nothing the run does afterwards would look again. So a retry made on such a "not found" is
verified: the same commit that records the attempt arms a verification (a timer of no state,
which outlives the run's moves, and the schedule in the run's context), and a worker looks the
operation up again at twice the provider's window, then at doubling intervals, for
:data:`VERIFY_FOR` seconds. Each check is a lookup and nothing else. One that finds the change
made more than once records the duplicate (:mod:`.duplicates`): the extra change is undone where
the spec says how, and the run waits for a person, whatever it has done since (a run that ended
is held again). A change found under an operation the run gave up (its lookups found nothing,
even after the window, and it stopped trying; or its saga skipped the undo as not made) is
recorded the same way: every change found is one the run believes was never made, each undone
where the spec says how, and a person asked. A duplicate the run has recorded already (a
reconcile found it first) is looked past, and the checks go on for a third change. The last
check records ``verified``.

A saga's undo skipped because its lookup found nothing (after the provider's window, where it
declared one) rests on the same promise, and arms the same verification
(:func:`~ratchet_runner.engine.compensation.compensate`).
"""

from __future__ import annotations

from typing import Any, Final, Protocol

from ..adapters.base import Found
from ..errors import VersionConflict
from ..spec.model import Compensation, Spec
from ..store.records import Change, OperationRecord, RunRecord, TimerRecord
from ..words import GAVE_UP, EventKind, OperationStatus
from . import duplicates
from .host import RunHost
from .providers import ask
from .resolution import Resolution, refusal


class VerifyHost(RunHost, Protocol):
    """What a check needs of the runner a worker gives it: a run host, and what its adapters
    resolve through. The runner satisfies it; naming it here, not the runner, keeps this module
    (which the effect step and the saga's undo import) below the runner."""

    @property
    def resolution(self) -> Resolution: ...


#: How long a retry at a provider that keeps no key register is verified, in seconds.
VERIFY_FOR = 86400.0

#: The state a verification's timer is armed for: none, so that no move of the run cancels it.
STATE = "*"

#: A verification timer's event: this, then the operation ID.
PREFIX = "verify:"

#: The run's context key: each operation being verified, with its schedule.
VERIFYING: Final = "verifying"


def schedule(change: Change, run: RunRecord, operation_id: str, window: float) -> None:
    """Arm, in ``change`` (the commit of a retry), the verification of ``operation_id``: the
    first check at twice the provider's ``window`` from now."""
    every = 2.0 * max(window, 1.0)
    context = change.context if change.context is not None else run.context
    verifying = dict(context.get(VERIFYING, {}))
    verifying[operation_id] = {"every": every, "until": change.at + VERIFY_FOR, "checks": 0}
    change.context = {**context, VERIFYING: verifying}
    change.new_timers.append(
        {"state": STATE, "event": PREFIX + operation_id, "due_at": change.at + every}
    )


def is_verification(timer: TimerRecord) -> bool:
    """Whether ``timer`` is a verification's (not one of the spec's)."""
    return timer.state == STATE and timer.event.startswith(PREFIX)


def check(runner: VerifyHost, timer: TimerRecord, run: RunRecord) -> str:
    """One check of a verification that is due: ``duplicate`` (found twice, recorded),
    ``again`` (found once or not at all, the next check armed), ``verified`` (the last),
    ``busy`` (the run is held by a live lease: tried again at the next pass), ``left`` (this
    process has not the run's binding), ``stale`` (nothing to verify), ``raced`` (the run moved
    meanwhile: tried again)."""
    operation_id = timer.event.removeprefix(PREFIX)
    op = runner.store.operation(operation_id)
    spec = runner.spec_of(run)
    if op is None or op.effect not in spec.effects:
        runner.store.discard_timer(timer.id, runner.now())
        return "stale"
    if refusal(runner.resolution, run, spec) is not None:
        return "left"
    if run.lease_token is not None and (run.lease_expires_at or 0.0) > runner.now():
        return "busy"
    effect = spec.effects[op.effect]
    if effect.reconcile is None:
        runner.store.discard_timer(timer.id, runner.now())
        return "stale"
    found = ask(
        runner.adapter(spec, effect.adapter),
        effect.reconcile,
        op.operation_id,
        effect.name,
        op.args,
    )
    change = runner.change(run)
    change.fire_timer = timer.id
    field = _receipt_field(spec, op.effect)
    proves = isinstance(found, Found) and (field is None or bool(found.receipt.get(field)))
    entry: dict[str, Any] = dict(run.context.get(VERIFYING, {}).get(operation_id, {}))
    kept: dict[str, Any] | None = {}
    extra: list[dict[str, Any]] = []
    if isinstance(found, Found) and proves and _given_up(run, op):
        # made after the run gave it up (its lookups found nothing, even after the window):
        # every change found is one the run believes was never made
        kept = None
        extra = duplicates.unrecorded(run, operation_id, [found.receipt, *found.others])
    elif isinstance(found, Found) and proves:
        kept, extra = duplicates.kept_and_extra(found, op.receipt, field)
        extra = duplicates.unrecorded(run, operation_id, extra)  # one recorded is looked past
    if extra:
        _done_with(change, run, operation_id)
        duplicates.note(
            change, run, spec, op, kept, extra, via="verify", undo=_undo_of(spec, op.effect)
        )
        return _commit(runner, change, "duplicate")
    checks = int(entry.get("checks", 0)) + 1
    every = float(entry.get("every", 60.0)) * 2
    until = float(entry.get("until", change.at))
    if change.at + every <= until:
        verifying = dict(run.context.get(VERIFYING, {}))
        verifying[operation_id] = {"every": every, "until": until, "checks": checks}
        change.context = {**run.context, VERIFYING: verifying}
        change.new_timers.append(
            {"state": STATE, "event": PREFIX + operation_id, "due_at": change.at + every}
        )
        return _commit(runner, change, "again")
    _done_with(change, run, operation_id)
    change.event(
        EventKind.VERIFIED,
        operation_id=operation_id,
        effect=op.effect,
        checks=checks,
        reason="no second change found under the operation ID in the lookups made after it was "
        "sent again",
    )
    return _commit(runner, change, "verified")


#: The statuses of an operation a run has given up (no further attempt): a change found made
#: under it after all is one the run believes was never made.
GIVEN_UP = frozenset({*GAVE_UP, OperationStatus.EXPIRED})


def _given_up(run: RunRecord, op: OperationRecord) -> bool:
    """Whether ``run`` believes ``op`` was never made: it gave it up, or its saga skipped its
    undo as not made."""
    if op.status == OperationStatus.DONE:
        return False
    return op.status in GIVEN_UP or op.operation_id in run.context.get("skipped_undo", [])


def _commit(runner: VerifyHost, change: Change, outcome: str) -> str:
    try:
        runner.store.commit(change)
    except VersionConflict:  # moved meanwhile (or taken under a lease): the next pass tries again
        return "raced"
    return outcome


def _done_with(change: Change, run: RunRecord, operation_id: str) -> None:
    context = (change.context if change.context is not None else run.context).copy()
    verifying = dict(context.get(VERIFYING, {}))
    verifying.pop(operation_id, None)
    context[VERIFYING] = verifying
    change.context = context


def _receipt_field(spec: Spec, effect: str) -> str | None:
    for row in spec.transitions:
        if row.external_effect == effect:
            return row.receipt or spec.effects[effect].receipt
    return spec.effects[effect].receipt if effect in spec.effects else None


def _undo_of(spec: Spec, effect: str) -> Compensation | None:
    for row in spec.transitions:
        if row.external_effect == effect and row.compensation is not None:
            return row.compensation
    return None
