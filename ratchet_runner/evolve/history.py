"""The one portable format of a run: a history, one JSON object a line (``ratchet.run/1``).

A :class:`History` is everything the store keeps about one run, as its records: the run (its
workflow, business key, spec version, state, status, input and context), its events in order,
its operations with their IDs, attempts, statuses and receipts, its approvals with their
digests, its timers, signals and duplicates, and the spec versions those name. It is written as
plain JSON (:func:`history_json`, :func:`dump_line`), never a pickled object, and read back
(:func:`read_histories`) only after each line passes the checks a hostile file needs: UTF-8,
JSON, finite numbers, a bounded depth and length, a known ``format``, and the JSON Schema
shipped beside this module (``history.schema.json``), each refusal located as ``FILE:LINE:
CODE message`` (the ``V4xx`` codes of docs/reference/histories.md). What :func:`dump_line`
writes passes the same checks, so an export is always readable.

A sensitive value may travel sealed: ``{"ciphertext": ..., "key_id": ...}`` in place of the
value (:func:`sealed_path` finds one). No Ratchet writes one yet (encryption at rest is not
built); the reader accepts it and replay treats it as opaque.

:func:`export_runs` reads runs through the store's API, each as of one version of the run.

Over 400 lines, as one concern: the format both ways, written by an export and read back from a
file that may be hostile, each check beside the field it guards.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache, cached_property
from importlib import resources
from itertools import islice
from pathlib import Path
from typing import IO, Any

import fastjsonschema
from jsonschema import Draft7Validator
from jsonschema.exceptions import best_match

from ..errors import HistoriesInvalid, StoreError, UsageError
from ..settings import shown, unstorable
from ..store.records import (
    ApprovalRecord,
    DuplicateRecord,
    EventRecord,
    OperationRecord,
    RunRecord,
    SignalRecord,
    TimerRecord,
)
from ..store.store import Store

#: The format this Ratchet writes and reads.
FORMAT = "ratchet.run/1"
SCHEMA_RESOURCE = "history.schema.json"
#: The longest line read, in bytes (an export refuses a run longer than this), and the deepest
#: nesting of arrays and objects in one.
MAX_LINE_BYTES = 32 * 1024 * 1024
MAX_NESTING = 100
#: How many lines that cannot be read a reader reports before it stops reading.
MAX_PROBLEMS = 50
#: How many times an export reads a run again that moved while it was being read.
_READ_TRIES = 20


@dataclass(frozen=True)
class LineProblem:
    """One line of a histories file that cannot be read: ``FILE:LINE: CODE message``."""

    file: str
    line: int
    code: str
    message: str

    def format(self) -> str:
        return f"{self.file}:{self.line}: {self.code} {self.message}"

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "code": self.code, "message": self.message}


@dataclass(frozen=True)
class SpecStamp:
    """A spec version a run's records name: its digest, workflow, spec and policy versions."""

    digest: str
    name: str
    spec_version: int
    policy_version: str


@dataclass(frozen=True)
class History:
    """One run and everything the store keeps about it, as records (ids are positions)."""

    run: RunRecord
    specs: tuple[SpecStamp, ...]
    events: tuple[EventRecord, ...]
    operations: tuple[OperationRecord, ...] = ()
    approvals: tuple[ApprovalRecord, ...] = ()
    timers: tuple[TimerRecord, ...] = ()
    signals: tuple[SignalRecord, ...] = ()
    duplicates: tuple[DuplicateRecord, ...] = ()
    #: Where it was read (``FILE:LINE``); empty when read from a store.
    source: str = field(default="", compare=False)

    def spec(self, digest: str) -> SpecStamp | None:
        """The stamp of the spec version ``digest``, if the history names it."""
        return next((s for s in self.specs if s.digest == digest), None)

    def operation(self, operation_id: str) -> OperationRecord | None:
        """The operation ``operation_id``, if the history holds it."""
        return self._operations.get(operation_id)

    @cached_property
    def _operations(self) -> dict[str, OperationRecord]:
        return {op.operation_id: op for op in self.operations}


# -- sealed values ------------------------------------------------------------------------------


def is_sealed(value: Any) -> bool:
    """Whether ``value`` is a sealed value: exactly ``ciphertext`` and ``key_id``, both text."""
    return (
        isinstance(value, dict)
        and value.keys() == {"ciphertext", "key_id"}
        and all(isinstance(v, str) and v for v in value.values())
    )


