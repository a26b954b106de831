"""Two no-op workers against one on PostgreSQL, at full drain size, and where the time goes.

``python -m bench.bench_scaling [--runs N] [--rounds R] [--diagnose]``: in each round, one
worker process and then two (the order alternating from round to round) drain ``N`` runs (3,000
by default) of the three-effect workflow (``bench/specs/three_effects.yaml``) from a fresh
database, with the no-op adapter (``bench/pool_child.py``). Timed from the moment every worker is
started and connected to the moment the last one is done. For each drain: steps per second, the
machine's busy cores (Linux's ``/proc/stat``: time waiting for the disk counts as idle), and the
CPU time per step of the workers' processes and of the PostgreSQL server (the backends serving
the drain's database and the server's own processes: :class:`bench.harness.ServerWatch`, read
from ``/proc`` before the workers let their connections go). The ratio is the median of the
per-round ratios. Target (#28): 2 workers at least 1.7x one, and within 85 % of the cap the
cores set: cores ÷ the cores one worker keeps busy.

``--diagnose`` runs the same rounds again with ``synchronous_commit`` off for the workers'
sessions: a diagnosis, never a way to run (a commit the server acknowledged could then be lost
in its crash). Where two workers scale there and not with it on, what they wait for is the
write-ahead log's flush to disk, not the CPU, the GIL (each worker is a process of its own) or
the claims (``SKIP LOCKED``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

from bench.bench_pool import Drain, _fresh_pg_database, _pool_rate

#: The session setting of the diagnosis, as a PostgreSQL URL's query.
NOT_SYNCED = "?options=-csynchronous_commit%3Doff"


def rounds(runs: int, count: int, query: str = "") -> tuple[float, float]:
    """``count`` alternating rounds of one worker and two: (the median ratio, the median share
    of the cap), each round printed."""
    cores = os.cpu_count() or 1
    ratios, shares = [], []
    for round_ in range(count):
        order = (1, 2) if round_ % 2 == 0 else (2, 1)
        drains: dict[int, Drain] = {}
        for workers in order:
            url = _fresh_pg_database(f"ratchet_bench_scale{workers}") + query
            drains[workers] = _pool_rate(url, workers, runs)
        one, two = drains[1], drains[2]
        ratio = two.rate / one.rate
        cap = cores / one.cores_busy if one.cores_busy else float("nan")
        ratios.append(ratio)
        shares.append(ratio / cap)
        for d in (one, two):
            print(
                f"  round {round_ + 1}, {d.workers} worker(s): {d.rate:.0f} steps/s, "
                f"{d.cores_busy or 0:.2f} of {cores} cores busy, CPU per step: workers "
                f"{d.worker_cpu_ms:.3f} ms, PostgreSQL {d.server_cpu_ms:.3f} ms",
                flush=True,
            )
        print(f"  round {round_ + 1}: 2 workers {ratio:.2f}x one; cap {cap:.2f}x", flush=True)
    return statistics.median(ratios), statistics.median(shares)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.bench_scaling", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--runs", type=int, default=3000, metavar="N", help="runs per drain")
    parser.add_argument("--rounds", type=int, default=3, metavar="R", help="alternating rounds")
    parser.add_argument(
        "--diagnose",
        action="store_true",
        help="the same again with synchronous_commit off (a diagnosis only: see above)",
    )
    args = parser.parse_args(argv)
    if args.runs < 1 or args.rounds < 1:
        parser.error("--runs and --rounds must be at least 1")
    load = os.getloadavg()[0]
    print("synchronous commits (as Ratchet runs):", flush=True)
    ratio, share = rounds(args.runs, args.rounds)
    print(
        f"2 no-op workers vs 1 on PostgreSQL, {args.runs:,} runs a drain, {args.rounds} "
        f"alternating rounds: {ratio:.2f}x (target >= 1.7x: "
        f"{'met' if ratio >= 1.7 else 'not met'}), {share:.0%} of the cores' cap (target >= 85 %: "
        f"{'met' if share >= 0.85 else 'not met'}); load {load:.1f} to {os.getloadavg()[0]:.1f}"
    )
    if args.diagnose:
        print("diagnosis, synchronous_commit off (never a way to run):", flush=True)
        ratio, share = rounds(args.runs, args.rounds, NOT_SYNCED)
        print(
            f"diagnosis: 2 workers {ratio:.2f}x one, {share:.0%} of the cores' cap; load "
            f"{os.getloadavg()[0]:.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
