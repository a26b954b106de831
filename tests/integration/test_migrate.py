"""``ratchet migrate``'s plan, apply and rollback against real runs of the refund, seeded by the
runner and the practice world in every state a change cares about, on SQLite and PostgreSQL."""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ratchet_runner.adapters.practice import PracticeWorld
from ratchet_runner.clock import FakeClock
from ratchet_runner.engine.deciding import decide
from ratchet_runner.engine.runner import RunnerOptions
from ratchet_runner.evolve.history import export_runs
from ratchet_runner.evolve.mapping import mapping_from_text
from ratchet_runner.evolve.migrate import (
    BUSY,
    DECIDE,
    MAPPED,
    MOVES,
    REFUSED,
    WAIT,
    Applied,
    MigrationRefused,
    _move,
    apply,
    plan,
    rollback,
)
from ratchet_runner.evolve.replay import replay_histories
from ratchet_runner.session import Session
from ratchet_runner.spec.model import Spec
from ratchet_runner.spec.validate import load_spec_text
from ratchet_runner.store.store import Store
from ratchet_runner.worker.pool import Pool
from tests.conftest import PRACTICE_BINDING, MakeRunner, run_cli, spec_and_text
from tests.integration.test_evolve_live import refund_input, seed_refunds


def second(
    text: str, version: int = 2, subs: dict[str, str] | None = None, **renamed: str
) -> tuple[Spec, str]:
    """The refund as version ``version`` (2), with texts replaced (``subs``, each present) and
    states renamed (old=new) everywhere they are named."""
    changed = text.replace("spec_version: 1", f"spec_version: {version}")
    for old, new in (subs or {}).items():
        assert old in changed
        changed = changed.replace(old, new)
    for old, new in renamed.items():
        changed = re.sub(rf"\b{old}\b", new, changed)
    return load_spec_text(changed, f"refund-v{version}.yaml"), changed


def verdicts(found: Any) -> dict[str, str]:
    return {r.run_id: r.verdict for r in found.runs}


def test_the_plan_gives_each_run_its_verdict_and_apply_moves_only_the_ready(
    make_runner: MakeRunner, world: PracticeWorld, store: Store, clock: FakeClock
) -> None:
    seeded = seed_refunds(make_runner, world)
    _, text = spec_and_text("refund")
    new, new_text = second(text)
    found = plan(store, new)
    assert verdicts(found) == {
        seeded["waiting"]: DECIDE,  # waits for an approval: asked again under version 2
        seeded["holding"]: DECIDE,  # holds one: it no longer counts
        seeded["between"]: WAIT,  # a retry due: inside the effect window
        seeded["unknown"]: WAIT,  # an outcome nobody learnt
        seeded["exhausted"]: MOVES,
    }
    with pytest.raises(MigrationRefused, match="2 run"):
        apply(store, new, new_text, "ops-lead", clock.now())
    assert all(store.get_run(r).spec_digest != new.digest for r in seeded.values())

    done = apply(store, new, new_text, "ops-lead", clock.now(), only_ready=True)
    moved = {r.run_id for r in done.moved}
    assert moved == {seeded[k] for k in ("waiting", "holding", "exhausted")}
    assert dict(done.left) == {seeded["between"]: WAIT, seeded["unknown"]: WAIT}
    for run_id in moved:
        run = store.get_run(run_id)
        assert run.spec_digest == new.digest
        [event] = [e for e in store.history(run_id) if e.kind == "migrated"]
        assert event.data["migration"] == done.migration
        assert event.data["by"] == "ops-lead"
        assert (event.data["old"], event.data["new"]) == (1, 2)
    for run_id in (seeded["between"], seeded["unknown"]):
        assert store.get_run(run_id).spec_digest != new.digest
    assert verdicts(plan(store, new))[seeded["holding"]] == "stays"


