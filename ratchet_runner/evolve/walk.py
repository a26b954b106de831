"""The walk of one history under a spec version: what the run knew at each event, and how a
divergence is located in the new version.

:class:`Walk` holds what a replay keeps as it takes a history's events in order (the state the
run stood in, the receipts of its done effects, its last decision, the attempts it spent, when
it entered the state it waits in) and what its checks share: the run as it stood at an event
(:meth:`Walk.view`, what the engine's :func:`~ratchet_runner.engine.activation.activation`
reads), the row, state or field of the new version a finding points at, the expressions that
read a sealed value (:meth:`Walk.sealed_read`), and this version as a recorded decision's spec
and policy versions stamp it (:meth:`Walk.stamped`). The checks are :mod:`.moves`' and
:mod:`.effect_steps`'; :mod:`.replay` walks.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from itertools import takewhile
from typing import Any, NoReturn

from ..engine.machine import machine_for
from ..errors import Diagnostic, RatchetError
from ..spec.expressions import compile_expression
from ..spec.loader import pointer_join
from ..spec.model import Compensation, Effect, Row, Spec, State
from ..store.context import RunContext
from ..store.records import ApprovalRecord, EventRecord, RunRecord
from ..words import ENDED
from .history import History, is_sealed
from .results import Divergence

#: The kinds of the states a run waits in (timers are armed there).
WAITING = ("pause", "wait")


class Diverged(Exception):
    """The first step the history would not take the same way: it ends the walk."""

    def __init__(self, divergence: Divergence) -> None:
        super().__init__(divergence.where.format())
        self.divergence = divergence


def text(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key)
    return value if isinstance(value, str) else ""


@dataclass
class Moment:
    """When and how the run entered the state it waits in: what its timers are armed from."""

    at: float
    view: RunRecord


class Walk:
    """One history walked under one spec version: what the run knew at the event being
    taken, and what the checks share."""

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
        self.entered: Moment | None = None
        self.failed_step = False
        self.holding = False
        self.checked: set[int] = set()
        self.position = 0
        self.event: EventRecord | None = None
        self.decisions = iter(history.approvals)
        self.notes: list[str] = []

    def diverge(self, code: str, pointer: str, message: str, *, key: bool = False) -> NoReturn:
        doc = self.spec.document
        if doc is None:
            where = Diagnostic("<spec>", 1, 1, code, message, pointer)
        else:
            where = doc.diagnostic(pointer, code, message, key=key)
        assert self.event is not None
        raise Diverged(Divergence(self.position, self.event.kind, where))

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
        if not same and self.history.run.status not in ENDED:  # a run that could be moved
            self.note(
                f"decisions were given under spec version {stamp.spec_version} (policy "
                f"{stamp.policy_version}); this is version {self.spec.spec_version} (policy "
                f"{self.spec.policy_version}): a run moved to it would be asked again, as "
                "digests bind the versions; replay compares what they bind"
            )
        return replace(
            self.spec, spec_version=stamp.spec_version, policy_version=stamp.policy_version
        )

    def commit_of(self, ahead: bool = True) -> Iterator[EventRecord]:
        """The other events of the commit the event being taken was written by: those after it
        (``ahead``), or those before it, nearest first."""
        assert self.event is not None
        version, events = self.event.version, self.history.events
        if ahead:
            others: Iterable[EventRecord] = events[self.position :]
        else:
            others = reversed(events[: self.position - 1])
        return takewhile(lambda e: e.version == version, others)

    def same_commit(self, kind: str) -> bool:
        return any(e.kind == kind for e in self.commit_of())

    def located(self, pointer: str) -> str:
        doc = self.spec.document
        if doc is None:
            return "<spec>"
        line, column = doc.locate(pointer)
        return f"{doc.file}:{line}:{column}"
