"""One effect, performed by the protocol: forward effects and the compensations that undo them.

:class:`EffectStep` takes a run that stands in a state performing an effect through the protocol
described in :mod:`ratchet_runner.engine.runner`: the write-ahead record, the deadline, the call,
the reconcile (with the provider's commit window) and a request never sent. What a step stands
on and how it ends are :class:`~ratchet_runner.engine.step.Step`'s.
:class:`~ratchet_runner.engine.compensation.CompensationStep` does the same for one registered
compensation while the run stands in a ``compensate`` state: the same operation-ID
discipline, write-ahead record, reconcile-before-retry and persisted attempts; it differs only in
what happens at the end (no move on success; the compensate state's ``refused`` / ``exhausted`` row
on failure).

A step works against a :class:`~ratchet_runner.engine.host.StepHost` (the runner that hosts it),
and decides with plain functions: the retry budget (:mod:`~ratchet_runner.engine.budget`), the
activation (:mod:`~ratchet_runner.engine.activation`) and approval validity
(:func:`~ratchet_runner.engine.approvals.valid_approval`).

Over 400 lines: one concern, the protocol's own steps, which read best together.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from ..adapters.base import (
    Ambiguous,
    Call,
    Done,
    Escalate,
    Found,
    LookupFailed,
    LookupResult,
    NotFound,
    Outcome,
    Refused,
    Transient,
    not_sent,
)
from ..clock import format_time
from ..errors import (
    ApprovalError,
    ApprovalExpired,
    ApprovalStale,
    LeaseLost,
    RunError,
    VersionConflict,
)
from ..store.records import (
    ApprovalRecord,
    Change,
    NewOperation,
    OperationRecord,
    OperationUpdate,
    RunRecord,
)
from ..store.restores import Restore
from ..words import GAVE_UP, EventKind, OperationStatus
from . import duplicates
from .approvals import ask_again, last_consumed, valid_approval
from .budget import backoff, count_attempt, max_attempts, run_budget_spent, uncount_attempt
from .identity import approval_digest, describe_action
from .observe import called
from .providers import DEFAULT_CALL_SECONDS, ask, conclusive_from, record_sent_by, why_unsettled
from .step import Step
from .verify import schedule as schedule_verification
from .write_ahead import operation_fields, register_compensation, write_ahead

#: How many times one operation may be left for later because its request could not be sent
#: before its deadline (twice in one step each time; none of those attempts counted) before a
#: person is asked: the effect's timeout is too short for the machine, or the machine too
#: loaded for it.
UNSENT_PASSES = 10


class EffectStep(Step):
    """The effect of the state the run stands in, by the protocol."""

    # -- the protocol -----------------------------------------------------------------------

    def perform(self) -> RunRecord:
        # The run's context lists every operation it has recorded, written in the same
        # transaction as each record: an ID it does not list has no record to read.
        ahead = self.host.written_ahead(self.run)
        if ahead is not None and ahead[0].operation_id == self.operation_id:
            return self._call(*ahead)  # written with the move into this state, not yet called
        known = self.operation_id in self.run.context.get("operations", ())
        op = self.host.store.operation(self.operation_id) if known else None
        if op is None or op.status == OperationStatus.REGISTERED:
            return self._begin(op)
        if op.status == OperationStatus.DONE:
            self.log.note(EventKind.SKIPPED, operation_id=op.operation_id, reason="already done")
            return self._finish(op, op.receipt or {}, via="store")
        if op.status in GAVE_UP:
            return self._outcome(op, op.status, op.last_error or op.status)
        if op.attempts > 0:
            self.log.note(EventKind.RESUMED, operation_id=op.operation_id, attempts=op.attempts)
            reconciled = self._reconcile(op)
            if reconciled is not None:
                return reconciled
        return self._attempts(op)

    def _fields(self, attempts: int) -> NewOperation:
        return operation_fields(self.operation_id, self.effect, self.role, self.args, attempts)

    def _write_ahead(self, change: Change, registered: OperationRecord | None) -> OperationRecord:
        """Add the pending record, first attempt counted, to ``change``; return it as stored."""
        fields = self._fields(attempts=1)
        return write_ahead(change, self.run, self.effect, fields, registered, self.strategy)

    @property
    def _call_seconds(self) -> float:
        """How long a call of this effect takes at most, as the run's records are judged."""
        return self.effect.timeout if self.effect.timeout is not None else DEFAULT_CALL_SECONDS

    def _secure_and_fix(self, change: Change) -> float:
        """Before an attempt is committed: make sure the lease lasts the call, fix the call's
        deadline (returned, on the host's monotonic clock), and keep in ``change`` the latest
        moment its request may be sent, which is what a lookup that finds nothing is judged by
        (:mod:`~ratchet_runner.engine.providers`). The deadline is read before the lease is
        checked and that moment after, so a pause in between only makes both safer."""
        began = self.host.monotonic()
        self.host.secure_lease(self.run.id, self.effect.timeout)
        seconds = self.host.call_seconds(self.run.id, self.effect.timeout)
        if self.semantics is not None and self.semantics.window > 0:
            record_sent_by(change, self.run, self.operation_id, self.host.now() + seconds)
        return began + seconds

    def _begin(self, registered: OperationRecord | None) -> RunRecord:
        change = self._change()
        if self.effect.approval is not None and self.role == "forward":
            try:
                approval = self._valid_approval()
            except ApprovalError as refused:
                # Another worker may have consumed the approval and moved the run meanwhile:
                # that is a lost race, not a missing approval.
                if self.host.store.get_run(self.run.id).version != self.run.version:
                    raise VersionConflict(
                        f"run {self.run.id} has moved on (another process took this step)"
                    ) from None
                if isinstance(refused, ApprovalExpired):
                    change.event(
                        EventKind.APPROVAL_EXPIRED, effect=self.effect.name, reason=str(refused)
                    )
                    return self.host.move(self.run, self.spec, "expired", change, self.ctx)
                if isinstance(refused, ApprovalStale):
                    return ask_again(self.host, self.run, self.spec, self.effect, change, refused)
                raise
            change.consume_approvals.append(approval.id)
        if run_budget_spent(self.run, self.spec, self.effect):
            op = self._write_ahead(change, registered)
            change.events = [e for e in change.events if e[0] != "call"]
            self.run = self.host.store.commit(change)
            return self._outcome(op, OperationStatus.EXHAUSTED, "the run's budget is spent")
        op = self._write_ahead(change, registered)
        deadline = self._secure_and_fix(change)  # before the attempt commits
        self._register_compensation(change)
        self.run = self.host.commit_attempt(change, op.operation_id, op.attempts, deadline)
        return self._call(op, deadline)

    def write_ahead_into(self, change: Change) -> tuple[OperationRecord, float] | None:
        """Add this effect's write-ahead to ``change``, the commit that moves the run into its
        state (``self.run`` is the run as that commit leaves it), and return it with its call's
        deadline; None when it must be begun on its own: an operation already on record, or the
        run's budget spent."""
        if self.operation_id in self.run.context.get("operations", ()):
            return None
        if run_budget_spent(self.run, self.spec, self.effect):
            return None
        try:
            self.host.secure_lease(self.run.id, self.effect.timeout)
        except (LeaseLost, RunError):  # the step itself says so, before committing anything
            return None
        op = self._write_ahead(change, None)
        deadline = self._secure_and_fix(change)
        self._register_compensation(change)
        return op, deadline

    def _register_compensation(self, change: Change) -> None:
        """A done effect whose undo is unknown must never exist: register the undo with it."""
        comp = self.row.compensation if self.row is not None else None
        if comp is not None:
            register_compensation(change, self.run, comp, self.operation_id, self.effect.name)

    def _attempts(self, op: OperationRecord, *, again: bool = False) -> RunRecord:
        """The next attempt of ``op``; ``again``: the same attempt once more, uncounted, because
        this process could not send it before its deadline (nothing left)."""
        if not again and op.attempts >= max_attempts(self.run, self.effect, op):
            return self._outcome(op, OperationStatus.EXHAUSTED, f"{op.attempts} attempts made")
        if not again and run_budget_spent(self.run, self.spec, self.effect):
            return self._outcome(op, OperationStatus.EXHAUSTED, "the run's budget is spent")
        renewed = self._approval_for_resend(op)
        if isinstance(renewed, RunRecord):
            return renewed  # no approval covers sending it now: the run has moved
        change = self._change()
        attempt = op.attempts if again else op.attempts + 1
        deadline = self._secure_and_fix(change)  # before the attempt commits
        update: OperationUpdate = {"attempts": attempt}
        if renewed is not None:  # a newer approval covers it: consumed with this attempt
            change.consume_approvals.append(renewed.id)
            update["status"] = OperationStatus.PENDING
        change.operation_updates.append((op.operation_id, update))
        if again:
            change.event(EventKind.CALL, operation_id=op.operation_id, attempt=attempt, again=True)
        else:
            change.event(EventKind.CALL, operation_id=op.operation_id, attempt=attempt)
            count_attempt(self.run, self.effect, change)
        if self._waited_out and self.semantics is not None:
            # sent again on a "not found" believed after the provider's window: should the
            # provider commit the first request later still, a lookup later on finds both
            schedule_verification(change, self.run, op.operation_id, self.semantics.window)
        self.run = self.host.commit_attempt(change, op.operation_id, attempt, deadline)
        return self._call(replace(op, attempts=attempt, status=OperationStatus.PENDING), deadline)

    def _approval_for_resend(self, op: OperationRecord) -> ApprovalRecord | RunRecord | None:
        """Before a forward effect that needs an approval is sent again (a retry, a resume that
        reconciled and found nothing, an operator's retry), check now, by
        :meth:`~ratchet_runner.engine.host.StepHost.decision_now`, that an approval still covers it.

        None: the approval consumed when its pending record was written still does (unexpired,
        same digest). An approval: a newer, unconsumed one does; the attempt consumes it. A run:
        none does, and the run has moved: when the consumed approval expired, the operation is
        marked ``expired`` (never to be sent on it), ``approval_expired`` is recorded and the run
        follows its ``expired`` row; when it no longer matches (the run moved to a new spec
        version or policy), the run goes back to the state that asks (``decision_needed``)."""
        if self.effect.approval is None or self.role != "forward":
            return None
        name = self.effect.approval
        used = last_consumed(self.host.store.approvals(self.run.id), name)
        now = self.host.decision_now()
        digest = approval_digest(self.spec, self.run.id, name, self.effect, self.args)
        expired = used is not None and used.expires_at is not None and used.expires_at <= now
        if (
            used is not None
            and used.digest == digest
            and not expired
            and op.status != OperationStatus.EXPIRED
        ):
            return None
        try:
            return self._valid_approval()
        except ApprovalError as refused:
            if used is None:
                raise
            change = self._change()
            if used.digest != digest:
                return ask_again(
                    self.host,
                    self.run,
                    self.spec,
                    self.effect,
                    change,
                    ApprovalStale(
                        f"the approval by {used.actor} was given under another spec version or "
                        f"policy than {describe_action(self.effect, self.args)} (policy "
                        f"{self.spec.policy_version}): not sent again on it"
                    ),
                )
            reason = (
                f"the approval by {used.actor} expired at {format_time(used.expires_at)}, before "
                f"{self.effect.name} could be sent again ({refused}): not sent"
            )
            change.operation_updates.append(
                (op.operation_id, {"status": OperationStatus.EXPIRED, "last_error": reason})
            )
            change.context = {**self.run.context, "wake_at": None}
            change.event(
                EventKind.APPROVAL_EXPIRED,
                effect=self.effect.name,
                operation_id=op.operation_id,
                reason=reason,
            )
            return self.host.move(self.run, self.spec, "expired", change, self.ctx)

    def _valid_approval(self) -> ApprovalRecord:
        """The approval that covers these arguments now (:func:`valid_approval`), or raise."""
        records = self.host.store.approvals(self.run.id)
        now = self.host.decision_now()
        return valid_approval(records, self.spec, self.run.id, self.effect, self.args, now)

    def _call(self, op: OperationRecord, deadline: float) -> RunRecord:
        """Send the attempt committed for ``op``, unless its ``deadline`` (fixed before the
        commit, on the host's monotonic clock) has passed: then nothing is sent."""
        request = Call(
            operation=self.effect.operation,
            operation_id=op.operation_id,
            args=self.args,
            effect=self.effect.name,
            timeout=self.effect.timeout,
            attempt=op.attempts,
            deadline=deadline,
            key_age=max(0.0, self.host.now() - op.created_at),
        )
        if op.attempts == 1 and not self._restore_looked:
            restored = self.host.store.restored  # read as the store opened: no round trip
            if restored is not None and restored.open_at(self.host.now()):
                self._restore_looked = True
                looked = self._look_up_after_restore(op, restored)
                if looked is not None:
                    return looked
        self._at_crash_point("before-write", [op.operation_id], 0.0)
        left = deadline - self.host.monotonic()
        if left <= 0:
            return self._not_sent(op, request)
        self.host.secure_lease(self.run.id, left)  # still covers the call?
        if self.host.monotonic() > deadline:  # the lease was renewed too slowly to send now
            return self._not_sent(op, request)
        began = time.monotonic()
        try:
            outcome: Outcome = self.adapter.call(request)
        except Exception as exc:  # an adapter bug or a raw network error: outcome unknown
            outcome = Ambiguous(f"adapter raised {type(exc).__name__}: {exc}")
        self._ended = self.host.now()
        if isinstance(outcome, Done) and not self._proves(outcome.receipt):
            outcome = Ambiguous(f"malformed reply: no {self.receipt_field!r} in it")
        called(self.run.workflow, self.effect.name, _kind(outcome), time.monotonic() - began)
        self._at_crash_point("after-write", [op.operation_id], self._ended)
        if isinstance(outcome, Done):
            return self._finish(op, outcome.receipt, via="reply")
        if isinstance(outcome, Refused):
            return self._outcome(op, OperationStatus.REFUSED, outcome.reason, outcome.evidence)
        if isinstance(outcome, Escalate):
            return self._escalate(op, outcome)
        if outcome == not_sent(request):  # the adapter found the deadline passed: not sent
            self._ended = None
            return self._not_sent(op, request)
        if isinstance(outcome, Transient):
            self._ended = 0.0  # it did not happen: no request of this attempt is in doubt
            self.log.note(
                EventKind.UNAVAILABLE, operation_id=op.operation_id, reason=outcome.reason
            )
            return self._retry(op, outcome.retry_after)
        self.log.note(EventKind.TIMEOUT, operation_id=op.operation_id, reason=outcome.reason)
        return self._after_unknown(op)

    def _look_up_after_restore(self, op: OperationRecord, restored: Restore) -> RunRecord | None:
        """The store was put back from a copy, and its restore window is open: ``op``, about to
        be called for the first time as far as this store knows, may have been made after the
        copy was taken (by this run, or by a run of the same business key the copy holds no
        record of). Look it up first: found, it is finished from the provider's record; not
        found, None (the call goes ahead); a lookup that fails leaves the outcome unknown; an
        effect with no lookup goes to a person with the evidence, never to a blind call."""
        taken = restored.backup_taken_at
        self.log.note(
            EventKind.RESTORE_LOOKUP,
            operation_id=op.operation_id,
            incarnation=restored.incarnation,
            restored_at=restored.restored_at,
            backup_taken_at=taken,
        )
        if self.effect.reconcile is None:
            since = f"the copy taken at {format_time(taken)}" if taken else "the copy was taken"
            reason = (
                f"the store was put back from a copy at {format_time(restored.restored_at)}: "
                f"{describe_action(self.effect, self.args)} may have been made since {since}, "
                f"and {self.effect.name} has no lookup to tell; not called. Ask the provider "
                f"about operation {op.operation_id}, then `ratchet ops retry` (it was not made) "
                "or record what it made"
            )
            evidence = {"restore": restored.to_json(), "operation_id": op.operation_id}
            return self._escalate(op, Escalate(reason, evidence, possibly_applied=True))
        found, finished = self._look_up(op)
        if finished is not None:
            return finished
        if isinstance(found, NotFound):
            window = self.semantics.window if self.semantics is not None else 0.0
            settled = restored.restored_at + window  # every request before it left before then
            if settled > self.host.now():
                return self._await_settle(op, settled)
            self.log.note(EventKind.RECONCILE_NOT_FOUND, operation_id=op.operation_id)
            return None
        return self._lookup_failed(op, found)

    def _after_unknown(self, op: OperationRecord) -> RunRecord:
        """An attempt whose outcome is unknown: reconcile (ask the provider about the operation
        ID), and send again only if it has no record."""
        reconciled = self._reconcile(op)
        return reconciled if reconciled is not None else self._retry(op)

    def _not_sent(self, op: OperationRecord, request: Call) -> RunRecord:
        """The attempt's deadline passed before its request could leave (the process was
        paused or starved, a renewal was slow): nothing was sent, so nothing is counted. The
        attempt is made once more at once; a second time in one step, this process cannot send
        it in time now, and the attempt is given back and left for later
        (:meth:`_give_back`). An attempt counts only once its request may have been sent: a
        starved machine never spends a run's attempts, nor sends it to a person as though the
        provider had failed."""
        reason = not_sent(request).reason
        self.log.note(EventKind.NOT_SENT, operation_id=op.operation_id, reason=reason)
        if self._resent:
            return self._give_back(op)
        self._resent = True
        return self._attempts(op, again=True)

    def _give_back(self, op: OperationRecord) -> RunRecord:
        """Give back attempt ``op.attempts``, which was never sent (to the operation and to the
        run's budget), and leave the step for later, after a back-off, to this process or
        another. After :data:`UNSENT_PASSES` such passes of one operation a person is asked:
        the effect's timeout is too short for the machine, or the machine too loaded for it;
        nothing was sent. What the run keeps of when a request may have been sent is left as
        it is, so the next lookup judges as carefully as before."""
        change = self._change()
        unsent = {**self.run.context.get("unsent", {})}
        passes = unsent.get(op.operation_id, 0) + 1
        unsent[op.operation_id] = passes
        change.context = uncount_attempt({**self.run.context, "unsent": unsent}, self.effect)
        given_back = replace(op, attempts=op.attempts - 1)
        change.operation_updates.append((op.operation_id, {"attempts": given_back.attempts}))
        if passes >= UNSENT_PASSES:
            self.run = self.host.store.commit(change)
            reason = (
                f"its request could not be sent before its deadline ({self._call_seconds:g} s) "
                f"in {passes} passes, by any process: the machine is too loaded for the "
                "effect's timeout, or the timeout too short; nothing was sent"
            )
            return self._escalate(given_back, Escalate(reason, possibly_applied=False))
        self._ended = None  # nothing left: what the run keeps of its sends stays as it is
        delay = backoff(self.effect, max(1, given_back.attempts), self.host.rng)
        return self._schedule(given_back, delay, change=change, unsent=True)

    def _retry(self, op: OperationRecord, retry_after: float | None = None) -> RunRecord:
        if op.attempts < max_attempts(self.run, self.effect, op):
            delay = backoff(self.effect, op.attempts, self.host.rng, retry_after)
            self.log.note(EventKind.BACKOFF, seconds=round(delay, 3), next_attempt=op.attempts + 1)
            if not self.host.wait_inline(delay):
                return self._schedule(op, delay)
        return self._attempts(op)

    def _schedule(
        self,
        op: OperationRecord,
        delay: float,
        kind: EventKind = EventKind.RETRY_SCHEDULED,
        change: Change | None = None,
        **data: Any,
    ) -> RunRecord:
        """A wait too long for this process (a back-off, a settle window): store the wake-up
        time and stop; whoever takes the run up then goes on from the record. What this process
        learnt of its call's end is kept with it (its request left before then). ``change``:
        one begun already (an attempt given back), committed with it; ``data``: more for the
        event."""
        change = self._change() if change is None else change
        wake = change.at + delay
        base = change.context if change.context is not None else self.run.context
        change.context = {**base, "wake_at": wake}
        self._keep_what_ended(change, op)
        change.event(kind, operation_id=op.operation_id, wake_at=wake, **data)
        self.run = self.host.store.commit(change)
        return self.run

    def _await_settle(self, op: OperationRecord, until: float) -> RunRecord | None:
        """A lookup found nothing before it could be believed (:mod:`.providers`): make no
        call; look again once ``until`` has come, here if that is soon, else on a durable
        timer (the run's wake-up time). None: found nothing again, conclusively."""
        wait = until - self.host.now()
        self.log.note(
            EventKind.RECONCILE_UNSETTLED,
            operation_id=op.operation_id,
            conclusive_at=round(until, 3),
            reason=f"not found yet, and {why_unsettled(self.semantics)}: looked up again "
            f"from {format_time(until)}, no call before",
        )
        if self.host.wait_inline(wait):
            return self._reconcile(op)
        return self._schedule(op, wait, EventKind.SETTLE_SCHEDULED)

    def _reconcile(self, op: OperationRecord) -> RunRecord | None:
        """Ask the provider about the operation ID. A record found finishes the step; none found
        returns None (a same-ID retry is safe); a failed lookup leaves the outcome unknown."""
        if self.effect.reconcile is None:
            # Retry and hope (E504): a spec without a lookup cannot learn what happened, so the
            # runner can only call again. Validation refuses such a spec for `ratchet run`;
            # `ratchet check` runs it to show the duplicate it causes.
            self.log.note(EventKind.RECONCILE_IMPOSSIBLE, operation_id=op.operation_id)
            return None
        found, finished = self._look_up(op)
        if finished is not None:
            return finished
        if isinstance(found, NotFound):
            until = conclusive_from(self.run, op, self.semantics, self._call_seconds, self._ended)
            if until is not None and until > self.host.now():
                return self._await_settle(op, until)
            self._waited_out = until is not None
            self.log.note(EventKind.RECONCILE_NOT_FOUND, operation_id=op.operation_id)
            return None
        return self._lookup_failed(op, found)

    def _look_up(self, op: OperationRecord) -> tuple[LookupResult, RunRecord | None]:
        """Ask the provider about ``op`` (the effect has a lookup): what it answered, and, when
        it holds a record that proves the change, the step finished from it."""
        assert self.effect.reconcile is not None
        found = ask(
            self.adapter, self.effect.reconcile, op.operation_id, self.effect.name, self.args
        )
        if not (isinstance(found, Found) and self._proves(found.receipt)):
            return found, None
        self.log.note(EventKind.RECONCILE_FOUND, operation_id=op.operation_id)
        if found.others and self.role != duplicates.UNDO_EXTRA:
            return found, self._found_twice(op, found)
        return found, self._finish(op, found.receipt, via="reconcile")

    def _lookup_failed(self, op: OperationRecord, found: LookupResult) -> RunRecord:
        """A lookup that failed, or answered with nothing that proves the change: the outcome
        stays unknown."""
        reason = found.reason if isinstance(found, LookupFailed) else "malformed lookup reply"
        self.log.note(EventKind.RECONCILE_FAILED, operation_id=op.operation_id, reason=reason)
        return self._outcome(op, OperationStatus.UNKNOWN, reason)


def _kind(outcome: Outcome) -> str:
    """How an outcome is counted: its class's name in lower case (``done``, ``ambiguous``)."""
    return type(outcome).__name__.lower()