def sealed_path(value: Any, where: str = "") -> str | None:
    """The path of the first sealed value in ``value`` (``input/amount``), or None."""
    stack: list[tuple[str, Any]] = [(where, value)]
    while stack:
        path, item = stack.pop()
        if is_sealed(item):
            return path or "the value"
        if isinstance(item, dict):
            stack.extend((f"{path}/{k}" if path else str(k), v) for k, v in item.items())
        elif isinstance(item, list):
            stack.extend((f"{path}/{i}", v) for i, v in enumerate(item))
    return None


# -- to JSON and back ------------------------------------------------------------------------


def history_json(history: History) -> dict[str, Any]:
    """The history as one ``ratchet.run/1`` object (plain JSON)."""
    run = history.run
    return {
        "format": FORMAT,
        "run": {
            "id": run.id,
            "workflow": run.workflow,
            "business_key": run.business_key,
            "spec_digest": run.spec_digest,
            "state": run.state,
            "status": str(run.status),
            "version": run.version,
            "input": run.input,
            "context": dict(run.context),
            "created_at": run.created_at,
            "updated_at": run.updated_at,
        },
        "specs": [
            {
                "digest": s.digest,
                "name": s.name,
                "spec_version": s.spec_version,
                "policy_version": s.policy_version,
            }
            for s in history.specs
        ],
        "events": [
            {"version": e.version, "kind": e.kind, "at": e.at, "data": e.data}
            for e in history.events
        ],
        "operations": [_record(op, drop=("run_id",)) for op in history.operations],
        "approvals": [_record(a, drop=("id", "run_id")) for a in history.approvals],
        "timers": [_record(t, drop=("id", "run_id")) for t in history.timers],
        "signals": [_record(s, drop=("run_id",)) for s in history.signals],
        "duplicates": [_record(d, drop=("id", "run_id", "workflow")) for d in history.duplicates],
    }


def _record(record: Any, drop: tuple[str, ...]) -> dict[str, Any]:
    values = {k: v for k, v in record.__dict__.items() if k not in drop}
    return {k: str(v) if k == "status" else v for k, v in values.items()}


def history_from_json(data: Mapping[str, Any], source: str = "") -> History:
    """The history a schema-valid ``ratchet.run/1`` object holds (:func:`parse_line` checks)."""
    run = dict(data["run"])
    run_id, workflow = run["id"], run["workflow"]
    return History(
        run=RunRecord(**run),
        specs=tuple(SpecStamp(**s) for s in data["specs"]),
        events=tuple(
            EventRecord(id=n, run_id=run_id, **e) for n, e in enumerate(data["events"], start=1)
        ),
        operations=tuple(OperationRecord(run_id=run_id, **op) for op in data["operations"]),
        approvals=tuple(
            ApprovalRecord(id=n, run_id=run_id, **a)
            for n, a in enumerate(data["approvals"], start=1)
        ),
        timers=tuple(
            TimerRecord(id=n, run_id=run_id, **t) for n, t in enumerate(data["timers"], start=1)
        ),
        signals=tuple(SignalRecord(run_id=run_id, **s) for s in data["signals"]),
        duplicates=tuple(
            DuplicateRecord(id=n, run_id=run_id, workflow=workflow, **d)
            for n, d in enumerate(data["duplicates"], start=1)
        ),
        source=source,
    )


def dump_line(history: History) -> str:
    """The history as one line of JSONL (no newline at its end), checked as a reader checks it:
    an export never writes what a reader refuses (:class:`HistoriesInvalid` naming the run).
    U+2028 and U+2029 are escaped, so that no reader splits the line at them."""
    try:
        text = json.dumps(
            history_json(history), ensure_ascii=False, allow_nan=False, separators=(",", ":")
        )
    except (ValueError, RecursionError) as exc:
        raise HistoriesInvalid([], f"run {history.run.id} cannot be exported: {exc}") from None
    text = text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    checked = parse_line(text.encode("utf-8"), f"run {history.run.id}", 1)
    if isinstance(checked, LineProblem):
        said = f"run {history.run.id} cannot be exported: {checked.code} {checked.message}"
        raise HistoriesInvalid([], said)  # one line, with the run's name: no file holds it yet
    return text


def write_histories(histories: Iterable[History], stream: IO[str]) -> int:
    """Write each history as a line of ``stream``; how many were written."""
    written = 0
    for history in histories:
        stream.write(dump_line(history) + "\n")
        written += 1
    return written


# -- reading ---------------------------------------------------------------------------------


@cache
def history_schema() -> dict[str, Any]:
    """The JSON Schema of one line, as shipped (``history.schema.json``)."""
    text = resources.files(__package__ or "ratchet_runner.evolve").joinpath(SCHEMA_RESOURCE)
    schema: dict[str, Any] = json.loads(text.read_text(encoding="utf-8"))
    return schema


