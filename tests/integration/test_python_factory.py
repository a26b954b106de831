"""Your own adapter, named by ``module:callable`` in a binding, runs a workflow with faults.

The module lives in the test's own folder, on ``PYTHONPATH`` of real ``ratchet`` processes. It
stands for a warehouse that keeps its labels in a SQLite file and, like the practice warehouse,
does **not** deduplicate by key: a second request with the same operation ID makes a second
label. Its faults are counted in the same file, so they hold across processes: its first call
is refused as unavailable (nothing made), its second makes the label and then times out (the
reply lost). Ratchet retries the first with the same ID, reconciles the second through the
adapter's lookup, and so makes the label once; the run, on a store that is not a practice
store, records the binding it ran under.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.conftest import RATCHET, SPECS

RETURNS = SPECS / "returns.yaml"

WAREHOUSE = '''
"""A warehouse in a SQLite file, with faults counted in it."""

import sqlite3

from ratchet_runner import Ambiguous, Done, Found, NotFound, Transient


class Warehouse:
    operations = ("create_label", "reship")
    lookups = ("lookup",)

    def __init__(self, settings):
        self.path = settings["labels"]
        self.faults = list(settings.get("faults", []))  # one per call, in order: "" for none
        with sqlite3.connect(self.path) as db:
            db.execute("CREATE TABLE IF NOT EXISTS labels (n INTEGER PRIMARY KEY, op TEXT)")
            db.execute("CREATE TABLE IF NOT EXISTS calls (n INTEGER PRIMARY KEY, op TEXT)")

    def call(self, request):
        with sqlite3.connect(self.path, isolation_level="IMMEDIATE") as db:
            db.execute("INSERT INTO calls (op) VALUES (?)", (request.operation_id,))
            number = db.execute("SELECT count(*) FROM calls").fetchone()[0]
            fault = self.faults[number - 1] if number <= len(self.faults) else ""
            if fault == "unavailable":
                return Transient("503: the warehouse is busy")
            cursor = db.execute("INSERT INTO labels (op) VALUES (?)", (request.operation_id,))
            label = f"LBL-{cursor.lastrowid}"
        if fault == "timeout_after_write":
            return Ambiguous("timed out: the reply was lost after the label was made")
        return Done({"label_id": label})

    def lookup(self, operation, operation_id, effect=""):
        with sqlite3.connect(self.path) as db:
            row = db.execute("SELECT n FROM labels WHERE op = ?", (operation_id,)).fetchone()
        return NotFound() if row is None else Found({"label_id": f"LBL-{row[0]}"})
'''


def _ratchet(tmp_path: Path, store_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "RATCHET_HOME": str(tmp_path / "home"),
        "RATCHET_DB": store_url,
        "PYTHONPATH": str(tmp_path),
    }
    for name in ("RATCHET_BINDINGS", "RATCHET_NOW"):
        env.pop(name, None)
    return subprocess.run([RATCHET, *args], cwd=tmp_path, env=env, capture_output=True, text=True)


def test_a_python_factory_adapter_with_faults_makes_the_label_once(
    tmp_path: Path, store_url: str
) -> None:
    (tmp_path / "my_warehouse.py").write_text(WAREHOUSE, encoding="utf-8")
    labels = tmp_path / "labels.db"
    binding = tmp_path / "ratchet.toml"  # found in the working directory
    binding.write_text(
        "\n".join(
            [
                'name = "own-warehouse"',
                "[adapters.warehouse]",
                'implementation = "python"',
                'factory = "my_warehouse:Warehouse"',
                "dedupe = false",
                "commits_within = 3",
                f'labels = "{labels}"',
                'faults = ["unavailable", "timeout_after_write"]',
                "",
            ]
        ),
        encoding="utf-8",
    )
    assert _ratchet(tmp_path, store_url, "validate", str(RETURNS)).returncode == 0

    done = _ratchet(tmp_path, store_url, "run", str(RETURNS), "--example", "T-90604", "--json")
    assert done.returncode == 0, done.stderr
    assert (json.loads(done.stdout)["state"], json.loads(done.stdout)["status"]) == (
        "labelled",
        "done",
    )
    with sqlite3.connect(labels) as db:
        made = db.execute("SELECT op FROM labels").fetchall()
        calls = db.execute("SELECT op FROM calls").fetchall()
    assert len(made) == 1  # once, though two requests reached the warehouse
    assert calls == [made[0], made[0]]  # both under the same operation ID

    traced = _ratchet(tmp_path, store_url, "trace", "T-90604/return_label", "--json")
    trace = json.loads(traced.stdout)
    assert trace["binding"]["name"] == "own-warehouse"
    kinds = [event["kind"] for event in trace["events"]]
    for expected in ("unavailable", "timeout", "reconcile_found", "done"):
        assert expected in kinds, kinds
    assert kinds.index("unavailable") < kinds.index("timeout") < kinds.index("reconcile_found")
    done_event = next(e for e in trace["events"] if e["kind"] == "done")
    assert done_event["via"] == "reconcile"


@pytest.mark.parametrize("factory", ["my_warehouse:Nowhere", "no_such_module:Warehouse"])
def test_a_factory_that_cannot_be_found_refuses_the_run_before_it_exists(
    tmp_path: Path, store_url: str, factory: str
) -> None:
    (tmp_path / "my_warehouse.py").write_text(WAREHOUSE, encoding="utf-8")
    (tmp_path / "ratchet.toml").write_text(
        f'[adapters.warehouse]\nimplementation = "python"\nfactory = "{factory}"\n',
        encoding="utf-8",
    )
    refused = _ratchet(tmp_path, store_url, "run", str(RETURNS), "--example", "T-90604")
    assert refused.returncode == 1
    assert "ratchet.toml:1:1: B103 binding 'warehouse': factory" in refused.stderr
    assert "cannot be imported" in refused.stderr
    listed = _ratchet(tmp_path, store_url, "runs", "--json")
    assert json.loads(listed.stdout) == []
