"""DBOS Transact's equivalent of the benchmark workflow: three steps, each checkpointed.

Run by ``bench/bench_pool.py`` inside the benchmark's own virtual environment (DBOS is never a
project dependency): ``python three_steps.py SYSTEM_DATABASE_URL N`` prints steps per second.
With ``--gated`` (``bench/bench_cpu.py``), it says ``ready`` once launched and warm, waits for a
line on stdin before the N workflows, prints the rate, and waits for another line before it
shuts down, so that the parent can read its CPU time (and its backends') around the workflows
alone.
"""

import sys
import time
import uuid

from dbos import DBOS, DBOSConfig, SetWorkflowID

url, n = sys.argv[1], int(sys.argv[2])
gated = "--gated" in sys.argv[3:]
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
print(3 * n / elapsed, flush=True)
if gated:
    sys.stdin.readline()
DBOS.destroy()
