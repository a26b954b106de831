"""The pool's outage tracking on its own, without threads or a store: one outage however many
threads meet it, ended by the first answer that left after it began."""

from __future__ import annotations

from ratchet_runner.worker.outages import Outages
from ratchet_runner.worker.pool import PoolReport


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_many_threads_meeting_one_outage_make_one_outage_said_once_and_timed() -> None:
    said: list[str] = []
    clock, report = Clock(), PoolReport()
    outages = Outages(report, said.append, clock)
    first = outages.met(0, began=99.0, reason="connection refused", retry_in="0.10")
    behind = outages.met(0, began=99.5, reason="connection refused", retry_in="0.20")
    assert not first.known
    assert behind.known  # its connections may be dead: it retries soon, with new ones
    second = outages.met(1, began=100.0, reason="connection refused", retry_in="0.20")
    assert second.wake is first.wake  # caught up, and failing still: it waits for the end
    assert (report.outages, report.unreachable, outages.epoch) == (1, True, 1)
    clock.now += 2.5
    outages.answered(0)  # an answer from before the outage began says nothing
    assert report.unreachable is True
    outages.answered(1)  # a thread that caught up with the outage was answered
    assert first.wake is not None
    assert first.wake.is_set()
    assert (report.outages, report.unreachable, report.unreachable_seconds) == (1, False, 2.5)
    assert said == [
        "store unreachable (connection refused); retrying in 0.10 s",
        "store reachable again after 2.5 s",
    ]


def test_a_failure_of_work_begun_before_the_last_outage_ended_is_no_new_outage() -> None:
    clock, report = Clock(), PoolReport()
    outages = Outages(report, lambda line: None, clock)
    outages.met(0, began=99.0, reason="x", retry_in="0.1")
    clock.now = 103.0
    outages.answered(1)
    late = outages.met(1, began=101.0, reason="x", retry_in="0.1")  # its work began mid-outage
    behind = outages.met(0, began=104.0, reason="x", retry_in="0.1")  # not caught up with it
    assert late.known
    assert behind.known
    assert report.outages == 1
    fresh = outages.met(1, began=104.0, reason="x", retry_in="0.1")
    assert not fresh.known
    assert report.outages == 2


def test_a_pool_stopped_during_an_outage_counts_it_so_far_and_stays_unreachable() -> None:
    clock, report = Clock(), PoolReport()
    outages = Outages(report, lambda line: None, clock)
    outages.met(0, began=99.0, reason="x", retry_in="0.1")
    clock.now += 4.0
    outages.stop()
    assert (report.unreachable_seconds, report.unreachable) == (4.0, True)
    assert not outages.down
