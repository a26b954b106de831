"""A store put back from a copy: each operation is looked up before its first call while the
restore window is open, on SQLite and PostgreSQL.

The copy knows nothing of what was made after it was taken. Here the "later" store (a second
store sharing the practice world) makes a return label; the copy, marked restored, holds the
same run before its effect, or no run at all (started again by the application). The warehouse
keeps no key register: without the lookup it would make a second label."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ratchet_runner.adapters.practice import PracticeWorld
from ratchet_runner.clock import FakeClock
from ratchet_runner.engine.runner import Runner
from ratchet_runner.errors import VersionConflict
from ratchet_runner.review.naive import step_for
from ratchet_runner.spec.validate import validate_text
from ratchet_runner.store.store import Store
from tests.conftest import ROOT, MakeRunner, spec_and_text

DAY = 86400.0


def label_input(number: int) -> dict[str, Any]:
    return {
        "ticket": f"T-{number}",
        "order": f"LK-{number}",
        "sku": "LADDER-3",
        "reason": "damaged",
        "action": "return_label",
    }


def seed(world: PracticeWorld, numbers: range) -> None:
    world.seed({"orders": [{"order": f"LK-{n}", "paid": 100, "currency": "CAD"} for n in numbers]})


def labels(world: PracticeWorld) -> list[str]:
    return [c.operation_id for c in world.changes() if c.effect == "create_label"]


def later(tmp_path: Path, world: PracticeWorld, clock: FakeClock, numbers: range) -> None:
    """What happened after the copy was taken: the runs of ``numbers`` made their labels (on
    a store of their own, as the store did before it was put back)."""
    spec, text = spec_and_text("returns")
    store = Store(f"sqlite:///{tmp_path / 'later.db'}")
    try:
        runner = Runner(store, lambda a: world.adapter(a.kind), clock, steps=step_for)
        for n in numbers:
            run, _ = runner.start(spec, text, label_input(n))
            assert runner.advance(run.id).status == "done"
    finally:
        store.close()


def test_an_effect_made_after_the_copy_is_found_not_made_again(
    tmp_path: Path, make_runner: MakeRunner, world: PracticeWorld, store: Store, clock: FakeClock
) -> None:
    spec, text = spec_and_text("returns")
    seed(world, range(1, 5))
    held = [make_runner().start(spec, text, label_input(n))[0] for n in (1, 2)]  # in the copy
    later(tmp_path, world, clock, range(1, 4))  # 1, 2 and 3 made their labels afterwards
    assert len(labels(world)) == 3
    restored = store.mark_restored(at=clock.now(), window=DAY, source="test", by="drill")
    assert restored.incarnation == 2
    assert store.restore_window(clock.now()) == restored
    # a request sent just before the store was put back may commit late at a warehouse that
    # keeps no key register: a lookup that finds nothing is believed from then on
    fresh, _ = make_runner().start(spec, text, label_input(4))
    waiting = make_runner().advance(fresh.id)
    assert (waiting.status, labels(world).__len__()) == ("running", 3)
    assert store.history(fresh.id)[-1].kind == "settle_scheduled"
    clock.advance(60)

    runner = make_runner()
    for run in held:  # the copy's runs, before their effect
        assert runner.advance(run.id).status == "done"
    again, created = runner.start(spec, text, label_input(3))  # started again: no record of it
    assert created
    assert runner.advance(again.id).status == "done"
    assert runner.advance(fresh.id).status == "done"  # never made: looked up, then made

    assert len(labels(world)) == 4
    assert len(set(labels(world))) == 4  # one label per ticket: none made twice
    for run in (*held, again):
        kinds = [e.kind for e in store.history(run.id)]
        assert "restore_lookup" in kinds
        assert kinds[kinds.index("restore_lookup") + 1] == "reconcile_found"
        assert store.operations(run.id)[0].receipt is not None
    kinds = [e.kind for e in store.history(fresh.id)]
    assert kinds[kinds.index("restore_lookup") + 1] == "reconcile_unsettled"
    assert "reconcile_not_found" in kinds


def test_once_the_window_has_closed_no_lookup_precedes_a_first_call(
    make_runner: MakeRunner, world: PracticeWorld, store: Store, clock: FakeClock
) -> None:
    spec, text = spec_and_text("returns")
    seed(world, range(10, 11))
    store.mark_restored(at=clock.now(), window=DAY, source="test", by="drill")
    clock.advance(DAY + 1)
    assert store.restore_window(clock.now()) is None
    run, _ = make_runner().start(spec, text, label_input(10))
    assert make_runner().advance(run.id).status == "done"
    assert "restore_lookup" not in [e.kind for e in store.history(run.id)]


def test_an_effect_with_no_lookup_goes_to_a_person_never_to_a_blind_call(
    make_runner: MakeRunner, world: PracticeWorld, store: Store, clock: FakeClock
) -> None:
    text = (ROOT / "specs" / "returns.yaml").read_text(encoding="utf-8")
    text = text.replace("    reconcile: lookup\n", "    reconcile: none\n")
    spec = validate_text(text).spec
    assert spec is not None
    seed(world, range(20, 21))
    store.mark_restored(at=clock.now(), window=DAY, source="test", by="drill")
    run, _ = make_runner().start(spec, text, label_input(20))
    ended = make_runner().advance(run.id)
    assert ended.status == "needs_person"
    assert labels(world) == []  # not called
    [op] = store.operations(run.id)
    assert op.status == "unknown"
    assert "put back from a copy" in str(op.last_error)
    escalated = [e for e in store.history(run.id) if e.kind == "escalated"]
    assert escalated[0].data["evidence"]["restore"]["incarnation"] == 2


def test_a_lookup_that_fails_after_a_restore_leaves_the_outcome_unknown_with_no_call(
    make_runner: MakeRunner, world: PracticeWorld, store: Store, clock: FakeClock
) -> None:
    spec, text = spec_and_text("returns")
    seed(world, range(30, 31))
    store.mark_restored(at=clock.now(), window=DAY, source="test", by="drill")
    world.add_fault("create_label", "lookup_fails", times=1)
    run, _ = make_runner().start(spec, text, label_input(30))
    ended = make_runner().advance(run.id)
    assert labels(world) == []
    assert store.operations(run.id)[0].status == "unknown"
    assert ended.status == "needs_person"


def test_a_worker_idle_while_a_copy_was_put_back_commits_no_attempt_without_the_lookup(
    tmp_path: Path, world: PracticeWorld, clock: FakeClock, store_url: str
) -> None:
    """A store opened before the restore (an idle worker's) still believes the old incarnation:
    its first attempt's commit is refused (in its transaction on SQLite, in its one statement on
    PostgreSQL), and the step is taken up again with the restore's lookup."""
    url = store_url
    spec, text = spec_and_text("returns")
    seed(world, range(40, 41))
    idle = Store(url, clock=clock)
    operator = Store(url, clock=clock)
    try:
        runner = Runner(idle, lambda a: world.adapter(a.kind), clock, steps=step_for)
        run, _ = runner.start(spec, text, label_input(40))
        later(tmp_path, world, clock, range(40, 41))
        operator.mark_restored(at=clock.now(), window=DAY, source="test", by="drill")
        assert idle.restore_window(clock.now()) is None  # it has not seen the restore
        with pytest.raises(VersionConflict, match="put back from a copy"):
            runner.advance(run.id)
        assert len(labels(world)) == 1  # nothing sent
        assert idle.restore_window(clock.now()) is not None  # it read the store again
        assert runner.advance(run.id).status == "done"
        assert len(labels(world)) == 1
    finally:
        idle.close()
        operator.close()
