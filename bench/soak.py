"""The soak: ``python -m bench.soak [--runs 50] [--schedules 0] [--hogs CORES]`` (``make soak``).

Runs ``tests/integration/test_command_worker_race.py`` (an approving command and a worker racing
over a provider slow to commit, on SQLite and on PostgreSQL) ``--runs`` times with every core
kept busy by ``--hogs`` busy-looping processes at normal priority, which it starts and stops
itself. A race that passes once on a quiet machine can lose on a loaded one, where a process is
descheduled between two steps: that is the machine this repeats it on. It never stops at the
first failure; at the end it prints the runs, passes and failures per store, the load (the
1-minute load average sampled during the runs, and the share of a core each hog had), and every
failed run with its log. With ``--schedules N`` it then runs ``N`` schedules of the simulation
(``python -m bench.simulate``), whose clock is simulated: load changes only its speed, so it runs
after the hogs are stopped, on every core. Then, with the hogs started again, the booking
saga's migration is crash-checked (``ratchet check specs/booking.yaml --migrate-to
tests/fixtures/booking-v2.yaml --kill``: its apply and rollback killed at every commit and raced
at every run, on runs of each example left at every place; about four minutes on two cores;
``--no-migrations`` leaves it out). Exit status 1 if any run, schedule or migration case failed.

PostgreSQL is the one ``RATCHET_TEST_PG`` names (default: the local server at 127.0.0.1:5432,
database ``test``, user ``postgres``); a store whose test was skipped (no server) counts as not
passed. Run it from the repository's root, on a machine nothing else is using: it takes the cores.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from bench.harness import ROOT

RACE = Path("tests/integration/test_command_worker_race.py")
#: The migration checks of the soak, each the arguments of a ``ratchet check``: the booking
#: saga's (the refund's runs in CI, tests/integration/test_check_migration.py).
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    ("specs/booking.yaml", "--migrate-to", "tests/fixtures/booking-v2.yaml", "--kill"),
)
STORES = ("sqlite", "postgresql")
DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
#: Where the log of a failed run is kept (``bench/results/`` is not committed).
LOGS = ROOT / "bench" / "results" / "soak"
#: How long one run of the test file may take before it counts as failed, in seconds.
RUN_TIMEOUT = 600.0
#: How often the load average is sampled, in seconds.
SAMPLE_EVERY = 5.0

#: A hog: a busy loop that, told to stop (SIGTERM), says how much CPU it had in how long.
HOG = """
import signal, sys, time
began = time.monotonic()
def stop(*_):
    print(f"{time.process_time():.3f} {time.monotonic() - began:.3f}", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
while True:
    pass
"""


@dataclass
class Outcome:
    """One store's result in one run: ``passed``, ``failed``, ``error``, ``skipped`` or
    ``missing`` (no such test ran), how long it took, and the first line of what went wrong."""

    store: str
    status: str
    seconds: float = 0.0
    why: str = ""


@dataclass
class Run:
    number: int
    outcomes: dict[str, Outcome]
    log: Path | None = None  # kept only when a store did not pass

    @property
    def passed(self) -> bool:
        return all(o.status == "passed" for o in self.outcomes.values())


@dataclass
class Load:
    """The 1-minute load average, sampled in the background while the runs go on."""

    samples: list[float] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def sample(self) -> float | None:
        if not hasattr(os, "getloadavg"):
            return None
        now = os.getloadavg()[0]
        self.samples.append(now)
        return now

    def _loop(self) -> None:
        while not self._stop.wait(SAMPLE_EVERY):
            self.sample()

    @contextmanager
    def sampling(self) -> Iterator[Load]:
        self.sample()
        thread = threading.Thread(target=self._loop, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            thread.join()
            self.sample()

    def summary(self) -> str:
        if not self.samples:
            return "load average: not available on this system"
        mean = sum(self.samples) / len(self.samples)
        return (
            f"1-minute load average, {len(self.samples)} samples: min {min(self.samples):.2f}, "
            f"mean {mean:.2f}, max {max(self.samples):.2f} ({os.cpu_count()} cores)"
        )


@dataclass
class Hogs:
    """Busy-looping processes, one per core to load: started on entry, stopped on exit."""

    count: int
    processes: list[subprocess.Popen[str]] = field(default_factory=list)
    shares: list[float] = field(default_factory=list)  # of a core, each, as each said

    @contextmanager
    def running(self) -> Iterator[Hogs]:
        try:
            for _ in range(self.count):
                self.processes.append(
                    subprocess.Popen([sys.executable, "-c", HOG], stdout=subprocess.PIPE, text=True)
                )
            yield self
        finally:
            self._stop()

    def _stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                said, _ = process.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()
                continue
            cpu, wall = (float(x) for x in said.split()) if said.strip() else (0.0, 0.0)
            if wall > 0:
                self.shares.append(cpu / wall)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]

    def summary(self) -> str:
        if not self.count:
            return "no hogs: the cores were not loaded"
        shares = ", ".join(f"{share:.2f}" for share in self.shares) or "unknown"
        return f"{self.count} hog(s), busy loops at normal priority; share of a core each: {shares}"


def outcomes(report: Path, stores: Sequence[str]) -> dict[str, Outcome]:
    """Each store's outcome, from a JUnit XML report of the test file (its tests are
    parametrised by store: ``test_...[sqlite]``)."""
    found: dict[str, Outcome] = {}
    if report.exists():
        for case in ET.parse(report).getroot().iter("testcase"):
            match = re.search(r"\[([^\]]+)\]$", case.get("name", ""))
            if match is None or match.group(1) not in stores:
                continue
            status, why = "passed", ""
            for kind in ("failure", "error", "skipped"):
                element = case.find(kind)
                if element is not None:
                    status = "failed" if kind == "failure" else kind
                    why = (element.get("message") or element.text or "").strip()
                    why = why.splitlines()[0] if why else ""
                    break
            found[match.group(1)] = Outcome(
                match.group(1), status, float(case.get("time", 0.0)), why[:200]
            )
    return {store: found.get(store, Outcome(store, "missing")) for store in stores}


def _kill(process: subprocess.Popen[bytes]) -> None:
    """Kill ``process`` and what it started (its own session)."""
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def run_once(
    number: int, test: Path, env: dict[str, str], stores: Sequence[str], scratch: Path
) -> Run:
    """One run of the test file, every store: its outcomes, and its log if a store did not
    pass."""
    report, log = scratch / f"run-{number}.xml", scratch / f"run-{number}.log"
    argv = [
        sys.executable,
        "-m",
        "pytest",
        str(test),
        "-q",
        "-p",
        "no:cacheprovider",
        f"--junitxml={report}",
    ]
    with log.open("w", encoding="utf-8") as out:
        process = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            process.wait(RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            _kill(process)
        except BaseException:  # the soak is stopped: the test's processes go with it
            _kill(process)
            raise
    found = outcomes(report, stores)
    if process.returncode not in (0, 1) and all(o.status == "missing" for o in found.values()):
        why = f"pytest exited {process.returncode}" + (
            f" after {RUN_TIMEOUT:.0f} s" if process.returncode == -signal.SIGKILL else ""
        )
        found = {store: Outcome(store, "missing", why=why) for store in stores}
    result = Run(number, found)
    if not result.passed:
        LOGS.mkdir(parents=True, exist_ok=True)
        result.log = LOGS / f"run-{number:02d}.log"
        shutil.copyfile(log, result.log)
    return result


def simulate(schedules: int, workers: int, env: dict[str, str], out: TextIO) -> int:
    """The simulation's soak, its output passed through: its exit status."""
    argv = [
        sys.executable,
        "-m",
        "bench.simulate",
        "--schedules",
        str(schedules),
        "--workers",
        str(workers),
    ]
    print(f"$ python -m bench.simulate --schedules {schedules} --workers {workers}", file=out)
    out.flush()
    return subprocess.run(argv, cwd=ROOT, env=env, check=False).returncode


