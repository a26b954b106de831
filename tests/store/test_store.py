"""The store keeps its promises on SQLite and on PostgreSQL alike.

Every test that takes the ``store`` (or ``store_url``) fixture runs twice: once on a fresh SQLite
file and once on the emptied test PostgreSQL (marked ``postgres``). Nothing here is mocked: the
statements run against the real databases, and concurrency is real threads and processes.
"""

from __future__ import annotations

import json
import multiprocessing
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, event, inspect, literal, select
from sqlalchemy.exc import SQLAlchemyError

from ratchet_runner.errors import (
    DuplicateOperation,
    RunNotFound,
    StoreError,
    StoreRevision,
    VersionConflict,
)
from ratchet_runner.store import dialects, schema
from ratchet_runner.store.postgres import PostgresWriter
from ratchet_runner.store.records import Change, NewRun, RunRecord
from ratchet_runner.store.store import Store
from ratchet_runner.store.tables import runs
from tests.conftest import PG_URL, ROOT, MakeRunner, connection_closed, postgres_url

DIGEST = "d" * 64
T0 = 1_800_000_000.0

#: Values a run's input and context must get back exactly as written (order, types, text).
AWKWARD_JSON: dict[str, Any] = {
    "zeta first": "keys keep the order they were written in",
    "amount": 9.95,
    "amounts": [0.1, 45.95, -3.5, 1e-07, 1e20, 12345.678],
    "integral float": 10.0,
    "big int": 2**62,
    "text": 'Grüße, café, naïve · 退款 · استرداد · 🚀✓ · tab\there · quote " backslash \\',
    "nul": "before\u0000after",
    "nested": {"b": [1, {"c": [None, True, False, {"d": "deep"}]}], "a": {}},
    "empty": [],
    "none": None,
}


def new_run(
    store: Store,
    run_id: str = "run_1",
    business_key: str = "T-1",
    *,
    status: str = "running",
    input: dict[str, Any] | None = None,
    workflow: str = "refund",
) -> RunRecord:
    store.save_spec(DIGEST, workflow, 1, "1", "name: refund\n", T0)
    run, created = store.create_run(
        NewRun(run_id, workflow, DIGEST, business_key, "proposed", status, input or {}, T0)
    )
    assert created
    return run


def operation(operation_id: str, **fields: Any) -> dict[str, Any]:
    return {
        "operation_id": operation_id,
        "effect": "request_refund",
        "role": "forward",
        "args": {"order": "LK-1", "amount": 9.95},
        "fingerprint": "f" * 64,
        "status": "pending",
        "attempts": 1,
        **fields,
    }


def approval(**fields: Any) -> dict[str, Any]:
    return {
        "name": "refund_approval",
        "effect": "request_refund",
        "digest": "a" * 64,
        "decision": "approved",
        "actor": "agent-7",
        "role": "agent",
        "reason": None,
        "policy_version": "1",
        "spec_digest": DIGEST,
        "decided_at": T0,
        "expires_at": T0 + 86_400,
        **fields,
    }


def snapshot(store: Store, run_id: str) -> dict[str, Any]:
    """Everything the store holds about a run (per run: the PostgreSQL may be shared)."""
    return {
        "run": store.get_run(run_id),
        "history": store.history(run_id),
        "operations": store.operations(run_id),
        "approvals": store.approvals(run_id),
    }


# -- commits --------------------------------------------------------------------------------


def test_a_commit_bumps_the_version_and_appends_its_events_with_that_version(
    store: Store,
) -> None:
    run = new_run(store)
    change = Change(run.id, run.version, T0 + 1, state="refunding", status="running")
    change.context = {"approval": {"actor": "agent-7"}}
    change.event("approved", actor="agent-7").event("moved", to="refunding")

    moved = store.commit(change)

    assert moved.version == run.version + 1
    assert (moved.state, moved.status, moved.context) == (
        "refunding",
        "running",
        {"approval": {"actor": "agent-7"}},
    )
    assert store.get_run(run.id) == moved
    history = store.history(run.id)
    assert [(e.kind, e.version) for e in history] == [
        ("created", 1),
        ("approved", 2),
        ("moved", 2),
    ]
    assert history[1].data == {"actor": "agent-7"}
    assert history[2].at == T0 + 1


def test_a_commit_with_a_stale_version_raises_version_conflict_and_writes_nothing(
    store: Store,
) -> None:
    run = new_run(store)
    store.commit(Change(run.id, run.version, T0 + 1, state="refunding").event("moved"))
    store.commit(
        Change(run.id, run.version + 1, T0 + 2, new_operations=[operation("op-a")]).event("call")
    )
    store.commit(
        Change(run.id, run.version + 2, T0 + 3, new_approvals=[approval()]).event("approved")
    )
    before = snapshot(store, run.id)
    (recorded,) = before["approvals"]

    stale = Change(
        run.id,
        run.version,  # the run is at version 4 by now
        T0 + 4,
        state="refunded",
        status="done",
        context={"receipts": {"request_refund": {"refund_id": "re_1"}}},
        new_operations=[operation("op-b")],
        operation_updates=[("op-a", {"status": "done", "attempts": 9})],
        new_approvals=[approval(actor="someone-else")],
        consume_approvals=[recorded.id],
    ).event("done")
    with pytest.raises(VersionConflict, match="moved on"):
        store.commit(stale)

    assert snapshot(store, run.id) == before


def test_a_commit_for_an_unknown_run_raises_run_not_found_and_writes_nothing(
    store: Store,
) -> None:
    new_run(store)
    ghost = Change(
        "run_nobody",
        1,
        T0,
        state="refunded",
        new_operations=[operation("op-g")],
        new_approvals=[approval()],
    )
    with pytest.raises(RunNotFound):
        store.commit(ghost.event("moved"))
    assert store.history("run_nobody") == []
    assert store.operation("op-g") is None
    assert store.approvals("run_nobody") == []


