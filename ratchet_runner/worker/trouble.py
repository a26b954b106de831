"""What a pool's thread met, told apart, and how long it waits before it tries again.

:func:`connection_lost` tells an error that says the database could not be reached or dropped
the connection (an outage of the store, which :class:`~ratchet_runner.worker.outages.Outages`
follows) from one it refused a value or a statement for; :func:`backoff` is the capped
exponential back-off with jitter a thread waits after failures in a row; :func:`describe` is
the one line an unexpected error is reported in.
"""

from __future__ import annotations

import random

from sqlalchemy import exc as sa_exc

#: The longest wait, in seconds, between two attempts to reach a store that does not answer.
MAX_BACKOFF = 5.0

#: The shortest wait, in seconds, after a failure (a pool that polls faster still waits this).
MIN_BACKOFF = 0.05

#: Errors that say the database could not be reached or dropped the connection (as opposed to
#: refusing a value or a statement): SQLAlchemy's wrappers, and the socket errors beneath them.
_CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    sa_exc.OperationalError,
    sa_exc.InterfaceError,
    sa_exc.DisconnectionError,
    sa_exc.TimeoutError,
    ConnectionError,
    TimeoutError,
)

#: The same, as the database drivers (psycopg, sqlite3) name them, when one escapes unwrapped.
_DRIVER_CONNECTION_ERRORS = frozenset({"OperationalError", "InterfaceError"})


def connection_lost(exc: BaseException) -> bool:
    """Whether ``exc``, or an exception it was raised from or while handling, says that the
    database could not be reached or dropped the connection: the server restarting or failing
    over, a backend terminated, a network cut; not a value or a statement it refused."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, _CONNECTION_ERRORS):
            return True
        if isinstance(current, sa_exc.DBAPIError) and current.connection_invalidated:
            return True
        if type(current).__name__ in _DRIVER_CONNECTION_ERRORS and type(
            current
        ).__module__.startswith(("psycopg", "sqlite3")):
            return True
        pending += [current.__cause__, current.__context__]
    return False


def backoff(poll: float, failures: int) -> float:
    """Seconds to wait after ``failures`` failures in a row: doubling from the poll interval
    ``poll`` (at least :data:`MIN_BACKOFF`) up to :data:`MAX_BACKOFF`, with jitter (half to
    all)."""
    base = max(MIN_BACKOFF, min(poll, MAX_BACKOFF))
    ceiling = min(MAX_BACKOFF, base * 2.0 ** min(max(failures, 1) - 1, 16))
    return random.uniform(ceiling / 2, ceiling)


def seconds_text(seconds: float) -> str:
    """``seconds`` as a log line shows them: two decimals under a second, one above."""
    return f"{seconds:.2f}" if seconds < 1 else f"{seconds:.1f}"


def short(text: str, limit: int = 300) -> str:
    """``text`` on one line, cut to ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def describe(exc: BaseException) -> str:
    """An unexpected error in one line: its class, its message, and ``file:line`` where it was
    raised (its traceback's innermost frame)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    what = f"unexpected {type(exc).__name__}: {short(str(exc))}"
    if tb is None:
        return what
    name = tb.tb_frame.f_code.co_filename.replace("\\", "/").rsplit("/", 1)[-1]
    return f"{what} (at {name}:{tb.tb_lineno})"