def check_migrations(
    checks: Sequence[Sequence[str]], hogs: int, env: dict[str, str], out: TextIO
) -> int:
    """Each migration check (the arguments of a ``ratchet check``) with ``hogs`` busy loops
    running, its output passed through: 1 if any failed."""
    ratchet = Path(sys.executable).parent / "ratchet"
    failed = 0
    hogging, load = Hogs(hogs), Load()
    with hogging.running(), load.sampling():
        for args in checks:
            print(f"$ ratchet check {' '.join(args)}", file=out, flush=True)
            done = subprocess.run(
                [str(ratchet), "check", *args], cwd=ROOT, env=env, text=True, capture_output=True
            )
            out.write(done.stdout + done.stderr)
            print(
                f"migration check: {'passed' if done.returncode == 0 else 'FAILED'} "
                f"(exit {done.returncode}); load: {load.summary()}",
                file=out,
                flush=True,
            )
            failed = failed or int(done.returncode != 0)
    return failed


def _shown(path: Path) -> Path:
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def _table(runs: list[Run], stores: Sequence[str]) -> list[str]:
    lines = [f"{'store':<12}{'runs':>6}{'passed':>8}{'failed':>8}"]
    for store in stores:
        passed = sum(r.outcomes[store].status == "passed" for r in runs)
        lines.append(f"{store:<12}{len(runs):>6}{passed:>8}{len(runs) - passed:>8}")
    return lines


