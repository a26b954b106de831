"""Revision 0007: a finished run names each operation once. The history and the context name an
operation the run lists by its place in the context's ``operations``; a done event whose receipt
the same commit stores reads it from the operation's; a fingerprint the arguments give is not
stored. Everything reads back exactly as it was written, and the revision's downgrade writes
it all back in full."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from ratchet_runner.adapters.noop import NoopAdapter
from ratchet_runner.adapters.practice import PracticeWorld
from ratchet_runner.clock import FakeClock
from ratchet_runner.engine.identity import sha256
from ratchet_runner.engine.runner import Runner
from ratchet_runner.errors import StoreError, VersionConflict
from ratchet_runner.review.naive import step_for
from ratchet_runner.spec.validate import load_spec
from ratchet_runner.store import schema
from ratchet_runner.store.compact import DONE_AS_RECORDED, SHAPES, encode, expand
from ratchet_runner.store.context import RunContext, loaded, stored
from ratchet_runner.store.records import RunRecord, fingerprint
from ratchet_runner.store.store import Store
from tests.conftest import ROOT
from tests.integration.replay_runs import drive_all

THREE = ROOT / "bench" / "specs" / "three_effects.yaml"
OP_A, OP_B, OP_C = "a" * 64, "b" * 64, "c" * 64


def _done(operation_id: str, receipt: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    data = {"operation_id": operation_id, "effect": "e", "role": "forward", "via": "reply"}
    return ("done", {**data, "receipt": receipt})


def test_an_operation_the_run_lists_is_named_by_its_place_and_read_back() -> None:
    events = [
        ("pending", {"operation_id": OP_B, "effect": "e", "role": "forward", "action": "e",
                     "strategy": "ratchet"}),
        ("call", {"operation_id": OP_B, "attempt": 1}),
        ("call", {"operation_id": OP_C, "attempt": 1}),  # not listed: written in full, once
        ("call", {"operation_id": OP_C, "attempt": 2}),
    ]  # fmt: skip
    row = json.loads(encode(events, [OP_A, OP_B]))
    assert [entry[2] for entry in row] == [-2, -2, OP_C, 0]
    back = expand(row, 1.0, "", [OP_A, OP_B])
    assert [(kind, json.dumps(data)) for kind, data, _ in back] == [
        (kind, json.dumps(data)) for kind, data in events
    ]
    with pytest.raises(StoreError, match="names operation 2 of the run's 1"):
        expand(row, 1.0, "of run r version 2", [OP_A])


def test_a_done_receipt_is_read_from_the_operation_only_when_the_commit_stores_that_very_one() -> (
    None
):
    receipt = {"id": "re_1", "amount": 5}
    same = _done(OP_A, {"id": receipt["id"]})
    assert json.loads(encode([same], [OP_A], {OP_A: receipt}))[0] == [
        "done", DONE_AS_RECORDED, -1, "e", "forward", "reply", "id",
    ]  # fmt: skip
    back = expand(json.loads(encode([same], [OP_A], {OP_A: receipt})), 1.0, "", [OP_A],
                  {OP_A: receipt})  # fmt: skip
    assert json.dumps(back[0][1]) == json.dumps(same[1])
    # an equal value that is not the one stored, a receipt not stored by the commit, or an
    # operation the run does not list: the receipt is written in full
    for recorded, listed in (({OP_A: {"id": "".join(["re_", "1"])}}, [OP_A]), ({}, [OP_A]),
                             ({OP_A: receipt}, [])):  # fmt: skip
        entry = json.loads(encode([same], listed, recorded))[0]
        assert entry[1] != DONE_AS_RECORDED
        assert entry[-1] == {"id": "re_1"}
    with pytest.raises(StoreError, match=r"names the receipt of a+, which has none"):
        expand(json.loads(encode([same], [OP_A], {OP_A: receipt})), 1.0, "", [OP_A], {})


def test_an_event_with_the_keys_of_the_recorded_form_is_written_with_its_keys() -> None:
    keys = SHAPES[DONE_AS_RECORDED]
    data = dict(zip(keys, [OP_A, "e", "forward", "reply", "id"], strict=True))
    row = json.loads(encode([("done", data)], [OP_A], {OP_A: {"id": "x"}}))
    assert row == [["done", data]]
    assert expand(row, 1.0, "", [OP_A])[0][1] == data


def test_the_context_lists_its_operations_by_place_and_reads_back_in_full() -> None:
    context: RunContext = {
        "operations": [OP_A, OP_B],
        "receipts": {"e": {"id": OP_A}},  # a receipt is never shortened
        "completed": [OP_B, OP_A],
        "undone": [OP_C],  # not listed: kept as it is
        "wake_at": None,
    }
    kept = json.dumps(context)
    short = stored(context)
    assert json.dumps(context) == kept  # the engine's dict is never changed
    assert short["completed"] == [1, 0]
    assert short["undone"] == [OP_C]
    assert list(short) == list(context)
    full = loaded(json.loads(json.dumps(short)))
    assert full is not None
    assert json.dumps(full) == kept
    assert loaded(context) is None  # nothing stored by place
    record: dict[str, Any] = {"id": "r", "workflow": "w", "spec_digest": "d",
                              "business_key": "k", "state": "s", "status": "done",
                              "version": 1, "input": {}, "created_at": 1.0,
                              "updated_at": 1.0}  # fmt: skip
    assert RunRecord(**record, context=short).context == context  # type: ignore[arg-type]
    with pytest.raises(StoreError, match="context of run r cannot be read: names operation 5"):
        RunRecord(**record, context={"operations": [OP_A], "completed": [5]})  # type: ignore[arg-type]


def test_a_fingerprint_is_that_of_the_arguments_and_a_prune_keeps_it(store: Store) -> None:
    args = {"amount": 12.5, "name": "Zoë", "items": [2, 1]}
    assert fingerprint(args) == sha256(args)
    runner = Runner(store, lambda _: NoopAdapter())
    spec = load_spec(THREE)
    run, _ = runner.start(spec, THREE.read_text(encoding="utf-8"), {"key": "K-1"})
    done = runner.advance(run)
    ops = store.operations(done.id)
    assert [op.fingerprint for op in ops] == [sha256(op.args) for op in ops]
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM operations WHERE fingerprint IS NULL")
                            ).scalar_one() == 3  # fmt: skip
    assert store.prune([(done, done.context)], done.updated_at + 1) == [done.id]
    after = {op.operation_id: op for op in store.operations(done.id)}
    assert all(op.args == {} for op in after.values())
    assert {i: op.fingerprint for i, op in after.items()} == {
        op.operation_id: sha256(op.args) for op in ops
    }


def test_a_finished_run_names_each_operation_in_history_and_context_only_in_its_list(
    store: Store,
) -> None:
    """The three-effect run's history and context hold no operation ID but the context's
    ``operations`` and the receipts (the no-op adapter's receipt is the ID), and read back with
    every ID in its place. On SQLite a done event reads its receipt from the operation's; on
    PostgreSQL it keeps it (one ID each)."""
    runner = Runner(store, lambda _: NoopAdapter())
    spec = load_spec(THREE)
    run, _ = runner.start(spec, THREE.read_text(encoding="utf-8"), {"key": "K-2"})
    done = runner.advance(run)
    ids = done.context["operations"]
    with store.engine.connect() as conn:
        rows = [json.dumps(r[0]) if not isinstance(r[0], str) else r[0] for r in conn.execute(
            text("SELECT events FROM history WHERE run_id = :r"), {"r": done.id})]  # fmt: skip
        context = conn.execute(
            text("SELECT context FROM runs WHERE id = :r"), {"r": done.id}
        ).scalar_one()
    context = json.loads(context) if isinstance(context, str) else context
    kept = 0 if store.dialect.name == "sqlite" else 1
    assert [sum(row.count(i) for row in rows) for i in ids] == [kept] * 3
    assert context["completed"] == [0, 1, 2]
    assert done.context["completed"] == ids
    history = store.history(done.id)
    named = [e.data["operation_id"] for e in history if "operation_id" in e.data]
    assert set(named) == set(ids)
    receipts = {e.data["operation_id"]: e.data["receipt"] for e in history if e.kind == "done"}
    assert receipts == {op.operation_id: op.receipt for op in store.operations(done.id)}


def _everything(store: Store, run_ids: list[str]) -> dict[str, Any]:
    return {
        run_id: (
            [(e.version, e.kind, json.dumps(e.data), e.at) for e in store.history(run_id)],
            json.dumps(store.get_run(run_id).context),
            [json.dumps(op.__dict__, default=str) for op in store.operations(run_id)],
        )
        for run_id in run_ids
    }


def test_revision_0007_goes_down_in_full_and_up_again_losing_nothing(
    store: Store, tmp_path: Path
) -> None:
    """The replay scenarios' runs (approvals, timers, signals, operators, compensations): down
    to 0006 every operation is named in full in history and context, every fingerprint is
    stored, and each read is what it was; up again, the same."""
    world, clock = PracticeWorld(tmp_path / "practice.db"), FakeClock()
    runner = Runner(store, lambda a: world.adapter(a.kind), clock, steps=step_for)
    run_ids = list(drive_all(runner, world, clock).values())
    before = _everything(store, run_ids)
    with store.engine.connect() as conn:
        entries = [e for (row,) in conn.execute(text("SELECT events FROM history"))
                   for e in (json.loads(row) if isinstance(row, str) else row)]  # fmt: skip
    recorded = sum(e[1] == DONE_AS_RECORDED for e in entries)
    assert recorded > 5 if store.dialect.name == "sqlite" else recorded == 0
    assert sum(len(e) > 2 and type(e[1]) is int and e[2] == -1 for e in entries) > 20

    assert schema.migrate_to(store, "0006") == ["0007→0006"]
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM operations WHERE fingerprint IS NULL")
                            ).scalar_one() == 0  # fmt: skip
        rows = conn.execute(text("SELECT events, context FROM history JOIN runs ON id = run_id")
                            ).all()  # fmt: skip
    for events, context in rows:
        parsed = json.loads(events) if isinstance(events, str) else events
        assert all(entry[1] != DONE_AS_RECORDED for entry in parsed)
        assert not any(
            type(e[2]) is int and e[2] < 0 for e in parsed if len(e) > 2 and type(e[1]) is int
        )
        ctx = json.loads(context) if isinstance(context, str) else context
        assert all(isinstance(i, str) for i in ctx.get("completed", []))
    assert _everything(store, run_ids) == before  # read by this version, which reads both forms

    assert schema.migrate_to(store, "head") == ["0006→0007"]
    assert _everything(store, run_ids) == before


@pytest.mark.parametrize("with_timer", [False, True], ids=["one-statement", "statements"])
def test_a_change_that_lists_fewer_operations_than_the_run_is_refused(
    store: Store, with_timer: bool
) -> None:
    """A change made from an older read of the run (here one that does not know the run's
    third operation) would leave history rows naming an operation the run no longer lists: it
    is refused whatever version it says it expects, and nothing is written. (A new timer sends
    the change through the statements instead of SQLite's one-statement trigger.)"""
    runner = Runner(store, lambda _: NoopAdapter())
    spec = load_spec(THREE)
    run, _ = runner.start(spec, THREE.read_text(encoding="utf-8"), {"key": "K-3"})
    done = runner.advance(run)
    listed, history = done.context["operations"], store.history(done.id)
    change = runner.change(done)
    change.base = None
    change.context = {**done.context, "operations": listed[:2], "completed": listed[:2]}
    if with_timer:
        change.new_timers.append({"state": "done", "event": "later", "due_at": 9e9})
    with pytest.raises(VersionConflict, match="has moved on: the change lists 2 of the 3 oper"):
        store.commit(change)
    after = store.get_run(done.id)
    assert after.version == done.version
    assert after.context == done.context
    assert store.history(done.id) == history
    keeping = runner.change(done)
    keeping.context = {**done.context, "operations": [*listed, OP_A]}
    assert store.commit(keeping).context["operations"] == [*listed, OP_A]  # growing is fine


def _overwrite(store: Store, run: RunRecord, with_timer: bool) -> None:
    """Commit a change that writes another receipt over the run's first operation's."""
    change = Runner(store, lambda _: NoopAdapter()).change(run)
    first = run.context["operations"][0]
    change.operation_updates.append((first, {"receipt": {"id": "another"}}))
    if with_timer:
        change.new_timers.append({"state": "done", "event": "later", "due_at": 9e9})
    store.commit(change)


@pytest.mark.parametrize("with_timer", [False, True], ids=["one-statement", "statements"])
def test_an_operations_receipt_is_written_once(store: Store, with_timer: bool) -> None:
    """On SQLite the history's done events read an operation's receipt from its record: a
    receipt written over another is refused (a trigger, whichever statement writes it), nothing
    is written, and the history reads as before; the same receipt written again is no change.
    On PostgreSQL done events keep their receipts: the history reads as before either way."""
    runner = Runner(store, lambda _: NoopAdapter())
    spec = load_spec(THREE)
    run, _ = runner.start(spec, THREE.read_text(encoding="utf-8"), {"key": "K-4"})
    done = runner.advance(run)
    history, ops = store.history(done.id), store.operations(done.id)
    if store.dialect.name != "sqlite":
        _overwrite(store, done, with_timer)
        assert store.operations(done.id)[0].receipt == {"id": "another"}
        assert store.history(done.id) == history
        return
    with pytest.raises(StoreError, match="the receipt of an operation is written once"):
        _overwrite(store, done, with_timer)
    assert store.get_run(done.id).version == done.version
    assert store.history(done.id) == history
    assert store.operations(done.id) == ops
    again = runner.change(done)
    again.operation_updates.append((ops[0].operation_id, {"receipt": ops[0].receipt}))
    assert store.commit(again).version == done.version + 1


def test_revision_0007_makes_the_receipt_trigger_and_its_downgrade_drops_it(
    tmp_path: Path,
) -> None:
    """SQLite's trigger (PostgreSQL has none: its done events keep their receipts)."""
    store = Store(f"sqlite:///{tmp_path / 'ratchet.db'}")
    runner = Runner(store, lambda _: NoopAdapter())
    spec = load_spec(THREE)
    run, _ = runner.start(spec, THREE.read_text(encoding="utf-8"), {"key": "K-5"})
    done = runner.advance(run)
    schema.migrate_to(store, "0006")
    with store.engine.begin() as conn:  # 0006 kept no such rule
        conn.execute(text("UPDATE operations SET receipt = '{}' WHERE run_id = :r"), {"r": done.id})
        conn.execute(text("UPDATE operations SET receipt = NULL WHERE run_id = :r"), {"r": done.id})
    schema.migrate_to(store, "head")
    with store.engine.begin() as conn:  # receipts written where there were none
        conn.execute(
            text("UPDATE operations SET receipt = :v WHERE run_id = :r"),
            {"r": done.id, "v": json.dumps({"id": "first"})},
        )
    with pytest.raises(StoreError, match="the receipt of an operation is written once"):
        _overwrite(store, store.get_run(done.id), with_timer=False)
    store.close()
