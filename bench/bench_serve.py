"""The HTTP API of ``ratchet serve`` against the same operations through the library directly.

The service is ``ratchet serve --port 0`` in a process of its own on 127.0.0.1, over a SQLite
store in a fresh home; the client is one ``httpx.Client`` on a kept-alive connection, one request
at a time. The library baseline runs in this process against the same store. A first round of
each, not counted, warms both up (the service makes a runner per thread of its pool, and each
reads the specs once).

- Reading a run: ``GET /api/runs/RUN`` (the run's summary: where it is and the decision it
  waits for) against ``views.run_summary(runner, store.resolve(RUN))``, over the same runs,
  alternating in rounds; requests/s each way, the ratio of the medians.
- Signalling: a signed webhook (``POST /hooks/bench``, Standard Webhooks) delivering
  ``parcel_received`` to a parcel return waiting for it, against ``commands.signal(...,
  drive=False)``; each signal moves a run of its own, so every one is a real delivery.
- The queue with 1,000 runs waiting for a decision: ``GET /api/queue?limit=50`` pages through
  them, and so does the console's queue page (``GET /queue``, signed in, 50 decisions rendered
  with their arguments and forms); the server-side time of each request (its ``Server-Timing``
  header), p50 and p95. Target: p95 under 300 ms.
"""

from __future__ import annotations

import base64
import json
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from bench.harness import RATCHET, ROOT, Row, Section
from ratchet_runner.engine import commands
from ratchet_runner.review.views import run_summary
from ratchet_runner.serve.operators import config_entry, new_token
from ratchet_runner.serve.webhooks import headers, secret_key
from ratchet_runner.session import Session
from ratchet_runner.spec.validate import load_spec

REFUND = ROOT / "specs" / "refund.yaml"
PARCEL = ROOT / "tests" / "fixtures" / "parcel.yaml"
SECRET = "whsec_" + base64.b64encode(b"the benchmark's own secret key!!").decode()
QUEUE_TARGET_MS = 300.0


