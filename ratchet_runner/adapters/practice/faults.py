"""The practice world's faults: which ones there are, how long the slow ones take, and which
fault, if any, the next call or lookup of an effect meets.

A fault names the effect and the kind, and either the call numbers it hits (``calls: [1, 2]``,
counted per effect, lookups excluded) or how many of the next calls (``times: 3``; default 1).
A call meets the oldest fault given for the next calls before any given by call number, so that
``ratchet run --fault`` always reaches the effect's next call.
The faults live in the practice database (its ``faults`` table), so that every process that
serves the world (a command, ``ratchet practice serve``) meets the same ones.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ...errors import WorldError

if TYPE_CHECKING:  # the command line reads FAULT_KINDS for its help: no database driver for that
    import sqlite3

FAULT_KINDS = (
    "timeout_before_write",
    "timeout_after_write",
    "unavailable",
    "refuse",
    "malformed",
    "lookup_fails",
    "slow_reply",
    "slow_commit",
    "commits_late",
)

#: How long a ``slow_reply`` keeps the caller waiting after the change is made.
SLOW_REPLY_SECONDS = 3.0

#: How long a ``slow_commit`` provider works on a request before it commits the change (and
#: replies): a lookup meanwhile finds nothing. Well within every shipped effect's timeout.
SLOW_COMMIT_SECONDS = 2.0

#: How long after a ``commits_late`` request (which gets no answer) the provider commits it.
COMMITS_LATE_SECONDS = 2.0

#: What the practice providers that do not deduplicate by key (the warehouse, travel, a generic
#: operation declared ``dedupe: false``) declare as their ``commits_within``: the longest after a
#: request was sent that they may still commit it. Above every late commit the faults make
#: (:data:`COMMITS_LATE_SECONDS`, :data:`SLOW_COMMIT_SECONDS`), and kept: a request such a
#: provider could not commit by then (its database busy for that long) it abandons.
COMMITS_WITHIN_SECONDS = 3.0


def parse_fault(effects: Iterable[str], text: str) -> tuple[str, str]:
    """``EFFECT:KIND`` (as ``ratchet run --fault`` takes it) as ``(effect, kind)``; a
    :class:`WorldError` unless the effect is one of ``effects`` and the kind a known fault."""
    effect, _, kind = text.partition(":")
    known = list(effects)
    if effect not in known:
        raise WorldError(f"no effect {effect!r} (effects: {', '.join(known)})")
    if kind not in FAULT_KINDS:
        raise WorldError(f"no fault {kind!r} (faults: {', '.join(FAULT_KINDS)})")
    return effect, kind


def check_fault_calls(kind: Any, calls: Any, times: Any) -> None:
    """Raise :class:`WorldError` for an unknown fault ``kind``, or ``calls`` that are not call
    numbers from 1, or ``times`` that is not a whole number from 1."""
    if kind not in FAULT_KINDS:
        raise WorldError(f"unknown fault {kind!r} (known: {', '.join(FAULT_KINDS)})")
    if calls is not None and (
        not isinstance(calls, list) or not calls or not all(_whole(c) and c >= 1 for c in calls)
    ):
        raise WorldError(f"a fault's calls are call numbers from 1 (e.g. [1, 2]), not {calls!r}")
    if times is not None and (not _whole(times) or times < 1):
        raise WorldError(f"a fault's times is a whole number from 1, not {times!r}")


def insert_fault(
    db: sqlite3.Connection, effect: str, kind: str, calls: list[int] | None, times: int | None
) -> None:
    """Record ``kind`` for ``effect``'s calls: on the given call numbers (1-based), or on the
    next ``times`` calls (default: the next one); a :class:`WorldError` for an unknown kind, or
    calls or times that are no such numbers."""
    check_fault_calls(kind, calls, times)
    if calls is None and times is None:
        times = 1
    db.execute(
        "INSERT INTO faults (effect, kind, calls, times) VALUES (?, ?, ?, ?)",
        (effect, kind, json.dumps(calls) if calls is not None else None, times),
    )


def next_fault(db: sqlite3.Connection, effect: str, lookup: bool) -> str | None:
    """The fault ``effect``'s next call (or, with ``lookup``, its next lookup) meets, used up
    as it is met; None for none."""
    (made,) = db.execute(
        "SELECT COUNT(*) FROM calls WHERE effect = ? AND operation NOT LIKE 'lookup%'",
        (effect,),
    ).fetchone()
    number = made + (0 if lookup else 1)
    for fid, kind, calls, times, used in db.execute(
        "SELECT id, kind, calls, times, used FROM faults WHERE effect = ? "
        "ORDER BY times IS NULL, id",
        (effect,),
    ).fetchall():
        if (kind == "lookup_fails") != lookup:
            continue
        if calls is not None and number in json.loads(calls):
            return str(kind)  # lookup_fails: the lookups after call N (before call N + 1)
        if times is not None and used < times:
            db.execute("UPDATE faults SET used = used + 1 WHERE id = ?", (fid,))
            return str(kind)
    return None


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
