"""Runs and bindings: which adapters a run may use, what it records, and who may drive it.

* A practice store runs a spec's adapters as their kinds, and the run records so.
* A store that is not a practice store refuses, before it creates the run, a spec whose adapters
  have no binding; so does any store a binding that does not cover the spec (an operation it
  lacks), and a ``kind: noop`` adapter bound to a real implementation without the opt-in: no run,
  no spec version, no change in the practice world, no call.
* A run records its binding's name and digest (context and first event); ``trace`` shows them.
* A command that would drive a run through another binding (or none) changes nothing; a worker
  with another binding leaves the run unchanged and unleased, to a worker that has it; a worker
  with no binding at all, on a store that is not a practice store, warns when it starts, parks
  the run with the reason, and still drives a run of a spec that declares no adapter.
Each on SQLite and PostgreSQL (the ``store_url`` fixture: stores that are not practice stores).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from ratchet_runner.adapters.practice import PracticeWorld
from ratchet_runner.binding.files import load
from ratchet_runner.session import Session
from ratchet_runner.spec.validate import load_spec
from ratchet_runner.store.records import RunRecord
from ratchet_runner.store.store import Store
from ratchet_runner.worker.pool import Pool
from tests.conftest import PRACTICE_BINDING, RATCHET, ROOT, SPECS
from tests.conftest import run_cli as run

RETURNS = SPECS / "returns.yaml"
REFUND = SPECS / "refund.yaml"
WELCOME = ROOT / "examples" / "plugin-mailer" / "welcome.yaml"
ORDER = {"order": "LK-645334", "item": "step ladder", "sku": "LADDER-3", "paid": 129.0}

#: A mailer for welcome.yaml, imported by a ``python`` binding from the test's own folder.
MAILER = """
from ratchet_runner import Done, NotFound


class Mailer:
    operations = ("send_email",)
    lookups = ("find_email",)

    def __init__(self, settings):
        self.settings = settings

    def call(self, request):
        return Done({"id": "msg-" + request.operation_id[:8]})

    def lookup(self, operation, operation_id, effect=""):
        return NotFound()