def test_recording_an_operation_id_twice_raises_duplicate_operation_and_rolls_back_everything(
    store: Store,
) -> None:
    run = new_run(store)
    store.commit(Change(run.id, 1, T0 + 1, new_operations=[operation("op-a")]).event("pending"))
    before = snapshot(store, run.id)

    again = Change(
        run.id,
        2,
        T0 + 2,
        state="refunded",
        status="done",
        context={"receipts": {"x": 1}},
        # op-b is written before op-a collides, so the rollback must take it away too
        new_operations=[operation("op-b"), operation("op-a", attempts=7)],
        new_approvals=[approval()],
    ).event("pending")
    with pytest.raises(DuplicateOperation) as raised:
        store.commit(again)

    assert isinstance(raised.value, StoreError)
    assert not isinstance(raised.value, SQLAlchemyError)
    assert snapshot(store, run.id) == before
    assert store.operation("op-b") is None
    op_a = store.operation("op-a")
    assert op_a is not None
    assert op_a.attempts == 1


def test_a_commit_returns_the_run_as_it_wrote_it_even_when_another_writer_follows_at_once(
    store: Store, store_url: str
) -> None:
    """The record a commit returns is the version that commit wrote, never a later one read
    after its transaction ended: a worker must not carry on from a move it did not make."""
    run = new_run(store)
    other = Store(store_url)
    follow_up = Change(run.id, 2, T0 + 2, state="someone-elses-state").event("other")
    trap = _between_commit_and_next_read(store, lambda: other.commit(follow_up))
    try:
        mine = store.commit(Change(run.id, 1, T0 + 1, state="refunding").event("moved"))
    finally:
        trap["armed"] = False
        other.close()
    assert (mine.version, mine.state) == (2, "refunding")


def _between_commit_and_next_read(store: Store, act: Callable[[], object]) -> dict[str, bool]:
    """Run ``act`` (another writer) when ``store`` first begins a read transaction after a write
    transaction: the moment between a commit and any read that follows it."""
    trap = {"armed": True, "wrote": False}

    def on_begin(connection: Any) -> None:
        if not trap["armed"]:
            return
        if connection.get_execution_options().get("ratchet_write", False):
            trap["wrote"] = True
        elif trap["wrote"]:
            trap["armed"] = False
            act()

    event.listen(store.engine, "begin", on_begin)
    return trap


# -- runs, specs, approvals -----------------------------------------------------------------


def test_a_new_run_is_stored_as_its_record_says_with_its_first_events_and_timers(
    store: Store,
) -> None:
    """``create_run`` takes a :class:`NewRun`: the run comes back as ``NewRun.record()`` says,
    its history is ``created`` and then its own events, and the timers it arms are armed at its
    time (one statement on PostgreSQL, a transaction on SQLite: the same rows either way)."""
    store.save_spec(DIGEST, "refund", 1, "1", "text\n", T0)
    pause = {"state": "awaiting_approval", "since": T0, "resumes_on": ["approve"]}
    new = NewRun(
        "run_new",
        "refund",
        DIGEST,
        "T-new",
        "awaiting_approval",
        "waiting",
        {"amount": 9.95},
        T0,
        context={"timers_of": "awaiting_approval", "pause": pause},
        timers=[{"state": "awaiting_approval", "event": "expired", "due_at": T0 + 3600}],
        events=[("paused", pause)],
    )

    run, created = store.create_run(new)

    assert created
    assert run == new.record() == store.get_run("run_new")
    assert (run.version, run.created_at, run.updated_at, run.context) == (1, T0, T0, new.context)
    assert [(e.kind, e.version, e.data, e.at) for e in store.history(run.id)] == [
        ("created", 1, {"state": "awaiting_approval", "business_key": "T-new"}, T0),
        ("paused", 1, pause, T0),
    ]
    (timer,) = store.timers(run.id)
    assert (timer.state, timer.event, timer.due_at, timer.created_at, timer.fired_at) == (
        "awaiting_approval",
        "expired",
        T0 + 3600,
        T0,
        None,
    )


def test_under_practice_time_a_new_runs_events_also_record_the_real_time(store: Store) -> None:
    store.save_spec(DIGEST, "refund", 1, "1", "text\n", T0)
    store.stamp_real_time = True
    events = [("noted", {"by": "test"})]
    new = NewRun("run_p", "refund", DIGEST, "T-p", "proposed", "running", {}, T0, events=events)

    before = time.time()
    store.create_run(new)
    after = time.time()

    history = store.history("run_p")
    assert [e.kind for e in history] == ["created", "noted"]
    assert all(e.at == T0 and before <= e.data["real_at"] <= after for e in history)
    assert history[1].data["by"] == "test"


def test_creating_a_run_twice_for_one_business_key_returns_the_first_run_uncreated(
    store: Store,
) -> None:
    first = new_run(store, "run_1", "T-90104", input={"amount": 9.95})

    again, created = store.create_run(
        NewRun(
            "run_2", "refund", DIGEST, "T-90104", "proposed", "waiting", {"amount": 19.9}, T0 + 5
        )
    )

    assert created is False
    assert again == first
    assert [e.kind for e in store.history(first.id)] == ["created"]
    with pytest.raises(RunNotFound):
        store.get_run("run_2")
    other_workflow, created = store.create_run(
        NewRun("run_3", "returns", DIGEST, "T-90104", "deciding", "running", {}, T0)
    )
    assert created is True
    assert other_workflow.id == "run_3"


def test_two_workers_creating_one_business_key_at_once_get_one_run(store_url: str) -> None:
    stores = [Store(store_url), Store(store_url)]
    stores[0].save_spec(DIGEST, "refund", 1, "1", "name: refund\n", T0)
    try:
        for round_ in range(5):
            results: list[tuple[RunRecord, bool]] = []
            _together(
                partial(_create, stores[0], f"run_a{round_}", f"T-{round_}", results),
                partial(_create, stores[1], f"run_b{round_}", f"T-{round_}", results),
            )
            assert sorted(created for _, created in results) == [False, True]
            assert results[0][0].id == results[1][0].id
        assert len([r for r in stores[0].list_runs() if r.business_key.startswith("T-")]) == 5
    finally:
        for store in stores:
            store.close()


def _create(store: Store, run_id: str, key: str, results: list[tuple[RunRecord, bool]]) -> None:
    new = NewRun(run_id, "refund", DIGEST, key, "proposed", "waiting", {}, T0)
    results.append(store.create_run(new))


