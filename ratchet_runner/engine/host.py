"""The host interface: what an effect step, and a decision on a run, need of the runner.

:class:`~ratchet_runner.engine.protocol.EffectStep` performs one effect against a
:class:`StepHost`, not against :class:`~ratchet_runner.engine.runner.Runner` itself: the store, the
adapters, a change fenced by the run's lease, a move by the transition table, the lease made sure
before a call, the clock a decision is judged by, and the in-process waits. The runner satisfies
it (structurally: it does not name it), and so may a test double. :class:`RunHost` adds the spec
version a run is pinned to, which recording a decision needs
(:mod:`ratchet_runner.engine.deciding`).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any, Protocol

from ..adapters.base import Adapter, Semantics
from ..spec.model import Effect, Spec
from ..store.records import Change, OperationRecord, RunRecord
from ..store.store import Store


class StepHost(Protocol):
    """What an effect step needs of the runner that hosts it."""

    @property
    def store(self) -> Store: ...

    @property
    def rng(self) -> random.Random: ...

    def adapter(self, spec: Spec, name: str) -> Adapter:
        """The adapter ``name`` of this spec version."""
        ...

    def change(self, run: RunRecord, at: float | None = None) -> Change:
        """A new change to ``run``, fenced by the lease the host holds on it, if any."""
        ...

    def move(
        self,
        run: RunRecord,
        spec: Spec,
        event: str,
        change: Change,
        ctx: Mapping[str, Any] | None = None,
        *,
        write_ahead_next: bool = False,
    ) -> RunRecord:
        """Fire ``event`` and commit ``change`` with the move it selects."""
        ...

    def written_ahead(self, run: RunRecord) -> tuple[OperationRecord, float] | None:
        """The operation the host wrote ahead with the commit that made ``run``, not yet called,
        and its call's deadline."""
        ...

    def semantics(self, spec: Spec, effect: Effect) -> Semantics | None:
        """What the provider behind ``effect`` does with a second request under one ID."""
        ...

    def now(self) -> float:
        """The host's clock (epoch seconds)."""
        ...

    def monotonic(self) -> float:
        """The clock call deadlines and leases are counted by."""
        ...

    def call_seconds(self, run_id: str, timeout: float | None) -> float:
        """How long a call made now may take (its deadline from now)."""
        ...

    def commit_attempt(
        self, change: Change, operation_id: str, attempts: int, deadline: float
    ) -> RunRecord:
        """Commit ``change``, which records attempt ``attempts`` of ``operation_id``; when the
        store's reply to it is lost, find out whether it was committed before the call's
        ``deadline`` (and raise the store's error when it was not, or cannot be told)."""
        ...

    def secure_lease(self, run_id: str, timeout: float | None) -> None:
        """Make sure the lease held on the run lasts a call of ``timeout`` seconds, or raise."""
        ...

    def decision_now(self) -> float:
        """Now, for a decision a deadline or an expiry bounds."""
        ...

    def interrupts_at(self, point: str, effect: str) -> bool:
        """Whether the crash-practice hook ends the process at ``point`` of ``effect``."""
        ...

    def interrupt(self, point: str, effect: str) -> None:
        """The crash-practice hook at ``point`` of ``effect``."""
        ...

    def wait_inline(self, seconds: float) -> bool:
        """Sleep ``seconds`` here if that is short enough; False to leave it to a timer."""
        ...


class RunHost(StepHost, Protocol):
    """A step host that also reads the spec version each run is pinned to."""

    def spec_of(self, run: RunRecord) -> Spec:
        """The spec version ``run`` is pinned to."""
        ...