def test_an_approval_given_under_one_version_is_never_consumed_under_another(
    make_runner: MakeRunner, world: PracticeWorld, store: Store, clock: FakeClock
) -> None:
    spec, text = spec_and_text("refund")
    world.seed({"orders": [{"order": "LK-7", "paid": 100, "currency": "CAD"}]})
    runner = make_runner()
    run, _ = runner.start(spec, text, refund_input(7))
    run = runner.advance(run.id)
    assert decide(runner, run.id, "approve", "agent-7", "agent").changed  # held, not called
    new, new_text = second(text)
    assert [r.run_id for r in apply(store, new, new_text, "ops-lead", clock.now()).moved] == [
        run.id
    ]
    after = make_runner().advance(run.id)
    assert after.state == "proposed"  # asked again: the approval was bound to version 1
    assert world.changes() == []
    assert decide(make_runner(), run.id, "approve", "agent-7", "agent").changed
    assert make_runner().advance(run.id).state == "refunded"
    assert len(world.changes()) == 1
    [result] = replay_histories(new, export_runs(store, [run.id]))
    assert result.clean, result  # its history, migration and all, replays under version 2


def test_a_mapping_moves_runs_to_a_renamed_state_and_a_hostile_one_is_refused(
    make_runner: MakeRunner, world: PracticeWorld, store: Store, clock: FakeClock
) -> None:
    seeded = seed_refunds(make_runner, world)
    _, text = spec_and_text("refund")
    new, new_text = second(text, proposed="awaiting_approval")
    unmapped = plan(store, new)
    assert verdicts(unmapped)[seeded["waiting"]] == REFUSED
    assert "V101" in {h.code for h in unmapped.runs[0].hazards if unmapped.runs[0].verdict}

    mapping = mapping_from_text("states: {proposed: awaiting_approval}\n", "move.yaml")
    mapped = plan(store, new, mapping)
    waiting = next(r for r in mapped.runs if r.run_id == seeded["waiting"])
    assert (waiting.verdict, waiting.to_state) == (DECIDE, "awaiting_approval")
    done = apply(store, new, new_text, "ops-lead", clock.now(), mapping=mapping, only_ready=True)
    assert seeded["waiting"] in {r.run_id for r in done.moved}
    run = store.get_run(seeded["waiting"])
    assert (run.state, run.status) == ("awaiting_approval", "waiting")
    assert run.context["pause"]["state"] == "awaiting_approval"
    assert decide(make_runner(), run.id, "approve", "agent-7", "agent").changed

    kind = mapping_from_text("states: {proposed: refunding}\n", "kind.yaml")
    other, _ = second(text, 3, proposed="awaiting")
    assert {r.verdict for r in plan(store, other, kind).runs if r.state == "proposed"} <= {REFUSED}


def test_a_run_renamed_into_nowhere_is_refused_and_a_mapped_run_moves_with_mapping(
    make_runner: MakeRunner, world: PracticeWorld, store: Store, clock: FakeClock
) -> None:
    seeded = seed_refunds(make_runner, world)
    _, text = spec_and_text("refund")
    new, _ = second(text, needs_person="escalated")
    mapping = mapping_from_text("states: {needs_person: escalated}\n", "move.yaml")
    found = {r.run_id: r for r in plan(store, new, mapping).runs}
    exhausted = found[seeded["exhausted"]]
    # mapped, and its approval (an operator's retry would call on it) voided: asked again
    assert (exhausted.verdict, exhausted.to_state) == (DECIDE, "escalated")
    assert [h.code for h in exhausted.hazards] == ["V106"]
    nowhere = plan(store, new)
    assert verdicts(nowhere)[seeded["exhausted"]] == REFUSED


def test_rollback_moves_back_the_runs_that_did_nothing_under_the_new_version(
    make_runner: MakeRunner, world: PracticeWorld, store: Store, clock: FakeClock
) -> None:
    seeded = seed_refunds(make_runner, world)
    old, text = spec_and_text("refund")
    new, new_text = second(text)
    done = apply(store, new, new_text, "ops-lead", clock.now(), only_ready=True)
    make_runner().advance(seeded["holding"])  # acts under version 2: asked again
    back = rollback(store, "refund", done.migration, "ops-lead", clock.now())
    assert {r.run_id for r in back.moved} == {seeded["waiting"], seeded["exhausted"]}
    [(left, why)] = back.left
    assert left == seeded["holding"]
    assert "moved on since" in why or "acted" in why
    for run_id in (seeded["waiting"], seeded["exhausted"]):
        run = store.get_run(run_id)
        assert run.spec_digest == old.digest
        assert "migrated" not in run.context
        assert store.history(run_id)[-1].kind == "migration_rolled_back"
    assert store.get_run(seeded["holding"]).spec_digest == new.digest
    with pytest.raises(MigrationRefused, match="nothing to roll back"):
        rollback(store, "refund", "mig_nosuch", "ops-lead", clock.now())