def test_the_exact_spec_text_stays_under_its_digest_after_the_spec_file_changes(
    make_runner: MakeRunner, store: Store, tmp_path: Path
) -> None:
    from ratchet_runner.spec.validate import load_spec

    path = tmp_path / "refund.yaml"
    original = (ROOT / "specs" / "refund.yaml").read_text(encoding="utf-8")
    original += "# a trailing comment · with ünïcode, kept byte for byte\n"
    path.write_text(original, encoding="utf-8")
    spec = load_spec(path)
    example = spec.examples["T-90104"]
    first, _ = make_runner().start(spec, original, example.input)

    edited = original.replace("input.amount <= 100.0", "input.amount <= 5.0")
    assert edited != original
    path.write_text(edited, encoding="utf-8")
    spec_now = load_spec(path)
    second, _ = make_runner().start(spec_now, edited, {**example.input, "ticket": "T-90105"})

    assert first.spec_digest != second.spec_digest
    assert store.spec_text(first.spec_digest) == original
    assert store.spec_text(second.spec_digest) == edited
    pinned = make_runner().spec_of(store.get_run(first.id))
    assert pinned.digest == first.spec_digest


def test_saving_a_spec_version_again_keeps_the_text_first_saved(store: Store) -> None:
    store.save_spec(DIGEST, "refund", 1, "1", "first text\n", T0)
    store.save_spec(DIGEST, "refund", 1, "1", "same digest, other comments\n", T0 + 1)
    assert store.spec_text(DIGEST) == "first text\n"


def test_two_workers_saving_one_spec_version_at_once_both_succeed(store_url: str) -> None:
    stores = [Store(store_url), Store(store_url)]
    try:
        for round_ in range(10):
            digest = f"{round_:064d}"
            _together(
                *(partial(s.save_spec, digest, "refund", 1, "1", "text\n", T0) for s in stores)
            )
            assert stores[0].spec_text(digest) == "text\n"
    finally:
        for store in stores:
            store.close()


def test_an_approval_can_be_consumed_only_once(store: Store) -> None:
    run = new_run(store)
    store.commit(Change(run.id, 1, T0 + 1, new_approvals=[approval()]).event("approved"))
    (recorded,) = store.approvals(run.id)
    assert recorded.consumed_at is None

    store.commit(Change(run.id, 2, T0 + 2, consume_approvals=[recorded.id]).event("pending"))
    (consumed,) = store.approvals(run.id)
    assert consumed.consumed_at == T0 + 2
    before = snapshot(store, run.id)

    twice = Change(
        run.id,
        3,
        T0 + 3,
        state="refunding",
        consume_approvals=[recorded.id],
        new_operations=[operation("op-twice")],
    ).event("pending")
    with pytest.raises(VersionConflict, match="already consumed"):
        store.commit(twice)

    assert snapshot(store, run.id) == before


def test_json_input_context_events_and_operations_come_back_exactly_as_written(
    store: Store,
) -> None:
    run = new_run(store, input=AWKWARD_JSON)
    change = Change(
        run.id,
        1,
        T0 + 1,
        context={"receipts": {"request_refund": AWKWARD_JSON}},
        new_operations=[operation("op-json", args=AWKWARD_JSON)],
        operation_updates=[("op-json", {"receipt": AWKWARD_JSON})],
    )
    store.commit(change.event("done", receipt=AWKWARD_JSON))

    def exactly(value: Any) -> str:
        return json.dumps(value, ensure_ascii=False)  # order, types and text, not just ==

    stored = store.get_run(run.id)
    assert exactly(stored.input) == exactly(AWKWARD_JSON)
    assert exactly(stored.context) == exactly({"receipts": {"request_refund": AWKWARD_JSON}})
    assert exactly(store.history(run.id)[-1].data) == exactly({"receipt": AWKWARD_JSON})
    op = store.operation("op-json")
    assert op is not None
    assert exactly(op.args) == exactly(AWKWARD_JSON)
    assert exactly(op.receipt) == exactly(AWKWARD_JSON)
    assert stored.input["amount"] == 9.95
    assert type(stored.input["amounts"][4]) is float


def test_a_business_key_the_database_cannot_hold_is_refused_as_a_store_error(
    store: Store,
) -> None:
    """SQLite keeps a NUL character in a text column; PostgreSQL cannot. Either way the caller
    sees the key stored exactly or a StoreError with nothing written, never a driver error."""
    store.save_spec(DIGEST, "refund", 1, "1", "text\n", T0)
    try:
        _, created = store.create_run(
            NewRun("run_nul", "refund", DIGEST, "T-1\u0000x", "proposed", "waiting", {}, T0)
        )
    except StoreError:
        with pytest.raises(RunNotFound):
            store.get_run("run_nul")
    else:
        assert created
        assert store.get_run("run_nul").business_key == "T-1\u0000x"


def test_list_runs_filters_by_status(store: Store) -> None:
    mine = {"run_w": "waiting", "run_r": "running", "run_d": "done", "run_d2": "done"}
    for number, (run_id, status) in enumerate(mine.items()):
        new_run(store, run_id, f"T-{number}", status=status)

    assert {r.id for r in store.list_runs()} == set(mine)
    for status in ("waiting", "running", "done", "needs_person"):
        found = store.list_runs(status)
        assert {r.status for r in found} <= {status}
        assert {r.id for r in found} == {i for i, s in mine.items() if s == status}
    assert len(store.list_runs(limit=2)) == 2


def test_the_spec_digests_of_live_runs_are_those_of_runs_not_done_or_cancelled(
    store: Store,
) -> None:
    """What a worker checks its lease against at start: each spec version once, whatever the
    number of its runs; a version whose runs have all ended is not live."""
    statuses = {
        "a": ("running", "done"),
        "b": ("done", "cancelled"),
        "c": ("waiting", "waiting"),
        "d": ("needs_person",),
        "e": ("paused",),
    }
    number = 0
    for letter, of_it in statuses.items():
        digest = letter * 64
        store.save_spec(digest, f"flow_{letter}", 1, "1", f"name: flow_{letter}\n", T0)
        for status in of_it:
            number += 1
            new = NewRun(
                f"run_{number}", f"flow_{letter}", digest, f"T-{number}", "s", status, {}, T0
            )
            store.create_run(new)

    assert store.live_spec_digests() == ["a" * 64, "c" * 64, "d" * 64, "e" * 64]


