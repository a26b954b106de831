"""An in-process adapter that changes nothing and answers at once (benchmarks, dry runs)."""

from __future__ import annotations

from .base import Call, Done, LookupResult, NotFound, Outcome, Semantics

#: A no-op provider makes no change, so a second request makes none either.
NOOP_SEMANTICS = Semantics(dedupe=True)


class NoopAdapter:
    """Every call is done, with the operation ID as its receipt; nothing is ever on record."""

    def __init__(self) -> None:
        self.calls = 0

    def call(self, request: Call) -> Outcome:
        self.calls += 1
        return Done({"id": request.operation_id})

    def lookup(self, operation: str, operation_id: str, effect: str = "") -> LookupResult:
        return NotFound()

    def semantics(self, operation: str, lookup: str | None = None) -> Semantics:
        return NOOP_SEMANTICS
