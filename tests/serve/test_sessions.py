"""The console's sessions: a cookie names one operator's session until it ends, and only the
session's own token passes a form."""

from __future__ import annotations

from ratchet_runner.serve.operators import Operator
from ratchet_runner.serve.sessions import Sessions, same_token

ANA = Operator("ana", ("agent",))


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def test_a_session_ends_after_its_lifetime_and_at_sign_out() -> None:
    clock = Clock()
    sessions = Sessions(clock, lifetime=60.0)
    cookie, session = sessions.open(ANA)
    assert sessions.get(cookie) is session
    clock.now += 59.9
    assert sessions.get(cookie) is session
    clock.now += 0.2
    assert sessions.get(cookie) is None  # ended: sign in again
    cookie, _ = sessions.open(ANA)
    sessions.close(cookie)
    assert sessions.get(cookie) is None


def test_each_sign_in_gets_its_own_cookie_and_token() -> None:
    sessions = Sessions()
    first, one = sessions.open(ANA)
    second, other = sessions.open(ANA)
    assert first != second
    assert one.csrf != other.csrf
    assert sessions.get(first + "x") is None
    assert sessions.get("") is None
    assert sessions.get(None) is None


def test_only_the_sessions_own_token_passes_a_form() -> None:
    _, session = Sessions().open(ANA)
    assert same_token(session.csrf, session.csrf)
    assert not same_token(session.csrf[:-1], session.csrf)
    assert not same_token("", session.csrf)
    assert not same_token(None, session.csrf)
    assert not same_token("\udcff", session.csrf)  # a lone surrogate from a form: no match


def test_messages_are_shown_once() -> None:
    _, session = Sessions().open(ANA)
    session.flash("ok", "approved")
    assert session.take_flashes() == [("ok", "approved")]
    assert session.take_flashes() == []


def test_a_session_ends_when_the_token_it_signed_in_with_is_no_longer_its_operators() -> None:
    sessions = Sessions()
    cookie, _ = sessions.open(ANA, "a" * 64)
    other, _ = sessions.open(ANA, "b" * 64)
    sessions.keep_only({"a" * 64: ANA})  # b's token rotated away (or revoked)
    assert sessions.get(cookie) is not None
    assert sessions.get(other) is None
    sessions.keep_only({"a" * 64: Operator("ana", ("team_lead",))})  # other roles: sign in again
    assert sessions.get(cookie) is None
