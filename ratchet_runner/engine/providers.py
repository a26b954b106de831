"""What the runner asks of a provider beyond one call: its semantics, lookups, and when a lookup
that finds nothing may be believed.

A provider that deduplicates by idempotency key makes one change per operation ID whatever the
timing, so a lookup that finds nothing there makes a retry safe at once. One that does not
(:class:`~ratchet_runner.adapters.base.Semantics` with ``dedupe = False``) may still commit a
request up to ``commits_within`` seconds after it was sent, and its lookup may lag ``settle``
seconds behind: a lookup that finds nothing is conclusive only once the larger of the two
(:attr:`~ratchet_runner.adapters.base.Semantics.window`) has passed since the latest request under
that operation ID could have been sent. That moment is kept with the run (:func:`record_sent_by`),
written in the same commit as the attempt, so every process judges by it: the one that sent the
request, a rescuer after a crash, an operator's ``ratchet ops retry`` minutes later.

When may the latest request have been sent? The runner fixes each call's deadline before it
commits the attempt (:meth:`~ratchet_runner.engine.runner.Runner.deadline_for`), keeps its lease
on the run past it, and sends nothing once it has passed (nor does an adapter: ``Call.deadline``):
so no request under that attempt leaves after the attempt's time plus the call's time. A process
that saw its call end knows it was sent before that, and may judge by the earlier moment.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from ..adapters.base import Adapter, LookupFailed, LookupResult, Semantics
from ..store.records import Change, OperationRecord, RunRecord

#: The seconds a call may take when its effect declares no ``timeout`` and no lease bounds it:
#: the HTTP adapter's own default deadline.
DEFAULT_CALL_SECONDS = 30.0

_TAKES_ARGS: dict[type, bool] = {}


def _takes_args(adapter: Adapter) -> bool:
    """Whether ``adapter.lookup`` accepts ``args`` (a keyword, or ``**kwargs``)."""
    kind = type(adapter)
    known = _TAKES_ARGS.get(kind)
    if known is None:
        try:
            parameters = list(inspect.signature(adapter.lookup).parameters.values())
        except (TypeError, ValueError):
            parameters = []
        known = any(p.name == "args" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
        _TAKES_ARGS[kind] = known
    return known


def ask(
    adapter: Adapter,
    lookup: str,
    operation_id: str,
    effect: str,
    args: Mapping[str, Any] | None = None,
) -> LookupResult:
    """Look ``operation_id`` up through ``lookup``, passing the operation's ``args`` to an
    adapter that takes them; an adapter that raises instead of answering has failed to look."""
    try:
        if args is not None and _takes_args(adapter):
            return adapter.lookup(lookup, operation_id, effect, args=dict(args))  # type: ignore[call-arg]
        return adapter.lookup(lookup, operation_id, effect)
    except Exception as exc:
        return LookupFailed(f"lookup raised {type(exc).__name__}: {exc}")


def declared_by(adapter: Adapter, operation: str, lookup: str | None) -> Semantics | None:
    """What ``adapter`` itself says of the provider behind ``operation`` (and ``lookup``), if it
    says anything (an optional ``semantics(operation, lookup)`` method)."""
    says = getattr(adapter, "semantics", None)
    if not callable(says):
        return None
    try:
        found = says(operation, lookup)
    except Exception:  # a broken declaration says nothing: the binding check will tell
        return None
    return found if isinstance(found, Semantics) else None


def record_sent_by(change: Change, run: RunRecord, operation_id: str, at: float) -> None:
    """Keep, in ``change`` (the commit of an attempt), the latest moment the attempt's request may
    be sent: ``at`` (epoch seconds, by the runner's clock)."""
    context = change.context if change.context is not None else run.context
    sent = dict(context.get("sent_by", {}))
    sent[operation_id] = round(at, 6)
    change.context = {**context, "sent_by": sent}


def sent_by(run: RunRecord, op: OperationRecord, call_seconds: float) -> float:
    """The latest moment a request under ``op`` may have been sent, as the run keeps it; for an
    operation recorded before the run kept it, its last change plus the call's time."""
    kept = run.context.get("sent_by", {}).get(op.operation_id)
    return float(kept) if isinstance(kept, int | float) else op.updated_at + call_seconds


def conclusive_from(
    run: RunRecord,
    op: OperationRecord,
    semantics: Semantics | None,
    call_seconds: float,
    ended: float | None = None,
) -> float | None:
    """From when a lookup of ``op`` that finds nothing is conclusive (epoch seconds), or None
    when it is at once (a provider that deduplicates, or one with no window). ``ended``: when
    this process saw its own call under ``op`` end (its request left before then)."""
    window = 0.0 if semantics is None else semantics.window
    if window <= 0:
        return None
    latest = sent_by(run, op, call_seconds)
    if ended is not None:
        latest = min(latest, ended)
    return latest + window


def why_unsettled(semantics: Semantics | None) -> str:
    """Why a lookup that found nothing is not believed yet, for the history and the operator."""
    if semantics is None or semantics.dedupe is not False:
        settle = 0.0 if semantics is None else semantics.settle
        return f"the provider's lookup may lag {settle:g} s behind a change"
    parts = [
        "the provider makes a second change for a second request under one key (dedupe = false)",
        f"and may commit a request up to {semantics.commits_within or 0:g} s after it was sent",
    ]
    if semantics.settle:
        parts.append(f"(its lookup may lag {semantics.settle:g} s behind)")
    return " ".join(parts)
