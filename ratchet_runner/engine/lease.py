"""Leases: the one value a process holds a run by, and the rule for when it may count on it.

A process that may call a provider for a run holds the run's lease: a worker that claimed it, a
command as much as a worker (``docs/explanation/leases.md``). The lease's token fences every
commit the holder makes to the run; the database's clock says when it expires. The holder counts
on it, by its own monotonic clock, only until :data:`LEASE_SAFETY` of its length has passed since
the claim (or the renewal) was sent, and it starts a call only when that leaves the call's
timeout plus :data:`LEASE_MARGIN`, renewing it first if need be (:meth:`Lease.secure`).

:class:`Lease` is that value, and :class:`Leases` the ones a runner holds, by run ID: the runner
fences its commits with them, and the heartbeat of whoever took them (a worker pool, a command)
renews them there while the runner works.

:func:`lease_needed` says, by the same rule, the lease a spec version needs (its longest effect
timeout, forward effects and compensations alike): what a worker checks its ``--lease`` against at
start, and a driver before it drives a run (``docs/explanation/leases.md``).
"""

from __future__ import annotations

import math
import os
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..errors import LeaseLost, LeaseTooShort, UsageError

if TYPE_CHECKING:
    from ..spec.model import Spec

#: The share of a lease a holder counts on by its own clock: the rest covers the time between
#: checking and sending, and clocks that run at slightly different rates.
LEASE_SAFETY = 0.9

#: Seconds of lease a call must leave unused beyond its timeout: a call is started only when the
#: lease outlasts it by this much, so the reply (or the timeout) comes while the lease holds.
LEASE_MARGIN = 1.0

#: ``renew(run_id, token, seconds)``: extend a lease still held; False when it was lost
#: (:meth:`ratchet_runner.store.store.Store.renew`).
Renew = Callable[[str, str, float], bool]


def covers(lease_seconds: float, timeout: float | None) -> bool:
    """Whether a lease of ``lease_seconds`` can cover a call of ``timeout`` seconds (None: no
    timeout, counted as 0): the share of it its holder counts on, :data:`LEASE_SAFETY`, must
    leave the timeout plus :data:`LEASE_MARGIN`. The one rule :meth:`Lease.secure` and
    :func:`lease_needed` apply."""
    return lease_seconds * LEASE_SAFETY >= (timeout or 0.0) + LEASE_MARGIN


def lease_for(timeout: float | None) -> int:
    """The smallest whole number of seconds of lease that covers a call of ``timeout`` seconds
    (:func:`covers`): a figure a person can type after ``--lease``."""
    whole = max(1, math.ceil(((timeout or 0.0) + LEASE_MARGIN) / LEASE_SAFETY))
    while not covers(whole, timeout):  # the division may round down past the rule
        whole += 1
    while whole > 1 and covers(whole - 1, timeout):  # or up
        whole -= 1
    return whole


def _rule() -> str:
    return (
        f"a lease is counted on for {LEASE_SAFETY * 100:g} % of its length, "
        f"less {LEASE_MARGIN:g} s of margin"
    )


def too_short(call: str, timeout: float | None, lease_seconds: float) -> str:
    """What a process whose lease is ``lease_seconds`` long is told of ``call`` (``a call of
    refund's request_refund``), which may take ``timeout`` seconds: the ``--lease`` it needs."""
    took = (
        f"may take {timeout:g} s (its timeout)"
        if timeout is not None
        else "has no timeout (counted as 0 s)"
    )
    return (
        f"{call} {took}: it needs --lease {lease_for(timeout)} or more ({_rule()}); this process "
        f"leases runs for {lease_seconds:g} s"
    )


@dataclass(frozen=True)
class LeaseNeed:
    """The lease spec version ``digest`` (workflow ``workflow``, version ``spec_version``)
    needs: that of its effect ``effect``, whose ``timeout`` is its longest."""

    workflow: str
    spec_version: int
    digest: str
    effect: str
    timeout: float | None

    @property
    def spec(self) -> str:
        """The spec version as a person names it: ``refund v1``."""
        return f"{self.workflow} v{self.spec_version}"

    @property
    def seconds(self) -> int:
        """The smallest whole ``--lease`` that is enough."""
        return lease_for(self.timeout)

    def covered_by(self, lease_seconds: float) -> bool:
        return covers(lease_seconds, self.timeout)

    def says(self, lease_seconds: float) -> str:
        """Why a lease of ``lease_seconds`` is too short, and which ``--lease`` is enough."""
        return too_short(f"a call of {self.workflow}'s {self.effect}", self.timeout, lease_seconds)

    def refusal(self, lease_seconds: float) -> LeaseTooShort:
        """The error of a process that would drive a run of this spec under a lease of
        ``lease_seconds`` (not covered): raised before anything is committed or sent."""
        return LeaseTooShort(
            self.says(lease_seconds), spec=self.spec, digest=self.digest, needed=self.seconds
        )


def lease_needed(spec: Spec) -> LeaseNeed | None:
    """The lease ``spec`` needs for every call it may make: that of its effect with the longest
    timeout, forward effects and compensations alike (an effect with no timeout counts as 0 s,
    as :meth:`Lease.secure` counts it); None for a spec with no effect, which calls nothing.
    A driver whose lease this does not cover drives none of the spec's runs: one of its steps
    would be refused before its call, with the run left half-way."""
    longest = max(spec.effects.values(), key=lambda e: e.timeout or 0.0, default=None)
    if longest is None:
        return None
    return LeaseNeed(spec.name, spec.spec_version, spec.digest, longest.name, longest.timeout)


