"""Replay: re-derive every recorded step of a run's history under a spec version, calling no
adapter.

Walking the history's events in order, :class:`_Replay` keeps what the run knew at each one
(its state, the receipts of its done effects, its last decision, the signal that moved it, the
attempts it spent) and asks the engine's own functions what the given version would have done
there: the row a move's event selects from its state (:func:`~ratchet_runner.engine.machine.
machine_for`, on the activation :func:`~ratchet_runner.engine.activation.activation` builds),
the arguments and operation ID of each effect (:mod:`~ratchet_runner.engine.identity`), the
decision a pause waits for and the digest an approval binds and its validity when the effect
uses it (:mod:`~ratchet_runner.engine.approvals`), the undo registered with each effect
(:func:`~ratchet_runner.engine.write_ahead.register_compensation`), the timers a state arms
(:func:`~ratchet_runner.engine.timers.arm`). The first answer that differs from the record is
the run's divergence (:mod:`.results`, the ``V3xx`` codes), located in the new version; a run
that has not ended is said to continue where it stands, with the rows out of its state.

An approval's digest binds the spec and policy versions it was given under: replay compares what
it binds (the approval, the effect, the bound arguments) as the given version would bind them
under the recorded versions, and notes when those versions differ (a run moved to the new
version would be asked again). A sealed value (:func:`~.history.sealed_path`) cannot be read:
a check that needs one is noted as not made, never failed.

Over 400 lines, as one concern: one walk of a history, each kind of recorded step checked by
the engine's function for it, which read best together.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NoReturn

from jsonschema import Draft7Validator

from ..clock import format_time
from ..engine.activation import activation
from ..engine.approvals import request_for, valid_approval, waiting_for
from ..engine.identity import evaluate_args, first_difference, operation_id
from ..engine.machine import machine_for, status_of
from ..engine.timers import arm
from ..engine.write_ahead import register_compensation
from ..errors import (
    ApprovalError,
    ApprovalExpired,
    ApprovalStale,
    Diagnostic,
    RatchetError,
    UsageError,
)
from ..settings import shown
from ..spec.expressions import compile_expression
from ..spec.loader import pointer_join
from ..spec.model import RUNNER_EVENTS, Compensation, Effect, Row, Spec, State
from ..spec.reads import missing_read
from ..spec.validate import load_spec
from ..store.context import RunContext
from ..store.records import ApprovalRecord, Change, EventRecord, RunRecord
from ..words import ENDED, EventKind, OperationStatus, RunStatus
from .history import History, is_sealed, read_histories, sealed_path
from .results import Continuation, Divergence, ReplayResult, Way

#: The events that cause the move committed with them: the move is checked at the cause, as
#: the engine weighs the row before it records a decision or a signal, or fires a timer.
_CAUSES = (EventKind.APPROVED, EventKind.REJECTED, EventKind.SIGNAL, EventKind.TIMER)
#: The kinds of the states a run waits in (timers are armed there).
_WAITING = ("pause", "wait")


class _Diverged(Exception):
    def __init__(self, divergence: Divergence) -> None:
        super().__init__(divergence.where.format())
        self.divergence = divergence


def _text(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key)
    return value if isinstance(value, str) else ""


@dataclass
class _Moment:
    """When and how the run entered the state it waits in: what its timers are armed from."""

    at: float
    view: RunRecord


class _Replay:
    """One history walked under one spec version."""

    def __init__(self, spec: Spec, history: History) -> None:
        self.spec = spec
        self.history = history
        self.machine = machine_for(spec)
        self.state: str | None = None
        #: Whether the state was inferred by this version's rule (after an operator's action
        #: moved the run without a ``moved`` event), rather than read from the history.
        self.inferred = False
        #: The effect whose row the inferred state was found by (None: the undo's state).
        self.inferred_effect: str | None = None
        self.receipts: dict[str, Any] = {}
        self.approval: dict[str, Any] = {}
        self.attempts = 0
        self.entered: _Moment | None = None
        self.failed_step = False
        self.holding = False
        self.checked: set[int] = set()
        self.position = 0
        self.event: EventRecord | None = None
        self.decisions = iter(history.approvals)
        self.notes: list[str] = []

    # -- the walk --------------------------------------------------------------------------

    def run(self) -> ReplayResult:
        divergence = None
        try:
            for position, event in enumerate(self.history.events, start=1):
                self.position, self.event = position, event
                self.take(event)
        except _Diverged as diverged:
            divergence = diverged.divergence
        run = self.history.run
        return ReplayResult(
            run.id,
            run.workflow,
            run.business_key,
            self.history.source,
            run.state,
            str(run.status),
            len(self.history.events),
            divergence,
            None if run.status in ENDED else self.continuation(),
            tuple(dict.fromkeys(self.notes)),
        )

    def take(self, event: EventRecord) -> None:
        handler = getattr(self, f"on_{event.kind}", None)
        if handler is not None:
            handler(event, event.data)

    def diverge(self, code: str, pointer: str, message: str, *, key: bool = False) -> NoReturn:
        doc = self.spec.document
        if doc is None:
            where = Diagnostic("<spec>", 1, 1, code, message, pointer)
        else:
            where = doc.diagnostic(pointer, code, message, key=key)
        assert self.event is not None
        raise _Diverged(Divergence(self.position, self.event.kind, where))

    def note(self, text: str) -> None:
        self.notes.append(text)

    def view(self, event: EventRecord, state: str | None = None, ahead: int = 1) -> RunRecord:
        """The run as it stood when ``event``'s commit was made (``ahead``: 0 for a step taken
        on the run as that commit leaves it, as the write-ahead that rides with a move is)."""
        context: RunContext = {
            "receipts": dict(self.receipts),
            "approval": dict(self.approval),
            "budget_used": {"attempts": self.attempts},
        }
        return replace(
            self.history.run,
            state=state or self.state or self.history.run.state,
            version=max(1, event.version - ahead),
            context=context,
        )

    def sealed_read(self, texts: Iterable[str], ctx: Mapping[str, Any]) -> str | None:
        """The first sealed value one of the expressions ``texts`` reads on ``ctx`` (its dotted
        path), if any: what cannot be evaluated as recorded, only carried."""
        for text in texts:
            try:
                paths = compile_expression(text).paths
            except RatchetError:
                continue
            for path in paths:
                value: Any = ctx
                for depth, part in enumerate(path):
                    if not isinstance(value, Mapping) or part not in value:
                        break
                    value = value[part]
                    if is_sealed(value):
                        return ".".join(path[: depth + 1])
        return None

    def guards(self, state: str, *events: str) -> list[str]:
        return [r.guard for r in self.spec.rows_from(state) if r.event in events and r.guard]

    def reads_of(self, effect: Effect, row: Row | None = None) -> list[str]:
        """The expressions that name ``effect``'s change: its arguments, and the row's key."""
        texts = [v for v in effect.args.values() if isinstance(v, str)]
        key = row.idempotency_key if row is not None and row.idempotency_key else ()
        texts += [k for k in key if k.partition(".")[0] not in ("effect", "business_key", "args")]
        return [*texts, self.spec.business_key]

    # -- where things are in the new version -------------------------------------------------

    def state_pointer(self, name: str) -> str:
        return pointer_join("/states", name) if name in self.spec.states else "/states"

    def field_pointer(self, parent: str, name: str) -> str:
        pointer = pointer_join(parent, name)
        doc = self.spec.document
        return pointer if doc is not None and pointer in doc.marks else parent

    def row_making(self, effect: str) -> Row | None:
        return next((r for r in self.spec.transitions if r.external_effect == effect), None)

    def declared_undo(self, effect: str) -> tuple[Row | None, Compensation | None]:
        row = self.row_making(effect)
        return row, None if row is None else row.compensation

    def require_state(self, name: str, what: str) -> State:
        state = self.spec.states.get(name)
        if state is None:
            self.diverge(
                "V302", "/states", f"{what} {name!r}, which this version does not have", key=True
            )
        return state

    def resync(self, recorded: str) -> None:
        """The history says the run stood in ``recorded``: an inferred state must agree."""
        if self.state is not None and self.state != recorded and self.inferred:
            row = self.row_making(self.inferred_effect) if self.inferred_effect else None
            pointer = row.pointer if row is not None else self.state_pointer(recorded)
            self.diverge(
                "V308",
                pointer,
                f"the history went on in {recorded!r} after the operator's action; this version "
                f"makes {self.inferred_effect or 'the step'} in {self.state!r}",
            )
        self.state, self.inferred = recorded, False

    def infer(self, operation: str) -> None:
        """After an operator's action, the state the run went on in: where this version makes
        the operation's effect (or undoes, for an undo)."""
        if self.state is not None:
            return
        op = self.history.operation(operation)
        if op is None:
            return
        if op.role == "forward":
            row = self.row_making(op.effect)
            if row is None:
                self.diverge("V308", "/transitions", f"no row of this version makes {op.effect!r}")
            self.state, self.inferred_effect = row.state, op.effect
        else:
            state = next((s for s in self.spec.states.values() if s.kind == "compensate"), None)
            if state is None:
                self.diverge("V302", "/states", "this version has no compensate state", key=True)
            self.state, self.inferred_effect = state.name, None
        self.inferred = True

    # -- moves -----------------------------------------------------------------------------

    def move_after(self, start: int) -> tuple[int, EventRecord] | None:
        """The move (``moved`` or ``stuck``) committed with the event at ``start``."""
        events = self.history.events
        version = events[start - 1].version
        for position in range(start + 1, len(events) + 1):
            found = events[position - 1]
            if found.version != version:
                return None
            if found.kind in (EventKind.MOVED, EventKind.STUCK):
                return position, found
        return None

    def fire(self, state: str, event: str, ctx: Mapping[str, Any]) -> tuple[Row | None, list[str]]:
        """The row ``event`` selects from ``state``, as the runner's move does (no row for
        ``unknown``: the ``exhausted`` row)."""
        row, errors = self.machine.fire(state, event, ctx)
        if row is None and event == "unknown":
            row, errors = self.machine.fire(state, "exhausted", ctx)
        return row, errors

    def check_move(self, move: EventRecord, **extra: Any) -> None:
        """The recorded move (or the recorded lack of one: ``stuck``) is the one the new
        version's table selects on the recorded activation."""
        data = move.data
        stuck = move.kind == EventKind.STUCK
        recorded = _text(data, "state" if stuck else "from")
        self.resync(recorded)
        self.require_state(recorded, "the run stood in")
        event = _text(data, "event")
        if not stuck:  # the row the runner looked for first (``unknown``: then ``exhausted``)
            event = _text(data, "instead_of") or event
        to = "" if stuck else _text(data, "to")
        view = self.view(move, recorded)
        ctx = activation(view, self.spec, **extra)
        row, errors = self.fire(recorded, event, ctx)
        hidden = self.sealed_read(self.guards(recorded, event, "exhausted"), ctx)
        if stuck:
            if row is not None and hidden is None:
                code = "V304" if row.guard else "V301"
                self.diverge(
                    code,
                    row.pointer,
                    f"the history found no row for {event!r} in {recorded!r} (the run went to a "
                    f"person); this version's row takes it to {row.next_state!r}",
                )
            return
        if to not in self.spec.states:
            pointer = row.pointer if row is not None else self.state_pointer(recorded)
            self.diverge(
                "V302",
                pointer,
                f"the run moved {recorded} --{event}--> {to}; this version has no state {to!r}",
            )
        same = row is not None and row.next_state == to and row.event == _text(data, "event")
        if same:
            return
        if hidden is not None:
            self.note(f"the move {recorded} --{event}--> {to} was not checked: {hidden} is sealed")
            return
        rows = [r for r in self.spec.rows_from(recorded) if r.event in (event, "exhausted")]
        if not any(r.event == event for r in rows) and (event != "unknown" or not rows):
            self.diverge(
                "V303",
                self.state_pointer(recorded),
                f"no row of this version takes {event!r} in {recorded!r} (the history moved "
                f"{recorded} --{event}--> {to})",
                key=True,
            )
        if row is None:
            guards = [r for r in rows if r.event == event and r.guard]
            why = "; ".join(errors) or "no row's guard holds on the recorded context"
            pointer = pointer_join(guards[0].pointer, "guard") if guards else rows[0].pointer
            self.diverge(
                "V304", pointer, f"{recorded} --{event}--> {to} is not taken any more: {why}"
            )
        if any(r.next_state == to and r.event == event for r in rows):
            self.diverge(
                "V304",
                self.field_pointer(row.pointer, "guard"),
                f"on the recorded context this row's guard selects {recorded} --{row.event}--> "
                f"{row.next_state} first, where the history moved to {to!r}",
            )
        self.diverge(
            "V301",
            self.field_pointer(row.pointer, "next_state"),
            f"{recorded} --{row.event}--> now leads to {row.next_state!r}; the history moved to "
            f"{to!r}",
        )

    def moved_into(self, move: EventRecord) -> None:
        """The run now stands where ``move`` took it."""
        to = _text(move.data, "to")
        self.state, self.inferred = to, False
        target = self.spec.states.get(to)
        if target is not None and target.kind in _WAITING:
            self.entered = _Moment(move.at, self.view(move, to, ahead=0))
        else:
            self.entered = None

    def check_timers(self, left_at: float, fired: str | None = None, due: float = 0.0) -> None:
        """Whether the timers this version arms in the waiting state would have ended the wait
        as the history says it ended: by the recorded timer (``fired``, due at ``due``), or, for
        a decision or signal at ``left_at``, by none first."""
        state = self.spec.states.get(self.state or "")
        if state is None or self.entered is None:
            return
        armed: list[Any] = []
        if state.kind in _WAITING:
            try:
                armed = list(arm(self.entered.view, self.spec, state, self.entered.at))
            except RatchetError as exc:
                self.diverge("V310", self.timer_pointer(state), f"its timer cannot be armed: {exc}")
        pointer = self.timer_pointer(state)
        if fired is not None:
            match = [t for t in armed if t["event"] == fired]
            if not match:
                self.diverge(
                    "V310",
                    pointer,
                    f"the run left {state.name!r} by its {fired!r} timer; this "
                    f"version arms no {fired!r} timer there",
                )
            if abs(float(match[0]["due_at"]) - due) > 1e-6:
                self.diverge(
                    "V310",
                    pointer,
                    f"the {fired!r} timer in {state.name!r} falls due "
                    f"{_delta(float(match[0]['due_at']) - self.entered.at)} after entry in this "
                    f"version; the history's fell due {_delta(due - self.entered.at)} after",
                )
            return
        early = [t for t in armed if float(t["due_at"]) <= left_at]
        if early:
            self.diverge(
                "V310",
                pointer,
                f"the {early[0]['event']!r} timer in {state.name!r} falls due "
                f"{_delta(float(early[0]['due_at']) - self.entered.at)} after entry in this "
                f"version, before the run left it ({_delta(left_at - self.entered.at)} after)",
            )

    def timer_pointer(self, state: State) -> str:
        for name in ("expires_after", "after", "until"):
            pointer = pointer_join(state.pointer, name)
            if self.spec.document is not None and pointer in self.spec.document.marks:
                return pointer
        return state.pointer

    def caused_move(self, **extra: Any) -> None:
        """Check the move committed with the event being taken, there."""
        found = self.move_after(self.position)
        if found is None:
            return
        position, move = found
        self.checked.add(position)
        self.check_move(move, **extra)

    # -- the events ------------------------------------------------------------------------

    def on_created(self, event: EventRecord, data: Mapping[str, Any]) -> None:
        run, spec = self.history.run, self.spec
        hidden = sealed_path(run.input, "input")
        if hidden is not None:
            self.note(f"the input was not checked against the schema: {hidden} is sealed")
        else:
            problems = sorted(Draft7Validator(spec.input_schema).iter_errors(run.input), key=str)
            if problems:
                where = "/".join(str(p) for p in problems[0].absolute_path) or "input"
                self.diverge(
                    "V315",
                    "/input",
                    f"the recorded input does not fit this version: {where}: {problems[0].message}",
                )
        lacking = missing_read(spec, run.input)
        if lacking is not None:
            read, name = lacking
            self.diverge(
                "V315",
                read.pointer,
                f"the recorded input has no {name!r}, which {read.reader} reads",
            )
        unread = self.sealed_read([spec.business_key], {"input": run.input})
        if unread is not None:
            self.note(f"the business key was not checked: {unread} is sealed")
        else:
            try:
                key = compile_expression(spec.business_key).evaluate({"input": run.input})
            except RatchetError as exc:
                self.diverge("V314", "/business_key", f"the business key cannot be made: {exc}")
            if str(key) != run.business_key:
                self.diverge(
                    "V314",
                    "/business_key",
                    f"the business key is {str(key)!r} for the recorded "
                    f"input; the run's is {run.business_key!r}: every operation ID made from it "
                    "changes, and the input names another run",
                )
        started = _text(data, "state")
        if started != spec.start:
            self.diverge(
                "V316",
                "/start",
                f"a run starts in {spec.start!r} in this version; this one started in {started!r}",
            )
        self.state = started
        first = spec.states[started]
        self.entered = _Moment(event.at, self.view(event)) if first.kind in _WAITING else None

    def on_moved(self, event: EventRecord, data: Mapping[str, Any]) -> None:
        if self.position not in self.checked:
            self.check_move(event)
        self.moved_into(event)

    def on_stuck(self, event: EventRecord, data: Mapping[str, Any]) -> None:
        if self.position not in self.checked:
            self.check_move(event)

    def on_approved(self, event: EventRecord, data: Mapping[str, Any]) -> None:
        self.decided(event, data, "approve")

    def on_rejected(self, event: EventRecord, data: Mapping[str, Any]) -> None:
        self.decided(event, data, "reject")

    def decided(self, event: EventRecord, data: Mapping[str, Any], decision: str) -> None:
        """A decision is weighed as the engine weighs one (the state waits for it, the role may
        give it, the pause has not lapsed, the row's guard holds), then its digest."""
        record = next(self.decisions, None)
        state = self.require_state(self.state or "", "the decision was given in")
        view = self.view(event)
        approval = waiting_for(self.spec, view)
        name = record.name if record is not None else (approval.name if approval else "")
        if approval is None or approval.name != name:
            waits = f"waits for {approval.name!r}" if approval else "waits for no decision"
            self.diverge(
                "V312",
                self.state_pointer(state.name),
                f"{state.name!r} {waits} in this "
                f"version; the history recorded a decision on {name!r}",
                key=True,
            )
        role = _text(data, "role")
        if decision == "approve" and role not in approval.roles:
            self.diverge(
                "V312",
                self.field_pointer(approval.pointer, "roles"),
                f"role {role!r} may not "
                f"decide {approval.name!r} in this version (allowed: {', '.join(approval.roles)})",
            )
        self.approval = {
            "actor": _text(data, "actor"),
            "role": role,
            "decided_at": record.decided_at if record is not None else event.at,
            "expires_at": data.get("expires_at"),
            "digest": _text(data, "digest"),
            "name": approval.name,
        }
        self.check_timers(event.at)
        self.caused_move()
        unread = self.sealed_read(
            self.reads_of(self.spec.effects[approval.effect]), activation(view, self.spec)
        )
        if unread is not None:
            self.note(f"the digest of the decision was not checked: {unread} is sealed")
            return
        stamped = self.stamped(record)
        digest = request_for(view, stamped, approval).digest
        if digest != _text(data, "digest"):
            self.diverge(
                "V306",
                self.field_pointer(approval.pointer, "binds"),
                f"the decision by "
                f"{_text(data, 'actor')} bound digest {_text(data, 'digest')[:12]}; this version "
                f"binds {digest[:12]} for the same run (its approval, effect or bound arguments "
                "differ)",
            )

    def stamped(self, record: ApprovalRecord | None) -> Spec:
        """This version as the recorded decision's versions stamp it: a digest binds the spec and
        policy versions, which differ by design between versions (noted, not compared)."""
        stamp = self.history.spec(record.spec_digest if record else self.history.run.spec_digest)
        if stamp is None:
            return self.spec
        same = (stamp.spec_version, stamp.policy_version) == (
            self.spec.spec_version,
            str(self.spec.policy_version),
        )
        if not same:
            self.note(
                f"decisions were given under spec version {stamp.spec_version} (policy "
                f"{stamp.policy_version}); this is version {self.spec.spec_version} (policy "
                f"{self.spec.policy_version}): a run moved to it would be asked again, as "
                "digests bind the versions; replay compares what they bind"
            )
        return replace(
            self.spec, spec_version=stamp.spec_version, policy_version=stamp.policy_version
        )

    def on_signal(self, event: EventRecord, data: Mapping[str, Any]) -> None:
        name = _text(data, "event")
        state = self.require_state(self.state or "", "the signal came in")
        takes = state.resumes_on if state.kind in _WAITING else ()
        if name in RUNNER_EVENTS or name not in takes:
            offered = ", ".join(takes) or "no signals"
            self.diverge(
                "V303",
                self.field_pointer(state.pointer, "resumes_on"),
                f"{state.name!r} takes {offered} in this version, not the recorded signal {name!r}",
            )
        self.check_timers(event.at)
        payload = data.get("data")
        self.caused_move(signal=payload if isinstance(payload, dict) else {})

    def on_timer(self, event: EventRecord, data: Mapping[str, Any]) -> None:
        due = data.get("due_at")
        self.check_timers(event.at, _text(data, "event"), float(due) if due is not None else 0.0)
        self.caused_move()

    def on_decision_needed(self, event: EventRecord, data: Mapping[str, Any]) -> None:
        to, effect = _text(data, "to"), self.spec.effects.get(_text(data, "effect"))
        asking = next(
            (
                s
                for s in self.spec.states.values()
                if effect is not None and s.kind == "pause" and s.approval == effect.approval
            ),
            None,
        )
        if asking is None or asking.name != to:
            here = f"{asking.name!r}" if asking else "no state"
            self.diverge(
                "V301",
                self.state_pointer(to),
                f"the run was sent back to {to!r} for a new decision; this version asks in {here}",
                key=True,
            )
        self.state, self.inferred = to, False

    def on_operator(self, event: EventRecord, data: Mapping[str, Any]) -> None:
        role, action = _text(data, "role"), _text(data, "action")
        if role not in self.spec.operator_roles:
            allowed = ", ".join(self.spec.operator_roles) or "none"
            self.diverge(
                "V313",
                self.field_pointer("/operators", "roles"),
                f"role {role!r} may not {action} runs in this version (operator roles: {allowed})",
            )
        if action == "retry":
            if self.failed_step:
                self.failed_step = False
            else:
                self.holding, self.state = False, None
        elif action == "compensate" or (
            action == "reconcile" and self.same_commit(EventKind.RECONCILE_FOUND)
        ):
            self.state = None

    def same_commit(self, kind: str) -> bool:
        assert self.event is not None
        rest = self.history.events[self.position :]
        return any(e.kind == kind and e.version == self.event.version for e in rest)

    def on_step_failed(self, event: EventRecord, data: Mapping[str, Any]) -> None:
        self.failed_step = True

    def on_duplicate_detected(self, event: EventRecord, data: Mapping[str, Any]) -> None:
        self.holding = True
        self.note("a change was found made twice: the undo of the extra one is not replayed")

    def on_revalidated(self, event: EventRecord, data: Mapping[str, Any]) -> None:
        self.note(f"the run moved from spec version {data.get('old')} to {data.get('new')}")

    def on_call(self, event: EventRecord, data: Mapping[str, Any]) -> None:
        self.infer(_text(data, "operation_id"))
        if not data.get("again"):
            self.attempts += 1

    def on_resumed(self, event: EventRecord, data: Mapping[str, Any]) -> None:
        self.infer(_text(data, "operation_id"))

    def on_retry_scheduled(self, event: EventRecord, data: Mapping[str, Any]) -> None:
        if data.get("unsent"):
            self.attempts = max(0, self.attempts - 1)

    def on_done(self, event: EventRecord, data: Mapping[str, Any]) -> None:
        if _text(data, "role") != "forward":
            return
        op = self.history.operation(_text(data, "operation_id"))
        receipt = op.receipt if op is not None and op.receipt is not None else data.get("receipt")
        self.receipts[_text(data, "effect")] = receipt if isinstance(receipt, dict) else {}

    def on_approval_expired(self, event: EventRecord, data: Mapping[str, Any]) -> None:
        effect = self.spec.effects.get(_text(data, "effect"))
        if effect is None or effect.approval is None:
            return
        op = self.history.operation(_text(data, "operation_id"))
        args = op.args if op is not None else None
        if self.approval_verdict(event, effect, args) is None:
            self.diverge(
                "V311",
                self.field_pointer(pointer_join("/approvals", effect.approval), "expires_after"),
                f"the history's approval of {effect.name} expired; in this version it would "
                "still cover the effect then",
            )

    def approval_verdict(
        self, event: EventRecord, effect: Effect, args: dict[str, Any] | None
    ) -> Exception | None:
        """Whether an approval this version counts covers ``effect`` at ``event``: the recorded
        decisions as they stood then (one consumed later was not consumed yet), each expiring
        by this version's ``expires_after``; None when one does, else why none does."""
        assert effect.approval is not None
        approval = self.spec.approvals[effect.approval]
        records = [
            replace(
                a,
                expires_at=None
                if approval.expires_after is None
                else a.decided_at + approval.expires_after,
                consumed_at=a.consumed_at if (a.consumed_at or event.at) < event.at else None,
            )
            for a in self.history.approvals
            if a.decided_at <= event.at
        ]
        view = self.view(event)
        if args is None:
            args = evaluate_args(effect, activation(view, self.spec))
        stamped = self.stamped(records[-1] if records else None)
        try:
            valid_approval(records, stamped, view.id, effect, args, event.at)
        except ApprovalError as refused:
            return refused
        return None

    def on_pending(self, event: EventRecord, data: Mapping[str, Any]) -> None:
        recorded = _text(data, "operation_id")
        self.infer(recorded)
        if _text(data, "role") == "forward":
            self.forward_pending(event, data, recorded)
        elif _text(data, "role") == "compensation":
            self.undo_pending(event, data, recorded)
        else:
            self.note("the undo of a change made twice is not replayed")

    def forward_pending(self, event: EventRecord, data: Mapping[str, Any], recorded: str) -> None:
        name = _text(data, "effect")
        state = self.require_state(self.state or "", f"{name} was made in")
        effect = self.spec.effect_of(state.name)
        if effect is None or effect.name != name:
            row = self.row_making(name)
            makes = f"makes {effect.name!r}" if effect else "makes no effect"
            elsewhere = f"; {name} is made by the row out of {row.state!r}" if row else ""
            self.diverge(
                "V308",
                row.pointer if row is not None else self.state_pointer(state.name),
                f"the history made {name} in {state.name!r}; there this version {makes}{elsewhere}",
                key=row is None,
            )
        if _text(data, "strategy") == "naive":
            self.note("effects made by the naive strategy have random operation IDs: not compared")
            return
        row = next(r for r in self.spec.rows_from(state.name) if r.external_effect == name)
        ahead = 0 if self.rides_with_move(event) else 1
        view = self.view(event, ahead=ahead)
        ctx = activation(view, self.spec)
        hidden = self.sealed_read(self.reads_of(effect, row), ctx)
        try:
            args = evaluate_args(effect, ctx)
            made = operation_id(self.spec, row, effect, args, ctx)
        except RatchetError as exc:
            if hidden is not None:
                self.note(f"{name} was not checked: {hidden} is sealed")
                return
            self.diverge("V309", pointer_join(effect.pointer, "args"), f"{exc}")
        if made != recorded:
            if hidden is not None:
                self.note(f"the operation ID of {name} was not checked: {hidden} is sealed")
                return
            self.diverge(
                "V305",
                self.field_pointer(row.pointer, "idempotency_key"),
                f"{name} is made "
                f"under operation {made[:12]} in this version; the history made it under "
                f"{recorded[:12]}: a provider would take it for another change",
            )
        op = self.history.operation(recorded)
        differs = None if op is None else first_difference(op.args, args, "args")
        if differs is not None and sealed_path(op.args if op else None) is None:
            where, there, here = differs
            self.diverge(
                "V309",
                pointer_join(effect.pointer, "args"),
                f"{name} would be sent with "
                f"{where} {here} under the same operation ID; the history sent {there}",
            )
        if effect.approval is not None:
            self.approval_covers(event, effect, args)
        self.check_registration(event, row, effect, recorded, view)

    def rides_with_move(self, event: EventRecord) -> bool:
        """Whether ``event`` was written with the move into its state (a write-ahead made on
        the run as that commit leaves it)."""
        before = self.history.events[: self.position - 1]
        return any(e.kind == EventKind.MOVED and e.version == event.version for e in before)

    def approval_covers(self, event: EventRecord, effect: Effect, args: dict[str, Any]) -> None:
        refused = self.approval_verdict(event, effect, args)
        if refused is None or isinstance(refused, ApprovalStale):
            return  # a digest that differs is reported where the decision was recorded
        assert effect.approval is not None
        pointer = pointer_join("/approvals", effect.approval)
        if isinstance(refused, ApprovalExpired):
            self.diverge(
                "V311",
                self.field_pointer(pointer, "expires_after"),
                f"the approval would have "
                f"expired before {effect.name} was sent in this version ({refused})",
            )
        self.diverge("V312", pointer, f"{effect.name} needs an approval in this version: {refused}")

    def check_registration(
        self, event: EventRecord, row: Row, effect: Effect, recorded: str, view: RunRecord
    ) -> None:
        """The undo registered with the write-ahead (or its absence) is what this version's row
        registers (:func:`register_compensation`, into a scratch change)."""
        scratch = Change(view.id, view.version, event.at)
        if row.compensation is not None:
            register_compensation(scratch, view, row.compensation, recorded, effect.name)
        wanted = [_undo_of(kind, data) for kind, data in scratch.events]
        kinds = (EventKind.COMPENSATION_REGISTERED, EventKind.NO_COMPENSATION)
        made = [
            _undo_of(e.kind, e.data)
            for e in self.history.events[self.position :]
            if e.version == event.version
            and e.kind in kinds
            and recorded in (e.data.get("compensates"), e.data.get("operation_id"))
        ]
        if made != wanted:
            self.diverge(
                "V307",
                self.field_pointer(row.pointer, "compensation"),
                f"{effect.name} "
                f"registers {_said(wanted)} in this version; the history registered {_said(made)}",
            )

    def undo_pending(self, event: EventRecord, data: Mapping[str, Any], recorded: str) -> None:
        name = _text(data, "effect")
        undo = self.history.operation(recorded)
        forward = self.history.operation(undo.compensates or "") if undo is not None else None
        if forward is None:
            return
        row, declared = self.declared_undo(forward.effect)
        if declared is None or declared.effect != name or name not in self.spec.effects:
            now = "no undo" if declared is None else (declared.effect or declared.kind)
            self.diverge(
                "V307",
                self.field_pointer(row.pointer, "compensation") if row else "/transitions",
                f"{forward.effect} is undone by {now} in this version; the history undid it "
                f"by {name}",
            )
        view = self.view(event)
        try:
            args = evaluate_args(self.spec.effects[name], activation(view, self.spec))
        except RatchetError as exc:
            self.diverge("V309", pointer_join(self.spec.effects[name].pointer, "args"), str(exc))
        differs = None if undo is None else first_difference(undo.args, args, "args")
        undoing = self.spec.effects[name]
        unread = self.sealed_read(self.reads_of(undoing), activation(view, self.spec))
        if differs is not None and unread is None:
            where, there, here = differs
            self.diverge(
                "V309",
                pointer_join(self.spec.effects[name].pointer, "args"),
                f"the undo {name} would be sent with {where} {here}; the history sent {there}",
            )

    def on_compensation_skipped(self, event: EventRecord, data: Mapping[str, Any]) -> None:
        if data.get("outcome") == "not_made":
            return  # looked up, and not made: nothing to undo, whatever the spec declares
        effect = _text(data, "effect")
        row, declared = self.declared_undo(effect)
        kind = "missing" if declared is None else declared.kind
        if kind != _text(data, "undo"):
            self.diverge(
                "V307",
                self.field_pointer(row.pointer, "compensation") if row else "/transitions",
                f"{effect} has {kind if kind != 'missing' else 'no undo declared'} in this "
                f"version; the history skipped its undo as {_text(data, 'undo')}",
            )

    # -- where an unfinished run goes on --------------------------------------------------

    def continuation(self) -> Continuation:
        run = self.history.run
        state = self.spec.states.get(run.state)
        if state is None:
            return Continuation(
                run.state,
                None,
                str(run.status),
                notes=("it needs a mapping to a state of this version first",),
            )
        held = (RunStatus.PAUSED, RunStatus.NEEDS_PERSON)
        status = str(run.status) if run.status in held else str(status_of(state))
        ways = tuple(
            Way(r.event, r.next_state, r.guard, r.external_effect, self.located(r.pointer))
            for r in self.spec.rows_from(state.name)
        )
        return Continuation(state.name, state.kind, status, ways, tuple(self.open_notes(state)))

    def located(self, pointer: str) -> str:
        doc = self.spec.document
        if doc is None:
            return "<spec>"
        line, column = doc.locate(pointer)
        return f"{doc.file}:{line}:{column}"

    def open_notes(self, state: State) -> list[str]:
        """What matters for an unfinished run in ``state``: the decision it waits for, a call
        in flight, its timers."""
        run, notes = self.history.run, []
        approval = waiting_for(self.spec, run)
        asked = None if approval is None else self.spec.effects[approval.effect]
        unread = (
            None
            if asked is None
            else self.sealed_read(self.reads_of(asked), activation(run, self.spec))
        )
        if approval is not None and unread is None:
            try:
                digest = request_for(run, self.spec, approval).digest
            except RatchetError as exc:
                notes.append(f"its decision on {approval.name} cannot be asked: {exc}")
            else:
                notes.append(f"waits for a decision on {approval.name} (digest {digest[:12]})")
        for op in self.history.operations:
            unsettled = op.status in (OperationStatus.PENDING, OperationStatus.UNKNOWN)
            if unsettled and op.attempts > 0:
                notes.append(
                    f"{op.effect} is in flight (op {op.operation_id[:12]}, {op.status}, attempt "
                    f"{op.attempts}): it is looked up before any call"
                )
        for timer in self.history.timers:
            if timer.fired_at is not None or timer.state != state.name:
                continue
            said = f"its {timer.event!r} timer falls due at {format_time(timer.due_at)}, as armed"
            try:
                armed = arm(run, self.spec, state, timer.created_at)
            except RatchetError:
                armed = []
            due = [float(t["due_at"]) for t in armed if t["event"] == timer.event]
            if not due:
                said += f"; this version would arm no {timer.event!r} timer here"
            elif abs(due[0] - timer.due_at) > 1e-6:
                said += f"; this version would arm it for {format_time(due[0])}"
            notes.append(said)
        return notes


