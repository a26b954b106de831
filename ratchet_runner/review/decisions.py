"""What ``ratchet queue`` shows of a decision waiting, beside the runs waiting for a person
(:func:`~ratchet_runner.review.views.queue_lines`): the exact action and digest, when the pause
expires and how long an approval given now stays valid (as times and as "in 1h 12m"), the
verdict of approving in each role, and the evidence the approval declares. Plain functions of
the queue's JSON (:func:`ratchet_runner.engine.operator_queue.decision`); the console shows the
same items, and its times through :func:`~ratchet_runner.review.views.relative` as this does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..clock import format_time
from ..settings import printable
from ..spec.model import canonical_json
from .views import age, relative


def expiry_text(at: float | None, now: float) -> str:
    """``2030-01-04 00:00:00Z (in 71h 59m)``, or ``never`` when there is no such time."""
    if at is None:
        return "never"
    return f"{format_time(at)} ({relative(at - now)})"


def _value(value: Any) -> str:
    return canonical_json(value) if isinstance(value, dict | list) else str(value)


def operation_text(op: Mapping[str, Any]) -> str:
    """``request_refund done · order=LK-512877 amount=45.95 · receipt refund_id=R-1``."""
    args = " ".join(f"{k}={_value(v)}" for k, v in (op.get("args") or {}).items())
    receipt = op.get("receipt")
    said = (
        " · receipt " + " ".join(f"{k}={_value(v)}" for k, v in receipt.items())
        if isinstance(receipt, dict) and receipt
        else ""
    )
    return f"{op['effect']} {op['status']} · {printable(args)}{printable(said)}"


def related_lines(declared: Mapping[str, Any]) -> list[str]:
    """The related runs an approval declares: how they are related, then each, newest first,
    with the operations of the declared effects it made."""
    found = declared["runs"]
    value = printable(_value(declared["value"])) if declared["value"] is not None else "none"
    count = f"{len(found)}{' or more' if declared['more'] else ''} other run(s)" if found else ""
    lines = [
        f"  related: {count or 'no other run'} with {declared['by']} {value}"
        + (" (newest first)" if len(found) > 1 else "")
    ]
    for other in found:
        lines.append(
            f"    {other['run']} · {printable(other['business_key'])} · {other['state']} "
            f"({other['status']}) · started {format_time(other['created_at'])}"
        )
        if other.get("waiting_for"):
            lines.append(f"      waiting for a decision: {printable(other['waiting_for'])}")
        lines += [f"      {operation_text(op)}" for op in other["effects"]]
        if not other["effects"] and not other.get("waiting_for"):
            lines.append(f"      no {' or '.join(declared['effects'])}")
    if declared["more"]:
        lines.append(f"    (only the newest {declared['limit']} are shown)")
    return lines


def decision_lines(items: Iterable[Mapping[str, Any]], now: float) -> list[str]:
    """``ratchet queue``: per decision waiting, what is asked, when it expires, each role's
    verdict and the declared evidence."""
    lines = []
    for item in items:
        run = item["run"]
        lines += [
            f"{run} · {item['workflow']} {printable(item['business_key'])} · "
            f"{item['state']} · waiting {age(item['age_seconds'])}",
            f"  decide:   {item['approval']}: {printable(item['action'])}",
            f"  digest:   {item['digest']}",
            f"  pause:    expires {expiry_text(item['pause_expires_at'], now)}",
            f"  approval: given now, expires {expiry_text(item['approval_expires_at'], now)}",
        ]
        width = max((len(v["role"]) for v in item["verdicts"]), default=0)
        for verdict in item["verdicts"]:
            label = f"  {verdict['role'] + ':':<{width + 1}}"
            if verdict["may_approve"]:
                lines.append(
                    f"{label} may approve: ratchet approve {run} --as NAME --role {verdict['role']}"
                )
            else:
                lines.append(f"{label} may not approve: {verdict['reason']}")
        declared = (item.get("evidence") or {}).get("related_runs")
        if declared is not None:
            lines += related_lines(declared)
    return lines
