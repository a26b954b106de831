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
"""

from __future__ import annotations

import math
import os
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace

from ..errors import LeaseLost, LeaseTooShort, UsageError

#: The share of a lease a holder counts on by its own clock: the rest covers the time between
#: checking and sending, and clocks that run at slightly different rates.
LEASE_SAFETY = 0.9

#: Seconds of lease a call must leave unused beyond its timeout: a call is started only when the
#: lease outlasts it by this much, so the reply (or the timeout) comes while the lease holds.
LEASE_MARGIN = 1.0

#: ``renew(run_id, token, seconds)``: extend a lease still held; False when it was lost
#: (:meth:`ratchet_runner.store.store.Store.renew`).
Renew = Callable[[str, str, float], bool]


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
        if self.seconds * LEASE_SAFETY < needed:
            raise LeaseTooShort(
                f"a call that may take {timeout or 0:g} s (the effect's timeout) needs a lease of "
                f"more than {needed / LEASE_SAFETY:.0f} s; this process leases runs for "
                f"{self.seconds:g} s (--lease): no request sent"
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
