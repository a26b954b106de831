"""A worker killed at any point of an effect call recovers without making the change twice.

Real processes, real parts: each test drives the installed ``ratchet`` command with
``RATCHET_HOME`` in ``tmp_path`` (its SQLite store and practice world). ``--interrupt POINT``
ends the process with SIGKILL at that point of the effect call — no cleanup, no ``finally`` —
and ``ratchet resume`` picks the run up in a new process. What the world holds is read back
through ``ratchet effects --json``, the history through ``ratchet trace RUN --json``.

The two workflows and the fault their example injects into the first call:

* ``refund`` T-90104 (approval first): the provider makes the refund and the reply is lost;
* ``returns`` T-90604 (no approval): the label request is lost before the warehouse writes it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ratchet_runner.store.records import OperationRecord
from ratchet_runner.store.store import Store
from tests.conftest import PRACTICE_BINDING, ROOT

pytestmark = pytest.mark.slow

RATCHET = str(Path(sys.executable).with_name("ratchet"))
KILLED = -signal.SIGKILL


@dataclass
class Ratchet:
    """The ``ratchet`` command with its own home (store and practice world)."""

    home: Path
    db: str | None = None

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k not in ("RATCHET_DB", "RATCHET_DEBUG")}
        env["RATCHET_HOME"] = str(self.home)
        if self.db is not None:
            env["RATCHET_DB"] = self.db
            env["RATCHET_BINDINGS"] = str(PRACTICE_BINDING)
        return subprocess.run(
            [RATCHET, *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def ok(self, *args: str) -> subprocess.CompletedProcess[str]:
        result = self(*args)
        assert result.returncode == 0, f"ratchet {' '.join(args)}: {result.stderr}"
        return result

    def killed(self, *args: str, at: str) -> None:
        result = self(*args, "--interrupt", at)
        assert result.returncode == KILLED, (result.returncode, result.stderr)
        assert f"interrupted at {at}" in result.stderr

    def json(self, *args: str) -> Any:
        return json.loads(self.ok(*args, "--json").stdout)

    def effects(self) -> dict[str, Any]:
        return dict(self.json("effects"))

    def trace(self, run_id: str) -> dict[str, Any]:
        """The run (its status) and its events."""
        return dict(self.json("trace", run_id))

    def operations(self, run_id: str) -> list[OperationRecord]:
        store = Store(self.db or f"sqlite:///{self.home / 'ratchet.db'}")
        try:
            return store.operations(run_id)
        finally:
            store.close()


def sent(effects: dict[str, Any]) -> list[dict[str, Any]]:
    """The calls that asked for a change (not lookups)."""
    return [c for c in effects["calls"] if not c["operation"].startswith("lookup")]


def lookups(effects: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in effects["calls"] if c["operation"].startswith("lookup")]


@dataclass(frozen=True)
class Workflow:
    spec: str
    example: str
    approval: bool

    def crash(self, ratchet: Ratchet, at: str) -> str:
        """Start the example and kill the process that makes the effect call, at ``at``."""
        if self.approval:
            waiting = ratchet.json("run", self.spec, "--example", self.example)
            assert waiting["status"] == "waiting"
            run_id = str(waiting["run"])
            ratchet.killed("approve", run_id, "--as", "agent-7", "--role", "agent", at=at)
            return run_id
        ratchet.killed("run", self.spec, "--example", self.example, at=at)
        (run,) = ratchet.json("runs")
        return str(run["run"])


REFUND = Workflow("specs/refund.yaml", "T-90104", approval=True)
RETURNS = Workflow("specs/returns.yaml", "T-90604", approval=False)
BOTH = pytest.mark.parametrize("workflow", [REFUND, RETURNS], ids=["refund", "returns"])


def reconciled_not_found_then_called_again(events: list[dict[str, Any]], op_id: str) -> bool:
    """A reconcile that found nothing, followed by a call under the same operation ID."""
    for i, event in enumerate(events):
        if event["kind"] == "reconcile_not_found" and event["operation_id"] == op_id:
            later = events[i + 1 :]
            return any(e["kind"] == "call" and e["operation_id"] == op_id for e in later)
    return False


@BOTH
def test_a_kill_before_the_write_is_reconciled_as_not_found_then_called_with_the_same_id(
    workflow: Workflow, tmp_path: Path
) -> None:
    ratchet = Ratchet(tmp_path)
    run_id = workflow.crash(ratchet, "before-write")

    (pending,) = ratchet.operations(run_id)
    assert (pending.status, pending.attempts) == ("pending", 1)
    after_kill = ratchet.effects()
    assert after_kill["changes"] == []
    assert sent(after_kill) == []  # the kill came before the request left

    attempts = [pending.attempts]
    for _ in range(2):
        ratchet.ok("resume", run_id)
        (op,) = ratchet.operations(run_id)
        attempts.append(op.attempts)
    assert attempts == sorted(attempts)  # a count on record never goes back down

    effects = ratchet.effects()
    (change,) = effects["changes"]
    assert change["operation_id"] == pending.operation_id
    assert {c["operation_id"] for c in effects["calls"]} == {pending.operation_id}
    trace = ratchet.trace(run_id)
    assert trace["status"] == "done"
    assert reconciled_not_found_then_called_again(trace["events"], pending.operation_id)
    assert op.status == "done"
    if workflow.approval:
        assert [e["kind"] for e in trace["events"]].count("approved") == 1


def test_a_kill_after_the_provider_wrote_is_reconciled_as_found_and_never_called_again(
    tmp_path: Path,
) -> None:
    """refund T-90104: the refund is made, then the worker dies before it hears the reply."""
    ratchet = Ratchet(tmp_path)
    run_id = REFUND.crash(ratchet, "after-write")
    (pending,) = ratchet.operations(run_id)
    assert pending.status == "pending"
    assert len(ratchet.effects()["changes"]) == 1  # the provider made it; nobody knows yet

    ratchet.ok("resume", run_id)
    ratchet.ok("resume", run_id)

    effects = ratchet.effects()
    (change,) = effects["changes"]
    assert change["operation_id"] == pending.operation_id
    assert len(sent(effects)) == 1  # no second request for the change
    trace = ratchet.trace(run_id)
    assert trace["status"] == "done"
    kinds = [e["kind"] for e in trace["events"]]
    assert "reconcile_found" in kinds
    assert kinds.count("approved") == 1  # no new decision was needed
    (op,) = ratchet.operations(run_id)
    assert (op.status, op.attempts) == ("done", 1)
    assert op.receipt == change["result"]


def test_a_kill_after_a_request_lost_on_the_way_is_reconciled_as_not_found_and_sent_once_more(
    tmp_path: Path,
) -> None:
    """returns T-90604: the first label request is lost before the warehouse writes it, so the
    worker killed after that call has nothing on the provider's record to find."""
    ratchet = Ratchet(tmp_path)
    run_id = RETURNS.crash(ratchet, "after-write")
    (pending,) = ratchet.operations(run_id)
    assert ratchet.effects()["changes"] == []

    ratchet.ok("resume", run_id)
    ratchet.ok("resume", run_id)

    effects = ratchet.effects()
    (change,) = effects["changes"]
    assert change["operation_id"] == pending.operation_id
    assert [c["operation_id"] for c in sent(effects)] == [pending.operation_id] * 2
    trace = ratchet.trace(run_id)
    assert trace["status"] == "done"
    assert reconciled_not_found_then_called_again(trace["events"], pending.operation_id)
    assert "reconcile_found" not in [e["kind"] for e in trace["events"]]


