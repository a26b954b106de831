"""A step of the effect protocol: what it stands on, and how it ends.

:class:`Step` holds what one effect's step works with (the run, its spec version, the effect,
the arguments evaluated against the run, its operation ID, the notes written with its next
commit), and the ways a step ends: done (the receipt kept, the run moved by its ``ok`` row, or
a change found made twice held for its undo), ended without its change made (``refused``,
``exhausted``, ``unknown``: the spec's row for it), or handed to a person. The protocol that
reaches those ends, the write-ahead, the deadline, the call and the reconcile, is
:class:`~ratchet_runner.engine.protocol.EffectStep`; the compensation and the undo of an extra
change end differently and say so by overriding these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..adapters.base import Escalate, Found
from ..spec.model import Effect, Row, Spec
from ..store.records import Change, Event, OperationRecord, RunRecord
from ..words import EventKind, OperationStatus, RunStatus
from . import duplicates
from .activation import activation
from .host import StepHost
from .identity import evaluate_args, operation_id
from .providers import record_sent_by


@dataclass
class Notes:
    """What happened since the last commit, to be written with the next one."""

    events: list[Event] = field(default_factory=list)

    def note(self, kind: EventKind, **data: Any) -> None:
        self.events.append((kind, data))

    def flush_into(self, change: Change) -> Change:
        change.events[:0] = self.events
        self.events = []
        return change


class Step:
    """One effect's step: its state, and how it ends (:class:`~.protocol.EffectStep` acts)."""

    role = "forward"
    #: What the history calls the way this step performs an effect.
    strategy = "ratchet"

    def __init__(self, host: StepHost, run: RunRecord, spec: Spec, effect: Effect) -> None:
        self.host = host
        self.run = run
        self.spec = spec
        self.effect = effect
        self.ctx = self._activation(run, spec)
        self.args = evaluate_args(effect, self.ctx)
        self.log = Notes()
        self.adapter = host.adapter(spec, effect.adapter)
        self.row: Row | None = None
        self.operation_id = self._name()
        self.semantics = host.semantics(spec, effect)
        #: The latest moment, as this process knows it, that a request of this step's attempt
        #: may have been sent (epoch seconds): when its call ended for an unknown outcome; 0 when
        #: its outcome is known not to be a change (a 503, a connection refused): none in doubt.
        self._ended: float | None = None
        #: Whether this step already sent an attempt again that it could not send in time.
        self._resent = False
        #: Whether this step believed a lookup that found nothing only after waiting out the
        #: provider's commit window: a retry then is verified later (:mod:`.verify`).
        self._waited_out = False
        #: Whether this step looked its operation up because the store was put back from a copy.
        self._restore_looked = False

    def _activation(self, run: RunRecord, spec: Spec) -> dict[str, Any]:
        """What the effect's arguments are evaluated against (:func:`activation`)."""
        return activation(run, spec)

    def _name(self) -> str:
        """The operation ID: the row's idempotency key over the arguments (a row that names no
        key, which ``validate`` flags, is named by the default fields)."""
        self.row = next(
            r for r in self.spec.rows_from(self.run.state) if r.external_effect == self.effect.name
        )
        return operation_id(self.spec, self.row, self.effect, self.args, self.ctx)

    @property
    def receipt_field(self) -> str | None:
        return self.row.receipt if self.row is not None else self.effect.receipt

    def _change(self) -> Change:
        return self.log.flush_into(self.host.change(self.run))

    def _proves(self, receipt: dict[str, Any]) -> bool:
        if not isinstance(receipt, dict) or not receipt:
            return False
        return self.receipt_field is None or bool(receipt.get(self.receipt_field))

    def _keep_what_ended(self, change: Change, op: OperationRecord) -> None:
        """Keep with ``change`` what this process learnt of its call (:attr:`_ended`), so that
        whoever looks ``op`` up next judges by it."""
        if self._ended is None or self.semantics is None or self.semantics.window <= 0:
            return
        context = change.context if change.context is not None else self.run.context
        kept = context.get("sent_by", {}).get(op.operation_id, self._ended)
        record_sent_by(change, self.run, op.operation_id, min(kept, self._ended))

    def _at_crash_point(self, point: str, operation_ids: list[str], ended: float | None) -> None:
        """The crash-practice hook at ``point`` (``--interrupt``). A practice crash happens
        where no call is in flight, and gives its lease back so that ``ratchet resume`` can go
        on at once; so that it is judged as this process would judge it, what it knows of its
        call is kept first (``ended``: 0 when no request left, or when the call ended) for
        ``operation_ids`` (those the run keeps a send time for). A real crash keeps its lease,
        and whoever takes the run over after it has run out waits out the provider's commit
        window from the attempt's deadline."""
        kept = self.run.context.get("sent_by", {})
        known = [i for i in operation_ids if i in kept]
        if ended is not None and known and self.host.interrupts_at(point, self.effect.name):
            change = self.host.change(self.run)
            for operation_id in known:
                record_sent_by(change, self.run, operation_id, ended)
            self.run = self.host.store.commit(change)
        self.host.interrupt(point, self.effect.name)

    # -- how it ends ------------------------------------------------------------------------

    def _escalate(self, op: OperationRecord, outcome: Escalate) -> RunRecord:
        """Only a person can take the effect on: the run waits in the operator queue where it
        stands, with the evidence. The operation is recorded ``unknown`` when the change may
        exist (a compensation looks it up before deciding), and stays ``pending`` otherwise
        (a retry looks it up first all the same)."""
        change = self._change()
        status = OperationStatus.UNKNOWN if outcome.possibly_applied else OperationStatus.PENDING
        change.operation_updates.append(
            (op.operation_id, {"status": status, "last_error": outcome.reason})
        )
        change.status = RunStatus.NEEDS_PERSON
        change.context = {**self.run.context, "wake_at": None}
        if not outcome.possibly_applied:
            self._ended = 0.0  # nothing was made: no request of this attempt is in doubt
        self._keep_what_ended(change, op)
        where = {"operation_id": op.operation_id, "effect": self.effect.name}
        change.event(
            EventKind.ESCALATED,
            **where,
            role=self.role,
            reason=outcome.reason,
            possibly_applied=outcome.possibly_applied,
            evidence=outcome.evidence,
        )
        command = "compensate" if self.role == "compensation" else "retry"
        maybe = f"; it may have been made under operation {op.operation_id}"
        maybe = maybe if outcome.possibly_applied else ""
        action = (
            f"{self.effect.name} needs a person: {outcome.reason}{maybe}. Once the cause is "
            f"fixed, 'ratchet ops {command} {self.run.id} --as NAME --role ROLE' takes it "
            "again under the same operation ID, looking it up first"
        )
        change.event(EventKind.QUEUED, queue=self.run.state, operator_action=action, **where)
        return self.host.store.commit(change)

    def _done_change(self, op: OperationRecord, receipt: dict[str, Any], via: str) -> Change:
        change = self._change()
        sent = self.run.context.get("sent_by", {})
        if op.operation_id in sent:  # done: no request of it is in doubt any more
            left = {k: v for k, v in sent.items() if k != op.operation_id}
            change.context = {**self.run.context, "sent_by": left}
        if op.status != OperationStatus.DONE:
            change.operation_updates.append(
                (op.operation_id, {"status": OperationStatus.DONE, "receipt": receipt})
            )
        change.event(
            EventKind.DONE,
            operation_id=op.operation_id,
            effect=self.effect.name,
            role=self.role,
            via=via,
            receipt={self.receipt_field or "receipt": receipt.get(self.receipt_field or "")},
        )
        return change

    def _record_done(self, change: Change, op: OperationRecord, receipt: dict[str, Any]) -> None:
        """Keep in ``change``'s context what a done forward effect leaves: its receipt, which
        later arguments and guards read, and its place among the completed effects, the order
        the saga undoes them in."""
        context = change.context if change.context is not None else self.run.context
        receipts = dict(context.get("receipts", {}))
        receipts[self.effect.name] = receipt
        completed = list(context.get("completed", []))
        if op.operation_id not in completed:
            completed.append(op.operation_id)
        change.context = {**context, "receipts": receipts, "completed": completed, "wake_at": None}

    def _found_twice(self, op: OperationRecord, found: Found) -> RunRecord:
        """The lookup found the change made more than once under the operation ID: keep the
        first (or the one on record), record the duplicate, and hold the run where it stands
        while the extra ones are undone, where the spec says how; then a person decides
        (:mod:`.duplicates`). Nothing is called for it now."""
        kept, extra = duplicates.kept_and_extra(found, op.receipt, self.receipt_field)
        extra = duplicates.unrecorded(self.run, op.operation_id, extra)
        if not extra:
            # recorded already (by the verification, or an earlier lookup): the person asked let
            # the run go on (``ratchet ops retry``), and it goes on with the change it kept
            return self._finish(op, kept, via="reconcile")
        change = self._done_change(op, kept, "reconcile")
        self._record_done(change, op, kept)
        duplicates.note(
            change,
            self.run,
            self.spec,
            op,
            kept,
            extra,
            via="reconcile",
            undo=self.row.compensation if self.row is not None else None,
        )
        self.run = self.host.store.commit(change)
        return self.run

    def _finish(self, op: OperationRecord, receipt: dict[str, Any], via: str) -> RunRecord:
        change = self._done_change(op, receipt, via)
        self._record_done(change, op, receipt)
        receipts = dict(change.context.get("receipts", {})) if change.context else {}
        ctx = activation(self.run, self.spec, receipts=receipts)
        before = set(self.run.context.get("sent_by", {}))
        moved = self.host.move(self.run, self.spec, "ok", change, ctx, write_ahead_next=True)
        self.run = moved  # the next effect's write-ahead, if it rode in this commit: not sent
        ahead = [i for i in moved.context.get("sent_by", {}) if i not in before]
        self._at_crash_point("after-receipt", ahead, 0.0)
        return self.run

    def _outcome(
        self,
        op: OperationRecord,
        event: OperationStatus,
        reason: str,
        evidence: dict[str, Any] | None = None,
    ) -> RunRecord:
        """The effect ended without its change made, and said so: the operation's status, the
        history's event and the spec's event fired are the same word (``refused``,
        ``exhausted``, ``unknown``)."""
        change = self._ended_change(op, event, reason, evidence)
        change.context = {**self.run.context, "wake_at": None}
        self._keep_what_ended(change, op)
        return self.host.move(self.run, self.spec, event, change, self.ctx)

    def _ended_change(
        self,
        op: OperationRecord,
        event: OperationStatus,
        reason: str,
        evidence: dict[str, Any] | None,
    ) -> Change:
        """A change recording that ``op`` ended without its change made: its status (once)
        and the history's event, which are the same word."""
        change = self._change()
        if op.status != event:
            change.operation_updates.append(
                (op.operation_id, {"status": event, "last_error": reason})
            )
        change.event(
            EventKind(event),
            operation_id=op.operation_id,
            effect=self.effect.name,
            role=self.role,
            reason=reason,
            evidence=evidence or {},
        )
        return change