def test_rollback_names_each_run_that_ended_under_the_new_version(
    make_runner: MakeRunner, world: PracticeWorld, store: Store, clock: FakeClock
) -> None:
    """A run that ended on the new version since the migration stays on it, and the rollback
    says so, even when it is the migration's only run."""
    seeded = seed_refunds(make_runner, world)
    _, text = spec_and_text("refund")
    new, new_text = second(text)
    done = apply(store, new, new_text, "ops-lead", clock.now(), only_ready=True)
    runner = make_runner()
    assert decide(runner, seeded["waiting"], "approve", "agent-7", "agent").changed
    assert runner.advance(seeded["waiting"]).state == "refunded"  # ended under version 2
    back = rollback(store, "refund", done.migration, "ops-lead", clock.now())
    left = dict(back.left)
    assert "it ended under version 2 (refunded, done)" in left[seeded["waiting"]]
    assert seeded["waiting"] not in {r.run_id for r in back.moved}
    # the others went back; a second rollback has only the ended run to name, and names it
    again = rollback(store, "refund", done.migration, "ops-lead", clock.now())
    assert (again.moved, [r for r, _ in again.left]) == ([], [seeded["waiting"]])


def waiting_under_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, Path]:
    """A practice home with the refund T-90104 waiting for a decision, started by the command
    line; the refund's files, version 1 and version 2."""
    monkeypatch.setenv("RATCHET_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RATCHET_DB", raising=False)
    _, text = spec_and_text("refund")
    v1, v2 = tmp_path / "refund.yaml", tmp_path / "refund-v2.yaml"
    v1.write_text(text, encoding="utf-8")
    v2.write_text(second(text)[1], encoding="utf-8")
    assert run_cli(capsys, "run", str(v1), "--example", "T-90104")[0] == 0
    return v1, v2


def test_ratchet_migrate_plans_applies_and_rolls_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    v1, v2 = waiting_under_cli(tmp_path, capsys, monkeypatch)

    code, out, _ = run_cli(capsys, "migrate", str(v2))
    assert code == 0
    assert out.splitlines()[0] == "refund → version 2: 1 unfinished run(s)"
    assert out.splitlines()[-1] == "1 asks for a new decision"
    code, _, err = run_cli(capsys, "migrate", str(v2), "--apply")
    assert code == 2
    assert "give --as NAME" in err
    code, out, _ = run_cli(capsys, "migrate", str(v2), "--apply", "--as", "ops-lead", "--json")
    assert code == 0
    applied = json.loads(out)
    assert [r["verdict"] for r in applied["moved"]] == [DECIDE]
    code, out, _ = run_cli(capsys, "migrate", str(v2), "--plan", "--json")
    assert [r["verdict"] for r in json.loads(out)["runs"]] == ["stays"]

    migration = applied["migration"]
    code, out, _ = run_cli(capsys, "migrate", str(v2), "--rollback", migration, "--as", "ops")
    assert code == 0
    assert out.splitlines()[0] == f"{migration}: 1 run(s) of 'refund' rolled back"
    code, _, err = run_cli(
        capsys, "migrate", str(v2), "--apply", "--rollback", migration, "--as", "ops"
    )
    assert code == 2
    assert "not both" in err
    code, _, err = run_cli(
        capsys, "migrate", str(v2), "--rollback", migration, "--mapping", str(v1), "--as", "ops"
    )
    assert code == 2
    assert "no --mapping" in err
    code, _, err = run_cli(capsys, "migrate", str(v2), "--rollback", migration, "--as", "ops")
    assert code == 1
    assert "R208" in err
    assert "nothing to roll back" in err


