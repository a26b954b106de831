"""The runner: drives a run through its table and performs each effect by the effect protocol.

For every state that performs an effect:

1. derive the operation ID from the row's idempotency key (:func:`runner.identity.operation_id`);
2. if the store says the operation is done, skip the call; if it is pending with a call on
   record, reconcile first (ask the adapter what happened to that ID);
3. otherwise write the operation as pending, with its first attempt counted, in the same
   transaction that bumps the run's version (and consumes the approval, if one is needed);
4. call the adapter with that ID, and classify the outcome: done · transient (retry, same ID,
   capped exponential backoff with full jitter) · ambiguous (reconcile; retry with the same ID
   only if the provider has no record) · refused (no retry; the row's ``refused`` event);
5. store the receipt and move the state in one transaction.

Attempts persist in the operation row: a resume never refills the budget. Every commit is a
compare-and-set on the run's version; losing it raises :class:`~runner.errors.VersionConflict`.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import jsonschema

from adapters.base import (
    Adapter,
    Ambiguous,
    Call,
    Done,
    Found,
    LookupFailed,
    NotFound,
    Outcome,
    Refused,
    Transient,
)

from .clock import Clock, SystemClock
from .errors import ApprovalError, RunError
from .expressions import compile_expression
from .identity import (
    approval_digest,
    describe_action,
    evaluate_args,
    operation_id,
    sha256,
)
from .machine import machine_for
from .spec import Adapter as AdapterSpec
from .spec import Effect, Row, Spec, State
from .store import ApprovalRecord, Change, OperationRecord, RunRecord, Store
from .validate import load_spec_text

AdapterFactory = Callable[[AdapterSpec], Adapter]
Interrupt = Callable[[str], None]
Strategy = Literal["ratchet", "naive"]

#: Points at which ``--interrupt`` ends the process (as SIGKILL would).
INTERRUPT_POINTS = ("before-write", "after-write", "after-receipt")

_STATUS = {
    "step": "running",
    "compensate": "running",
    "pause": "waiting",
    "wait": "waiting",
    "success": "done",
    "cancelled": "done",
    "compensated": "done",
    "operator_queue": "needs_person",
}


def status_of(state: State) -> str:
    return _STATUS[state.kind]


@dataclass
class _Step:
    """What happened since the last commit, to be written with the next one."""

    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def note(self, kind: str, **data: Any) -> None:
        self.events.append((kind, data))

    def flush_into(self, change: Change) -> Change:
        change.events[:0] = self.events
        self.events = []
        return change


class Runner:
    """Runs workflows against a store and adapters."""

    def __init__(
        self,
        store: Store,
        adapters: AdapterFactory,
        clock: Clock | None = None,
        *,
        interrupt: Interrupt | None = None,
        strategy: Strategy = "ratchet",
        rng: random.Random | None = None,
    ) -> None:
        self.store = store
        self._adapter_factory = adapters
        self._adapters: dict[str, Adapter] = {}
        self.clock = clock or SystemClock()
        self._interrupt = interrupt
        self.strategy: Strategy = strategy
        self._rng = rng or random.Random()
        self._specs: dict[str, Spec] = {}

    # -- specs and context ------------------------------------------------------------------

    def spec_of(self, run: RunRecord) -> Spec:
        """The spec version the run is pinned to, from the text stored when it started."""
        spec = self._specs.get(run.spec_digest)
        if spec is None:
            text = self.store.spec_text(run.spec_digest)
            spec = self._specs[run.spec_digest] = load_spec_text(text, f"{run.workflow} (stored)")
        return spec

    def adapter(self, spec: Spec, name: str) -> Adapter:
        if name not in self._adapters:
            self._adapters[name] = self._adapter_factory(spec.adapters[name])
        return self._adapters[name]

    def context(self, run: RunRecord, spec: Spec, **extra: Any) -> dict[str, Any]:
        """The activation that guards and arguments see."""
        return {
            "input": run.input,
            "receipts": dict(run.context.get("receipts", {})),
            "business_key": run.business_key,
            "run": {
                "id": run.id,
                "state": run.state,
                "version": run.version,
                "started_at": run.created_at,
                "spec_version": spec.spec_version,
                "policy_version": str(spec.policy_version),
            },
            "approval": dict(run.context.get("approval", {})),
            "signal": {},
            **extra,
        }

    # -- starting and advancing -------------------------------------------------------------

    def start(self, spec: Spec, text: str, input: dict[str, Any]) -> tuple[RunRecord, bool]:
        """Start a run of ``spec`` (whose exact text is ``text``), or find the one that already
        exists for the same business key. Returns ``(run, created)``."""
        problems = sorted(jsonschema.Draft7Validator(spec.input_schema).iter_errors(input), key=str)
        if problems:
            where = "/".join(str(p) for p in problems[0].absolute_path) or "input"
            raise RunError(f"the input does not fit the spec: {where}: {problems[0].message}")
        key = compile_expression(spec.business_key).evaluate({"input": input})
        if key is None or key == "":
            raise RunError(f"the business key {spec.business_key!r} is empty for this input")
        now = self.clock.now()
        if spec.digest not in self._specs:
            self.store.save_spec(
                spec.digest, spec.name, spec.spec_version, str(spec.policy_version), text, now
            )
            self._specs[spec.digest] = spec
        return self.store.create_run(
            f"run_{uuid.uuid4().hex[:16]}",
            spec.name,
            spec.digest,
            str(key),
            spec.start,
            status_of(spec.states[spec.start]),
            input,
            now,
        )

    def advance(self, run_id: str, max_steps: int = 10_000) -> RunRecord:
        """Drive the run until it waits, ends, or needs a person."""
        run = self.store.get_run(run_id)
        for _ in range(max_steps):
            moved = self.step(run)
            if moved is None:
                return run
            run = moved
        raise RunError(f"run {run_id} took more than {max_steps} steps without stopping")

    def step(self, run: RunRecord) -> RunRecord | None:
        """Take one step; None when there is nothing the runner can do now."""
        spec = self.spec_of(run)
        state = spec.states[run.state]
        if run.status == "needs_person" or state.kind != "step":
            return None
        effect = spec.effect_of(state.name)
        if effect is None:
            return self._move(run, spec, "next", Change(run.id, run.version, self.clock.now(), run))
        return EffectStep(self, run, spec, effect).perform()

    # -- moving -----------------------------------------------------------------------------

    def _move(
        self,
        run: RunRecord,
        spec: Spec,
        event: str,
        change: Change,
        ctx: Mapping[str, Any] | None = None,
    ) -> RunRecord:
        """Fire ``event`` and commit ``change`` with the move it selects. With no row for it
        (``unknown`` falls back to ``exhausted``), the run is handed to a person, unmoved."""
        machine = machine_for(spec)
        ctx = ctx or self.context(run, spec)
        row, errors = machine.fire(run.state, event, ctx)
        if row is None and event == "unknown":
            row, errors = machine.fire(run.state, "exhausted", ctx)
        if row is None:
            change.status = "needs_person"
            change.event(
                "stuck",
                state=run.state,
                event=event,
                reason="no row's guard holds" if not errors else "; ".join(errors),
            )
            return self.store.commit(change)
        target = spec.states[row.next_state]
        change.state, change.status = target.name, status_of(target)
        change.event("moved", **{"from": run.state, "event": event, "to": target.name})
        if target.kind == "operator_queue":
            action = row.operator_action or target.operator_action
            change.event("queued", queue=target.name, operator_action=action)
        return self.store.commit(change)

    def interrupt(self, point: str) -> None:
        if self._interrupt is not None:
            self._interrupt(point)

    def backoff(self, effect: Effect, attempt: int) -> float:
        """Capped exponential backoff with full jitter before attempt ``attempt + 1``."""
        retry = effect.retry
        cap = min(retry.max_backoff, retry.initial_backoff * retry.multiplier ** (attempt - 1))
        return cap if retry.jitter == "none" else self._rng.uniform(0, cap)

    # -- approvals --------------------------------------------------------------------------

    def valid_approval(
        self, run: RunRecord, spec: Spec, effect: Effect, args: dict[str, Any]
    ) -> ApprovalRecord:
        """The unconsumed approval that covers exactly these arguments, or ApprovalError."""
        assert effect.approval is not None
        digest = approval_digest(spec, run.id, effect.approval, effect, args)
        records = self.store.approvals(run.id)
        now = self.clock.now()
        for record in reversed(records):
            if record.decision == "rejected":
                raise ApprovalError(
                    f"{effect.name} was rejected by {record.actor}: {record.reason}"
                )
            if record.digest != digest or record.consumed_at is not None:
                continue
            if record.expires_at is not None and record.expires_at <= now:
                raise ApprovalError(f"the approval by {record.actor} has expired")
            if record.policy_version != str(spec.policy_version):
                continue
            return record
        raise ApprovalError(
            f"{describe_action(effect, args)} has no valid approval (digest {digest[:12]}): "
            "nothing was executed"
        )


class EffectStep:
    """One attempt at a state's effect, by the protocol in this module's docstring."""

    def __init__(self, runner: Runner, run: RunRecord, spec: Spec, effect: Effect) -> None:
        self.runner = runner
        self.run = run
        self.spec = spec
        self.effect = effect
        self.row: Row = next(
            r for r in spec.rows_from(run.state) if r.external_effect == effect.name
        )
        self.ctx = runner.context(run, spec)
        self.args = evaluate_args(effect, self.ctx)
        self.log = _Step()
        self.adapter = runner.adapter(spec, effect.adapter)
        self.naive = runner.strategy == "naive"
        stable = operation_id(spec, self.row, effect, self.args, self.ctx)
        self.operation_id = sha256([stable, uuid.uuid4().hex]) if self.naive else stable

    def _change(self) -> Change:
        return self.log.flush_into(
            Change(self.run.id, self.run.version, self.runner.clock.now(), self.run)
        )

    def perform(self) -> RunRecord:
        op = self.runner.store.operation(self.operation_id)
        if op is None:
            return self._begin()
        if op.status == "done":
            self.log.note("skipped", operation_id=op.operation_id, reason="already done")
            return self._finish(op, op.receipt or {}, via="store")
        if op.status == "refused":
            return self._outcome(op, "refused", op.last_error or "refused")
        if op.attempts > 0 and not self.naive:
            self.log.note("resumed", operation_id=op.operation_id, attempts=op.attempts)
            reconciled = self._reconcile(op)
            if reconciled is not None:
                return reconciled
        return self._attempts(op)

    def _new_operation(self, change: Change, attempts: int) -> OperationRecord:
        """Add the write-ahead record of this operation to ``change``; return it as stored."""
        fields: dict[str, Any] = {
            "operation_id": self.operation_id,
            "effect": self.effect.name,
            "role": "forward",
            "args": self.args,
            "fingerprint": sha256(self.args),
            "status": "pending",
            "attempts": attempts,
        }
        change.new_operations.append(fields)
        change.event("call", operation_id=self.operation_id, attempt=attempts)
        return OperationRecord(
            run_id=self.run.id,
            receipt=None,
            last_error=None,
            compensates=None,
            created_at=change.at,
            updated_at=change.at,
            **fields,
        )

    def _begin(self) -> RunRecord:
        change = self._change()
        if self.effect.approval is not None:
            approval = self.runner.valid_approval(self.run, self.spec, self.effect, self.args)
            change.consume_approvals.append(approval.id)
        change.event(
            "pending",
            operation_id=self.operation_id,
            effect=self.effect.name,
            action=describe_action(self.effect, self.args),
            strategy=self.runner.strategy,
        )
        op = self._new_operation(change, attempts=1)
        self.run = self.runner.store.commit(change)
        return self._call(op)

    def _attempts(self, op: OperationRecord) -> RunRecord:
        if op.attempts >= self.effect.retry.max_attempts:
            return self._outcome(op, "exhausted", f"{op.attempts} attempts made")
        if self.naive:  # a new name for every attempt: the bug this demonstrates
            fresh_name = EffectStep(self.runner, self.run, self.spec, self.effect)
            fresh_name.log = self.log
            return fresh_name._begin_naive(op)
        change = self._change()
        change.operation_updates.append((op.operation_id, {"attempts": op.attempts + 1}))
        change.event("call", operation_id=op.operation_id, attempt=op.attempts + 1)
        self.run = self.runner.store.commit(change)
        return self._call(replace(op, attempts=op.attempts + 1))

    def _begin_naive(self, previous: OperationRecord) -> RunRecord:
        change = self._change()
        change.operation_updates.append((previous.operation_id, {"status": "abandoned"}))
        op = self._new_operation(change, attempts=previous.attempts + 1)
        self.run = self.runner.store.commit(change)
        return self._call(op)

    def _call(self, op: OperationRecord) -> RunRecord:
        request = Call(
            operation=self.effect.operation,
            operation_id=op.operation_id,
            args=self.args,
            effect=self.effect.name,
            timeout=self.effect.timeout,
            attempt=op.attempts,
        )
        self.runner.interrupt("before-write")
        try:
            outcome: Outcome = self.adapter.call(request)
        except Exception as exc:  # an adapter bug or a raw network error: outcome unknown
            outcome = Ambiguous(f"adapter raised {type(exc).__name__}: {exc}")
        self.runner.interrupt("after-write")
        if isinstance(outcome, Done) and not outcome.receipt.get(self.row.receipt or ""):
            outcome = Ambiguous(f"malformed reply: no {self.row.receipt!r} in it")
        if isinstance(outcome, Done):
            return self._finish(op, outcome.receipt, via="reply")
        if isinstance(outcome, Refused):
            return self._outcome(op, "refused", outcome.reason, outcome.evidence)
        if isinstance(outcome, Transient):
            self.log.note("unavailable", operation_id=op.operation_id, reason=outcome.reason)
            return self._retry(op)
        self.log.note("timeout", operation_id=op.operation_id, reason=outcome.reason)
        if self.naive:
            return self._retry(op)
        reconciled = self._reconcile(op)
        return reconciled if reconciled is not None else self._retry(op)

    def _retry(self, op: OperationRecord) -> RunRecord:
        if op.attempts < self.effect.retry.max_attempts:
            delay = self.runner.backoff(self.effect, op.attempts)
            self.log.note("backoff", seconds=round(delay, 3), next_attempt=op.attempts + 1)
            self.runner.clock.sleep(delay)
        return self._attempts(op)

    def _reconcile(self, op: OperationRecord) -> RunRecord | None:
        """Ask the provider about the operation ID. A record found finishes the step; none found
        returns None (a same-ID retry is safe); a failed lookup leaves the outcome unknown."""
        if self.effect.reconcile is None:
            self.log.note("reconcile_impossible", operation_id=op.operation_id)
            return self._outcome(op, "unknown", "no reconcile lookup for this effect")
        try:
            found = self.adapter.lookup(self.effect.reconcile, op.operation_id, self.effect.name)
        except Exception as exc:
            found = LookupFailed(f"lookup raised {type(exc).__name__}: {exc}")
        if isinstance(found, Found):
            self.log.note("reconcile_found", operation_id=op.operation_id)
            return self._finish(op, found.receipt, via="reconcile")
        if isinstance(found, NotFound):
            self.log.note("reconcile_not_found", operation_id=op.operation_id)
            return None
        self.log.note("reconcile_failed", operation_id=op.operation_id, reason=found.reason)
        return self._outcome(op, "unknown", found.reason)

    def _finish(self, op: OperationRecord, receipt: dict[str, Any], via: str) -> RunRecord:
        change = self._change()
        if op.status != "done":
            change.operation_updates.append(
                (op.operation_id, {"status": "done", "receipt": receipt})
            )
        receipts = dict(self.run.context.get("receipts", {}))
        receipts[self.effect.name] = receipt
        change.context = {**self.run.context, "receipts": receipts}
        change.event(
            "done",
            operation_id=op.operation_id,
            via=via,
            receipt={self.row.receipt or "receipt": receipt.get(self.row.receipt or "")},
        )
        ctx = self.runner.context(self.run, self.spec, receipts=receipts)
        moved = self.runner._move(self.run, self.spec, "ok", change, ctx)
        self.runner.interrupt("after-receipt")
        return moved

    def _outcome(
        self,
        op: OperationRecord,
        event: str,
        reason: str,
        evidence: dict[str, Any] | None = None,
    ) -> RunRecord:
        change = self._change()
        change.operation_updates.append((op.operation_id, {"status": event, "last_error": reason}))
        change.event(event, operation_id=op.operation_id, reason=reason, evidence=evidence or {})
        return self.runner._move(self.run, self.spec, event, change, self.ctx)
