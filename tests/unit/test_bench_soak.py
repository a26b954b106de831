"""``make soak`` (``bench/soak.py``), on a stand-in for the race test that loses once: every run
is made whatever failed before it, the summary counts each store's runs, and a failed run fails
the soak, named with the first line of its failure and its log. The hogs it starts to load the
cores are gone when it ends."""

from __future__ import annotations

import importlib
import io
import os
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.conftest import ROOT

#: Parametrised by store as the race test is; PostgreSQL loses the second run.
LOSES_ONCE = """
import os
import re
from pathlib import Path

import pytest


@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_race(store):
    counter = Path(os.environ["SOAK_COUNTER"]) / store
    runs = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(runs))
    assert not (store == "postgresql" and runs == 2), "lost the race"
"""


@pytest.fixture
def soak(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """``bench.soak``, as ``python -m bench.soak`` imports it from the checkout's root (the
    benchmarks are no part of the installed package)."""
    monkeypatch.syspath_prepend(str(ROOT))
    return importlib.import_module("bench.soak")


@pytest.fixture
def race(soak: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    test = tmp_path / "race" / "test_race.py"
    test.parent.mkdir()
    test.write_text(LOSES_ONCE, encoding="utf-8")
    monkeypatch.setenv("SOAK_COUNTER", str(tmp_path))
    monkeypatch.setattr(soak, "LOGS", tmp_path / "logs")
    return test


def test_a_run_that_fails_fails_the_soak_and_the_runs_after_it_still_run(
    soak: ModuleType, race: Path
) -> None:
    out = io.StringIO()
    assert soak.soak(runs=3, hogs=0, test=race, out=out) == 1
    printed = out.getvalue()
    assert "run 3/3  sqlite passed" in printed  # it went on after run 2
    assert "sqlite           3       3       0" in printed
    assert "postgresql       3       2       1" in printed
    assert "run 2 postgresql: failed: AssertionError: lost the race" in printed
    log = race.parent.parent / "logs" / "run-02.log"
    assert f"log: {log}" in printed
    assert "lost the race" in log.read_text(encoding="utf-8")
    assert "1-minute load average" in printed


def test_the_soak_passes_when_every_run_passes_and_stops_the_hogs_it_started(
    soak: ModuleType, race: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[Any] = []
    running = soak.Hogs.running

    def kept(self: Any) -> Any:
        started.append(self)
        return running(self)

    monkeypatch.setattr(soak.Hogs, "running", kept)
    out = io.StringIO()
    assert soak.soak(runs=1, hogs=1, test=race, out=out) == 0
    assert "every run passed on every store" in out.getvalue()
    assert re.search(
        r"1 hog\(s\), busy loops .*; share of a core each: [01]\.\d\d$", out.getvalue(), re.M
    )
    [hogs] = started
    [pid] = hogs.pids
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_store_whose_test_did_not_run_counts_as_not_passed(soak: ModuleType, race: Path) -> None:
    out = io.StringIO()
    assert soak.soak(runs=1, hogs=0, test=race, stores=("sqlite", "mysql"), out=out) == 1
    assert "run 1 mysql: missing" in out.getvalue()


def test_the_soak_runs_its_migration_checks_and_fails_when_one_fails(
    soak: ModuleType, race: Path, tmp_path: Path
) -> None:
    """A migration check that passes passes; one that fails (here, a mapping that names a state
    the old version lacks: exit 1) fails the soak, and its output is shown."""
    bad = tmp_path / "mapping.yaml"
    bad.write_text("states: {nowhere: proposed}\n", encoding="utf-8")
    refund = ("specs/refund.yaml", "--migrate-to", "tests/fixtures/refund-v2.yaml")
    one = ("--case", "T-90104:apply:commit-2")
    out = io.StringIO()
    assert soak.soak(runs=1, hogs=0, test=race, out=out, migrations=[(*refund, *one)]) == 0
    assert "migration check: passed (exit 0)" in out.getvalue()
    assert "1 case(s): 1 crashed in-process" in out.getvalue()
    out = io.StringIO()
    failing = [(*refund, "--mapping", str(bad), *one)]
    assert soak.soak(runs=1, hogs=0, test=race, out=out, migrations=failing) == 1
    assert "migration check: FAILED (exit 1)" in out.getvalue()
    assert "V204" in out.getvalue()