@cache
def _validator() -> Draft7Validator:
    """What explains a line that does not fit (the first, best error)."""
    return Draft7Validator(history_schema())


@cache
def _fits() -> Callable[[Any], Any]:
    """The schema compiled: the quick check every line passes first (``use_default=False``: a
    check, never a change of the line)."""
    return fastjsonschema.compile(history_schema(), use_default=False)


def _schema_problem(value: Any) -> str | None:
    """Where and why ``value`` does not fit the schema, or None."""
    try:
        _fits()(value)
    except fastjsonschema.JsonSchemaException:
        error = best_match(islice(_validator().iter_errors(value), 10))  # bounded: hostile
        if error is not None:
            return f"{_pointer(error.absolute_path)}: {shown(error.message, 160)}"
        return "it does not fit the schema"  # the two validators disagree: still refused
    return None


# The parser's hooks refuse what JSON cannot carry the same everywhere with a ValueError, which
# the parser passes on as it is (its own syntax errors are JSONDecodeError, a ValueError too).


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON carries (no NaN or Infinity)")


def _float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"{shown(text, 40)} is too large for a double")
    return number


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:  # more digits than Python converts
        raise ValueError(f"an integer of {len(text):,} digits is too long") from None


def _too_deep(value: Any) -> bool:
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > MAX_NESTING:
                return True
            parts = item.values() if isinstance(item, dict) else item
            stack.extend((part, depth + 1) for part in parts if isinstance(part, dict | list))
    return False


def _pointer(path: Iterable[Any]) -> str:
    return "".join(f"/{str(p).replace('~', '~0').replace('/', '~1')}" for p in path) or "/"


def parse_line(raw: bytes, file: str, number: int) -> dict[str, Any] | LineProblem:
    """One line of a histories file, checked, as plain JSON; or why it cannot be read."""

    def problem(code: str, message: str) -> LineProblem:
        return LineProblem(file, number, code, message)

    if len(raw) > MAX_LINE_BYTES:
        return problem("V407", f"the line is {len(raw):,} bytes long (at most {MAX_LINE_BYTES:,})")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return problem("V401", f"the line is not UTF-8 (byte {exc.start + 1})")
    try:
        value = json.loads(text, parse_constant=_constant, parse_float=_float, parse_int=_int)
    except json.JSONDecodeError as exc:
        return problem("V402", f"not JSON: {exc.msg} (column {exc.colno})")
    except ValueError as exc:  # from the hooks: a number JSON cannot carry
        return problem("V403", str(exc))
    except RecursionError:
        return problem("V404", f"nested deeper than {MAX_NESTING} levels")
    if not isinstance(value, dict):
        return problem("V402", f"a line is one JSON object, not {type(value).__name__}")
    if _too_deep(value):
        return problem("V404", f"nested deeper than {MAX_NESTING} levels")
    unfit = unstorable(value)
    if unfit is not None:
        return problem("V403", unfit)
    found = value.get("format")
    if found != FORMAT:
        said = "no format" if found is None else f"format {shown(json.dumps(found), 40)}"
        return problem("V405", f"{said}: this Ratchet reads {FORMAT}")
    unfit = _schema_problem(value)
    if unfit is not None:
        return problem("V406", unfit)
    named = {s["digest"] for s in value["specs"]}
    for where, digest in [
        ("run", value["run"]["spec_digest"]),
        *((f"approvals/{i}", a["spec_digest"]) for i, a in enumerate(value["approvals"])),
    ]:
        if digest not in named:
            unlisted = f"spec {shown(digest[:12])} is not in specs"
            return problem("V409", f"/{where}/spec_digest: {unlisted}")
    return value


def _lines(stream: IO[bytes]) -> Iterator[tuple[int, bytes]]:
    """Each line of ``stream`` with its number; a line longer than a reader takes comes back
    cut short (past :data:`MAX_LINE_BYTES`), its rest skipped."""
    number = 0
    while True:
        raw = stream.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        number += 1
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            while True:
                rest = stream.readline(1 << 20)
                if not rest or rest.endswith(b"\n"):
                    break
        if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]  # a byte order mark some editors write
        yield number, raw.rstrip(b"\r\n")