def test_the_open_runs_of_a_workflow_are_its_unfinished_runs_on_any_version_oldest_first(
    store: Store,
) -> None:
    """What a change of the workflow may have to move (``ratchet diff --db``)."""
    store.save_spec("e" * 64, "refund", 2, "1", "name: refund\n", T0)
    runs = [
        ("run_late", "refund", DIGEST, "waiting", T0 + 5),
        ("run_done", "refund", DIGEST, "done", T0 + 1),
        ("run_gone", "refund", DIGEST, "cancelled", T0 + 2),
        ("run_first", "refund", DIGEST, "needs_person", T0),
        ("run_v2", "refund", "e" * 64, "paused", T0 + 3),
        ("run_other", "returns", DIGEST, "running", T0),
    ]
    store.save_spec(DIGEST, "refund", 1, "1", "name: refund\n", T0)
    for number, (run_id, workflow, digest, status, at) in enumerate(runs):
        store.create_run(
            NewRun(run_id, workflow, digest, f"T-{number}", "proposed", status, {}, at)
        )
    assert [r.id for r in store.open_runs("refund")] == ["run_first", "run_v2", "run_late"]
    assert [r.id for r in store.open_runs("returns")] == ["run_other"]
    assert store.open_runs("booking") == []


def test_the_approvals_timers_and_signals_of_many_runs_are_read_a_few_runs_at_a_time(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One read per table for all the runs a diff looks at, each naming at most
    ``_RUNS_PER_READ`` runs (here 2, for 5 runs: three reads a table)."""
    from ratchet_runner.store import store as module

    monkeypatch.setattr(module, "_RUNS_PER_READ", 2)
    ids = [f"run_{n}" for n in range(5)]
    for number, run_id in enumerate(ids):
        run = new_run(store, run_id, f"T-{number}")
        change = Change(run_id, run.version, T0 + number, run)
        change.new_approvals.append(approval(digest=f"{number}" * 64))  # type: ignore[typeddict-item]
        change.new_timers.append({"state": "proposed", "event": "expired", "due_at": T0 + 99})
        change.new_signals.append(
            {"signal_id": f"sig-{number}", "event": "approve", "data": {}, "received_at": T0}
        )
        store.commit(change)
    asked = ["run_4", "run_0", "run_2", "run_0", "run_3"]  # repeats are read once
    assert sorted(a.run_id for a in store.approvals(runs_in=asked)) == sorted(set(asked))
    assert sorted(t.run_id for t in store.timers(runs_in=asked)) == sorted(set(asked))
    assert sorted(s.signal_id for s in store.signals(runs_in=asked)) == [
        "sig-0",
        "sig-2",
        "sig-3",
        "sig-4",
    ]
    assert [s.signal_id for s in store.signals("run_1")] == ["sig-1"]
    assert [t.due_at for t in store.timers("run_1")] == [T0 + 99]
    assert store.approvals(runs_in=[]) == []
    assert len(store.approvals()) == 5  # of every run


def test_list_runs_narrows_by_workflow_business_key_and_age(store: Store) -> None:
    """The console's runs list: the filters combine, and a page is taken after them."""
    store.save_spec(DIGEST, "refund", 1, "1", "name: refund\n", T0)
    store.save_spec("f" * 64, "returns", 1, "1", "name: returns\n", T0 + 1)
    made = [
        ("run_a", "refund", DIGEST, "T-1", "waiting", T0),
        ("run_b", "refund", DIGEST, "T-2", "done", T0 + 60),
        ("run_c", "returns", "f" * 64, "T-1", "waiting", T0 + 120),
    ]
    for run_id, workflow, digest, key, status, at in made:
        store.create_run(NewRun(run_id, workflow, digest, key, "proposed", status, {}, at))

    def ids(*args: Any, **only: Any) -> list[str]:
        return [r.id for r in store.list_runs(*args, **only)]

    assert ids() == ["run_c", "run_b", "run_a"]  # newest first
    assert ids(workflow="refund") == ["run_b", "run_a"]
    assert ids(business_key="T-1") == ["run_c", "run_a"]
    assert ids("waiting", workflow="refund", business_key="T-1") == ["run_a"]
    assert ids(created_before=T0 + 60) == ["run_a"]
    assert ids(created_before=T0 + 121, limit=1, offset=1) == ["run_b"]
    assert ids(workflow="nothing") == []
    versions = store.spec_versions()
    assert [(v.name, v.digest) for v in versions] == [("returns", "f" * 64), ("refund", DIGEST)]


def test_the_runs_started_with_one_value_at_an_input_path_are_found_newest_first(
    store: Store,
) -> None:
    """What an approver sees (``evidence.related_runs``): the runs of one workflow recorded with
    one value at one input path, newest first, but the run asking, a page of ``limit``; with
    the operations of several runs read at once."""
    store.save_spec(DIGEST, "refund", 1, "1", "name: refund\n", T0)
    store.save_spec("f" * 64, "returns", 1, "1", "name: returns\n", T0)
    order, other = {"input.order": "a" * 64}, {"input.order": "b" * 64}
    made = [
        ("run_a", "refund", DIGEST, order, T0),
        ("run_b", "refund", DIGEST, other, T0 + 1),  # another order
        ("run_c", "returns", "f" * 64, order, T0 + 2),  # another workflow
        ("run_d", "refund", DIGEST, {"input.ticket": "a" * 64}, T0 + 3),  # another path
        ("run_e", "refund", DIGEST, order, T0 + 4),
        ("run_f", "refund", DIGEST, {}, T0 + 5),  # none
        ("run_g", "refund", DIGEST, {**order, "input.ticket": "c" * 64}, T0 + 6),
    ]
    for run_id, workflow, digest, keys, at in made:
        new = NewRun(run_id, workflow, digest, run_id, "proposed", "waiting", {}, at, keys=keys)
        store.create_run(new)

    def ids(value: str, **page: Any) -> list[str]:
        return [r.id for r in store.related_runs("refund", "input.order", value, **page)]

    assert ids("a" * 64) == ["run_g", "run_e", "run_a"]
    assert ids("a" * 64, exclude="run_g", limit=1) == ["run_e"]
    assert ids("b" * 64) == ["run_b"]
    assert ids("c" * 64) == []
    assert store.related_runs("refund", "input.ticket", "c" * 64)[0].id == "run_g"
    for run_id in ("run_a", "run_e"):
        change = Change(run_id, 1, T0 + 10)
        change.new_operations.append(operation(f"op-{run_id}"))
        store.commit(change)
    assert [o.operation_id for o in store.operations(runs_in=["run_e", "run_b"])] == ["op-run_e"]
    store.reset()
    assert ids("a" * 64) == []


def test_finding_the_related_runs_is_an_index_lookup(store: Store) -> None:
    """However many runs the store holds: the query walks ``ix_evidence_keys_lookup``."""
    from ratchet_runner.store.tables import related_runs

    query = related_runs("refund", "input.order", "a" * 64, "run_1", 10)
    sql = str(query.compile(store.engine, compile_kwargs={"literal_binds": True}))
    explain = "EXPLAIN QUERY PLAN " if store.dialect.name == "sqlite" else "EXPLAIN "
    with store.engine.begin() as conn:
        if store.dialect.name != "sqlite":
            conn.exec_driver_sql("SET LOCAL enable_seqscan = off")  # an empty table: any plan
        plan = "\n".join(str(row[-1]) for row in conn.exec_driver_sql(explain + sql))
    assert "ix_evidence_keys_lookup" in plan, plan


def test_expired_leases_and_stuck_runs_are_found_without_reading_every_run(store: Store) -> None:
    """With 3,000 finished runs and a few live ones, the queries ``runs --stuck``, ``leases``
    and the metrics ask (a lease expired; a runnable run nobody moved) walk an index of the
    live runs (``ix_runs_lease``; an index led by the status for the other): no full scan of
    ``runs``."""
    from ratchet_runner.store.tables import lease_expired, unmoved

    store.save_spec(DIGEST, "refund", 1, "1", "text\n", T0)
    with store.engine.begin() as conn:
        conn.exec_driver_sql(
            "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 3000) "
            "INSERT INTO runs (id, workflow, spec_digest, business_key, state, status, version, "
            "input, context, created_at, updated_at, lease_owner, lease_token, lease_expires_at) "
            f"SELECT 'run_' || n, 'refund', '{DIGEST}', 'T-' || n, 'refunded', "
            "CASE WHEN n / 1000 * 1000 = n THEN 'running' ELSE 'done' END, 1, '{}', '{}', n, n, "
            "CASE WHEN n / 1000 * 1000 = n THEN 'w' END, "
            "CASE WHEN n / 1000 * 1000 = n THEN 't' || n END, "
            "CASE WHEN n / 1000 * 1000 = n THEN n END FROM g"
        )
        conn.exec_driver_sql("ANALYZE" if store.dialect.name == "sqlite" else "ANALYZE runs")
    expired = select(runs.c.id).where(lease_expired(literal(1e12)))
    idle = select(runs.c.id).where(unmoved(1e12, 300.0))
    for query, index in ((expired, "ix_runs_lease"), (idle, "ix_runs_")):  # claim's, or prune's
        sql = str(query.compile(store.engine, compile_kwargs={"literal_binds": True}))
        explain = "EXPLAIN QUERY PLAN " if store.dialect.name == "sqlite" else "EXPLAIN "
        with store.engine.begin() as conn:
            plan = "\n".join(str(row[-1]) for row in conn.exec_driver_sql(explain + sql))
        assert index in plan, plan
        assert "SCAN runs\n" not in plan + "\n"
        assert "Seq Scan on runs" not in plan, plan
    assert sorted(r.id for r, why in store.stuck(1e12, 300.0) if why == "lease expired") == [
        "run_1000",
        "run_2000",
        "run_3000",
    ]


def as_made_by_0_1(store_url: str) -> Store:
    """A store as Ratchet 0.1 made it: the first revision's schema, and no revision table
    (opened whatever its revision, for the caller to take more away)."""
    store = Store(store_url)
    schema.migrate_to(store, "0001")
    with store.engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE {schema.REVISION_TABLE}")
    return store


def test_opening_a_store_made_before_the_evidence_keys_table_adds_it(store_url: str) -> None:
    """A store made before the schema had revisions (and before ``evidence_keys``): opening it
    makes the table it lacks and records the first revision."""
    store = as_made_by_0_1(store_url)
    with store.engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE evidence_keys")
    store.close()
    if not store_url.startswith("sqlite"):  # PostgreSQL never upgrades itself: an operator does
        with pytest.raises(StoreRevision, match="ratchet db upgrade"):
            Store(store_url)
        upgrading = Store(store_url, checked=False)
        try:  # from 0001, the index 0002 adds built after its transaction
            steps = schema.migrate_to(upgrading, "head")
        finally:
            upgrading.close()
        assert steps == [
            "0001→0002",
            "0002→0003",
            "0003→0004",
            "0004→0005",
            "0005→0006",
            "0006→0007",
            "built ix_runs_prune",
            "built ix_runs_lease",
            "built ix_operations_unknown",
            "built ix_operations_failed_undo",
        ]

    reopened = Store(store_url)
    try:
        assert "evidence_keys" in inspect(reopened.engine).get_table_names()
        assert reopened.related_runs("refund", "input.order", "a" * 64) == []
    finally:
        reopened.close()


# -- SQLite specifics and concurrency -------------------------------------------------------


def test_the_sqlite_store_runs_in_wal_mode_with_synchronous_full(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'ratchet.db'}")
    try:
        # two connections open at once: every pooled connection is set up, not only the first
        with store.engine.connect() as one, store.engine.connect() as two:
            for conn in (one, two):
                assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
                assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL
                assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() >= 1000
                assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    finally:
        store.close()


def test_two_threads_committing_to_one_run_at_once_either_commit_or_lose_the_race(
    store_url: str,
) -> None:
    """Never 'database is locked': every attempt commits or raises VersionConflict."""
    setup = Store(store_url)
    run = new_run(setup)
    stores = [Store(store_url), Store(store_url)]
    outcomes: list[str] = []

    def worker(store: Store, name: str) -> None:
        for i in range(40):
            current = store.get_run(run.id)
            try:
                store.commit(Change(run.id, current.version, T0 + i).event("tick", by=name))
                outcomes.append("committed")
            except VersionConflict:
                outcomes.append("conflict")
            except Exception as exc:
                outcomes.append(f"{type(exc).__name__}: {exc}")

    try:
        _together(partial(worker, stores[0], "a"), partial(worker, stores[1], "b"))
        assert set(outcomes) <= {"committed", "conflict"}, outcomes
        committed = outcomes.count("committed")
        assert setup.get_run(run.id).version == 1 + committed
        assert len(setup.history(run.id)) == 1 + committed
    finally:
        for store in [setup, *stores]:
            store.close()


def test_two_processes_committing_to_one_sqlite_store_never_see_database_is_locked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'ratchet.db'}"
    setup = Store(url)
    new_run(setup, "run_shared", "T-shared")
    new_run(setup, "run_p0", "T-p0")
    new_run(setup, "run_p1", "T-p1")
    monkeypatch.syspath_prepend(str(ROOT))  # the spawned children import this module
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(2)
    results = context.Queue()
    workers = [
        context.Process(target=_commit_many, args=(url, f"run_p{i}", barrier, results))
        for i in range(2)
    ]
    for process in workers:
        process.start()
    try:
        reports = [results.get(timeout=120) for _ in workers]
    finally:
        for process in workers:
            process.join(timeout=60)
    for outcomes in reports:
        assert set(outcomes) <= {"committed", "conflict"}, outcomes
    own = [o for report in reports for o in report[:30]]
    assert own == ["committed"] * 60  # each process's own run: no contention, no failure
    shared_commits = sum(report[30:].count("committed") for report in reports)
    assert setup.get_run("run_shared").version == 1 + shared_commits
    setup.close()


