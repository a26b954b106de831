"""This checkout against an earlier version of it: steps/s and CPU per durable step, alternating.

``python -m bench.bench_versions REV`` exports the git revision ``REV`` (``git archive``) to a
temporary folder and runs the workload of ``bench/bench_cpu.py`` (the three-effect workflow,
one runner, the no-op adapter, in a child process of its own) with each version's code in turn:
the child runs in its version's folder with ``PYTHONPATH`` set to it, so that it imports that
version's ``ratchet_runner`` before the installed one. Each child drives its runs on a fresh
SQLite file or a fresh PostgreSQL database; its CPU time is read from ``/proc`` (on PostgreSQL
its database's backends too). The two versions alternate for ``--rounds`` rounds, which goes
first alternating too; a value is the median of the rounds, a ratio (this ÷ ``REV``) the median
of the per-round ratios, printed with the load average before and after. The revision must have
``bench/bench_cpu.py`` (any since the CPU benchmark came).
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from bench.bench_cpu import Cost, measure, median
from bench.bench_pool import _fresh_pg_database
from bench.bench_steps import PG_URL
from bench.harness import ROOT, postmaster_of


def export(revision: str, into: Path) -> Path:
    """The tree of ``revision`` of this checkout's repository, written under ``into``."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", revision],
        cwd=ROOT,
        capture_output=True,
        check=False,
    )
    if archive.returncode != 0:
        raise SystemExit(f"cannot export {revision}: {archive.stderr.decode().strip()}")
    tree = into / "baseline"
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(tree, filter="data")
    return tree


def _cost(root: Path, store: str, runs: int, tmp: Path, name: str) -> Cost:
    argv = [sys.executable, "-m", "bench.bench_cpu"]
    if store == "sqlite":
        return measure([*argv, f"sqlite:///{tmp / name}.db", str(runs)], 3 * runs, None, "", root)
    postmaster = postmaster_of(PG_URL)
    if postmaster is None:
        raise SystemExit("PostgreSQL's processes are not readable here: cannot measure")
    url = _fresh_pg_database(name)
    return measure([*argv, url, str(runs)], 3 * runs, postmaster, name, root)


def compare(revision: str, stores: list[str], runs: int, rounds: int) -> list[str]:
    """The report's lines: per store, each version's medians and the ratios."""
    lines = []
    with tempfile.TemporaryDirectory(prefix="ratchet-versions-") as folder:
        tmp = Path(folder)
        base = export(revision, tmp)
        for store in stores:
            load = os.getloadavg()[0]
            ours: list[Cost] = []
            theirs: list[Cost] = []
            for i in range(rounds):
                order = [(ROOT, ours, "this"), (base, theirs, "base")]
                for root, costs, label in order if i % 2 == 0 else order[::-1]:
                    costs.append(_cost(root, store, runs, tmp, f"ratchet_versions_{label}_{i}"))
                print(
                    f"{store} round {i + 1}: this {ours[-1].rate:.0f} steps/s "
                    f"{ours[-1].total:.0f} µs/step; {revision} {theirs[-1].rate:.0f} steps/s "
                    f"{theirs[-1].total:.0f} µs/step",
                    file=sys.stderr,
                    flush=True,
                )
            mine, other = median(ours), median(theirs)
            rate = statistics.median(a.rate / b.rate for a, b in zip(ours, theirs, strict=True))
            cpu = statistics.median(a.total / b.total for a, b in zip(ours, theirs, strict=True))
            lines += [
                f"{store}: {rounds} alternating rounds of {runs} runs, load {load:.1f} to "
                f"{os.getloadavg()[0]:.1f}",
                f"  steps/s       this {mine.rate:8.0f}   {revision} {other.rate:8.0f}   "
                f"ratio {rate:.2f}x",
                f"  CPU µs/step   this {mine.total:8.0f}   {revision} {other.total:8.0f}   "
                f"ratio {cpu:.2f}x",
            ]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_versions", description=__doc__)
    parser.add_argument("revision", help="the earlier version: a commit, a tag, HEAD~1, ...")
    parser.add_argument("--store", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--runs", type=int, default=500, help="runs per child (default 500)")
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds (default 7)")
    args = parser.parse_args()
    stores = ["sqlite", "postgresql"] if args.store == "both" else [args.store]
    print("\n".join(compare(args.revision, stores, args.runs, args.rounds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