"""


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RATCHET_HOME", str(tmp_path / "home"))
    for name in ("RATCHET_DB", "RATCHET_BINDINGS", "RATCHET_NOW"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path / "home"


@pytest.fixture
def other_binding(tmp_path: Path) -> Path:
    """The practice binding under another name: another digest."""
    path = tmp_path / "other.toml"
    text = PRACTICE_BINDING.read_text(encoding="utf-8")
    path.write_text(text.replace('name = "practice"', 'name = "other"'), encoding="utf-8")
    return path


def _write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def _runs(url: str) -> list[RunRecord]:
    store = Store(url)
    try:
        return store.list_runs(None, 50)
    finally:
        store.close()


def _get(url: str, run_id: str) -> RunRecord:
    store = Store(url)
    try:
        return store.get_run(run_id)
    finally:
        store.close()


def _started(url: str, home: Path, binding: Path) -> RunRecord:
    """A returns run created under ``binding`` (not driven: no call made), its order seeded."""
    spec = load_spec(RETURNS)
    example = spec.examples["T-90604"]
    with Session(url, home=home, bindings=binding, environ={}) as session:
        session.world.seed({"orders": [{**ORDER, "currency": "CAD"}]})
        run_record, created = session.runner().start(
            spec, RETURNS.read_text(encoding="utf-8"), example.input
        )
    assert created
    assert run_record.status == "running"
    return run_record


def _run_returns(
    capsys: pytest.CaptureFixture[str], store_url: str, binding: Path
) -> tuple[int, str, str]:
    """``ratchet run`` of the returns example T-90604 on ``store_url`` under ``binding``."""
    args = ("run", str(RETURNS), "--example", "T-90604", "--db", store_url)
    return run(capsys, *args, "--bindings", str(binding))


def _json(text: str) -> Any:
    return json.loads(text)


# -- practice stores, and the others --------------------------------------------------------


def test_a_practice_store_runs_the_specs_kinds_and_the_run_says_so(
    capsys: pytest.CaptureFixture[str], home: Path
) -> None:
    code, out, err = run(capsys, "run", str(RETURNS), "--example", "T-90604", "--json")
    assert code == 0, err
    assert _json(out)["state"] == "labelled"
    code, out, _ = run(capsys, "trace", "T-90604/return_label", "--json")
    trace = _json(out)
    assert trace["binding"] == {"name": None, "digest": None}
    assert trace["events"][0]["binding"] == {"name": None, "digest": None}
    _, text, _ = run(capsys, "trace", "T-90604/return_label")
    assert "under the spec's own kinds (a practice store, no binding)" in text


def test_a_store_that_is_not_practice_refuses_an_unbound_adapter_before_the_run_exists(
    capsys: pytest.CaptureFixture[str], home: Path, store_url: str
) -> None:
    code, out, err = run(capsys, "run", str(RETURNS), "--example", "T-90604", "--db", store_url)
    assert code == 1
    assert out == ""
    assert f"{RETURNS}:25:3: B201 adapter 'warehouse' has no binding" in err
    assert "looked for --bindings FILE, $RATCHET_BINDINGS" in err
    assert "is not a practice store" in err
    assert "Traceback" not in err
    assert _runs(store_url) == []
    store = Store(store_url)
    try:
        assert store.latest_spec("returns") is None  # not even the spec was saved
    finally:
        store.close()
    assert PracticeWorld(home / "practice.db").calls() == []


def test_run_refuses_a_binding_that_lacks_an_operation_before_the_run_exists(
    capsys: pytest.CaptureFixture[str], home: Path, store_url: str, tmp_path: Path
) -> None:
    wrong = _write(
        tmp_path / "wrong.toml",
        """\
        [adapters.warehouse]
        implementation = "practice"
        service = "payments"
        """,
    )
    code, _, err = _run_returns(capsys, store_url, wrong)
    assert code == 1
    assert (
        f"{wrong}:1:1: B203 adapter 'warehouse' ('practice') does not implement operation " in err
    )
    assert "'create_label'" in err
    assert "'reship'" in err
    assert _runs(store_url) == []
    assert PracticeWorld(home / "practice.db").calls() == []


def test_a_noop_adapter_runs_on_a_real_implementation_only_with_the_opt_in(
    capsys: pytest.CaptureFixture[str],
    home: Path,
    store_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "test_mailer_module.py").write_text(MAILER, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    binding = """\
        [adapters.mailer]
        implementation = "python"
        factory = "test_mailer_module:Mailer"
        dedupe = true
        """
    refused = _write(tmp_path / "refused.toml", binding)
    args = ("run", str(WELCOME), "--example", "S-1001", "--db", store_url, "--bindings")
    code, _, err = run(capsys, *args, str(refused))
    assert code == 1
    assert f"{refused}:1:1: B202 adapter 'mailer' is of kind noop in the spec" in err
    assert _runs(store_url) == []
    opted = _write(tmp_path / "opted.toml", binding + "replaces_noop = true\n")
    code, out, err = run(capsys, *args, str(opted), "--json")
    assert code == 0, err
    assert (_json(out)["state"], _json(out)["status"]) == ("sent", "done")


# -- what a run records -----------------------------------------------------------------------


def test_a_run_records_its_bindings_name_and_digest_and_trace_shows_them(
    capsys: pytest.CaptureFixture[str], home: Path, store_url: str
) -> None:
    stamp = load(PRACTICE_BINDING).stamp
    code, _, err = _run_returns(capsys, store_url, PRACTICE_BINDING)
    assert code == 0, err
    [made] = _runs(store_url)
    assert made.context["binding"] == stamp
    code, out, _ = run(capsys, "trace", made.id, "--db", store_url, "--json")
    trace = _json(out)
    assert trace["binding"] == stamp
    assert trace["events"][0]["kind"] == "created"
    assert trace["events"][0]["binding"] == stamp
    _, text, _ = run(capsys, "trace", made.id, "--db", store_url)
    assert f"under binding 'practice' (sha256 {stamp['digest'][:12]}…)" in text


# -- who may drive a run ----------------------------------------------------------------------


def test_a_command_with_another_binding_or_none_changes_nothing(
    capsys: pytest.CaptureFixture[str], home: Path, store_url: str, other_binding: Path
) -> None:
    practice = str(PRACTICE_BINDING)
    code, _, err = run(
        capsys,
        "run",
        str(REFUND),
        "--example",
        "T-90104",
        "--db",
        store_url,
        "--bindings",
        practice,
    )
    assert code == 0, err
    [waiting] = _runs(store_url)
    approve = ("approve", "T-90104", "--as", "agent-7", "--role", "agent", "--db", store_url)
    code, _, err = run(capsys, *approve, "--bindings", str(other_binding))
    assert code == 1
    assert "R205 run " in err
    assert "started under binding 'practice'" in err
    assert "this process resolves adapters through binding 'other'" in err
    code, _, err = run(capsys, *approve)
    assert code == 1
    assert "R203 run " in err
    assert "no binding file was found" in err
    assert _get(store_url, waiting.id).version == waiting.version  # untouched
    code, out, err = run(capsys, *approve, "--bindings", practice, "--json")
    assert code == 0, err
    assert _json(out)["state"] == "refunded"


def test_a_worker_with_another_binding_leaves_the_run_unchanged_to_one_that_has_it(
    capsys: pytest.CaptureFixture[str], home: Path, store_url: str, other_binding: Path
) -> None:
    started = _started(store_url, home, PRACTICE_BINDING)
    worker = ("worker", "--once", "--db", store_url, "--json", "--bindings")
    code, out, err = run(capsys, *worker, str(other_binding))
    assert code == 0, err
    report = _json(out)
    assert report["left"] == [{"run": started.id, "reason": "it started under another binding"}]
    assert report["runs_advanced"] == []
    left = _get(store_url, started.id)
    assert (left.state, left.status, left.context) == (started.state, "running", started.context)
    assert left.lease_owner is None  # given back at once, not left to run out
    assert PracticeWorld(home / "practice.db").calls() == []
    code, out, err = run(capsys, *worker, str(PRACTICE_BINDING))
    assert code == 0, err
    assert _json(out)["runs_advanced"] == [
        {"run": started.id, "state": "labelled", "status": "done"}
    ]


def test_a_pool_with_another_binding_leaves_the_run_and_stops_claiming_it(
    home: Path, store_url: str, other_binding: Path
) -> None:
    started = _started(store_url, home, PRACTICE_BINDING)
    with Session(store_url, home=home, bindings=other_binding, environ={}) as session:
        pool = Pool(session.runner_factory(), concurrency=1, poll=0.05, log=lambda _line: None)
        report = pool.run(until_idle=True)
    assert (report.left, report.advanced, report.failed) == (1, 0, [])
    left = _get(store_url, started.id)
    assert (left.state, left.status, left.lease_owner) == (started.state, "running", None)


def test_a_worker_with_no_binding_parks_the_run_for_a_person_with_the_reason(
    capsys: pytest.CaptureFixture[str], home: Path, store_url: str
) -> None:
    started = _started(store_url, home, PRACTICE_BINDING)
    code, out, err = run(capsys, "worker", "--once", "--db", store_url, "--json")
    assert code == 0, err
    assert "warning: this worker, in " in err
    [(run_id, error)] = [(f["run"], f["error"]) for f in _json(out)["failed"]]
    assert run_id == started.id
    assert "no binding file was found" in error
    parked = _get(store_url, started.id)
    assert parked.status == "needs_person"
    assert parked.context["failed_step"]["code"] == "R203"
    assert PracticeWorld(home / "practice.db").calls() == []


# -- a worker that starts with no binding -----------------------------------------------------

#: A spec that declares no adapter: its runs need no binding, on any store.
NO_ADAPTERS = """\
name: greeting
title: Greet, calling nothing
spec_version: 1
policy_version: 1
business_key: input.ticket
start: greeting
input:
  type: object
  additionalProperties: false
  required: [ticket]
  properties:
    ticket: {type: string}
