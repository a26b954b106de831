"""The store's schema revisions (``ratchet_runner.store.schema``, ``ratchet db``), on SQLite and
PostgreSQL: the migrations make exactly the tables the code declares; a store made before
revisions were kept (``tests/fixtures/stores/``, dumped from that code) is upgraded (SQLite as it
opens, PostgreSQL by ``ratchet db upgrade``) and every run in it finishes with no effect made
twice; a store at a revision this code does not know is refused by every command; a revision
that fails leaves nothing of itself behind, SQLite included."""

from __future__ import annotations

import json
import re
import signal
import sqlite3
import subprocess
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, inspect, text

from ratchet_runner.clock import FakeClock
from ratchet_runner.engine.approvals import pending_request
from ratchet_runner.engine.controls import operate
from ratchet_runner.engine.deciding import decide
from ratchet_runner.errors import StoreError, StoreRevision
from ratchet_runner.review.naive import step_for
from ratchet_runner.session import Session
from ratchet_runner.store import schema
from ratchet_runner.store.records import NewRun, RunStatus
from ratchet_runner.store.store import Store
from ratchet_runner.store.tables import metadata
from tests.conftest import (
    PG_URL,
    PRACTICE_BINDING,
    ROOT,
    postgres_url,
    ratchet_process,
    run_cli,
)

FIXTURES = ROOT / "tests" / "fixtures" / "stores"
#: What the revisions build on PostgreSQL after their transactions, in order.
BUILT_ON_POSTGRESQL = [
    "built ix_runs_prune",
    "built ix_runs_lease",
    "built ix_operations_unknown",
    "built ix_operations_failed_undo",
]
T0 = 1_800_000_000.0  # the fixtures' clock (tests/fixtures/stores/make.py)


def test_the_revisions_are_the_migrations_folders() -> None:
    scripts = ScriptDirectory.from_config(schema.config())
    assert tuple(s.revision for s in reversed(list(scripts.walk_revisions()))) == schema.REVISIONS
    assert scripts.get_heads() == [schema.HEAD]


def _differences(store: Store) -> list[Any]:
    """What differs between ``store``'s tables and the ones the code declares."""
    with store.engine.connect() as conn:
        context = MigrationContext.configure(
            conn, opts={"compare_type": True, "version_table": schema.REVISION_TABLE}
        )
        return list(compare_metadata(context, metadata))


def _shape(store: Store) -> dict[str, Any]:
    """Every table of ``store`` (the revision table included) with its columns, primary key,
    indexes and foreign keys, as the database describes them."""
    with store.engine.connect() as conn:
        found = inspect(conn)
        return {
            name: (
                sorted((c["name"], str(c["type"]), c["nullable"]) for c in found.get_columns(name)),
                found.get_pk_constraint(name),
                sorted(
                    (i["name"], tuple(i["column_names"]), i["unique"])
                    for i in found.get_indexes(name)
                ),
                sorted(str(f) for f in found.get_foreign_keys(name)),
            )
            for name in sorted(found.get_table_names())
        }


def test_the_migrations_make_exactly_the_tables_the_code_declares(store_url: str) -> None:
    """CI fails here when a table, column or index changes without a revision: a store built
    by the revisions, one at a time from nothing, has exactly the tables the code declares."""
    store = Store(store_url, checked=False)
    try:
        assert schema.read(store).status == schema.NEW
        taken = schema.migrate_to(store, "head")
        steps = schema.steps_between(None, schema.HEAD)
        built = BUILT_ON_POSTGRESQL if store_url.startswith("postgresql") else []
        assert taken == [f"{a or 'none'}→{b}" for a, b, _ in steps] + built
        assert _differences(store) == []
        assert schema.read(store).status == schema.CURRENT
    finally:
        store.close()


