"""A run's context is typed (``RunContext``) and stored as the same JSON it always was: a context
written before it was typed loads as it was and, written back, reads back as it was, on SQLite and
on PostgreSQL; what is stored is its text without spaces, its lists of operations naming those
the run lists by their place (revision 0007, ``context.stored``).

``tests/fixtures/contexts-before-typing.jsonl`` holds contexts exactly as the runner stored them
before the type existed (a saga compensated after a lost reply, a refund decided and escalated,
a paused run), one a line: their keys in the order they were written, ``null`` where written."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import text

from ratchet_runner.store.context import RunContext, stored, without
from ratchet_runner.store.dialects import json_text
from ratchet_runner.store.store import Store
from tests.conftest import ROOT, MakeRunner, spec_and_text

BEFORE = ROOT / "tests" / "fixtures" / "contexts-before-typing.jsonl"
STORED = BEFORE.read_text(encoding="utf-8").splitlines()


def _stored(store: Store, run_id: str) -> str:
    """The run's context as the database holds it: its text."""
    with store.engine.begin() as conn:
        query = text("SELECT CAST(context AS TEXT) FROM runs WHERE id = :id")
        return str(conn.execute(query, {"id": run_id}).scalar_one())


def _put(store: Store, run_id: str, raw: str) -> None:
    """Write ``raw`` as the run's context, as an earlier Ratchet wrote it."""
    value = "CAST(:raw AS json)" if store.engine.dialect.name == "postgresql" else ":raw"
    with store.engine.begin() as conn:
        conn.execute(
            text(f"UPDATE runs SET context = {value} WHERE id = :id"), {"raw": raw, "id": run_id}
        )


@pytest.mark.parametrize("raw", STORED, ids=["compensated", "escalated", "paused"])
def test_a_context_written_before_it_was_typed_loads_and_is_written_back_the_same(
    make_runner: MakeRunner, store: Store, raw: str
) -> None:
    runner = make_runner()
    spec, spec_text = spec_and_text("refund")
    run, _ = runner.start(spec, spec_text, spec.examples["T-90104"].input)
    _put(store, run.id, raw)
    loaded = store.get_run(run.id)
    assert json.dumps(loaded.context) == raw  # its keys, their order, its nulls
    change = runner.change(loaded)
    change.context = loaded.context
    store.commit(change)
    assert json.dumps(store.get_run(run.id).context) == raw
    assert _stored(store, run.id) == json_text(stored(loaded.context))
    if '"completed": ["' in raw:  # the saga's: its completed and undone effects by place
        assert '"completed":[0,' in _stored(store, run.id)


def test_every_key_of_a_context_written_before_it_was_typed_is_a_key_of_the_type() -> None:
    keys = {key for raw in STORED for key in json.loads(raw)}
    assert keys <= RunContext.__optional_keys__, keys - RunContext.__optional_keys__
    assert not RunContext.__required_keys__  # a run has only what its moves have written


def test_a_context_without_some_keys_keeps_the_others_in_their_order() -> None:
    context: RunContext = {"ratchet_version": "1", "wake_at": None, "timers_of": "a", "undone": []}
    assert list(without(context, "wake_at", "pause")) == ["ratchet_version", "timers_of", "undone"]
    assert "wake_at" in context  # the context left out of is not changed
