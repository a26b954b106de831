"""The console's logins: a session per signed-in operator, and the token every form carries.

An operator signs in once with their token (the one ``ratchet token`` printed); the service opens
a session, kept in its memory under the SHA-256 of a random cookie (``HttpOnly``,
``SameSite=Strict``, ``Secure`` over HTTPS), and forgets it after :data:`LIFETIME` seconds, at
sign-out, or when the service restarts (sign in again). A session holds a random CSRF token that
every form of the console carries in a hidden field: a POST without the session's token changes
nothing, whoever's browser sent it (a page elsewhere can make a browser send a cookie, never
read the token). The sign-in form, made before there is a session, is bound the same way to a
cookie of its own (a double-submitted token), so nobody can sign a victim in as themselves.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from .operators import Operator

#: The session's cookie, and the sign-in form's.
COOKIE = "ratchet_session"
LOGIN_COOKIE = "ratchet_signin"
#: How long a session lasts, in seconds (a working day).
LIFETIME = 10 * 3600.0
#: At most this many sessions are kept (the oldest is forgotten first).
MOST = 10_000


@dataclass
class Session:
    """A signed-in operator: who, the token their forms carry, when the session ends, and the
    messages to show on the next page (each once)."""

    operator: Operator
    csrf: str
    expires: float
    flashes: list[tuple[str, str]] = field(default_factory=list)
    #: The SHA-256 of the token the operator signed in with (empty: not known): a session ends
    #: when that token is no longer the operator's (revoked, rotated).
    token_sha256: str = ""

    def flash(self, kind: str, message: str) -> None:
        """Say ``message`` on the next page (``kind``: ok or error)."""
        self.flashes.append((kind, message))

    def take_flashes(self) -> list[tuple[str, str]]:
        taken, self.flashes = self.flashes, []
        return taken


def _key(cookie: str) -> str:
    return hashlib.sha256(cookie.encode("utf-8", "surrogateescape")).hexdigest()


class Sessions:
    """The open sessions, by the SHA-256 of their cookie (thread-safe)."""

    def __init__(self, clock: Callable[[], float] = time.time, lifetime: float = LIFETIME) -> None:
        self.clock, self.lifetime = clock, lifetime
        self._open: dict[str, Session] = {}
        self._lock = threading.Lock()

    def open(self, operator: Operator, token_sha256: str = "") -> tuple[str, Session]:
        """A new session for ``operator``, signed in with the token whose SHA-256 is
        ``token_sha256``: its cookie's value, and the session."""
        cookie = secrets.token_urlsafe(32)
        expires = self.clock() + self.lifetime
        session = Session(operator, secrets.token_urlsafe(32), expires, token_sha256=token_sha256)
        with self._lock:
            while len(self._open) >= MOST:
                del self._open[next(iter(self._open))]
            self._open[_key(cookie)] = session
        return cookie, session

    def get(self, cookie: str | None) -> Session | None:
        """The session ``cookie`` names, unless it ended."""
        if not cookie:
            return None
        key = _key(cookie)
        with self._lock:
            session = self._open.get(key)
            if session is not None and session.expires <= self.clock():
                del self._open[key]
                return None
        return session

    def keep_only(self, operators: Mapping[str, Operator]) -> None:
        """End every session whose operator ``operators`` (by the SHA-256 of each token) no
        longer knows as they signed in: removed, given other roles, or whose token was revoked
        or rotated away. They sign in again."""

        def kept(session: Session) -> bool:
            if session.token_sha256:
                return operators.get(session.token_sha256) == session.operator
            return session.operator in set(operators.values())

        with self._lock:
            for key in [k for k, v in self._open.items() if not kept(v)]:
                del self._open[key]

    def close(self, cookie: str | None) -> None:
        if cookie:
            with self._lock:
                self._open.pop(_key(cookie), None)


def same_token(given: str | None, expected: str | None) -> bool:
    """Whether a form's token is the one expected (compared in constant time)."""
    if not given or not expected:
        return False
    return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), expected.encode("utf-8"))