def _line(run: Run, runs: int, load: float | None) -> str:
    parts = [
        f"{o.store} {o.status}" + (f" {o.seconds:.1f} s" if o.status != "missing" else "")
        for o in run.outcomes.values()
    ]
    shown = f" · load {load:.2f}" if load is not None else ""
    return f"run {run.number:>{len(str(runs))}}/{runs}  " + " · ".join(parts) + shown


def soak(
    runs: int,
    hogs: int,
    schedules: int = 0,
    workers: int = 2,
    test: Path = RACE,
    stores: Sequence[str] = STORES,
    out: TextIO = sys.stdout,
    migrations: Sequence[Sequence[str]] = (),
) -> int:
    """The soak (see the module's docstring): its exit status; ``migrations``: the migration
    checks to run last (``python -m bench.soak``: :data:`MIGRATIONS`)."""
    env = dict(os.environ)
    env.setdefault("RATCHET_TEST_PG", DEFAULT_PG)
    env["PYTHONUNBUFFERED"] = "1"
    print(
        f"soak: {test}, {runs} run(s) on {', '.join(stores)}, with {hogs} busy loop(s) on "
        f"{os.cpu_count()} core(s); PostgreSQL {env['RATCHET_TEST_PG']}",
        file=out,
        flush=True,
    )
    for old in LOGS.glob("run-*.log"):  # a failure of an earlier soak is not this one's
        old.unlink()
    done: list[Run] = []
    load, hogging = Load(), Hogs(hogs)
    began = time.monotonic()
    with tempfile.TemporaryDirectory() as scratch, hogging.running(), load.sampling():
        for number in range(1, runs + 1):
            done.append(run_once(number, test, env, stores, Path(scratch)))
            print(_line(done[-1], runs, load.sample()), file=out, flush=True)
    took = time.monotonic() - began
    lines = [
        "",
        f"{runs} run(s) in {took:.0f} s",
        *_table(done, stores),
        f"load: {load.summary()}",
        f"      {hogging.summary()}",
    ]
    failed = [r for r in done if not r.passed]
    if failed:
        lines.append(f"{len(failed)} failed run(s):")
        for r in failed:
            for o in r.outcomes.values():
                if o.status != "passed":
                    lines.append(
                        f"  run {r.number} {o.store}: {o.status}: {o.why or '(no message)'}"
                    )
            lines.append(f"    log: {_shown(r.log) if r.log else '-'}")
    else:
        lines.append("every run passed on every store")
    print("\n".join(lines), file=out, flush=True)
    status = 1 if failed else 0
    if schedules > 0:
        print("", file=out, flush=True)
        simulated = simulate(schedules, workers, env, out)
        print(
            f"simulation: {schedules:,} schedule(s): "
            + ("no invariant broken" if simulated == 0 else f"FAILED (exit {simulated})"),
            file=out,
            flush=True,
        )
        status = status or (1 if simulated else 0)
    if migrations:
        print("", file=out, flush=True)
        status = check_migrations(migrations, hogs, env, out) or status
    return status


def main(argv: list[str] | None = None) -> int:
    cores = os.cpu_count() or 1
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    parser.add_argument("--runs", type=int, default=50, help="runs of the race test (50)")
    parser.add_argument(
        "--schedules", type=int, default=0, help="then this many simulation schedules (0: none)"
    )
    parser.add_argument(
        "--hogs", type=int, default=cores, help=f"busy loops to load the cores with ({cores})"
    )
    parser.add_argument(
        "--workers", type=int, default=cores, help=f"simulation processes ({cores})"
    )
    parser.add_argument("--test", type=Path, default=RACE, help=f"the test file ({RACE})")
    parser.add_argument(
        "--no-migrations",
        action="store_true",
        help="leave out the booking saga's migration check (ratchet check --migrate-to --kill)",
    )
    args = parser.parse_args(argv)
    if args.runs < 0 or args.schedules < 0 or args.hogs < 0 or args.workers < 1:
        parser.error("--runs, --schedules and --hogs take 0 or more, --workers 1 or more")
    # SIGTERM ends the soak as Ctrl-C does: the hogs are stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    checks = () if args.no_migrations else MIGRATIONS
    return soak(args.runs, args.hogs, args.schedules, args.workers, args.test, migrations=checks)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
