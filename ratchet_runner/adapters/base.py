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
    ├── Found(receipt)       the provider has a record of that operation ID (``others``: the
    │                        receipts of further changes it made under the same ID, which a
    │                        provider that does not deduplicate may have: a duplicate)
    ├── NotFound()           it has none: a retry with the same ID is safe (for a provider that
    │                        does not deduplicate, only once its ``commits_within`` has passed)
    └── LookupFailed(reason) the lookup itself failed: the outcome stays unknown

What a provider does with a second request under one operation ID is its :class:`Semantics`:
whether it deduplicates by the idempotency key (``dedupe``), and, when it does not, how long after
a request was sent it may still commit it (``commits_within``); and how long its lookup may lag
behind a change (``settle``). A binding declares them; an adapter may declare its own.
"""

from __future__ import annotations

import time
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
    """The provider has a record of the operation ID: ``receipt`` proves the change. ``others``:
    the receipts of any further changes found under the same ID (a provider that does not
    deduplicate made the change more than once): the runner records a duplicate."""

    receipt: dict[str, Any]
    others: tuple[dict[str, Any], ...] = ()
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
    """One request: which operation, under which operation ID, with which arguments.

    ``deadline``: the instant, on ``time.monotonic()``'s clock, after which the request must not
    be sent (None: no deadline but ``timeout``). The runner fixes it before it commits the
    attempt and keeps its lease on the run past it, so that a request sent late (a process
    paused between its last check and the send) can never reach a provider after the run's next
    holder may have looked the operation up. An adapter checks it as its last step before the
    request leaves, and returns :class:`Transient` (nothing was sent) once it has passed."""

    operation: str
    operation_id: str
    args: dict[str, Any]
    effect: str = ""
    timeout: float | None = None
    attempt: int = 1
    deadline: float | None = None
    #: Seconds since the operation's first attempt was recorded, by the runner's clock (None:
    #: not known): how old its idempotency key is, which a provider that forgets keys after a
    #: while (``key_retention``) must be told, whichever process sends it.
    key_age: float | None = None

    def expired(self, now: float | None = None) -> bool:
        """Whether the deadline has passed (``now``: a monotonic reading; default: now)."""
        if self.deadline is None:
            return False
        return (time.monotonic() if now is None else now) > self.deadline


def not_sent(request: Call) -> Transient:
    """What an adapter answers once ``request``'s deadline has passed before it was sent."""
    return Transient(
        f"the call's deadline passed before the request of {request.operation!r} was sent "
        "(was the process paused?): nothing was sent"
    )


@dataclass(frozen=True)
class Semantics:
    """What a provider does with a second request under one operation ID, and how far behind
    its lookup may be. ``dedupe``: True when it honours the idempotency key (a second request
    returns the first result), False when a second request makes a second change, None when
    nobody said. ``commits_within``: for ``dedupe = False``, the longest, in seconds, a request
    it was sent may take to commit (a request it could not commit by then it abandons).
    ``settle``: the longest its lookup may lag behind a change it made (a listing of recent
    changes, say). ``sees_every_change``: whether its lookup answers with every change made
    under one operation ID (a listing; an endpoint that lists them), so that a change a provider
    that does not deduplicate made twice is found (:attr:`Found.others`); False: it answers with
    one at most, and such a duplicate goes unseen; None: nobody said. Declared by a binding
    (``docs/reference/bindings.md``), or by the adapter itself (:meth:`Adapter.semantics`); the
    binding's word wins."""

    dedupe: bool | None = None
    commits_within: float | None = None
    settle: float = 0.0
    sees_every_change: bool | None = None

    def over(self, theirs: Semantics | None) -> Semantics:
        """These semantics, with what they leave unsaid taken from ``theirs``."""
        if theirs is None:
            return self
        return Semantics(
            theirs.dedupe if self.dedupe is None else self.dedupe,
            theirs.commits_within if self.commits_within is None else self.commits_within,
            max(self.settle, theirs.settle),
            theirs.sees_every_change if self.sees_every_change is None else self.sees_every_change,
        )

    @property
    def window(self) -> float:
        """Seconds after the latest request could have been sent before a lookup that finds
        nothing is conclusive: none for a provider that deduplicates (a second request returns
        the first result, whatever the timing); the larger of ``commits_within`` and ``settle``
        for one that does not; ``settle`` when nobody said."""
        if self.dedupe is True:
            return 0.0
        if self.dedupe is None:
            return self.settle
        return max(self.commits_within or 0.0, self.settle)


@runtime_checkable
class Adapter(Protocol):
    """What the runner needs of a dependency. Implementations must send ``operation_id`` as the
    provider's idempotency key, and must classify every reply into an :data:`Outcome`."""

    def call(self, request: Call) -> Outcome:
        """Make the change named by ``request`` (at most once per operation ID)."""
        ...

    def lookup(self, operation: str, operation_id: str, effect: str = "") -> LookupResult:
        """Ask the provider, through its ``operation`` lookup, what it did with that ID.

        An adapter may also take ``args`` (keyword): the arguments the operation was called
        with, for a provider whose lookup finds a change by them rather than by the ID (a
        listing filtered by order, items that do not echo the ID); the runner passes them to an
        adapter whose ``lookup`` accepts them. It may also offer ``semantics(operation,
        lookup)``, returning the provider's :class:`Semantics` for that operation (or None)."""
        ...


def receipt_of(reply: Any, field_name: str | None) -> Outcome:
    """Classify a raw reply: a mapping holding ``field_name`` is done; anything else is ambiguous
    (a malformed reply is never taken for success)."""
    if not isinstance(reply, dict):
        return Ambiguous(f"malformed reply: expected an object, got {type(reply).__name__}")
    if field_name is not None and not reply.get(field_name):
        return Ambiguous(f"malformed reply: no {field_name!r} in it")
    return Done(reply)
