"""How an idle worker learns from the database that another process made a run runnable.

Within one process the store's bell (:mod:`~ratchet_runner.store.bell`) is rung by the commit
itself. Across processes:

- **PostgreSQL**: :class:`Listener` holds a dedicated autocommit connection that ``LISTEN``\\ s on
  the store's channel; each wake-up commit sends ``pg_notify`` inside its own statement, so the
  notification goes out when, and only if, the commit does. On start the listener sends a probe
  notification of its own through the store's connection and waits for it: a
  transaction-pooling proxy cannot carry ``LISTEN``, and then nothing arrives; the worker says so
  and polls (give it a direct connection with ``--listen-db``). When the listening connection
  drops, the worker polls while the listener reconnects, and rings the bell once it listens
  again, so a notification sent in between is not lost: the workers look at once.
- **SQLite**: :class:`DataVersionWatch` reads ``PRAGMA data_version`` on a dedicated connection
  every :data:`CHECK_INTERVAL` seconds. The number changes when another connection commits (it
  never changes for the watching connection's own commits, and it makes none); only then does
  the watch ask the store whether a run is runnable now or the next due time moved
  (:meth:`~ratchet_runner.store.store.Store.has_runnable`,
  :meth:`~ratchet_runner.store.store.Store.next_due`), and rings the bell if so. A read in WAL
  mode takes no lock a writer waits for.

Either way the worker also polls at its ``--poll`` interval, whatever happens to the watch.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, Protocol

from sqlalchemy import create_engine, make_url

from .bell import Bell

#: Seconds between two looks at SQLite's ``data_version`` by an idle worker process.
CHECK_INTERVAL = 0.01

#: Seconds a PostgreSQL worker waits for its own probe notification at start.
PROBE_SECONDS = 3.0

#: Seconds between two pings of an idle listening connection (a dead one is found and replaced).
KEEPALIVE = 10.0

#: The ``application_name`` of a listening connection (unless its URL gives one).
APPLICATION_NAME = "ratchet-listen"

#: The longest wait, in seconds, between two attempts to listen again.
MAX_RECONNECT = 5.0


class Watch(Protocol):
    """A thread that rings a bell when another process makes a run runnable."""

    def start(self) -> None: ...

    def close(self) -> None: ...

    def describe(self) -> str:
        """How this worker learns of wake-ups, for its start-up line."""
        ...


class _Thread:
    """A daemon thread that runs :meth:`_run` until :meth:`close`."""

    name = "ratchet-watch"

    def __init__(self, bell: Bell, log: Callable[[str], None]) -> None:
        self.bell = bell
        self.log = log
        self.stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._guarded, name=self.name, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.stopped.set()
        self._interrupt()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _interrupt(self) -> None:
        """Cut short what the thread is waiting on, once :attr:`stopped` is set."""

    def _guarded(self) -> None:
        try:
            self._run()
        except Exception as exc:  # never a traceback from a watch: the worker polls on
            self.log(f"wake-ups stopped ({type(exc).__name__}: {exc}); polling only")

    def _run(self) -> None:
        raise NotImplementedError


class Listener(_Thread):
    """PostgreSQL: ``LISTEN`` on ``channel`` over a connection of its own to ``url``; ring the
    bell for each notification. ``probe(payload)`` sends a notification through the store's own
    connection, for the start-up check."""

    name = "ratchet-listen"

    def __init__(
        self,
        url: str,
        channel: str,
        bell: Bell,
        probe: Callable[[str], None],
        log: Callable[[str], None],
    ) -> None:
        super().__init__(bell, log)
        self.url = url
        self.channel = channel
        self.probe = probe
        #: Set while a ``LISTEN`` is in place (tests and the benchmark wait for it).
        self.listening = threading.Event()
        #: Why the worker only polls, once the start-up check has failed.
        self.gave_up: str | None = None
        self._conn: Any = None
        # Written to by close(): the listening thread waits on it beside its connection, so
        # that it stops at once instead of at the end of a wait.
        self._stop_reader, self._stop_writer = socket.socketpair()
        self._stop_writer.setblocking(False)

    def describe(self) -> str:
        return f"wakes on PostgreSQL notifications (LISTEN {self.channel})"

    def _interrupt(self) -> None:
        with contextlib.suppress(OSError):
            self._stop_writer.send(b"x")

    def close(self) -> None:
        super().close()
        if self._thread is None or not self._thread.is_alive():
            self._stop_reader.close()
            self._stop_writer.close()

    def _wait(self, conn: Any, timeout: float) -> None:
        """Until ``conn`` has something to read (a notification, or its end), :meth:`close` is
        called, or ``timeout`` seconds have passed."""
        select.select([conn.fileno(), self._stop_reader], [], [], max(0.0, timeout))

    def _connect(self) -> Any:
        import psycopg

        parsed = make_url(self.url).difference_update_query(["prepare_threshold"])
        args, params = create_engine(parsed).dialect.create_connect_args(parsed)
        params.setdefault("connect_timeout", 5)
        params.setdefault("application_name", APPLICATION_NAME)
        conn = psycopg.connect(*args, **params, autocommit=True)
        ident = '"' + self.channel.replace('"', '""') + '"'
        try:
            conn.execute(f"LISTEN {ident}")
        except BaseException:
            conn.close()
            raise
        return conn

    def _checked(self, conn: Any) -> bool:
        """Whether a notification sent through the store's connection reaches ``conn``."""
        if self.stopped.is_set():  # closed while connecting: the store may be closed too
            return False
        payload = f"probe:{uuid.uuid4().hex}"
        self.probe(payload)
        ends = time.monotonic() + PROBE_SECONDS
        while not self.stopped.is_set():
            if any(note.payload == payload for note in list(conn.notifies(timeout=0))):
                return True
            if (left := ends - time.monotonic()) <= 0:
                return False
            self._wait(conn, left)
        return False

    def _run(self) -> None:
        checked = False
        failures = 0
        while not self.stopped.is_set():
            try:
                self._conn = conn = self._connect()
            except Exception as exc:
                failures += 1
                if failures == 1:
                    self.log(f"cannot listen for wake-ups ({_short(exc)}); polling meanwhile")
                self.stopped.wait(min(MAX_RECONNECT, 0.1 * 2**failures))
                continue
            try:
                if not checked:
                    if not self._checked(conn):
                        if self.stopped.is_set():
                            return
                        self.gave_up = (
                            "a notification sent through the store's connection did not arrive "
                            "(a transaction-pooling proxy cannot carry LISTEN; give the worker a "
                            "direct connection with --listen-db URL)"
                        )
                        self.log(f"warning: {self.gave_up}; polling only")
                        return
                    checked = True
                    self.log("its own notification arrived: listening for wake-ups")
                elif failures:
                    self.log("listening for wake-ups again")
                failures = 0
                self.listening.set()
                self.bell.ring()  # anything notified while nobody listened is looked for now
                self._listen(conn)
            except Exception as exc:
                self.listening.clear()
                if self.stopped.is_set():
                    return
                failures += 1
                if failures == 1:
                    self.log(f"wake-ups lost ({_short(exc)}); polling while it listens again")
                self.stopped.wait(min(MAX_RECONNECT, 0.05 * 2**failures))
            finally:
                self.listening.clear()
                self._conn = None
                with contextlib.suppress(Exception):
                    conn.close()

    def _listen(self, conn: Any) -> None:
        pinged = time.monotonic()
        while not self.stopped.is_set():
            # What has arrived, and what arrived while a ping ran (psycopg keeps those): one
            # ring for all of it.
            if list(conn.notifies(timeout=0)):
                self.bell.ring()
            if (left := KEEPALIVE - (time.monotonic() - pinged)) <= 0:
                conn.execute("SELECT 1")
                pinged = time.monotonic()
                continue
            self._wait(conn, left)


