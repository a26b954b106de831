"""Plain-language lines for a run's history (what ``ratchet trace`` prints)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ..engine.resolution import describe as binding_text
from ..settings import printable
from ..store.records import EventRecord, RunRecord


def _op(data: dict[str, Any]) -> str:
    operation_id = str(data.get("operation_id", ""))
    return f"op {operation_id[:12]}" if operation_id else ""


def _receipt(data: dict[str, Any]) -> str:
    receipt = data.get("receipt") or {}
    return ", ".join(f"{k}={v}" for k, v in receipt.items())


_TITLES = {
    "compensation_registered": "undo registered",
    "no_compensation": "no undo",
    "compensation_skipped": "undo skipped",
    "compensation_incomplete": "cannot undo all",
    "retry_scheduled": "retry scheduled",
    "decision_needed": "decision needed",
    "reconcile_found": "reconcile found",
    "reconcile_not_found": "reconcile: none",
    "reconcile_failed": "reconcile failed",
    "reconcile_impossible": "no reconcile",
    "approval_expired": "approval expired",
    "decision_refused": "decision refused",
    "reconcile_unsettled": "not found yet",
    "settle_scheduled": "look again at",
    "not_sent": "not sent",
    "duplicate_detected": "DUPLICATE",
    "verified": "verified",
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
    texts = {
        "created": lambda: (
            f"started in {d.get('state')} (business key {printable(str(d.get('business_key')))})"
            + (f" under {binding_text(d['binding'])}" if isinstance(d.get("binding"), dict) else "")
        ),
        "approved": lambda: (
            f"by {d.get('actor')} ({d.get('role')}): {d.get('action')}"
            f" · digest {str(d.get('digest'))[:12]}"
        ),
        "rejected": lambda: f"by {d.get('actor')}: {d.get('action')} · {d.get('reason') or ''}",
        "moved": lambda: (
            f"{d.get('from')} --{d.get('event')}--> {d.get('to')}"
            + (
                f" ({d.get('from')} has no row for {d.get('instead_of')}: its "
                f"{d.get('event')} row was followed)"
                if d.get("instead_of")
                else ""
            )
        ),
        "queued": lambda: f"for a person in {d.get('queue')}: {d.get('operator_action')}",
        "pending": lambda: (
            f"write-ahead record: {d.get('action')} · {_op(d)}"
            + (" · compensation" if d.get("role") == "compensation" else "")
            + (" · undoes an extra change" if d.get("role") == "undo_extra" else "")
            + (" · NAIVE strategy" if d.get("strategy") == "naive" else "")
        ),
        "call": lambda: (
            f"attempt {d.get('attempt')} · {_op(d)}"
            + (" · the same attempt again: it was not sent" if d.get("again") else "")
        ),
        "timeout": lambda: f"{d.get('reason')} · outcome unknown",
        "unavailable": lambda: f"{d.get('reason')} · nothing was done",
        "backoff": lambda: f"wait {d.get('seconds')} s before attempt {d.get('next_attempt')}",
        "resumed": lambda: (
            f"{_op(d)} has {d.get('attempts')} attempt(s) on record: reconcile first"
        ),
        "reconcile_found": lambda: f"{_op(d)} is on the provider's record: no new call",
        "reconcile_not_found": lambda: (
            f"{_op(d)} is not on the provider's record: retry with the same ID"
        ),
        "reconcile_failed": lambda: f"{d.get('reason')}",
        "reconcile_unsettled": lambda: (
            f"{_op(d)} is not on the provider's record yet: no call before "
            f"{when(d.get('conclusive_at'))}, then it is looked up again"
            + (f" ({_why(d.get('reason'))})" if d.get("reason") else "")
        ),
        "settle_scheduled": lambda: f"{when(d.get('wake_at'))}, with no call before · {_op(d)}",
        "not_sent": lambda: f"{d.get('reason')} · {_op(d)}",
        "duplicate_detected": lambda: (
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
        "verified": lambda: f"{_op(d)}: {d.get('checks')} later lookup(s) found no second change",
        "reconcile_impossible": lambda: (
            f"{_op(d)}: the effect has no reconcile lookup; calling again blind (retry and hope)"
        ),
        "done": lambda: f"{_receipt(d)} (via {d.get('via')}) · {_op(d)}",
        "skipped": lambda: f"{_op(d)} is already done: no call",
        "refused": lambda: f"{d.get('reason')} · nothing changed",
        "exhausted": lambda: f"{d.get('reason')} · budget spent",
        "unknown": lambda: f"outcome unknown: {d.get('reason')}",
        "stuck": lambda: f"no row for {d.get('event')} in {d.get('state')}: {d.get('reason')}",
        "step_failed": lambda: (
            f"the step in {d.get('state')} failed ({d.get('code')}): {d.get('error')}"
            " · waits for a person"
        ),
        "leased": lambda: f"by {d.get('owner')}",
        "rescued": lambda: f"by {d.get('owner')}, from {d.get('previous')} (its lease ran out)",
        "compensation_registered": lambda: (
            f"{d.get('effect')} will undo op {str(d.get('compensates'))[:12]} · {_op(d)}"
        ),
        "no_compensation": lambda: (
            f"{d.get('effect')} has no undo: {d.get('undo')}"
            + (f" ({d.get('reason')})" if d.get("reason") else "")
        ),
        "compensation_skipped": lambda: f"{d.get('effect')} is not undone: {d.get('reason')}",
        "compensated": lambda: f"{d.get('undone')} compensation(s) done, newest first",
        "compensation_incomplete": lambda: (
            f"{d.get('undone')} compensation(s) done, newest first; {d.get('reason')}: "
            "left to a person"
        ),
        "paused": lambda: (
            f"{d.get('reason')}"
            + (f" · proposes {d.get('proposal')}" if d.get("proposal") else "")
            + (f" · until {when(d.get('expires_at'))}" if d.get("expires_at") else "")
        ),
        "timer": lambda: f"{d.get('event')} fired (due {when(d.get('due_at'))})",
        "retry_scheduled": lambda: (
            f"next attempt at {when(d.get('wake_at'))}"
            + (" (the last was never sent: not counted)" if d.get("unsent") else "")
            + f" · {_op(d)}"
        ),
        "signal": lambda: f"{d.get('event')} (signal {d.get('signal_id')})",
        "decision_needed": lambda: f"{d.get('reason')}: back to {d.get('to')} for a new decision",
        "approval_expired": lambda: f"{d.get('reason')}" + (f" · {_op(d)}" if _op(d) else ""),
        "decision_refused": lambda: (
            f"{d.get('decision')} by {d.get('actor')}"
            + (f" ({d.get('role')})" if d.get("role") else "")
            + f" came too late: {d.get('reason')}"
        ),
        "operator": lambda: (
            f"{d.get('action')} by {d.get('actor')} ({d.get('role')})"
            + (f": {d.get('note')}" if d.get("note") else "")
        ),
    }
    render = texts.get(kind)
    text = render() if render else ", ".join(f"{k}={v}" for k, v in d.items() if k != "real_at")
    if kind in ("approved", "rejected", "operator", "signal") and d.get("via"):  # from where
        text += f" · via {d.get('via')} from {printable(str(d.get('from')))}"
    if kind in ("created", "approved", "rejected") and d.get("ratchet_version"):  # which Ratchet
        text += f" · ratchet {printable(str(d['ratchet_version']))}"
    if "real_at" in d:  # recorded under RATCHET_NOW: show the clock it claimed and the real time
        text += f" · [clock set to {when(event.at)}; really {when(d.get('real_at'))}]"
    return text


def title(event: EventRecord) -> str:
    if event.kind == "timeout":  # every ambiguous outcome: say which it was
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