states:
  greeting: {kind: step}
  greeted:  {kind: success}
transitions:
  - {state: greeting, event: next, next_state: greeted}
"""
WARNING = "warning: this worker, in "


def test_a_worker_with_no_binding_on_a_store_that_is_not_practice_warns_and_goes_on(
    capsys: pytest.CaptureFixture[str], home: Path, store_url: str, tmp_path: Path
) -> None:
    greeting = tmp_path / "greeting.yaml"
    greeting.write_text(NO_ADAPTERS, encoding="utf-8")
    with Session(store_url, home=home, environ={}) as session:  # no binding: none is needed
        started, _ = session.runner().start(load_spec(greeting), NO_ADAPTERS, {"ticket": "T-1"})
    code, out, err = run(capsys, "worker", "--once", "--db", store_url, "--json")
    assert code == 0, err
    [warning] = err.splitlines()
    assert warning.startswith(WARNING)
    assert f"{WARNING}{tmp_path}, has no binding: no binding file was found (looked for " in warning
    assert "is not a practice store" in warning
    assert "whose spec declares adapters is parked for a person" in warning
    assert "runs of a spec without adapters are driven" in warning
    served = {"run": started.id, "state": "greeted", "status": "done"}
    assert _json(out)["runs_advanced"] == [served]  # a run that needs no binding


def test_a_pool_with_no_binding_on_a_store_that_is_not_practice_warns_once(
    home: Path, store_url: str
) -> None:
    lines: list[str] = []
    with Session(store_url, home=home, environ={}) as session:
        pool = Pool(session.runner_factory(), concurrency=3, poll=0.05, log=lines.append)
        pool.run(until_idle=True)
    warnings = [line for line in lines if "binding" in line]  # not how it wakes
    assert [line.split(": ", 1)[1][: len(WARNING)] for line in warnings] == [WARNING]
    assert warnings[0].startswith(f"worker {pool.owner}: ")


def test_a_worker_with_a_binding_or_on_a_practice_store_does_not_warn(
    capsys: pytest.CaptureFixture[str],
    home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    code, _, err = run(capsys, "worker", "--once")  # the default store: a practice store
    assert code == 0, err
    assert "warning" not in err
    db = ("--db", f"sqlite:///{tmp_path / 'not-practice.db'}")
    code, _, err = run(capsys, "worker", "--once", *db, "--bindings", str(PRACTICE_BINDING))
    assert code == 0, err
    assert "warning" not in err
    monkeypatch.setenv("RATCHET_BINDINGS", str(PRACTICE_BINDING))
    code, _, err = run(capsys, "worker", "--once", *db)
    assert code == 0, err
    assert "warning" not in err
    monkeypatch.delenv("RATCHET_BINDINGS")
    (tmp_path / "ratchet.toml").write_bytes(PRACTICE_BINDING.read_bytes())  # the working directory
    code, _, err = run(capsys, "worker", "--once", *db)
    assert code == 0, err
    assert "warning" not in err


def test_the_worker_command_warns_at_start_up_when_it_has_no_binding(
    home: Path, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("RATCHET_BINDINGS", "RATCHET_NOW")}
    env.update(RATCHET_HOME=str(home), RATCHET_DB=f"sqlite:///{tmp_path / 'not-practice.db'}")
    worker = subprocess.Popen(
        [RATCHET, "worker", "--poll", "0.1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        cwd=tmp_path,
        text=True,
    )
    watchdog = threading.Timer(60, worker.terminate)  # a worker that never says it: no hang
    watchdog.start()
    try:
        assert worker.stderr is not None
        first = worker.stderr.readline()  # its owner and threads
        second = worker.stderr.readline()
    finally:
        watchdog.cancel()
        worker.send_signal(signal.SIGTERM)
        _, rest = worker.communicate(timeout=60)
    assert first.startswith("worker ")
    assert second.startswith(f"{first.split(': ', 1)[0]}: {WARNING}{tmp_path}, has no binding")
    assert worker.returncode == 0, rest
    assert WARNING not in rest  # said once
