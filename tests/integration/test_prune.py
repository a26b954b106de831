"""``ratchet prune``: finished runs compacted to their tombstones, on SQLite and PostgreSQL.

Only finished runs are taken (never one waiting, with a person, with a timer still armed or an
operation whose outcome is not settled); what stays of each answers for it: its business key
started again finds it done and makes nothing again, another input for it is refused. A prune
killed by SIGKILL midway leaves every run whole or pruned, and run again it finishes the job."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from typing import Any

import pytest
from sqlalchemy import insert, select, update

from ratchet_runner.adapters.practice import PracticeWorld
from ratchet_runner.clock import FakeClock
from ratchet_runner.engine.deciding import decide
from ratchet_runner.engine.pruning import prune
from ratchet_runner.errors import InputConflict, RunNotFound
from ratchet_runner.spec.validate import load_spec_text
from ratchet_runner.store.compact import expand
from ratchet_runner.store.store import Store
from ratchet_runner.store.tables import approvals, history, operations, timers
from tests.conftest import ROOT, MakeRunner, run_cli, spec_and_text
from tests.integration.test_evolve_live import refund_input

DAY = 86400.0


def refunds(make_runner: MakeRunner, world: PracticeWorld, numbers: range) -> dict[int, str]:
    """One refund per number, refunded (done): its run ID by number."""
    spec, text = spec_and_text("refund")
    world.seed({"orders": [{"order": f"LK-{n}", "paid": 100, "currency": "CAD"} for n in numbers]})
    runner = make_runner()
    done = {}
    for n in numbers:
        run, _ = runner.start(spec, text, refund_input(n))
        run = runner.advance(run.id)
        decide(runner, run.id, "approve", "agent-7", "agent")
        assert runner.advance(run.id).status == "done"
        done[n] = run.id
    return done


def rows(store: Store, table: Any, run_id: str) -> list[Any]:
    with store.engine.connect() as conn:
        return list(conn.execute(select(table).where(table.c.run_id == run_id)))


def test_prune_takes_only_finished_runs_and_their_tombstones_answer_for_them(
    make_runner: MakeRunner, world: PracticeWorld, store: Store, clock: FakeClock
) -> None:
    spec, text = spec_and_text("refund")
    done = refunds(make_runner, world, range(7001, 7004))
    runner = make_runner()
    waiting, _ = runner.start(spec, text, refund_input(7010))
    runner.advance(waiting.id)
    rejected, _ = runner.start(spec, text, refund_input(7011))
    runner.advance(rejected.id)
    decide(runner, rejected.id, "reject", "agent-7", "agent", reason="not late")
    unknown, _ = runner.start(spec, text, refund_input(7012))
    runner.advance(unknown.id)
    decide(runner, unknown.id, "approve", "agent-7", "agent")
    world.add_fault("request_refund", "timeout_after_write", times=1)
    world.add_fault("request_refund", "lookup_fails", times=1)
    assert runner.advance(unknown.id).status == "needs_person"
    changes_before = len(world.changes())

    clock.advance(DAY)
    assert prune(store, clock.now() - 2 * DAY, clock.now()).pruned == 0  # none finished so long ago
    counted = prune(store, clock.now() - DAY / 2, clock.now(), dry_run=True)
    assert (counted.pruned, store.get_run(done[7001]).pruned_at) == (4, None)  # nothing changed
    report = prune(store, clock.now() - DAY / 2, clock.now(), batch=2)
    assert (report.pruned, report.batches, report.by_workflow) == (4, 2, {"refund": 4})

    for run_id in [*done.values(), rejected.id]:
        run = store.get_run(run_id)
        assert run.pruned_at == clock.now()
        assert run.input == {}
        assert set(run.context) <= {
            "pruned",
            "operations",
            "receipts",
            "completed",
            "binding",
            "ratchet_version",
            "migrated",
        }
        [only] = store.history(run_id)
        assert only.kind == "pruned"
        assert only.data["events"] > 3
        assert rows(store, approvals, run_id) == []
        assert rows(store, timers, run_id) == []
    for run_id in done.values():
        [op] = store.operations(run_id)
        assert (op.status, op.args) == ("done", {})
        assert op.receipt is not None  # the receipt answers for the refund made
    # the runs not finished are whole
    assert store.get_run(waiting.id).pruned_at is None
    assert store.history(waiting.id)[0].kind == "created"
    assert store.get_run(unknown.id).pruned_at is None
    assert len(store.history(unknown.id)) > 5

    # the same work started again is the run, done: nothing made again
    again, created = make_runner().start(spec, text, refund_input(7001))
    assert (again.id, created, again.status) == (done[7001], False, "done")
    assert make_runner().advance(again.id).status == "done"
    assert len(world.changes()) == changes_before
    # another input for it is refused, as before the prune
    with pytest.raises(InputConflict, match="pruned: its input is kept as a digest"):
        make_runner().start(spec, text, {**refund_input(7001), "amount": 99.0})
    assert prune(store, clock.now(), clock.now()).pruned == 0  # all done already


def test_a_run_with_a_timer_armed_or_an_outcome_unsettled_is_never_pruned(
    make_runner: MakeRunner, world: PracticeWorld, store: Store, clock: FakeClock
) -> None:
    done = refunds(make_runner, world, range(7101, 7104))
    with store.engine.begin() as conn:
        conn.execute(
            insert(timers).values(
                run_id=done[7101],
                state="*",
                event="verify:x",
                due_at=clock.now() + DAY,
                created_at=clock.now(),
            )
        )
        conn.execute(
            update(operations).where(operations.c.run_id == done[7102]).values(status="unknown")
        )
    clock.advance(DAY)
    report = prune(store, clock.now(), clock.now())
    assert report.pruned == 1
    assert store.get_run(done[7103]).pruned_at is not None
    assert store.get_run(done[7101]).pruned_at is None
    assert store.get_run(done[7102]).pruned_at is None


def test_ratchet_prune_says_what_it_pruned_and_trace_shows_the_tombstone(
    make_runner: MakeRunner, world: PracticeWorld, store_url: str, clock: FakeClock, capsys: Any
) -> None:
    clock.advance(time.time() - DAY - clock.now())  # the runs finished yesterday
    done = refunds(make_runner, world, range(7201, 7203))
    code, out, err = run_cli(
        capsys, "prune", "--finished-before", "0s", "--dry-run", "--db", store_url, "--json"
    )
    assert (code, json.loads(out)["pruned"], json.loads(out)["dry_run"]) == (0, 2, True), err
    code, out, _ = run_cli(capsys, "prune", "--finished-before", "0s", "--db", store_url)
    assert out.startswith("pruned 2 run(s) finished before ")
    assert "  refund: 2" in out
    code, out, _ = run_cli(capsys, "trace", done[7201], "--db", store_url)
    assert "pruned to its tombstone" in out
    code, _out, err = run_cli(capsys, "prune", "--finished-before", "soon", "--db", store_url)
    assert (code, "is not a duration" in err) == (2, True)


#: The pruning process: it dies by SIGKILL inside its fourth batch's transaction, once that
#: batch's runs are compacted and before it commits (three batches committed before it).
CHILD = """
import os, signal, sys
from ratchet_runner.engine.pruning import prune
from ratchet_runner.store import writer
from ratchet_runner.store.store import Store
real, batches = writer.prune, []
def dying(conn, tombstones, now):
    batches.append(1)
    done = real(conn, tombstones, now)
    if len(batches) == 4:
        os.kill(os.getpid(), signal.SIGKILL)
    return done
