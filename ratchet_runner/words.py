"""The words a run is stored in: its status, its operations' statuses, its history's event kinds.

Each is a :class:`~enum.StrEnum`, so a member *is* its word: it compares equal to the string,
is written to the store as it, and ``json.dumps`` gives the plain word. What the store, the
history, ``--json`` and the HTTP API give out is the same as when these were bare strings; the
library names the members, so a misspelt word is a type error rather than a run that never
matches. Defined here, on the ground floor, because the store writes them, the engine decides
them and review, the service and the command line read them; it imports nothing.

These are the runner's words, not the spec's: the events a spec's rows fire (``ok``,
``refused``, ``expired``) are written in the spec and stay strings, though an outcome's word is
often the same.
"""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    """Where a run stands (docs/explanation/lifecycle.md)."""

    RUNNING = "running"
    WAITING = "waiting"
    DONE = "done"
    NEEDS_PERSON = "needs_person"
    PAUSED = "paused"
    CANCELLED = "cancelled"


#: A run's statuses (docs/explanation/lifecycle.md), as the plain words ``--status`` offers (click
#: would offer an enum's member names).
RUN_STATUSES = tuple(status.value for status in RunStatus)

#: The statuses of a run that has ended: nothing more is driven in it.
ENDED = (RunStatus.DONE, RunStatus.CANCELLED)


class OperationStatus(StrEnum):
    """Where an operation (one effect under one operation ID) stands."""

    #: A compensation registered beside the forward effect it would undo, not begun.
    REGISTERED = "registered"
    #: Written ahead, not known to be made: whoever takes it up looks it up before calling.
    PENDING = "pending"
    DONE = "done"
    REFUSED = "refused"
    EXHAUSTED = "exhausted"
    UNKNOWN = "unknown"
    #: Its approval expired before it could be sent again: it is never sent on it.
    EXPIRED = "expired"
    #: Left behind by the naive strategy (``ratchet check --compare naive``), which starts a
    #: fresh operation instead of looking the old one up.
    ABANDONED = "abandoned"


#: The statuses of an operation the run gave up on, each an outcome a person may take up.
GAVE_UP = (OperationStatus.EXHAUSTED, OperationStatus.UNKNOWN, OperationStatus.REFUSED)


class EventKind(StrEnum):
    """The kind of an entry of a run's history (what ``ratchet trace`` shows)."""

    # the run
    CREATED = "created"
    MOVED = "moved"
    STUCK = "stuck"
    STEP_FAILED = "step_failed"
    QUEUED = "queued"
    PAUSED = "paused"
    TIMER = "timer"
    SIGNAL = "signal"
    OPERATOR = "operator"
    LEASED = "leased"
    RESCUED = "rescued"
    REVALIDATED = "revalidated"
    VERSION_STUCK = "version_stuck"
    VERSION_CANCELLED = "version_cancelled"
    MIGRATED = "migrated"
    MIGRATION_ROLLED_BACK = "migration_rolled_back"
    PRUNED = "pruned"
    # approvals
    APPROVED = "approved"
    REJECTED = "rejected"
    APPROVAL_EXPIRED = "approval_expired"
    DECISION_NEEDED = "decision_needed"
    DECISION_REFUSED = "decision_refused"
    # an effect, by the protocol
    PENDING = "pending"
    CALL = "call"
    NOT_SENT = "not_sent"
    TIMEOUT = "timeout"
    UNAVAILABLE = "unavailable"
    BACKOFF = "backoff"
    RETRY_SCHEDULED = "retry_scheduled"
    RESUMED = "resumed"
    #: The store was put back from a copy: the operation is looked up before its first call.
    RESTORE_LOOKUP = "restore_lookup"
    SKIPPED = "skipped"
    RECONCILE_FOUND = "reconcile_found"
    RECONCILE_NOT_FOUND = "reconcile_not_found"
    RECONCILE_FAILED = "reconcile_failed"
    RECONCILE_UNSETTLED = "reconcile_unsettled"
    RECONCILE_IMPOSSIBLE = "reconcile_impossible"
    SETTLE_SCHEDULED = "settle_scheduled"
    DONE = "done"
    REFUSED = "refused"
    EXHAUSTED = "exhausted"
    UNKNOWN = "unknown"
    ESCALATED = "escalated"
    DUPLICATE_DETECTED = "duplicate_detected"
    VERIFIED = "verified"
    # undoing
    COMPENSATION_REGISTERED = "compensation_registered"
    NO_COMPENSATION = "no_compensation"
    COMPENSATION_SKIPPED = "compensation_skipped"
    COMPENSATED = "compensated"
    COMPENSATION_INCOMPLETE = "compensation_incomplete"
