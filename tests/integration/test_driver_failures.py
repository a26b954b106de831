"""How drivers (workers and commands) deal with what goes wrong around a step, on SQLite and
PostgreSQL: adapters resolved per spec version, a failing run parked once instead of claimed in a
hot loop, no attempt committed that is not going to be sent, leases cleared when a run ends, and
commands that say what they did."""

from __future__ import annotations

import time
from typing import Any

import pytest

from ratchet_runner.adapters.base import Adapter
from ratchet_runner.adapters.practice import PRACTICE_SERVICES, PracticeWorld
from ratchet_runner.clock import FakeClock
from ratchet_runner.engine import commands
from ratchet_runner.engine.controls import operate
from ratchet_runner.engine.drive import carry_on
from ratchet_runner.engine.lease import Lease
from ratchet_runner.engine.runner import Runner
from ratchet_runner.errors import LeaseTooShort, RunError, UsageError, VersionConflict
from ratchet_runner.spec.model import Adapter as AdapterSpec
from ratchet_runner.spec.validate import load_spec_text
from ratchet_runner.store.records import RunRecord
from ratchet_runner.store.store import Store
from ratchet_runner.worker.passes import fire_due, worker_pass
from tests.conftest import SPECS, MakeRunner, spec_and_text


def variant(name: str, new_name: str, *replacements: tuple[str, str]) -> tuple[Any, str]:
    """A shipped spec under another workflow name, with some text replaced."""
    text = (SPECS / f"{name}.yaml").read_text(encoding="utf-8")
    text = text.replace(f"name: {name}\n", f"name: {new_name}\n", 1)
    for old, new in replacements:
        assert old in text
        text = text.replace(old, new)
    return load_spec_text(text, f"{new_name}.yaml"), text


def like_the_cli(world: PracticeWorld) -> Any:
    """The CLI's adapter factory: the practice world's services; no other kind implemented."""

    def make(adapter: AdapterSpec) -> Adapter:
        if adapter.kind not in PRACTICE_SERVICES:
            raise UsageError(f"adapter {adapter.name!r} is of kind {adapter.kind!r}: not built")
        return world.adapter(adapter.kind)

    return make


def label_run(runner: Runner, world: PracticeWorld) -> RunRecord:
    """One return-label run of the shipped spec (create_label times out after 10 s), started."""
    spec, text = spec_and_text("returns")
    example = spec.examples["T-90604"]
    world.seed({"orders": example.world["orders"]})
    run, _ = runner.start(spec, text, example.input)
    return run


# -- adapters per spec version --------------------------------------------------------------


def test_two_specs_naming_one_adapter_differently_each_reach_their_own(
    store: Store, world: PracticeWorld, clock: FakeClock
) -> None:
    made: list[tuple[str, str]] = []

    def factory(adapter: AdapterSpec) -> Adapter:
        made.append((adapter.name, adapter.kind))
        return world.adapter(adapter.kind)

    runner = Runner(store, factory, clock)
    real, real_text = spec_and_text("refund")
    dry, dry_text = variant("refund", "refund_dry", ("    kind: payments\n", "    kind: noop\n"))
    world.seed(real.examples["T-90104"].world)
    for spec, text, ticket in ((real, real_text, "T-1"), (dry, dry_text, "T-2")):
        data = {**spec.examples["T-90104"].input, "ticket": ticket}
        run, _ = runner.start(spec, text, data)
        commands.decide(runner, run.id, "approve", "agent-7", "agent")
    assert made == [("payments", "payments"), ("payments", "noop")]
    services = [c.service for c in world.changes() if c.effect == "request_refund"]
    assert services == ["payments", "noop"]  # the dry run moved no money


# -- a failing run is parked once -----------------------------------------------------------


