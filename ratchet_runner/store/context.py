"""A run's context: what a run keeps beside its state from one move to the next.

The ``runs`` row holds it as plain JSON, and :class:`RunContext` is the type of that JSON: a
``TypedDict``, so the object a move reads and writes *is* the stored dict, its keys in the order
they were written, a key absent or ``null`` as it was, and a row written by any earlier Ratchet
loads as it is. One thing is written shorter (from revision 0007): in the lists of operations
of :data:`BY_PLACE` (``completed``, ``undone``, ...), an operation the run lists in
``operations`` is stored as its place there (from 0) instead of its 64-character ID
(:func:`stored`), and read back as its ID (:func:`loaded`): ``operations`` only ever grows at
its end, so a place names the same operation for good. Every key is optional: a run has what
its moves have written.

Which module writes each key: the runner (on creation), ``timers``, ``controls``, ``drive``,
``approvals``, ``budget``, ``write_ahead``, ``providers``, ``protocol``, ``compensation``,
``verify``, ``duplicates`` and ``undo_extra`` of the engine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NotRequired, TypedDict, cast


class Budget(TypedDict, total=False):
    """What a run has spent of its budget (``budget.max_attempts``, ``budget.max_cost``)."""

    attempts: int
    cost: float


class FailedStep(TypedDict):
    """A step that failed with an error (not an outcome): the run waits for a person."""

    state: str
    code: str
    error: str


class Verification(TypedDict):
    """The schedule of an operation sent again at a provider that keeps no key register: looked
    up every ``every`` seconds until ``until``, ``checks`` made so far."""

    every: float
    until: float
    checks: int


class HeldFrom(TypedDict, total=False):
    """Where a run was when a duplicate was first found: ``ratchet ops retry`` returns it there."""

    state: str
    status: str


class Migrated(TypedDict):
    """Where the last migration (``ratchet migrate --apply``) took the run from: what a rollback
    moves it back by."""

    migration: str
    from_digest: str
    from_version: int
    from_state: str
    #: The version it was moved to (missing in a record written before it was kept).
    to_version: NotRequired[int]
    to_state: str
    at: float
    by: str
    #: The timers it had armed in ``from_state`` (event, due time), and its pause record then:
    #: what a rollback arms and keeps again.
    timers: list[dict[str, Any]]
    pause: dict[str, Any] | None


class Pruned(TypedDict):
    """A finished run compacted to its tombstone (``ratchet prune``): what is left of it."""

    at: float
    #: The SHA-256 of its input's canonical JSON: a start with another input is still refused.
    input_digest: str
    #: How many events of its history were removed.
    events: int
    #: The archive its history was written to first, if any.
    archive: str | None


class RunContext(TypedDict, total=False):
    """A run's context, as stored (see the module docstring)."""

    # -- written when the run is created ------------------------------------------------------
    #: The Ratchet that created the run.
    ratchet_version: str
    #: The binding the run started under: its name and digest, never a secret.
    binding: dict[str, Any]
    #: The strategy a run was started with, when not the protocol (``naive``), kept so that
    #: whoever drives it on drives it the same way.
    strategy: str

    # -- where it waits -----------------------------------------------------------------------
    #: The state whose timers are armed.
    timers_of: str
    #: The pause record of the pause or wait state the run stands in.
    pause: dict[str, Any]
    #: The status a paused run had (``ratchet ops pause``), to resume to.
    paused_from: str
    #: When the run is next to be taken up (a back-off, a settle window), or None.
    wake_at: float | None
    #: The step that failed with an error, until ``ratchet ops retry``.
    failed_step: FailedStep

    # -- its effects ----------------------------------------------------------------------------
    #: Every operation ID the run has recorded, in the order written.
    operations: list[str]
    #: Operation ID to the latest moment its request may have been sent (epoch seconds).
    sent_by: dict[str, float]
    #: Effect name to the receipt of its done forward operation.
    receipts: dict[str, dict[str, Any]]
    #: The done forward operations, in the order they were done (the saga undoes them newest
    #: first).
    completed: list[str]
    #: Attempts an operator granted, by operation ID (``ratchet ops retry``).
    grants: dict[str, int]
    #: Operation ID to how many times its step was left for later because its request could not
    #: be sent before its deadline (the attempt given back, never counted).
    unsent: dict[str, int]
    #: What the run has spent.
    budget_used: Budget
    #: The decision last recorded.
    approval: dict[str, Any]
    #: The operations being verified, by operation ID.
    verifying: dict[str, Verification]

    #: Set when the finished run was pruned to its tombstone.
    pruned: Pruned

    # -- its versions ---------------------------------------------------------------------------
    #: Where the last migration took it from (kept for its rollback).
    migrated: Migrated

    # -- undoing --------------------------------------------------------------------------------
    #: The compensations done, in order.
    undone: list[str]
    #: The forward operations the saga does not undo: found not made, or with no undo
    #: registered.
    skipped_undo: list[str]
    #: Those of them whose change stays made (their undo is impossible): left to a person.
    cannot_undo: list[str]

    # -- a change found made more than once -----------------------------------------------------
    #: Each duplicate found: the operation, the change kept, the extra ones and their undos.
    duplicates: list[dict[str, Any]]
    #: The undos of extra changes still to make, oldest first.
    duplicate_undo: list[str]
    #: Where the run was when the first duplicate was found.
    duplicate_was: HeldFrom
    #: The undos of extra changes that failed, with why.
    duplicate_undo_failed: dict[str, str]


#: The keys of a context that list operations the run lists in ``operations``, stored by place.
BY_PLACE = ("completed", "undone", "skipped_undo", "cannot_undo")


def stored(context: RunContext) -> RunContext:
    """``context`` as the ``runs`` row holds it: each operation of :data:`BY_PLACE`'s lists
    that ``operations`` lists as its place there (the others, and every other key, as they
    are). A new dict where anything is shortened; ``context`` itself is never changed."""
    listed = context.get("operations")
    if not listed or not any(context.get(key) for key in BY_PLACE):
        return context
    place = {operation_id: i for i, operation_id in enumerate(listed)}
    return _each_listed(context, lambda item: place.get(item, item))


def loaded(context: RunContext) -> RunContext | None:
    """``context`` as the ``runs`` row held it, with :data:`BY_PLACE`'s places read back as
    the operations' IDs: a new dict, or None where none was stored by place. A place that
    ``operations`` does not have raises ``ValueError``."""
    for key in BY_PLACE:  # every record read or made passes here: no more than a look
        value = context.get(key)
        if value and type(value) is list and int in map(type, value):
            break
    else:
        return None
    listed = context.get("operations") or []

    def named(item: Any) -> Any:
        if type(item) is not int:
            return item
        if not 0 <= item < len(listed):
            raise ValueError(f"names operation {item} of the {len(listed)} it lists")
        return listed[item]

    return _each_listed(context, named)


def _each_listed(context: RunContext, convert: Callable[[Any], Any]) -> RunContext:
    """A copy of ``context`` (its keys in their order) with ``convert`` applied to each item of
    :data:`BY_PLACE`'s lists."""
    copy = dict(context)
    for key in BY_PLACE:
        value = copy.get(key)
        if value and type(value) is list:
            copy[key] = [convert(item) for item in value]
    return cast(RunContext, copy)


def without(context: RunContext, *keys: str) -> RunContext:
    """``context`` without ``keys``, the others as they were and in their order."""
    # Every key of a context is optional, so any of them left out is still a context.
    return cast(RunContext, {k: v for k, v in context.items() if k not in keys})
