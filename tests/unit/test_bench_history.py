"""``bench/bench_history.py``: a run's share of the store is the file's growth over an empty
store, and the table-by-table figures add up to it."""

from __future__ import annotations

import pytest

from tests.conftest import ROOT


def test_a_runs_share_is_the_sum_of_its_tables_shares(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))  # the benchmarks are no part of the package
    from bench.bench_history import measure

    kept = measure(25)
    per_run, per_table = kept.per_run, kept.per_table
    assert kept.events > 25 * 10  # a 3-step run has 16 events
    assert kept.oldest > kept.before > per_run  # 0005's row per event took more, 0006's IDs too
    assert kept.empty > 0
    # a 3-step run keeps its row, 3 operations and a history: more than a page's worth of
    # rows between 25 runs, far less than a page per run
    assert 1000 < per_run < 4096 * 4
    if per_table is None:  # this Python's sqlite3 was built without dbstat
        pytest.skip("the sqlite3 module has no dbstat table: no table-by-table figures")
    assert {"runs", "operations"} <= set(per_table)
    # a vacuumed file is its pages, every one in some table or index
    now = {name: size for name, size in per_table.items() if "(revision" not in name}
    assert sum(now.values()) == pytest.approx(per_run)
    assert per_table["events (revision 0005)"] > per_table["history"]
    assert per_table["history (revision 0006)"] > per_table["history"]
