"""The restore drill, as an operator runs it, with real processes, on SQLite and PostgreSQL, for
the refund (a provider that deduplicates keys) and the return label (a warehouse that keeps no
key register):

1. take a backup (``ratchet backup``; on PostgreSQL ``pg_dump``);
2. let workers make effects: the runs the backup holds ready for their effect, and runs started
   after it (which the backup holds nothing of);
3. restore (``ratchet restore``; on PostgreSQL ``pg_restore`` then ``ratchet db
   mark-restored``), in one variant with SIGKILLs during the restore first (at each point of
   it, and at seeded random moments), each followed by a look at the store;
4. drive every run to its end: the workers again, and the runs started after the backup started
   again by the application with the same input (approved again where the spec asks).

Then every business key has exactly one change at its provider, and every run is done or with a
person."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from ratchet_runner.adapters.practice import PracticeWorld
from ratchet_runner.store.store import Store
from tests.conftest import PG_URL, ROOT, postgres_url, ratchet_process
from tests.integration.test_evolve_live import refund_input
from tests.integration.test_restore import label_input

#: The runs the backup holds, ready for their effect; the ones started after it; one done
#: before it.
HELD, AFTER, BEFORE = (1, 2, 3), (4, 5), (6,)
SEED = 20261206


def inputs(spec: str, number: int) -> dict[str, Any]:
    return refund_input(number) if spec == "refund" else label_input(number)


class Drill:
    """One drill's home, store and spec, driven through real ``ratchet`` processes."""

    def __init__(self, tmp_path: Path, url: str, spec: str) -> None:
        self.home, self.url, self.spec = tmp_path / "home", url, spec
        self.tmp = tmp_path
        self.home.mkdir()
        self.world = PracticeWorld(self.home / "practice.db")
        numbers = (*HELD, *AFTER, *BEFORE)
        self.world.seed(
            {"orders": [{"order": f"LK-{n}", "paid": 100, "currency": "CAD"} for n in numbers]}
        )

    def ratchet(self, *args: str, ok: bool = True) -> str:
        process = ratchet_process(self.home, self.url, *args, capture=True)
        out, err = process.communicate(timeout=120)
        if ok:
            assert process.returncode == 0, f"ratchet {' '.join(args)}: {err}"
        return out

    def start(self, number: int, *, leave: bool = False) -> str:
        path = self.tmp / f"input-{number}.json"
        path.write_text(json.dumps(inputs(self.spec, number)), encoding="utf-8")
        spec = str(ROOT / "specs" / f"{self.spec}.yaml")
        more = ["--leave-to-workers"] if leave and self.spec == "returns" else []
        run = json.loads(self.ratchet("run", spec, "--input", str(path), "--json", *more))
        if self.spec == "refund":  # waits for an agent's approval
            more = ["--leave-to-workers"] if leave else []
            self.ratchet("approve", run["run"], "--as", "agent-7", "--role", "agent", *more)
        return str(run["run"])

    def workers(self) -> None:
        """Two workers at once, one pass each, until every run has ended or waits for a
        person (a lookup that found nothing is believed only once the warehouse's commit
        window has passed: a few seconds)."""
        deadline = time.monotonic() + 60
        while True:
            both = [
                ratchet_process(self.home, self.url, "worker", "--once", capture=True)
                for _ in range(2)
            ]
            said = [p.communicate(timeout=120)[1] for p in both]
            assert [p.returncode for p in both] == [0, 0], said
            open_runs = [r for r in self.runs() if r["status"] not in ("done", "needs_person")]
            if not open_runs:
                return
            assert time.monotonic() < deadline, f"runs never ended: {open_runs}"
            time.sleep(0.5)

    def runs(self) -> list[dict[str, Any]]:
        return list(json.loads(self.ratchet("runs", "--json", "--limit", "100")))

    def changes(self) -> dict[str, int]:
        """How many changes the provider made for each order."""
        made: dict[str, int] = {}
        for change in self.world.changes():
            order = str(change.args.get("order"))
            made[order] = made.get(order, 0) + 1
        return made


# -- SQLite: ratchet backup and ratchet restore ---------------------------------------------------


def sqlite_backup(drill: Drill) -> Path:
    target = drill.tmp / "backup.db"
    drill.ratchet("backup", str(target))
    return target


def sqlite_restore(drill: Drill, backup: Path) -> None:
    drill.ratchet("restore", str(backup), "--yes", "--window", "7d", "--as", "drill")


KILL_AT = """
import os, signal, sys, time
from pathlib import Path
from ratchet_runner.store.store import Store

def checkpoint(point):
    if point == sys.argv[3]:
        os.kill(os.getpid(), signal.SIGKILL)

store = Store(sys.argv[1], checked=False)
store.restore_from(Path(sys.argv[2]), at=time.time(), window=604800.0, by="drill",
                   checkpoint=checkpoint)
"""


