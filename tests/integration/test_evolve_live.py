"""``ratchet diff --db``'s checks against real runs: runs of the refund and the booking seeded by
the runner and the practice world in every state a change cares about (waiting for a decision,
holding one, between attempts, exhausted, outcome unknown, holds made, done), read back through
the store (:func:`live_runs`) on SQLite and PostgreSQL, and each hazard's runs counted."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ratchet_runner.adapters.practice import PracticeWorld
from ratchet_runner.engine.deciding import decide
from ratchet_runner.engine.runner import Runner, RunnerOptions
from ratchet_runner.evolve.hazards import hazards, live_runs, live_summary
from ratchet_runner.spec.validate import load_spec_text
from ratchet_runner.store.store import Store
from tests.conftest import ROOT, MakeRunner, run_cli, spec_and_text
from tests.unit.test_evolve_hazards import MUTATIONS, mutated


def refund_input(number: int) -> dict[str, Any]:
    return {
        "ticket": f"T-{number}",
        "order": f"LK-{number}",
        "amount": 9.95,
        "currency": "CAD",
        "reason": "RFD-LATE",
    }


def seed_refunds(make_runner: MakeRunner, world: PracticeWorld) -> dict[str, str]:
    """One refund run in each state a change cares about: its run ID by what it shows."""
    spec, text = spec_and_text("refund")
    world.seed(
        {
            "orders": [
                {"order": f"LK-{n}", "paid": 100, "currency": "CAD"} for n in range(1001, 1007)
            ]
        }
    )
    runner, patient = make_runner(), make_runner(options=RunnerOptions(inline_wait=0.0))

    def waiting(number: int) -> str:
        run, _ = runner.start(spec, text, refund_input(number))
        return runner.advance(run.id).id

    def approved(number: int, driver: Runner | None = None, **fault: Any) -> str:
        run_id = waiting(number)
        assert decide(runner, run_id, "approve", "agent-7", "agent").changed
        for kind, times in fault.items():
            world.add_fault("request_refund", kind, times=times)
        if driver is not None:
            driver.advance(run_id)
        return run_id

    seeded = {
        "waiting": waiting(1001),
        "holding": approved(1002),  # approved, not called yet
        "between": approved(1003, patient, unavailable=1),  # a retry scheduled
        "exhausted": approved(1004, runner, unavailable=3),
        "unknown": approved(1005, runner, timeout_after_write=1, lookup_fails=1),
        "done": approved(1006, runner),
    }
    states = {k: runner.store.get_run(v) for k, v in seeded.items()}
    assert {k: (r.state, r.status) for k, r in states.items()} == {
        "waiting": ("proposed", "waiting"),
        "holding": ("refunding", "running"),
        "between": ("refunding", "running"),
        "exhausted": ("needs_person", "needs_person"),
        "unknown": ("needs_person", "needs_person"),
        "done": ("refunded", "done"),
    }
    return seeded


def seed_bookings(make_runner: MakeRunner, world: PracticeWorld) -> dict[str, str]:
    spec, text = spec_and_text("booking")
    base = spec.examples["happy"].input
    runner, patient = make_runner(), make_runner(options=RunnerOptions(inline_wait=0.0))
    held, _ = runner.start(spec, text, {**base, "trip": "TRIP-2001"})
    runner.advance(held.id)
    world.add_fault("hold_flight", "unavailable", times=1)
    between, _ = patient.start(spec, text, {**base, "trip": "TRIP-2002"})
    patient.advance(between.id)
    seeded = {"approving": held.id, "between": between.id}
    assert [runner.store.get_run(r).state for r in seeded.values()] == [
        "approving",
        "holding_flight",
    ]
    return seeded


def runs_of(found: list[Any], code: str) -> set[str]:
    return {run for h in found if h.code == code for run in h.runs or ()}


def test_the_refunds_second_version_touches_the_runs_that_called_or_stand_where_it_changes(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    seeded = seed_refunds(make_runner, world)
    old, _ = spec_and_text("refund")
    text = (ROOT / "tests" / "fixtures" / "refund-v2.yaml").read_text(encoding="utf-8")
    new = load_spec_text(text, "tests/fixtures/refund-v2.yaml")
    live = live_runs(store, "refund")
    assert {r.id for r in live} == {v for k, v in seeded.items() if k != "done"}
    summary = live_summary(old, live)
    assert summary == {
        "on_old_version": 5,
        "by_state": {"proposed": 1, "refunding": 2, "needs_person": 2},
        "by_status": {"waiting": 1, "running": 2, "needs_person": 2},
        "other_versions": {},
    }
    found = hazards(old, new, live)
    assert {h.code for h in found} == {"V103", "V104", "V108"}
    # called, and may call again (a retry, an operator's retry or reconcile): another ID
    assert runs_of(found, "V104") == {seeded[k] for k in ("between", "exhausted", "unknown")}
    # inside an effect window: a retry due, an outcome nobody learnt
    assert runs_of(found, "V103") == {seeded["between"], seeded["unknown"]}
    # standing in refunding, where an unknown outcome now goes to 'escalated'
    assert runs_of(found, "V108") == {seeded["between"], seeded["holding"]}
    (v104,) = [h for h in found if h.code == "V104"]
    assert v104.count == 3
    assert all("would be op" in (v104.note(r) or "") for r in v104.runs or ())


def test_a_timer_changed_touches_only_the_run_that_has_it_armed(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    seeded = seed_refunds(make_runner, world)
    old, new, _ = mutated("refund", *MUTATIONS["V109"][1])
    found = hazards(old, new, live_runs(store, "refund"))
    assert [(h.code, h.runs) for h in found] == [("V109", (seeded["waiting"],))]


def test_approvals_voided_by_a_revalidated_change_are_those_held_awaited_or_spent_on_a_call(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    seeded = seed_refunds(make_runner, world)
    old, new, _ = mutated(
        "refund",
        *MUTATIONS["V106"][1],
        ("on_version_change: pin  #", "on_version_change: revalidate  #"),
    )
    (hazard,) = hazards(old, new, live_runs(store, "refund"))
    assert hazard.code == "V106"
    assert set(hazard.runs or ()) == {seeded[k] for k in seeded if k != "done"}
    assert hazard.note(seeded["waiting"]) == "awaits the decision"
    assert (hazard.note(seeded["holding"]) or "").startswith("holds approval #")


def test_an_undo_changed_touches_the_bookings_that_made_or_may_have_made_the_hold(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    seeded = seed_bookings(make_runner, world)
    old, new, _ = mutated("booking", *MUTATIONS["V107"][1])
    (hazard,) = hazards(old, new, live_runs(store, "booking"))
    assert hazard.code == "V107"
    assert set(hazard.runs or ()) == {seeded["approving"], seeded["between"]}
    assert "registered undo release_flight" in (hazard.note(seeded["approving"]) or "")


def test_a_harmless_change_touches_no_run(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    seed_refunds(make_runner, world)
    old, new, _ = mutated(
        "refund",
        (
            "  lapsed:       {kind: cancelled, description: Nobody decided in time}",
            "  lapsed:       {kind: cancelled, description: No decision came in time}",
        ),
    )
    assert hazards(old, new, live_runs(store, "refund")) == []


def test_the_command_names_the_runs_of_the_store_it_is_given(
    make_runner: MakeRunner,
    world: PracticeWorld,
    store: Store,
    store_url: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    seeded = seed_refunds(make_runner, world)
    v2 = str(ROOT / "tests" / "fixtures" / "refund-v2.yaml")
    code, out, _ = run_cli(
        capsys, "diff", str(ROOT / "specs" / "refund.yaml"), v2, "--db", store_url, "--json"
    )
    assert code == 1
    document = json.loads(out)
    assert document["live"]["on_old_version"] == 5
    counts = {h["code"]: h["count"] for h in document["hazards"]}
    assert counts == {"V103": 2, "V104": 3, "V108": 2}
    (v104,) = [h for h in document["hazards"] if h["code"] == "V104"]
    assert set(v104["runs"]) == {seeded[k] for k in ("between", "exhausted", "unknown")}
    code, out, err = run_cli(
        capsys, "diff", str(ROOT / "specs" / "refund.yaml"), v2, "--db", store_url
    )
    assert f"    {seeded['between']}: " in out  # each run under its hazard, with its note
    assert "5 live runs on version 1; fails --fail-on error" in err
    code, out, _ = run_cli(
        capsys,
        "diff",
        str(ROOT / "specs" / "refund.yaml"),
        v2,
        "--db",
        store_url,
        "--format",
        "markdown",
    )
    assert "| | code | where | runs | what it does, and what to do |" in out
    assert "5 live runs on version 1 (needs_person: 2, proposed: 1, refunding: 2)" in out