@contextmanager
def service(tmp: Path, home: Path) -> Iterator[tuple[str, str]]:
    """``ratchet serve`` on a free port over ``home``'s store: its URL and an operator's token."""
    token, digest = new_token()
    config = tmp / "ratchet-serve.toml"
    config.write_text(
        config_entry("bench", ["agent"], digest)
        + '\n[[senders]]\nname = "bench"\nsecret_env = "BENCH_SECRET"\n'
    )
    env = {**os.environ, "RATCHET_HOME": str(home), "BENCH_SECRET": SECRET}
    for name in ("RATCHET_DB", "RATCHET_BINDINGS", "RATCHET_NOW"):
        env.pop(name, None)
    server = subprocess.Popen(
        [RATCHET, "serve", "--port", "0", "--config", str(config)],
        env=env,
        cwd=tmp,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stderr is not None
        line = server.stderr.readline()
        url = line.split("serving on ", 1)[1].split(" ", 1)[0]
        yield url, token
    finally:
        server.terminate()
        server.communicate(timeout=30)


def _refunds(session: Session, count: int, prefix: str) -> list[str]:
    """``count`` refunds waiting for an approval."""
    spec, text = load_spec(REFUND), REFUND.read_text(encoding="utf-8")
    runner = session.runner()
    made = []
    for i in range(count):
        data = {"ticket": f"{prefix}-{i}", "order": "LK-1", "amount": 5, "currency": "CAD"}
        result, _ = commands.start(runner, spec, text, {**data, "reason": "RFD-LATE"})
        made.append(result.run.id)
    return made


def _parcels(session: Session, count: int, prefix: str) -> list[str]:
    """``count`` parcel returns waiting for the carrier's scan."""
    spec, text = load_spec(PARCEL), PARCEL.read_text(encoding="utf-8")
    session.writable_world().seed(spec.examples["P-1"].world)
    runner = session.runner()
    made = []
    for i in range(count):
        data = {**spec.examples["P-1"].input, "ticket": f"{prefix}-{i}"}
        result, _ = commands.start(runner, spec, text, data)
        assert result.run.state == "awaiting", result.run
        made.append(result.run.id)
    return made


def _rate(seconds: list[float]) -> float:
    return 1.0 / statistics.median(seconds)


def _compared(label: str, unit: str, rounds: int, one: Callable[[str, int], float]) -> Row:
    """Operations per second over HTTP against the library's, ``one(way, round)`` timing a
    round of either (seconds per operation); which goes first alternates, and round -1 warms
    both up (not counted)."""
    over_http: list[float] = []
    direct: list[float] = []
    for round_ in range(-1, rounds):
        for way in ("http", "lib") if round_ % 2 == 0 else ("lib", "http"):
            each = one(way, round_)
            if round_ >= 0:
                (over_http if way == "http" else direct).append(each)
    return Row(label, _rate(over_http), unit, baseline=_rate(direct), digits=0)


def measure_reads(session: Session, http: httpx.Client, runs: list[str], rounds: int) -> Row:
    runner = session.runner()

    def one(way: str, _round: int) -> float:
        began = time.perf_counter()
        for run_id in runs:
            if way == "http":
                assert http.get(f"/api/runs/{run_id}").status_code == 200
            else:
                run_summary(runner, runner.store.resolve(run_id))
        return (time.perf_counter() - began) / len(runs)

    what = "reading a run: GET /api/runs/RUN vs views.run_summary in-process (requests/s)"
    return _compared(what, "req/s", rounds, one)


def measure_signals(session: Session, http: httpx.Client, batch: int, rounds: int) -> Row:
    runner = session.runner()
    key = secret_key(SECRET)

    def one(way: str, round_: int) -> float:
        runs = _parcels(session, batch, f"P-{way}-{round_}")
        began = time.perf_counter()
        for i, run_id in enumerate(runs):
            data = {"weight_kg": 1.0}
            if way == "http":
                body = json.dumps({"run": run_id, "event": "parcel_received", "data": data})
                sent = headers([key], f"m-{round_}-{i}", int(time.time()), body.encode())
                answer = http.post("/hooks/bench", content=body.encode(), headers=sent)
                assert answer.json().get("delivered") is True, answer.text
            else:
                result = commands.signal(
                    runner, run_id, "parcel_received", f"lib-{round_}-{i}", data, drive=False
                )
                assert result.changed
        return (time.perf_counter() - began) / batch

    what = "signalling: a signed webhook vs commands.signal in-process (signals/s)"
    return _compared(what, "signals/s", rounds, one)


def _percentiles(took: list[float], what: str) -> list[Row]:
    took.sort()
    p95 = took[min(len(took) - 1, int(len(took) * 0.95))]
    return [
        Row(f"{what}, server-side p50", took[len(took) // 2], "ms"),
        Row(
            f"{what}, server-side p95",
            p95,
            "ms",
            target=f"< {QUEUE_TARGET_MS:.0f} ms",
            ok=p95 < QUEUE_TARGET_MS,
        ),
    ]


def _served_for(response: httpx.Response) -> float:
    assert response.status_code == 200, response.text[:300]
    return float(response.headers["server-timing"].removeprefix("app;dur="))


def measure_queue(http: httpx.Client, pages: int) -> list[Row]:
    took: list[float] = []
    offset = 0
    for _ in range(pages):
        response = http.get(f"/api/queue?limit=50&offset={offset}")
        took.append(_served_for(response))
        offset = response.json()["next_offset"] or 0
    return _percentiles(took, "the queue (API), 1,000 decisions waiting: a page of 50")


def measure_queue_page(url: str, token: str, pages: int) -> list[Row]:
    """The console's queue page, signed in through its form, a page of 50 at a time."""
    with httpx.Client(base_url=url, timeout=30) as browser:
        form = browser.get("/login").text
        nonce = form.split('name="nonce" value="', 1)[1].split('"', 1)[0]
        signed_in = browser.post("/login", data={"nonce": nonce, "token": token})
        assert signed_in.status_code == 303, signed_in.text[:300]
        took = [_served_for(browser.get(f"/queue?offset={50 * (i % 20)}")) for i in range(pages)]
    return _percentiles(took, "the console's queue page, 1,000 decisions waiting: 50 rendered")


def run(quick: bool = False) -> Section:
    section = Section.of("The HTTP API against the library", __doc__, "library")
    reads, read_rounds = (50, 4) if quick else (200, 10)
    batch, signal_rounds = (20, 2) if quick else (50, 6)
    pages = 40 if quick else 200
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        home = tmp / "home"
        with Session(home=home, environ={}) as session:
            runs = _refunds(session, 1000, "T")
            with service(tmp, home) as (url, token):
                auth = {"authorization": f"Bearer {token}"}
                with httpx.Client(base_url=url, headers=auth, timeout=30) as http:
                    section.rows.append(measure_reads(session, http, runs[:reads], read_rounds))
                    section.rows.append(measure_signals(session, http, batch, signal_rounds))
                    section.rows += measure_queue(http, pages)
                section.rows += measure_queue_page(url, token, pages)
    return section
