"""A commit's history in one compact row: what the ``history`` table holds.

Every commit that writes history (a run's creation, a move, a claim, a prune) writes one row of
``history``: the run, the version the commit gave it (one row per version), the commit's time,
and ``events``, a JSON array of the commit's events in order. Each event takes one of three
forms:

* ``[kind, shape, v1, ..., vn]``: an event whose data has exactly the keys of :data:`SHAPES`
  number ``shape``, in that order: the values follow, and no key is written. In a shape that
  starts with ``operation_id`` the value may be a number: ``-k`` (from revision 0007) is the
  ``k``-th operation the run lists (its context's ``operations``, from 1), so an operation the
  run lists is never written in history at all; ``i`` (0 or more) is the ``i``-th operation ID
  written in full in that place earlier in the same row (from 0), for an operation the run
  does not list. Shape :data:`DONE_AS_RECORDED` (from revision 0007, on SQLite) is a
  ``done`` event whose receipt is the operation's stored receipt's field named last: written
  only when the same commit stores that very receipt, which is never written over after (a
  trigger, :data:`~ratchet_runner.store.tables.RECEIPT_ONCE`).
* ``[kind, data]``: any other event, its data as the engine gave it.
* ``[kind, data, at]``: the same, at a time other than the row's (only in rows converted from
  an older store's history, where nothing forced one time per version).

:func:`expand` gives back every event's kind, data and time exactly as they were written, keys
in their order, so ``trace``, ``export`` and replay read what they read before. A 3-step run's
history is 5 rows instead of 16 and under half the bytes (``bench/bench_history.py``). A run's
``operations`` only ever grow at their end (``write_ahead.list_operations`` is their one writer,
a prune keeps them, and every commit's compare-and-set refuses a change that lists fewer), so a
number written against them names the same operation for good. The history's reads are here
too: a run's rows (:data:`HISTORY`, with :data:`CONTEXT` and :data:`RECEIPTS`, which they may
name), and when each lease was taken (:func:`lease_times`), which must read the rows to find
the claims' events.

:data:`SHAPES` is part of the stored format: append to it, never reorder or change an entry
(old rows name shapes by number), and a new shape or form needs a store revision, so that a
store is never read by a version of Ratchet that does not know every shape in it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Text, bindparam, or_, select

from ..errors import StoreError
from .tables import history, operations, runs

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
    # From revision 0007: done, its receipt the field named of the operation's stored receipt,
    # which the same commit records (see the module); never taken by the keys of an event.
    ("operation_id", "effect", "role", "via", "receipt_field"),
)
#: The shape of a ``done`` event whose receipt is read from the operation's record.
DONE_AS_RECORDED = 20
_SHAPE_OF = {keys: n for n, keys in enumerate(SHAPES) if n != DONE_AS_RECORDED}
_DONE = _SHAPE_OF[("operation_id", "effect", "role", "via", "receipt")]
#: The shape of a claim's ``leased`` or ``rescued`` event, which PostgreSQL's claim writes in SQL.
LEASED_SHAPE = _SHAPE_OF[("owner", "previous")]


def entries(
    history: Iterable[tuple[str, dict[str, Any]]],
    listed: Sequence[str] = (),
    recorded: Mapping[str, Any] | None = None,
) -> list[list[Any]]:
    """``history`` (a commit's events, in order) in the compact form of the module; ``listed``:
    the run's operations as the commit leaves them; ``recorded``: the receipts the commit
    stores on operations (:func:`recorded_in`), by operation ID."""
    out: list[list[Any]] = []
    named: dict[str, int] = {}  # operation IDs written in full in this row, by their number
    place = {operation_id: -(i + 1) for i, operation_id in enumerate(listed)}
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
            number = place.get(operation_id, named.get(operation_id))
            if number is None:
                named[operation_id] = len(named)
            else:
                entry[2] = number
            if shape == _DONE and recorded and operation_id in place:
                field = _field_of_record(data["receipt"], recorded.get(operation_id))
                if field is not None:
                    entry[1], entry[-1] = DONE_AS_RECORDED, field
        out.append(entry)
    return out


def _field_of_record(receipt: Any, record: Any) -> str | None:
    """The field a done event's ``receipt`` (``{field: value}``) takes of ``record`` (the
    receipt the commit stores on the operation), if it is that field's very value there."""
    if not isinstance(receipt, dict) or len(receipt) != 1 or not isinstance(record, dict):
        return None
    ((field, value),) = receipt.items()
    return field if isinstance(field, str) and value is record.get(field) else None


