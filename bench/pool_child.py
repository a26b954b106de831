"""One benchmark worker process: ``python -m bench.pool_child STORE_URL [DELAY_MS [THREADS]]``
drains the runnable runs of the three-effect workflow under leases, with the in-process no-op
adapter, which answers at once or, given ``DELAY_MS``, after that many milliseconds (a provider's
round trip), in ``THREADS`` worker threads (default 1)."""

from __future__ import annotations

import sys
import time

from ratchet_runner.adapters.base import Call, LookupResult, Outcome
from ratchet_runner.adapters.noop import NoopAdapter
from ratchet_runner.session import Session
from ratchet_runner.worker.pool import Pool


class SlowNoop(NoopAdapter):
    """The no-op adapter behind a network: every call and lookup waits ``delay`` seconds."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay

    def call(self, request: Call) -> Outcome:
        time.sleep(self.delay)
        return super().call(request)

    def lookup(self, operation: str, operation_id: str, effect: str = "") -> LookupResult:
        time.sleep(self.delay)
        return super().lookup(operation, operation_id, effect)


def main(url: str, delay_ms: float = 0.0, threads: int = 1) -> None:
    """Get ready (imports, the store's connection), say so, wait for ``go`` on stdin, drain the
    queue, print the wall-clock time it finished (the parent times the draining only, not each
    interpreter's start), and hold the connection until the next line or the end of stdin."""
    adapter = SlowNoop(delay_ms / 1000) if delay_ms else NoopAdapter()
    with Session(url) as session:
        session.store.status_counts()  # connect now, not on the clock
        pool = Pool(  # the threads share the session's store (and its connection pool)
            lambda options: session.runner(adapters=lambda _: adapter, options=options),
            concurrency=threads,
            lease_seconds=30,
        )
        print("ready", flush=True)
        sys.stdin.readline()
        pool.run(until_idle=True)
        print(f"done {time.time()!r}", flush=True)
        sys.stdin.readline()  # still connected until told (or stdin closes): the parent may
        # read what its PostgreSQL backend used first


if __name__ == "__main__":
    main(
        sys.argv[1],
        float(sys.argv[2]) if len(sys.argv) > 2 else 0.0,
        int(sys.argv[3]) if len(sys.argv) > 3 else 1,
    )
