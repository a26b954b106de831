"""One benchmark worker process: ``python -m bench.pool_child STORE_URL`` drains the runnable
runs of the three-effect workflow under leases, with the in-process no-op adapter."""

from __future__ import annotations

import sys
import time

from adapters.noop import NoopAdapter
from runner.execute import Runner
from runner.pool import Pool
from runner.store import Store


def main(url: str) -> None:
    """Get ready (imports, the store's connection), say so, wait for ``go`` on stdin, drain the
    queue, and print the wall-clock time it finished: the parent times the draining only, not
    each interpreter's start."""
    store = Store(url)
    store.status_counts()  # connect now, not on the clock
    adapter = NoopAdapter()
    pool = Pool(lambda: Runner(store, lambda _: adapter), concurrency=1, lease_seconds=30)
    print("ready", flush=True)
    sys.stdin.readline()
    pool.run(until_idle=True)
    print(f"done {time.time()!r}", flush=True)
    store.close()


if __name__ == "__main__":
    main(sys.argv[1])
