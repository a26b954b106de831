"""A lost reply from the store never spends an attempt: an attempt counts only once its request may
have been sent.

The runner commits each attempt (the write-ahead record, the attempt counted) before it sends
the request. Through a proxy that dropped some write replies, the worker rightly sent nothing
when the reply to that commit was lost, but the database had committed it: the attempt counted,
no request was made, and after three such losses a booking went to a person ("the agency's
answer is unknown") with no request ever sent. Now the runner asks the store again whether the
commit landed; it did, and the request is sent under it. Reproduced deterministically with a
store whose reply to the attempt's commit is lost, after the commit and before it, on SQLite and
PostgreSQL.
"""

from __future__ import annotations

from typing import Literal

from ratchet_runner.adapters.practice import PracticeWorld
from ratchet_runner.clock import FakeClock
from ratchet_runner.engine.runner import Runner
from ratchet_runner.errors import StoreError
from ratchet_runner.store.records import Change, RunRecord
from ratchet_runner.store.store import Store
from tests.conftest import spec_and_text


class LossyStore(Store):
    """A store whose reply to the first commit that records an attempt is lost: the database
    commits it and the caller hears a dropped connection (``after``), or the connection drops
    before the database has it (``before``)."""

    def __init__(self, url: str, lose: Literal["after", "before"]) -> None:
        super().__init__(url)
        self.lose = lose
        self.lost = 0

    def commit(self, change: Change) -> RunRecord:
        attempt = any(kind == "call" for kind, _ in change.events)
        if attempt and not self.lost:
            self.lost += 1
            if self.lose == "after":
                super().commit(change)
            raise StoreError("the store failed: server closed the connection unexpectedly")
        return super().commit(change)


def _returns_label(store: LossyStore, world: PracticeWorld) -> RunRecord:
    spec, text = spec_and_text("returns")
    example = spec.examples["T-90604"]
    world.seed({k: v for k, v in example.world.items() if k != "faults"})  # no injected fault
    runner = Runner(store, lambda adapter: world.adapter(adapter.kind), FakeClock())
    run, _ = runner.start(spec, text, example.input)
    return runner.advance(run)


def test_a_lost_reply_to_a_committed_attempt_sends_the_request_once_and_spends_one_attempt(
    store_url: str, world: PracticeWorld
) -> None:
    store = LossyStore(store_url, "after")
    try:
        run = _returns_label(store, world)
        (op,) = [o for o in store.operations(run.id) if o.role == "forward"]
    finally:
        store.close()
    assert store.lost == 1
    assert run.status == "done"
    sent = [c for c in world.calls() if not c["operation"].startswith("lookup")]
    assert len(sent) == 1  # the request was sent under the attempt that landed
    assert op.attempts == 1  # and only that one was counted


def test_a_reply_lost_before_the_store_had_the_attempt_counts_nothing(
    store_url: str, world: PracticeWorld
) -> None:
    store = LossyStore(store_url, "before")
    try:
        try:
            _returns_label(store, world)
        except StoreError:
            pass  # the store failed before it had the attempt: the step ends with nothing done
        else:
            raise AssertionError("the lost commit was not reported")
        (run,) = store.list_runs()
        ops = [o for o in store.operations(run.id) if o.role == "forward"]
        assert world.calls() == []  # nothing sent
        assert all(o.attempts == 0 for o in ops)  # nothing counted
    finally:
        store.close()
