"""Runs of every shipped example, driven as people and workers drive them, to export and replay.

:func:`drive_all` makes, in one store, the runs whose histories the replay tests keep as golden
histories: every example of specs/refund.yaml, returns.yaml and booking.yaml, faulted as its
``world:`` says (a reply lost after the write, a request lost before it, a refusal), approved
where it waits for a decision, and the ways a run ends that an example alone does not show: a
pause that lapses (the fake clock moved past its expiry, the worker firing the timer), a run an
operator takes up (``ops retry`` after the provider stayed unavailable, ``ops cancel`` after a
refusal, ``ops compensate`` after a release kept failing), a rejection, and a signal and a wait
timer (the fixture tests/fixtures/parcel.yaml). Each scenario has a practice world of its own
(emptied first), so that an example's faults meet the calls they name.

``python -m tests.integration.replay_runs tests/fixtures/histories`` writes them anew as the
golden histories the repository keeps (:func:`write_golden`): do it when a shipped spec changes
on purpose in a way its recorded runs would not replay, and say so in the change.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ratchet_runner.adapters.practice import PracticeWorld
from ratchet_runner.clock import FakeClock
from ratchet_runner.engine.commands import decide, operate, signal
from ratchet_runner.engine.runner import Runner
from ratchet_runner.evolve.history import export_runs, write_histories
from ratchet_runner.review.naive import step_for
from ratchet_runner.spec.validate import load_spec
from ratchet_runner.store.store import Store
from ratchet_runner.worker.passes import worker_pass
from tests.conftest import ROOT, spec_and_text

PARCEL = ROOT / "tests" / "fixtures" / "parcel.yaml"
AGENT = ("agent-7", "agent")
TRAVEL_AGENT = ("agent-3", "travel_agent")
HOUR = 3600.0
#: The process the scenarios' commands and worker record as holding a run's lease (the docs'
#: example host), so that the histories kept in the repository name no machine.
HOST = "db1:4242:9f3a21c0"


def _start(runner: Runner, world: PracticeWorld, name: str, example: str, **changed: Any) -> str:
    """Start ``example`` of spec ``name`` (its input with ``changed`` fields), its world seeded
    in an emptied practice world, and drive it as far as it goes."""
    if name == "parcel":
        spec, text = load_spec(PARCEL), PARCEL.read_text(encoding="utf-8")
    else:
        spec, text = spec_and_text(name)
    chosen = spec.examples[example]
    world.reset()
    world.seed(chosen.world)
    run, created = runner.start(spec, text, {**chosen.input, **changed})
    assert created
    return runner.advance(run.id).id


def _approve(runner: Runner, run_id: str, who: tuple[str, str]) -> None:
    assert decide(runner, run_id, "approve", *who, owner=f"ratchet approve {HOST}").changed


def _lapse(runner: Runner, clock: FakeClock, hours: float) -> None:
    clock.advance(hours * HOUR)
    worker_pass(runner, owner=HOST)


Scenario = Callable[[Runner, PracticeWorld, FakeClock], str]


def _refund_lost_reply(runner: Runner, world: PracticeWorld, clock: FakeClock) -> str:
    run_id = _start(runner, world, "refund", "T-90104")
    _approve(runner, run_id, AGENT)
    return run_id


def _refund_lapsed(runner: Runner, world: PracticeWorld, clock: FakeClock) -> str:
    run_id = _start(runner, world, "refund", "T-90603")
    _lapse(runner, clock, 73)
    return run_id


def _refund_retried_by_an_operator(runner: Runner, world: PracticeWorld, clock: FakeClock) -> str:
    run_id = _start(runner, world, "refund", "T-90104", ticket="T-90105")
    world.add_fault("request_refund", "unavailable", times=3)
    _approve(runner, run_id, AGENT)
    assert runner.store.get_run(run_id).state == "needs_person"
    retry = operate(runner, run_id, "retry", "ops-1", "payments_ops", owner=f"ratchet ops {HOST}")
    assert retry.changed
    return run_id


def _refund_rejected(runner: Runner, world: PracticeWorld, clock: FakeClock) -> str:
    run_id = _start(runner, world, "refund", "T-90603", ticket="T-90106")
    owner = f"ratchet reject {HOST}"
    assert decide(
        runner, run_id, "reject", "agent-7", None, "a duplicate ticket", owner=owner
    ).changed
    return run_id


def _label_lost_before_the_write(runner: Runner, world: PracticeWorld, clock: FakeClock) -> str:
    return _start(runner, world, "returns", "T-90604")


def _reship_refused_then_cancelled(runner: Runner, world: PracticeWorld, clock: FakeClock) -> str:
    run_id = _start(runner, world, "returns", "T-90605")
    cancel = operate(
        runner, run_id, "cancel", "ops-2", "warehouse_ops", owner=f"ratchet ops {HOST}"
    )
    assert cancel.changed
    return run_id


def _booking_happy(runner: Runner, world: PracticeWorld, clock: FakeClock) -> str:
    run_id = _start(runner, world, "booking", "happy")
    _approve(runner, run_id, TRAVEL_AGENT)
    return run_id


def _booking_hotel_refused(runner: Runner, world: PracticeWorld, clock: FakeClock) -> str:
    return _start(runner, world, "booking", "hotel_refused")


def _booking_confirm_refused(runner: Runner, world: PracticeWorld, clock: FakeClock) -> str:
    run_id = _start(runner, world, "booking", "confirm_refused")
    _approve(runner, run_id, TRAVEL_AGENT)
    return run_id


def _booking_approval_lapsed(runner: Runner, world: PracticeWorld, clock: FakeClock) -> str:
    run_id = _start(runner, world, "booking", "happy", trip="TRIP-1004")
    _lapse(runner, clock, 5)
    return run_id


def _booking_compensated_by_an_operator(
    runner: Runner, world: PracticeWorld, clock: FakeClock
) -> str:
    world.reset()
    world.add_fault("release_flight", "unavailable", times=3)
    spec, text = spec_and_text("booking")
    chosen = spec.examples["hotel_refused"]
    world.seed(chosen.world)
    run, _ = runner.start(spec, text, {**chosen.input, "trip": "TRIP-1005"})
    run_id = runner.advance(run.id).id
    assert runner.store.get_run(run_id).state == "needs_operator"
    undo = operate(runner, run_id, "compensate", "ops-3", "travel_ops", owner=f"ratchet ops {HOST}")
    assert undo.changed
    return run_id


def _parcel_signalled_and_inspected(runner: Runner, world: PracticeWorld, clock: FakeClock) -> str:
    run_id = _start(runner, world, "parcel", "P-1")
    data = {"weight_kg": 4.2}
    owner = f"ratchet signal {HOST}"
    assert signal(runner, run_id, "parcel_received", "carrier-1", data, owner=owner).changed
    _lapse(runner, clock, 1)
    return run_id


#: Each scenario: (its name, its workflow, how it is driven, how the run ends).
SCENARIOS: tuple[tuple[str, str, Scenario, tuple[str, str]], ...] = (
    (
        "refund T-90104: reply lost after the write",
        "refund",
        _refund_lost_reply,
        ("refunded", "done"),
    ),
    ("refund T-90603: lapsed", "refund", _refund_lapsed, ("lapsed", "done")),
    (
        "refund T-90105: unavailable, retried by an operator",
        "refund",
        _refund_retried_by_an_operator,
        ("refunded", "done"),
    ),
    ("refund T-90106: rejected", "refund", _refund_rejected, ("rejected", "done")),
    (
        "returns T-90604: request lost before the write",
        "returns",
        _label_lost_before_the_write,
        ("labelled", "done"),
    ),
    (
        "returns T-90605: refused, cancelled by an operator",
        "returns",
        _reship_refused_then_cancelled,
        ("needs_person", "cancelled"),
    ),
    ("booking happy", "booking", _booking_happy, ("confirmed", "done")),
    ("booking hotel_refused: compensated", "booking", _booking_hotel_refused, ("released", "done")),
    (
        "booking confirm_refused: compensated",
        "booking",
        _booking_confirm_refused,
        ("released", "done"),
    ),
    (
        "booking TRIP-1004: approval lapsed, compensated",
        "booking",
        _booking_approval_lapsed,
        ("released", "done"),
    ),
    (
        "booking TRIP-1005: release failing, compensated by an operator",
        "booking",
        _booking_compensated_by_an_operator,
        ("released", "done"),
    ),
    (
        "parcel P-1: a signal, then a wait timer",
        "parcel",
        _parcel_signalled_and_inspected,
        ("returned", "done"),
    ),
)


def drive_all(runner: Runner, world: PracticeWorld, clock: FakeClock) -> dict[str, str]:
    """Drive every scenario in ``runner``'s store: its name -> its run's ID, each run as
    :data:`SCENARIOS` says it ends."""
    made: dict[str, str] = {}
    for name, _workflow, scenario, ends in SCENARIOS:
        run_id = scenario(runner, world, clock)
        run = runner.store.get_run(run_id)
        assert (run.state, str(run.status)) == ends, name
        made[name] = run_id
    return made


def write_golden(folder: Path) -> dict[str, Path]:
    """Drive every scenario in a fresh SQLite store and write each workflow's histories to
    ``FOLDER/WORKFLOW.jsonl`` (what tests/fixtures/histories/ holds)."""
    import tempfile

    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        store = Store(f"sqlite:///{Path(scratch) / 'ratchet.db'}")
        world, clock = PracticeWorld(Path(scratch) / "practice.db"), FakeClock()
        runner = Runner(store, lambda adapter: world.adapter(adapter.kind), clock, steps=step_for)
        try:
            drive_all(runner, world, clock)
            written = {}
            for workflow in dict.fromkeys(w for _, w, _, _ in SCENARIOS):
                path = folder / f"{workflow}.jsonl"
                with path.open("w", encoding="utf-8", newline="\n") as stream:
                    write_histories(export_runs(store, workflow=workflow), stream)
                written[workflow] = path
            return written
        finally:
            store.close()


if __name__ == "__main__":  # python -m tests.integration.replay_runs tests/fixtures/histories
    for name, path in write_golden(Path(sys.argv[1])).items():
        print(f"{name}: {path}")
