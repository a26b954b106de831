"""The benchmarks run by hand as ``python -m bench.NAME``: a wrong call says what the script is
and how to run the benchmark, never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT


@pytest.mark.parametrize(
    ("module", "argv", "code", "says"),
    [
        *(
            (
                "bench_cpu",
                argv,
                1,
                ("usage: python -m bench.bench_cpu URL RUNS", "python -m bench cpu"),
            )
            for argv in [("--help",), (), ("sqlite:///x.db", "many")]
        ),
        (
            "bench_scaling",
            ("--runs", "0"),
            2,
            ("usage: python -m bench.bench_scaling", "--runs and --rounds must be at least 1"),
        ),
        (
            "bench_history",
            ("--runs", "0"),
            2,
            ("usage: python -m bench.bench_history", "--runs must be at least 1"),
        ),
    ],
)
def test_a_wrong_call_says_how_to_run_the_benchmark(
    module: str, argv: tuple[str, ...], code: int, says: tuple[str, ...]
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", f"bench.{module}", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == code
    for words in says:
        assert words in done.stderr
    assert "Traceback" not in done.stderr
