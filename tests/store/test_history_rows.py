"""A run's history as one compact row per commit (``ratchet_runner/store/compact.py``, revision
0006): every event read back exactly as written, keys in their order; rows that are not in the
form refused with a clear error; and revision 0006 converting a store's events both ways,
losing nothing."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from ratchet_runner.adapters.practice import PracticeWorld
from ratchet_runner.clock import FakeClock
from ratchet_runner.engine.runner import Runner
from ratchet_runner.errors import StoreError
from ratchet_runner.review.naive import step_for
from ratchet_runner.store import schema
from ratchet_runner.store.compact import SHAPES, encode, entries, expand
from ratchet_runner.store.records import Change, NewRun
from ratchet_runner.store.store import Store
from ratchet_runner.words import RunStatus
from tests.integration.replay_runs import drive_all

OP_A, OP_B = "a" * 64, "b" * 64


def exact(events: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, str]]:
    """Events as (kind, JSON text of the data): equal only with the same keys in the same order."""
    return [(kind, json.dumps(data)) for kind, data in events]


def round_trip(events: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    return [(kind, data) for kind, data, _at in expand(json.loads(encode(events)), 5.0)]


def test_a_commits_events_come_back_exactly_and_name_an_operation_once() -> None:
    events: list[tuple[str, dict[str, Any]]] = [
        (
            "done",
            {
                "operation_id": OP_A,
                "effect": "e",
                "role": "forward",
                "via": "reply",
                "receipt": {"id": "r-1"},
            },
        ),
        ("moved", {"from": "one", "event": "ok", "to": "two"}),
        (
            "pending",
            {
                "operation_id": OP_B,
                "effect": "f",
                "role": "forward",
                "action": "f 1",
                "strategy": "ratchet",
            },
        ),
        ("no_compensation", {"operation_id": OP_B, "effect": "f", "undo": "none", "reason": "x"}),
        ("call", {"operation_id": OP_B, "attempt": 1}),
        ("operator", {"by": "ana", "note": "checked", "operation_id": OP_A}),  # no shape
        ("call", {"attempt": 1, "operation_id": OP_B}),  # the keys in another order: no shape
    ]
    text_ = encode(events)
    assert round_trip(events) == events
    assert exact(round_trip(events)) == exact(events)
    assert text_.count(OP_B) == 2  # the pending record names it; its undo and attempt refer
    assert text_.count(OP_A) == 2  # in the done event (a shape) and the operator's (none)
    assert '"operation_id"' in text_  # only where an event has no shape
    assert '"effect"' not in text_
    assert '"attempt"' not in text_.split('"operator"')[0]


def test_values_that_would_read_as_a_reference_or_a_form_stay_as_they_were() -> None:
    """An operation ID that is a number (never the engine's, but data is data), a value that is
    itself a list or an object, a key the shapes do not know: each comes back as written."""
    events: list[tuple[str, dict[str, Any]]] = [
        ("call", {"operation_id": 0, "attempt": 1}),
        ("call", {"operation_id": [OP_A], "attempt": {"n": 1}}),
        ("moved", {"from": ["x"], "event": {"deep": [1, 2.5, None]}, "to": "z"}),
        ("created", {"state": "s", "business_key": "K", "ratchet_version": "1", "extra": 1}),
        ("noted", {}),
    ]
    assert exact(round_trip(events)) == exact(events)


def test_random_histories_come_back_exactly() -> None:
    """Seeded: events built from the shapes' keys, shuffled, cut short or lengthened, with
    repeated operation IDs, read back with their keys in their order."""
    rng = random.Random(28)
    keys = sorted({key for shape in SHAPES for key in shape} | {"extra"})
    ids = [f"{n:064x}" for n in range(4)]
    for _ in range(300):
        events: list[tuple[str, dict[str, Any]]] = []
        for _ in range(rng.randint(0, 8)):
            shape = list(rng.choice(SHAPES))
            if rng.random() < 0.3:
                rng.shuffle(shape)
            if rng.random() < 0.2:
                shape = shape[: rng.randint(0, len(shape))] + rng.sample(keys, 1)
            data = {
                key: rng.choice(ids) if key == "operation_id" else rng.choice([1, "v", None, [2]])
                for key in shape
            }
            events.append((rng.choice(["call", "done", "x"]), data))
        assert exact(round_trip(events)) == exact(events)


@pytest.mark.parametrize(
    ("row", "says"),
    [
        ({"kind": "x"}, "its events are not a list"),
        (["call"], "an event is not [kind, ...]"),
        ([[7, {}]], "an event is not [kind, ...]"),
        ([["call", 99, 1]], "names no known shape: 99"),
        ([["call", True, OP_A, 1]], "names no known shape: True"),
        ([["call", 4, OP_A]], "has 1 values for 2 keys"),
        ([["call", 4, 0, 1]], "names operation 0"),
        ([["x", {}, "late"]], "more than its data and time"),
        ([["x", {}, True]], "more than its data and time"),  # a bool is no time
    ],
)
def test_a_row_not_in_the_form_is_refused_with_what_is_wrong(row: Any, says: str) -> None:
    with pytest.raises(StoreError, match="the history of run R version 3 cannot be read") as err:
        expand(row, 1.0, "of run R version 3")
    assert says in str(err.value)


def test_an_event_at_its_own_time_keeps_it() -> None:
    """A row converted from an older store where one version's events had two times."""
    assert expand([["a", {}], ["b", {"n": 1}, 9.5]], 1.0) == [("a", {}, 1.0), ("b", {"n": 1}, 9.5)]


def test_a_3_step_runs_history_is_five_rows(store: Store, tmp_path: Path) -> None:
    """One row per commit: a run's creation, and each move."""
    world, clock = PracticeWorld(tmp_path / "practice.db"), FakeClock()
    runner = Runner(store, lambda a: world.adapter(a.kind), clock, steps=step_for)
    made = drive_all(runner, world, clock)
    run_id = next(iter(made.values()))
    versions = [e.version for e in store.history(run_id)]
    with store.engine.connect() as conn:
        rows = conn.execute(
            text("SELECT version FROM history WHERE run_id = :r ORDER BY version"), {"r": run_id}
        ).all()
    assert [v for (v,) in rows] == sorted(set(versions))
    assert len(versions) > len(rows)  # several events to a row


def _histories(store: Store, run_ids: list[str]) -> dict[str, list[tuple[Any, ...]]]:
    return {
        run_id: [(e.version, e.kind, json.dumps(e.data), e.at) for e in store.history(run_id)]
        for run_id in run_ids
    }


def _old_events(store: Store) -> dict[str, list[tuple[Any, ...]]]:
    """Every run's rows of the ``events`` table (revision 0005 and before), in order."""
    found: dict[str, list[tuple[Any, ...]]] = {}
    with store.engine.connect() as conn:
        rows = conn.execute(
            text('SELECT run_id, version, kind, data, "at" FROM events ORDER BY id')
        ).all()
    for run_id, version, kind, data, at in rows:
        parsed = json.loads(data) if isinstance(data, str) else data
        found.setdefault(run_id, []).append((version, kind, json.dumps(parsed), at))
    return found


def test_revision_0006_converts_every_event_both_ways_and_loses_nothing(
    store: Store, tmp_path: Path
) -> None:
    """The replay scenarios' runs (approvals, timers, signals, operators, compensations):
    taken down to 0005, their ``events`` rows are exactly the history read at head, key order
    included; taken up again, the history reads as before."""
    world, clock = PracticeWorld(tmp_path / "practice.db"), FakeClock()
    runner = Runner(store, lambda a: world.adapter(a.kind), clock, steps=step_for)
    run_ids = list(drive_all(runner, world, clock).values())
    before = _histories(store, run_ids)
    assert sum(len(events) for events in before.values()) > 100

    assert schema.migrate_to(store, "0005")[:2] == ["0007→0006", "0006→0005"]
    assert _old_events(store) == before
    assert schema.migrate_to(store, "head")[:2] == ["0005→0006", "0006→0007"]
    assert _histories(store, run_ids) == before
    with store.engine.connect() as conn:
        tables = conn.execute(
            text(
                "SELECT count(*) FROM information_schema.tables WHERE table_name = 'events' "
                "AND table_schema = current_schema()"
            )
            if store.dialect.name == "postgresql"
            else text("SELECT count(*) FROM sqlite_master WHERE name = 'events'")
        ).scalar_one()
    assert tables == 0


def test_the_conversion_keeps_two_times_of_one_version(store: Store) -> None:
    """An older store's version whose events were written at two times (nothing forced one
    then): both times come back."""
    schema.migrate_to(store, "0005")
    with store.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO spec_versions (digest, name, spec_version, policy_version, text, "
                "created_at) VALUES (:d, 'w', 1, '1', 'name: w', 1.0)"
            ),
            {"d": "d" * 64},
        )
        conn.execute(
            text(
                "INSERT INTO runs (id, workflow, spec_digest, business_key, state, status, "
                "version, input, context, created_at, updated_at) VALUES ('run_1', 'w', :d, "
                "'K', 's', 'running', 1, '{}', '{}', 1.0, 1.0)"
            ),
            {"d": "d" * 64},
        )
        for kind, at in (("created", 1.0), ("noted", 2.5)):
            conn.execute(
                text(
                    'INSERT INTO events (run_id, version, kind, data, "at") '
                    "VALUES ('run_1', 1, :k, :d, :a)"
                ),
                {"k": kind, "d": json.dumps({"state": "s"}), "a": at},
            )
    schema.migrate_to(store, "head")
    assert [(e.kind, e.at) for e in store.history("run_1")] == [("created", 1.0), ("noted", 2.5)]


