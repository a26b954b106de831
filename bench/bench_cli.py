"""How fast the ``ratchet`` command starts, a whole process each, against a bare click program.

Targets: ``ratchet --version`` and ``ratchet --help`` at most 1.5 times the baseline; ``ratchet
validate specs/refund.yaml`` at most 0.35 s. Baseline, measured in the same run: ``python -c
'import click'`` with the same interpreter and virtual environment, the least any click command
line costs to start. Each round runs the baseline and every command once, in an order that
alternates from round to round; a value is the median of the rounds, a ratio the median of the
per-round ratios to the baseline.

The children run with bytecode caches, as an installed package does (pip compiles a wheel's
modules when it installs it): ``PYTHONDONTWRITEBYTECODE`` is removed from their environment and
``PYTHONPYCACHEPREFIX`` points at a folder of the benchmark's own, filled by a first run of each
command. The rows marked "no bytecode cache" run instead with every module cached but Ratchet's
own, which are compiled at every start: an editable install under ``PYTHONDONTWRITEBYTECODE=1``.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from bench.harness import RATCHET, ROOT, Row, Section

TARGET_RATIO = 1.5
TARGET_VALIDATE_SECONDS = 0.35
BASELINE = (sys.executable, "-c", "import click")
#: (row name, argv, target ratio to the baseline, target seconds)
COMMANDS: tuple[tuple[str, tuple[str, ...], float | None, float | None], ...] = (
    ("`ratchet --version`", (RATCHET, "--version"), TARGET_RATIO, None),
    ("`ratchet --help`", (RATCHET, "--help"), TARGET_RATIO, None),
    (
        "`ratchet validate specs/refund.yaml`",
        (RATCHET, "validate", "specs/refund.yaml"),
        None,
        TARGET_VALIDATE_SECONDS,
    ),
)
#: The commands also timed with no bytecode cache for Ratchet's modules.
UNCACHED = ("`ratchet --version`", "`ratchet --help`")


def run(quick: bool = False) -> Section:
    section = Section.of("Starting the command", __doc__, "`python -c 'import click'`, same round")
    rounds = 5 if quick else 21
    with tempfile.TemporaryDirectory() as tmp:
        cached = _environment(Path(tmp) / "cached")
        uncached = _environment(Path(tmp) / "uncached")
        for _ in range(2):  # fill both caches (and the file system's)
            for argv in (BASELINE, *(argv for _, argv, _, _ in COMMANDS)):
                _seconds(argv, cached)
                _seconds(argv, uncached)
        shutil.rmtree(_package_cache(uncached))  # Ratchet's modules: compiled at every start
        uncached = {**uncached, "PYTHONDONTWRITEBYTECODE": "1"}
        timed = {name: argv for name, argv, _, _ in COMMANDS}
        runs: list[tuple[str, Sequence[str], Mapping[str, str]]] = [
            ("baseline", BASELINE, cached),
            *((name, argv, cached) for name, argv in timed.items()),
            *((f"{name}, no bytecode cache", timed[name], uncached) for name in UNCACHED),
        ]
        times: dict[str, list[float]] = {name: [] for name, _, _ in runs}
        for number in range(rounds):
            order = runs if number % 2 == 0 else runs[::-1]
            for name, argv, env in order:
                times[name].append(_seconds(argv, env))

    base = times.pop("baseline")
    targets = {name: (ratio, seconds) for name, _, ratio, seconds in COMMANDS}
    for name, values in times.items():
        ratio = statistics.median(v / b for v, b in zip(values, base, strict=True))
        value = statistics.median(values)
        target_ratio, target_seconds = targets.get(name, (None, None))
        target, ok = "", None
        if target_ratio is not None:
            target, ok = f"<= {target_ratio:.2f}x", ratio <= target_ratio
        elif target_seconds is not None:
            target, ok = f"<= {target_seconds} s", value <= target_seconds
        section.rows.append(
            Row(name, value, "s", statistics.median(base), target, ok, measured_ratio=ratio)
        )
    return section


def _environment(pycache: Path) -> dict[str, str]:
    """The children's environment: bytecode cached under ``pycache``, and no Ratchet setting
    (a binding file named by ``$RATCHET_BINDINGS`` would change what ``validate`` checks)."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("RATCHET_") and key != "PYTHONDONTWRITEBYTECODE"
    }
    env["PYTHONPYCACHEPREFIX"] = str(pycache)
    return env


def _package_cache(env: Mapping[str, str]) -> str:
    """The folder of ``ratchet_runner``'s own bytecode under the environment's cache prefix."""
    where = subprocess.run(
        [
            sys.executable,
            "-c",
            "import importlib.util, os, ratchet_runner\n"
            "print(os.path.dirname(importlib.util.cache_from_source(ratchet_runner.__file__)))",
        ],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return where.stdout.strip()


def _seconds(argv: Sequence[str], env: Mapping[str, str]) -> float:
    """The wall time of one whole process of ``argv``, which must succeed."""
    start = time.perf_counter()
    done = subprocess.run(
        list(argv), env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.decode()}")
    return elapsed
