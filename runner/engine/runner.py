"""The runner: drives a run through its table and performs each effect by the effect protocol.

For every state that performs an effect:

1. derive the operation ID from the row's idempotency key
(:func:`ratchet_runner.engine.identity.operation_id`); 2. if the store says the operation is done,
skip the call; if it is pending with a call on
   record, reconcile first (ask the adapter what happened to that ID);
3. otherwise write the operation as pending, with its first attempt counted, in the same
   transaction that bumps the run's version (and consumes the approval, if one is needed);
4. call the adapter with that ID, and classify the outcome: done · transient (retry, same ID,
   capped exponential backoff with full jitter) · ambiguous (reconcile; retry with the same ID
   only if the provider has no record) · refused (no retry; the row's ``refused`` event);
5. store the receipt and move the state in one transaction; when the next state performs an
   effect straight away, that effect's step 3 rides in the same transaction (one commit per
   effect step), and this runner calls it without a reconcile, having written it itself.

Attempts persist in the operation row: a resume never refills the budget. Every commit is a
compare-and-set on the run's version; losing it raises
:class:`~ratchet_runner.errors.VersionConflict`.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Literal

import jsonschema

from ratchet_runner.adapters.base import (
    Adapter,
    Found,
    LookupFailed,
    LookupResult,
    NotFound,
)
from ratchet_runner.clock import Clock, SystemClock
from ratchet_runner.engine.identity import (
    approval_digest,
    describe_action,
)
from ratchet_runner.engine.machine import machine_for
from ratchet_runner.engine.protocol import CompensationStep, EffectStep
from ratchet_runner.engine.timers import Timers
from ratchet_runner.errors import ApprovalError, ApprovalExpired, ApprovalStale, LeaseLost, RunError
from ratchet_runner.settings import INTERRUPT_POINTS as INTERRUPT_POINTS
from ratchet_runner.spec.expressions import compile_expression
from ratchet_runner.spec.model import Adapter as AdapterSpec
from ratchet_runner.spec.model import Effect, Spec, State
from ratchet_runner.spec.validate import load_spec_text
from ratchet_runner.store.store import ApprovalRecord, Change, OperationRecord, RunRecord, Store

AdapterFactory = Callable[[AdapterSpec], Adapter]
Interrupt = Callable[[str, str], None]
Strategy = Literal["ratchet", "naive"]

#: The share of a lease a worker counts on by its own clock: the rest covers the time between
#: checking and sending, and clocks that run at slightly different rates.
LEASE_SAFETY = 0.9

#: Seconds of lease a call must leave unused beyond its timeout: a call is started only when the
#: lease outlasts it by this much, so the reply (or the timeout) comes while the lease holds.
LEASE_MARGIN = 1.0


class LeaseTooShort(RunError):
    """No lease this process takes covers the effect's timeout: run with a longer --lease."""

    code = "R406"


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


#: The statuses of a forward operation whose change may have been made without the runner
#: knowing: ``unknown`` (its lookup failed), ``pending`` with a call on record (the process
#: died, or the run was moved on, before the outcome was known), and ``exhausted`` or
#: ``expired`` (no further attempt: each ambiguous attempt was looked up and not found, but a
#: provider may commit late, and an effect without a lookup never knew). A compensation asks
#: once more rather than assume nothing was made.
UNRESOLVED = frozenset({"unknown", "pending", "exhausted", "expired"})