def recorded_in(updates: Iterable[tuple[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """The receipts ``updates`` (a commit's operation updates) store, by operation ID: those
    a done event may take its receipt from."""
    return {
        operation_id: fields["receipt"] for operation_id, fields in updates if "receipt" in fields
    }


#: The ``events`` column's text: without spaces, by one encoder made once.
_TEXT = json.JSONEncoder(separators=(",", ":")).encode


def encode(
    history: Iterable[tuple[str, dict[str, Any]]],
    listed: Sequence[str] = (),
    recorded: Mapping[str, Any] | None = None,
) -> str:
    """The ``events`` column's JSON text for ``history`` (the rest: as for :func:`entries`)."""
    return _TEXT(entries(history, listed, recorded))


def expand(
    events: Any,
    at: float,
    where: str = "",
    listed: Sequence[str] = (),
    receipts: Mapping[str, Any] | None = None,
) -> list[tuple[str, dict[str, Any], float]]:
    """A ``history`` row's ``events`` (parsed) and time as ``(kind, data, at)`` per event, in
    order; ``listed``: the run's operations (its context's); ``receipts``: their stored
    receipts, by operation ID. A row that is not in the module's form, or names an operation
    the run does not list or a receipt not stored, raises :class:`StoreError` (``where`` names
    the row in the message)."""
    out: list[tuple[str, dict[str, Any], float]] = []
    named: list[str] = []
    for entry in _entries_of(events, where):
        kind, second = entry[0], entry[1]
        if isinstance(second, dict):
            out.append((kind, second, _time_of(entry, at, where)))
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
            if type(operation_id) is int and operation_id < 0:
                if -operation_id > len(listed):
                    said = f"a {kind} event names operation {-operation_id} of the run's"
                    raise _unreadable(where, f"{said} {len(listed)}")
                data["operation_id"] = listed[-operation_id - 1]
            elif type(operation_id) is int:
                if not 0 <= operation_id < len(named):
                    raise _unreadable(where, f"a {kind} event names operation {operation_id}")
                data["operation_id"] = named[operation_id]
            else:
                named.append(operation_id)
        if second == DONE_AS_RECORDED:
            data = _with_recorded(data, receipts or {}, where, kind)
        out.append((kind, data, at))
    return out


def _with_recorded(
    data: dict[str, Any], receipts: Mapping[str, Any], where: str, kind: str
) -> dict[str, Any]:
    """A :data:`DONE_AS_RECORDED` event's data, its receipt read from the operation's."""
    field, record = data.pop("receipt_field"), receipts.get(data["operation_id"])
    if not isinstance(field, str) or not isinstance(record, dict):
        said = f"a {kind} event names the receipt of {data['operation_id']}, which has none"
        raise _unreadable(where, said)
    return {**data, "receipt": {field: record.get(field)}}


def listed_in(context: Any) -> Sequence[str]:
    """The operations a run's ``context`` (as stored: a dict, or its JSON text) lists."""
    if isinstance(context, str):
        context = json.loads(context)
    listed = context.get("operations", ()) if isinstance(context, dict) else ()
    return listed if isinstance(listed, list) else ()


#: A run's history rows, oldest first.
HISTORY = (
    select(history.c.version, history.c.at, history.c.events)
    .where(history.c.run_id == bindparam("b_id"))
    .order_by(history.c.version)
)
#: The run's context, which lists the operations its history names by number.
CONTEXT = select(runs.c.context).where(runs.c.id == bindparam("b_id"))
#: The receipts of the run's operations, which its history may name.
RECEIPTS = select(operations.c.operation_id, operations.c.receipt).where(
    operations.c.run_id == bindparam("b_id"), operations.c.receipt.is_not(None)
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
        for kind, when in reversed(_times(events, at, f"of run {run_id}")):
            if kind in _TAKEN:
                taken[run_id] = when
                break
    return taken


def _times(events: Any, at: float, where: str) -> list[tuple[str, float]]:
    """A ``history`` row's events as ``(kind, at)``, in order, their data left unread."""
    return [
        (entry[0], _time_of(entry, at, where) if isinstance(entry[1], dict) else at)
        for entry in _entries_of(events, where)
    ]


def _entries_of(events: Any, where: str) -> list[list[Any]]:
    """A ``history`` row's ``events`` (its text, or parsed), each checked to be ``[kind, ...]``."""
    if isinstance(events, str):
        events = json.loads(events)
    if not isinstance(events, list):
        raise _unreadable(where, "its events are not a list")
    for entry in events:
        if not isinstance(entry, list) or len(entry) < 2 or not isinstance(entry[0], str):
            raise _unreadable(where, f"an event is not [kind, ...]: {entry!r:.80}")
    return events


def _time_of(entry: list[Any], at: float, where: str) -> float:
    """The time of a ``[kind, data]`` or ``[kind, data, at]`` entry (``at``: the row's)."""
    when = entry[2] if len(entry) == 3 else at
    if len(entry) > 3 or type(when) not in (int, float):  # not a bool
        raise _unreadable(where, f"a {entry[0]} event has more than its data and time")
    return float(when)


def _unreadable(where: str, why: str) -> StoreError:
    return StoreError(f"the history {where or 'row'} cannot be read: {why}")