writer.prune = dying
prune(Store(sys.argv[1]), float(sys.argv[2]), float(sys.argv[2]), batch=5)
"""


def test_a_prune_killed_midway_leaves_every_run_whole_or_pruned_and_goes_on_when_run_again(
    make_runner: MakeRunner, world: PracticeWorld, store: Store, store_url: str, clock: FakeClock
) -> None:
    done = refunds(make_runner, world, range(7300, 7360))
    clock.advance(DAY)
    child = subprocess.run(
        [sys.executable, "-c", CHILD, store_url, str(clock.now())],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
        timeout=120,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr

    def whole_or_pruned() -> int:
        pruned = 0
        for run_id in done.values():
            run = store.get_run(run_id)
            kinds = [e.kind for e in store.history(run_id)]
            if run.pruned_at is None:
                assert kinds[0] == "created"
                assert run.input != {}
                assert len(rows(store, approvals, run_id)) == 1
            else:
                assert kinds == ["pruned"]
                assert run.input == {}
                assert rows(store, approvals, run_id) == []
                pruned += 1
        return pruned

    midway = whole_or_pruned()
    assert midway == 15  # three batches of five; the fourth's transaction died with it
    assert prune(store, clock.now(), clock.now()).pruned == len(done) - midway
    assert whole_or_pruned() == len(done)
    with store.engine.connect() as conn:
        kinds = {
            kind
            for events, at in conn.execute(select(history.c.events, history.c.at))
            for kind, _data, _at in expand(events, at)
        }
    assert kinds == {"pruned"}


def test_a_few_thousand_runs_are_pruned_while_two_workers_drive_others_without_an_error(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What ``bench/bench_prune.py`` measures at 100,000 runs (its rate, its memory, the
    workers' longest wait), here at 2,000, for correctness only: every finished run pruned in a
    process of its own, the workers' runs never touched, and not one worker error."""
    monkeypatch.syspath_prepend(str(ROOT))
    from bench.bench_prune import measure

    figures = measure(store_url, 2_000, batch=100)
    assert figures["pruned"] == 2_000
    assert figures["worker_errors"] == []
    assert figures["worker_runs"] > 0  # they went on while it pruned