def validate_lease(seconds: float) -> float:
    """A lease length a worker or command may use: a finite number of seconds above zero."""
    if not isinstance(seconds, int | float) or not math.isfinite(seconds) or seconds <= 0:
        raise UsageError(f"a lease must be a finite number of seconds above 0, not {seconds!r}")
    return float(seconds)


def owner_identity() -> str:
    """``host:pid:nonce``: a lease owner unique across machines, processes and restarts."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class Lease:
    """A lease on run ``run_id`` under ``token``, ``seconds`` long, as its holder knows it.

    ``counted_until``: until when, by the holder's monotonic clock, it may count on the lease
    (None: it is not counted, and calls are not checked against it). ``take_as``: the owner a
    lease taken by commits rather than claimed first is taken under: each commit to the run
    takes it (or renews it) if the run is free (a command changing a run that is not running)."""

    run_id: str
    token: str
    seconds: float
    counted_until: float | None = None
    take_as: str | None = None

    @classmethod
    def asked(
        cls, run_id: str, token: str, seconds: float, asked_at: float, *, take_as: str | None = None
    ) -> Lease:
        """A lease whose claim was sent at ``asked_at`` (the database's expiry cannot be
        earlier), counted on for :data:`LEASE_SAFETY` of its length from then."""
        return cls(run_id, token, seconds, asked_at + seconds * LEASE_SAFETY, take_as)

    def renewed(self, asked_at: float) -> Lease:
        """This lease after a renewal sent at ``asked_at`` succeeded."""
        return replace(self, counted_until=asked_at + self.seconds * LEASE_SAFETY)

    @property
    def taken_by_commits(self) -> tuple[str, float] | None:
        """``(owner, seconds)`` for a commit to take the lease with (see ``take_as``)."""
        return None if self.take_as is None else (self.take_as, self.seconds)

    def check(self, now: float) -> None:
        """Refuse to call out under a lease the holder can no longer count on by its own clock:
        a worker paused past its lease (SIGSTOP, a long GC, a frozen VM) must not send a request
        the run's next holder cannot know about. The database would refuse its next commit
        anyway; this stops the call itself, which a provider that does not deduplicate by key
        would otherwise make a second time."""
        if self.counted_until is not None and now >= self.counted_until:
            raise LeaseLost(
                f"the lease on run {self.run_id} ran out on this worker's own clock before the "
                "call (was the process paused?): no request sent; the run's next holder "
                "reconciles"
            )

    def secure(self, timeout: float | None, monotonic: Callable[[], float], renew: Renew) -> Lease:
        """Before an attempt is committed: this lease, made sure to last the whole call, its
        ``timeout`` plus :data:`LEASE_MARGIN`, renewed first (and returned renewed) if too
        little is left, so that no other process can take the run over (and reconcile, and call
        again) while the request may still be in flight. Raises :class:`LeaseLost` if the lease
        is gone and :class:`LeaseTooShort` if no lease this long could cover the call; either
        way nothing has been committed or sent. A lease not counted is not checked."""
        if self.counted_until is None:
            return self
        self.check(monotonic())
        needed = (timeout or 0.0) + LEASE_MARGIN
        if self.counted_until - monotonic() >= needed:
            return self
        if not covers(self.seconds, timeout):
            raise LeaseTooShort(
                f"{too_short('a call of the effect', timeout, self.seconds)}: no request sent",
                needed=lease_for(timeout),
            )
        asked = monotonic()
        if not renew(self.run_id, self.token, self.seconds):
            raise LeaseLost(
                f"the lease on run {self.run_id} was lost before the call: no request sent"
            )
        return self.renewed(asked)


class Leases:
    """The leases one runner holds, by run ID.

    Held from a claim (or from when a command is to take one) until the holder lets go; renewed
    by the runner itself before a call (:meth:`secure`) and by its holder's heartbeat thread
    meanwhile (:meth:`renewed`), which is why a renewal replaces a lease only while the same one
    is still held."""

    def __init__(self) -> None:
        self._held: dict[str, Lease] = {}
        self._lock = threading.Lock()

    def __bool__(self) -> bool:
        return bool(self._held)

    def get(self, run_id: str) -> Lease | None:
        return self._held.get(run_id)

    def held(self) -> list[Lease]:
        """The leases held now, oldest first."""
        return list(self._held.values())

    def hold(self, lease: Lease) -> None:
        with self._lock:
            self._held[lease.run_id] = lease

    def drop(self, run_id: str) -> None:
        with self._lock:
            self._held.pop(run_id, None)

    def renewed(self, run_id: str, token: str, asked_at: float) -> None:
        """Record a renewal of the lease ``token`` sent at ``asked_at``, if it is still held."""
        with self._lock:
            lease = self._held.get(run_id)
            if lease is not None and lease.token == token:
                self._held[run_id] = lease.renewed(asked_at)

    def secure(
        self, run_id: str, timeout: float | None, monotonic: Callable[[], float], renew: Renew
    ) -> None:
        """:meth:`Lease.secure` on the lease held on ``run_id``; no lease held, no check."""
        lease = self._held.get(run_id)
        if lease is None:
            return
        secured = lease.secure(timeout, monotonic, renew)
        if secured is not lease:
            with self._lock:
                held = self._held.get(run_id)
                if held is not None and held.token == secured.token:
                    self._held[run_id] = secured
