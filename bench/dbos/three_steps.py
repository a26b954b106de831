"""DBOS Transact's equivalent of the benchmark workflow: three steps, each checkpointed.

Run by ``bench/bench_pool.py`` inside the benchmark's own virtual environment (DBOS is never a
project dependency): ``python three_steps.py SYSTEM_DATABASE_URL N`` prints steps per second.
With ``--gated`` (``bench/bench_cpu.py``), it says ``ready`` once launched and warm, waits for a
line on stdin before the N workflows, prints the rate, and waits for another line before it
shuts down, so that the parent can read its CPU time (and its backends') around the workflows
alone.

On SQLite, DBOS runs with Ratchet's settings, not SQLite's defaults: every connection any engine
opens in this process is put in WAL mode with ``synchronous=FULL`` (DBOS sets neither and would
run in the rollback journal), on top of DBOS's own settings (``BEGIN IMMEDIATE``, its busy
timeout). Each connection's settings are read back, and the script fails unless every one that
DBOS opened ran with them; they are printed on stderr (``sqlite settings: wal, synchronous 2 on
N connections``).
"""

import sys
import time
import uuid
from typing import Any

import sqlalchemy
from dbos import DBOS, DBOSConfig, SetWorkflowID

url, n = sys.argv[1], int(sys.argv[2])
gated = "--gated" in sys.argv[3:]
seen: list[tuple[str, int]] = []


@sqlalchemy.event.listens_for(sqlalchemy.engine.Engine, "connect")
def _as_ratchet_does(dbapi_connection: Any, _record: Any) -> None:
    """WAL and synchronous=FULL, as Ratchet's SQLite store runs (its store/dialects.py)."""
    if not url.startswith("sqlite"):
        return
    level = dbapi_connection.isolation_level
    dbapi_connection.isolation_level = None  # PRAGMA journal_mode cannot run in a transaction
    dbapi_connection.execute("PRAGMA journal_mode=WAL")
    dbapi_connection.execute("PRAGMA synchronous=FULL")
    mode = dbapi_connection.execute("PRAGMA journal_mode").fetchone()[0]
    sync = dbapi_connection.execute("PRAGMA synchronous").fetchone()[0]
    dbapi_connection.isolation_level = level
    seen.append((str(mode), int(sync)))


config: DBOSConfig = {
    "name": "ratchet-bench",
    "system_database_url": url,
    "log_level": "ERROR",
    "console_log_level": "ERROR",
}
DBOS(config=config)


@DBOS.step()
def step_one(key: str) -> str:
    return key


@DBOS.step()
def step_two(key: str) -> str:
    return key


@DBOS.step()
def step_three(key: str) -> str:
    return key


@DBOS.workflow()
def three(key: str) -> str:
    step_one(key)
    step_two(key)
    return step_three(key)


DBOS.launch()
three("warm")
if gated:
    print("ready", flush=True)
    sys.stdin.readline()
start = time.perf_counter()
for i in range(n):
    with SetWorkflowID(f"b-{uuid.uuid4().hex}"):
        three(f"k{i}")
elapsed = time.perf_counter() - start
if url.startswith("sqlite"):
    if not seen or any(found != ("wal", 2) for found in seen):
        sys.exit(f"DBOS did not run with WAL and synchronous=FULL: {seen}")
    print(f"sqlite settings: wal, synchronous 2 on {len(seen)} connections", file=sys.stderr)
print(3 * n / elapsed, flush=True)
if gated:
    sys.stdin.readline()
DBOS.destroy()
