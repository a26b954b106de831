"""Where a durable step's CPU time goes: a sampling profile of the steps benchmark's loop.

``python -m bench.bench_profile`` drives runs of the three-effect workflow
(``bench/specs/three_effects.yaml``, one runner, the no-op adapter) on a fresh SQLite file (or
``--store postgresql``) and samples the stack on CPU time (``ITIMER_PROF``, every 0.5 ms of the
process's CPU), so that a function is weighed by the CPU it burns, not by how often it is
called (cProfile's cost per call inflates code made of many small calls). It prints the top
functions by their own time (a C function, such as the driver's ``execute`` or the JSON
encoder, counts in the Python function that called it), each with its module's group, then the
groups' shares. ``--revision REV`` profiles that earlier version instead (exported as
``bench/bench_versions.py`` does), to set a profile before beside one after.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType

#: Where a sampled function's file lies, and the group it is counted in (first match wins).
GROUPS = (
    ("sqlalchemy/", "SQLAlchemy"),
    ("psycopg/", "psycopg"),
    ("ratchet_runner/store/", "Ratchet: the store"),
    ("ratchet_runner/engine/", "Ratchet: the engine"),
    ("ratchet_runner/", "Ratchet: other"),
    ("transitions/", "transitions"),
    ("celpy/", "CEL"),
    ("lark/", "CEL"),
    ("jsonschema/", "jsonschema"),
    ("json/", "json (the C encoder)"),
    ("dataclasses.py", "dataclasses"),
)
INTERVAL = 0.0005


def group(filename: str) -> str:
    for part, name in GROUPS:
        if part in filename:
            return name
    return "Python and the rest"


def _where(frame: FrameType) -> str:
    """A sampled frame's file, from its package (or the standard library's folder), and its
    function; the driver's ``execute`` of the hot path told apart by what it ran (a ``COMMIT``
    waits for the disk, the other statements do not)."""
    path, name = frame.f_code.co_filename, frame.f_code.co_name
    short = path.split("site-packages/")[-1]
    if "ratchet_runner/" in short:
        short = "ratchet_runner/" + short.split("ratchet_runner/", 1)[1]
    short = re.sub(r"^.*/lib/python3\.\d+/", "", short)
    if name in ("execute", "do_execute", "do_commit") and "ratchet_runner/" not in short:
        return f"{short}:{name}"
    if name == "execute" and short.endswith("store/compiled.py"):
        sql = str(frame.f_locals.get("sql", ""))
        name += " (COMMIT)" if sql.startswith("COMMIT") else " (the statements)"
    return f"{short}:{name}"


def profile(url: str, runs: int, top: int) -> str:
    """Drive ``runs`` runs on the store at ``url`` under the sampler; the report."""
    from ratchet_runner.adapters.noop import NoopAdapter
    from ratchet_runner.engine.runner import Runner
    from ratchet_runner.spec.validate import load_spec
    from ratchet_runner.store.store import Store

    spec_path = Path(__file__).resolve().parent / "specs" / "three_effects.yaml"
    store = Store(url)
    spec, text = load_spec(spec_path), spec_path.read_text(encoding="utf-8")
    runner = Runner(store, lambda _: NoopAdapter())
    for i in range(50):  # warm up: every statement prepared, every cache filled
        run, _ = runner.start(spec, text, {"key": f"W-{i}"})
        runner.advance(run)
    own: collections.Counter[str] = collections.Counter()
    groups: collections.Counter[str] = collections.Counter()

    def sample(_signal: int, frame: FrameType | None) -> None:
        if frame is not None:
            own[_where(frame)] += 1
            groups[group(frame.f_code.co_filename)] += 1

    signal.signal(signal.SIGPROF, sample)
    started, cpu = time.perf_counter(), time.process_time()
    signal.setitimer(signal.ITIMER_PROF, INTERVAL, INTERVAL)
    try:
        for i in range(runs):
            run, _ = runner.start(spec, text, {"key": f"K-{i}"})
            runner.advance(run)
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0, 0)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    store.close()
    samples = sum(own.values()) or 1
    steps = 3 * runs
    lines = [
        f"{runs} runs ({steps} steps): {steps / elapsed:.0f} steps/s under the sampler, "
        f"{cpu / steps * 1e6:.0f} µs of CPU per step, {samples} samples, "
        f"load {os.getloadavg()[0]:.1f}",
        "",
        "| share of CPU | function (own time) | group |",
        "|---:|---|---|",
    ]
    for where, count in own.most_common(top):
        name = where.rsplit(":", 1)
        lines.append(f"| {100 * count / samples:.1f} % | `{where}` | {group(name[0] + '/')} |")
    lines += ["", "| share of CPU | group |", "|---:|---|"]
    lines += [f"| {100 * n / samples:.1f} % | {name} |" for name, n in groups.most_common()]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_profile", description=__doc__)
    parser.add_argument("--store", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--runs", type=int, default=1500, help="runs sampled (default 1500)")
    parser.add_argument("--top", type=int, default=10, help="functions listed (default 10)")
    parser.add_argument("--revision", help="profile this earlier version of the code instead")
    args = parser.parse_args()
    if args.revision:
        from bench.bench_versions import export

        with tempfile.TemporaryDirectory(prefix="ratchet-profile-") as folder:
            tree = export(args.revision, Path(folder))
            # this file, run with the earlier version's code on the path (it may have none)
            argv = [sys.executable, str(Path(__file__).resolve()), "--store", args.store]
            argv += ["--runs", str(args.runs), "--top", str(args.top)]
            env = {**os.environ, "PYTHONPATH": str(tree)}
            return subprocess.run(argv, cwd=tree, env=env, check=False).returncode
    with tempfile.TemporaryDirectory(prefix="ratchet-profile-") as folder:
        if args.store == "sqlite":
            url = f"sqlite:///{Path(folder) / 'profile.db'}"
        else:
            from bench.bench_pool import _fresh_pg_database

            url = _fresh_pg_database("ratchet_bench_profile")
        print(profile(url, args.runs, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