def test_a_worker_prunes_on_its_interval_and_once_with_its_pass(
    make_runner: MakeRunner,
    world: PracticeWorld,
    store: Store,
    store_url: str,
    clock: FakeClock,
    capsys: Any,
) -> None:
    import threading

    from ratchet_runner.worker.pruner import Pruner

    clock.advance(time.time() - 2 * DAY - clock.now())  # finished two days ago
    done = refunds(make_runner, world, range(7501, 7504))
    stop = threading.Event()
    pruner = Pruner(lambda: Store(store_url), FakeClock(time.time()), 0.05, DAY, stop)
    thread = pruner.start()
    deadline = time.monotonic() + 30
    while pruner.pruned < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    thread.join(timeout=10)
    assert pruner.pruned == 3
    assert all(store.get_run(r).pruned_at is not None for r in done.values())

    more = refunds(make_runner, world, range(7511, 7513))
    code, _out, err = run_cli(
        capsys,
        "worker",
        "--once",
        "--prune-every",
        "1h",
        "--prune-finished-before",
        "1d",
        "--db",
        store_url,
    )
    assert code == 0, err
    assert all(store.get_run(r).pruned_at is not None for r in more.values())
    code, _out, err = run_cli(capsys, "worker", "--once", "--prune-every", "1h", "--db", store_url)
    assert (code, "go together" in err) == (2, True)
    # an age of 0s is one, as for ratchet prune --finished-before 0s; an interval of 0s is not
    again = refunds(make_runner, world, range(7513, 7514))
    code, _out, err = run_cli(
        capsys,
        "worker",
        "--once",
        "--prune-every",
        "1h",
        "--prune-finished-before",
        "0s",
        "--db",
        store_url,
    )
    assert code == 0, err
    assert all(store.get_run(r).pruned_at is not None for r in again.values())
    code, _out, err = run_cli(
        capsys,
        "worker",
        "--once",
        "--prune-every",
        "0s",
        "--prune-finished-before",
        "1d",
        "--db",
        store_url,
    )
    assert (code, "must be more than 0s" in err) == (2, True)
    # the same policy from the workers' configuration (their environment)
    last = refunds(make_runner, world, range(7514, 7515))
    with pytest.MonkeyPatch.context() as env:
        env.setenv("RATCHET_PRUNE_EVERY", "1h")
        env.setenv("RATCHET_PRUNE_FINISHED_BEFORE", "0s")
        code, _out, err = run_cli(capsys, "worker", "--once", "--db", store_url)
    assert code == 0, err
    assert all(store.get_run(r).pruned_at is not None for r in last.values())


def test_tombstones_are_kept_forever_unless_the_spec_retains_operation_ids_for_less(
    make_runner: MakeRunner, world: PracticeWorld, store: Store, clock: FakeClock
) -> None:
    """``retention.operation_ids``: past it, prune forgets a tombstone whole, and the business
    key started again is a new run; without it (forever), the tombstone stays and answers."""
    spec, text = spec_and_text("refund")
    short_text = text.replace("name: refund", "name: refund_short", 1).replace(
        "policy_version: 1\n", "policy_version: 1\nretention: {operation_ids: 30d}\n", 1
    )
    short = load_spec_text(short_text)
    assert (spec.retention_ids, short.retention_ids) == (None, 30 * DAY)
    numbers = (7201, 7202)
    world.seed({"orders": [{"order": f"LK-{n}", "paid": 100, "currency": "CAD"} for n in numbers]})
    runner = make_runner()
    ended = {}
    for chosen, chosen_text, number in ((spec, text, 7201), (short, short_text, 7202)):
        run, _ = runner.start(chosen, chosen_text, refund_input(number))
        runner.advance(run.id)
        decide(runner, run.id, "approve", "agent-7", "agent")
        assert runner.advance(run.id).status == "done"
        ended[number] = (chosen, chosen_text, run.id)
    clock.advance(DAY)
    report = prune(store, clock.now() - DAY / 2, clock.now())
    assert (report.pruned, report.forgotten) == (2, 0)  # 30 days have not passed
    clock.advance(31 * DAY)
    assert prune(store, clock.now(), clock.now(), dry_run=True).forgotten == 1
    assert store.get_run(ended[7202][2]).pruned_at is not None  # a dry run forgets nothing
    report = prune(store, clock.now(), clock.now())
    assert (report.pruned, report.forgotten) == (0, 1)
    assert store.get_run(ended[7201][2]).pruned_at is not None  # forever: kept
    with pytest.raises(RunNotFound):
        store.get_run(ended[7202][2])
    assert rows(store, operations, ended[7202][2]) == []
    # started again: the kept one is found done; the forgotten one is a new run
    again, created = make_runner().start(spec, text, refund_input(7201))
    assert (again.id, created) == (ended[7201][2], False)
    chosen, chosen_text, old_id = ended[7202]
    fresh, created = make_runner().start(chosen, chosen_text, refund_input(7202))
    assert created
    assert fresh.id != old_id
