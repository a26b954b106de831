"""The composition root: a session opens what is asked of it, and closes all of it on exit."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from ratchet_runner.adapters.practice import PracticeAdapter
from ratchet_runner.clock import FakeClock
from ratchet_runner.engine.protocol import EffectStep
from ratchet_runner.engine.runner import RunnerOptions
from ratchet_runner.errors import BindingError, UsageError
from ratchet_runner.review.naive import MARKS, NaiveStep, step_for
from ratchet_runner.session import Session
from ratchet_runner.spec.model import Adapter as AdapterSpec
from ratchet_runner.store.records import RunRecord
from ratchet_runner.store.store import Store
from tests.conftest import spec_and_text


@pytest.fixture
def closed(monkeypatch: pytest.MonkeyPatch) -> list[Store]:
    """The stores closed, in the order they were."""
    seen: list[Store] = []
    close = Store.close

    def spy(self: Store) -> None:
        seen.append(self)
        close(self)

    monkeypatch.setattr(Store, "close", spy)
    return seen


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


def _open_two_and_fail(session: Session, opened: list[Store]) -> None:
    with session:
        opened.append(session.store)
        opened.append(session.runner_factory()(options=RunnerOptions()).store)
        assert session.runner().store is opened[0]  # the session's own store, opened once
        raise RuntimeError("the body failed")


def test_a_session_closes_every_store_it_opened_when_the_body_raises(
    tmp_path: Path, closed: list[Store]
) -> None:
    opened: list[Store] = []
    with pytest.raises(RuntimeError, match="the body failed"):
        _open_two_and_fail(Session(_url(tmp_path)), opened)
    assert closed == opened[::-1]  # newest first


def _open_two(session: Session) -> None:
    with session:
        session.store.status_counts()
        session.open_store()


def test_a_session_closes_every_store_even_when_one_close_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []

    def close(self: Store) -> None:
        calls.append(self.url)
        if len(calls) == 1:
            raise OSError("disk gone")
        self.engine.dispose()

    monkeypatch.setattr(Store, "close", close)
    with pytest.raises(OSError, match="disk gone"):
        _open_two(Session(_url(tmp_path)))
    assert len(calls) == 2


def test_a_session_opens_nothing_it_is_not_asked_for(tmp_path: Path, closed: list[Store]) -> None:
    with Session(_url(tmp_path), home=tmp_path) as session:
        session.world.reset()
    assert closed == []
    assert not (tmp_path / "store.db").exists()
    assert (tmp_path / "practice.db").exists()


def test_the_default_store_is_a_practice_store_and_one_named_by_url_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RATCHET_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RATCHET_DB", raising=False)
    with Session() as session:
        assert session.store.is_practice()
        assert session.world.path == tmp_path / "home" / "practice.db"
    with Session(_url(tmp_path)) as session:
        assert not session.store.is_practice()
    with Session(home=tmp_path / "elsewhere") as session:  # everything under the home given
        assert session.store.url == f"sqlite:///{tmp_path / 'elsewhere' / 'ratchet.db'}"
        assert session.store.is_practice()


def test_ratchet_now_sets_the_clock_on_a_practice_store_only(tmp_path: Path) -> None:
    now = {"RATCHET_NOW": "2030-01-01T00:00:00Z"}
    with Session(_url(tmp_path), environ=now) as session, pytest.raises(UsageError):
        session.runner()
    practice = f"sqlite:///{tmp_path / 'practice-store.db'}"
    with Session(practice) as session:
        session.store.mark_practice()
    with Session(practice, environ=now) as session:
        assert session.runner().clock.now() == 1893456000.0
        assert session.store.stamp_real_time  # every event records the real time too


def test_a_given_clock_is_every_runners_clock(tmp_path: Path) -> None:
    clock = FakeClock()
    with Session(_url(tmp_path), clock=clock, environ={"RATCHET_NOW": "1"}) as session:
        assert session.runner().clock is clock
        assert session.runner_factory()(options=RunnerOptions()).clock is clock


def test_runners_on_a_practice_store_use_the_practice_world_and_refuse_a_kind_it_does_not_serve(
    tmp_path: Path,
) -> None:
    spec, _ = spec_and_text("refund")
    unserved = replace(spec, adapters={"payments": AdapterSpec("payments", "swift")})
    with Session(home=tmp_path, environ={}) as session:  # the store under the home: practice
        runner = session.runner(marks=MARKS)
        assert runner.marks == {"strategy": "naive"}  # its runs start naive
        assert isinstance(runner.adapter(spec, "payments"), PracticeAdapter)
        with pytest.raises(BindingError, match="'swift' is no practice service"):
            session.runner().adapter(unserved, "payments")


def test_every_runner_of_a_session_given_steps_drives_a_run_started_naive_naive(
    tmp_path: Path,
) -> None:
    spec, _ = spec_and_text("refund")
    effect = spec.effects["request_refund"]
    naive_run = replace(_run(), state="refunding", context={"strategy": "naive"})
    plain_run = replace(naive_run, context={})
    with Session(home=tmp_path, environ={}, steps=step_for) as session:
        pooled = session.runner_factory()(options=RunnerOptions())
        for runner in (session.runner(), pooled):
            assert runner.step_kind(naive_run, spec, effect) is NaiveStep
            assert runner.step_kind(plain_run, spec, effect) is EffectStep
    with Session(home=tmp_path, environ={}) as session:  # no steps given: the protocol's
        assert session.runner().step_kind(naive_run, spec, effect) is EffectStep


def test_a_pools_runners_refuse_ratchet_now_off_a_practice_store_before_any_is_made(
    tmp_path: Path,
) -> None:
    now = {"RATCHET_NOW": "2030-01-01T00:00:00Z"}
    with Session(_url(tmp_path), environ=now) as session, pytest.raises(UsageError):
        session.runner_factory()


def test_the_pools_runners_take_its_options_each_on_its_own_store(tmp_path: Path) -> None:
    options = RunnerOptions(inline_wait=0.5)
    with Session(_url(tmp_path)) as session:
        make = session.runner_factory()
        one, two = make(options=options), make(options=options)
        assert one.store is not two.store
        assert one.options is options


def test_an_interrupt_hook_is_made_only_for_a_point_given(tmp_path: Path) -> None:
    said: list[str] = []
    with Session(_url(tmp_path)) as session:
        assert session.kill_at(None) is None
        hook = session.kill_at("after-write:request_refund", said.append)
        assert hook is not None
        hook("after-write", "hold_flight")  # another effect: the process lives on
        hook("before-write", "request_refund")  # another point
    assert said == []


def _run() -> RunRecord:
    return RunRecord("run_1", "refund", "d", "T-1", "s", "running", 1, {}, {}, 0.0, 0.0)


def test_the_practice_setup_seeds_a_new_run_and_injects_faults_either_way(tmp_path: Path) -> None:
    notes: list[str] = []
    fixture = {"orders": [{"order": "O-1", "paid": 10.0, "currency": "EUR"}]}
    with Session(_url(tmp_path), home=tmp_path) as session:
        prepare = session.practice_setup(fixture, [("request_refund", "unavailable")], notes.append)
        prepare(_run(), True)
        assert notes == []
        prepare(_run(), False)
        assert notes == ["note: the run already existed; --fault applies to its next calls"]
    world = sqlite3.connect(tmp_path / "practice.db")
    try:
        assert world.execute("SELECT order_id FROM orders").fetchall() == [("O-1",)]
        faults = world.execute("SELECT effect, kind FROM faults").fetchall()
    finally:
        world.close()
    assert faults == [("request_refund", "unavailable")] * 2