def test_a_run_whose_step_cannot_start_is_parked_once_and_the_good_runs_go_on(
    store: Store, world: PracticeWorld, clock: FakeClock
) -> None:
    runner = Runner(store, like_the_cli(world), clock)
    good, good_text = spec_and_text("returns")
    bad, bad_text = variant(
        "returns", "returns_http", ("    kind: warehouse\n", "    kind: http\n")
    )
    example = good.examples["T-90604"]
    world.seed({"orders": example.world["orders"]})
    # started by a process that could make its adapter; this worker cannot
    starter = Runner(store, lambda adapter: world.adapter("warehouse"), clock)
    broken, _ = starter.start(bad, bad_text, example.input)
    for i in range(10):
        runner.start(good, good_text, {**example.input, "ticket": f"T-{2000 + i}"})
    report = worker_pass(runner, lease_seconds=30.0)
    assert len(report.advanced) == 10
    assert all(r.status == "done" for r in report.advanced)
    assert [run_id for run_id, _ in report.failed] == [broken.id]
    parked = store.get_run(broken.id)
    assert parked.status == "needs_person"
    kinds = [e.kind for e in store.history(broken.id)]
    assert kinds.count("leased") == 1
    assert kinds.count("step_failed") == 1
    failed = next(e for e in store.history(broken.id) if e.kind == "step_failed")
    assert "kind 'http'" in failed.data["error"]
    assert worker_pass(runner, lease_seconds=30.0).advanced == []  # not claimed again
    assert len(world.changes()) == 10


def test_a_parked_run_is_taken_again_by_ops_retry_once_the_cause_is_fixed(
    store: Store, world: PracticeWorld, clock: FakeClock
) -> None:
    fixed = {"yes": False}

    def factory(adapter: AdapterSpec) -> Adapter:
        if not fixed["yes"]:
            raise UsageError("the warehouse credentials are missing")
        return world.adapter(adapter.kind)

    run = label_run(Runner(store, lambda adapter: world.adapter(adapter.kind), clock), world)
    runner = Runner(store, factory, clock)  # a worker whose adapter cannot be made yet
    worker_pass(runner, lease_seconds=30.0)
    assert store.get_run(run.id).status == "needs_person"
    fixed["yes"] = True
    retried = operate(Runner(store, factory, clock), run.id, "retry", "ops-1", "warehouse_ops")
    assert retried.run.status == "done"
    assert len(world.changes()) == 1


# -- no attempt committed that will not be sent ---------------------------------------------