def _commit_many(url: str, own_run: str, barrier: Any, results: Any) -> None:
    """A worker process: 30 commits to its own run, then 30 to the shared one."""
    store = Store(url)
    outcomes: list[str] = []
    barrier.wait(timeout=60)
    for run_id in [own_run] * 30 + ["run_shared"] * 30:
        try:
            current = store.get_run(run_id)
            store.commit(Change(run_id, current.version, T0).event("tick"))
            outcomes.append("committed")
        except VersionConflict:
            outcomes.append("conflict")
        except Exception as exc:
            outcomes.append(f"{type(exc).__name__}: {exc}")
    results.put(outcomes)
    store.close()


def test_several_processes_opening_one_fresh_store_at_once_all_succeed(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(4)
    results = context.Queue()
    workers = [
        context.Process(target=_open_store, args=(store_url, barrier, results)) for _ in range(4)
    ]
    for process in workers:
        process.start()
    try:
        reports = [results.get(timeout=120) for _ in workers]
    finally:
        for process in workers:
            process.join(timeout=60)
    assert reports == ["opened"] * 4
    store = Store(store_url)
    new_run(store)  # the tables are there and usable
    store.close()


def _open_store(url: str, barrier: Any, results: Any) -> None:
    barrier.wait(timeout=60)
    try:
        Store(url).close()
        results.put("opened")
    except Exception as exc:
        results.put(f"{type(exc).__name__}: {exc}")


def _together(*actions: Callable[[], object]) -> None:
    """Run the actions in threads released at the same moment; re-raise the first failure."""
    barrier = threading.Barrier(len(actions))
    failures: list[BaseException] = []

    def run(action: Callable[[], object]) -> None:
        try:
            barrier.wait(timeout=30)
            action()
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(a,)) for a in actions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    if failures:
        raise failures[0]


