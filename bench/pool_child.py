"""One benchmark worker process: ``python -m bench.pool_child STORE_URL`` drains the runnable
runs of the three-effect workflow under leases, with the in-process no-op adapter."""

from __future__ import annotations

import sys

from adapters.noop import NoopAdapter
from runner.execute import Runner
from runner.pool import Pool
from runner.store import Store


def main(url: str) -> None:
    store = Store(url)
    adapter = NoopAdapter()
    Pool(lambda: Runner(store, lambda _: adapter), concurrency=1, lease_seconds=30).run(
        until_idle=True
    )
    store.close()


if __name__ == "__main__":
    main(sys.argv[1])
