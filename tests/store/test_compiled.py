"""SQLite's hot path (``store/compiled.py``): a run's creation, its commits and its hot reads run
the store's own SQLAlchemy statements on the driver. They must write what SQLAlchemy writes, row
for row, send the same statements, fail the same way, and step aside when anything listens to
the engine (``ratchet check``'s crash windows, instrumentation, a test counting statements).
SQLite's one-statement commit (the connection's ``ratchet_commit`` trigger, ``store/sqlite.py``)
must write what the writer's statements write, row for row, and refuse as they refuse."""

from __future__ import annotations

import logging
import random
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, event, text

from ratchet_runner.adapters.noop import NoopAdapter
from ratchet_runner.adapters.practice import PracticeWorld
from ratchet_runner.clock import FakeClock
from ratchet_runner.engine.runner import Runner
from ratchet_runner.errors import (
    DuplicateOperation,
    LeaseLost,
    RatchetError,
    RunNotFound,
    StoreError,
    VersionConflict,
)
from ratchet_runner.review.naive import step_for
from ratchet_runner.spec.validate import load_spec
from ratchet_runner.store import compiled
from ratchet_runner.store.records import Change
from ratchet_runner.store.sqlite import SQLiteWriter
from ratchet_runner.store.store import Store
from ratchet_runner.words import EventKind
from tests.conftest import PG_URL, ROOT, postgres_url
from tests.integration.replay_runs import drive_all

THREE = ROOT / "bench" / "specs" / "three_effects.yaml"
#: Values that differ between two stores driven alike: run IDs and lease tokens (random), and
#: the digests made from a run's ID.
_RANDOM = re.compile(r"run_[0-9a-f]{16}|\b[0-9a-f]{32}\b|\b[0-9a-f]{64}\b")


#: A value in a statement SQLite traced: a string, a number or NULL.
_VALUE = re.compile(r"'(?:[^']|'')*'|\b\d+(?:\.\d+)?(?:e[-+]?\d+)?\b|\bNULL\b")


def _ignore(*_args: Any) -> None:
    """A listener that only listens."""