@pytest.mark.postgres
def test_a_postgresql_connection_the_server_dropped_while_idle_is_replaced_unseen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Pooled connections are not pinged on every use (that would double a commit's round
    trips); one idle for longer than ``IDLE_PING_SECONDS`` is, and a dead one is replaced."""
    monkeypatch.setattr(dialects, "IDLE_PING_SECONDS", 0.0)
    store = Store(postgres_url())
    try:
        run = new_run(store)
        with store.engine.connect() as conn:
            backend = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
        killer = create_engine(PG_URL, isolation_level="AUTOCOMMIT")
        with killer.connect() as conn:
            conn.exec_driver_sql(f"SELECT pg_terminate_backend({int(backend)})")
        killer.dispose()

        assert store.get_run(run.id) == run  # no StoreError: the ping found it dead first
    finally:
        store.close()


def test_a_postgresql_commit_is_one_statement_and_a_failed_one_writes_nothing() -> None:
    """The one-statement form writes every part of a change only when its compare-and-set
    matches; the forms it cannot express exactly go through a transaction."""
    from ratchet_runner.store.postgres import Statements, Tables
    from ratchet_runner.store.tables import approvals, history, operations, runs, signals, timers

    statements = Statements(Tables(runs, history, operations, approvals, timers, signals))
    change = Change("run_1", 3, T0, lease_token="t" * 32)
    change.event("pending", operation_id="op-1").event("call", attempt=1)
    change.new_operations.append(operation("op-1"))
    change.operation_updates.append(("op-0", {"status": "done", "receipt": {"id": 1}}))
    base = RunRecord("run_1", "refund", DIGEST, "T-1", "a", "running", 3, {}, {}, T0, T0)
    sql, params = statements.commit(change, change.preview(base)) or ("", {})

    assert sql.startswith("WITH cas AS (UPDATE runs SET")
    assert "lease_token = %(b_token)s" in sql
    for part in ("ev AS (INSERT INTO history", "op AS (INSERT INTO operations", "up0 AS (UPDATE"):
        line = next(line for line in sql.splitlines() if part in line)
        assert "FROM cas" in line  # writes nothing unless the compare-and-set matched
    assert params["o0_args"] == json.dumps({"order": "LK-1", "amount": 9.95}, separators=(",", ":"))
    assert statements.commit(change, change.preview(base)) is not None

    change.consume_approvals.append(7)
    assert statements.commit(change, change.preview(base)) is None


def test_a_new_postgresql_runs_evidence_keys_are_written_by_its_one_statement() -> None:
    from ratchet_runner.store.postgres import Statements, Tables
    from ratchet_runner.store.tables import approvals, history, operations, runs, signals, timers

    statements = Statements(Tables(runs, history, operations, approvals, timers, signals))
    new = NewRun("run_1", "refund", DIGEST, "T-1", "proposed", "waiting", {}, T0)
    new = replace(new, keys={"input.order": "a" * 64})
    sql, params = statements.create(new.record().__dict__, new.history(), (), None, new.key_rows())

    line = next(line for line in sql.splitlines() if "INSERT INTO evidence_keys" in line)
    assert line.startswith("ek AS (")
    assert "FROM cas" in line  # written only with the run
    assert (params["k0_path"], params["k0_value"]) == ("input.order", "a" * 64)
    bare, _ = statements.create(new.record().__dict__, new.history(), ())
    assert "evidence_keys" not in bare


def _prepared_on_the_store_connection(store: Store) -> int:
    with store.engine.connect() as conn:
        return int(conn.exec_driver_sql("SELECT count(*) FROM pg_prepared_statements").scalar_one())


@pytest.mark.postgres
@pytest.mark.parametrize(("option", "prepares"), [("", True), ("&prepare_threshold=none", False)])
def test_prepared_statements_can_be_turned_off_for_a_transaction_pooling_proxy(
    option: str, prepares: bool
) -> None:
    """A commit runs prepared on the server after a few uses, unless the URL says
    ``prepare_threshold=none`` (PgBouncer before 1.21, in transaction mode, cannot keep them)."""
    store = Store(postgres_url() + option)
    try:
        run = new_run(store)
        for _ in range(8):
            run = store.commit(Change(run.id, run.version, T0, run).event("noted"))
        assert (_prepared_on_the_store_connection(store) > 0) is prepares
    finally:
        store.close()


def test_a_prepare_threshold_that_is_not_a_number_is_a_clear_store_error() -> None:
    with pytest.raises(StoreError, match="prepare_threshold must be a number or 'none'"):
        Store(f"{PG_URL}?prepare_threshold=sometimes")


def test_opening_a_store_made_before_an_index_existed_adds_the_index(store_url: str) -> None:
    """A store made before revisions were kept, and before ``ix_runs_claim``: recording it at
    the first revision adds the index (by itself on SQLite, by ``ratchet db upgrade`` on
    PostgreSQL)."""
    store = as_made_by_0_1(store_url)
    with store.engine.begin() as conn:
        conn.exec_driver_sql("DROP INDEX ix_runs_claim")
    store.close()
    if not store_url.startswith("sqlite"):
        upgrading = Store(store_url, checked=False)
        schema.migrate_to(upgrading, "head")
        upgrading.close()

    reopened = Store(store_url)
    try:
        names = {index["name"] for index in inspect(reopened.engine).get_indexes("runs")}
        assert "ix_runs_claim" in names
    finally:
        reopened.close()


@pytest.mark.postgres
def test_a_claim_reads_the_backlog_in_index_order_not_all_of_it() -> None:
    """With 20,000 runnable runs a claim walks ``ix_runs_claim`` to the first free run instead
    of sorting every runnable run (the claim then costs the same for any backlog)."""
    store = Store(postgres_url())
    try:
        _claim_from_a_backlog(store)
    finally:
        store.close()


def _runnable_runs(store: Store, count: int) -> None:
    """``count`` runnable runs of the refund spec, ``run_1`` the least recently moved, written
    straight into the store (PostgreSQL), and the planner's statistics gathered."""
    store.save_spec(DIGEST, "refund", 1, "1", "text\n", T0)
    with store.engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO runs (id, workflow, spec_digest, business_key, state, status, version, "
            "input, context, created_at, updated_at) SELECT 'run_' || g, 'refund', "
            f"'{DIGEST}', 'T-' || g, 'proposed', 'running', 1, '{{}}', '{{}}', g, g "
            f"FROM generate_series(1, {int(count)}) AS g"
        )
        conn.exec_driver_sql("ANALYZE runs")