def test_a_new_store_is_made_at_head_as_the_revisions_would_make_it(
    store_url: str, tmp_path: Path
) -> None:
    """A store made new (in one transaction, without Alembic) has the same tables, columns,
    keys and indexes as one the revisions built, its revision recorded as Alembic records it
    (so that ``ratchet db`` moves it), and its identity; ``ratchet db downgrade`` takes it back."""
    made = Store(store_url)
    try:
        assert schema.read(made).status == schema.CURRENT
        assert _differences(made) == []
        ours = _shape(made)
        with made.engine.connect() as conn:
            keys = dict(conn.execute(text("SELECT key, value FROM meta")).all())
        assert set(keys) >= {"created_at", "store_id", "sequence"}
        assert keys["sequence"] == "0"
        assert len(keys["store_id"]) == 32
        assert schema.migrate_to(made, "0003") == [
            "0007→0006",
            "0006→0005",
            "0005→0004",
            "0004→0003",
        ]
        again = BUILT_ON_POSTGRESQL[1:] if store_url.startswith("postgresql") else []
        assert schema.migrate_to(made, "head") == [
            "0003→0004",
            "0004→0005",
            "0005→0006",
            "0006→0007",
            *again,
        ]
    finally:
        made.close()
    if store_url.startswith("sqlite"):
        other_url = f"sqlite:///{tmp_path / 'by-revisions.db'}"
    else:
        other_url = postgres_url()
    built = Store(other_url, checked=False)
    try:
        schema.migrate_to(built, "head")
        assert _shape(built) == ours
    finally:
        built.close()


# -- a store made before revisions ------------------------------------------------------------


def load_fixture(store_url: str, home: Path) -> None:
    """The fixture store of ``store_url``'s database loaded into it, and its practice world
    into ``home``."""
    dialect = "sqlite" if store_url.startswith("sqlite") else "postgresql"
    dump = (FIXTURES / f"{dialect}.sql").read_text(encoding="utf-8")
    if dialect == "sqlite":
        connection = sqlite3.connect(store_url.removeprefix("sqlite:///"))
        connection.executescript(dump)
        connection.close()
    else:
        found = re.search(r"search_path%3D(\w+)", store_url)
        assert found is not None
        engine = create_engine(PG_URL)
        with engine.begin() as conn:
            conn.exec_driver_sql(dump.replace("__SCHEMA__", found.group(1)))
        engine.dispose()
    home.mkdir(exist_ok=True)
    world = sqlite3.connect(home / "practice.db")
    world.executescript((FIXTURES / f"world-{dialect}.sql").read_text(encoding="utf-8"))
    world.close()


def carry_on(session: Session, clock: FakeClock) -> dict[str, str]:
    """Every run of the store taken to its end as workers and people would: decisions
    approved, the unknown outcome reconciled by an operator, time moved to each wake-up."""
    runner = session.runner()
    ends: dict[str, str] = {}
    for run in session.store.list_runs():
        for _ in range(20):
            run = runner.advance(run.id)
            request = pending_request(runner, run) if run.status == "waiting" else None
            if request is not None:
                decide(runner, run.id, "approve", "someone", request.roles[0])
            elif run.status == "needs_person":
                operate(runner, run.id, "reconcile", "ops", runner.spec_of(run).operator_roles[0])
            elif run.status == "running" and run.wake_at is not None:
                clock.advance(max(0.0, run.wake_at - clock.now()) + 1)
            elif run.status != "running":
                break
        ends[run.business_key] = run.state
    return ends