class DataVersionWatch(_Thread):
    """SQLite: look at ``PRAGMA data_version`` every ``interval`` seconds on a connection of its
    own; when another connection has committed, ring the bell if ``store`` (a
    :class:`~ratchet_runner.store.store.Store` on the same file) has a run runnable now or its
    next due time moved."""

    name = "ratchet-data-version"

    def __init__(
        self, store: Any, log: Callable[[str], None], interval: float = CHECK_INTERVAL
    ) -> None:
        super().__init__(store.bell, log)
        self.store = store
        self.interval = interval

    def describe(self) -> str:
        return f"wakes on changes to the database file (checked every {self.interval * 1000:g} ms)"

    def _run(self) -> None:
        import sqlite3

        parsed = make_url(self.store.url)
        args, params = create_engine(parsed).dialect.create_connect_args(parsed)
        params.update(check_same_thread=False, isolation_level=None)
        connect: Any = sqlite3.connect
        conn = connect(*args, **params)
        try:
            version = conn.execute("PRAGMA data_version").fetchone()[0]
            due: float | None = None
            while not self.stopped.wait(self.interval):
                current = conn.execute("PRAGMA data_version").fetchone()[0]
                if current == version:
                    continue
                version = current
                now = self.store.clock.now()
                runnable, due_then = self.store.has_runnable(now), self.store.next_due(now)
                if runnable or due_then != due:
                    self.bell.ring()
                due = due_then
        finally:
            conn.close()


def watch_for(
    store: Any, log: Callable[[str], None], listen_url: str | None = None
) -> Watch | None:
    """The watch for ``store`` (a :class:`~ratchet_runner.store.store.Store`): a
    :class:`Listener` on PostgreSQL (on ``listen_url`` if given, else the store's own URL), a
    :class:`DataVersionWatch` on a SQLite file; None for another database or an in-memory one."""
    name = store.dialect.name
    if name == "postgresql":
        channel = store.notification_channel()
        return Listener(listen_url or store.url, channel, store.bell, store.wake_workers, log)
    if name == "sqlite" and make_url(store.url).database not in (None, "", ":memory:"):
        return DataVersionWatch(store, log)
    return None


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 200 else text[:199] + "…"