def test_apply_while_two_workers_drive_the_runs_loses_none_and_makes_no_change_twice(
    store_url: str, tmp_path: Path
) -> None:
    """Twenty refunds, half approved (the workers call them at once), half waiting for a
    decision, migrated while a pool of two worker threads drives them: every run ends refunded
    with exactly one refund, whichever version it ended on."""
    spec, text = spec_and_text("refund")
    new, new_text = second(text)
    numbers = range(3001, 3021)
    with Session(store_url, home=tmp_path, bindings=PRACTICE_BINDING, environ={}) as session:
        session.world.seed(
            {"orders": [{"order": f"LK-{n}", "paid": 100, "currency": "CAD"} for n in numbers]}
        )
        runner = session.runner()
        ids = []
        for n in numbers:
            run, _ = runner.start(spec, text, refund_input(n), wake=False)
            run = runner.advance(run.id)
            if n % 2:
                assert decide(runner, run.id, "approve", "agent-7", "agent").changed
            ids.append(run.id)
        pool = Pool(session.runner_factory(), concurrency=2, poll=0.01, log=lambda _: None)
        working = threading.Thread(target=pool.run)
        working.start()
        try:
            migrated: set[str] = set()
            for _ in range(20):  # again while runs are busy or inside a window
                done = apply(
                    session.open_store(),
                    new,
                    new_text,
                    "ops",
                    session.clock.now(),
                    only_ready=True,
                )
                migrated |= {r.run_id for r in done.moved}
                if not done.left:
                    break
                time.sleep(0.05)
            store = session.store
            for run_id in ids:
                if store.get_run(run_id).state == "proposed":
                    decide(session.runner(), run_id, "approve", "agent-7", "agent")
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and any(
                store.get_run(r).status != "done" for r in ids
            ):
                time.sleep(0.05)
        finally:
            pool.stop.set()
            working.join(timeout=30)
        ends = {store.get_run(r).state for r in ids}
        assert ends == {"refunded"}
        assert migrated  # some runs moved under the workers' feet
        made = [c.operation_id for c in session.world.changes()]
        assert len(made) == len(ids)
        assert len(set(made)) == len(ids)


