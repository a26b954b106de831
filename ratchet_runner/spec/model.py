"""The spec model: a validated YAML document as typed, immutable Python objects.

:func:`build` turns a schema-valid :class:`~ratchet_runner.spec.loader.Document` into a
:class:`Spec`. It does no semantic checking (that is :mod:`ratchet_runner.spec.lint.references`); it
only gives every later stage one typed view of the table, with each row's JSON pointer so that any
finding can be located.

Over 400 lines: one concern, the spec's typed objects and :func:`build`, which makes every one of
them from the document.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal, TypeVar

from ..errors import UsageError
from ..settings import parse_duration
from .loader import Document

#: The eleven columns of a transition row, in table order.
COLUMNS = (
    "state",
    "event",
    "guard",
    "next_state",
    "durable_write",
    "external_effect",
    "idempotency_key",
    "receipt",
    "retry_owner",
    "compensation",
    "operator_action",
)

#: State kinds that end a run as far as the machine is concerned.
TERMINAL_KINDS = frozenset({"success", "cancelled", "compensated", "operator_queue"})
#: Events an effect (or a compensation) produces as its outcome.
OUTCOME_EVENTS = frozenset({"ok", "refused", "exhausted", "unknown"})
#: Events the runner itself produces; no signal may carry these names.
RUNNER_EVENTS = OUTCOME_EVENTS | {"next", "expired", "due"}


def canonical_json(value: Any) -> str:
    """The one JSON text of ``value``: sorted keys, no spaces, UTF-8 kept."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class Retry:
    max_attempts: int = 3
    initial_backoff: float = 1.0
    max_backoff: float = 30.0
    multiplier: float = 2.0
    jitter: Literal["full", "none"] = "full"


@dataclass(frozen=True)
class Contract:
    """One operation an adapter's contract declares: the arguments it requires (``args``) and
    also takes (``optional_args``), the reply field that identifies its change (``receipt``),
    and the lookup that finds that change by operation ID (``lookup``)."""

    name: str
    args: tuple[str, ...] = ()
    optional_args: tuple[str, ...] = ()
    receipt: str | None = None
    lookup: str | None = None
    pointer: str = ""


@dataclass(frozen=True)
class Adapter:
    """A dependency: the ``kind`` that serves it in practice, and, when the spec declares them,
    the operations it needs of it (``operations``, its contract; None: none declared)."""

    name: str
    kind: str
    attempts: int = 1
    upstream_attempts: int = 1
    config: dict[str, Any] = field(default_factory=dict)
    pointer: str = ""
    operations: Mapping[str, Contract] | None = None


@dataclass(frozen=True)
class Effect:
    name: str
    adapter: str
    operation: str
    args: dict[str, Any]
    reconcile: str | None
    approval: str | None
    retry: Retry
    timeout: float | None
    cost: float | None
    pointer: str = ""
    receipt: str | None = None


@dataclass(frozen=True)
class RelatedRuns:
    """The evidence an approval declares (``evidence.related_runs``): the other runs of the
    workflow started with the same value at the input path ``by``, newest first, at most
    ``limit`` of them, each with the operations of ``effects`` it made."""

    by: str
    effects: tuple[str, ...]
    limit: int = 10
    pointer: str = ""


@dataclass(frozen=True)
class Approval:
    name: str
    effect: str
    binds: tuple[str, ...] | Literal["all"]
    roles: tuple[str, ...]
    expires_after: float | None
    pointer: str = ""
    related_runs: RelatedRuns | None = None


@dataclass(frozen=True)
class State:
    name: str
    kind: str
    resumes_on: tuple[str, ...] = ()
    approval: str | None = None
    expires_after: float | None = None
    after: float | None = None
    until: str | None = None
    operator_action: str | None = None
    description: str | None = None
    pointer: str = ""

    @property
    def terminal(self) -> bool:
        return self.kind in TERMINAL_KINDS


@dataclass(frozen=True)
class Compensation:
    """What undoes an effect: another effect, or an explicit ``none``/``impossible``."""

    kind: Literal["effect", "none", "impossible"]
    effect: str | None = None
    reason: str | None = None

    @classmethod
    def parse(cls, text: str) -> Compensation:
        head, _, reason = text.partition(":")
        if head in ("none", "impossible"):
            return cls(head, None, reason.strip() or None)  # type: ignore[arg-type]
        return cls("effect", text, None)