def sqlite_kills(drill: Drill, backup: Path) -> None:
    """SIGKILL the restore at each of its points, and at seeded random moments of the
    command: after each, the store opens, and holds either what it held or the backup,
    marked as put back."""
    database = Path(unquote(drill.url.removeprefix("sqlite:///")))
    for point in ("staged", "writing", "written"):
        killed = subprocess.run(
            [sys.executable, "-c", KILL_AT, drill.url, str(backup), point],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        look(drill, database, restored=point == "written")
    rng = random.Random(SEED)
    for _ in range(3):
        process = ratchet_process(
            drill.home, drill.url, "restore", str(backup), "--yes", capture=True
        )
        time.sleep(rng.uniform(0.05, 0.8))
        process.send_signal(signal.SIGKILL)
        process.communicate(timeout=60)
        look(drill, database, restored=None)


def look(drill: Drill, database: Path, restored: bool | None) -> None:
    """The store after a killed restore opens; ``restored``: whether it must hold the backup
    (None: either)."""
    store = Store(drill.url)
    try:
        held = {r.business_key for r in store.list_runs()}
        now = time.time()
        is_restored = store.restore_window(now) is not None and len(held) == len(HELD + BEFORE)
        if restored is not None:
            assert is_restored == restored, held
        if not is_restored:  # as it was: every run there
            assert len(held) == len(HELD + AFTER + BEFORE)
    finally:
        store.close()
    assert database.exists()


# -- PostgreSQL: pg_dump, pg_restore, ratchet db mark-restored -----------------------------------


def pg_parts(url: str) -> tuple[list[str], str]:
    """pg_dump's connection options for the test server, and the test's schema."""
    schema = unquote(url.rsplit("search_path%3D", 1)[1])
    base = PG_URL.split("://", 1)[1]
    user, _, rest = base.partition("@")
    host_port, _, database = rest.partition("/")
    host, _, port = host_port.partition(":")
    return ["-h", host, "-p", port or "5432", "-U", user, "-d", database.split("?")[0]], schema


def pg_backup(drill: Drill) -> Path:
    target = drill.tmp / "backup.dump"
    connection, schema = pg_parts(drill.url)
    subprocess.run(
        ["pg_dump", *connection, "-n", schema, "-Fc", "-f", str(target)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return target


def pg_restore_command(drill: Drill, backup: Path) -> list[str]:
    connection, schema = pg_parts(drill.url)
    return [
        "pg_restore",
        *connection,
        "-n",
        schema,
        "--clean",
        "--if-exists",
        "--single-transaction",
        str(backup),
    ]


def pg_restore(drill: Drill, backup: Path) -> None:
    subprocess.run(pg_restore_command(drill, backup), check=True, capture_output=True, timeout=120)
    drill.ratchet("db", "mark-restored", "--window", "7d", "--as", "drill", "--source", "drill")


def pg_kills(drill: Drill, backup: Path) -> None:
    """SIGKILL pg_restore (one transaction: nothing of it stays) and ratchet db mark-restored
    (one transaction too) at seeded random moments; the store opens after each."""
    rng = random.Random(SEED)
    for command in (
        pg_restore_command(drill, backup),
        [str(Path(sys.executable).with_name("ratchet")), "db", "mark-restored", "--as", "drill"],
    ):
        for _ in range(2):
            env = {**os.environ, "RATCHET_DB": drill.url, "RATCHET_HOME": str(drill.home)}
            process = subprocess.Popen(
                command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            time.sleep(rng.uniform(0.02, 0.4))
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=60)
            Store(drill.url).close()  # opens: whole, at this code's revision


# -- the drill -------------------------------------------------------------------------------


def drill_once(drill: Drill, backup_with: Any, restore_with: Any, kills: Any | None) -> None:
    for number in BEFORE:
        drill.start(number)
    for number in HELD:
        drill.start(number, leave=True)  # ready for its effect; left to the workers
    backup = backup_with(drill)
    drill.workers()  # the held runs make their effects
    for number in AFTER:
        drill.start(number)  # started after the backup, to their end
    made = drill.changes()
    assert made == {f"LK-{n}": 1 for n in (*HELD, *AFTER, *BEFORE)}

    if kills is not None:
        kills(drill, backup)
    restore_with(drill, backup)
    assert {r["business_key"] for r in drill.runs()} == {
        next(iter(inputs(drill.spec, n).values()))
        + ("/return_label" if drill.spec == "returns" else "")
        for n in (*HELD, *BEFORE)
    }
    for number in AFTER:
        drill.start(number)  # the application starts it again, with the same input
    drill.workers()

    assert drill.changes() == made  # not one change made again
    statuses = {r["business_key"]: r["status"] for r in drill.runs()}
    assert set(statuses.values()) <= {"done", "needs_person"}, statuses
    assert len(statuses) == len(HELD + AFTER + BEFORE)
    traced = drill.ratchet("trace", statuses and next(iter(statuses)))
    assert "trace" in traced or traced  # readable after the restore


@pytest.mark.parametrize("spec", ["returns", "refund"])
@pytest.mark.parametrize("killed", [False, True], ids=["plain", "sigkills"])
def test_restore_drill_sqlite(tmp_path: Path, spec: str, killed: bool) -> None:
    drill = Drill(tmp_path, f"sqlite:///{tmp_path / 'ratchet.db'}", spec)
    drill_once(drill, sqlite_backup, sqlite_restore, sqlite_kills if killed else None)
    restores = json.loads(drill.ratchet("db", "restores", "--json"))["restores"]
    assert restores[-1]["by"] == "drill"
    assert restores[-1]["backup_taken_at"] is not None


@pytest.mark.postgres
@pytest.mark.parametrize("spec", ["returns", "refund"])
@pytest.mark.parametrize("killed", [False, True], ids=["plain", "sigkills"])
def test_restore_drill_postgresql(tmp_path: Path, spec: str, killed: bool) -> None:
    missing = [p for p in ("pg_dump", "pg_restore") if shutil.which(p) is None]
    if missing and not os.environ.get("CI"):
        pytest.skip(
            f"{' and '.join(missing)} not found: install the PostgreSQL client programs "
            "('apt-get install postgresql-client')"
        )
    drill = Drill(tmp_path, postgres_url(), spec)
    drill_once(drill, pg_backup, pg_restore, pg_kills if killed else None)
    restores = json.loads(drill.ratchet("db", "restores", "--json"))["restores"]
    assert restores[-1]["source"] == "drill"
