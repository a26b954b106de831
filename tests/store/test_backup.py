"""``ratchet backup`` and ``ratchet restore`` on SQLite, as an adversary would use them: a backup
taken while a writer commits, files that are no backup, a store under a live lease, a backup from
before revisions were kept, a high-water mark torn or foreign, and each refusal changing
nothing."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, update

from ratchet_runner.errors import StoreCopiedBack
from ratchet_runner.store import restores
from ratchet_runner.store.records import NewRun
from ratchet_runner.store.store import Store
from ratchet_runner.store.tables import history, runs
from ratchet_runner.words import RunStatus
from tests.conftest import postgres_url, run_cli
from tests.store.test_schema import load_fixture

CAPTURE = pytest.CaptureFixture[str]


def new_run(number: int, at: float) -> NewRun:
    return NewRun(
        id=f"run_{number:016d}",
        workflow="w",
        spec_digest="d" * 64,
        business_key=f"K-{number}",
        state="start",
        status=RunStatus.RUNNING,
        input={"n": number},
        at=at,
    )


def writer(url: str, stop: threading.Event) -> int:
    """Commit runs one after another until ``stop``: how many."""
    store = Store(url)
    store.save_spec("d" * 64, "w", 1, "1", "name: w", time.time())
    made = 0
    try:
        while not stop.is_set():
            store.create_run(new_run(made, time.time()))
            made += 1
    finally:
        store.close()
    return made


def test_a_backup_taken_while_a_writer_commits_is_whole_as_of_one_commit(
    tmp_path: Path, capsys: CAPTURE
) -> None:
    url = f"sqlite:///{tmp_path / 'ratchet.db'}"
    Store(url).close()
    stop = threading.Event()
    counted: list[int] = []
    thread = threading.Thread(target=lambda: counted.append(writer(url, stop)))
    thread.start()
    try:
        time.sleep(0.3)
        code, out, err = run_cli(capsys, "backup", str(tmp_path / "b.db"), "--db", url, "--json")
        time.sleep(0.2)
    finally:
        stop.set()
        thread.join()
    assert code == 0, err
    assert json.loads(out)["bytes"] > 0
    copy = sqlite3.connect(tmp_path / "b.db")
    assert copy.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    in_copy = copy.execute("SELECT count(*) FROM runs").fetchone()[0]
    with_history = copy.execute("SELECT count(DISTINCT run_id) FROM history").fetchone()[0]
    copy.close()
    assert 0 < in_copy < counted[0]  # the writer went on after the copy was taken
    assert with_history == in_copy  # every run with the history its commit wrote, no more
    assert not (tmp_path / "b.db.partial").exists()


def test_a_backup_never_overwrites_a_file(tmp_path: Path, capsys: CAPTURE) -> None:
    url = f"sqlite:///{tmp_path / 'ratchet.db'}"
    Store(url).close()
    (tmp_path / "b.db").write_text("precious", encoding="utf-8")
    code, _out, err = run_cli(capsys, "backup", str(tmp_path / "b.db"), "--db", url)
    assert code == 1
    assert "never overwrites" in err
    assert (tmp_path / "b.db").read_text(encoding="utf-8") == "precious"
    code, _out, err = run_cli(capsys, "backup", str(tmp_path / "nowhere" / "b.db"), "--db", url)
    assert code == 1
    assert f"no folder {tmp_path / 'nowhere'} to write the backup b.db in" in err


@pytest.mark.postgres
def test_postgresql_is_sent_to_pg_dump_and_pg_restore(tmp_path: Path, capsys: CAPTURE) -> None:
    url = postgres_url()
    Store(url).close()
    code, _out, err = run_cli(capsys, "backup", str(tmp_path / "b.db"), "--db", url)
    assert (code, "pg_dump" in err, (tmp_path / "b.db").exists()) == (1, True, False)
    (tmp_path / "b.db").write_bytes(b"")
    code, _out, err = run_cli(capsys, "restore", str(tmp_path / "b.db"), "--yes", "--db", url)
    assert (code, "pg_restore" in err) == (1, True)
    code, out, err = run_cli(capsys, "db", "mark-restored", "--db", url, "--json")
    assert code == 0, err
    assert json.loads(out)["restore"]["incarnation"] == 2


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"not a database at all", "is not an SQLite database"),
        (b"", "holds no Ratchet store"),
    ],
)
def test_a_file_that_is_no_backup_is_refused_and_nothing_changes(
    tmp_path: Path, capsys: CAPTURE, content: bytes, said: str
) -> None:
    url = f"sqlite:///{tmp_path / 'ratchet.db'}"
    store = Store(url)
    store.save_spec("d" * 64, "w", 1, "1", "name: w", time.time())
    store.create_run(new_run(1, time.time()))
    store.close()
    bogus = tmp_path / "bogus.db"
    bogus.write_bytes(content)
    code, _out, err = run_cli(capsys, "restore", str(bogus), "--yes", "--db", url)
    assert code == 1
    assert said in err
    assert sorted(p.name for p in tmp_path.glob("*before-restore*")) == []  # no copy left behind
    reopened = Store(url)
    try:
        assert [r.business_key for r in reopened.list_runs()] == ["K-1"]
        assert reopened.restores() == []
    finally:
        reopened.close()


def test_restore_asks_for_yes_and_refuses_a_store_under_a_live_lease(
    tmp_path: Path, capsys: CAPTURE
) -> None:
    url = f"sqlite:///{tmp_path / 'ratchet.db'}"
    assert run_cli(capsys, "backup", str(tmp_path / "b.db"), "--db", url)[0] == 0
    code, _out, err = run_cli(capsys, "restore", str(tmp_path / "b.db"), "--db", url)
    assert (code, "give --yes" in err) == (2, True)
    store = Store(url)
    store.save_spec("d" * 64, "w", 1, "1", "name: w", time.time())
    store.create_run(new_run(1, time.time()))
    with store.engine.begin() as conn:  # a worker holds it now
        conn.execute(
            update(runs).values(
                lease_owner="w:1", lease_token="t", lease_expires_at=time.time() + 60
            )
        )
    store.close()
    code, _out, err = run_cli(capsys, "restore", str(tmp_path / "b.db"), "--yes", "--db", url)
    assert code == 1
    assert "stop every worker" in err
    reopened = Store(url)
    try:
        assert len(reopened.list_runs()) == 1  # nothing put back
        assert reopened.restores() == []
    finally:
        reopened.close()


def test_a_backup_made_before_revisions_were_kept_is_upgraded_as_it_is_put_back(
    tmp_path: Path, capsys: CAPTURE
) -> None:
    old = f"sqlite:///{tmp_path / 'old.db'}"
    load_fixture(old, tmp_path / "home")
    url = f"sqlite:///{tmp_path / 'ratchet.db'}"
    Store(url).close()
    code, out, err = run_cli(
        capsys, "restore", str(tmp_path / "old.db"), "--yes", "--db", url, "--json"
    )
    assert code == 0, err
    assert json.loads(out)["restore"]["incarnation"] == 2
    store = Store(url)
    try:
        assert len(store.list_runs()) > 3  # the fixture's runs
        assert store.restore_window(time.time()) is not None
        with store.engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(history)).scalar()
    finally:
        store.close()
    assert not list(tmp_path.glob("ratchet.db.restoring*"))


def test_a_mark_torn_or_left_by_another_store_is_replaced_not_obeyed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ratchet.db'}"
    Store(url).close()
    mark = restores.mark_path(tmp_path / "ratchet.db")
    mark.write_bytes(b"ratchet-mark 1 \x00\xff torn")
    Store(url).close()  # a torn mark says nothing: rewritten
    found = restores.read_mark(mark)
    assert found is not None
    mark.write_text(f"ratchet-mark 1 {'0' * 32} 9 999\n", encoding="ascii")
    Store(url).close()  # another store's mark: this is no copy of that one
    again = restores.read_mark(mark)
    assert again is not None
    assert again.store_id == found.store_id


def test_a_copy_put_back_by_hand_is_refused_until_marked(tmp_path: Path, capsys: CAPTURE) -> None:
    url = f"sqlite:///{tmp_path / 'ratchet.db'}"
    store = Store(url)
    store.close()
    assert run_cli(capsys, "backup", str(tmp_path / "b.db"), "--db", url)[0] == 0
    store = Store(url)
    with store.engine.begin() as conn:  # as an attempt's commit does
        restores.count_attempt(conn)
        standing = restores.standing(conn)
    restores.Mark(tmp_path / "ratchet.db").raise_to(standing)
    store.close()
    (tmp_path / "ratchet.db").write_bytes((tmp_path / "b.db").read_bytes())
    with pytest.raises(StoreCopiedBack, match="behind the high-water mark"):
        Store(url)
    code, _out, err = run_cli(capsys, "runs", "--db", url)
    assert (code, "R307" in err) == (1, True)
    code, out, _ = run_cli(capsys, "restore", "--mark", "--db", url, "--json")
    assert code == 0
    assert json.loads(out)["restore"]["incarnation"] == 2
    Store(url).close()  # accepted now


def test_opening_a_store_while_others_commit_attempts_is_never_taken_for_a_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mark is raised after its commit: a process that read the store before another's
    commit and the mark after it would see the store behind its mark. The mark is read first,
    so however the commits fall, an honest store is never refused (regression: two workers
    starting at once, one refused with R307)."""
    url = f"sqlite:///{tmp_path / 'ratchet.db'}"
    Store(url).close()
    stop = threading.Event()
    read = restores.standing

    def slow(conn: Any) -> restores.Standing:  # the moment between two reads, made longer
        found = read(conn)
        time.sleep(0.003)
        return found

    monkeypatch.setattr(restores, "standing", slow)

    def commits() -> None:  # as a worker's attempts do: the commit, then the mark raised
        store = Store(url)
        mark = restores.Mark(tmp_path / "ratchet.db")
        try:
            while not stop.is_set():
                with store.engine.begin() as conn:
                    restores.count_attempt(conn)
                    standing = read(conn)
                mark.raise_to(standing)
                time.sleep(0.001)
        finally:
            mark.close()
            store.close()

    thread = threading.Thread(target=commits)
    thread.start()
    refused = 0
    try:
        for _ in range(100):
            try:
                Store(url).close()
            except StoreCopiedBack:
                refused += 1
    finally:
        stop.set()
        thread.join()
    assert refused == 0


def test_restores_outlive_a_reset_of_every_run(tmp_path: Path) -> None:
    """``ratchet reset --all`` empties the runs, never the record of the store's incarnations
    (docs/reference/store.md): a store put back stays one, with its window."""
    store = Store(f"sqlite:///{tmp_path / 'ratchet.db'}")
    try:
        made = store.mark_restored(at=time.time(), window=3600.0, source="test", by="drill")
        store.reset()
        assert store.restores() == [made]
    finally:
        store.close()


def test_a_downgrade_that_drops_an_open_restore_window_says_so(
    tmp_path: Path, capsys: CAPTURE
) -> None:
    url = f"sqlite:///{tmp_path / 'ratchet.db'}"
    Store(url).close()
    assert run_cli(capsys, "restore", "--mark", "--db", url)[0] == 0
    code, out, err = run_cli(capsys, "db", "downgrade", "0003", "--yes", "--db", url)
    assert code == 0
    assert "warning" not in err  # 0003 keeps the window
    code, out, err = run_cli(capsys, "db", "downgrade", "0002", "--yes", "--db", url)
    assert code == 0, err
    assert "restore window is open (incarnation 2)" in err
    assert "downgraded: 0003→0002" in out