def _undo_of(kind: str, data: Mapping[str, Any]) -> tuple[str, str]:
    if kind == EventKind.COMPENSATION_REGISTERED:
        return ("undo", _text(data, "effect"))
    return ("none", _text(data, "undo"))


def _said(undos: list[tuple[str, str]]) -> str:
    if not undos:
        return "no undo"
    return ", ".join(f"the undo {name}" if kind == "undo" else f"'{name}'" for kind, name in undos)


def _delta(seconds: float) -> str:
    """``72h``, ``30m``, ``1d 2h``: a span as the spec writes durations."""
    whole = round(seconds)
    if whole % 86400 == 0 and whole:
        return f"{whole // 86400}d"
    if whole % 3600 == 0 and whole:
        return f"{whole // 3600}h"
    if whole % 60 == 0 and whole:
        return f"{whole // 60}m"
    return f"{seconds:g}s"


# -- the public functions ------------------------------------------------------------------


def replay(spec: Spec, histories: Iterable[History]) -> list[ReplayResult]:
    """Each history replayed under ``spec``: its verdict, in order (no adapter is called). A
    history of another workflow is a :class:`~ratchet_runner.errors.UsageError`, and nothing is
    replayed: each workflow's histories are kept apart, as their specs are."""
    found = list(histories)
    for history in found:
        if history.run.workflow != spec.name:
            where = f"{history.source}: " if history.source else ""
            raise UsageError(
                f"{where}run {history.run.id} is a run of {shown(history.run.workflow)!r}, not of "
                f"{spec.name!r}: replay each workflow's histories against its own spec"
            )
    return [_Replay(spec, history).run() for history in found]


