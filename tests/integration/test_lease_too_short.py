"""A lease too short for a spec, on SQLite and PostgreSQL: a configuration error of the process,
never a failure of the run.

* ``ratchet worker`` whose ``--lease`` is too short for the spec of a live run refuses to start
  (exit status 2, R206), claims nothing, and says which spec, which effect and which ``--lease``.
* A run whose spec needs a longer lease, met later (a spec version the worker did not see at its
  start), is left unchanged, its lease given back, to a worker whose lease is long enough: never
  parked with ``step_failed``; a pool warns once per spec version, ``--once --json`` lists it in
  ``left`` with the reason.
* A command whose ``--lease`` is too short keeps its own change and leaves the run to the workers,
  with a ``then:`` line that names the ``--lease`` it needs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from ratchet_runner.session import Session
from ratchet_runner.spec.validate import load_spec_text
from ratchet_runner.store.records import RunRecord
from ratchet_runner.store.store import Store
from ratchet_runner.store.tables import spec_versions
from ratchet_runner.worker.passes import lease_refusal, worker_pass
from ratchet_runner.worker.pool import Pool
from tests.conftest import PRACTICE_BINDING, SPECS, ratchet_process, run_cli, spec_and_text

REFUND = SPECS / "refund.yaml"
RETURNS = SPECS / "returns.yaml"

#: What a process with ``--lease 12`` is told of the refund spec (its effect: 10 s timeout).
REFUND_AT_12 = (
    "a call of refund's request_refund may take 10 s (its timeout): it needs --lease 13 or more "
    "(a lease is counted on for 90 % of its length, less 1 s of margin); this process leases "
    "runs for 12 s"
)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RATCHET_HOME", str(tmp_path / "home"))
    for name in ("RATCHET_DB", "RATCHET_BINDINGS", "RATCHET_NOW", "RATCHET_LEASE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path / "home"


def cli(capsys: pytest.CaptureFixture[str], store_url: str, *args: str) -> tuple[int, str, str]:
    """``ratchet ARGS...`` on ``store_url``, its adapters bound to the practice world."""
    return run_cli(capsys, *args, "--db", store_url, "--bindings", str(PRACTICE_BINDING))


def approved_refund(capsys: pytest.CaptureFixture[str], store_url: str) -> RunRecord:
    """The refund T-90104, approved and left to the workers: running, its next step the call."""
    code, _, err = cli(capsys, store_url, "run", str(REFUND), "--example", "T-90104")
    assert code == 0, err
    approve = ("approve", "T-90104", "--as", "agent-7", "--role", "agent", "--leave-to-workers")
    code, _, err = cli(capsys, store_url, *approve)
    assert code == 0, err
    run = read(store_url, lambda store: store.resolve("T-90104"))
    assert (run.state, run.status, run.lease_owner) == ("refunding", "running", None)
    return run


def read(store_url: str, what: Any) -> Any:
    store = Store(store_url)
    try:
        return what(store)
    finally:
        store.close()


def kinds(store_url: str, run_id: str) -> list[str]:
    return [e.kind for e in read(store_url, lambda store: store.history(run_id))]


def assert_left_unchanged(store_url: str, before: RunRecord) -> None:
    """The run as it was (a claim and its release aside): not parked, no lease left on it."""
    after = read(store_url, lambda store: store.get_run(before.id))
    assert (after.state, after.status) == (before.state, "running")
    assert after.context == before.context
    assert after.lease_owner is None  # given back at once, not left to run out
    assert "step_failed" not in kinds(store_url, before.id)


# -- a worker refuses at start ----------------------------------------------------------------


def test_a_worker_whose_lease_is_too_short_for_a_live_runs_spec_refuses_to_start(
    capsys: pytest.CaptureFixture[str], home: Path, store_url: str
) -> None:
    before = approved_refund(capsys, store_url)
    worker = ratchet_process(home, store_url, "worker", "--lease", "5", capture=True)
    try:
        _, err = worker.communicate(timeout=20)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
    assert worker.returncode == 2, err
    assert "ratchet: R206 " in err
    assert "spec refund v1" in err
    assert "refund's request_refund may take 10 s (its timeout)" in err
    assert "it needs --lease 13 or more" in err
    assert "this process leases runs for 5 s" in err
    assert "Traceback" not in err
    after = read(store_url, lambda store: store.get_run(before.id))
    assert after == before  # nothing claimed: not even the version moved


def test_worker_once_with_lease_12_on_the_approved_refund_says_it_needs_13(
    capsys: pytest.CaptureFixture[str], home: Path, store_url: str
) -> None:
    before = approved_refund(capsys, store_url)
    code, out, err = cli(capsys, store_url, "worker", "--once", "--lease", "12")
    assert code == 2, err
    assert out == ""
    assert err == (
        "ratchet: R206 --lease 12 is too short for spec refund v1, which live runs use: "
        f"{REFUND_AT_12}. Start the worker with --lease 13 or more; it claimed nothing\n"
    )
    assert read(store_url, lambda store: store.get_run(before.id)) == before
    code, out, err = cli(capsys, store_url, "worker", "--once", "--lease", "13", "--json")
    assert code == 0, err
    assert json.loads(out)["runs_advanced"] == [
        {"run": before.id, "state": "refunded", "status": "done"}
    ]


def test_a_live_run_whose_stored_spec_no_longer_builds_does_not_keep_a_worker_from_starting(
    capsys: pytest.CaptureFixture[str], home: Path, store_url: str
) -> None:
    broken = approved_refund(capsys, store_url)
    spec, text = spec_and_text("returns")  # needs --lease 13
    with Session(store_url, home=home, bindings=PRACTICE_BINDING, environ={}) as session:
        session.runner().start(spec, text, spec.examples["T-90604"].input)
        with session.store.engine.begin() as conn:
            conn.execute(
                update(spec_versions)
                .where(spec_versions.c.digest == broken.spec_digest)
                .values(text="name: broken\nstates: 3\n")
            )
        assert lease_refusal(session.runner(), 30.0) is None
        refused = lease_refusal(session.runner(), 12.0)
    assert refused is not None
    assert "spec returns v1, which live runs use" in str(refused)


# -- a spec met later -------------------------------------------------------------------------


def test_a_worker_pass_leaves_a_run_whose_spec_needs_a_longer_lease_unchanged(
    capsys: pytest.CaptureFixture[str], home: Path, store_url: str
) -> None:
    before = approved_refund(capsys, store_url)
    with Session(store_url, home=home, bindings=PRACTICE_BINDING, environ={}) as session:
        report = worker_pass(session.runner(), lease_seconds=12)
    assert report.failed == []
    assert report.advanced == []
    assert [run_id for run_id, _ in report.left] == [before.id]
    [(_, reason)] = report.left
    assert REFUND_AT_12 in reason
    assert_left_unchanged(store_url, before)
    with Session(store_url, home=home, bindings=PRACTICE_BINDING, environ={}) as session:
        report = worker_pass(session.runner(), lease_seconds=13)
    assert [(r.id, r.state) for r in report.advanced] == [(before.id, "refunded")]


def _returns_v2(timeout: str) -> tuple[str, Any]:
    """The returns spec as version 2, which moves older runs onto it (``revalidate``), its
    effects' timeouts set to ``timeout``."""
    _, text = spec_and_text("returns", timeout=timeout)
    bumped = text.replace("spec_version: 1", "spec_version: 2").replace(
        "policy_version: 1", "policy_version: 1\non_version_change: revalidate"
    )
    return bumped, load_spec_text(bumped)


