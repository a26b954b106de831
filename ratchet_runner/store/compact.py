"""A commit's history in one compact row: what the ``history`` table holds.

Every commit that writes history (a run's creation, a move, a claim, a prune) writes one row of
``history``: the run, the version the commit gave it (one row per version), the commit's time,
and ``events``, a JSON array of the commit's events in order. Each event takes one of three
forms:

* ``[kind, shape, v1, ..., vn]``: an event whose data has exactly the keys of :data:`SHAPES`
  number ``shape``, in that order: the values follow, and no key is written. In a shape that
  starts with ``operation_id`` the value may be a number ``i``: the ``i``-th operation ID written
  in full in that place earlier in the same row (from 0). A move's pending record, its undo and
  its attempt name their operation once.
* ``[kind, data]``: any other event, its data as the engine gave it.
* ``[kind, data, at]``: the same, at a time other than the row's (only in rows converted from
  an older store's history, where nothing forced one time per version).

:func:`expand` gives back every event's kind, data and time exactly as they were written, keys
in their order, so ``trace``, ``export`` and replay read what they read before. A 3-step run's
history is 5 rows instead of 16 and under half the bytes (``bench/bench_history.py``). The
history's two reads are here too: a run's rows (:data:`HISTORY`), and when each lease was taken
(:func:`lease_times`), which must read the rows to find the claims' events.

:data:`SHAPES` is part of the stored format: append to it, never reorder or change an entry
(old rows name shapes by number), and a new shape needs a store revision, so that a store is never
read by a version of Ratchet that does not know every shape in it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection, Text, bindparam, or_, select

from ..errors import StoreError
from .tables import history, runs

#: The key sequences a history entry may be written without its keys, by number (see the
#: module): the commonest events' data, as the engine builds them (the first eight on every
#: step; the rest in approvals, waits, retries, undos and operators' actions).
SHAPES: tuple[tuple[str, ...], ...] = (
    ("state", "business_key", "ratchet_version"),  # created
    ("state", "business_key", "binding", "ratchet_version"),  # created, bound
    ("operation_id", "effect", "role", "action", "strategy"),  # pending
    ("operation_id", "effect", "undo", "reason"),  # no_compensation
    ("operation_id", "attempt"),  # call
    ("operation_id", "effect", "role", "via", "receipt"),  # done
    ("from", "event", "to"),  # moved
    ("owner", "previous"),  # leased, rescued
    ("state", "since", "reason", "resumes_on", "expires_at", "proposal", "decided_by"),  # paused
    ("state", "since", "reason", "resumes_on", "expires_at"),  # paused
    ("operation_id", "effect", "compensates"),  # compensation_registered
    ("actor", "role", "action", "digest", "reason", "expires_at", "ratchet_version"),  # approved
    ("operation_id", "effect", "role", "reason", "evidence"),  # refused, exhausted
    ("operation_id", "reason"),  # unavailable, timeout
    ("seconds", "next_attempt"),  # backoff
    ("action", "actor", "role", "note"),  # operator
    ("queue", "operator_action"),  # queued
    ("event", "due_at"),  # timer
    ("operation_id", "attempts"),  # resumed
    ("operation_id",),  # reconcile_not_found and others
)
_SHAPE_OF = {keys: number for number, keys in enumerate(SHAPES)}
#: The shape of a claim's ``leased`` or ``rescued`` event, which PostgreSQL's claim writes in SQL.
LEASED_SHAPE = _SHAPE_OF[("owner", "previous")]


def entries(history: Iterable[tuple[str, dict[str, Any]]]) -> list[list[Any]]:
    """``history`` (a commit's events, in order) in the compact form of the module."""
    out: list[list[Any]] = []
    named: dict[str, int] = {}  # operation IDs written in full in this row, by their number
    for kind, data in history:
        shape = _SHAPE_OF.get(tuple(data))
        if shape is None:
            out.append([str(kind), data])
            continue
        entry: list[Any] = [str(kind), shape, *data.values()]
        if SHAPES[shape][0] == "operation_id":
            operation_id = entry[2]
            if not isinstance(operation_id, str):
                out.append([str(kind), data])  # a number there would read as a reference
                continue
            number = named.get(operation_id)
            if number is None:
                named[operation_id] = len(named)
            else:
                entry[2] = number
        out.append(entry)
    return out


def encode(history: Iterable[tuple[str, dict[str, Any]]]) -> str:
    """The ``events`` column's JSON text for ``history``."""
    return json.dumps(entries(history), separators=(",", ":"))


def expand(events: Any, at: float, where: str = "") -> list[tuple[str, dict[str, Any], float]]:
    """A ``history`` row's ``events`` (parsed) and time as ``(kind, data, at)`` per event, in
    order; a row that is not in the module's form raises :class:`StoreError` (``where`` names
    the row in the message)."""
    if isinstance(events, str):
        events = json.loads(events)
    if not isinstance(events, list):
        raise _unreadable(where, "its events are not a list")
    out: list[tuple[str, dict[str, Any], float]] = []
    named: list[str] = []
    for entry in events:
        if not isinstance(entry, list) or len(entry) < 2 or not isinstance(entry[0], str):
            raise _unreadable(where, f"an event is not [kind, ...]: {entry!r:.80}")
        kind, second = entry[0], entry[1]
        if isinstance(second, dict):
            when = entry[2] if len(entry) == 3 else at
            if len(entry) > 3 or type(when) not in (int, float):  # not a bool
                raise _unreadable(where, f"a {kind} event has more than its data and time")
            out.append((kind, second, float(when)))
            continue
        if type(second) is not int or not 0 <= second < len(SHAPES):  # not a bool: true is 1
            raise _unreadable(where, f"a {kind} event names no known shape: {second!r}")
        keys = SHAPES[second]
        values = entry[2:]
        if len(values) != len(keys):
            said = f"a {kind} event has {len(values)} values for {len(keys)} keys"
            raise _unreadable(where, said)
        data = dict(zip(keys, values, strict=True))
        if keys[0] == "operation_id":
            operation_id = values[0]
            if type(operation_id) is int:
                if not 0 <= operation_id < len(named):
                    raise _unreadable(where, f"a {kind} event names operation {operation_id}")
                data["operation_id"] = named[operation_id]
            else:
                named.append(operation_id)
        out.append((kind, data, at))
    return out


#: A run's history rows, oldest first.
HISTORY = (
    select(history.c.version, history.c.at, history.c.events)
    .where(history.c.run_id == bindparam("b_id"))
    .order_by(history.c.version)
)
#: The kinds of event a lease is taken with.
_TAKEN = ("leased", "rescued")
#: The history rows of the leased runs that may hold a ``leased`` or ``rescued`` event, newest
#: first: the text's pattern lets through every row that does (and a few that merely hold such
#: a list in some event's data, which reading them weeds out), so most rows are never parsed.
_LEASED_ROWS = (
    select(history.c.run_id, history.c.at, history.c.events)
    .join(runs, runs.c.id == history.c.run_id)
    .where(
        runs.c.lease_token.is_not(None),
        or_(*(history.c.events.cast(Text).like(f'%["{kind}",%') for kind in _TAKEN)),
    )
    .order_by(history.c.run_id, history.c.version.desc())
)


def lease_times(conn: Connection) -> dict[str, float]:
    """When each leased run's lease was taken: the time of its last ``leased`` or ``rescued``
    event (by the claiming worker's clock)."""
    taken: dict[str, float] = {}
    for run_id, at, events in conn.execute(_LEASED_ROWS):
        if run_id in taken:
            continue
        for kind, _data, when in reversed(expand(events, at, f"of run {run_id}")):
            if kind in _TAKEN:
                taken[run_id] = when
                break
    return taken


def _unreadable(where: str, why: str) -> StoreError:
    return StoreError(f"the history {where or 'row'} cannot be read: {why}")
