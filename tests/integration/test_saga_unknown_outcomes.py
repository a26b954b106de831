"""A saga never ends released with a change still made: while it compensates, a forward effect
whose outcome is unknown is looked up by its operation ID, on SQLite and on PostgreSQL.

The faults are injected as ``ratchet run specs/booking.yaml --example happy --fault
hold_hotel:timeout_after_write --fault hold_hotel:lookup_fails`` injects them: each one once, in
that order (the CLI's ``--fault`` is ``PracticeWorld.add_fault(effect, kind)``)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from ratchet_runner.adapters.practice import PracticeWorld
from ratchet_runner.engine.controls import operate
from ratchet_runner.engine.operator_queue import queue
from ratchet_runner.store.records import RunRecord
from ratchet_runner.store.store import Store
from tests.conftest import RATCHET, ROOT, MakeRunner, spec_and_text

OPS = ("ops-1", "travel_ops")


def happy_trip(make_runner: MakeRunner, world: PracticeWorld, *faults: str) -> RunRecord:
    """The booking's ``happy`` example, with ``faults`` (``EFFECT:KIND``) injected first, driven
    as far as it goes."""
    for fault in faults:
        effect, _, kind = fault.partition(":")
        world.add_fault(effect, kind)
    spec, text = spec_and_text("booking")
    runner = make_runner()
    run, created = runner.start(spec, text, spec.examples["happy"].input)
    assert created
    return runner.advance(run.id)


def holds(world: PracticeWorld) -> dict[str, str]:
    return {c.operation: c.result["hold_id"] for c in world.changes() if "hold" in c.operation}


def released(world: PracticeWorld) -> list[str]:
    return [str(c.args["hold_id"]) for c in world.changes() if c.operation == "release"]


def events(store: Store, run: RunRecord, kind: str) -> list[dict[str, object]]:
    return [e.data for e in store.history(run.id) if e.kind == kind]


def hotel_operation(store: Store, run: RunRecord) -> str:
    (op,) = [o for o in store.operations(run.id) if o.effect == "hold_hotel"]
    return op.operation_id


def test_the_issue_reproduction_finds_the_hotel_hold_while_compensating_and_releases_it(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    """The reply is lost and the first lookup fails; the lookup made while compensating
    answers: the hold is recorded done, with its receipt, and released before the flight."""
    run = happy_trip(
        make_runner, world, "hold_hotel:timeout_after_write", "hold_hotel:lookup_fails"
    )
    assert (run.state, run.status) == ("released", "done")
    held = holds(world)
    assert released(world) == [held["hold_hotel"], held["hold_flight"]]  # newest first
    hotel = hotel_operation(store, run)
    recorded = store.operation(hotel)
    assert recorded is not None
    assert (recorded.status, recorded.receipt) == (
        "done",
        {"hold_id": held["hold_hotel"], "hotel": "HARBOUR-INN"},
    )
    found = [e for e in events(store, run, "done") if e["operation_id"] == hotel]
    assert found == [
        {
            "operation_id": hotel,
            "effect": "hold_hotel",
            "role": "forward",
            "via": "reconcile",
            "receipt": {"hold_id": held["hold_hotel"]},
        }
    ]
    assert queue(make_runner()) == []


def test_a_hotel_hold_whose_lookup_keeps_failing_goes_to_a_person_and_never_ends_released(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    """The lookup fails again while compensating: nobody can tell whether the hotel is held,
    so the run waits for a person, naming the effect and the operation ID, and releases
    nothing older first; once the lookup answers, ``ops compensate`` finishes the saga."""
    run = happy_trip(
        make_runner,
        world,
        "hold_hotel:timeout_after_write",
        "hold_hotel:lookup_fails",
        "hold_hotel:lookup_fails",
    )
    assert (run.state, run.status) == ("releasing", "needs_person")
    assert events(store, run, "compensated") == []
    assert released(world) == []  # the flight waits for the hotel: newest first
    hotel = hotel_operation(store, run)
    (item,) = queue(make_runner())
    assert item["run"] == run.id
    assert "hold_hotel" in item["operator_action"]
    assert hotel in item["operator_action"]
    assert "ratchet ops compensate" in item["operator_action"]
    (failed,) = item["evidence"]["failed"]
    assert (failed["effect"], failed["status"]) == ("hold_hotel", "unknown")
    assert hotel in failed["error"]
    assert item["evidence"]["left"] == [
        {"effect": "hold_flight", "undo": "release_flight", "status": "registered"}
    ]
    lookups = len(world.calls("hold_hotel"))
    again = make_runner().advance(run.id)  # no hot loop: it takes no step by itself
    assert (again.version, len(world.calls("hold_hotel"))) == (run.version, lookups)

    finished = operate(make_runner(), run.id, "compensate", *OPS, note="lookups answer").run
    assert (finished.state, finished.status) == ("released", "done")
    held = holds(world)
    assert released(world) == [held["hold_hotel"], held["hold_flight"]]


def test_a_hotel_hold_that_was_never_made_is_skipped_with_an_event_and_the_flight_released(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    """The request was lost and the first lookup failed; the lookup made while compensating
    finds nothing: no hold to release, and the history says so."""
    run = happy_trip(
        make_runner, world, "hold_hotel:timeout_before_write", "hold_hotel:lookup_fails"
    )
    assert (run.state, run.status) == ("released", "done")
    held = holds(world)
    assert list(held) == ["hold_flight"]
    assert released(world) == [held["hold_flight"]]
    hotel = hotel_operation(store, run)
    skipped = [e for e in events(store, run, "compensation_skipped") if e["operation_id"] == hotel]
    assert len(skipped) == 1
    assert (skipped[0]["effect"], skipped[0]["outcome"]) == ("hold_hotel", "not_made")
    assert "not on the provider's record" in str(skipped[0]["reason"])
    release_hotel = [o for o in store.operations(run.id) if o.effect == "release_hotel"]
    assert [o.attempts for o in release_hotel] == [0]  # never called


def test_the_issue_command_line_leaves_no_hotel_hold_behind(tmp_path: Path) -> None:
    """The exact command of the issue, as a user runs it: it ends released only with the hotel
    hold released too."""
    env = {**os.environ, "RATCHET_HOME": str(tmp_path / "home")}
    for name in ("RATCHET_DB", "RATCHET_NOW"):
        env.pop(name, None)

    def ratchet(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [RATCHET, *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120
        )

    ran = ratchet(
        "run",
        "specs/booking.yaml",
        "--example",
        "happy",
        "--fault",
        "hold_hotel:timeout_after_write",
        "--fault",
        "hold_hotel:lookup_fails",
    )
    assert ran.returncode == 0, ran.stderr
    assert "Traceback" not in ran.stderr
    trace = json.loads(ratchet("trace", "TRIP-1001", "--json").stdout)
    assert (trace["state"], trace["status"]) == ("released", "done")
    changes = json.loads(ratchet("effects", "--json").stdout)["changes"]
    held = {c["operation"]: c["result"]["hold_id"] for c in changes if "hold" in c["operation"]}
    releases = [c["args"]["hold_id"] for c in changes if c["operation"] == "release"]
    assert releases == [held["hold_hotel"], held["hold_flight"]]
