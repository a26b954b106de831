"""The adapter protocol: call an operation with an operation ID; look an operation ID up.

Outcomes are classified here, at the boundary, never later from prose::

    Outcome
    ├── Done(receipt)        the change happened; the receipt proves it
    ├── Transient(reason)    it did not happen (503, connection refused before sending): retry
    ├── Ambiguous(reason)    it may have happened (timeout, malformed reply): reconcile first
    ├── Refused(reason)      the world said no: never retried, nothing changed
    └── Escalate(reason)     only a person can go on (a binding that is wrong, a key reused
                             with other arguments): not retried; ``possibly_applied`` says
                             whether the change may exist all the same

    Lookup
    ├── Found(receipt)       the provider has a record of that operation ID
    ├── NotFound()           it has none: a retry with the same ID is safe
    └── LookupFailed(reason) the lookup itself failed: the outcome stays unknown
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class Done:
    receipt: dict[str, Any]
    kind: str = field(default="done", init=False)


@dataclass(frozen=True)
class Transient:
    """Nothing was done; try again later. ``retry_after``: the seconds the provider asked the
    caller to wait (its ``Retry-After``), which the runner's back-off honours within the
    effect's retry policy; None when it said nothing."""

    reason: str
    retry_after: float | None = None
    kind: str = field(default="transient", init=False)


@dataclass(frozen=True)
class Ambiguous:
    reason: str
    kind: str = field(default="ambiguous", init=False)


@dataclass(frozen=True)
class Refused:
    reason: str
    evidence: dict[str, Any] = field(default_factory=dict)
    kind: str = field(default="refused", init=False)


@dataclass(frozen=True)
class Escalate:
    """Neither a retry nor the workflow's ``refused`` row can take the effect on: a person must
    (the binding is wrong, the provider rejects the credentials, the key was used with other
    arguments). The runner records the operation ``unknown`` when ``possibly_applied`` (a change
    may exist under that operation ID, and a compensation looks it up first), leaves it
    ``pending`` otherwise, and puts the run in the operator queue with ``evidence``."""

    reason: str
    evidence: dict[str, Any] = field(default_factory=dict)
    possibly_applied: bool = True
    kind: str = field(default="escalate", init=False)


Outcome = Done | Transient | Ambiguous | Refused | Escalate


@dataclass(frozen=True)
class Found:
    receipt: dict[str, Any]
    kind: str = field(default="found", init=False)


@dataclass(frozen=True)
class NotFound:
    kind: str = field(default="not_found", init=False)


@dataclass(frozen=True)
class LookupFailed:
    reason: str
    kind: str = field(default="lookup_failed", init=False)


LookupResult = Found | NotFound | LookupFailed


@dataclass(frozen=True)
class Call:
    """One request: which operation, under which operation ID, with which arguments."""

    operation: str
    operation_id: str
    args: dict[str, Any]
    effect: str = ""
    timeout: float | None = None
    attempt: int = 1


@runtime_checkable
class Adapter(Protocol):
    """What the runner needs of a dependency. Implementations must send ``operation_id`` as the
    provider's idempotency key, and must classify every reply into an :data:`Outcome`."""

    def call(self, request: Call) -> Outcome:
        """Make the change named by ``request`` (at most once per operation ID)."""
        ...

    def lookup(self, operation: str, operation_id: str, effect: str = "") -> LookupResult:
        """Ask the provider, through its ``operation`` lookup, what it did with that ID."""
        ...


def receipt_of(reply: Any, field_name: str | None) -> Outcome:
    """Classify a raw reply: a mapping holding ``field_name`` is done; anything else is ambiguous
    (a malformed reply is never taken for success)."""
    if not isinstance(reply, dict):
        return Ambiguous(f"malformed reply: expected an object, got {type(reply).__name__}")
    if field_name is not None and not reply.get(field_name):
        return Ambiguous(f"malformed reply: no {field_name!r} in it")
    return Done(reply)
