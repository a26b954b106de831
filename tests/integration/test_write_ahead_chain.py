"""The next effect's write-ahead rides with the previous effect's receipt: one commit per effect
step, the pending record still committed before the call, and a crash between the two handled
like any crash before a request (reconcile, then the same operation ID)."""

from __future__ import annotations

from collections import Counter

import pytest
from sqlalchemy import event

from ratchet_runner.adapters.noop import NoopAdapter
from ratchet_runner.adapters.practice import PracticeWorld
from ratchet_runner.clock import FakeClock
from ratchet_runner.engine.runner import Runner
from ratchet_runner.spec.validate import load_spec
from ratchet_runner.store.records import Change, RunRecord
from ratchet_runner.store.store import Store
from ratchet_runner.worker.pool import Pool
from tests.conftest import ROOT, MakeRunner, spec_and_text

THREE = ROOT / "bench" / "specs" / "three_effects.yaml"


class Crash(BaseException):
    pass


def counting_commits(store: Store) -> list[Change]:
    """Record every change the store commits."""
    committed: list[Change] = []
    commit = store.commit

    def record(change: Change) -> RunRecord:
        moved = commit(change)
        committed.append(change)
        return moved

    store.commit = record  # type: ignore[method-assign]
    return committed


def test_three_effects_in_a_row_take_four_commits_and_each_pending_precedes_its_call(
    store: Store,
) -> None:
    spec, text = load_spec(THREE), THREE.read_text(encoding="utf-8")
    adapter = NoopAdapter()
    runner = Runner(store, lambda _: adapter)
    run, _ = runner.start(spec, text, {"key": "K-1"})
    committed = counting_commits(store)

    final = runner.advance(run)

    assert final.state == "done"
    assert adapter.calls == 3
    assert len(committed) == 4  # first write-ahead; then receipt + next write-ahead, twice; receipt
    history = store.history(run.id)
    kinds = [(e.version, e.kind) for e in history if e.kind in ("pending", "call", "done")]
    assert kinds == [
        (2, "pending"),
        (2, "call"),
        (3, "done"),
        (3, "pending"),
        (3, "call"),
        (4, "done"),
        (4, "pending"),
        (4, "call"),
        (5, "done"),
    ]
    # The runner that wrote a pending record ahead calls it without asking the provider first.
    assert not [e for e in history if e.kind.startswith("reconcile") or e.kind == "resumed"]
    assert {op.attempts for op in store.operations(run.id)} == {1}


def test_a_three_effect_run_sends_at_most_twelve_statements(store: Store) -> None:
    """What a 3-step run sends, start to end. On SQLite: its creation (the run, its history in
    one multi-row insert), then each of its 4 commits as one ``INSERT INTO ratchet_commit``
    (the compare-and-set, the history, the operations and the end's tally written by the
    connection's trigger: :mod:`~ratchet_runner.store.sqlite`), each attempt's count in
    ``meta``, and one read: 10, where it sent 21 before the trigger (each of its writes a
    statement: 4 compare-and-sets, 5 history inserts, 3 new operations, 3 receipts, 3 counts,
    a tally, the creation's insert and one read), and 37 before that. On PostgreSQL each of the
    5 writes is one statement."""
    spec, text = load_spec(THREE), THREE.read_text(encoding="utf-8")
    runner = Runner(store, lambda _: NoopAdapter())
    warm, _ = runner.start(spec, text, {"key": "K-0"})
    runner.advance(warm)
    sent: list[tuple[str, bool]] = []

    def keep(_c: object, _cur: object, sql: str, _p: object, _ctx: object, many: bool) -> None:
        sent.append((" ".join(sql.split()), many))

    event.listen(store.engine, "before_cursor_execute", keep)
    try:
        run, _ = runner.start(spec, text, {"key": "K-1"})
        assert runner.advance(run).state == "done"
    finally:
        event.remove(store.engine, "before_cursor_execute", keep)
    writes = [sql for sql, _ in sent if not sql.startswith("SELECT")]
    assert not [sql for sql, many in sent if many]
    if store.dialect.name == "sqlite":
        assert Counter(" ".join(sql.split()[:3]) for sql in writes) == {
            "INSERT INTO runs": 1,
            "INSERT INTO history": 1,  # the creation's history
            "INSERT INTO ratchet_commit": 4,  # each commit, whole
            "UPDATE meta SET": 3,  # each attempt counted (restores.py)
        }
        assert len(sent) == 10
    else:
        assert len(writes) == 5
    assert len(sent) <= 12