def outcome_unresolved(op: OperationRecord) -> bool:
    """Whether ``op`` may have been made although it is not recorded done."""
    return op.status in UNRESOLVED and op.attempts > 0


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
        inline_wait: float = 5.0,
    ) -> None:
        self.store = store
        self._adapter_factory = adapters
        self._adapters: dict[tuple[str, str], Adapter] = {}
        self.clock = clock or SystemClock()
        self._interrupt = interrupt
        self.strategy: Strategy = strategy
        self._rng = rng or random.Random()
        self._specs: dict[str, Spec] = {}
        self.inline_wait = inline_wait
        self.leases: dict[str, str] = {}  # run ID -> the lease token this runner holds
        # run ID -> (owner, seconds): the lease in ``leases`` is taken (or renewed) by each
        # commit to the run rather than by a claim first (a command changing a waiting run)
        self.taking: dict[str, tuple[str, float]] = {}
        # How long the leases this runner takes last (a worker's --lease): a call is started only
        # with that much lease left, renewed first if need be (see ``secure_lease``).
        self.lease_seconds = 30.0
        # run ID -> until when (by ``monotonic``) this process may still count on its lease: set
        # at the claim and at each renewal, short of the lease by LEASE_SAFETY
        self.lease_deadlines: dict[str, float] = {}
        # The clock lease deadlines are counted by: this process's monotonic clock (a simulation
        # that moves time itself drives its own, see tests/property/simulation.py).
        self.monotonic: Callable[[], float] = time.monotonic
        # Whether a command holding a run's lease renews it from a heartbeat thread
        # (runner.commands); a simulation that schedules every step renews it from its scheduler.
        self.heartbeat = True
        # run ID -> (version, operation): a pending record this runner wrote ahead, with the
        # move into its state, and has not called yet (see ``move(..., write_ahead_next=True)``)
        self._written_ahead: dict[str, tuple[int, OperationRecord]] = {}
        # Asked between steps: when it says stop, ``advance`` returns after the current step
        # (a worker pool sets it on SIGTERM).
        self.stopping: Callable[[], bool] = lambda: False
        # How long the newest stored version of a workflow is taken as known (a worker pool
        # claiming hundreds of runs a second asks once per poll interval, not once per run).
        self.spec_check_interval = 0.0
        self._latest: dict[str, tuple[float, tuple[str, int] | None]] = {}
        self.timers = Timers(self)

    # -- specs and context ------------------------------------------------------------------

    def spec_of(self, run: RunRecord) -> Spec:
        """The spec version the run is pinned to, from the text stored when it started."""
        return self.spec_for_digest(run.spec_digest)

    def spec_for_digest(self, digest: str) -> Spec:
        spec = self._specs.get(digest)
        if spec is None:
            text = self.store.spec_text(digest)
            spec = self._specs[digest] = load_spec_text(text, f"spec {digest[:12]} (stored)")
        return spec

    def latest_spec(self, workflow: str) -> tuple[str, int] | None:
        """The digest and version of the newest stored version of ``workflow``, read again
        once ``spec_check_interval`` seconds have passed (or this runner saved a new one)."""
        now = self.monotonic()
        known = self._latest.get(workflow)
        if known is not None and now - known[0] < self.spec_check_interval:
            return known[1]
        latest = self.store.latest_spec(workflow)
        self._latest[workflow] = (now, latest)
        return latest

    def adapter(self, spec: Spec, name: str) -> Adapter:
        """The adapter ``name`` of this spec version, made once per (spec version, adapter):
        never by name alone, since two specs (or two versions of one) may give the same name
        to different services (a real payment provider in one, ``noop`` in the other)."""
        key = (spec.digest, name)
        adapter = self._adapters.get(key)
        if adapter is None:
            adapter = self._adapters[key] = self._adapter_factory(spec.adapters[name])
        return adapter

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
                "policy_version": spec.policy_version,
                "attempts": int(run.context.get("budget_used", {}).get("attempts", 0)),
            },
            "approval": dict(run.context.get("approval", {})),
            "signal": {},
            **extra,
        }

    # -- starting and advancing -------------------------------------------------------------

    def start(self, spec: Spec, text: str, input: dict[str, Any]) -> tuple[RunRecord, bool]:
        """Start a run of ``spec`` (whose exact text is ``text``), or find the one that already
        exists for the same business key. Returns ``(run, created)``."""
        try:
            problems = sorted(
                jsonschema.Draft7Validator(spec.input_schema).iter_errors(input), key=str
            )
        except Exception as exc:  # a $ref that cannot be resolved
            raise RunError(f"the spec's input schema cannot be applied: {exc}") from None
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
            self._latest.pop(spec.name, None)
        run_id = f"run_{uuid.uuid4().hex[:16]}"
        first = spec.states[spec.start]
        draft = RunRecord(
            run_id,
            spec.name,
            spec.digest,
            str(key),
            first.name,
            status_of(first),
            1,
            input,
            {},
            now,
            now,
        )
        context: dict[str, Any] = {}
        first_events: list[tuple[str, dict[str, Any]]] = []
        armed = self.timers.arm(draft, spec, first, now)
        if armed:
            context["timers_of"] = first.name
        if first.kind in ("pause", "wait"):
            pause = self.timers.pause_record(draft, spec, first, now)
            context["pause"] = pause
            first_events.append(("paused", pause))
        return self.store.create_run(
            run_id,
            spec.name,
            spec.digest,
            str(key),
            first.name,
            status_of(first),
            input,
            now,
            context=context,
            new_timers=armed,
            first_events=first_events,
        )

    def advance(self, run: str | RunRecord, max_steps: int = 10_000) -> RunRecord:
        """Drive the run (by ID, or as just committed) until it waits, ends, or needs a
        person. A record handed in saves reading it again; if it is stale, the first commit
        finds out (:class:`~ratchet_runner.errors.VersionConflict`)."""
        if isinstance(run, str):
            run = self.store.get_run(run)
        run_id = run.id
        try:
            for _ in range(max_steps):
                if self.stopping() and run_id not in self._written_ahead:
                    return run  # a pending record written ahead is called first: it is promised
                moved = self.step(run)
                if moved is None:
                    return run
                run = moved
        finally:
            # Not called by now (an error): whoever takes the run next reconciles it first.
            self._written_ahead.pop(run_id, None)
        raise RunError(f"run {run_id} took more than {max_steps} steps without stopping")

    def step(self, run: RunRecord) -> RunRecord | None:
        """Take one step; None when there is nothing the runner can do now."""
        if run.status not in ("running",):
            return None
        wake = run.context.get("wake_at")
        if (
            wake is not None
            and wake > self.clock.now()
            and not self.wait_inline(wake - self.clock.now())
        ):
            return None
        spec = self.spec_of(run)
        state = spec.states[run.state]
        if state.kind == "compensate":
            return self._compensate(run, spec)
        if state.kind != "step":
            return None
        effect = spec.effect_of(state.name)
        if effect is None:
            return self.move(run, spec, "next", self.change(run))
        return EffectStep(self, run, spec, effect).perform()

    def _compensate(self, run: RunRecord, spec: Spec) -> RunRecord:
        """Undo the forward effects, newest first, one compensation (or one lookup) per step.

        The completed effects are undone by their registered compensations. A forward operation
        whose outcome is not known (:data:`UNRESOLVED`) and that registered an undo is first
        reconciled by its operation ID (:meth:`_reconcile_for_undo`): found, it is recorded done
        and undone in its turn; not found, its undo is skipped; if nobody can tell, the run goes
        to a person instead of ending compensated with the change perhaps still made."""
        operations = self.store.operations(run.id)
        by_id = {op.operation_id: op for op in operations}
        undo = {op.compensates: op for op in operations if op.role == "compensation"}
        noted = set(run.context.get("skipped_undo", []))
        completed = set(run.context.get("completed", []))
        for forward_id in reversed(self._undo_order(run, operations, undo)):
            forward = by_id.get(forward_id)
            registered = undo.get(forward_id)
            if forward_id not in completed:  # outcome unknown: ask the provider first
                if forward_id in noted or forward is None or registered is None:
                    continue
                return self._reconcile_for_undo(run, spec, forward, registered)
            if registered is None:
                if forward_id in noted or forward is None:
                    continue
                change = self.change(run)
                change.context = {**run.context, "skipped_undo": [*noted, forward_id]}
                change.event(
                    "compensation_skipped",
                    operation_id=forward_id,
                    effect=forward.effect,
                    reason=self._no_undo_reason(spec, forward.effect),
                )
                return self.store.commit(change)
            if registered.status == "done":
                continue
            return CompensationStep(self, run, spec, registered).perform()
        change = self.change(run)
        change.event("compensated", undone=len(run.context.get("undone", [])))
        return self.move(run, spec, "ok", change)

    @staticmethod
    def _undo_order(
        run: RunRecord, operations: list[OperationRecord], undo: Mapping[str | None, Any]
    ) -> list[str]:
        """The forward operations to undo, oldest first: the completed ones in the order they
        completed, and each one with an unknown outcome and a registered undo placed where its
        pending record was written (the run's ``operations`` list keeps that order; the store's
        timestamps may tie)."""
        order = list(run.context.get("completed", []))
        for op in operations:
            if (
                op.role == "forward"
                and op.operation_id not in order
                and op.operation_id in undo
                and outcome_unresolved(op)
            ):
                order = Runner._in_written_order(run, order, op.operation_id)
        return order

    @staticmethod
    def _in_written_order(run: RunRecord, order: list[str], operation_id: str) -> list[str]:
        """``order`` with ``operation_id`` inserted before the first operation whose pending
        record was written after its own."""
        written = {oid: i for i, oid in enumerate(run.context.get("operations", []))}
        mine = written.get(operation_id, len(written))
        later = (i for i, oid in enumerate(order) if written.get(oid, -1) > mine)
        at = next(later, len(order))
        return [*order[:at], operation_id, *order[at:]]

    def _reconcile_for_undo(
        self, run: RunRecord, spec: Spec, forward: OperationRecord, registered: OperationRecord
    ) -> RunRecord:
        """Ask the provider, by its operation ID, whether a forward operation whose outcome is
        unknown was made, before the saga decides whether to undo it."""
        effect = spec.effects[forward.effect]
        if effect.reconcile is None:
            return self._unknown_to_person(
                run, forward, "the effect has no reconcile lookup", looked=False
            )
        try:
            found: LookupResult = self.adapter(spec, effect.adapter).lookup(
                effect.reconcile, forward.operation_id, effect.name
            )
        except Exception as exc:  # an adapter bug or a raw network error: nobody can tell
            found = LookupFailed(f"lookup raised {type(exc).__name__}: {exc}")
        field = self._receipt_field(spec, effect)
        if (
            isinstance(found, Found)
            and found.receipt
            and (field is None or bool(found.receipt.get(field)))
        ):
            return self._found_for_undo(run, forward, found.receipt, field)
        if isinstance(found, NotFound):
            change = self.change(run)
            noted = list(run.context.get("skipped_undo", []))
            change.context = {**run.context, "skipped_undo": [*noted, forward.operation_id]}
            change.operation_updates.append(
                (
                    forward.operation_id,
                    {"last_error": "not on the provider's record when compensating: not made"},
                )
            )
            change.event(
                "compensation_skipped",
                operation_id=forward.operation_id,
                effect=forward.effect,
                outcome="not_made",
                reason=(
                    f"op {forward.operation_id[:12]} is not on the provider's record: "
                    f"it was not made, so {registered.effect} has nothing to undo"
                ),
            )
            return self.store.commit(change)
        reason = found.reason if isinstance(found, LookupFailed) else "malformed lookup reply"
        return self._unknown_to_person(run, forward, reason, looked=True)

    def _found_for_undo(
        self,
        run: RunRecord,
        forward: OperationRecord,
        receipt: dict[str, Any],
        field: str | None,
    ) -> RunRecord:
        """The provider made the change: record it done, with its receipt (which the undo's
        arguments read), in its place among the completed effects; the next step undoes it."""
        change = self.change(run)
        change.operation_updates.append(
            (forward.operation_id, {"status": "done", "receipt": receipt, "last_error": None})
        )
        receipts = {**run.context.get("receipts", {}), forward.effect: receipt}
        completed = self._in_written_order(
            run, list(run.context.get("completed", [])), forward.operation_id
        )
        change.context = {**run.context, "receipts": receipts, "completed": completed}
        change.event("reconcile_found", operation_id=forward.operation_id)
        change.event(
            "done",
            operation_id=forward.operation_id,
            effect=forward.effect,
            role="forward",
            via="reconcile",
            receipt={field or "receipt": receipt.get(field or "")},
        )
        return self.store.commit(change)

    def _unknown_to_person(
        self, run: RunRecord, forward: OperationRecord, reason: str, *, looked: bool
    ) -> RunRecord:
        """Nobody can tell whether the change was made: hand the run to a person, where it
        stands, with what to check. It takes no step until an operator acts (no hot loop)."""
        op_id = forward.operation_id
        action = (
            f"{forward.effect} may have been made, and the saga cannot tell ({reason}): check "
            f"with the provider whether operation {op_id} was made. Then run "
            "'ratchet ops compensate' (it looks the operation up again, undoes it if it was "
            "made and goes on undoing, newest first), or undo it by hand and cancel the run"
        )
        change = self.change(run)
        change.status = "needs_person"
        change.context = {**run.context, "wake_at": None}
        change.operation_updates.append(
            (
                op_id,
                {
                    "status": "unknown",
                    "last_error": f"{reason}: nobody can tell whether operation {op_id} was made",
                },
            )
        )
        if looked:
            change.event("reconcile_failed", operation_id=op_id, reason=reason)
        change.event(
            "queued",
            queue=run.state,
            operator_action=action,
            effect=forward.effect,
            operation_id=op_id,
        )
        return self.store.commit(change)

    @staticmethod
    def _receipt_field(spec: Spec, effect: Effect) -> str | None:
        for row in spec.transitions:
            if row.external_effect == effect.name:
                return row.receipt or effect.receipt
        return effect.receipt

    @staticmethod
    def _no_undo_reason(spec: Spec, effect: str) -> str:
        for row in spec.transitions:
            if row.external_effect == effect and row.compensation is not None:
                comp = row.compensation
                return f"{comp.kind}: {comp.reason}" if comp.reason else comp.kind
        return "no compensation declared"

    def change(self, run: RunRecord, at: float | None = None) -> Change:
        """A new change to ``run``, made under this runner's lease on it, if it holds one."""
        return Change(
            run.id,
            run.version,
            self.clock.now() if at is None else at,
            run,
            lease_token=self.leases.get(run.id),
            take_lease=self.taking.get(run.id),
        )

    # -- moving -----------------------------------------------------------------------------

    def move(
        self,
        run: RunRecord,
        spec: Spec,
        event: str,
        change: Change,
        ctx: Mapping[str, Any] | None = None,
        *,
        write_ahead_next: bool = False,
    ) -> RunRecord:
        """Fire ``event`` and commit ``change`` with the move it selects. With no row for it
        (``unknown`` falls back to ``exhausted``), the run is handed to a person, unmoved.

        With ``write_ahead_next``, when the move leads straight into another effect, that
        effect's pending record is written in this same commit (see :meth:`_write_ahead_next`).
        """
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
        self.timers.on_move(run, spec, target, change)
        ahead = self._write_ahead_next(run, spec, target, change) if write_ahead_next else None
        moved = self.store.commit(change)
        if ahead is not None:
            self._written_ahead[run.id] = (moved.version, ahead)
        return moved

    def _write_ahead_next(
        self, run: RunRecord, spec: Spec, target: State, change: Change
    ) -> OperationRecord | None:
        """Add the next effect's write-ahead (pending record, first attempt counted) to the
        commit that moves the run into its state: one commit per effect step instead of two, and
        the pending record still precedes the call. Only for a fresh operation, with no approval
        to consume and budget left; any other effect is begun by its own step, as before. A
        crash before the call leaves the pending record, which the next runner reconciles. Not
        when the runner is stopping: it would promise a call it is not going to make."""
        if (
            target.kind != "step"
            or self.strategy != "ratchet"
            or run.version != change.expected_version
            or self.stopping()
        ):
            return None
        effect = spec.effect_of(target.name)
        if effect is None or effect.approval is not None:
            return None
        try:
            step = EffectStep(self, change.preview(run), spec, effect)
        except Exception:  # arguments that do not evaluate: the step itself will say so
            return None
        return step.write_ahead_into(change)

    def written_ahead(self, run: RunRecord) -> OperationRecord | None:
        """The operation this runner wrote ahead with the commit that made ``run``, if any:
        recorded, not yet called, so the call needs no reconcile first."""
        entry = self._written_ahead.pop(run.id, None)
        return entry[1] if entry is not None and entry[0] == run.version else None

    def ask_again(
        self, run: RunRecord, spec: Spec, effect: Effect, change: Change, why: Exception
    ) -> RunRecord:
        """An approval that no longer covers the effect: back to the state that asks for it."""
        asking = next(
            (
                s
                for s in spec.states.values()
                if s.kind == "pause" and s.approval == effect.approval
            ),
            None,
        )
        if asking is None:
            raise ApprovalStale(str(why))
        change.state, change.status = asking.name, status_of(asking)
        change.event("decision_needed", reason=str(why), to=asking.name, effect=effect.name)
        self.timers.on_move(run, spec, asking, change)
        return self.store.commit(change)

    def secure_lease(self, run_id: str, timeout: float | None) -> None:
        """Before an attempt is committed: make sure this runner can count on its lease for the
        whole call, its ``timeout`` plus :data:`LEASE_MARGIN` — renewing the lease first if too
        little is left — so that no other process can take the run over (and reconcile, and
        call again) while the request may still be in flight. Raises :class:`LeaseLost` if the
        lease is gone and :class:`LeaseTooShort` if no lease this runner takes could cover the
        call; either way nothing has been committed or sent. A runner holding no lease on the
        run (a test, ``ratchet check``) is not checked."""
        token = self.leases.get(run_id)
        deadline = self.lease_deadlines.get(run_id)
        if token is None or deadline is None:
            return
        self.check_lease(run_id)
        needed = (timeout or 0.0) + LEASE_MARGIN
        if deadline - self.monotonic() >= needed:
            return
        if self.lease_seconds * LEASE_SAFETY < needed:
            raise LeaseTooShort(
                f"a call that may take {timeout or 0:g} s (the effect's timeout) needs a lease of "
                f"more than {needed / LEASE_SAFETY:.0f} s; this process leases runs for "
                f"{self.lease_seconds:g} s (--lease): no request sent"
            )
        asked = self.monotonic()
        if not self.store.renew(run_id, token, self.lease_seconds):
            raise LeaseLost(f"the lease on run {run_id} was lost before the call: no request sent")
        self.lease_deadlines[run_id] = asked + self.lease_seconds * LEASE_SAFETY

    def check_lease(self, run_id: str) -> None:
        """Refuse to call out under a lease this process can no longer count on by its own
        clock: a worker paused past its lease (SIGSTOP, a long GC, a frozen VM) must not send a
        request the run's next holder cannot know about. The database would refuse its next
        commit anyway; this stops the call itself, which a provider that does not deduplicate
        by key would otherwise make a second time."""
        deadline = self.lease_deadlines.get(run_id)
        if deadline is not None and self.monotonic() >= deadline:
            raise LeaseLost(
                f"the lease on run {run_id} ran out on this worker's own clock before the call "
                "(was the process paused?): no request sent; the run's next holder reconciles"
            )

    def interrupt(self, point: str, effect: str) -> None:
        if self._interrupt is not None:
            self._interrupt(point, effect)

    def backoff(self, effect: Effect, attempt: int) -> float:
        """Capped exponential backoff with full jitter before attempt ``attempt + 1``."""
        retry = effect.retry
        cap = min(retry.max_backoff, retry.initial_backoff * retry.multiplier ** (attempt - 1))
        return cap if retry.jitter == "none" else self._rng.uniform(0, cap)

    def wait_inline(self, seconds: float) -> bool:
        """Sleep ``seconds`` here if that is short enough; otherwise leave it to a timer."""
        if seconds > self.inline_wait:
            return False
        self.clock.sleep(seconds)
        return True

    # -- budgets ----------------------------------------------------------------------------

    def max_attempts(self, run: RunRecord, effect: Effect, op: OperationRecord) -> int:
        """The effect's attempts, plus any an operator granted to this operation."""
        granted = int(run.context.get("grants", {}).get(op.operation_id, 0))
        return effect.retry.max_attempts + granted

    def run_budget_spent(self, run: RunRecord, spec: Spec, effect: Effect) -> bool:
        used = run.context.get("budget_used", {})
        budget = spec.budget
        if budget.max_attempts is not None and used.get("attempts", 0) >= budget.max_attempts:
            return True
        cost = effect.cost or 0.0
        return budget.max_cost is not None and used.get("cost", 0.0) + cost > budget.max_cost

    def count_attempt(self, run: RunRecord, spec: Spec, effect: Effect, change: Change) -> None:
        """Count one call against the run's budget, in the change that records the attempt."""
        base = change.context if change.context is not None else run.context
        used = dict(base.get("budget_used", {}))
        used["attempts"] = int(used.get("attempts", 0)) + 1
        used["cost"] = round(float(used.get("cost", 0.0)) + (effect.cost or 0.0), 6)
        change.context = {**base, "budget_used": used}

    # -- approvals --------------------------------------------------------------------------

    def decision_now(self) -> float:
        """Now, for a decision a deadline or an expiry bounds (a decision on a pause, an
        approval about to be used): the store's clock when this runner runs on the system
        clock, so every process deciding on one run reads one clock; the injected clock when
        another is injected (a fake clock in tests, ``RATCHET_NOW`` for practice)."""
        if isinstance(self.clock, SystemClock):
            return self.store.db_now()
        return self.clock.now()

    def valid_approval(
        self, run: RunRecord, spec: Spec, effect: Effect, args: dict[str, Any]
    ) -> ApprovalRecord:
        """The unconsumed approval that covers exactly these arguments, unexpired now
        (:meth:`decision_now`), or ApprovalError."""
        assert effect.approval is not None
        digest = approval_digest(spec, run.id, effect.approval, effect, args)
        records = self.store.approvals(run.id)
        now = self.decision_now()
        stale: ApprovalRecord | None = None
        for record in reversed(records):
            if record.name != effect.approval:
                continue
            if record.decision == "rejected":
                raise ApprovalError(
                    f"{effect.name} was rejected by {record.actor}: {record.reason}"
                )
            if record.consumed_at is not None:
                continue
            if record.digest != digest:
                stale = stale or record
                continue
            if record.expires_at is not None and record.expires_at <= now:
                raise ApprovalExpired(
                    f"the approval by {record.actor} expired before {effect.name} ran"
                )
            return record
        if stale is not None:
            raise ApprovalStale(
                f"the approval by {stale.actor} covers other arguments or another policy than "
                f"{describe_action(effect, args)} (policy {spec.policy_version})"
            )
        raise ApprovalError(
            f"{describe_action(effect, args)} has no valid approval (digest {digest[:12]}): "
            "nothing was executed"
        )
