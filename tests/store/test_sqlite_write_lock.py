"""How an SQLite write waits for the write lock (``ratchet_runner.store.sqlite``): it tries
every few milliseconds, never sleeping longer than ``MOST_PAUSE``, instead of SQLite's own busy
handler, which sleeps up to 100 ms between tries and so loses the lock to writers that poll
sooner (a worker's commit waited 0.93 s beside one other worker, ``bench/bench_prune.py``); it
gives up after the busy timeout with the database's own error; and every other statement keeps
the busy timeout."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest

from ratchet_runner.errors import StoreError
from ratchet_runner.store import sqlite as sqlite_writer
from ratchet_runner.store.dialects import SQLITE_BUSY_SECONDS
from ratchet_runner.store.store import Store


def _holder(path: Path) -> sqlite3.Connection:
    """Another connection, holding the write lock."""
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    return holder


def test_a_write_waits_in_short_pauses_and_gets_the_lock_once_it_is_free(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(f"sqlite:///{tmp_path / 'ratchet.db'}")
    pauses: list[float] = []
    sleep = time.sleep

    def recorded(seconds: float) -> None:
        pauses.append(seconds)
        sleep(seconds)

    monkeypatch.setattr(sqlite_writer.time, "sleep", recorded)
    holder = _holder(tmp_path / "ratchet.db")
    release = threading.Timer(0.3, holder.execute, args=("COMMIT",))
    release.start()
    try:
        store.mark_practice()  # a write transaction, held up by the holder
    finally:
        release.join()
        holder.close()
    assert store.is_practice()
    assert len(pauses) >= 0.3 / (1.5 * sqlite_writer.MOST_PAUSE) * 0.5  # it kept trying
    assert max(pauses) <= 1.5 * sqlite_writer.MOST_PAUSE  # never SQLite's 100 ms sleeps
    with store.engine.connect() as conn:  # every statement after it keeps the busy timeout
        timeout = conn.exec_driver_sql("PRAGMA busy_timeout").scalar()
    assert timeout == int(SQLITE_BUSY_SECONDS * 1000)
    store.close()


def test_a_write_that_never_gets_the_lock_fails_with_the_databases_own_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(f"sqlite:///{tmp_path / 'ratchet.db'}")
    monkeypatch.setattr(sqlite_writer, "SQLITE_BUSY_SECONDS", 0.2)
    holder = _holder(tmp_path / "ratchet.db")
    try:
        began = time.monotonic()
        with pytest.raises(StoreError, match="database is locked"):
            store.mark_practice()
        assert time.monotonic() - began < 10  # its patience, not the busy timeout again
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert not store.is_practice()
    with store.engine.connect() as conn:  # the busy timeout is back for what comes next
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 60_000
    monkeypatch.undo()
    store.mark_practice()  # the store is whole, and writes again
    assert store.is_practice()
    store.close()


def test_the_busy_timeout_is_back_even_when_a_try_fails_otherwise(tmp_path: Path) -> None:
    raw = sqlite3.connect(tmp_path / "plain.db", isolation_level=None)
    raw.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_SECONDS * 1000)}")
    raw.execute("BEGIN")  # a transaction open already: BEGIN IMMEDIATE fails, not as busy
    with pytest.raises(sqlite3.OperationalError, match="within a transaction"):
        sqlite_writer._take_write_lock(raw, 1.0)
    assert raw.execute("PRAGMA busy_timeout").fetchone()[0] == int(SQLITE_BUSY_SECONDS * 1000)
    raw.close()
