"""The store's records: the rows it hands back, and the rows a :class:`Change` writes.

What the store reads comes back as frozen records (:class:`RunRecord`, :class:`EventRecord`,
:class:`OperationRecord`, :class:`ApprovalRecord`, :class:`TimerRecord`, :class:`SignalRecord`).
What it writes comes in as a :class:`NewRun` (a run to create) or a :class:`Change` (one move of
a run, applied atomically by :meth:`ratchet_runner.store.store.Store.commit`), whose rows are
typed: :class:`NewOperation`, :class:`NewCompensation`, :class:`OperationUpdate`,
:class:`NewApproval`, :class:`NewTimer`, :class:`NewSignal`. The store fills in what every row of
a change shares (the run's ID, the change's time), so a row carries only what is its own.

Over 400 lines: one concern, the types of what the store reads and writes, each a few lines of
fields with what each field means; split, a reader would go between files to see one change.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypedDict

from ..errors import StoreError
from ..words import EventKind, OperationStatus, RunStatus
from .context import RunContext, loaded

#: One entry of a run's history, as a change writes it: its kind and its data (plain JSON).
Event = tuple[EventKind, dict[str, Any]]

#: A row about to be written: the name of its table, its values, and how a message names it.
Row = tuple[str, Mapping[str, Any], str]


# -- what the store reads -------------------------------------------------------------------


@dataclass(frozen=True)
class SpecVersion:
    """A spec version runs were started under (its text: :meth:`Store.spec_text`)."""

    digest: str
    name: str
    spec_version: int
    policy_version: str
    created_at: float


@dataclass(frozen=True)
class RunRecord:
    id: str
    workflow: str
    spec_digest: str
    business_key: str
    state: str
    status: RunStatus
    version: int
    input: dict[str, Any]
    context: RunContext
    created_at: float
    updated_at: float
    wake_at: float | None = None
    lease_owner: str | None = None
    lease_token: str | None = None
    lease_expires_at: float | None = None
    #: When the finished run was pruned to its tombstone (``ratchet prune``), or None.
    pruned_at: float | None = None

    def __post_init__(self) -> None:
        # A row read back holds the plain word; the record holds the member it is.
        object.__setattr__(self, "status", RunStatus(self.status))
        if not isinstance(self.context, dict):
            return
        try:
            context = loaded(self.context)
        except ValueError as exc:
            raise StoreError(f"the context of run {self.id} cannot be read: {exc}") from None
        if context is not None:  # operations stored by their place (context.stored)
            object.__setattr__(self, "context", context)


@dataclass(frozen=True)
class EventRecord:
    """One event of a run's history, as written (``id``: its place in the run's, from 1)."""

    id: int
    run_id: str
    version: int
    kind: str
    data: dict[str, Any]
    at: float


@dataclass(frozen=True)
class OperationRecord:
    operation_id: str
    run_id: str
    effect: str
    role: str
    args: dict[str, Any]
    #: SHA-256 of the arguments' canonical JSON (empty for an undo not begun). Stored only
    #: where it is not that of ``args`` as they stand (revision 0007: a pruned run's
    #: operations, whose arguments are emptied); None given is worked out here.
    fingerprint: str | None
    status: OperationStatus
    attempts: int
    receipt: dict[str, Any] | None
    last_error: str | None
    compensates: str | None
    created_at: float
    updated_at: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", OperationStatus(self.status))
        if self.fingerprint is None:
            object.__setattr__(self, "fingerprint", fingerprint(self.args))


def fingerprint(args: Any) -> str:
    """The fingerprint of an operation's arguments: SHA-256 of their canonical JSON (sorted
    keys, no spaces, UTF-8 kept), as :func:`ratchet_runner.engine.identity.sha256` gives it."""
    return hashlib.sha256(_CANONICAL(args).encode("utf-8")).hexdigest()


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode


@dataclass(frozen=True)
class ApprovalRecord:
    id: int
    run_id: str
    name: str
    effect: str
    digest: str
    decision: str
    actor: str
    role: str
    reason: str | None
    policy_version: str
    spec_digest: str
    decided_at: float
    expires_at: float | None
    consumed_at: float | None


@dataclass(frozen=True)
class TimerRecord:
    id: int
    run_id: str
    state: str
    event: str
    due_at: float
    created_at: float
    fired_at: float | None
    outcome: str | None


@dataclass(frozen=True)
class DuplicateRecord:
    id: int
    run_id: str
    operation_id: str
    workflow: str
    effect: str
    role: str
    receipts: list[dict[str, Any]]
    via: str
    detected_at: float


@dataclass(frozen=True)
class SignalRecord:
    signal_id: str
    run_id: str
    event: str
    data: dict[str, Any]
    received_at: float


# -- the rows a change writes ---------------------------------------------------------------


class NewOperation(TypedDict):
    """An operation recorded by a change (its run and times are the change's; no receipt, no
    error yet)."""

    operation_id: str
    effect: str
    role: str
    args: dict[str, Any]
    #: None: that of ``args`` (:func:`fingerprint`), worked out when the record is read.
    fingerprint: str | None
    status: OperationStatus
    attempts: int


class NewCompensation(NewOperation):
    """A compensation registered beside the forward operation it would undo."""

    compensates: str


class OperationUpdate(TypedDict, total=False):
    """The columns a change sets on an operation already recorded (``updated_at`` is the
    change's time)."""

    args: dict[str, Any]
    fingerprint: str | None
    status: OperationStatus
    attempts: int
    receipt: dict[str, Any] | None
    last_error: str | None


class NewApproval(TypedDict):
    """A decision recorded by a change (not consumed yet)."""

    name: str
    effect: str
    digest: str
    decision: str
    actor: str
    role: str
    reason: str | None
    policy_version: str
    spec_digest: str
    decided_at: float
    expires_at: float | None


class NewTimer(TypedDict):
    """A timer armed by a change (created at the change's time)."""

    state: str
    event: str
    due_at: float


class NewDuplicate(TypedDict):
    """A lookup that found one operation ID's change made more than once (its run is the
    change's; ``detected_at`` its time): the receipts, the one the run keeps first."""

    operation_id: str
    workflow: str
    effect: str
    role: str
    receipts: list[dict[str, Any]]
    via: str


class NewSignal(TypedDict):
    """A signal a run received, recorded by the change it causes."""

    signal_id: str
    event: str
    data: dict[str, Any]
    received_at: float


# -- what the store writes ------------------------------------------------------------------


@dataclass(frozen=True)
class NewRun:
    """A run to create (:meth:`~ratchet_runner.store.store.Store.create_run`): at version 1,
    with a ``created`` event, then ``events``, and the ``timers`` its first state arms.
    ``binding``: the binding it starts under (name and digest, never a secret), and
    ``ratchet_version``: the Ratchet that creates it, each recorded in the ``created`` event
    when given."""

    id: str
    workflow: str
    spec_digest: str
    business_key: str
    state: str
    status: RunStatus
    input: dict[str, Any]
    at: float
    context: RunContext = field(default_factory=RunContext)
    timers: Sequence[NewTimer] = ()
    events: Sequence[Event] = ()
    binding: dict[str, Any] | None = None
    ratchet_version: str | None = None
    #: Whether its creation wakes the workers (:mod:`~ratchet_runner.store.bell`): not when the
    #: process creating it carries it on itself at once.
    wake: bool = True
    #: The values the run is related to others by (``evidence_keys``): input path (``input.order``)
    #: to the digest of the value there.
    keys: Mapping[str, str] = field(default_factory=dict)

    def record(self) -> RunRecord:
        """The run as its creation writes it."""
        return RunRecord(
            id=self.id,
            workflow=self.workflow,
            spec_digest=self.spec_digest,
            business_key=self.business_key,
            state=self.state,
            status=self.status,
            version=1,
            input=self.input,
            context=self.context,
            created_at=self.at,
            updated_at=self.at,
        )

    def history(self) -> list[Event]:
        """The events its creation writes: ``created``, then its own."""
        data: dict[str, Any] = {"state": self.state, "business_key": self.business_key}
        if self.binding is not None:
            data["binding"] = dict(self.binding)
        if self.ratchet_version is not None:
            data["ratchet_version"] = self.ratchet_version
        return [(EventKind.CREATED, data), *self.events]

    def rows(self) -> Iterator[Row]:
        """The rows its creation writes."""
        yield "runs", self.record().__dict__, "run"
        for kind, data in self.history():
            yield "history", {"events": data}, f"{kind} event"
        for timer in self.timers:
            yield "timers", dict(timer), "timer"
        for row in self.key_rows():
            yield "evidence_keys", row, "evidence key"

    def key_rows(self) -> list[dict[str, Any]]:
        """Its ``evidence_keys`` rows (without the run's ID, which the writer adds)."""
        return [
            {"workflow": self.workflow, "path": path, "value": value, "created_at": self.at}
            for path, value in sorted(self.keys.items())
        ]


@dataclass
class Change:
    """Everything one move of a run writes, applied atomically by
    :meth:`~ratchet_runner.store.store.Store.commit`."""

    run_id: str
    expected_version: int
    at: float
    base: RunRecord | None = None
    state: str | None = None
    spec_digest: str | None = None
    lease_token: str | None = None  # the lease this commit is made under (fencing)
    # (owner, seconds): take the lease ``lease_token`` with this commit if the run is free (no
    # lease, or an expired one) — or keep it, renewed, if it is already this one; how a command
    # holds the runs it changes without an extra round trip (see ratchet_runner.engine.commands)
    take_lease: tuple[str, float] | None = None
    status: RunStatus | None = None
    context: RunContext | None = None
    events: list[Event] = field(default_factory=list)
    new_operations: list[NewOperation | NewCompensation] = field(default_factory=list)
    operation_updates: list[tuple[str, OperationUpdate]] = field(default_factory=list)
    new_approvals: list[NewApproval] = field(default_factory=list)
    consume_approvals: list[int] = field(default_factory=list)
    new_timers: list[NewTimer] = field(default_factory=list)
    cancel_timers_of_state: str | None = None
    fire_timer: int | None = None
    new_signals: list[NewSignal] = field(default_factory=list)
    new_duplicates: list[NewDuplicate] = field(default_factory=list)
    #: Whether committing it may wake the workers (:mod:`~ratchet_runner.store.bell`): not
    #: while the caller carries the run on itself with no lease (:meth:`Runner.advance
    #: <ratchet_runner.engine.runner.Runner.advance>`), which wakes them once when it lets go.
    wake: bool = True

    def event(self, kind: EventKind, **data: Any) -> Change:
        self.events.append((kind, data))
        return self

    def rows(self, after: RunRecord) -> Iterator[Row]:
        """The rows it writes, the run as it leaves it (``after``) first."""
        yield "runs", {"state": after.state, "context": after.context}, "run"
        for kind, data in self.events:
            yield "history", {"events": data}, f"{kind} event"
        for op in self.new_operations:
            yield "operations", dict(op), "operation"
        for _operation_id, fields in self.operation_updates:
            yield "operations", dict(fields), "operation"
        for approval in self.new_approvals:
            yield "approvals", dict(approval), "approval"
        for timer in self.new_timers:
            yield "timers", dict(timer), "timer"
        for signal in self.new_signals:
            yield "signals", dict(signal), "signal"
        for found in self.new_duplicates:
            yield "duplicates", dict(found), "duplicate"

    def writes_an_operation_twice(self) -> bool:
        """Whether two of its writes are to one operation (two updates, or an insert and an
        update): what a one-statement commit cannot order, on either database."""
        updated = [operation_id for operation_id, _ in self.operation_updates]
        inserted = {op["operation_id"] for op in self.new_operations}
        return len(set(updated)) != len(updated) or bool(inserted.intersection(updated))

    def preview(self, base: RunRecord) -> RunRecord:
        """The run as this change will leave it, if ``base`` is the run it applies to (a leased
        commit that takes the run out of ``running`` releases the lease with it)."""
        context = self.context if self.context is not None else base.context
        status = self.status if self.status is not None else base.status
        lease: dict[str, Any] = {}
        if self.lease_token is None or status != RunStatus.RUNNING:
            lease = {"lease_owner": None, "lease_token": None, "lease_expires_at": None}
        elif self.take_lease is not None:  # the expiry is the database's: this is its estimate
            owner, seconds = self.take_lease
            lease = {
                "lease_owner": owner,
                "lease_token": self.lease_token,
                "lease_expires_at": self.at + seconds,
            }
        return replace(  # one copy of the run (a copy costs more than the rest of this)
            base,
            version=self.expected_version + 1,
            updated_at=self.at,
            state=self.state if self.state is not None else base.state,
            status=status,
            context=context,
            spec_digest=self.spec_digest or base.spec_digest,
            wake_at=context.get("wake_at"),
            **lease,
        )


def latest_event(history: Sequence[EventRecord], kinds: Iterable[str]) -> dict[str, Any]:
    """The data of the newest event of one of ``kinds`` in ``history``, or ``{}``."""
    wanted = set(kinds)
    return next((dict(e.data) for e in reversed(history) if e.kind in wanted), {})
