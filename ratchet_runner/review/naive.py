"""The naive strategy, kept as a warning: what a hand-rolled retry loop does with an effect.

``ratchet run --naive`` and ``ratchet check --compare naive`` show it beside the effect protocol:
a new operation ID for every attempt (so a provider cannot tell a retry from a new request) and
no lookup before calling again (so a lost reply becomes a second change). :class:`NaiveStep` is
the effect protocol's step (:class:`~ratchet_runner.engine.protocol.EffectStep`) with those two
mistakes made on purpose, and no undo registered (a hand-rolled loop forgets it). The engine
knows nothing of it: a composition root (the session, ``ratchet check``) gives a runner
:func:`step_for`, which picks it for a run started naive (:data:`MARKS`, kept in the run's
context, so the run stays naive whichever command drives it on) and for a row that names no
idempotency key (nothing names its change, which ``validate`` flags and ``ratchet check`` shows).
"""

from __future__ import annotations

import uuid
from typing import Any, Literal

from ..engine.budget import count_attempt, max_attempts, run_budget_spent
from ..engine.identity import sha256
from ..engine.protocol import EffectStep
from ..spec.model import Effect, Spec
from ..store.context import RunContext
from ..store.records import Change, OperationRecord, RunRecord
from ..words import EventKind, OperationStatus

#: The strategy's name, as ``--compare``, the run's context and its history call it.
NAIVE = "naive"

#: How a runner performs effects: ``ratchet``, the effect protocol; ``naive``, this module's.
Strategy = Literal["ratchet", "naive"]

#: What a run started naive keeps in its context.
MARKS: RunContext = {"strategy": NAIVE}


def step_for(run: RunRecord, spec: Spec, effect: Effect) -> type[EffectStep]:
    """The step that performs ``effect`` for ``run``: :class:`NaiveStep` for a run started naive
    or a row that names no idempotency key; else the effect protocol's."""
    if run.context.get("strategy") == NAIVE:
        return NaiveStep
    rows = [r for r in spec.rows_from(run.state) if r.external_effect == effect.name]
    if rows and rows[0].idempotency_key is None:
        return NaiveStep
    return EffectStep


class NaiveStep(EffectStep):
    """An effect performed as a hand-rolled retry loop would: every attempt a new operation,
    never a lookup, no undo registered."""

    strategy = NAIVE

    def _name(self) -> str:
        return sha256([super()._name(), uuid.uuid4().hex])  # a new name for every attempt

    def perform(self) -> RunRecord:
        """After a crash: no lookup, just call again under a new name (the attempt before may
        have made the change already)."""
        earlier = [
            op
            for op in self.host.store.operations(self.run.id)
            if op.effect == self.effect.name
            and op.role == self.role
            and op.status == OperationStatus.PENDING
        ]
        if not earlier:
            return self._begin(None)
        return self._attempts(earlier[-1])

    def write_ahead_into(self, change: Change) -> tuple[OperationRecord, float] | None:
        return None  # each attempt is begun on its own

    def _register_compensation(self, change: Change) -> None:
        return None  # a hand-rolled loop forgets the undo

    def _approval_for_resend(self, op: OperationRecord) -> None:
        return None

    def _after_unknown(self, op: OperationRecord) -> RunRecord:
        return self._retry(op)  # no lookup: the bug this demonstrates

    def _not_sent(self, op: OperationRecord, request: Any) -> RunRecord:
        return self._retry(op)

    def _attempts(self, op: OperationRecord, *, again: bool = False) -> RunRecord:
        """The next attempt, under a new operation ID: the earlier one abandoned."""
        if op.attempts >= max_attempts(self.run, self.effect, op):
            return self._outcome(op, OperationStatus.EXHAUSTED, f"{op.attempts} attempts made")
        if run_budget_spent(self.run, self.spec, self.effect):
            return self._outcome(op, OperationStatus.EXHAUSTED, "the run's budget is spent")
        self.host.secure_lease(self.run.id, self.effect.timeout)
        fresh = NaiveStep(self.host, self.run, self.spec, self.effect)
        fresh.log = self.log
        return fresh._begin_after(op)

    def _begin_after(self, previous: OperationRecord) -> RunRecord:
        change = self._change()
        deadline = self.host.monotonic() + self.host.call_seconds(self.run.id, self.effect.timeout)
        change.operation_updates.append(
            (previous.operation_id, {"status": OperationStatus.ABANDONED})
        )
        fields = self._fields(attempts=previous.attempts + 1)
        change.new_operations.append(fields)
        change.event(EventKind.CALL, operation_id=self.operation_id, attempt=fields["attempts"])
        count_attempt(self.run, self.effect, change)
        self.run = self.host.store.commit(change)
        op = OperationRecord(
            run_id=self.run.id,
            receipt=None,
            last_error=None,
            compensates=None,
            created_at=change.at,
            updated_at=change.at,
            **fields,
        )
        return self._call(op, deadline)
