"""Small helpers shared by the benchmarks: timing, child processes, and the report."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RATCHET = str(Path(sys.executable).with_name("ratchet"))


@dataclass
class Row:
    """One line of a benchmark table."""

    name: str
    value: float
    unit: str
    baseline: float | None = None
    target: str = ""
    ok: bool | None = None
    measured_ratio: float | None = None  # when the ratio is not value / baseline (medians)
    digits: int = 3  # decimals shown of the value and the baseline (0 for a count)

    @property
    def ratio(self) -> float | None:
        if self.measured_ratio is not None:
            return self.measured_ratio
        return None if not self.baseline else self.value / self.baseline


@dataclass
class Section:
    title: str
    what: str
    rows: list[Row] = field(default_factory=list)
    baseline_name: str = ""

    @classmethod
    def of(cls, title: str, doc: str | None, baseline_name: str) -> Section:
        """A section whose description is the first line of a benchmark module's ``doc``."""
        return cls(title, doc.strip().splitlines()[0] if doc else "", baseline_name=baseline_name)

    def markdown(self) -> str:
        lines = [f"## {self.title}", "", self.what, ""]
        lines += [
            f"| measurement | value | {self.baseline_name or 'baseline'} | ratio | target | met |",
            "|---|---:|---:|---:|---|---|",
        ]
        for r in self.rows:
            base = f"{r.baseline:.{r.digits}f} {r.unit}" if r.baseline is not None else ""
            ratio = f"{r.ratio:.2f}x" if r.ratio is not None else ""
            met = "" if r.ok is None else ("yes" if r.ok else "**no**")
            value = f"{r.value:.{r.digits}f} {r.unit}"
            lines.append(f"| {r.name} | {value} | {base} | {ratio} | {r.target} | {met} |")
        return "\n".join(lines) + "\n"


def best_of(fn: Callable[[], object], repeat: int = 5) -> float:
    """The median wall time of ``fn`` over ``repeat`` runs, in seconds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


@dataclass
class ChildRun:
    seconds: float
    max_rss_mb: float
    returncode: int
    stderr: str


def run_child(argv: Sequence[str]) -> ChildRun:
    """Run a command to its end: its wall time, and its own peak RSS (from ``os.wait4``)."""
    start = time.perf_counter()
    with open(os.devnull, "wb") as null:
        proc = subprocess.Popen(list(argv), stdout=null, stderr=subprocess.PIPE, cwd=ROOT)
        assert proc.stderr is not None
        err = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    elapsed = time.perf_counter() - start
    return ChildRun(elapsed, usage.ru_maxrss / 1024, proc.returncode, err.decode())
