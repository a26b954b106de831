"""Duplicates: one operation ID's change found made more than once, and what the run does then.

A provider that does not deduplicate by key makes a second change for a second request under one
operation ID. The runner sends one only once a lookup has found nothing for longer than the
provider's ``commits_within`` (:mod:`.providers`); a provider that commits a request later than
it declared can still leave two changes. A lookup that finds them (a reconcile, the saga's
lookup before an undo, an operator's ``ratchet ops reconcile``, a later verification of a retry,
:mod:`.verify`) reports them all (``Found.others``), and the run then:

1. keeps one, the change the run already recorded or else the first, and records the duplicate:
   a ``duplicate_detected`` event with every receipt, and a row in the store's ``duplicates``
   table, which ``/metrics`` counts;
2. undoes each extra one where the spec says how (the row's ``compensation`` effect, with its
   arguments taken from the extra change's receipt), each an operation of its own with its own
   operation ID (role ``undo_extra``), by the full protocol;
3. waits for a person where it stands (``needs_person``), with both receipts and what was undone
   or is left to undo by hand; ``ratchet ops retry`` takes it on from where it was.

This module holds what is decided, as plain functions over a
:class:`~ratchet_runner.store.records.Change`; the undo step and the hold are
:mod:`.undo_extra`'s.
"""

from __future__ import annotations

from typing import Any, Final

from ..adapters.base import Found
from ..errors import RunError
from ..spec.model import Compensation, Spec
from ..store.records import Change, OperationRecord, RunRecord
from ..words import EventKind, OperationStatus, RunStatus
from .activation import activation
from .identity import evaluate_args, sha256
from .write_ahead import list_operations

#: The role of an operation that undoes an extra change found under another's operation ID.
UNDO_EXTRA = "undo_extra"

#: The run's context keys: the duplicates found, the undos still to make, and where the run
#: was (state and status) when the first was found, which ``ratchet ops retry`` returns it to.
FOUND: Final = "duplicates"
UNDOING: Final = "duplicate_undo"
WAS: Final = "duplicate_was"


