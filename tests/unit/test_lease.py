"""The Lease value: how long its holder counts on it, the securing rule before a call, and the
renewals a heartbeat records; and the options a pool passes to the runners it makes."""

from __future__ import annotations

import pytest

from ratchet_runner.engine.lease import (
    LEASE_MARGIN,
    LEASE_SAFETY,
    Lease,
    Leases,
    lease_for,
    lease_needed,
)
from ratchet_runner.engine.runner import Runner, RunnerOptions
from ratchet_runner.errors import LeaseLost, LeaseTooShort
from ratchet_runner.spec.validate import load_spec_text
from ratchet_runner.worker.pool import Pool
from tests.conftest import MakeRunner, spec_and_text


class Renewals:
    """A store's ``renew`` that answers ``answer`` and remembers what it was asked."""

    def __init__(self, answer: bool = True) -> None:
        self.answer = answer
        self.asked: list[tuple[str, str, float]] = []

    def __call__(self, run_id: str, token: str, seconds: float) -> bool:
        self.asked.append((run_id, token, seconds))
        return self.answer


def test_a_lease_is_counted_on_for_its_safe_share_from_when_its_claim_was_sent() -> None:
    lease = Lease.asked("run_1", "t", 30.0, asked_at=100.0)
    assert lease.counted_until == pytest.approx(100.0 + 30.0 * LEASE_SAFETY)
    assert lease.renewed(110.0).counted_until == pytest.approx(110.0 + 30.0 * LEASE_SAFETY)
    assert lease.taken_by_commits is None
    assert Lease.asked("run_1", "t", 30.0, 0.0, take_as="cmd").taken_by_commits == ("cmd", 30.0)


def test_a_lease_with_enough_left_for_the_call_is_used_as_it_is() -> None:
    lease = Lease.asked("run_1", "t", 30.0, asked_at=0.0)  # counted on until 27 s
    renew = Renewals()
    assert lease.secure(10.0, lambda: 27.0 - 10.0 - LEASE_MARGIN, renew) is lease
    assert renew.asked == []


def test_a_lease_with_too_little_left_is_renewed_before_the_call() -> None:
    lease = Lease.asked("run_1", "t", 30.0, asked_at=0.0)
    renew = Renewals()
    secured = lease.secure(10.0, lambda: 20.0, renew)
    assert renew.asked == [("run_1", "t", 30.0)]
    assert secured.counted_until == pytest.approx(20.0 + 30.0 * LEASE_SAFETY)


def test_a_lease_too_short_for_the_call_is_refused_and_not_renewed() -> None:
    lease = Lease.asked("run_1", "t", 10.0, asked_at=0.0)
    renew = Renewals()
    with pytest.raises(LeaseTooShort, match="this process leases runs for 10 s"):
        lease.secure(9.0, lambda: 0.0, renew)
    assert renew.asked == []


@pytest.mark.parametrize("timeout", [None, 0.0, 0.1, 1.0, 8.0, 9.0, 10.0, 17.0, 26.0, 3600.0])
def test_the_whole_lease_a_call_needs_is_the_smallest_one_secure_accepts(
    timeout: float | None,
) -> None:
    whole = lease_for(timeout)
    assert Lease.asked("run_1", "t", whole, 0.0).secure(timeout, lambda: 0.0, Renewals())
    with pytest.raises(LeaseTooShort):
        Lease.asked("run_1", "t", whole - 1, 0.0).secure(timeout, lambda: 0.0, Renewals())


def test_the_lease_a_spec_needs_comes_from_its_longest_effect_timeout_and_says_so() -> None:
    spec, _ = spec_and_text("refund")
    need = lease_needed(spec)
    assert need is not None
    assert (need.spec, need.effect, need.timeout, need.seconds) == (
        "refund v1",
        "request_refund",
        10.0,
        13,  # (10 + 1) / 0.9 = 12.2
    )
    assert need.covered_by(12.3)
    assert not need.covered_by(12.0)
    assert need.says(12) == (
        "a call of refund's request_refund may take 10 s (its timeout): it needs --lease 13 or "
        "more (a lease is counted on for 90 % of its length, less 1 s of margin); this process "
        "leases runs for 12 s"
    )


def test_a_compensation_counts_for_the_lease_a_spec_needs_as_a_forward_effect_does() -> None:
    _, text = spec_and_text("booking")
    marker = "    operation: release\n    args: {hold_id: receipts.hold_hotel.hold_id}\n"
    head, tail = text.split(marker)
    tail = tail.replace("    timeout: 15s", "    timeout: 40s", 1)
    need = lease_needed(load_spec_text(head + marker + tail))
    assert need is not None
    assert (need.effect, need.seconds) == ("release_hotel", 46)  # (40 + 1) / 0.9 = 45.6


def test_an_effect_with_no_timeout_needs_the_lease_secure_asks_of_it_the_margin() -> None:
    _, text = spec_and_text("refund")
    need = lease_needed(load_spec_text(text.replace("    timeout: 10s\n", "")))
    assert need is not None
    assert (need.effect, need.timeout, need.seconds) == ("request_refund", None, 2)
    assert "a call of refund's request_refund has no timeout (counted as 0 s)" in need.says(1)


def test_a_lease_that_ran_out_on_the_holders_clock_or_could_not_be_renewed_is_lost() -> None:
    lease = Lease.asked("run_1", "t", 30.0, asked_at=0.0)
    with pytest.raises(LeaseLost, match="ran out on this worker's own clock"):
        lease.secure(1.0, lambda: 27.0, Renewals())
    with pytest.raises(LeaseLost, match="was lost before the call"):
        lease.secure(1.0, lambda: 26.5, Renewals(answer=False))


def test_a_lease_not_counted_is_not_checked() -> None:
    lease = Lease("run_1", "t", 1.0)
    assert lease.secure(60.0, lambda: 1e9, Renewals(answer=False)) is lease


def test_a_renewal_is_recorded_only_while_the_same_lease_is_held() -> None:
    leases = Leases()
    held = Lease.asked("run_1", "t", 30.0, asked_at=0.0)
    leases.hold(held)
    leases.renewed("run_1", "other", 10.0)  # another token: not this holder's lease
    assert leases.get("run_1") is held
    leases.renewed("run_1", "t", 10.0)
    assert leases.get("run_1") == held.renewed(10.0)
    leases.drop("run_1")
    leases.renewed("run_1", "t", 20.0)  # a heartbeat late after the holder let go
    assert leases.get("run_1") is None
    assert not leases


def test_securing_through_the_held_leases_records_the_renewal() -> None:
    leases = Leases()
    leases.hold(Lease.asked("run_1", "t", 30.0, asked_at=0.0))
    leases.secure("run_1", 10.0, lambda: 20.0, Renewals())
    renewed = leases.get("run_1")
    assert renewed is not None
    assert renewed.counted_until == pytest.approx(20.0 + 30.0 * LEASE_SAFETY)
    leases.secure("run_2", 10.0, lambda: 20.0, Renewals(answer=False))  # none held: no check


def test_a_pool_passes_its_options_to_the_runners_it_makes(make_runner: MakeRunner) -> None:
    made: list[RunnerOptions] = []

    def make(options: RunnerOptions) -> Runner:
        made.append(options)
        return make_runner(options=options)

    pool = Pool(make, concurrency=1, poll=0.25)
    pool.run(until_idle=True)

    assert made  # its worker thread made one
    assert all(options is pool.options for options in made)
    assert pool.options.spec_check_interval == 0.25
    assert pool.options.stopping() is True  # the pool has stopped: its runners stop too
