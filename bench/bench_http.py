"""Durable steps over HTTP against in-process, and the HTTP adapter's cost against bare httpx.

The server is ``ratchet practice serve --port 0`` in a process of its own on 127.0.0.1, over the
practice database the in-process runs use too, so a call's own work (its SQLite transactions,
the changes it records) is the same both ways and only the way to it differs.

Steps: runs of the three-effect workflow (``bench/specs/three_effects.yaml``) on a SQLite store,
through a binding either way: in-process, its adapter bound to the practice world's ``noop``
service (``implementation = "practice"``: the practice world called directly); over HTTP, bound
to the HTTP adapter against the server's ``/noop`` routes (a POST with an ``Idempotency-Key`` per
effect). The two alternate for several rounds (which goes first alternates too); the ratio is
HTTP ÷ in-process, the median of the per-round ratios.

Adapter overhead: the same operation, a POST of the same JSON body with a fresh
``Idempotency-Key`` each time (so the server records a change every time) and the JSON reply
read, made N times through ``HttpAdapter.call(Call(...))`` and N times through a bare
``httpx.Client.post`` on a kept-alive connection, alternating in rounds (which goes first
alternates too); each round's median call, then the medians of the rounds. Target: the
adapter takes at most 1.20x the time of bare httpx. The server runs in another process, so
this process's CPU time per call is the client's own: it is reported beside the wall time.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx

from bench.bench_steps import SPEC
from bench.bench_steps import drive_runs as step_rate
from bench.harness import RATCHET, ROOT, Row, Section
from ratchet_runner.adapters.base import Call, Done
from ratchet_runner.adapters.http import HttpAdapter
from ratchet_runner.engine.runner import Runner
from ratchet_runner.session import Session
from ratchet_runner.spec.validate import load_spec

TARGET_RATIO = 1.20
#: The spec's one adapter and its operation, and the practice service that serves them.
ADAPTER, OPERATION, SERVICE = "nothing", "touch", "noop"

IN_PROCESS_BINDING = f"""name = "bench-practice"
[adapters.{ADAPTER}]
implementation = "practice"
"""

HTTP_BINDING = f"""name = "bench-http"
[adapters.{ADAPTER}]
implementation = "http"
replaces_noop = true
base_url = "{{url}}/{SERVICE}"

[adapters.{ADAPTER}.operations.{OPERATION}]
path = "/{OPERATION}"
receipt_field = "id"

[adapters.{ADAPTER}.lookups.lookup]
by = "endpoint"
path = "/operations/{{{{operation_id}}}}"
receipt_field = "id"
not_found_pointer = "/error/code"
not_found_equals = "not_found"
"""


@contextmanager
def practice_server(home: Path) -> Iterator[str]:
    """``ratchet practice serve`` on a free port of 127.0.0.1 over ``home``'s practice world, in
    a process of its own; yields its base URL and stops it (SIGTERM) on exit."""
    env = {k: v for k, v in os.environ.items() if k not in ("RATCHET_DB", "RATCHET_NOW")}
    env["RATCHET_HOME"] = str(home)
    log = home / "server.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [RATCHET, "practice", "serve", "--port", "0", "--json"],
            stdout=subprocess.PIPE,
            stderr=err,
            cwd=ROOT,
            env=env,
            start_new_session=True,  # a Ctrl-C or a group's signal stops the benchmark, not it
        )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            proc.wait(10)
            raise RuntimeError(f"the practice server did not start: {log.read_text()[-500:]}")
        yield str(json.loads(line)["url"])
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# -- durable steps ----------------------------------------------------------------------------


def measure_steps(tmp: Path, home: Path, url: str, runs: int, rounds: int) -> Row:
    """In-process and over HTTP alternating ``rounds`` times (which goes first alternates too),
    each on a store of its own, its runner's adapter resolved through its binding."""
    spec, spec_text = load_spec(SPEC), SPEC.read_text(encoding="utf-8")
    bindings = {"in-process": IN_PROCESS_BINDING, "http": HTTP_BINDING.format(url=url)}
    rates: dict[str, list[float]] = {name: [] for name in bindings}
    ratios = []
    with ExitStack() as stack:
        runners: dict[str, Runner] = {}
        for name, text in bindings.items():
            path = tmp / f"{name}.toml"
            path.write_text(text, encoding="utf-8")
            db = f"sqlite:///{tmp / f'{name}.db'}"
            session = stack.enter_context(Session(db, home=home, bindings=path, environ={}))
            runners[name] = session.runner()
            step_rate(runners[name], spec, spec_text, 3)  # warm: the connections, the imports
        for r in range(rounds):
            order = list(runners) if r % 2 == 0 else list(reversed(runners))
            for name in order:
                rates[name].append(step_rate(runners[name], spec, spec_text, runs))
            ratios.append(rates["http"][-1] / rates["in-process"][-1])
    return Row(
        "durable effect steps/s over HTTP (HTTP adapter → practice server) vs in-process "
        f"(practice world called directly); three-effect workflow, SQLite store; {rounds} "
        f"rounds of {runs} runs each way; medians of the rounds; ratio = median of the "
        "per-round ratios",
        statistics.median(rates["http"]),
        "steps/s",
        statistics.median(rates["in-process"]),
        measured_ratio=statistics.median(ratios),
    )