@dataclass(frozen=True)
class Row:
    index: int
    state: str
    event: str
    next_state: str
    guard: str | None = None
    durable_write: tuple[str, ...] = ()
    external_effect: str | None = None
    idempotency_key: tuple[str, ...] | None = None
    receipt: str | None = None
    retry_owner: str | None = None
    compensation: Compensation | None = None
    operator_action: str | None = None

    @property
    def pointer(self) -> str:
        return f"/transitions/{self.index}"

    def cell(self, column: str) -> Any:
        """The row's value in ``column`` as written (for tables and diagrams)."""
        return getattr(self, column)


@dataclass(frozen=True)
class Budget:
    """Per-run limits across all effects."""

    max_attempts: int | None = None
    max_cost: float | None = None


@dataclass(frozen=True)
class Example:
    name: str
    input: dict[str, Any]
    world: dict[str, Any]
    description: str | None = None


@dataclass(frozen=True)
class Spec:
    name: str
    spec_version: int
    policy_version: int | str
    business_key: str
    start: str
    input_schema: dict[str, Any]
    states: dict[str, State]
    transitions: tuple[Row, ...]
    adapters: dict[str, Adapter] = field(default_factory=dict)
    effects: dict[str, Effect] = field(default_factory=dict)
    approvals: dict[str, Approval] = field(default_factory=dict)
    operator_roles: tuple[str, ...] = ()
    examples: dict[str, Example] = field(default_factory=dict)
    on_version_change: str = "pin"
    #: Whether the document writes ``on_version_change`` out (False: the default ``pin`` applies
    #: unasked). It changes what the validator says (W520), never what the runner does.
    on_version_change_written: bool = False
    budget: Budget = field(default_factory=Budget)
    #: How long a pruned run's tombstone is kept after the run finished, in seconds
    #: (``retention.operation_ids``); None: forever.
    retention_ids: float | None = None
    title: str | None = None
    digest: str = ""
    document: Document | None = field(default=None, repr=False, compare=False)

    def example(self, name: str) -> Example:
        """The example called ``name``; a :class:`UsageError` naming the known ones if none is."""
        if name not in self.examples:
            known = ", ".join(self.examples) or "none"
            raise UsageError(f"no example {name!r} (examples: {known})")
        return self.examples[name]

    @cached_property
    def _rows_by_state(self) -> dict[str, list[Row]]:
        index: dict[str, list[Row]] = {}
        for row in self.transitions:
            index.setdefault(row.state, []).append(row)
        return index

    def rows_from(self, state: str) -> list[Row]:
        """The rows leaving ``state``, in table order."""
        return self._rows_by_state.get(state, [])

    def effect_of(self, state: str) -> Effect | None:
        """The effect that ``state`` performs, if any (named by its rows)."""
        for row in self.rows_from(state):
            if row.external_effect is not None and row.external_effect in self.effects:
                return self.effects[row.external_effect]
        return None

    @property
    def compensating_effects(self) -> set[str]:
        return {
            row.compensation.effect
            for row in self.transitions
            if row.compensation is not None and row.compensation.effect is not None
        }

    @property
    def is_saga(self) -> bool:
        """A spec is a saga when some forward effect names a compensating effect."""
        return bool(self.compensating_effects)


def _none(value: Any) -> Any:
    return None if value in (None, "none") else value