def _claim_from_a_backlog(store: Store) -> None:
    _runnable_runs(store, 20000)
    assert isinstance(store._writer, PostgresWriter)
    claim_sql = store._writer.statements.claim_sql
    sql = claim_sql % {
        "now": "1e12",
        "limit": "1",
        "owner": "'me'",
        "seconds": "30",
        "skip": "ARRAY['run_7']",
    }
    with store.engine.begin() as conn:
        plan = "\n".join(row[0] for row in conn.exec_driver_sql("EXPLAIN " + sql))
        conn.rollback()
    assert "Index Scan using ix_runs_claim on runs" in plan
    (claimed,) = store.claim("me", 30.0, 1e12)
    assert claimed.id == "run_1"  # the least recently moved


@pytest.mark.postgres
def test_a_claim_commits_without_waiting_for_the_disk_and_nothing_after_it_does() -> None:
    """A claim's statement turns ``synchronous_commit`` off for itself alone (a claim lost in a
    crash is refused at the worker's next commit, which is synchronous: see
    ``PostgresWriter``'s claim); the connection's next transaction waits for the disk again,
    and a claimed run is claimed."""
    store = Store(postgres_url())
    try:
        _runnable_runs(store, 1)
        assert isinstance(store._writer, PostgresWriter)
        params = {"now": 1e12, "limit": 1, "owner": "me", "seconds": 30.0, "skip": []}
        with store.engine.connect() as conn:
            with conn.begin():
                conn.exec_driver_sql(store._writer.statements.claim_sql, params).fetchall()
                within = conn.exec_driver_sql("SHOW synchronous_commit").scalar()
            after = conn.exec_driver_sql("SHOW synchronous_commit").scalar()
            conn.rollback()
        assert (within, after) == ("off", "on")
        assert store.get_run("run_1").lease_owner == "me"
    finally:
        store.close()


def _opened_within(url: str, seconds: float) -> bool:
    """Whether a store at ``url`` opens (its schema checked under the schema lock) within
    ``seconds``."""
    opened = threading.Event()

    def open_one() -> None:
        Store(url).close()
        opened.set()

    threading.Thread(target=open_one, daemon=True).start()
    return opened.wait(seconds)


