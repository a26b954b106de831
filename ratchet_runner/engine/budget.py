"""The retry budget: how many attempts an effect may make, what the run may spend, and the waits.

An effect has ``retry.max_attempts`` attempts, plus any an operator granted to its operation; a
run has its spec's ``budget`` (attempts and cost across all its effects). Attempts are counted in
the same change that records the attempt, so they persist: a resume never refills the budget.
Between attempts the runner waits a capped exponential back-off with full jitter, and at least
what the provider asked for in its ``Retry-After`` (up to the policy's ``max_backoff``).
"""

from __future__ import annotations

import random

from ..spec.model import Effect, Spec
from ..store.context import Budget, RunContext
from ..store.records import Change, OperationRecord, RunRecord


def max_attempts(run: RunRecord, effect: Effect, op: OperationRecord) -> int:
    """The effect's attempts, plus any an operator granted to this operation."""
    granted = int(run.context.get("grants", {}).get(op.operation_id, 0))
    return effect.retry.max_attempts + granted


def run_budget_spent(run: RunRecord, spec: Spec, effect: Effect) -> bool:
    """Whether one more call of ``effect`` would exceed the run's attempts or cost budget."""
    used = run.context.get("budget_used", {})
    budget = spec.budget
    if budget.max_attempts is not None and used.get("attempts", 0) >= budget.max_attempts:
        return True
    cost = effect.cost or 0.0
    return budget.max_cost is not None and used.get("cost", 0.0) + cost > budget.max_cost


def count_attempt(run: RunRecord, effect: Effect, change: Change) -> None:
    """Count one call against the run's budget, in the change that records the attempt."""
    base = change.context if change.context is not None else run.context
    used: Budget = {**base.get("budget_used", {})}
    used["attempts"] = used.get("attempts", 0) + 1
    used["cost"] = round(used.get("cost", 0.0) + (effect.cost or 0.0), 6)
    change.context = {**base, "budget_used": used}


def uncount_attempt(context: RunContext, effect: Effect) -> RunContext:
    """``context`` with one call of ``effect`` taken back off the run's budget: an attempt
    counted when it was committed, whose request was never sent."""
    used: Budget = {**context.get("budget_used", {})}
    used["attempts"] = max(0, used.get("attempts", 0) - 1)
    used["cost"] = max(0.0, round(used.get("cost", 0.0) - (effect.cost or 0.0), 6))
    return {**context, "budget_used": used}


def backoff(
    effect: Effect, attempt: int, rng: random.Random, retry_after: float | None = None
) -> float:
    """Capped exponential backoff with full jitter before attempt ``attempt + 1``; at least
    what the provider asked for (``retry_after``, its ``Retry-After``), within the policy's
    ``max_backoff``."""
    retry = effect.retry
    cap = min(retry.max_backoff, retry.initial_backoff * retry.multiplier ** (attempt - 1))
    delay = cap if retry.jitter == "none" else rng.uniform(0, cap)
    if retry_after is not None:
        delay = max(delay, min(retry_after, retry.max_backoff))
    return delay