def replay_histories(
    spec: str | Path | Spec, histories: str | Path | Iterable[History]
) -> list[ReplayResult]:
    """Replay the histories (a JSONL file ``ratchet export`` wrote, or histories in hand) under
    the spec (a file, or a loaded :class:`~ratchet_runner.spec.model.Spec`), calling no
    adapter: one :class:`~.results.ReplayResult` a run, in the file's order. An invalid spec
    raises :class:`~ratchet_runner.errors.SpecError`; a file that cannot be read,
    :class:`~ratchet_runner.errors.HistoriesInvalid`. Runs of another workflow than the spec's
    are replayed too, and diverge at once: keep each workflow's histories in a file of their
    own."""
    loaded = spec if isinstance(spec, Spec) else load_spec(spec)
    found = read_histories(histories) if isinstance(histories, str | Path) else list(histories)
    return replay(loaded, found)


def assert_replays_clean(
    spec: str | Path | Spec, histories: str | Path | Iterable[History]
) -> list[ReplayResult]:
    """:func:`replay_histories`, for a test: the results when every run replays clean; else an
    ``AssertionError`` that lists each divergence, located (``FILE:LINE:COL: V3xx ...``). An
    empty file fails too: a golden file that replays nothing proves nothing."""
    results = replay_histories(spec, histories)
    if not results:
        raise AssertionError("no histories to replay")
    diverged = [line for r in results if not r.clean for line in r.lines()]
    if diverged:
        count = sum(1 for r in results if not r.clean)
        raise AssertionError(f"{count} of {len(results)} runs diverge:\n" + "\n".join(diverged))
    return results
