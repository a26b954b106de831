"""Small helpers shared by the benchmarks: timing, child processes, and the report."""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import create_engine, text

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


# -- CPU time from /proc: a process's, and a PostgreSQL server's ------------------------------

TICK = 1e6 / os.sysconf("SC_CLK_TCK")  # µs per clock tick of /proc/<pid>/stat
POLL = 0.05  # seconds between two readings of the server's processes during a workload
#: A client backend's title: ``postgres: [CLUSTER: ]USER DATABASE HOST(PORT)|[local] ACTIVITY``.
_CLIENT = re.compile(r"\s(\S+)\s(?:\S+\(\d+\)|\[local\])(?:\s|$)")


def ticks(pid: int) -> int | None:
    """User + system clock ticks the process ``pid`` has used (all its threads), or None."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15 of stat


def children(parent: int) -> list[int]:
    """The processes whose parent is ``parent``, from every process's ``stat`` (the kernel's
    ``/proc/PID/task/PID/children`` may miss one while others are forked and reaped)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii") as stat:
                    if int(stat.read().rsplit(")", 1)[1].split()[1]) == parent:
                        found.append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    return found


def database_of(pid: int) -> str | None:
    """The database a PostgreSQL client backend serves (from its process title), or None for a
    process that is not a client backend (the checkpointer, the WAL writer, ...)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            title = cmdline.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return None
    found = _CLIENT.search(title)
    return found.group(1) if found else None


class ServerWatch:
    """The CPU ticks the PostgreSQL server spends while a workload runs: those of the backends
    serving ``database`` and those of the rest of the server (the postmaster and its background
    processes; other databases' backends are left out). A thread reads every process every
    ``POLL`` seconds, so that a backend that exits before the end is counted up to its last
    reading, and one that starts after the beginning from its first tick."""

    def __init__(self, postmaster: int, database: str) -> None:
        self.postmaster, self.database = postmaster, database
        self.start: dict[int, int] = {}
        self.last: dict[int, int] = {}
        self.kind: dict[int, str] = {}  # backend, background or other (another database's)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _read(self) -> dict[int, int]:
        seen = {}
        for pid in [self.postmaster, *children(self.postmaster)]:
            kind = self.kind.get(pid)
            if kind is None:
                database = None if pid == self.postmaster else database_of(pid)
                kind = self.kind[pid] = (
                    "background"
                    if database is None
                    else "backend"
                    if database == self.database
                    else "other"
                )
            used = ticks(pid) if kind != "other" else None
            if used is not None:
                seen[pid] = used
        return seen

    def begin(self) -> None:
        self.start = self._read()
        if not any(self.kind[pid] == "backend" for pid in self.start):
            raise RuntimeError(f"no backend serves {self.database} before the workload")
        self.last = dict(self.start)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.wait(POLL):
            self.last.update(self._read())

    def end(self) -> tuple[float, float, int]:
        """Stop watching: µs of CPU the backends of the database and the rest of the server
        spent since :meth:`begin`, and how many backends served the database meanwhile."""
        self._stop.set()
        self._thread.join()
        self.last.update(self._read())
        spent = {"backend": 0, "background": 0}
        for pid, ticks in self.last.items():
            spent[self.kind[pid]] += ticks - self.start.get(pid, 0)
        backends = sum(1 for pid in self.last if self.kind[pid] == "backend")
        return spent["backend"] * TICK, spent["background"] * TICK, backends


def postmaster_of(url: str) -> int | None:
    """The PostgreSQL server's postmaster (the parent of a backend of ours), when the server's
    processes are on this host and readable."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            backend = int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())
            try:
                with open(f"/proc/{backend}/stat", encoding="ascii") as stat:
                    pid = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                return None
            # while our backend lives: a server elsewhere may have a process of that number
            found = ticks(pid) is not None and backend in children(pid)
    finally:
        engine.dispose()
    return pid if found else None
