"""Run every benchmark and write a Markdown report: ``python -m bench [--quick] [-o FILE]``."""

from __future__ import annotations

import argparse
import inspect
import platform
import sys
from datetime import UTC, datetime
from pathlib import Path

from bench import (
    bench_check,
    bench_cli,
    bench_cpu,
    bench_history,
    bench_hostile,
    bench_http,
    bench_pool,
    bench_prune,
    bench_serve,
    bench_stats,
    bench_steps,
    bench_validate,
    bench_wake,
)
from bench.harness import ROOT

BENCHMARKS = {
    "validate": bench_validate.run,
    "hostile": bench_hostile.run,
    "steps": bench_steps.run,
    "check": bench_check.run,
    "pool": bench_pool.run,
    "prune": bench_prune.run,
    "http": bench_http.run,
    "cli": bench_cli.run,
    "cpu": bench_cpu.run,
    "wake": bench_wake.run,
    "serve": bench_serve.run,
    "stats": bench_stats.run,
    "history": bench_history.run,
}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("names", nargs="*", choices=[*BENCHMARKS, []], help="which to run")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument(
        "--rounds",
        type=int,
        metavar="N",
        help="alternating rounds, for the benchmarks that alternate their sides (cpu: 3)",
    )
    parser.add_argument(
        "-o", "--output", type=Path, default=ROOT / "bench" / "results" / "latest.md"
    )
    args = parser.parse_args()
    names = args.names or list(BENCHMARKS)
    header = (
        f"# Benchmark report\n\n{datetime.now(UTC):%Y-%m-%d %H:%M} UTC · Python "
        f"{platform.python_version()} · {platform.machine()} · "
        f"`python -m bench {' '.join(sys.argv[1:])}`\n"
    )
    parts = [header]
    missed = 0
    for name in names:
        print(f"running {name} ...", file=sys.stderr, flush=True)
        benchmark = BENCHMARKS[name]
        if args.rounds and "rounds" in inspect.signature(benchmark).parameters:
            section = benchmark(args.quick, rounds=args.rounds)
        else:
            section = benchmark(args.quick)
        parts.append(section.markdown())
        missed += sum(1 for row in section.rows if row.ok is False)
    report = "\n".join(parts)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(report, encoding="utf-8")
    print(report)
    print(f"report written to {args.output}", file=sys.stderr)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
