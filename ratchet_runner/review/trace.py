"""Plain-language lines for a run's history (what ``ratchet trace`` prints)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from ..engine.resolution import describe as binding_text
from ..settings import printable
from ..store.records import EventRecord, RunRecord
from ..words import EventKind


def _op(data: dict[str, Any]) -> str:
    operation_id = str(data.get("operation_id", ""))
    return f"op {operation_id[:12]}" if operation_id else ""


def _receipt(data: dict[str, Any]) -> str:
    receipt = data.get("receipt") or {}
    return ", ".join(f"{k}={v}" for k, v in receipt.items())


#: Keyed by word: a history holds the kinds of every Ratchet that wrote it.
_TITLES: dict[str, str] = {
    EventKind.COMPENSATION_REGISTERED: "undo registered",
    EventKind.NO_COMPENSATION: "no undo",
    EventKind.COMPENSATION_SKIPPED: "undo skipped",
    EventKind.COMPENSATION_INCOMPLETE: "cannot undo all",
    EventKind.RETRY_SCHEDULED: "retry scheduled",
    EventKind.DECISION_NEEDED: "decision needed",
    EventKind.RESTORE_LOOKUP: "restore lookup",
    EventKind.RECONCILE_FOUND: "reconcile found",
    EventKind.RECONCILE_NOT_FOUND: "reconcile: none",
    EventKind.RECONCILE_FAILED: "reconcile failed",
    EventKind.RECONCILE_IMPOSSIBLE: "no reconcile",
    EventKind.APPROVAL_EXPIRED: "approval expired",
    EventKind.DECISION_REFUSED: "decision refused",
    EventKind.RECONCILE_UNSETTLED: "not found yet",
    EventKind.SETTLE_SCHEDULED: "look again at",
    EventKind.NOT_SENT: "not sent",
    EventKind.DUPLICATE_DETECTED: "DUPLICATE",
    EventKind.VERIFIED: "verified",
}


def _why(reason: Any) -> str:
    """The cause in a reason that says what follows too ("not found yet, and X: ...")."""
    text = str(reason)
    head, _, rest = text.partition("not found yet, and ")
    return (rest or head).split(": looked up again")[0]


def when(epoch: Any) -> str:
    if not isinstance(epoch, int | float):
        return "?"
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def describe(event: EventRecord) -> str:
    """What the event says, in one line (without its version and kind)."""
    d = event.data
    kind = event.kind
    texts: dict[str, Callable[[], str]] = {
        EventKind.CREATED: lambda: (
            f"started in {d.get('state')} (business key {printable(str(d.get('business_key')))})"
            + (f" under {binding_text(d['binding'])}" if isinstance(d.get("binding"), dict) else "")
        ),
        EventKind.APPROVED: lambda: (
            f"by {d.get('actor')} ({d.get('role')}): {d.get('action')}"
            f" · digest {str(d.get('digest'))[:12]}"
        ),
        EventKind.REJECTED: lambda: (
            f"by {d.get('actor')}: {d.get('action')} · {d.get('reason') or ''}"
        ),
        EventKind.MOVED: lambda: (
            f"{d.get('from')} --{d.get('event')}--> {d.get('to')}"
            + (
                f" ({d.get('from')} has no row for {d.get('instead_of')}: its "
                f"{d.get('event')} row was followed)"
                if d.get("instead_of")
                else ""
            )
        ),
        EventKind.QUEUED: lambda: f"for a person in {d.get('queue')}: {d.get('operator_action')}",
        EventKind.PENDING: lambda: (
            f"write-ahead record: {d.get('action')} · {_op(d)}"
            + (" · compensation" if d.get("role") == "compensation" else "")
            + (" · undoes an extra change" if d.get("role") == "undo_extra" else "")
            + (" · NAIVE strategy" if d.get("strategy") == "naive" else "")
        ),
        EventKind.CALL: lambda: (
            f"attempt {d.get('attempt')} · {_op(d)}"
            + (" · the same attempt again: it was not sent" if d.get("again") else "")
        ),
        EventKind.TIMEOUT: lambda: f"{d.get('reason')} · outcome unknown",
        EventKind.UNAVAILABLE: lambda: f"{d.get('reason')} · nothing was done",
        EventKind.BACKOFF: lambda: (
            f"wait {d.get('seconds')} s before attempt {d.get('next_attempt')}"
        ),
        EventKind.RESUMED: lambda: (
            f"{_op(d)} has {d.get('attempts')} attempt(s) on record: reconcile first"
        ),
        EventKind.RESTORE_LOOKUP: lambda: (
            f"the store was put back from a copy at {when(d.get('restored_at'))}"
            + (f" (taken at {when(d.get('backup_taken_at'))})" if d.get("backup_taken_at") else "")
            + f", incarnation {d.get('incarnation')}: {_op(d)} is looked up before its first call"
        ),
        EventKind.RECONCILE_FOUND: lambda: f"{_op(d)} is on the provider's record: no new call",
        EventKind.RECONCILE_NOT_FOUND: lambda: (
            f"{_op(d)} is not on the provider's record: retry with the same ID"
        ),
        EventKind.RECONCILE_FAILED: lambda: f"{d.get('reason')}",
        EventKind.RECONCILE_UNSETTLED: lambda: (
            f"{_op(d)} is not on the provider's record yet: no call before "
            f"{when(d.get('conclusive_at'))}, then it is looked up again"
            + (f" ({_why(d.get('reason'))})" if d.get("reason") else "")
        ),
        EventKind.SETTLE_SCHEDULED: lambda: (
            f"{when(d.get('wake_at'))}, with no call before · {_op(d)}"
        ),
        EventKind.NOT_SENT: lambda: f"{d.get('reason')} · {_op(d)}",
        EventKind.DUPLICATE_DETECTED: lambda: (
            (
                f"{d.get('effect')} made under {_op(d)} after the run gave it up (found by "
                f"{d.get('via')}): "
                if d.get("given_up")
                else f"{d.get('effect')} made {d.get('changes')} times under {_op(d)} (found by "
                f"{d.get('via')}): kept {_receipt({'receipt': d.get('kept')})}; extra "
            )
            + "; ".join(_receipt({"receipt": r}) for r in d.get("extra") or [])
            + (
                f" · {d.get('undo')} undoes each extra ({len(d.get('undo_operations') or [])})"
                if d.get("undo")
                else f" · not undone: {d.get('cannot_undo')}"
            )
        ),
        EventKind.VERIFIED: lambda: (
            f"{_op(d)}: {d.get('checks')} later lookup(s) found no second change"
        ),
        EventKind.RECONCILE_IMPOSSIBLE: lambda: (
            f"{_op(d)}: the effect has no reconcile lookup; calling again blind (retry and hope)"
        ),
        EventKind.DONE: lambda: f"{_receipt(d)} (via {d.get('via')}) · {_op(d)}",
        EventKind.SKIPPED: lambda: f"{_op(d)} is already done: no call",
        EventKind.MIGRATED: lambda: (
            f"by {d.get('by')} ({d.get('migration')}): version {d.get('old')} → {d.get('new')}"
            f", {d.get('from_state')} → {d.get('to_state')} ({d.get('verdict')})"
        ),
        EventKind.MIGRATION_ROLLED_BACK: lambda: (
            f"by {d.get('by')} ({d.get('migration')}): back to version {d.get('old')}"
            f", {d.get('from_state')} → {d.get('to_state')}"
        ),
        EventKind.PRUNED: lambda: (
            f"finished, and pruned to its tombstone: {d.get('events')} event(s) of its history "
            "removed; its done operations and receipts kept, its input as a digest"
            + (f"; archived in {d.get('archive')}" if d.get("archive") else "")
        ),
        EventKind.REFUSED: lambda: f"{d.get('reason')} · nothing changed",
        EventKind.EXHAUSTED: lambda: f"{d.get('reason')} · budget spent",
        EventKind.UNKNOWN: lambda: f"outcome unknown: {d.get('reason')}",
        EventKind.STUCK: lambda: (
            f"no row for {d.get('event')} in {d.get('state')}: {d.get('reason')}"
        ),
        EventKind.STEP_FAILED: lambda: (
            f"the step in {d.get('state')} failed ({d.get('code')}): {d.get('error')}"
            " · waits for a person"
        ),
        EventKind.LEASED: lambda: f"by {d.get('owner')}",
        EventKind.RESCUED: lambda: (
            f"by {d.get('owner')}, from {d.get('previous')} (its lease ran out)"
        ),
        EventKind.COMPENSATION_REGISTERED: lambda: (
            f"{d.get('effect')} will undo op {str(d.get('compensates'))[:12]} · {_op(d)}"
        ),
        EventKind.NO_COMPENSATION: lambda: (
            f"{d.get('effect')} has no undo: {d.get('undo')}"
            + (f" ({d.get('reason')})" if d.get("reason") else "")
        ),
        EventKind.COMPENSATION_SKIPPED: lambda: (
            f"{d.get('effect')} is not undone: {d.get('reason')}"
        ),
        EventKind.COMPENSATED: lambda: f"{d.get('undone')} compensation(s) done, newest first",
        EventKind.COMPENSATION_INCOMPLETE: lambda: (
            f"{d.get('undone')} compensation(s) done, newest first; {d.get('reason')}: "
            "left to a person"
        ),
        EventKind.PAUSED: lambda: (
            f"{d.get('reason')}"
            + (f" · proposes {d.get('proposal')}" if d.get("proposal") else "")
            + (f" · until {when(d.get('expires_at'))}" if d.get("expires_at") else "")
        ),
        EventKind.TIMER: lambda: f"{d.get('event')} fired (due {when(d.get('due_at'))})",
        EventKind.RETRY_SCHEDULED: lambda: (
            f"next attempt at {when(d.get('wake_at'))}"
            + (" (the last was never sent: not counted)" if d.get("unsent") else "")
            + f" · {_op(d)}"
        ),
        EventKind.SIGNAL: lambda: f"{d.get('event')} (signal {d.get('signal_id')})",
        EventKind.DECISION_NEEDED: lambda: (
            f"{d.get('reason')}: back to {d.get('to')} for a new decision"
        ),
        EventKind.APPROVAL_EXPIRED: lambda: (
            f"{d.get('reason')}" + (f" · {_op(d)}" if _op(d) else "")
        ),
        EventKind.DECISION_REFUSED: lambda: (
            f"{d.get('decision')} by {d.get('actor')}"
            + (f" ({d.get('role')})" if d.get("role") else "")
            + f" came too late: {d.get('reason')}"
        ),
        EventKind.OPERATOR: lambda: (
            f"{d.get('action')} by {d.get('actor')} ({d.get('role')})"
            + (f": {d.get('note')}" if d.get("note") else "")
        ),
    }
    render = texts.get(kind)
    text = render() if render else ", ".join(f"{k}={v}" for k, v in d.items() if k != "real_at")
    if kind in (
        EventKind.APPROVED,
        EventKind.REJECTED,
        EventKind.OPERATOR,
        EventKind.SIGNAL,
    ) and d.get("via"):  # from where
        text += f" · via {d.get('via')} from {printable(str(d.get('from')))}"
    if kind in (EventKind.CREATED, EventKind.APPROVED, EventKind.REJECTED) and d.get(
        "ratchet_version"
    ):  # which Ratchet
        text += f" · ratchet {printable(str(d['ratchet_version']))}"
    if "real_at" in d:  # recorded under RATCHET_NOW: show the clock it claimed and the real time
        text += f" · [clock set to {when(event.at)}; really {when(d.get('real_at'))}]"
    return text


def title(event: EventRecord) -> str:
    if event.kind == EventKind.TIMEOUT:  # every ambiguous outcome: say which it was
        return _unknown_outcome(str(event.data.get("reason", "")))
    return _TITLES.get(event.kind, event.kind)


def _unknown_outcome(reason: str) -> str:
    """What kind of unknown outcome ``reason`` describes: a reply that came but cannot be read,
    no reply in time, or a connection lost after the request may have been sent."""
    said = reason.lower()
    if "does not say whether" in said:
        return "unclear reply"
    if "larger than" in said:
        return "reply too large"
    if "malformed" in said or "no json" in said or "without the receipt" in said:
        return "malformed reply"
    if any(word in said for word in ("timeout", "timed out", "deadline", "no reply")):
        return "timeout"
    return "reply lost"


def lines(run: RunRecord, history: list[EventRecord]) -> list[str]:
    """A header line for the run, then one line per event."""
    head = (
        f"{run.id} · {run.workflow} {printable(run.business_key)} · {run.state} ({run.status}) · "
        f"version {run.version}"
    )
    return [head] + [f"  v{e.version:<3} {title(e):<23} {describe(e)}" for e in history]