def test_entries_are_what_encode_writes() -> None:
    events: list[tuple[str, dict[str, Any]]] = [("call", {"operation_id": OP_A, "attempt": 2})]
    assert json.loads(encode(events)) == entries(events) == [["call", 4, OP_A, 2]]


def test_most_events_of_every_kind_of_run_are_written_without_their_keys(
    store: Store, tmp_path: Path
) -> None:
    """The replay scenarios (approvals, waits, retries, undos, operators' actions): nine events
    in ten take a shape."""
    world, clock = PracticeWorld(tmp_path / "practice.db"), FakeClock()
    runner = Runner(store, lambda a: world.adapter(a.kind), clock, steps=step_for)
    drive_all(runner, world, clock)
    with store.engine.connect() as conn:
        rows = [events for (events,) in conn.execute(text("SELECT events FROM history"))]
    forms = [
        type(entry[1]).__name__
        for events in rows
        for entry in (json.loads(events) if isinstance(events, str) else events)
    ]
    assert len(forms) > 150
    assert forms.count("dict") < len(forms) / 10, forms.count("dict")


def test_a_leases_time_is_its_last_claim_by_the_claiming_workers_clock(store: Store) -> None:
    """``Store.leases()`` reads ``taken_at`` from the leased runs' history rows (a text pattern
    first, then the rows read): a claim's ``leased`` row, a rescue's ``rescued`` row (on
    PostgreSQL built in SQL by the claim's one statement), and not a later event whose data
    merely holds such a list."""
    store.save_spec("d" * 64, "w", 1, "1", "name: w", 1.0)
    store.create_run(NewRun("run_1", "w", "d" * 64, "K-1", "s", RunStatus.RUNNING, {}, 1.0))
    (first,) = store.claim("w1", 0.05, 1_000.0)
    assert [(lease["id"], lease["taken_at"]) for lease in store.leases()] == [("run_1", 1_000.0)]

    time.sleep(0.2)  # the lease runs out by the database's clock
    (rescued,) = store.claim("w2", 60.0, 2_000.0)
    assert [e.kind for e in store.history("run_1")][-2:] == ["leased", "rescued"]
    decoy = Change("run_1", rescued.version, 3_000.0, lease_token=rescued.lease_token)
    store.commit(decoy.event("noted", tags=["leased", "rescued"]))

    assert first.lease_token != rescued.lease_token
    assert [(lease["id"], lease["taken_at"]) for lease in store.leases()] == [("run_1", 2_000.0)]