@pytest.mark.postgres
def test_a_process_frozen_while_it_creates_the_schema_does_not_keep_others_from_opening() -> None:
    """A worker frozen (SIGSTOP, a long pause) inside the schema's creation holds its lock in an
    open transaction: the server ends that session after a few seconds, so other processes
    open the store; and a store in another schema of the database never waits for it."""
    url, elsewhere = postgres_url(), postgres_url()
    holder = Store(url, checked=False)  # the store is new: the holder freezes making it
    try:
        conn = holder.engine.connect()
        transaction = conn.begin()
        holder.dialect.lock_schema(conn)  # ... and then the process freezes
        assert _opened_within(elsewhere, 20)
        assert _opened_within(url, 30)
        with pytest.raises(SQLAlchemyError):  # its session was ended for it
            conn.exec_driver_sql("SELECT 1")
        transaction.rollback()
        conn.close()
    finally:
        holder.close()


def test_a_connection_in_use_when_the_store_drops_its_pool_is_closed_once_given_back(
    store: Store,
) -> None:
    """After an outage a worker drops its pooled connections; one that another thread is using
    at that moment goes back to the old pool when it is done, and is closed with the store,
    not left to the garbage collector (which drops it without ending its session)."""
    in_use = store.engine.connect()
    raw = in_use.connection.dbapi_connection
    idle_then = store.engine.connect()
    pooled = idle_then.connection.dbapi_connection
    idle_then.close()  # back in the pool: closed at the drop itself
    store.drop_connections()
    assert connection_closed(pooled)
    assert store.counts()["runs"] == 0  # the store goes on, on a new connection
    in_use.close()  # given back to the old pool
    assert not connection_closed(raw)
    store.close()
    assert connection_closed(raw)


def test_a_closed_store_opens_no_connection_for_a_late_caller(store: Store) -> None:
    """A thread that reads through a store after it was closed (a heartbeat, a listener's
    probe) gets a StoreError; it does not open a connection that nobody would close."""
    store.close()
    opened: list[object] = []
    event.listen(store.engine, "connect", lambda *args: opened.append(args))
    with pytest.raises(StoreError, match="the store is closed"):
        store.get_run("run_0000")
    store.close()  # closing twice is harmless
    assert opened == []


def test_stores_opened_at_once_on_a_new_sqlite_file_all_open(tmp_path: Path) -> None:
    """A pool's threads (or a command and a worker) opening a new SQLite store together: the
    first to turn on WAL mode makes the others' attempt fail at once with "database is locked"
    (SQLite does not wait on its busy timeout for it). Each waits its turn instead; 4 threads
    at once on 40 new files all open (before, about 1 try in 10 failed one of them)."""
    failed: list[str] = []

    def open_one(url: str, start: threading.Barrier) -> None:
        start.wait()
        try:
            Store(url).close()
        except StoreError as exc:
            failed.append(str(exc))

    for attempt in range(40):
        url = f"sqlite:///{tmp_path / f'new-{attempt}.db'}"
        start = threading.Barrier(4)
        threads = [threading.Thread(target=open_one, args=(url, start)) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert failed == []


@pytest.mark.parametrize("given", ["", "?connect_timeout=1"])
def test_a_postgresql_server_that_never_answers_is_a_store_error_not_a_hang(
    monkeypatch: pytest.MonkeyPatch, given: str
) -> None:
    """A server that accepts the connection and never speaks (a stuck proxy, a frozen host):
    opening the store gives up after the connect timeout (CONNECT_TIMEOUT, unless the URL says
    ?connect_timeout=N) with a StoreError, instead of waiting for ever."""
    import socket

    monkeypatch.setattr(dialects, "CONNECT_TIMEOUT", 1 if not given else 600)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # the kernel completes the handshake; nobody ever answers
        url = f"postgresql+psycopg://postgres@127.0.0.1:{silent.getsockname()[1]}/test{given}"
        outcome: list[BaseException | Store] = []

        def open_it() -> None:
            try:
                outcome.append(Store(url))
            except BaseException as exc:
                outcome.append(exc)

        opener = threading.Thread(target=open_it, daemon=True)
        opener.start()
        opener.join(30)
        assert not opener.is_alive(), "opening the store still waits on a silent server"
    [found] = outcome
    assert isinstance(found, StoreError)
    assert "cannot open the store" in str(found)


def test_run_ids_are_oldest_first_narrowed_by_workflow_and_creation_time(store: Store) -> None:
    """What an export walks: every run's ID by creation time then ID, of one workflow, created
    at or after a moment."""
    store.save_spec(DIGEST, "refund", 1, "1", "name: refund\n", T0)
    store.save_spec("f" * 64, "returns", 1, "1", "name: returns\n", T0)
    made = [
        ("run_b", "refund", DIGEST, T0 + 60),
        ("run_a", "refund", DIGEST, T0 + 60),
        ("run_c", "returns", "f" * 64, T0),
        ("run_d", "refund", DIGEST, T0 + 120),
    ]
    for run_id, workflow, digest, at in made:
        store.create_run(NewRun(run_id, workflow, digest, run_id, "s", "waiting", {}, at))
    assert store.run_ids() == ["run_c", "run_a", "run_b", "run_d"]
    assert store.run_ids("refund") == ["run_a", "run_b", "run_d"]
    assert store.run_ids("refund", since=T0 + 61) == ["run_d"]
    assert store.run_ids(since=T0 + 60) == ["run_a", "run_b", "run_d"]
    assert store.run_ids("nothing") == []


def test_a_runs_signals_come_back_in_the_order_received(store: Store) -> None:
    run = new_run(store)
    for n, (signal_id, at) in enumerate([("late", T0 + 9), ("early", T0 + 1)], start=1):
        change = Change(run.id, n, at)
        change.new_signals.append(
            {
                "signal_id": signal_id,
                "event": "parcel_received",
                "data": {"n": n},
                "received_at": at,
            }
        )
        store.commit(change.event("signal", signal_id=signal_id))
    new_run(store, "run_2", "T-2")
    assert [(s.signal_id, s.data) for s in store.signals(run.id)] == [
        ("early", {"n": 2}),
        ("late", {"n": 1}),
    ]
    assert store.signals("run_2") == []