def test_a_mapping_that_keeps_approvals_is_refused_as_a_migration_cannot_keep_them(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    seed_refunds(make_runner, world)
    _, text = spec_and_text("refund")
    new, _ = second(text)
    keep = mapping_from_text("approvals: keep\n", "keep.yaml")
    with pytest.raises(MigrationRefused, match=r"keep\.yaml: approvals: keep cannot be honoured"):
        plan(store, new, keep)


# -- found by an independent review; each failed before its fix -----------------------------

H = 3600.0


def _armed(store: Store, run_id: str) -> list[tuple[str, str, float]]:
    return [(t.state, t.event, t.due_at) for t in store.timers(run_id) if t.fired_at is None]


def _waiting(make_runner: MakeRunner, world: PracticeWorld, n: int) -> str:
    spec, text = spec_and_text("refund")
    world.seed({"orders": [{"order": f"LK-{n}", "paid": 100, "currency": "CAD"}]})
    runner = make_runner()
    run, _ = runner.start(spec, text, refund_input(n))
    return runner.advance(run.id).id


def test_another_text_under_the_same_version_numbers_is_refused_so_no_approval_crosses(
    make_runner: MakeRunner, world: PracticeWorld, store: Store, clock: FakeClock
) -> None:
    run_id = _waiting(make_runner, world, 7)
    assert decide(make_runner(), run_id, "approve", "agent-7", "agent").changed  # held
    _, text = spec_and_text("refund")
    new, new_text = second(text, 1, {"title: ": "title: (b) "})
    with pytest.raises(MigrationRefused, match="another text of version 1"):
        apply(store, new, new_text, "ops", clock.now())
    assert make_runner().advance(run_id).state == "refunded"  # under the text it was approved on


def test_keeping_timers_keeps_the_pause_record_true_to_them(
    make_runner: MakeRunner, world: PracticeWorld, store: Store, clock: FakeClock
) -> None:
    run_id = _waiting(make_runner, world, 8)
    t0 = store.get_run(run_id).context["pause"]["since"]
    _, text = spec_and_text("refund")
    new, new_text = second(text, subs={"expires_after: 72h}": "expires_after: 24h}"})
    clock.advance(H)
    keep = mapping_from_text("timers: keep\n", "keep.yaml")
    assert apply(store, new, new_text, "ops", clock.now(), mapping=keep).moved
    pause = store.get_run(run_id).context["pause"]
    [(_, _, due)] = _armed(store, run_id)
    assert (pause["since"], pause["expires_at"]) == (t0, due)


@pytest.mark.parametrize("how", ["restart, same state", "keep, renamed state"])
def test_rollback_arms_again_the_timers_the_run_had_before_the_migration(
    make_runner: MakeRunner, world: PracticeWorld, store: Store, clock: FakeClock, how: str
) -> None:
    run_id = _waiting(make_runner, world, 9)
    before = _armed(store, run_id)
    pause = store.get_run(run_id).context["pause"]
    _, text = spec_and_text("refund")
    if how.startswith("restart"):
        new, new_text = second(text, subs={"expires_after: 72h}": "expires_after: 1h}"})
        moving = mapping_from_text("timers: restart\n", "r.yaml")
    else:
        new, new_text = second(text, proposed="awaiting")
        moving = mapping_from_text("states: {proposed: awaiting}\ntimers: keep\n", "m.yaml")
    clock.advance(71 * H)
    done = apply(store, new, new_text, "ops", clock.now(), mapping=moving)
    assert done.moved
    back = rollback(store, "refund", done.migration, "ops", clock.now())
    assert back.moved
    assert _armed(store, run_id) == before  # due when it was due, not 72 h from now
    assert store.get_run(run_id).context["pause"] == pause


def test_rollback_reads_the_history_in_order_not_the_clocks_of_other_processes(
    make_runner: MakeRunner, world: PracticeWorld, store: Store, clock: FakeClock
) -> None:
    """The operator's clock runs 30 s ahead of the worker's: the call the worker makes under the
    new version is dated before the migration, yet it ties the run to the new version."""
    run_id = _waiting(make_runner, world, 11)
    _, text = spec_and_text("refund")
    new, new_text = second(text)
    done = apply(store, new, new_text, "ops", clock.now() + 30)
    assert done.moved
    assert decide(make_runner(), run_id, "approve", "agent-7", "agent").changed  # under v2
    world.add_fault("request_refund", "unavailable", times=1)
    make_runner(options=RunnerOptions(inline_wait=0.0)).advance(run_id)
    back = rollback(store, "refund", done.migration, "ops", clock.now() + 60)
    assert back.moved == []
    [(left, why)] = back.left
    assert left == run_id
    assert "acted under the new version" in why or "moved on" in why


def test_a_run_ended_or_moved_since_the_plan_is_skipped_and_a_busy_one_says_so(
    make_runner: MakeRunner, world: PracticeWorld, store: Store, clock: FakeClock
) -> None:
    seeded = seed_refunds(make_runner, world)
    _, text = spec_and_text("refund")
    new, _ = second(text)
    done = Applied("mig_test")
    _move(store, new, seeded["done"], "ops", clock.now(), None, done)
    assert done.skipped == [(seeded["done"], "it ended (done) since the plan")]
    assert done.left == []
    assert not done.busy
    done.left.append(("run_x", f"{BUSY}: run run_x has moved on; plan again"))
    assert done.busy
    done.left.append(("run_y", WAIT))
    assert not done.busy


def test_the_plan_says_why_a_run_untouched_by_any_hazard_is_asked_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, v2 = waiting_under_cli(tmp_path, capsys, monkeypatch)
    code, out, _ = run_cli(capsys, "migrate", str(v2))
    assert code == 0
    assert "      it holds or awaits an approval, bound to the spec and policy versions" in out


class _Stop(BaseException):
    """The process that took a booking this far dies here (nothing catches it on the way)."""


def _stopped_at(point: str, effect: str) -> Any:
    def interrupt(reached: str, at: str) -> None:
        if (reached, at) == (point, effect):
            raise _Stop

    return interrupt


def test_the_bookings_runs_get_their_verdicts_and_one_mapped_with_no_approval_moves_with_mapping(
    make_runner: MakeRunner, world: PracticeWorld, store: Store, clock: FakeClock
) -> None:
    """Version 2 renames ``needs_operator``; the mapping moves runs there. A booking left to an
    operator before any approval moves with the mapping. One awaiting the agent's decision is
    asked again. One whose confirmation is written ahead waits: its approval's digest changes
    with the version. One whose hotel hold, or flight release, is written ahead moves: neither
    effect changes. Carried on afterwards, each ends as it would have, with every hold made
    once and every release once."""
    spec, text = spec_and_text("booking")
    base = spec.examples["happy"].input
    new, new_text = second(text, needs_operator="ops_queue")
    mapping = mapping_from_text("states: {needs_operator: ops_queue}\n", "move.yaml")

    def booking(trip: str, interrupt: Any = None, approve: bool = False) -> str:
        runner = make_runner(interrupt=interrupt)
        run, _ = runner.start(spec, text, {**base, "trip": trip})
        with contextlib.suppress(_Stop):
            runner.advance(run.id)
            if approve:
                decide(runner, run.id, "approve", "agent-1", "travel_agent")
                runner.advance(run.id)
        stopped = store.get_run(run.id)
        if stopped.lease_token:  # its process died: the lease lapses
            store.release(run.id, stopped.lease_token)
        return run.id

    seeded = {"flight_held": booking("TRIP-3001", _stopped_at("after-receipt", "hold_flight"))}
    seeded["approving"] = booking("TRIP-3002")
    seeded["confirming"] = booking(
        "TRIP-3003", _stopped_at("before-write", "confirm_itinerary"), approve=True
    )
    world.add_fault("hold_hotel", "refuse", times=1)
    seeded["releasing"] = booking("TRIP-3004", _stopped_at("before-write", "release_flight"))
    world.add_fault("hold_flight", "unavailable", times=3)
    seeded["stranded"] = booking("TRIP-3005")
    assert {k: store.get_run(v).state for k, v in seeded.items()} == {
        "flight_held": "holding_hotel",
        "approving": "approving",
        "confirming": "confirming",
        "releasing": "releasing",
        "stranded": "needs_operator",
    }

    found = {r.run_id: r for r in plan(store, new, mapping).runs}
    assert {k: (found[v].verdict, found[v].to_state) for k, v in seeded.items()} == {
        "flight_held": (MOVES, "holding_hotel"),
        "approving": (DECIDE, "approving"),
        "confirming": (WAIT, "confirming"),
        "releasing": (MOVES, "releasing"),
        "stranded": (MAPPED, "ops_queue"),
    }
    done = apply(store, new, new_text, "ops", clock.now(), mapping=mapping, only_ready=True)
    assert {r.run_id for r in done.moved} == {
        seeded[k] for k in ("flight_held", "approving", "releasing", "stranded")
    }
    assert dict(done.left) == {seeded["confirming"]: WAIT}
    stranded = store.get_run(seeded["stranded"])
    assert (stranded.state, stranded.status, stranded.spec_digest) == (
        "ops_queue",
        "needs_person",
        new.digest,
    )

    ends = {}
    for name, run_id in seeded.items():
        for _ in range(10):  # a worker's passes, time moving on to each wake-up
            run = make_runner().advance(run_id)
            if run.state == "approving" and run.status == "waiting":
                decide(make_runner(), run_id, "approve", "agent-1", "travel_agent")
            elif run.status == "running" and run.wake_at is not None:
                clock.advance(max(0.0, run.wake_at - clock.now()))
            elif run.status != "running":
                break
        ends[name] = run.state
    assert ends == {
        "flight_held": "confirmed",
        "approving": "confirmed",
        "confirming": "confirmed",  # on version 1, on the approval given under it
        "releasing": "released",
        "stranded": "ops_queue",
    }
    made = Counter((c.effect, c.args.get("trip") or c.args.get("hold_id")) for c in world.changes())
    assert made, "no change made"
    assert max(made.values()) == 1, made  # nothing made, or undone, twice
