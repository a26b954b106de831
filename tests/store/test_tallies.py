"""The ended runs' tallies (``ratchet_runner.store.tallies``): the metrics and ``status`` read
them instead of every finished run, so they must say exactly what a count of every row says,
whichever way a run ends, comes back, is pruned or forgotten, and however many workers end runs
at once."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text

from ratchet_runner.session import Session
from ratchet_runner.store import schema, tallies
from ratchet_runner.store.records import Change
from ratchet_runner.store.store import Store
from ratchet_runner.words import RunStatus
from tests.conftest import ROOT, run_cli
from tests.store.test_store import DIGEST, T0, new_run, operation


def scanned(store: Store) -> dict[str, Any]:
    """The figures the tallies stand for, counted from every row (what the metrics read
    before the tallies)."""
    with store.engine.connect() as conn:
        runs = {
            (w, s): n
            for w, s, n in conn.execute(
                text("SELECT workflow, status, count(*) FROM runs GROUP BY workflow, status")
            )
        }
        attempts = {
            (w, e, r): (n, int(a))
            for w, e, r, n, a in conn.execute(
                text(
                    "SELECT r.workflow, o.effect, o.role, count(*), sum(o.attempts) "
                    "FROM operations o JOIN runs r ON r.id = o.run_id "
                    "GROUP BY r.workflow, o.effect, o.role"
                )
            )
        }
        statuses = {
            str(s): int(n)
            for s, n in conn.execute(text("SELECT status, count(*) FROM runs GROUP BY status"))
        }
    return {"runs": runs, "attempts": attempts, "status": statuses}


def read(store: Store) -> dict[str, Any]:
    """The same figures as the store now gives them (tallies and live runs)."""
    stats = store.stats(T0 + 100)
    return {"runs": stats.runs, "attempts": stats.attempts, "status": store.status_counts()}


def ended_tallies(store: Store) -> dict[tuple[str, ...], tuple[int, int]]:
    with store.engine.connect() as conn:
        ended, operations = tallies.read(conn)
    return {**{k: (n, 0) for k, n in ended.items()}, **operations}


def end_runs(store: Store, *statuses: RunStatus, attempts: int | None = None) -> None:
    """One run ended with each of ``statuses`` (``run_0``, ``run_1``, …), with one done
    operation each, of ``attempts`` attempts (default: its number, plus one)."""
    for i, status in enumerate(statuses):
        run = new_run(store, f"run_{i}", f"T-{i}")
        made = attempts if attempts is not None else i + 1
        store.commit(
            Change(
                run.id,
                1,
                T0 + 1,
                status=status,
                new_operations=[operation(f"op-{i}", status="done", attempts=made)],
            )
        )


def test_a_run_counts_once_as_it_ends_goes_back_and_ends_again(store: Store) -> None:
    """A run ending adds itself and its operations as that commit leaves them (the last
    receipt included); an operator taking it back takes them out; ending again adds them anew;
    a commit on an ended run that changes an operation recounts it; one that changes none (a
    version migration) leaves the tallies alone."""
    run = new_run(store)
    store.commit(Change(run.id, 1, T0 + 1, new_operations=[operation("op-a")]).event("pending"))
    assert ended_tallies(store) == {}
    sent: list[str] = []
    event.listen(store.engine, "before_cursor_execute", lambda *a: sent.append(a[2]))
    store.commit(
        Change(
            run.id,
            2,
            T0 + 2,
            status=RunStatus.DONE,
            state="refunded",
            operation_updates=[("op-a", {"status": "done", "attempts": 2})],
        ).event("moved")
    )
    if store.dialect.name == "postgresql":  # still the one statement a commit is there
        writes = [sql for sql in sent if not sql.startswith("SELECT runs.id")]
        assert len(writes) == 1
        assert "INSERT INTO tallies" in writes[0]
    assert ended_tallies(store) == {
        ("refund", "done"): (1, 0),
        ("refund", "request_refund", "forward", "done"): (1, 2),
    }
    assert read(store) == scanned(store)
    store.commit(Change(run.id, 3, T0 + 3, status=RunStatus.RUNNING, state="proposed"))
    assert ended_tallies(store) == {}
    assert read(store) == scanned(store)
    store.commit(
        Change(
            run.id,
            4,
            T0 + 4,
            status=RunStatus.CANCELLED,
            new_operations=[operation("op-u", role="compensation", status="refused")],
        )
    )
    assert ended_tallies(store) == {
        ("refund", "cancelled"): (1, 0),
        ("refund", "request_refund", "forward", "done"): (1, 2),
        ("refund", "request_refund", "compensation", "refused"): (1, 1),
    }
    stats = store.stats(T0 + 100)
    assert stats.failed_undos == {("refund", "request_refund"): 1}
    store.commit(
        Change(run.id, 5, T0 + 5, operation_updates=[("op-u", {"status": "done", "attempts": 3})])
    )
    assert ended_tallies(store)[("refund", "request_refund", "compensation", "done")] == (1, 3)
    assert ("refund", "request_refund", "compensation", "refused") not in ended_tallies(store)
    before = ended_tallies(store)
    store.save_spec("e" * 64, "refund", 2, "1", "name: refund\n", T0)
    store.commit(Change(run.id, 6, T0 + 6, spec_digest="e" * 64))
    assert ended_tallies(store) == before
    assert read(store) == scanned(store)


def test_forgetting_a_run_takes_it_out_and_keeps_its_attempts(store: Store) -> None:
    """Pruning changes no tally (a tombstone is an ended run); forgetting the tombstone takes
    the run out of the counts by status, while its attempts stay counted: calls made are not
    unmade. A reset empties the tallies with the runs."""
    end_runs(store, *[RunStatus.DONE] * 3, attempts=2)
    before = ended_tallies(store)
    assert before[("refund", "done")] == (3, 0)
    finished = store.prunable(T0 + 10, 10)
    assert store.prune([(run, run.context) for run in finished], T0 + 20) == [
        f"run_{i}" for i in range(3)
    ]
    assert ended_tallies(store) == before
    assert store.stats(T0 + 100).runs == {("refund", "done"): 3}
    assert len(store.forget(store.forgettable(DIGEST, T0 + 30, 10))) == 3
    assert store.status_counts() == {}
    assert store.stats(T0 + 100).attempts == {("refund", "request_refund", "forward"): (3, 6)}
    store.reset()
    assert ended_tallies(store) == {}


def test_workers_ending_runs_at_once_count_each_exactly_once(store: Store) -> None:
    """Eight threads end 40 runs each at once, through the store's own commit: on PostgreSQL
    the tally rows are updated from many transactions, spread over their slots; the counts are
    exact, and every slot in use."""
    ids = [f"run_{t}_{i}" for t in range(8) for i in range(40)]
    for run_id in ids:
        run = new_run(store, run_id, f"T-{run_id}")
        store.commit(Change(run.id, 1, T0 + 1, new_operations=[operation(f"op-{run_id}")]))
    failures: list[BaseException] = []

    def end(mine: list[str]) -> None:
        try:
            for run_id in mine:
                store.commit(
                    Change(
                        run_id,
                        2,
                        T0 + 2,
                        status=RunStatus.DONE,
                        operation_updates=[(f"op-{run_id}", {"status": "done"})],
                    )
                )
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=end, args=(ids[t::8],)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert ended_tallies(store) == {
        ("refund", "done"): (320, 0),
        ("refund", "request_refund", "forward", "done"): (320, 320),
    }
    with store.engine.connect() as conn:
        slots = conn.execute(text("SELECT count(DISTINCT slot) FROM tallies")).scalar_one()
    assert slots == tallies.SLOTS
    assert read(store) == scanned(store)


def test_the_revision_counts_the_runs_a_store_already_holds(store_url: str) -> None:
    """A store taken back to revision 0004 (no tallies) with ended runs in it: the revision
    that adds the tallies fills them from those runs, and the figures match a count of every
    row."""
    store = Store(store_url)
    try:
        end_runs(store, RunStatus.DONE, RunStatus.DONE, RunStatus.CANCELLED)
        new_run(store, "run_live", "T-live")
        assert schema.migrate_to(store, "0004")[-1] == "0005→0004"
        assert schema.migrate_to(store, "head")[0] == "0004→0005"
        assert ended_tallies(store) == {
            ("refund", "done"): (2, 0),
            ("refund", "cancelled"): (1, 0),
            ("refund", "request_refund", "forward", "done"): (3, 6),
        }
        assert read(store) == scanned(store)
    finally:
        store.close()


def test_every_way_the_engine_ends_a_run_keeps_the_figures_true(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Runs driven by the command line to the ends the shipped specs have (approved with its
    reply lost, then reconciled; an undo refused; a saga and returns left waiting or to a
    person, then cancelled by an operator): after each command, the metrics' figures
    and ``status``'s counts are those a count of every row gives."""
    monkeypatch.setenv("RATCHET_HOME", str(tmp_path / "home"))
    for name in ("RATCHET_DB", "RATCHET_BINDINGS", "RATCHET_NOW"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(ROOT)
    refund, booking, returns = "specs/refund.yaml", "specs/booking.yaml", "specs/returns.yaml"
    payments = ("--as", "olu", "--role", "payments_ops")
    steps: list[tuple[str, ...]] = [
        ("run", refund, "--example", "T-90104", "--fault", "request_refund:lookup_fails"),
        ("approve", "T-90104", "--as", "ana", "--role", "agent"),
        ("ops", "reconcile", "T-90104", *payments),
        ("run", booking, "--example", "hotel_refused", "--fault", "release_flight:refuse"),
        ("run", booking, "--example", "happy"),
        ("run", returns, "--example", "T-90605"),
        ("run", returns, "--example", "T-90604"),
    ]
    for args in steps:
        code, _, err = run_cli(capsys, *args)
        assert code == 0, (args, err)
        with Session() as session:
            assert read(session.store) == scanned(session.store), args
    with Session() as session:
        store = session.store
        by_status = store.status_counts()
        assert by_status.get("done", 0) >= 1
        assert by_status.get("needs_person", 0) >= 1
        open_runs = [r for r in store.list_runs(None, 100) if r.status not in ("done", "cancelled")]
    roles = {"refund": "payments_ops", "booking": "travel_ops", "returns": "warehouse_ops"}
    for run in open_runs:  # every one the operator ends
        role = roles[run.workflow]
        code, _, err = run_cli(capsys, "ops", "cancel", run.id, "--as", "ops-1", "--role", role)
        assert code == 0, (run.id, err)
        with Session() as session:
            assert read(session.store) == scanned(session.store), run.id
    with Session() as session:  # every run has ended, and is counted once, in the tallies
        ended = ended_tallies(session.store)
        every = len(session.store.list_runs(None, 100))
        assert set(session.store.status_counts()) <= {"done", "cancelled"}
    assert open_runs
    assert sum(n for key, (n, _) in ended.items() if len(key) == 2) == every == len(steps) - 2


def test_ratchet_db_recount_puts_right_what_an_old_worker_left_uncounted(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run ended by a writer that keeps no tallies (a worker of a Ratchet older than revision
    0005, played here by taking its tally out): the counts are short until ``ratchet db
    recount``, which says what it changed, then finds nothing more to change."""
    store = Store(store_url)
    try:
        end_runs(store, RunStatus.DONE, RunStatus.DONE, attempts=2)
        assert tallies.slot("run_0") != tallies.slot("run_1")
        with store.engine.begin() as conn:
            uncounted = {"slot": tallies.slot("run_1")}
            conn.execute(text("DELETE FROM tallies WHERE slot = :slot"), uncounted)
        assert read(store) != scanned(store)
    finally:
        store.close()
    code, out, _ = run_cli(capsys, "db", "recount", "--db", store_url, "--json")
    assert code == 0
    assert json.loads(out)["changed"] == [
        {"workflow": "refund", "status": "done", "runs": [1, 2]},
        {
            "workflow": "refund",
            "effect": "request_refund",
            "role": "forward",
            "status": "done",
            "operations": [1, 2],
            "attempts": [2, 4],
        },
    ]
    store = Store(store_url)
    try:
        assert read(store) == scanned(store)
    finally:
        store.close()
    code, out, _ = run_cli(capsys, "db", "recount", "--db", store_url)
    assert (code, out.strip()) == (0, "recounted: every figure was right")


def test_a_run_made_already_ended_counts_as_it_is_made(store: Store) -> None:
    """A run created with an ended status (an import, a test's fixture) is counted by the
    transaction that creates it, on either store."""
    new_run(store, "run_0", "T-0", status=RunStatus.CANCELLED)
    assert ended_tallies(store) == {("refund", "cancelled"): (1, 0)}
    assert read(store) == scanned(store)
