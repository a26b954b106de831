"""The signal → effect path, commit by commit: where a wake-up's milliseconds go.

``python -m bench.trace_wake`` starts worker processes (:mod:`bench.wake_child`, woken by
notifications) on a fresh PostgreSQL database, sends signals one at a time through the library
(``signal(..., drive=False)``, spaced so that each is handled before the next), and times, for
each, the moments that make up its latency, each read where it happens (all clocks are this
host's):

1. the signal's commit (the sender's ``signal`` call);
2. its wake-up reaching a worker (the worker's bell rung by its listening connection);
3. the claim's statement sent, and its answer (a worker may first look for due timers);
4. the write-ahead commit of the effect, sent and answered;
5. the call reaching the provider.

Each worker times its own statements by listening to its store's engine (which sends them
through SQLAlchemy rather than the driver: a little slower than a worker that is not traced).
The report gives each step's median and 99th percentile, from the previous moment, over the
signals; the load average is printed beside them. Not in ``python -m bench``: a diagnosis.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import threading
import time

from bench.bench_pool import _fresh_pg_database
from bench.bench_wake import _runner, spawn
from ratchet_runner.engine import commands
from ratchet_runner.session import Session

#: The moments of a signal's path, in order, as the report names them.
STEPS = (
    ("signal committed", "sent"),
    ("wake-up rung in a worker", "rung"),
    ("claim sent", "claim>"),
    ("claim answered", "claim<"),
    ("write-ahead sent", "ahead>"),
    ("write-ahead committed", "ahead<"),
    ("call at the provider", "called"),
)


def child(url: str) -> None:
    """A worker process that prints ``trace KIND TIME`` for each moment it sees (its bell rung,
    a claim or a write-ahead sent or answered, a call) and otherwise runs as
    :mod:`bench.wake_child` does."""
    from sqlalchemy import event

    from bench import wake_child
    from ratchet_runner.store import bell as bells
    from ratchet_runner.store.store import Store

    lock = threading.Lock()

    def say(kind: str) -> None:
        at = time.time()
        with lock:  # one write: another thread's print may fall between its own two writes
            sys.stdout.write(f"trace {kind} {at!r}\n")
            sys.stdout.flush()

    ring = bells.Bell.ring

    def rung(self: bells.Bell) -> None:
        say("rung")
        ring(self)

    bells.Bell.ring = rung  # type: ignore[method-assign]
    opened = Store.__init__

    def traced(self: Store, *args: object, **kwargs: object) -> None:
        opened(self, *args, **kwargs)  # type: ignore[arg-type]

        def before(_c: object, _cur: object, sql: str, *_rest: object) -> None:
            kind = _kind(sql)
            if kind:
                say(f"{kind}>")

        def after(_c: object, _cur: object, sql: str, *_rest: object) -> None:
            kind = _kind(sql)
            if kind:
                say(f"{kind}<")

        event.listen(self.engine, "before_cursor_execute", before)
        event.listen(self.engine, "after_cursor_execute", after)

    Store.__init__ = traced  # type: ignore[method-assign]
    wake_child.main(url, "wake")


def _kind(sql: str) -> str:
    """Which of the path's statements ``sql`` is: a claim, a write-ahead commit, or neither."""
    if "SKIP LOCKED" in sql or (sql.startswith("SELECT runs.") and "LIMIT" in sql):
        return "claim"
    if sql.startswith(("WITH cas AS", "UPDATE runs SET spec_digest")):
        return "ahead"
    return ""


#: A moment a traced worker printed: ``trace KIND TIME`` or ``called KEY TIME``.
_MOMENT = re.compile(r"(trace|called) (\S+) (\d+\.\d+)")