def test_worker_once_json_lists_a_run_moved_onto_a_version_that_needs_a_longer_lease_in_left(
    capsys: pytest.CaptureFixture[str], home: Path, store_url: str
) -> None:
    spec, text = spec_and_text("returns", timeout="2s")  # needs (2 + 1) / 0.9: 3.3 s
    example = spec.examples["T-90604"]
    with Session(store_url, home=home, bindings=PRACTICE_BINDING, environ={}) as session:
        session.world.seed({"orders": example.world["orders"]})
        started, _ = session.runner().start(spec, text, example.input)
        newer_text, newer = _returns_v2("10s")  # needs 13 s
        session.store.save_spec(newer.digest, newer.name, 2, "1", newer_text, 0.0)
    code, out, err = cli(capsys, store_url, "worker", "--once", "--lease", "5", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["failed"] == []
    assert report["runs_advanced"] == []
    [left] = report["left"]
    assert left["run"] == started.id
    assert "a call of returns's create_label may take 10 s (its timeout)" in left["reason"]
    assert "it needs --lease 13 or more" in left["reason"]
    after = read(store_url, lambda store: store.get_run(started.id))
    assert (after.status, after.lease_owner, after.spec_digest) == ("running", None, newer.digest)
    assert "step_failed" not in kinds(store_url, started.id)


def test_a_pool_leaves_the_runs_of_a_spec_its_lease_is_too_short_for_and_warns_once(
    home: Path, store_url: str
) -> None:
    spec, text = spec_and_text("returns")  # 10 s timeouts: needs --lease 13
    example = spec.examples["T-90604"]
    lines: list[str] = []
    with Session(store_url, home=home, bindings=PRACTICE_BINDING, environ={}) as session:
        session.world.seed({"orders": example.world["orders"]})
        runner = session.runner()
        started = [
            runner.start(spec, text, {**example.input, "ticket": ticket})[0]
            for ticket in ("T-1", "T-2")
        ]
        pool = Pool(
            session.runner_factory(), concurrency=1, lease_seconds=5, poll=0.05, log=lines.append
        )
        report = pool.run(until_idle=True)
        assert session.world.calls() == []
    assert report.failed == []
    assert report.advanced == 0
    assert report.left_for_lease == 2
    for run in started:
        assert_left_unchanged(store_url, run)
    warned = [line for line in lines if "--lease 13 or more" in line]
    assert len(warned) == 1, lines
    assert "spec returns v1" in warned[0]
    assert "this process leases runs for 5 s" in warned[0]


# -- a command whose lease is too short -------------------------------------------------------


def test_a_command_whose_lease_is_too_short_keeps_its_change_and_leaves_the_run_to_workers(
    capsys: pytest.CaptureFixture[str], home: Path, store_url: str
) -> None:
    code, _, err = cli(capsys, store_url, "run", str(REFUND), "--example", "T-90104")
    assert code == 0, err
    approve = ("approve", "T-90104", "--as", "agent-7", "--role", "agent", "--lease", "12")
    code, out, err = cli(capsys, store_url, *approve)
    assert code == 0, err
    assert "agent-7 approved" in out
    assert (
        f"then: this command's --lease is too short for this run's spec: {REFUND_AT_12}; "
        "the run is left to the workers" in out
    )
    assert "waits for a person" not in out
    run = read(store_url, lambda store: store.resolve("T-90104"))
    assert (run.state, run.status, run.lease_owner) == ("refunding", "running", None)
    assert "step_failed" not in kinds(store_url, run.id)
    code, out, err = cli(capsys, store_url, "resume", "T-90104", "--lease", "12")
    assert code == 0, err
    assert f"then: this command's --lease is too short for this run's spec: {REFUND_AT_12}" in out
    assert_left_unchanged(store_url, run)
    code, out, err = cli(capsys, store_url, "worker", "--once", "--lease", "13", "--json")
    assert code == 0, err
    assert json.loads(out)["runs_advanced"] == [
        {"run": run.id, "state": "refunded", "status": "done"}
    ]
