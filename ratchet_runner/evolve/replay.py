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

The walk's state is :mod:`.walk`'s; the checks of moves and timers :mod:`.moves`', of effects,
approvals and undos :mod:`.effect_steps`'; where an unfinished run goes on,
:mod:`.continuing`'s. This module takes the events in order and checks the rest: the run's
creation, decisions, signals, operators' actions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from jsonschema import Draft7Validator

from ..engine.activation import activation
from ..engine.approvals import request_for, waiting_for
from ..errors import RatchetError, UsageError
from ..settings import shown
from ..spec.expressions import compile_expression
from ..spec.model import RUNNER_EVENTS, Spec, per_version
from ..spec.reads import missing_read
from ..spec.validate import load_spec
from ..store.records import EventRecord
from ..words import ENDED, EventKind
from .continuing import continuation
from .effect_steps import EffectChecks
from .history import History, read_histories, sealed_path
from .moves import MoveChecks
from .results import ReplayResult
from .walk import WAITING, Diverged, Moment, text

#: The input schema's validator of each spec version, by digest: made once, not once a run.
_INPUT_VALIDATORS: dict[str, Draft7Validator] = {}


def _input_validator(spec: Spec) -> Draft7Validator:
    return per_version(_INPUT_VALIDATORS, spec, lambda s: Draft7Validator(s.input_schema))


class _Replay(MoveChecks, EffectChecks):
    """One history walked under one spec version."""

    def run(self) -> ReplayResult:
        divergence = None
        try:
            for position, event in enumerate(self.history.events, start=1):
                self.position, self.event = position, event
                self.take(event)
        except Diverged as diverged:
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
            None if run.status in ENDED else continuation(self),
            tuple(dict.fromkeys(self.notes)),
        )

    def take(self, event: EventRecord) -> None:
        handler = getattr(self, f"on_{event.kind}", None)
        if handler is not None:
            handler(event, event.data)

    # -- the events ------------------------------------------------------------------------

    def on_created(self, event: EventRecord, data: Mapping[str, Any]) -> None:
        run, spec = self.history.run, self.spec
        hidden = sealed_path(run.input, "input")
        if hidden is not None:
            self.note(f"the input was not checked against the schema: {hidden} is sealed")
        else:
            try:
                problems = sorted(_input_validator(spec).iter_errors(run.input), key=str)
            except Exception as exc:  # a $ref that cannot be resolved: the runner refuses it too
                problems = []
                self.note(f"the input was not checked: the input schema cannot be applied: {exc}")
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
        started = text(data, "state")
        if started != spec.start:
            self.diverge(
                "V316",
                "/start",
                f"a run starts in {spec.start!r} in this version; this one started in {started!r}",
            )
        self.state = started
        first = spec.states[started]
        self.entered = Moment(event.at, self.view(event)) if first.kind in WAITING else None

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
        role = text(data, "role")
        if (decision == "approve" or role) and role not in approval.roles:
            self.diverge(
                "V312",
                self.field_pointer(approval.pointer, "roles"),
                f"role {role!r} may not "
                f"decide {approval.name!r} in this version (allowed: {', '.join(approval.roles)})",
            )
        self.approval = {
            "actor": text(data, "actor"),
            "role": role,
            "decided_at": record.decided_at if record is not None else event.at,
            "expires_at": data.get("expires_at"),
            "digest": text(data, "digest"),
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
        if digest != text(data, "digest"):
            self.diverge(
                "V306",
                self.field_pointer(approval.pointer, "binds"),
                f"the decision by "
                f"{text(data, 'actor')} bound digest {text(data, 'digest')[:12]}; this version "
                f"binds {digest[:12]} for the same run (its approval, effect or bound arguments "
                "differ)",
            )

    def on_signal(self, event: EventRecord, data: Mapping[str, Any]) -> None:
        name = text(data, "event")
        state = self.require_state(self.state or "", "the signal came in")
        takes = state.resumes_on if state.kind in WAITING else ()
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
        self.check_timers(event.at, text(data, "event"), float(due) if due is not None else 0.0)
        self.caused_move()

    def on_decision_needed(self, event: EventRecord, data: Mapping[str, Any]) -> None:
        to, effect = text(data, "to"), self.spec.effects.get(text(data, "effect"))
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
        self.entered = Moment(event.at, self.view(event, to, ahead=0))  # its timers armed anew

    def on_operator(self, event: EventRecord, data: Mapping[str, Any]) -> None:
        role, action = text(data, "role"), text(data, "action")
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

    def on_step_failed(self, event: EventRecord, data: Mapping[str, Any]) -> None:
        self.failed_step = True

    def on_duplicate_detected(self, event: EventRecord, data: Mapping[str, Any]) -> None:
        self.holding = True
        self.note("a change was found made twice: the undo of the extra one is not replayed")

    def on_revalidated(self, event: EventRecord, data: Mapping[str, Any]) -> None:
        self.note(f"the run moved from spec version {data.get('old')} to {data.get('new')}")

    def on_migrated(self, event: EventRecord, data: Mapping[str, Any]) -> None:
        """An operator's migration (``ratchet migrate``): the run goes on from the state it was
        moved to, under the version it was moved to."""
        self.note(
            f"migration {data.get('migration')} moved the run from spec version {data.get('old')} "
            f"to {data.get('new')}, {data.get('from_state')} → {data.get('to_state')}"
        )
        if isinstance(data.get("to_state"), str):
            self.state, self.inferred = data["to_state"], False

    def on_migration_rolled_back(self, event: EventRecord, data: Mapping[str, Any]) -> None:
        """A migration rolled back: the run goes on from the state it came back to."""
        self.note(
            f"migration {data.get('migration')} rolled back to spec version {data.get('old')}"
        )
        if isinstance(data.get("to_state"), str):
            self.state, self.inferred = data["to_state"], False


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