# -- the adapter's overhead per call ------------------------------------------------------------


def _adapter_call(adapter: HttpAdapter, args: dict[str, Any]) -> Callable[[str], None]:
    def call(key: str) -> None:
        outcome = adapter.call(Call(OPERATION, key, args, timeout=10.0))
        assert isinstance(outcome, Done), outcome
        assert outcome.receipt["id"] == key, outcome

    return call


def _bare_call(client: httpx.Client, url: str, args: dict[str, Any]) -> Callable[[str], None]:
    def call(key: str) -> None:
        headers = {"Idempotency-Key": key, "Accept": "application/json"}
        reply = client.post(url, json=args, headers=headers)
        assert reply.status_code == 200, reply.text
        assert reply.json()["id"] == key, reply.text

    return call


def measure_calls(url: str, calls: int, rounds: int) -> list[Row]:
    """µs per call through the adapter and through bare httpx, alternating in ``rounds`` of
    ``calls`` calls each: a round's wall figure is its median call (a slow disk's outliers
    left out), its CPU figure its mean; then the medians of the rounds."""
    settings = {
        "base_url": f"{url}/{SERVICE}",
        "operations": {OPERATION: {"path": f"/{OPERATION}", "receipt_field": "id"}},
    }
    # keys in sorted order: httpx encodes json= compactly in the order given, the adapter with
    # sorted keys, so both send the same bytes
    args = {"key": "bench", "n": 1}
    prefix = f"c{time.time_ns()}"
    wall: dict[str, list[float]] = {"adapter": [], "httpx": []}
    cpu: dict[str, list[float]] = {"adapter": [], "httpx": []}
    ratios, cpu_ratios = [], []
    with (
        HttpAdapter.from_data(settings, name=ADAPTER) as adapter,
        httpx.Client(timeout=10.0) as client,
    ):
        ways = {
            "adapter": _adapter_call(adapter, args),
            "httpx": _bare_call(client, f"{url}/{SERVICE}/{OPERATION}", args),
        }
        for name, way in ways.items():  # warm: the connection, the first call's imports
            for i in range(5):
                way(f"{prefix}-warm-{name}-{i}")
        for r in range(rounds):
            order = list(ways) if r % 2 == 0 else list(reversed(ways))
            for name in order:
                way, times = ways[name], []
                start_cpu = time.process_time()
                for i in range(calls):
                    start = time.perf_counter()
                    way(f"{prefix}-{r}-{name}-{i}")
                    times.append(time.perf_counter() - start)
                cpu[name].append((time.process_time() - start_cpu) / calls * 1e6)
                wall[name].append(statistics.median(times) * 1e6)
            ratios.append(wall["adapter"][-1] / wall["httpx"][-1])
            cpu_ratios.append(cpu["adapter"][-1] / cpu["httpx"][-1])
    ratio = statistics.median(ratios)
    how = f"{rounds} rounds of {calls} calls each way; ratio = median of the per-round ratios"
    return [
        Row(
            "HTTP adapter `call(Call(...))` vs bare `httpx.Client.post`, wall µs per call "
            "(median call of a round, median of the rounds): a POST with a fresh "
            f"Idempotency-Key and the same JSON body, JSON reply read; {how}",
            statistics.median(wall["adapter"]),
            "µs",
            statistics.median(wall["httpx"]),
            f"<= {TARGET_RATIO:.2f}x",
            ratio <= TARGET_RATIO,
            measured_ratio=ratio,
        ),
        Row(
            "the same calls, this process's CPU µs per call (the client's own work: the server "
            f"is another process; mean of a round, median of the rounds); {how}",
            statistics.median(cpu["adapter"]),
            "µs",
            statistics.median(cpu["httpx"]),
            measured_ratio=statistics.median(cpu_ratios),
        ),
    ]


def run(quick: bool = False) -> Section:
    section = Section.of("Durable steps over HTTP, and the HTTP adapter's overhead", __doc__, "")
    runs, step_rounds = (5, 6) if quick else (10, 40)
    calls, call_rounds = (10, 10) if quick else (10, 150)
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        home = tmp / "home"
        home.mkdir()
        with practice_server(home) as url:
            section.rows.append(measure_steps(tmp, home, url, runs, step_rounds))
            section.rows += measure_calls(url, calls, call_rounds)
    return section