def _tuple(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return () if value == "none" else (value,)
    return tuple(str(v) for v in value)


def _contract(pointer: str, data: dict[str, Any] | None) -> dict[str, Contract] | None:
    if data is None:
        return None
    return {
        name: Contract(
            name,
            _tuple(op.get("args")),
            _tuple(op.get("optional_args")),
            op.get("receipt"),
            op.get("lookup"),
            f"{pointer}/operations/{name}",
        )
        for name, op in data.items()
    }


def _seconds(text: str | None, default: float) -> float:
    parsed = parse_duration(text)
    return default if parsed is None else parsed


def _retry(data: dict[str, Any] | None) -> Retry:
    data = data or {}
    return Retry(
        max_attempts=int(data.get("max_attempts", 3)),
        initial_backoff=_seconds(data.get("initial_backoff"), 1.0),
        max_backoff=_seconds(data.get("max_backoff"), 30.0),
        multiplier=float(data.get("multiplier", 2.0)),
        jitter=data.get("jitter", "full"),
    )


def _related_runs(pointer: str, data: dict[str, Any] | None) -> RelatedRuns | None:
    related = (data or {}).get("related_runs")
    if related is None:
        return None
    return RelatedRuns(
        related["by"],
        tuple(related["effects"]),
        int(related.get("limit", 10)),
        f"{pointer}/evidence/related_runs",
    )


def build(doc: Document) -> Spec:
    """The typed spec of a schema-valid document."""
    data: dict[str, Any] = doc.data
    adapters = {
        name: Adapter(
            name,
            a["kind"],
            int(a.get("attempts", 1)),
            int(a.get("upstream_attempts", 1)),
            dict(a.get("config", {})),
            f"/adapters/{name}",
            _contract(f"/adapters/{name}", a.get("operations")),
        )
        for name, a in (data.get("adapters") or {}).items()
    }
    effects = {
        name: Effect(
            name,
            e["adapter"],
            e["operation"],
            dict(e["args"]),
            _none(e.get("reconcile")),
            e.get("approval"),
            _retry(e.get("retry")),
            parse_duration(e.get("timeout")),
            e.get("cost"),
            f"/effects/{name}",
            e.get("receipt"),
        )
        for name, e in (data.get("effects") or {}).items()
    }
    approvals = {
        name: Approval(
            name,
            a["effect"],
            "all" if a["binds"] == "all" else tuple(a["binds"]),
            tuple(a["roles"]),
            parse_duration(a.get("expires_after")),
            f"/approvals/{name}",
            _related_runs(f"/approvals/{name}", a.get("evidence")),
        )
        for name, a in (data.get("approvals") or {}).items()
    }
    states = {
        name: State(
            name,
            s["kind"],
            tuple(s.get("resumes_on", ())),
            s.get("approval"),
            parse_duration(s.get("expires_after")),
            parse_duration(s.get("after")),
            s.get("until"),
            s.get("operator_action"),
            s.get("description"),
            f"/states/{name}",
        )
        for name, s in data["states"].items()
    }
    rows = tuple(
        Row(
            index=i,
            state=r["state"],
            event=r["event"],
            next_state=r["next_state"],
            guard=r.get("guard"),
            durable_write=_tuple(r.get("durable_write")),
            external_effect=_none(r.get("external_effect")),
            idempotency_key=tuple(r["idempotency_key"]) if "idempotency_key" in r else None,
            receipt=r.get("receipt"),
            retry_owner=r.get("retry_owner"),
            compensation=Compensation.parse(r["compensation"]) if "compensation" in r else None,
            operator_action=r.get("operator_action"),
        )
        for i, r in enumerate(data["transitions"])
    )
    examples = {
        name: Example(name, dict(x["input"]), dict(x.get("world", {})), x.get("description"))
        for name, x in (data.get("examples") or {}).items()
    }
    return Spec(
        name=data["name"],
        spec_version=data["spec_version"],
        policy_version=data["policy_version"],
        business_key=data["business_key"],
        start=data["start"],
        input_schema=data["input"],
        states=states,
        transitions=rows,
        adapters=adapters,
        effects=effects,
        approvals=approvals,
        operator_roles=tuple((data.get("operators") or {}).get("roles", ())),
        examples=examples,
        on_version_change=data.get("on_version_change", "pin"),
        on_version_change_written="on_version_change" in data,
        budget=Budget(
            (data.get("budget") or {}).get("max_attempts"),
            (data.get("budget") or {}).get("max_cost"),
        ),
        retention_ids=_retention((data.get("retention") or {}).get("operation_ids")),
        title=data.get("title"),
        digest=hashlib.sha256(canonical_json(data).encode()).hexdigest(),
        document=doc,
    )


def _retention(text: str | None) -> float | None:
    """``retention.operation_ids`` in seconds; None for ``forever`` (or none given)."""
    if text is None or text == "forever":
        return None
    return parse_duration(text)


_Made = TypeVar("_Made")


def per_version(cache: dict[str, _Made], spec: Spec, make: Callable[[Spec], _Made]) -> _Made:
    """``make(spec)``, made once per spec version and kept in ``cache`` by the spec's digest (a
    spec with no digest, made in code and not loaded, is made anew each time)."""
    if not spec.digest:
        return make(spec)
    made = cache.get(spec.digest)
    if made is None:
        made = cache[spec.digest] = make(spec)
    return made