class Traced:
    """``count`` traced worker processes on ``url``, and the moments each printed."""

    def __init__(self, url: str, count: int) -> None:
        self.moments: list[tuple[float, str, str]] = []  # (time, kind, key for a call)
        self._lock = threading.Lock()
        self.children = spawn(["-m", "bench.trace_wake", "--child", url], count)
        self._ready = [threading.Event() for _ in self.children]
        for worker, ready in zip(self.children, self._ready, strict=True):
            threading.Thread(target=self._read, args=(worker, ready), daemon=True).start()
        for ready in self._ready:
            if not ready.wait(60):
                self.stop()
                raise RuntimeError("a traced worker did not say it was ready within 60 s")

    def _read(self, worker: subprocess.Popen[str], ready: threading.Event) -> None:
        assert worker.stdout is not None
        for line in worker.stdout:
            # Threads of the worker print: one's line may fall inside another's (a print is two
            # writes), so each moment is found wherever it is in the line.
            if "ready" in line:
                ready.set()
            with self._lock:
                for what, name, at in _MOMENT.findall(line):
                    if what == "trace":
                        self.moments.append((float(at), name, ""))
                    else:
                        self.moments.append((float(at), "called", name))

    def called(self, key: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if any(k == key for _, kind, k in self.moments if kind == "called"):
                    return True
            time.sleep(0.002)
        return False

    def stop(self) -> None:
        for worker in self.children:
            if worker.stdin is not None:
                worker.stdin.close()
        for worker in self.children:
            try:
                worker.wait(timeout=60)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()


def trace(url: str, workers: int, signals: int, spacing: float) -> list[str]:
    """Send ``signals`` signals and time each one's path; the report's lines."""
    gaps: dict[str, list[float]] = {name: [] for name, _ in STEPS}
    totals: list[float] = []
    with Session(url) as session:
        runner, start = _runner(session)
        start(f"warm{time.time_ns()}", "waiting")  # the store made before the workers open it
        traced = Traced(url, workers)
        try:
            for i in range(signals):
                key = f"trace{time.time_ns()}-{i}"
                run_id = start(key, "waiting")
                time.sleep(spacing)  # the creation's own wake-ups have settled
                with traced._lock:
                    traced.moments.clear()
                sent = time.time()
                commands.signal(runner, run_id, "go", f"{key}-go", drive=False)
                committed = time.time()
                if not traced.called(key, 30.0):
                    raise RuntimeError(f"the call of {key} never came")
                with traced._lock:
                    seen = sorted(traced.moments)
                at = {"sent": committed}
                for moment, kind, _ in seen:
                    at.setdefault(kind, moment)  # the first of each: the path's own
                previous = sent
                for name, kind in STEPS:
                    moment = at.get(kind)
                    if moment is None or moment < previous:
                        continue
                    gaps[name].append((moment - previous) * 1000)
                    previous = moment
                totals.append((at.get("called", previous) - sent) * 1000)
        finally:
            traced.stop()
    lines = [
        f"{signals} signals, {workers} worker process(es), load {os.getloadavg()[0]:.1f}",
        "| step (from the one before) | p50 | p99 | seen |",
        "|---|---:|---:|---:|",
    ]
    for name, _ in STEPS:
        values = sorted(gaps[name])
        if values:
            p99 = values[max(0, round(0.99 * len(values)) - 1)]
            lines.append(
                f"| {name} | {statistics.median(values):.2f} ms | {p99:.2f} ms | {len(values)} |"
            )
    ordered = sorted(totals)
    p99 = ordered[max(0, round(0.99 * len(ordered)) - 1)]
    lines.append(f"| **signal → call** | {statistics.median(ordered):.2f} ms | {p99:.2f} ms | |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.trace_wake", description=__doc__)
    parser.add_argument("--child", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=4, help="worker processes (default 4)")
    parser.add_argument("--signals", type=int, default=100, help="signals sent (default 100)")
    parser.add_argument("--spacing", type=float, default=0.05, help="seconds between two")
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return 0
    url = _fresh_pg_database("ratchet_bench_trace")
    print("\n".join(trace(url, args.workers, args.signals, args.spacing)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
