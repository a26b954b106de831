"""One worker process of the wake-up benchmark: ``python -m bench.wake_child STORE_URL MODE``.

MODE ``wake``: the pool wakes on notifications (PostgreSQL) or on changes to the database file
(SQLite); ``poll``: it only polls, at the default interval. Prints ``ready`` once it listens,
then ``called KEY TIME`` (wall clock) the moment each call reaches its adapter, and stops at
end of input.
"""

from __future__ import annotations

import sys
import threading
import time

from ratchet_runner.adapters.base import Call, Done, LookupResult, NotFound, Outcome
from ratchet_runner.session import Session
from ratchet_runner.store.watch import Listener
from ratchet_runner.worker.pool import Pool

#: The worker's poll interval: the default of ``ratchet worker``.
POLL = 1.0


class Stamping:
    """A no-op provider that says when each call reached it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()

    def call(self, request: Call) -> Outcome:
        at = time.time()
        with self.lock:
            print(f"called {request.args['key']} {at!r}", flush=True)
        return Done({"id": request.operation_id})

    def lookup(self, operation: str, operation_id: str, effect: str = "") -> LookupResult:
        return NotFound()


def main(url: str, mode: str) -> None:
    adapter = Stamping()
    with Session(url) as session:
        pool = Pool(
            lambda options: session.runner(adapters=lambda _: adapter, options=options),
            lease_seconds=30,
            poll=POLL,
            wakeups=mode == "wake",
            log=lambda line: print(f"log {line}", file=sys.stderr, flush=True),
        )
        worker = threading.Thread(target=pool.run, name="pool")
        worker.start()
        deadline = time.monotonic() + 30
        while mode == "wake" and pool.watch is None and time.monotonic() < deadline:
            time.sleep(0.01)
        if isinstance(pool.watch, Listener):
            pool.watch.listening.wait(30)
        print("ready", flush=True)
        sys.stdin.read()
        pool.stop.set()
        worker.join()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