def test_a_worker_past_its_lease_commits_no_attempt_it_will_not_send(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    runner = make_runner()
    run = label_run(runner, world)
    (claimed,) = store.claim("worker-a", 30.0, runner.clock.now())
    paused_past_it = time.monotonic() - 1.0  # paused past its lease
    runner.leases.hold(Lease(run.id, str(claimed.lease_token), 30.0, paused_past_it))
    with pytest.raises(VersionConflict):
        runner.advance(claimed)
    assert world.calls() == []
    assert store.operations(run.id) == []  # no phantom attempt on record
    assert store.get_run(run.id).context.get("budget_used") is None


def test_an_effect_whose_timeout_outlasts_the_lease_is_not_called_and_the_run_is_left(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    runner = make_runner()
    run = label_run(runner, world)  # create_label: timeout 10 s
    report = worker_pass(runner, lease_seconds=5.0)
    assert report.failed == []
    assert [run_id for run_id, _ in report.left] == [run.id]
    assert "it needs --lease 13 or more" in report.left[0][1]
    assert world.calls() == []
    assert store.operations(run.id) == []
    assert (store.get_run(run.id).status, store.get_run(run.id).lease_owner) == ("running", None)


def test_a_step_whose_call_the_lease_cannot_cover_commits_nothing_and_says_which_lease(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    """Below the check before driving (a runner advanced directly): the step itself refuses."""
    runner = make_runner()
    run = label_run(runner, world)
    (claimed,) = store.claim("worker-a", 5.0, runner.clock.now())
    runner.leases.hold(Lease.asked(run.id, str(claimed.lease_token), 5.0, time.monotonic()))
    with pytest.raises(LeaseTooShort, match="it needs --lease 13 or more") as short:
        runner.advance(claimed)
    assert short.value.needed == 13
    assert world.calls() == []
    assert store.operations(run.id) == []  # no attempt on record: nothing promised


# -- leases end with the run ----------------------------------------------------------------


def test_a_run_finished_by_a_command_after_its_worker_died_keeps_no_lease(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    runner = make_runner()
    run = label_run(runner, world)
    store.claim("worker-dead", 0.2, runner.clock.now())  # claimed, then the worker died
    time.sleep(0.3)
    result = commands.resume(make_runner(), run.id)
    assert result.run.status == "done"
    assert store.leases() == []
    assert store.stuck(time.time(), 0.0) == []


def test_a_commit_under_no_lease_clears_an_expired_one(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    runner = make_runner()
    spec, text = spec_and_text("refund")
    run, _ = runner.start(spec, text, spec.examples["T-90104"].input)
    store.claim_run(run.id, "worker-dead", 0.2, 0.0)
    time.sleep(0.3)
    from ratchet_runner.engine.deciding import decide

    decide(runner, run.id, "reject", "agent-7", None, "the customer withdrew")
    assert store.get_run(run.id).lease_owner is None
    assert store.leases() == []


# -- commands say what they did -------------------------------------------------------------


def test_carrying_on_after_a_change_parks_a_run_whose_next_step_fails_and_says_so(
    make_runner: MakeRunner, world: PracticeWorld, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = make_runner()
    run = label_run(runner, world)

    def failing(_run: Any, max_steps: int = 0) -> Any:
        raise RunError("argument 'order' cannot be evaluated")

    monkeypatch.setattr(runner, "advance", failing)
    after, then = carry_on(runner, run)
    assert after.status == "needs_person"
    assert then == (
        "its next step failed and it waits for a person: argument 'order' cannot be evaluated"
    )
    assert "step_failed" in [e.kind for e in store.history(run.id)]


def test_carrying_on_after_a_change_reports_a_race_instead_of_raising(
    make_runner: MakeRunner, world: PracticeWorld, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = make_runner()
    spec, text = spec_and_text("refund")
    run, _ = runner.start(spec, text, spec.examples["T-90104"].input)

    def raced(_run: Any, max_steps: int = 0) -> Any:
        raise VersionConflict("run moved on (version 9, expected 3)")

    monkeypatch.setattr(runner, "advance", raced)
    after, then = carry_on(runner, run)
    assert after.id == run.id
    assert then is not None
    assert then.startswith("another process carried the run on")


# -- a signal after the pause expired -------------------------------------------------------


def test_a_signal_after_the_pause_expired_is_refused_and_the_expiry_applies_once(
    make_runner: MakeRunner, world: PracticeWorld, store: Store, clock: FakeClock
) -> None:
    from ratchet_runner.errors import SignalRefused
    from tests.conftest import ROOT

    path = ROOT / "tests" / "fixtures" / "parcel.yaml"
    text = path.read_text(encoding="utf-8")
    spec = load_spec_text(text, str(path))
    example = spec.examples["P-1"]
    world.seed(example.world)
    runner = make_runner()
    run, _ = runner.start(spec, text, example.input)
    waiting = runner.advance(run)
    assert waiting.state == "awaiting"
    clock.advance(31 * 86400)  # past the 30-day pause; no worker has fired its timer
    with pytest.raises(SignalRefused, match="expired at"):
        commands.signal(make_runner(), run.id, "customer_kept_it", "carrier-1")
    after = store.get_run(run.id)
    assert (after.state, after.status) == ("needs_person", "needs_person")
    assert store.signal(run.id, "carrier-1") is None  # not delivered
    assert [f.outcome for f in fire_due(runner)] == []  # the expiry fired once
    assert [e.kind for e in store.history(run.id)].count("timer") == 1
