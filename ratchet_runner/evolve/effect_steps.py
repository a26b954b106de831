"""The effects of a history checked under a spec version: each write-ahead's state, arguments
and operation ID (:mod:`~ratchet_runner.engine.identity`), the approval that lets it run
(:func:`~ratchet_runner.engine.approvals.valid_approval`, each decision expiring by this
version's ``expires_after``), the undo registered with it
(:func:`~ratchet_runner.engine.write_ahead.register_compensation`, into a scratch change), each
undo's arguments and each undo skipped; and what a done effect leaves for later steps to read
(its receipt).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..engine.activation import activation
from ..engine.approvals import valid_approval
from ..engine.identity import evaluate_args, first_difference, operation_id
from ..engine.write_ahead import register_compensation
from ..errors import ApprovalExpired, ApprovalStale, RatchetError
from ..spec.loader import pointer_join
from ..spec.model import Effect, Row
from ..store.records import Change, EventRecord, RunRecord
from ..words import EventKind
from .history import sealed_path
from .walk import Walk, text


class EffectChecks(Walk):
    """The checks of a history's effects, approvals used and undos."""

    def on_call(self, event: EventRecord, data: Mapping[str, Any]) -> None:
        self.infer(text(data, "operation_id"))
        if not data.get("again"):
            self.attempts += 1

    def on_resumed(self, event: EventRecord, data: Mapping[str, Any]) -> None:
        self.infer(text(data, "operation_id"))

    def on_retry_scheduled(self, event: EventRecord, data: Mapping[str, Any]) -> None:
        if data.get("unsent"):
            self.attempts = max(0, self.attempts - 1)

    def on_done(self, event: EventRecord, data: Mapping[str, Any]) -> None:
        if text(data, "role") != "forward":
            return
        op = self.history.operation(text(data, "operation_id"))
        receipt = op.receipt if op is not None and op.receipt is not None else data.get("receipt")
        self.receipts[text(data, "effect")] = receipt if isinstance(receipt, dict) else {}

    def on_approval_expired(self, event: EventRecord, data: Mapping[str, Any]) -> None:
        effect = self.spec.effects.get(text(data, "effect"))
        if effect is None or effect.approval is None:
            return
        op = self.history.operation(text(data, "operation_id"))
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
        stamped = self.stamped(records[-1] if records else None)
        try:
            if args is None:
                args = evaluate_args(effect, activation(view, self.spec))
            valid_approval(records, stamped, view.id, effect, args, event.at)
        except RatchetError as refused:  # none covers it, or its arguments cannot be made
            return refused
        return None

    def on_pending(self, event: EventRecord, data: Mapping[str, Any]) -> None:
        recorded = text(data, "operation_id")
        self.infer(recorded)
        if text(data, "role") == "forward":
            self.forward_pending(event, data, recorded)
        elif text(data, "role") == "compensation":
            self.undo_pending(event, data, recorded)
        else:
            self.note("the undo of a change made twice is not replayed")

    def forward_pending(self, event: EventRecord, data: Mapping[str, Any], recorded: str) -> None:
        name = text(data, "effect")
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
        if text(data, "strategy") == "naive":
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
        return any(e.kind == EventKind.MOVED for e in self.commit_of(ahead=False))

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
        wanted = [undo_of(kind, data) for kind, data in scratch.events]
        kinds = (EventKind.COMPENSATION_REGISTERED, EventKind.NO_COMPENSATION)
        made = [
            undo_of(e.kind, e.data)
            for e in self.commit_of()
            if e.kind in kinds
            and recorded in (e.data.get("compensates"), e.data.get("operation_id"))
        ]
        if made != wanted:
            self.diverge(
                "V307",
                self.field_pointer(row.pointer, "compensation"),
                f"{effect.name} registers {said_undos(wanted)} in this version; the history "
                f"registered {said_undos(made)}",
            )

    def undo_pending(self, event: EventRecord, data: Mapping[str, Any], recorded: str) -> None:
        name = text(data, "effect")
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
        effect = text(data, "effect")
        row, declared = self.declared_undo(effect)
        kind = "missing" if declared is None else declared.kind
        if kind != text(data, "undo"):
            self.diverge(
                "V307",
                self.field_pointer(row.pointer, "compensation") if row else "/transitions",
                f"{effect} has {kind if kind != 'missing' else 'no undo declared'} in this "
                f"version; the history skipped its undo as {text(data, 'undo')}",
            )


def undo_of(kind: str, data: Mapping[str, Any]) -> tuple[str, str]:
    if kind == EventKind.COMPENSATION_REGISTERED:
        return ("undo", text(data, "effect"))
    return ("none", text(data, "undo"))


def said_undos(undos: list[tuple[str, str]]) -> str:
    if not undos:
        return "no undo"
    return ", ".join(f"the undo {name}" if kind == "undo" else f"'{name}'" for kind, name in undos)