def read_histories(path: str | Path, display: str | None = None) -> list[History]:
    """Every history in the JSONL file at ``path`` (blank lines skipped), each line checked
    (:func:`parse_line`), no run twice; else :class:`HistoriesInvalid` with every line that
    cannot be read (reading stops after :data:`MAX_PROBLEMS` of them: a file that broken is read
    no further, ``V400``), and nothing is returned. ``display``: the file's name in messages."""
    name = display if display is not None else str(path)
    try:
        stream = open(path, "rb")  # noqa: SIM115 (closed below)
    except OSError as exc:
        raise UsageError(f"cannot read {name}: {exc.strerror or exc}") from None
    problems: list[LineProblem] = []
    found: list[History] = []
    seen: dict[str, int] = {}
    with stream:
        try:
            for number, raw in _lines(stream):
                if len(problems) >= MAX_PROBLEMS:
                    stopped = f"reading stopped: {MAX_PROBLEMS} lines before it cannot be read"
                    problems.append(LineProblem(name, number, "V400", stopped))
                    break
                if not raw.strip():
                    continue
                checked = parse_line(raw, name, number)
                if isinstance(checked, LineProblem):
                    problems.append(checked)
                    continue
                run_id = checked["run"]["id"]
                if run_id in seen:
                    again = f"run {shown(run_id)} is on line {seen[run_id]} too"
                    problems.append(LineProblem(name, number, "V408", again))
                    continue
                seen[run_id] = number
                found.append(history_from_json(checked, f"{name}:{number}"))
        except OSError as exc:
            raise UsageError(f"cannot read {name}: {exc.strerror or exc}") from None
    if problems:
        raise HistoriesInvalid(problems)
    return found


# -- exporting from a store -----------------------------------------------------------------


def export_runs(
    store: Store,
    runs: Sequence[str] = (),
    *,
    workflow: str | None = None,
    since: float | None = None,
) -> list[History]:
    """The histories of ``runs`` (IDs, or business keys only one run has), each once, in the
    order given; with none named, of every run (of ``workflow``, created at or after ``since``),
    oldest first, but those pruned to their tombstones (a pruned run named is a
    :class:`~ratchet_runner.errors.UsageError` saying where its history was archived). Each is
    read through the store's API as of one version of the run: a run that moved while it was
    read is read again. A workflow no spec version of the store names is a
    :class:`~ratchet_runner.errors.UsageError` (a misspelt name is not an empty export)."""
    stamps = {
        v.digest: SpecStamp(v.digest, v.name, v.spec_version, v.policy_version)
        for v in store.spec_versions()
    }
    if workflow is not None and all(s.name != workflow for s in stamps.values()):
        known = ", ".join(sorted({s.name for s in stamps.values()})) or "none"
        raise UsageError(f"no workflow {workflow!r} in the store (workflows: {known})")
    if runs:
        named = [store.resolve(reference) for reference in runs]
        for run in named:
            if run.pruned_at is not None:
                tomb = run.context.get("pruned")
                kept = tomb["archive"] if tomb is not None else None
                where = (
                    f"its history is in {kept} (ratchet archive show)"
                    if kept
                    else ("its history was not archived")
                )
                raise UsageError(f"run {run.id} was pruned to its tombstone: {where}")
        ids = list(dict.fromkeys(run.id for run in named))
    else:
        ids = store.run_ids(workflow, since=since, pruned=False)
    return [_read_run(store, run_id, stamps) for run_id in ids]


def _read_run(store: Store, run_id: str, stamps: dict[str, SpecStamp]) -> History:
    for _ in range(_READ_TRIES):
        run = store.get_run(run_id)
        history = History(
            run=run,
            specs=(),
            events=tuple(store.history(run_id)),
            operations=tuple(store.operations(run_id)),
            approvals=tuple(store.approvals(run_id)),
            timers=tuple(store.timers(run_id)),
            signals=tuple(store.signals(run_id)),
            duplicates=tuple(store.duplicates(run_id)),
        )
        if store.get_run(run_id).version == run.version:
            return _stamped(history, stamps, store)
    raise StoreError(f"run {run_id} moved {_READ_TRIES} times while it was read: export it again")


def _stamped(history: History, stamps: dict[str, SpecStamp], store: Store) -> History:
    """The history with the spec versions its run and approvals name (read again if one was
    saved after the export began), its records renumbered as a file numbers them."""
    digests = dict.fromkeys([history.run.spec_digest, *(a.spec_digest for a in history.approvals)])
    if any(d not in stamps for d in digests):
        stamps.update(
            (v.digest, SpecStamp(v.digest, v.name, v.spec_version, v.policy_version))
            for v in store.spec_versions()
        )
    run_id = history.run.id
    return History(
        run=history.run,
        specs=tuple(stamps[d] for d in digests if d in stamps),
        events=tuple(
            EventRecord(n, run_id, e.version, e.kind, e.data, e.at)
            for n, e in enumerate(history.events, start=1)
        ),
        operations=history.operations,
        approvals=history.approvals,
        timers=history.timers,
        signals=history.signals,
        duplicates=history.duplicates,
    )
