"""The simulation's soak: ``python -m bench.simulate --schedules 100000 [--seed N] [--workers K]``.

Runs schedules ``N``, ``N+1``, ... of the simulation (``tests/property/simulation.py``: commands,
workers and rescuers interleaved over shared runs, with late commits, lost replies, failed
lookups, kills and clock jumps) in ``K`` processes, each on its own store, and prints progress,
schedules per second, what the schedules explored, and every schedule that broke an invariant,
with its seed and its schedule step by step. Exit status 1 if any schedule broke one.

``--profile`` names the profile (``mixed`` by default), several separated by commas (schedule
``N + i`` runs the ``i``-th in turn), or ``late``: ``late-commits`` and ``late-commits-beyond``,
the late-commit soak. ``--schedules 1 --seed N --show`` replays schedule ``N`` and prints it,
whether it fails or not. Run it from the repository's root (it imports the harness from
``tests/``).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import queue
import sys
import tempfile
import time
from collections import Counter
from typing import Any

#: The first seed when none is given: the one CI starts from.
DEFAULT_SEED = 20_260_000

#: How many failing schedules are printed in full (the others by seed and first finding).
SHOWN = 3

#: What the summary counts, among the runs' history events and the simulation's own events.
EXPLORED = (
    "leased",
    "rescued",
    "reconcile_found",
    "reconcile_not_found",
    "reconcile_failed",
    "timeout",
    "unavailable",
    "refused",
    "retry_scheduled",
    "compensation_skipped",
    "queued",
    "step_failed",
    "decision_needed",
    "approval_expired",
    "rescue with a request in flight",
    # the late-commit profiles
    "stall before sending",
    "stall just past every lease",
    "stall just past the call's deadline",
    "not sent: past the call's deadline",
    "not_sent",
    "reconcile_unsettled",
    "settle_scheduled",
    "late commit after the caller's timeout",
    "late commit beyond the window",
    "change made twice",
    "duplicate_detected",
    "change made twice, detected",
    "extra change left to a person (its undo failed)",
    "final verification",
    "verified",
    "change made beyond the window after its saga gave it up",
    "standby worker",
)

#: What the summary also counts in all, not only by schedule.
TOTALLED = (
    "stall before sending",
    "late commit beyond the window",
    "change made twice",
    "change made twice, detected",
)


def profiles(given: str) -> list[str]:
    """The profiles ``--profile`` names: one, several separated by commas, or ``late`` (the
    late-commit ones); schedule ``N + i`` runs the ``i % len``-th. Raises ``SystemExit`` (status
    2, with the known names) for a name the simulation does not know."""
    sys.path.insert(0, os.getcwd())
    from tests.property.sim_profiles import LATE_PROFILES, PROFILES

    names = [n for part in given.split(",") if (n := part.strip())]
    names = [m for n in names for m in (LATE_PROFILES if n == "late" else (n,))]
    unknown = [n for n in names if n not in PROFILES]
    if unknown or not names:
        known = ", ".join([*PROFILES, "late"])
        print(
            f"unknown profile {', '.join(unknown) or given!r}: known are {known}", file=sys.stderr
        )
        raise SystemExit(2)
    return names


def _work(index: int, workers: int, first: int, count: int, names: list[str], out: Any) -> None:
    """One process: schedules ``first + index``, ``first + index + workers``, ... on its own
    store (schedule ``first + i`` of profile ``names[i % len(names)]``); reports progress every
    50 schedules and every failure at once."""
    sys.path.insert(0, os.getcwd())
    from tests.property.simulation import run_schedule, simulation_store

    with tempfile.TemporaryDirectory() as directory, simulation_store(directory) as store:
        done, seen, ends, totals = 0, Counter[str](), Counter[str](), Counter[str]()
        for seed in range(first + index, first + count, workers):
            result = run_schedule(seed, store, names[(seed - first) % len(names)])
            done += 1
            seen.update(kind for kind, times in result.seen.items() if times)
            totals.update({kind: result.seen[kind] for kind in TOTALLED})
            ends.update(result.ends.values())
            if not result.ok:
                out.put(("failed", seed, result.report(), result.violations[0]))
            if done % 50 == 0:
                out.put(("progress", done, (seen, totals), ends))
                done, seen, ends, totals = 0, Counter(), Counter(), Counter()
        out.put(("progress", done, (seen, totals), ends))
        out.put(("finished", index, None, None))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.simulate", description=__doc__)
    parser.add_argument("--schedules", type=int, default=10_000, help="how many (10,000)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="the first seed")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="processes")
    parser.add_argument(
        "--profile",
        default="mixed",
        help="mixed (default), a focused one, several separated by commas (taken in turn), or "
        "late: late-commits and late-commits-beyond",
    )
    parser.add_argument("--show", action="store_true", help="print every schedule (a replay)")
    args = parser.parse_args(argv)
    names = profiles(args.profile)
    if args.show:
        return _show(args.seed, args.schedules, names)
    workers = max(1, min(args.workers, args.schedules))
    print(
        f"simulation soak: {args.schedules:,} schedules of profile {', '.join(names)} from seed "
        f"{args.seed}, in {workers} process(es)",
        flush=True,
    )
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    processes = [
        context.Process(target=_work, args=(i, workers, args.seed, args.schedules, names, out))
        for i in range(workers)
    ]
    began = time.perf_counter()
    for process in processes:
        process.start()
    done, finished, failed = 0, 0, []
    seen, ends, totals = Counter[str](), Counter[str](), Counter[str]()
    last = began
    while finished < workers:
        try:
            kind, a, b, c = out.get(timeout=5)
        except queue.Empty:
            if not any(p.is_alive() for p in processes):
                print("a simulation process died; see above", file=sys.stderr)
                return 2
            continue
        if kind == "progress":
            done += a
            seen.update(b[0])
            totals.update(b[1])
            ends.update(c)
        elif kind == "failed":
            failed.append(a)
            if len(failed) <= SHOWN:
                print(b, flush=True)
            else:
                print(f"seed {a} broke an invariant: {c.splitlines()[0]}", flush=True)
        else:
            finished += 1
        now = time.perf_counter()
        if now - last >= 10 or finished == workers:
            last = now
            rate = done / (now - began)
            left = (args.schedules - done) / rate if rate else 0.0
            print(
                f"  {done:,}/{args.schedules:,} schedules · {rate:.1f}/s · "
                f"{len(failed)} failing · {left / 60:.0f} min left",
                flush=True,
            )
    for process in processes:
        process.join()
    took = time.perf_counter() - began
    print(_summary(args.schedules, took, seen, ends, failed, totals))
    return 1 if failed else 0


def _summary(
    count: int,
    took: float,
    seen: Counter[str],
    ends: Counter[str],
    failed: list[int],
    totals: Counter[str],
) -> str:
    lines = [
        f"{count:,} schedules in {took:.0f} s ({count / took:.1f} schedules/s)",
        "schedules in which it happened:",
        *(f"  {seen[kind]:>8,}  {kind}" for kind in EXPLORED),
        *(f"  {n:>8,}  {kind}" for kind, n in sorted(seen.items()) if kind.startswith("kill")),
        *(
            f"  {n:>8,}  {kind}"
            for kind, n in sorted(seen.items())
            if kind.startswith("stall ") and kind not in EXPLORED
        ),
        "in all:",
        *(f"  {totals[kind]:>8,}  {kind}" for kind in TOTALLED),
        "how the runs ended:",
        *(f"  {n:>8,}  {end}" for end, n in ends.most_common()),
    ]
    if failed:
        seeds = ", ".join(map(str, sorted(failed)[:50]))
        lines.append(f"{len(failed)} schedule(s) broke an invariant: seeds {seeds}")
    else:
        lines.append("no schedule broke an invariant")
    return "\n".join(lines)


def _show(first: int, count: int, names: list[str]) -> int:
    sys.path.insert(0, os.getcwd())
    from tests.property.simulation import run_schedule, simulation_store

    failing = 0
    with tempfile.TemporaryDirectory() as directory, simulation_store(directory) as store:
        for seed in range(first, first + count):
            result = run_schedule(seed, store, names[(seed - first) % len(names)])
            failing += not result.ok
            print(result.report())
            print("ends: " + "; ".join(f"{k} {v}" for k, v in result.ends.items()))
    return 1 if failing else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # the reader went away (``| head``): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
