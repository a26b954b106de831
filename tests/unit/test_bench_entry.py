"""The benchmarks' child scripts, run by hand as ``python -m bench.NAME``: a wrong call says what
the script is and how to run the benchmark, never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT


@pytest.mark.parametrize("argv", [("--help",), (), ("sqlite:///x.db", "many")])
def test_the_cpu_benchmarks_child_says_how_to_run_it(argv: tuple[str, ...]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.bench_cpu", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert "usage: python -m bench.bench_cpu URL RUNS" in done.stderr
    assert "python -m bench cpu" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_scaling_benchmark_says_how_to_run_it() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.bench_scaling", "--runs", "0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "usage: python -m bench.bench_scaling" in done.stderr
    assert "--runs and --rounds must be at least 1" in done.stderr
    assert "Traceback" not in done.stderr