def test_a_store_made_before_revisions_is_upgraded_and_every_run_in_it_finishes_once(
    store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    load_fixture(store_url, home)
    if store_url.startswith("sqlite"):
        Store(store_url).close()  # SQLite upgrades itself as it opens, a copy kept beside it
        assert Path(store_url.removeprefix("sqlite:///") + ".r0000.bak").exists()
    else:  # PostgreSQL never does: an operator upgrades it
        with pytest.raises(StoreRevision, match="ratchet db upgrade"):
            Store(store_url)
        assert run_cli(capsys, "db", "check", "--db", store_url)[0] == 1
        code, out, err = run_cli(capsys, "db", "upgrade", "--db", store_url)
        assert code == 0, err
        assert f"revision {schema.HEAD}: at this Ratchet's revision ({schema.HEAD})" in out
    assert run_cli(capsys, "db", "check", "--db", store_url)[0] == 0
    clock = FakeClock(T0 + 3600)
    with Session(
        store_url, home=home, clock=clock, steps=step_for, bindings=PRACTICE_BINDING, environ={}
    ) as session:
        ends = carry_on(session, clock)
        changes = session.world.changes()
    assert ends == {
        "T-5001": "refunded",  # waited for its decision
        "T-5002": "refunded",  # its retry was due
        "T-5003": "refunded",  # the unknown outcome, found by the operator's reconcile
        "T-5004": "refunded",
        "TRIP-5001": "confirmed",
        "TRIP-5002": "released",  # its release was written ahead when its process died
    }
    made = Counter((c.effect, json.dumps(c.args, sort_keys=True)) for c in changes)
    assert max(made.values()) == 1, made  # no effect made twice
    by_effect = Counter(c.effect for c in changes)
    assert by_effect == {
        "request_refund": 4,
        "hold_flight": 2,
        "hold_hotel": 2,
        "confirm_itinerary": 1,
        "release_hotel": 1,
        "release_flight": 1,
    }


# -- refused, checked, moved ------------------------------------------------------------------


def set_revision(store_url: str, revision: str) -> None:
    store = Store(store_url)
    with store.engine.begin() as conn:
        conn.execute(text(f"UPDATE {schema.REVISION_TABLE} SET version_num = :r"), {"r": revision})
    store.close()


@pytest.mark.parametrize(
    "command",
    [
        ["runs"],
        ["trace", "T-1"],
        ["status"],
        ["queue"],
        ["versions", "refund"],
        ["run", "specs/refund.yaml", "--example", "T-90104"],
        ["worker", "--once"],
        ["migrate", "tests/fixtures/refund-v2.yaml"],
        ["db", "upgrade"],
    ],
)
def test_every_command_refuses_a_store_at_a_revision_it_does_not_know(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    monkeypatch.chdir(ROOT)
    url = f"sqlite:///{tmp_path / 'ratchet.db'}"
    set_revision(url, "9999")
    code, out, err = run_cli(capsys, *command, "--db", url)
    assert code == 1, (out, err)
    assert "R306" in err or "schema revision 9999" in err
    assert f"which this Ratchet (revision {schema.HEAD}) does not know: a newer Ratchet" in err
    assert "Traceback" not in err
    with pytest.raises(StoreRevision):
        Store(url)


def test_ratchet_db_says_where_the_store_stands_and_moves_it(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cli(capsys, "db", "current", "--db", store_url, "--json")
    assert (code, json.loads(out)["status"]) == (0, "new")
    assert run_cli(capsys, "db", "check", "--db", store_url)[0] == 0  # the first command makes it
    code, out, _ = run_cli(capsys, "db", "upgrade", "--db", store_url, "--json")
    built = BUILT_ON_POSTGRESQL if store_url.startswith("postgresql") else []
    steps = ["none→0001", "0001→0002", "0002→0003", "0003→0004", "0004→0005", "0005→0006"]
    steps += ["0006→0007"]
    steps += built
    assert json.loads(out)["steps"] == steps
    code, out, _ = run_cli(capsys, "db", "upgrade", "--db", store_url)
    assert f"already at revision {schema.HEAD}" in out
    # one revision back, and what every command then does with the store
    code, out, _ = run_cli(capsys, "db", "downgrade", "0001", "--yes", "--db", store_url)
    assert (code, out.strip()) == (
        0,
        "downgraded: 0007→0006\ndowngraded: 0006→0005\ndowngraded: 0005→0004\n"
        "downgraded: 0004→0003\n"
        "downgraded: 0003→0002\n"
        "downgraded: 0002→0001",
    )
    assert run_cli(capsys, "db", "check", "--db", store_url)[0] == 1
    if store_url.startswith("sqlite"):  # upgraded as it opens, a copy of the file kept first
        Store(store_url).close()
        assert Path(store_url.removeprefix("sqlite:///") + ".r0001.bak").exists()
    else:  # refused until an operator upgrades it
        with pytest.raises(StoreRevision, match="revision 0001, older than this Ratchet's 0007"):
            Store(store_url)
        code, out, _ = run_cli(capsys, "db", "upgrade", "--db", store_url)
        assert out.splitlines()[0] == "upgraded: 0001→0002"
    assert run_cli(capsys, "db", "check", "--db", store_url)[0] == 0
    code, _out, err = run_cli(capsys, "db", "downgrade", "base", "--db", store_url)
    assert code == 2
    assert "give --yes" in err
    code, out, _ = run_cli(capsys, "db", "downgrade", "base", "--yes", "--db", store_url)
    assert (code, out.strip()) == (
        0,
        "downgraded: 0007→0006\ndowngraded: 0006→0005\ndowngraded: 0005→0004\n"
        "downgraded: 0004→0003\n"
        "downgraded: 0003→0002\n"
        "downgraded: 0002→0001\ndowngraded: 0001→base",
    )
    check = Store(store_url, checked=False)
    try:
        with check.engine.connect() as conn:
            assert "runs" not in inspect(conn).get_table_names()
    finally:
        check.close()
    set_revision(store_url, "9999")
    code, _out, err = run_cli(capsys, "db", "check", "--db", store_url)
    assert code == 1
    assert f"newer than this Ratchet's {schema.HEAD}" in err
    code, out, _ = run_cli(capsys, "db", "history", "--json")
    revisions = [r["revision"] for r in json.loads(out)["revisions"]]
    assert revisions == ["0001", "0002", "0003", "0004", "0005", "0006", "0007"]


def test_a_revision_that_fails_leaves_nothing_of_itself_sqlite_included(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each revision runs in one transaction Ratchet opens itself: SQLite's DDL is
    transactional, though Alembic takes it for not."""
    from alembic import command

    def half(config: Any, revision: str) -> None:
        connection = config.attributes["connection"]
        connection.exec_driver_sql("CREATE TABLE made_halfway (id INTEGER)")
        connection.exec_driver_sql("SELECT * FROM no_such_table")  # fails

    monkeypatch.setattr(command, "upgrade", half)
    url = f"sqlite:///{tmp_path / 'ratchet.db'}"
    store = Store(url, checked=False)  # as `ratchet db upgrade` opens it
    try:
        with pytest.raises(StoreError, match="none → 0001 failed and was rolled back"):
            schema.migrate_to(store, "head")
    finally:
        store.close()
    names = inspect(create_engine(url)).get_table_names()
    assert "made_halfway" not in names
    assert schema.REVISION_TABLE not in names
    with pytest.raises(sqlite3.OperationalError):
        sqlite3.connect(tmp_path / "ratchet.db").execute("SELECT * FROM made_halfway")


def test_a_new_store_that_fails_as_it_is_made_leaves_nothing_of_itself(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new store is made in one transaction: failing at its last write, it leaves no table,
    and opening it again makes it whole."""

    def fails(_conn: Any) -> None:
        raise StoreError("the disk is full")

    monkeypatch.setattr(schema, "record_identity", fails)
    with pytest.raises(StoreError, match="the disk is full"):
        Store(store_url)
    check = Store(store_url, checked=False)
    try:
        assert schema.read(check).status == schema.NEW
        with check.engine.connect() as conn:
            assert inspect(conn).get_table_names() == []
    finally:
        check.close()
    monkeypatch.undo()
    Store(store_url).close()
    check = Store(store_url, checked=False)
    try:
        assert schema.read(check).status == schema.CURRENT
    finally:
        check.close()


@pytest.mark.postgres
def test_a_revision_that_cannot_take_its_locks_gives_up_in_seconds_and_changes_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """On PostgreSQL a revision takes its locks with a lock_timeout: one that a worker's open
    transaction holds up fails within seconds, rolled back, and the store stays where it was."""
    url = postgres_url()
    Store(url).close()
    assert run_cli(capsys, "db", "downgrade", "0001", "--yes", "--db", url)[0] == 0
    holder = create_engine(url)
    try:
        with holder.connect() as conn, conn.begin():
            conn.exec_driver_sql("LOCK TABLE runs IN ACCESS SHARE MODE")  # as a reader does
            began = time.monotonic()
            code, _out, err = run_cli(capsys, "db", "upgrade", "--db", url)
            waited = time.monotonic() - began
        assert code == 1
        assert "0001 → 0002 failed and was rolled back" in err
        assert "lock timeout" in err
        assert waited < 30  # the 5 s lock_timeout, not a hang
        code, out, _ = run_cli(capsys, "db", "current", "--db", url, "--json")
        assert json.loads(out)["revision"] == "0001"
        assert run_cli(capsys, "db", "upgrade", "--db", url)[0] == 0  # the lock gone, it runs
    finally:
        holder.dispose()


# -- an index built outside a transaction (PostgreSQL) ----------------------------------------


def _index_valid(url: str) -> bool | None:
    """Whether ix_runs_prune is built and valid in the store at ``url`` (None: absent)."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            row = conn.execute(
                text(
                    "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE c.relname = 'ix_runs_prune' AND n.nspname = current_schema()"
                )
            ).first()
        return None if row is None else bool(row[0])
    finally:
        engine.dispose()


def _named(url: str) -> tuple[str, str]:
    """``url`` with an application name of its own, and that name: the sessions of this test's
    processes, told from those of tests running beside it on the same server."""
    name = f"ratchet_test_{uuid.uuid4().hex[:12]}"
    return f"{url}&application_name={name}", name


def _building(url: str, name: str, deadline: float = 30.0) -> int:
    """Wait until the ``CREATE INDEX CONCURRENTLY`` of the sessions named ``name`` is under
    way; its backend's PID."""
    engine = create_engine(url)
    try:
        ends = time.monotonic() + deadline
        while time.monotonic() < ends:
            with engine.connect() as conn:
                pid = conn.execute(
                    text(
                        "SELECT pid FROM pg_stat_activity WHERE application_name = :name "
                        "AND query LIKE 'CREATE INDEX CONCURRENTLY %'"
                    ),
                    {"name": name},
                ).scalar()
            if pid is not None:
                return int(pid)
            time.sleep(0.05)
        raise AssertionError("the index build never started")
    finally:
        engine.dispose()


def _at_the_lock(url: str, name: str, deadline: float = 30.0) -> None:
    """Wait until a session named ``name`` has asked for the lock index builds take turns
    under (``pg_advisory_lock``, or a try of it)."""
    engine = create_engine(url)
    try:
        ends = time.monotonic() + deadline
        while time.monotonic() < ends:
            with engine.connect() as conn:
                asked = conn.execute(
                    text(
                        "SELECT count(*) FROM pg_stat_activity WHERE application_name = :name "
                        "AND query LIKE '%advisory_lock(%'"
                    ),
                    {"name": name},
                ).scalar()
            if asked:
                return
            time.sleep(0.05)
        raise AssertionError("the second upgrade never reached the build's lock")
    finally:
        engine.dispose()


def _sql(url: str, statement: str, **params: Any) -> None:
    """Run one statement on the store at ``url``, in a connection of its own."""
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(text(statement), params)
    finally:
        engine.dispose()


def _upgrade(url: str, tmp_path: Path) -> subprocess.Popen[str]:
    return ratchet_process(tmp_path, url, "db", "upgrade", "--db", url, capture=True)


@pytest.mark.postgres
def test_an_index_a_revision_adds_is_built_while_workers_go_on_writing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """ix_runs_prune (revision 0002) is built with CREATE INDEX CONCURRENTLY after the
    revision's transaction: while it waits for a worker's open transaction, another worker's
    write to runs goes through at once (an index built inside the transaction queues a SHARE
    lock, behind which every new write waits)."""
    url = postgres_url()
    Store(url).close()
    assert run_cli(capsys, "db", "downgrade", "0001", "--yes", "--db", url)[0] == 0
    code, out, _ = run_cli(capsys, "db", "upgrade", "--db", url)
    assert code == 0
    assert "built: ix_runs_prune (concurrently)" in out
    assert _index_valid(url) is True
    _sql(url, "DROP INDEX ix_runs_prune")  # as if the build had never run
    holder, writer = create_engine(url), create_engine(url)
    try:
        with holder.connect() as held:
            held.begin()
            held.exec_driver_sql("LOCK TABLE runs IN ROW EXCLUSIVE MODE")  # a worker's write
            named, name = _named(url)
            process = _upgrade(named, tmp_path)
            _building(url, name)
            with writer.connect() as conn, conn.begin():
                conn.exec_driver_sql("SET LOCAL lock_timeout = '2s'")
                conn.exec_driver_sql("LOCK TABLE runs IN ROW EXCLUSIVE MODE")  # not held up
            held.commit()
        out, err = process.communicate(timeout=60)
        assert process.returncode == 0, err
        assert "built: ix_runs_prune (concurrently)" in out
    finally:
        holder.dispose()
        writer.dispose()
    assert _index_valid(url) is True
    assert run_cli(capsys, "db", "check", "--db", url)[0] == 0


@pytest.mark.postgres
def test_an_index_build_killed_midway_is_reported_and_built_again(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``ratchet db upgrade`` killed by SIGKILL while it builds the index, its session ended:
    the index is left invalid; the store still opens; ``db check`` says so (exit 1) and ``db
    upgrade`` drops it and builds it again."""
    url = postgres_url()
    Store(url).close()
    _sql(url, "DROP INDEX ix_runs_prune")
    holder = create_engine(url)
    try:
        with holder.connect() as held:
            held.begin()
            held.exec_driver_sql("LOCK TABLE runs IN ROW EXCLUSIVE MODE")
            named, name = _named(url)
            process = _upgrade(named, tmp_path)
            backend = _building(url, name)
            process.send_signal(signal.SIGKILL)
            process.communicate(timeout=30)
            _sql(url, "SELECT pg_terminate_backend(:pid)", pid=backend)  # its session ends too
            held.commit()
    finally:
        holder.dispose()
    assert _index_valid(url) is False
    Store(url).close()  # the store works without it
    code, out, _ = run_cli(capsys, "db", "check", "--db", url, "--json")
    assert (code, json.loads(out)["unbuilt"]) == (1, ["ix_runs_prune"])
    code, _out, err = run_cli(capsys, "db", "check", "--db", url)
    assert code == 1
    assert "index ix_runs_prune (revision 0002) is not built" in err
    assert "run `ratchet db upgrade`" in err
    code, out, _ = run_cli(capsys, "db", "upgrade", "--db", url)
    assert code == 0
    assert "built: ix_runs_prune (concurrently)" in out
    assert _index_valid(url) is True
    assert run_cli(capsys, "db", "check", "--db", url)[0] == 0


@pytest.mark.postgres
def test_a_second_upgrade_during_a_build_waits_for_it_and_builds_nothing_again(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """One ``ratchet db upgrade`` builds the index (held up by a worker's open transaction);
    a second one starts meanwhile. Both exit 0 and the index is built once. Before, the second
    waited on a lock in one long request, which the build waits for in turn: PostgreSQL ended
    one of the two as a deadlock (``internal error``, exit 3), and the other said it had built
    an index it had not."""
    url = postgres_url()
    Store(url).close()
    _sql(url, "DROP INDEX ix_runs_prune")
    holder = create_engine(url)
    try:
        with holder.connect() as held:
            held.begin()
            held.exec_driver_sql("LOCK TABLE runs IN ROW EXCLUSIVE MODE")
            first_url, first_name = _named(url)
            first = _upgrade(first_url, tmp_path)
            _building(url, first_name)
            second_url, second_name = _named(url)
            second = _upgrade(second_url, tmp_path)
            _at_the_lock(url, second_name)  # the second waits for the first's build
            held.commit()
        outs = [process.communicate(timeout=120) for process in (first, second)]
    finally:
        holder.dispose()
    assert [first.returncode, second.returncode] == [0, 0], outs
    built = [line for out, _err in outs for line in out.splitlines() if line.startswith("built:")]
    assert built == ["built: ix_runs_prune (concurrently)"]
    assert _index_valid(url) is True
    assert run_cli(capsys, "db", "check", "--db", url)[0] == 0


def test_a_long_running_worker_refuses_a_store_at_a_revision_it_does_not_know(
    tmp_path: Path,
) -> None:
    """``ratchet worker`` (not only ``--once``) exits 1 with R306 on a store newer than it,
    instead of taking it for a store that does not answer and retrying for ever."""
    url = f"sqlite:///{tmp_path / 'ratchet.db'}"
    Store(url).close()
    set_revision(url, "9999")
    worker = ratchet_process(tmp_path, url, "worker", "--db", url, capture=True)
    try:
        _out, err = worker.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.communicate()
        raise AssertionError("the worker kept retrying a store it must refuse") from None
    assert worker.returncode == 1, err
    assert "R306" in err
    assert "a newer Ratchet upgraded it" in err
    assert "retrying" not in err


def test_an_sqlite_store_with_runs_goes_down_to_the_first_revision_and_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``ratchet db downgrade 0001 --yes`` on an SQLite store that holds runs (it failed on
    the foreign keys of the runs' events: batch mode copied ``runs`` and dropped the original),
    and the store upgrades again as it opens, its runs kept."""
    url = f"sqlite:///{tmp_path / 'ratchet.db'}"
    store = Store(url)
    store.save_spec("d" * 64, "w", 1, "1", "name: w", time.time())
    store.create_run(  # with its created event
        NewRun(
            id="run_0000000000000001",
            workflow="w",
            spec_digest="d" * 64,
            business_key="K-1",
            state="start",
            status=RunStatus.RUNNING,
            input={"n": 1},
            at=time.time(),
        )
    )
    store.close()
    code, out, err = run_cli(capsys, "db", "downgrade", "0001", "--yes", "--db", url)
    assert code == 0, err
    assert out.strip().splitlines()[-1] == "downgraded: 0002→0001"
    reopened = Store(url)  # upgraded as it opens
    try:
        assert [r.business_key for r in reopened.list_runs()] == ["K-1"]
        assert [e.kind for e in reopened.history("run_0000000000000001")] == ["created"]
        assert schema.read(reopened).status == schema.CURRENT
    finally:
        reopened.close()


def test_a_store_made_between_two_reads_of_its_standing_is_never_taken_for_an_old_one(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read outside a transaction, each statement sees its own moment: another process makes
    the store right after the first look (a race that failed CI once, on PostgreSQL: four
    processes opening one fresh store, one refused it as made before revisions were kept)."""
    reader = Store(store_url, checked=False)
    real = schema.inspect
    made: list[bool] = []

    class Racing:
        def __init__(self, conn: Any) -> None:
            self.found = real(conn)

        def has_table(self, name: str) -> bool:
            answer = bool(self.found.has_table(name))
            if not made:  # another process makes the store right after the first look
                made.append(True)
                Store(store_url).close()
            return answer

    monkeypatch.setattr(schema, "inspect", Racing)
    try:
        found = schema.read(reader)
    finally:
        reader.close()
    assert made == [True]
    assert found.status in (schema.NEW, schema.CURRENT), found