def _rows(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table of the store at ``path``, as the file holds it (JSON as its
    text), random IDs numbered in the order they first appear."""
    names: dict[str, str] = {}

    def plain(value: Any) -> Any:
        if not isinstance(value, str):
            return value
        return _RANDOM.sub(lambda m: names.setdefault(m.group(), f"<{len(names)}>"), value)

    with sqlite3.connect(path) as conn:
        tables = [
            t
            for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            if t not in ("meta", "sqlite_sequence")
        ]
        queries = {table: f'SELECT * FROM "{table}" ORDER BY rowid' for table in tables}
        queries["history"] = (  # no row IDs: in the order the runs were made
            "SELECT history.* FROM history JOIN runs ON runs.id = history.run_id "
            "ORDER BY runs.rowid, history.version"
        )
        queries["tallies"] = (  # each figure's slot is chosen by the run's ID: summed
            "SELECT workflow, effect, role, status, sum(n), sum(attempts) FROM tallies "
            "GROUP BY workflow, effect, role, status ORDER BY workflow, effect, role, status"
        )
        return {
            table: [tuple(plain(v) for v in row) for row in conn.execute(query)]
            for table, query in sorted(queries.items())
        }


def _drive(folder: Path, *, observed: bool) -> tuple[Path, int]:
    """Every replay scenario (approvals, timers, signals, operators' actions, compensations)
    driven in a new SQLite store, with an engine listener or none; the store's file, and how
    many statements ran on the driver."""
    folder.mkdir()
    store = Store(f"sqlite:///{folder / 'ratchet.db'}")
    if observed:
        event.listen(store.engine, "before_cursor_execute", _ignore)
    world, clock = PracticeWorld(folder / "practice.db"), FakeClock()
    runner = Runner(
        store,
        lambda adapter: world.adapter(adapter.kind),
        clock,
        steps=step_for,
        rng=random.Random(7),  # the same backoffs
    )
    ran = 0
    run = compiled.Compiled.run

    def counting(self: compiled.Compiled, *args: Any) -> compiled.Result:
        nonlocal ran
        ran += 1
        return run(self, *args)

    compiled.Compiled.run = counting  # type: ignore[method-assign]
    try:
        drive_all(runner, world, clock)
    finally:
        compiled.Compiled.run = run  # type: ignore[method-assign]
        store.close()
    return folder / "ratchet.db", ran


def test_the_driver_writes_every_row_as_sqlalchemy_does(tmp_path: Path) -> None:
    """Twelve runs of every shipped spec, each driven alike on the hot path and through
    SQLAlchemy (a listener on the engine): the two stores hold the same rows, byte for byte
    (JSON text included: a ``None`` receipt is ``'null'`` either way)."""
    hot, ran = _drive(tmp_path / "hot", observed=False)
    slow, ran_slow = _drive(tmp_path / "slow", observed=True)

    assert ran > 100  # the hot path ran ...
    assert ran_slow == 0  # ... and stepped aside for the listener
    assert _rows(hot) == _rows(slow)


def test_the_trigger_writes_every_row_as_the_statements_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The twelve runs again, once with each change the trigger can write applied in one
    statement, once with every change applied by the writer's statements one by one: the two
    stores hold the same rows, byte for byte (the history's order, JSON text, receipts and
    errors, the tallies)."""
    one_statement = SQLiteWriter.one_statement
    shapes: list[bool] = []

    def counting(self: SQLiteWriter, *args: Any) -> Any:
        params = one_statement(self, *args)
        shapes.append(params is not None)
        return params

    monkeypatch.setattr(SQLiteWriter, "one_statement", counting)
    one, _ = _drive(tmp_path / "one", observed=False)
    monkeypatch.setattr(SQLiteWriter, "one_statement", lambda *_args: None)
    each, _ = _drive(tmp_path / "each", observed=False)

    assert shapes.count(True) > 30  # the trigger wrote most changes ...
    assert shapes.count(False) > 10  # ... and the others (approvals, timers, signals) went by
    assert _rows(one) == _rows(each)


def test_the_trigger_refuses_as_the_statements_do(tmp_path: Path) -> None:
    """A change at a stale version, under a lease another worker holds, under a lease lost, or
    to no run: refused with the error that says which, and nothing written."""
    store = Store(f"sqlite:///{tmp_path / 'ratchet.db'}")
    spec, spec_text = load_spec(THREE), THREE.read_text(encoding="utf-8")
    runner = Runner(store, lambda _: NoopAdapter())
    run, _ = runner.start(spec, spec_text, {"key": "K-9"})
    (leased,) = store.claim("w1", 60.0, 1.0)
    history = len(store.history(run.id))

    def moving(version: int, token: str | None = None, run_id: str = run.id) -> Change:
        change = Change(run_id, version, 2.0, state="two", lease_token=token)
        return change.event(EventKind.MOVED, to="two")

    with pytest.raises(VersionConflict, match="has moved on"):
        store.commit(moving(leased.version - 1, leased.lease_token))
    with pytest.raises(LeaseLost, match=r"lease on run .* was lost to w1"):
        store.commit(moving(leased.version, "not-the-token"))
    with pytest.raises(LeaseLost, match="is leased by w1"):
        store.commit(moving(leased.version))
    with pytest.raises(RunNotFound):
        store.commit(moving(1, run_id="run_0000000000000000"))

    assert store.get_run(run.id).version == leased.version
    assert len(store.history(run.id)) == history
    moved = store.commit(moving(leased.version, leased.lease_token))
    assert (moved.state, moved.version) == ("two", leased.version + 1)
    assert moved.lease_token == leased.lease_token  # still running: the lease is kept
    store.close()


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[Store]:
    opened = Store(f"sqlite:///{tmp_path / 'ratchet.db'}")
    yield opened
    opened.close()


def _traced(store: Store) -> list[str]:
    """The SQL every new connection of ``store`` sends from now on, as SQLite runs it."""
    sent: list[str] = []
    store.engine.dispose()
    event.listen(
        store.engine.pool, "connect", lambda conn, _record: conn.set_trace_callback(sent.append)
    )
    return sent


def test_a_run_sends_the_same_statements_either_way(sqlite_store: Store) -> None:
    """What a 3-step run sends, traced by SQLite itself: the same statements on the hot path
    as through SQLAlchemy (whose count ``test_write_ahead_chain`` pins), the lock taken the
    same way."""
    spec, spec_text = load_spec(THREE), THREE.read_text(encoding="utf-8")
    runner = Runner(sqlite_store, lambda _: NoopAdapter())
    warm, _ = runner.start(spec, spec_text, {"key": "K-0"})
    runner.advance(warm)
    sent = _traced(sqlite_store)

    def one_run(key: str) -> list[str]:
        del sent[:]
        run, _ = runner.start(spec, spec_text, {"key": key})
        assert runner.advance(run).state == "done"
        # A new connection makes the view a change is applied through, once (sqlite.py).
        return [" ".join(_RANDOM.sub("ID", s).split()) for s in sent if "CREATE TEMP" not in s]

    hot = one_run("K-1")
    event.listen(sqlite_store.engine, "before_cursor_execute", _ignore)
    slow = one_run("K-1b")

    def statements(trace: list[str]) -> list[str]:
        """Each statement with its values taken out (SQLite traces them expanded); the lock's
        waiting (``PRAGMA busy_timeout``) and the pool's ``ROLLBACK`` of a returned
        connection left out."""
        return [_VALUE.sub("?", s) for s in trace if "PRAGMA" not in s and s != "ROLLBACK"]

    assert statements(hot) == statements(slow)
    assert statements(hot).count("BEGIN IMMEDIATE") == 5
    assert statements(hot).count("COMMIT") == 5


def test_a_failing_statement_rolls_the_whole_commit_back(sqlite_store: Store) -> None:
    """A commit whose operation is recorded already: the run's compare-and-set, made first,
    is rolled back with it, and the error says what it means, as through SQLAlchemy."""
    spec, spec_text = load_spec(THREE), THREE.read_text(encoding="utf-8")
    runner = Runner(sqlite_store, lambda _: NoopAdapter())
    run, _ = runner.start(spec, spec_text, {"key": "K-2"})
    done = runner.advance(run)
    taken = sqlite_store.operations(run.id)[0]
    change = Change(done.id, done.version, 1.0)
    change.new_operations.append(
        {
            "operation_id": taken.operation_id,
            "effect": "first",
            "role": "forward",
            "args": {},
            "fingerprint": "f",
            "status": "pending",
            "attempts": 1,
        }
    )

    with pytest.raises(DuplicateOperation, match="already recorded: UNIQUE constraint failed"):
        sqlite_store.commit(change)

    assert sqlite_store.get_run(run.id).version == done.version
    again = Change(done.id, done.version - 1, 1.0)
    with pytest.raises(VersionConflict, match="has moved on"):
        sqlite_store.commit(again)


def test_a_new_operation_with_other_columns_goes_through_the_statements(
    sqlite_store: Store,
) -> None:
    """A new operation whose columns are not the table's (here one missing and one unknown, as
    many as the table's) is not the trigger's to write: the statements write it, and their
    refusal is the store's error (it was a ``KeyError`` from the trigger's parameters)."""
    spec, spec_text = load_spec(THREE), THREE.read_text(encoding="utf-8")
    runner = Runner(sqlite_store, lambda _: NoopAdapter())
    run, _ = runner.start(spec, spec_text, {"key": "K-7"})
    change = Change(run.id, run.version, 1.0)
    change.new_operations.append(
        {
            "operation_id": "op-without-its-attempts",
            "effect": "first",
            "role": "forward",
            "args": {},
            "fingerprint": None,
            "status": "pending",
            "note": "not a column",
        }  # type: ignore[typeddict-item]
    )
    writer = sqlite_store._writer
    assert isinstance(writer, SQLiteWriter)
    assert writer.one_statement(change, change.preview(run)) is None

    with pytest.raises(RatchetError, match=r"NOT NULL constraint failed: operations\.attempts"):
        sqlite_store.commit(change)
    assert sqlite_store.get_run(run.id).version == run.version


@pytest.mark.parametrize("observed", [False, True], ids=["driver", "sqlalchemy"])
def test_a_store_that_cannot_be_written_says_so(
    sqlite_store: Store, tmp_path: Path, observed: bool
) -> None:
    """The driver's own errors reach the user as the store's: a database that refuses writes
    (here ``query_only``, as a read-only file does) is a :class:`StoreError` that says what it
    means, never a traceback, and nothing is written, whichever path the commit took (the
    write lock's ``BEGIN IMMEDIATE`` raised the driver's bare error on both before)."""
    spec, spec_text = load_spec(THREE), THREE.read_text(encoding="utf-8")
    runner = Runner(sqlite_store, lambda _: NoopAdapter())
    run, _ = runner.start(spec, spec_text, {"key": "K-3"})
    if observed:
        event.listen(sqlite_store.engine, "before_cursor_execute", _ignore)
    sqlite_store.engine.dispose()
    event.listen(
        sqlite_store.engine.pool,
        "connect",
        lambda conn, _record: conn.execute("PRAGMA query_only = 1"),
    )

    with pytest.raises(StoreError, match=r"the store failed: .*readonly database.* not changed"):
        runner.advance(run)

    with sqlite3.connect(tmp_path / "ratchet.db") as conn:
        assert conn.execute(text("SELECT version FROM runs").text).fetchall() == [(1,)]


def test_each_statement_is_compiled_once(sqlite_store: Store) -> None:
    """The hot path compiles a statement the first time it runs with a set of parameters, never
    again: a second run of the same shape compiles nothing."""
    spec, spec_text = load_spec(THREE), THREE.read_text(encoding="utf-8")
    runner = Runner(sqlite_store, lambda _: NoopAdapter())
    made: list[str] = []
    build = compiled.Compiled.__init__

    def counting(self: compiled.Compiled, *args: Any, **kwargs: Any) -> None:
        build(self, *args, **kwargs)
        made.append(self.sql)

    compiled.Compiled.__init__ = counting  # type: ignore[method-assign]
    try:
        first, _ = runner.start(spec, spec_text, {"key": "K-4"})
        runner.advance(first)
        count = len(made)
        second, _ = runner.start(spec, spec_text, {"key": "K-5"})
        runner.advance(second)
    finally:
        compiled.Compiled.__init__ = build  # type: ignore[method-assign]

    assert count >= 3  # the run, the sequence, a read (the commits are driver SQL: sqlite.py)
    assert len(made) == count


@pytest.mark.postgres
def test_a_connection_the_server_dropped_is_made_again_by_the_next_write(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """PostgreSQL's hot path runs on the pool's psycopg connection: a backend the server ended
    (a restart, ``pg_terminate_backend``) fails the statement sent on it with a store error that
    says the connection was lost, and the pool makes a new one for the next, as SQLAlchemy's
    connection does (the dropped one invalidated, never handed out again)."""
    store = Store(postgres_url())
    try:
        spec, spec_text = load_spec(THREE), THREE.read_text(encoding="utf-8")
        runner = Runner(store, lambda _: NoopAdapter())
        run, _ = runner.start(spec, spec_text, {"key": "K-6"})
        store.engine.dispose()  # the pool empty: the next statement opens the one connection
        with store._writer.reading() as conn:
            pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()
        admin = create_engine(PG_URL)
        with admin.begin() as killer:
            killer.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        admin.dispose()

        with pytest.raises(StoreError, match=r"the store failed: .*(terminat|closed)"):
            store.get_run(run.id)
        # invalidated as it failed: the pool never tried to reset a dead connection
        assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]

        assert store.get_run(run.id).version == 1
        assert runner.advance(run).state == "done"
    finally:
        store.close()


@pytest.mark.postgres
def test_a_lost_race_gives_the_connection_back_to_the_pool_transacting() -> None:
    """PostgreSQL's one-statement writes switch the pool's connection to autocommit: a commit
    refused (the run moved on) must give it back switched off, or the next transaction on it
    (a claim's, a prune's) would commit each of its statements alone."""
    store = Store(postgres_url())
    try:
        spec, spec_text = load_spec(THREE), THREE.read_text(encoding="utf-8")
        runner = Runner(store, lambda _: NoopAdapter())
        run, _ = runner.start(spec, spec_text, {"key": "K-7"})
        store.engine.dispose()  # one connection from here on
        with pytest.raises(VersionConflict):
            store.commit(Change(run.id, run.version + 5, 1.0))
        with store.engine.connect() as conn:
            assert conn.connection.driver_connection.autocommit is False
    finally:
        store.close()
