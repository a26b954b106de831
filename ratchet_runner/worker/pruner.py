"""A worker's retention (``ratchet worker --prune-every``): a thread that prunes the finished runs
older than the policy says (:func:`~ratchet_runner.engine.pruning.prune`) when the worker starts
and every interval after, on a store connection of its own, until the worker stops. A prune that
fails (the store unreachable) is logged and tried again at the next interval; the workers' own
threads never wait on it but for the short transaction of each batch."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from ..clock import Clock
from ..engine.pruning import prune
from ..errors import RatchetError
from ..store.store import Store

LOG = logging.getLogger("ratchet_runner.worker.pool")


@dataclass
class Pruner:
    """Prunes runs finished more than ``age`` seconds ago every ``every`` seconds."""

    open_store: Callable[[], Store]
    clock: Clock
    every: float
    age: float
    stop: threading.Event
    batch: int = 100
    pruned: int = 0
    _store: Store | None = None

    def once(self) -> int:
        """One prune now: how many runs it pruned (0, logged, when it failed)."""
        try:
            if self._store is None:
                self._store = self.open_store()
            store = self._store
            now = self.clock.now()
            done = prune(store, now - self.age, now, batch=self.batch)
        except RatchetError as exc:
            LOG.warning("%s", f"prune failed: {exc}; trying again in {self.every:g} s")
            return 0
        self.pruned += done.pruned
        if done.pruned:
            LOG.info("%s", f"pruned {done.pruned} finished run(s) in {done.seconds:.1f} s")
        return done.pruned

    def run(self) -> None:
        """Prune now and every interval until ``stop``; then close its store."""
        try:
            self.once()
            while not self.stop.wait(self.every):
                self.once()
        finally:
            if self._store is not None:
                self._store.close()

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.run, name="ratchet-pruner", daemon=True)
        thread.start()
        return thread