def test_a_crash_after_a_receipt_leaves_the_next_hold_written_ahead_and_the_resume_reconciles(
    make_runner: MakeRunner, world: PracticeWorld
) -> None:
    spec, text = spec_and_text("booking")

    def crash(point: str, effect: str) -> None:
        if (point, effect) == ("after-receipt", "hold_flight"):
            raise Crash

    first = Runner(
        make_runner().store,
        lambda adapter: world.adapter(adapter.kind),
        make_runner().clock,
        interrupt=crash,
    )
    run, _ = first.start(spec, text, spec.examples["happy"].input)
    with pytest.raises(Crash):
        first.advance(run)

    crashed = first.store.get_run(run.id)
    assert crashed.state == "holding_hotel"
    hotel = [op for op in first.store.operations(run.id) if op.effect == "hold_hotel"]
    assert [(op.status, op.attempts) for op in hotel] == [("pending", 1)]
    assert world.calls("hold_hotel") == []  # written ahead, never sent

    # A new runner knows nothing of the crash: the hotel (which keeps no key register) may
    # still receive a request sent before the call's deadline, and commit it up to its
    # commits_within after. Finding nothing now, it makes no call, and looks again then.
    second = make_runner()
    waiting = second.advance(run.id)
    assert (waiting.state, waiting.status) == ("holding_hotel", "running")
    assert [c["outcome"] for c in world.calls("hold_hotel")] == ["lookup"]  # no call yet
    wake = waiting.context["wake_at"]
    assert isinstance(second.clock, FakeClock)
    second.clock.advance(wake - second.clock.now())

    resumed = second.advance(run.id)

    assert resumed.state == "approving"
    after = [e.kind for e in first.store.history(run.id) if e.version > crashed.version]
    assert after[:3] == ["resumed", "reconcile_unsettled", "settle_scheduled"]
    assert after[3:6] == ["resumed", "reconcile_not_found", "call"]
    assert Counter(c.operation for c in world.changes()) == {"hold_flight": 1, "hold_hotel": 1}
    asked = [(c["operation_id"], c["outcome"]) for c in world.calls("hold_hotel")]
    assert asked[:2] == [(hotel[0].operation_id, "lookup")] * 2  # asked twice before calling
    assert [i for i, outcome in asked[2:] if outcome != "lookup"] == [hotel[0].operation_id]


def test_an_effect_that_needs_an_approval_is_not_written_ahead(
    make_runner: MakeRunner,
) -> None:
    """The itinerary's confirmation consumes an approval, which only its own step may do: the
    hotel's receipt moves the run to the pause that asks, and writes nothing ahead."""
    spec, text = spec_and_text("booking")
    runner = make_runner()
    run, _ = runner.start(spec, text, spec.examples["happy"].input)

    waiting = runner.advance(run)

    assert (waiting.state, waiting.status) == ("approving", "waiting")
    effects = {op.effect for op in runner.store.operations(run.id) if op.role == "forward"}
    assert effects == {"hold_flight", "hold_hotel"}


def test_a_stopping_pool_finishes_the_step_it_wrote_ahead_then_releases_the_run(
    store: Store,
) -> None:
    """SIGTERM between steps: the effect already written ahead is called (it was promised),
    nothing more is written ahead, the lease is released, and another pool finishes the run
    with each effect made once and no reconcile needed."""
    spec, text = load_spec(THREE), THREE.read_text(encoding="utf-8")
    adapter = NoopAdapter()
    run, _ = Runner(store, lambda _: adapter).start(spec, text, {"key": "K-2"})
    pools: list[Pool] = []

    def stop_after_first(point: str, effect: str) -> None:
        if (point, effect) == ("after-receipt", "first"):
            pools[0].stop.set()

    pools.append(
        Pool(
            lambda options: Runner(
                store, lambda _: adapter, interrupt=stop_after_first, options=options
            ),
            poll=0.01,
        )
    )
    pools[0].run()

    stopped = store.get_run(run.id)
    assert (stopped.state, stopped.lease_token) == ("three", None)
    assert adapter.calls == 2
    assert [op.effect for op in store.operations(run.id)] == ["first", "second"]

    Pool(lambda options: Runner(store, lambda _: adapter, options=options), poll=0.01).run(
        until_idle=True
    )

    assert store.get_run(run.id).state == "done"
    assert adapter.calls == 3
    kinds = [e.kind for e in store.history(run.id)]
    assert "resumed" not in kinds
    assert not [k for k in kinds if k.startswith("reconcile")]
