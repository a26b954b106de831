"""The worker beside the web application: a process of its own that fires due timers (a refund
nobody approved in time lapses) and carries on the runs a request left behind (a crash mid-call).

``python examples/embed/worker.py`` runs until SIGTERM or Ctrl-C; ``--once`` makes one pass and
prints what it did. It is what ``ratchet worker`` does, through the Python API.
"""

from __future__ import annotations

import json
import os
import signal
import sys

import ratchet_runner as ratchet


def main(argv: list[str]) -> int:
    with ratchet.Session(os.environ.get("RATCHET_DB")) as session:
        if "--once" in argv:
            report = ratchet.worker_pass(session.runner())
            print(json.dumps(report.to_json()))
            return 0
        pool = session.pool(concurrency=2)
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: pool.stop.set())
        pool.run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
