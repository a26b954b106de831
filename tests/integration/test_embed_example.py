"""The how-to "Embed Ratchet in an application", followed literally: its web application
(examples/embed/app.py) serves real HTTP requests on a local port, and its worker
(examples/embed/worker.py) runs in another process on the same store.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

import pytest

import ratchet_runner as ratchet

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "embed"
SPEC = ROOT / "specs" / "refund.yaml"


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def _load_app() -> ModuleType:
    found = importlib.util.spec_from_file_location("embed_app", EXAMPLE / "app.py")
    assert found is not None
    assert found.loader is not None
    module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)
    return module


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A practice home with the worlds of two refund examples (their orders, and T-90104's lost
    reply) seeded, as `ratchet run --example` would."""
    monkeypatch.setenv("RATCHET_HOME", str(tmp_path))
    monkeypatch.setenv("REFUND_SPEC", str(SPEC))
    monkeypatch.delenv("RATCHET_DB", raising=False)
    monkeypatch.delenv("RATCHET_NOW", raising=False)
    spec = ratchet.load_spec(SPEC)
    with ratchet.Session(home=tmp_path) as session:
        for name in ("T-90104", "T-90603"):
            session.world.seed(dict(spec.examples[name].world))
    return tmp_path


@pytest.fixture
def url(home: Path) -> Iterator[str]:
    server = make_server("127.0.0.1", 0, _load_app().app, handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def _ask(url: str, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url + path, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def _input(name: str) -> dict[str, Any]:
    return dict(ratchet.load_spec(SPEC).examples[name].input)


def test_the_application_starts_decides_and_shows_a_refund_made_once(url: str, home: Path) -> None:
    status, started = _ask(url, "POST", "/refunds", _input("T-90104"))
    assert (status, started["state"], started["status"]) == (201, "proposed", "waiting")

    again, same = _ask(url, "POST", "/refunds", _input("T-90104"))
    assert (again, same["run"]) == (200, started["run"])  # idempotent by business key

    refused, error = _ask(url, "POST", "/refunds/T-90104/approve", {"as": "i-1", "role": "intern"})
    assert (refused, error["code"]) == (422, "R401")

    status, approved = _ask(url, "POST", "/refunds/T-90104/approve", {"as": "a-7", "role": "agent"})
    assert (status, approved["state"], approved["status"]) == (200, "refunded", "done")

    status, shown = _ask(url, "GET", "/refunds/T-90104")
    assert status == 200
    assert any("reconcile found" in line for line in shown["trace"])  # the lost reply
    with ratchet.Session(home=home) as session:
        assert len(session.world.changes()) == 1  # one refund, although its reply was lost


def test_bad_requests_get_a_coded_error_and_change_nothing(url: str, home: Path) -> None:
    missing, error = _ask(url, "GET", "/refunds/T-404")
    assert (missing, error["code"]) == (404, "R302")
    bad = {k: v for k, v in _input("T-90104").items() if k != "amount"}
    status, error = _ask(url, "POST", "/refunds", bad)
    assert (status, error["code"]) == (422, "R400")  # the input does not fit the spec's schema
    assert "amount" in error["error"]
    with ratchet.Session(home=home) as session:
        assert session.store.list_runs(None, 10) == []


def test_the_worker_in_another_process_lapses_a_refund_nobody_approved(
    url: str, home: Path
) -> None:
    status, started = _ask(url, "POST", "/refunds", _input("T-90603"))
    assert (status, started["state"]) == (201, "proposed")

    later = str(time.time() + 73 * 3600)  # past the 72 h the spec waits for a decision
    worker = subprocess.run(
        [sys.executable, str(EXAMPLE / "worker.py"), "--once"],
        cwd=ROOT,
        env={**os.environ, "RATCHET_NOW": later},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert worker.returncode == 0, worker.stderr
    fired = json.loads(worker.stdout)["timers_fired"]
    assert [(t["event"], t["outcome"]) for t in fired] == [("expired", "fired")]

    status, shown = _ask(url, "GET", "/refunds/T-90603")
    assert (status, shown["state"], shown["status"]) == (200, "lapsed", "done")
    with ratchet.Session(home=home) as session:
        assert session.world.changes() == []  # nothing was refunded