@BOTH
def test_a_kill_after_the_receipt_is_stored_leaves_nothing_for_resume_to_call(
    workflow: Workflow, tmp_path: Path
) -> None:
    ratchet = Ratchet(tmp_path)
    run_id = workflow.crash(ratchet, "after-receipt")
    calls_before = ratchet.effects()["calls"]
    trace_before = ratchet.trace(run_id)
    assert trace_before["status"] == "done"  # the kill came after the final commit

    ratchet.ok("resume", run_id)
    ratchet.ok("resume", run_id)

    effects = ratchet.effects()
    assert effects["calls"] == calls_before  # not a call, not even a lookup
    assert len(effects["changes"]) == 1
    assert ratchet.trace(run_id) == trace_before  # nothing written: not an event, not a version
    (op,) = ratchet.operations(run_id)
    assert op.status == "done"


@BOTH
def test_attempts_on_record_survive_every_crash_and_a_resume_never_refills_the_budget(
    workflow: Workflow, tmp_path: Path
) -> None:
    """Three workers die before their request leaves; the fourth finds the budget (3 attempts)
    spent and hands the run to a person instead of starting over."""
    ratchet = Ratchet(tmp_path)
    run_id = workflow.crash(ratchet, "before-write")
    attempts = [ratchet.operations(run_id)[0].attempts]
    for _ in range(2):
        ratchet.killed("resume", run_id, at="before-write")
        attempts.append(ratchet.operations(run_id)[0].attempts)
    assert attempts == [1, 2, 3]

    final = ratchet.json("resume", run_id)

    assert final["status"] == "needs_person"
    (op,) = ratchet.operations(run_id)
    assert (op.status, op.attempts) == ("exhausted", 3)
    effects = ratchet.effects()
    assert effects["changes"] == []
    assert sent(effects) == []
    assert len(lookups(effects)) == 3  # each resume asked the provider first
    kinds = [e["kind"] for e in ratchet.trace(run_id)["events"]]
    assert kinds.count("exhausted") == 1