def kept_and_extra(
    found: Found, recorded: dict[str, Any] | None, field: str | None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Which change a run keeps of those a lookup found under one operation ID (the one it
    recorded already, by its receipt field, else the first), and the extra ones."""
    every = [found.receipt, *found.others]
    key = field or ""
    if recorded is not None:
        for index, receipt in enumerate(every):
            if receipt == recorded or (key and receipt.get(key) == recorded.get(key) is not None):
                return receipt, every[:index] + every[index + 1 :]
    return every[0], every[1:]


def unrecorded(
    run: RunRecord, operation_id: str, extra: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The changes among ``extra`` that ``run`` has not recorded yet as made under
    ``operation_id``. A change found twice is found twice again by every later lookup (the
    retry's verification after a reconcile recorded it, a reconcile after the verification
    did, an ``ops retry`` that looks it up once more): each records only what is new, a third
    change, so that nothing is recorded, counted or undone twice."""
    known = [
        receipt
        for found in run.context.get(FOUND, [])
        if found.get("operation_id") == operation_id
        for receipt in (found.get("kept"), *found.get("extra", []))
    ]
    return [receipt for receipt in extra if receipt not in known]


def holding(run: RunRecord) -> bool:
    """Whether ``run`` is held for a duplicate (undoing the extra changes, or waiting for a
    person to look at them)."""
    return WAS in run.context


def pending(run: RunRecord) -> list[str]:
    """The operation IDs of the undos of extra changes still to make, oldest first."""
    return list(run.context.get(UNDOING, []))


def note(
    change: Change,
    run: RunRecord,
    spec: Spec,
    op: OperationRecord,
    kept: dict[str, Any] | None,
    extra: list[dict[str, Any]],
    *,
    via: str,
    undo: Compensation | None,
) -> None:
    """Record in ``change`` that ``op``'s change was found made ``1 + len(extra)`` times (the
    run keeps ``kept``), or, with ``kept`` None, made ``len(extra)`` times after the run gave it
    up: the event, the store's row, an undo registered for each extra change where ``undo``
    (the forward row's compensation) is an effect, and the run held (running, so that whoever
    drives it next makes the undos, then hands it to a person)."""
    context = (change.context if change.context is not None else run.context).copy()
    undos: list[str] = []
    why_not = _why_no_undo(op, undo)
    if why_not is None and undo is not None and undo.effect is not None:
        for receipt in extra:
            made, why_not = _undo_for(change, run, spec, op, undo.effect, receipt)
            if made is None:
                break
            undos.append(made)
    found = {
        "operation_id": op.operation_id,
        "effect": op.effect,
        "role": op.role,
        "kept": kept,
        "extra": extra,
        "undo": undos,
        "cannot_undo": why_not,
        "via": via,
    }
    context[FOUND] = [*context.get(FOUND, []), found]
    context[UNDOING] = [*context.get(UNDOING, []), *undos]
    if WAS not in context:
        state = change.state or run.state
        status = change.status or run.status
        context[WAS] = {"state": state, "status": status}
    context["wake_at"] = None
    change.context = context
    list_operations(change, run, *undos)
    change.status = RunStatus.RUNNING
    change.new_duplicates.append(
        {
            "operation_id": op.operation_id,
            "workflow": run.workflow,
            "effect": op.effect,
            "role": op.role,
            "receipts": [*([kept] if kept is not None else []), *extra],
            "via": via,
        }
    )
    change.event(
        EventKind.DUPLICATE_DETECTED,
        operation_id=op.operation_id,
        effect=op.effect,
        role=op.role,
        changes=len(extra) + (1 if kept is not None else 0),
        given_up=kept is None,
        kept=kept,
        extra=extra,
        undo=undo.effect if undo is not None and undo.effect is not None and undos else None,
        undo_operations=undos,
        cannot_undo=why_not,
        via=via,
    )


def _why_no_undo(op: OperationRecord, undo: Compensation | None) -> str | None:
    """Why the extra changes of ``op`` cannot be undone by the runner (None: they can)."""
    if op.role != "forward":
        return f"{op.effect} is itself an undo: an extra one has no undo of its own"
    if undo is None:
        return f"{op.effect} declares no compensation"
    if undo.effect is None:
        return f"{op.effect}'s compensation is {undo.kind}" + (
            f": {undo.reason}" if undo.reason else ""
        )
    return None


def _undo_for(
    change: Change,
    run: RunRecord,
    spec: Spec,
    op: OperationRecord,
    effect: str,
    receipt: dict[str, Any],
) -> tuple[str | None, str | None]:
    """Register, in ``change``, the undo of one extra change (its arguments from that change's
    receipt): its operation ID, or (None and) why it cannot be made."""
    context = change.context if change.context is not None else run.context
    receipts = {**context.get("receipts", {}), op.effect: receipt}
    try:
        args = evaluate_args(spec.effects[effect], activation(run, spec, receipts=receipts))
    except RunError as exc:
        return None, f"the arguments of {effect} cannot be made from the extra change ({exc})"
    operation_id = sha256({"undo_extra": op.operation_id, "receipt": receipt})
    change.new_operations.append(
        {
            "operation_id": operation_id,
            "effect": effect,
            "role": UNDO_EXTRA,
            "args": args,
            "fingerprint": None,  # that of args, worked out when read
            "status": OperationStatus.REGISTERED,
            "attempts": 0,
            "compensates": op.operation_id,
        }
    )
    return operation_id, None


def extra_receipt(run: RunRecord, undo_id: str) -> tuple[str, dict[str, Any]] | None:
    """The effect and the receipt of the extra change that undo ``undo_id`` undoes."""
    for found in run.context.get(FOUND, []):
        for index, made in enumerate(found.get("undo", [])):
            if made == undo_id and index < len(found.get("extra", [])):
                return str(found["effect"]), dict(found["extra"][index])
    return None


def action(run: RunRecord, failed: dict[str, str]) -> str:
    """What the operator queue asks of a person about the duplicates of ``run``."""
    parts = []
    for found in run.context.get(FOUND, []):
        extra = ", ".join(_brief(r) for r in found.get("extra", []))
        if found.get("kept") is None:
            said = (
                f"{found['effect']} was made under operation {found['operation_id']} after the "
                "run gave it up (its provider committed a request later than its "
                f"commits_within, after every lookup found nothing): {extra}"
            )
        else:
            said = (
                f"{found['effect']} was made {1 + len(found.get('extra', []))} times under "
                f"operation {found['operation_id']} (a provider that does not deduplicate "
                "committed a request later than its commits_within): kept "
                f"{_brief(found.get('kept') or {})}; extra {extra}"
            )
        undone = [u for u in found.get("undo", []) if u not in failed]
        if found.get("cannot_undo"):
            said += f"; not undone ({found['cannot_undo']}): undo it by hand"
        elif undone:
            said += f"; the extra undone by {len(undone)} undo operation(s)"
        for undo in found.get("undo", []):
            if undo in failed:
                said += f"; its undo {undo[:12]} failed ({failed[undo]}): undo it by hand"
        parts.append(said)
    was = run.context.get(WAS, {})
    parts.append(
        f"then 'ratchet ops retry {run.id} --as NAME --role ROLE' takes the run on from "
        f"{was.get('state')} ({was.get('status')}); check the provider's binding (its "
        "commits_within) too"
    )
    return ". ".join(parts)


def _brief(receipt: dict[str, Any]) -> str:
    """A receipt in a sentence: its identifying fields."""
    return ", ".join(f"{k}={v}" for k, v in receipt.items() if k.endswith("id")) or str(receipt)
