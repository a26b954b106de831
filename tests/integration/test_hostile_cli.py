"""Hostile input to the command line: a corpus of cases, each run against both stores.

Every case is a command someone (or a script) could type: bytes that are not UTF-8, JSON that
Python reads but no database keeps (a lone surrogate, ``Infinity``, ``1e400``), names too long
for the store, empty names, business keys with control characters or that look like run IDs,
``--limit`` past what a database counts to, a FIFO where a file goes, and a ``RATCHET_HOME`` that
is a file, too long, or holds ``?`` and ``%``. Each case asserts the exit status, a code in the
message (``R...``, or the ``E`` code of a located problem), no traceback, no "internal error",
and that the store and the practice world are unchanged (or, where the command succeeds, hold
what it made).

The cases that need the file system to misbehave (corrupt pages, a read-only home, a full disk)
are tests of their own below; the read-only and full-disk ones run ``ratchet`` in a mount
namespace of its own (``unshare``) on a read-only bind mount or a small tmpfs, and are skipped
where this process may not mount (root ignores file modes, so a mount is the honest test).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from ratchet_runner import cli
from ratchet_runner.store.records import NewRun
from ratchet_runner.store.store import Store
from tests.conftest import PRACTICE_BINDING, ROOT, postgres_url
from tests.conftest import run_cli as run

REFUND = str(ROOT / "specs" / "refund.yaml")
PARCEL = str(ROOT / "tests" / "fixtures" / "parcel.yaml")
CODE = r"\b[REB]\d{3}\b"
PARCEL_INPUT = {"ticket": "P-2", "order": "LK-645334", "sku": "LADDER-3"}
REFUND_INPUT = {
    "ticket": "T-90104",
    "order": "LK-793996",
    "amount": 9.95,
    "currency": "CAD",
    "reason": "RFD-LATE",
}


@dataclass
class Place:
    """Where a case runs: its home (the practice world, and on SQLite the store), the store's URL
    (None: the default store under the home), and a scratch folder for the files a case names."""

    home: Path
    url: str | None
    scratch: Path

    @property
    def kind(self) -> str:
        return "sqlite" if self.url is None else "postgresql"

    def store_url(self) -> str:
        return self.url or f"sqlite:///{self.home / 'ratchet.db'}"

    def runs(self) -> list[tuple[Any, ...]]:
        store = Store(self.store_url(), create=False)
        try:
            return sorted(
                (r.id, r.business_key, r.state, r.status, r.version)
                for r in store.list_runs(limit=1000)
            )
        finally:
            store.close()

    def snapshot(self, home: Path | None = None) -> dict[str, Any]:
        """The runs (each with its version), every table's row count, and the practice world's
        rows: what a refused command must leave as it was."""
        store = Store(self.store_url(), create=False)
        try:
            counts = store.counts()
        finally:
            store.close()
        return {"runs": self.runs(), "counts": counts, "world": world_rows(home or self.home)}


def world_rows(home: Path) -> dict[str, int]:
    path = home / "practice.db"
    if not path.exists():
        return {}
    db = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {t: db.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}
    finally:
        db.close()


STORES = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


def _environment(monkeypatch: pytest.MonkeyPatch, home: Path, url: str | None) -> None:
    for name in ("RATCHET_DB", "RATCHET_BINDINGS", "RATCHET_NOW", "RATCHET_DEBUG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RATCHET_HOME", str(home))
    if url is not None:
        monkeypatch.setenv("RATCHET_DB", url)
        monkeypatch.setenv("RATCHET_BINDINGS", str(PRACTICE_BINDING))


def _place(kind: str, folder: Path, monkeypatch: pytest.MonkeyPatch) -> Place:
    """A fresh home on SQLite (the default store, a practice store) or PostgreSQL (a schema of
    its own, the practice world bound by specs/practice.toml), its environment set."""
    url = postgres_url() if kind == "postgresql" else None
    scratch = folder / "scratch"
    scratch.mkdir()
    _environment(monkeypatch, folder / "home", url)
    return Place(folder / "home", url, scratch)


@pytest.fixture(params=STORES)
def place(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Place:
    """A fresh home (no runs yet) on each store."""
    return _place(request.param, tmp_path, monkeypatch)


@pytest.fixture(scope="module", params=STORES)
def _shared(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Place:
    """One home per store with the runs of :func:`start_runs`, shared by the corpus: a case
    refused as it must be changes nothing (each case checks that), so the next may use it."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        made = _place(request.param, tmp_path_factory.mktemp("corpus"), monkeypatch)
        for args in (("run", REFUND, "--example", "T-90104"), ("run", PARCEL, "--example", "P-1")):
            quiet = (
                contextlib.redirect_stdout(io.StringIO()),
                contextlib.redirect_stderr(io.StringIO()),
            )
            with quiet[0], quiet[1]:
                cli.main([*args])
    return made


@pytest.fixture
def shared(_shared: Place, monkeypatch: pytest.MonkeyPatch) -> Place:
    _environment(monkeypatch, _shared.home, _shared.url)
    return _shared


def start_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """The runs the cases act on: refund T-90104 (waiting for approval) and parcel P-1 (paused,
    waiting for the carrier's signal)."""
    assert run(capsys, "run", REFUND, "--example", "T-90104")[0] == 0
    assert run(capsys, "run", PARCEL, "--example", "P-1")[0] == 0


def refused(code: int, out: str, err: str, status: int, wanted: str) -> None:
    """A clear refusal: the exit status, the code in the message, no traceback, no internal
    error."""
    assert code == status, (code, out, err)
    assert wanted in err, err
    assert re.search(CODE, err), err
    assert "Traceback" not in out + err
    assert "internal error" not in out + err
    assert "please report" not in out + err


# -- the corpus -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """``ratchet ARGS`` on a home with the runs of :func:`start_runs`: exit ``status`` with
    ``code`` (and ``says``) in the message, the store and the practice world unchanged.
    ``files``: files written to the scratch folder first (JSON), named in ARGS as ``{NAME}``."""

    args: tuple[str, ...]
    status: int
    code: str
    says: str = ""
    files: dict[str, Any] = field(default_factory=dict)


LONG = "x" * 201
CASES: dict[str, Case] = {
    # bytes that are not UTF-8 (Python hands them over as lone surrogates, U+DC80..U+DCFF)
    "non-utf8-run-reference": Case(("trace", "T-\udcff"), 2, "R206", "not valid UTF-8"),
    "non-utf8-actor": Case(
        ("approve", "T-90104", "--as", "agent-\udcff", "--role", "agent"), 2, "R206", "UTF-8"
    ),
    "non-utf8-spec-path": Case(("validate", "spec-\udcff.yaml"), 2, "R206", "UTF-8"),
    # signal data Python's JSON reads and no database keeps the same way
    "lone-surrogate-in-signal-data": Case(
        (
            "signal",
            "P-1",
            "parcel_received",
            "--id",
            "e-1",
            "--data",
            '{"weight_kg": 2, "n": "\\ud800"}',
        ),
        2,
        "R206",
        "surrogate",
    ),
    "infinity-in-signal-data": Case(
        ("signal", "P-1", "parcel_received", "--id", "e-1", "--data", '{"weight_kg": Infinity}'),
        2,
        "R206",
        "finite",
    ),
    "nan-in-signal-data": Case(
        ("signal", "P-1", "parcel_received", "--id", "e-1", "--data", '{"weight_kg": NaN}'),
        2,
        "R206",
        "finite",
    ),
    "1e400-in-signal-data": Case(
        ("signal", "P-1", "parcel_received", "--id", "e-1", "--data", '{"weight_kg": 1e400}'),
        2,
        "R206",
        "finite",
    ),
    "1e400-in-input": Case(
        ("run", PARCEL, "--input", "{input}"),
        1,
        "R408",
        "finite",
        files={"input": {**PARCEL_INPUT, "weight": "1e400"}},
    ),
    "5000-digit-integer-in-signal-data": Case(
        ("signal", "P-1", "parcel_received", "--id", "e-1", "--data", '{"w": 1%s}' % ("0" * 5000)),
        2,
        "R206",
        "digits",
    ),
    # names longer than the store keeps (SQLite would keep them, PostgreSQL would not)
    "over-long-signal-id": Case(
        ("signal", "P-1", "parcel_received", "--id", LONG, "--data", '{"weight_kg": 2}'),
        2,
        "R206",
        "at most 200",
    ),
    "over-long-actor": Case(
        ("approve", "T-90104", "--as", LONG, "--role", "agent"), 2, "R206", "at most 200"
    ),
    "over-long-business-key": Case(
        ("run", PARCEL, "--input", "{input}"),
        1,
        "R400",
        "at most 400",
        files={"input": {**PARCEL_INPUT, "ticket": "P-" + "9" * 400}},
    ),
    # empty or unprintable names
    "empty-actor": Case(("approve", "T-90104", "--as", "", "--role", "agent"), 2, "R206", "empty"),
    "blank-actor": Case(
        ("approve", "T-90104", "--as", "  ", "--role", "agent"), 2, "R206", "empty"
    ),
    "empty-role": Case(("approve", "T-90104", "--as", "agent-7", "--role", ""), 2, "R206"),
    "actor-with-a-newline": Case(
        ("approve", "T-90104", "--as", "agent\n7", "--role", "agent"), 2, "R206", "control"
    ),
    "empty-signal-id": Case(
        ("signal", "P-1", "parcel_received", "--id", "", "--data", '{"weight_kg": 2}'),
        2,
        "R206",
        "empty",
    ),
    # business keys: control characters, and the shape of a run ID
    "business-key-with-a-newline": Case(
        ("run", REFUND, "--input", "{input}"),  # the spec's pattern ^T-[0-9]+$ lets it through
        1,
        "R400",
        "control character",
        files={"input": {**REFUND_INPUT, "ticket": "T-90777\n"}},
    ),
    "business-key-with-an-escape-sequence": Case(
        ("run", PARCEL, "--input", "{input}"),
        1,
        "R400",
        "control character",
        files={"input": {**PARCEL_INPUT, "ticket": "P-\x1b[31mRED"}},
    ),
    "business-key-starting-run_": Case(
        ("run", PARCEL, "--input", "{input}"),
        1,
        "R400",
        "run_",
        files={"input": {**PARCEL_INPUT, "ticket": "run_2"}},
    ),
    # numbers past what a database counts to
    "runs-limit-overflow": Case(("runs", "--limit", "99999999999999999999"), 2, "R206"),
    "runs-limit-negative": Case(("runs", "--limit", "-1"), 2, "R206"),
    "runs-limit-zero": Case(("runs", "--limit", "0"), 2, "R206"),
    "runs-older-than-nan": Case(("runs", "--stuck", "--older-than", "nan"), 2, "R206"),
    "runs-older-than-infinity": Case(("runs", "--stuck", "--older-than", "inf"), 2, "R206"),
}


def _materialise(case: Case, scratch: Path) -> list[str]:
    names: dict[str, str] = {}
    for name, content in case.files.items():
        path = scratch / f"{name}.json"
        text = json.dumps(content, ensure_ascii=False)
        # "1e400" is a number in the file (JSON has no way to say infinity otherwise)
        path.write_text(text.replace('"1e400"', "1e400"), encoding="utf-8")
        names[name] = str(path)
    return [arg.format(**names) if "{" in arg and names else arg for arg in case.args]


@pytest.mark.parametrize("name", list(CASES))
def test_a_hostile_command_is_refused_with_a_code_and_changes_nothing(
    name: str, shared: Place, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    case = CASES[name]
    before = shared.snapshot()
    code, out, err = run(capsys, *_materialise(case, tmp_path))
    refused(code, out, err, case.status, case.code)
    assert case.says in err
    assert shared.snapshot() == before


def test_trace_json_still_works_after_a_lone_surrogate_was_offered(
    shared: Place, capsys: pytest.CaptureFixture[str]
) -> None:
    data = '{"weight_kg": 2, "note": "\\ud800"}'
    signal = ("signal", "P-1", "parcel_received", "--id", "e-1", "--data", data)
    assert run(capsys, *signal)[0] == 2
    code, out, err = run(capsys, "trace", "P-1", "--json")
    assert code == 0, err
    assert json.loads(out)["business_key"] == "P-1"


# -- the store refuses what it cannot hold, the same way on both ---------------------------


@pytest.mark.parametrize(
    ("what", "value"),
    [
        ("infinity", float("inf")),
        ("nan", float("nan")),
        ("lone surrogate", "\ud800"),
    ],
)
def test_the_store_refuses_a_value_it_cannot_keep_before_writing_anything(
    shared: Place, capsys: pytest.CaptureFixture[str], what: str, value: Any
) -> None:
    from ratchet_runner.errors import UnstorableValue
    from ratchet_runner.store.records import Change

    before = shared.snapshot()
    store = Store(shared.store_url(), create=False)
    try:
        parcel = store.resolve("P-1")
        signal = {
            "signal_id": "e-1",
            "event": "parcel_received",
            "data": {"v": value},
            "received_at": 1.0,
        }
        with pytest.raises(UnstorableValue, match="signal"):
            store.commit(Change(parcel.id, parcel.version, 1.0, base=parcel, new_signals=[signal]))
        with pytest.raises(UnstorableValue, match="context"):
            store.commit(Change(parcel.id, parcel.version, 1.0, base=parcel, context={"v": value}))
        run_id = "run_0000000000000001"
        new = NewRun(
            run_id, "parcel", parcel.spec_digest, "P-3", "labelling", "running", {"v": value}, 1.0
        )
        with pytest.raises(UnstorableValue, match="input"):
            store.create_run(new)
    finally:
        store.close()
    assert shared.snapshot() == before, what


def _with_name(parcel: Any, column: str, name: str) -> Any:
    """What writes ``name`` to ``column``: a new run (its business key), or a change to the
    parcel run recording a signal (its ID) or an approval (its actor)."""
    from ratchet_runner.store.records import Change

    if column == "business_key":
        args = ("parcel", parcel.spec_digest, name, "labelling", "running", {}, 1.0)
        return NewRun("run_0000000000000002", *args)
    change = Change(parcel.id, parcel.version, 1.0, base=parcel)
    if column == "signal_id":
        change.new_signals.append({"signal_id": name, "event": "e", "data": {}, "received_at": 1.0})
    else:
        change.new_approvals.append(
            {
                "name": "a",
                "effect": "e",
                "digest": "d",
                "decision": "approved",
                "actor": name,
                "role": "r",
                "reason": None,
                "policy_version": "1",
                "spec_digest": parcel.spec_digest,
                "decided_at": 1.0,
                "expires_at": None,
            }
        )
    return change


@pytest.mark.parametrize(
    ("column", "length"), [("signal_id", 200), ("business_key", 400), ("actor", 200)]
)
def test_the_store_refuses_an_over_long_name_on_both_stores(
    shared: Place, capsys: pytest.CaptureFixture[str], column: str, length: int
) -> None:
    from ratchet_runner.errors import UnstorableValue

    before = shared.snapshot()
    store = Store(shared.store_url(), create=False)
    try:
        write = _with_name(store.resolve("P-1"), column, "k" * (length + 1))
        commit = store.create_run if column == "business_key" else store.commit
        with pytest.raises(UnstorableValue, match=f"{column} is {length + 1} characters long"):
            commit(write)
    finally:
        store.close()
    assert shared.snapshot() == before


# -- business keys are shown, never printed raw ---------------------------------------------


def test_runs_shows_a_business_key_with_control_characters_escaped_on_one_line(
    place: Place, capsys: pytest.CaptureFixture[str]
) -> None:
    """A store written before keys were checked may hold one: ``runs`` shows it escaped."""
    start_runs(capsys)
    store = Store(place.store_url(), create=False)
    try:
        parcel = store.resolve("P-1")
        store.create_run(
            NewRun(
                "run_0000000000000003",
                "parcel",
                parcel.spec_digest,
                "P-4\n\x1b[2J",
                "kept",
                "cancelled",
                {},
                1.0,
            )
        )
    finally:
        store.close()
    code, out, err = run(capsys, "runs")
    assert code == 0, err
    line = next(line for line in out.splitlines() if "run_0000000000000003" in line)
    assert "P-4\\n\\x1b[2J" in line
    assert "\x1b" not in out
    assert len(out.splitlines()) == 4  # the header and three runs


def test_a_business_key_that_starts_with_run_is_still_found_by_its_key(
    place: Place, capsys: pytest.CaptureFixture[str]
) -> None:
    """New ones are refused; one already stored is found when no run has that ID."""
    start_runs(capsys)
    store = Store(place.store_url(), create=False)
    try:
        parcel = store.resolve("P-1")
        store.create_run(
            NewRun(
                "run_0000000000000004",
                "parcel",
                parcel.spec_digest,
                "run_old",
                "kept",
                "cancelled",
                {},
                1.0,
            )
        )
    finally:
        store.close()
    code, out, err = run(capsys, "trace", "run_old", "--json")
    assert code == 0, err
    assert json.loads(out)["run"] == "run_0000000000000004"
    code, out, err = run(capsys, "trace", "run_nothing")
    refused(code, out, err, 1, "R302")


# -- RATCHET_HOME ---------------------------------------------------------------------------


@pytest.mark.parametrize("shape", ["a-regular-file", "a-name-too-long", "a-path-too-long"])
def test_a_home_that_cannot_be_a_folder_is_refused_with_a_code(
    place: Place, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, shape: str
) -> None:
    if shape == "a-regular-file":
        home = place.scratch / "home-file"
        home.write_text("not a folder\n", encoding="utf-8")
    elif shape == "a-name-too-long":
        home = place.scratch / ("h" * 300)
    else:
        home = place.scratch.joinpath(*["h" * 200] * 25)
    monkeypatch.setenv("RATCHET_HOME", str(home))
    for args in (("run", REFUND, "--example", "T-90104"), ("effects",)):
        code, out, err = run(capsys, *args)
        refused(code, out, err, 1, "R200")
        assert "RATCHET_HOME" in err
        assert len(err) < 600  # a path of 5,000 characters is not echoed whole
    if place.url is None:
        code, out, err = run(capsys, "runs")
        refused(code, out, err, 1, "R200")
    if shape == "a-regular-file":
        assert home.read_text(encoding="utf-8") == "not a folder\n"


def test_a_home_with_question_marks_and_percent_signs_holds_the_store_and_the_world(
    place: Place, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    home = place.scratch / "we?ird%20#home"
    monkeypatch.setenv("RATCHET_HOME", str(home))
    assert run(capsys, "run", REFUND, "--example", "T-90104")[0] == 0
    expected = {"practice.db"} | ({"ratchet.db"} if place.url is None else set())
    assert expected <= {p.name for p in home.iterdir()}
    assert sorted(p.name for p in place.scratch.iterdir()) == [home.name]  # nothing beside it
    code, out, err = run(capsys, "runs", "--json")
    assert code == 0, err
    assert [r["business_key"] for r in json.loads(out)] == ["T-90104"]
    assert world_rows(home)["orders"] == 1


# -- a FIFO where a file goes ---------------------------------------------------------------


def _in_thread_unless_it_hangs(
    capsys: pytest.CaptureFixture[str], fifo: Path, *args: str
) -> tuple[int, str, str]:
    """Run the command in a thread; if it is still blocked on the FIFO after a few seconds,
    open the FIFO's other end to free it, and fail."""
    done: list[tuple[int, str, str]] = []
    worker = threading.Thread(target=lambda: done.append(run(capsys, *args)), daemon=True)
    worker.start()
    worker.join(10)
    if worker.is_alive():
        with open(fifo, "wb"):
            pass
        worker.join(10)
        pytest.fail(f"ratchet {' '.join(args)} hung on the FIFO")
    return done[0]


@pytest.mark.parametrize("command", ["validate", "run --input", "run --world"])
def test_a_fifo_is_refused_before_it_is_opened(
    shared: Place, capsys: pytest.CaptureFixture[str], command: str, tmp_path: Path
) -> None:
    before = shared.snapshot()
    fifo = tmp_path / "input.yaml"
    os.mkfifo(fifo)
    args = {
        "validate": ("validate", str(fifo)),
        "run --input": ("run", PARCEL, "--input", str(fifo)),
        "run --world": ("run", PARCEL, "--example", "P-1", "--world", str(fifo)),
    }[command]
    code, out, err = _in_thread_unless_it_hangs(capsys, fifo, *args)
    refused(code, "", out + err, 1, "E100")  # validate prints its findings on stdout
    assert "not a regular file (a FIFO)" in out + err
    assert shared.snapshot() == before


# -- corrupt pages --------------------------------------------------------------------------


def corrupt_table(path: Path, table: str) -> None:
    """Overwrite the head of ``table``'s root page: the file opens, the table cannot be read."""
    db = sqlite3.connect(path)
    try:
        root = db.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()
        size = db.execute("PRAGMA page_size").fetchone()[0]
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        db.close()
    with open(path, "r+b") as handle:
        handle.seek((root[0] - 1) * size)
        handle.write(b"\xff" * 64)


def test_a_store_with_corrupt_pages_is_refused_with_a_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # SQLite's only: a PostgreSQL store's pages are the server's to keep
    place = _place(STORES[0], tmp_path, monkeypatch)
    assert place.url is None
    start_runs(capsys)
    world = world_rows(place.home)
    corrupt_table(place.home / "ratchet.db", "history")
    runs = place.runs()
    for args in (
        ("trace", "T-90104"),
        ("trace", "T-90104", "--json"),
        ("approve", "T-90104", "--as", "agent-7", "--role", "agent"),
        ("reset", "--all"),
    ):
        code, out, err = run(capsys, *args)
        refused(code, out, err, 1, "R300")
        assert "malformed" in err
    assert place.runs() == runs
    assert world_rows(place.home) == world


def test_a_practice_world_with_corrupt_pages_is_refused_with_a_code(
    place: Place, capsys: pytest.CaptureFixture[str]
) -> None:
    start_runs(capsys)
    corrupt_table(place.home / "practice.db", "calls")
    runs = place.runs()
    for args in (
        ("effects",),
        ("effects", "--json"),
        ("approve", "T-90104", "--as", "agent-7", "--role", "agent"),
        ("run", REFUND, "--example", "T-90603"),
        ("reset",),
    ):
        code, out, err = run(capsys, *args)
        refused(code, out, err, 1, "R300")
        assert "practice world" in err
        assert "malformed" in err
    assert place.runs() == runs


# -- a read-only home and a full disk -------------------------------------------------------


def _may_mount() -> str | None:
    """Why this process may not make mount namespaces, or None if it may."""
    if shutil.which("unshare") is None:
        return "no unshare"
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
        capture_output=True,
        text=True,
        check=False,
    )
    return None if probe.returncode == 0 else f"cannot mount: {probe.stderr.strip()}"


MOUNTS = _may_mount()
needs_mount = pytest.mark.skipif(MOUNTS is not None, reason=f"{MOUNTS} (the full-disk case)")
#: Without mounts, a user other than root still meets a read-only home: file modes hold for it.
MODES_HOLD = os.geteuid() != 0


#: Runs ``ratchet`` once per command in one Python process (one start-up, not one per command),
#: and writes each exit status, stdout and stderr to the JSON file named by argv[1].
DRIVER = """
import contextlib, io, json, sys
from ratchet_runner import cli
results = {}
for name, args in json.loads(sys.argv[2]).items():
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            cli.main(args)
            code = 0
        except SystemExit as exited:
            code = int(exited.code or 0)
    results[name] = [code, out.getvalue(), err.getvalue()]
with open(sys.argv[1], "w", encoding="utf-8") as handle:
    json.dump(results, handle)
"""


def in_namespace(
    place: Place,
    before: list[str],
    commands: dict[str, list[str]],
    after: list[str],
    home: Path,
    isolated: bool = True,
) -> dict[str, tuple[int, str, str]]:
    """In a mount namespace of its own (unless not ``isolated``): the shell lines ``before``,
    then each of ``commands`` (``ratchet ARGS``, with ``RATCHET_HOME`` set to ``home``), then the
    lines ``after``; each command's exit status, stdout and stderr."""
    results = place.scratch / "results.json"
    driver = f'"{sys.executable}" -c "$DRIVER" "{results}" "$COMMANDS"'
    shell = ["sh", "-euc", "\n".join([*before, driver, *after])]
    done = subprocess.run(
        ["unshare", "-m", *shell] if isolated else shell,
        env={
            **os.environ,
            "RATCHET_HOME": str(home),
            "DRIVER": DRIVER,
            "COMMANDS": json.dumps(commands),
        },
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    found = json.loads(results.read_text(encoding="utf-8"))
    return {name: (int(code), out, err) for name, (code, out, err) in found.items()}


@pytest.mark.skipif(
    MOUNTS is not None and not MODES_HOLD, reason=f"{MOUNTS}, and root ignores file modes"
)
def test_a_read_only_home_can_be_read_and_refuses_changes_with_a_code(
    place: Place, capsys: pytest.CaptureFixture[str]
) -> None:
    """The home bind-mounted read-only (root ignores file modes, not a read-only mount; another
    user without mounts meets it through file modes): the store and the practice world are read
    (``runs``, ``trace``, ``status``, ``queue``, ``effects``), and a change to either is refused
    with a code before anything is written."""
    start_runs(capsys)
    assert run(capsys, "approve", "T-90104", "--as", "agent-7", "--role", "agent")[0] == 0
    before = place.snapshot()
    ro = place.scratch / "ro"
    ro.mkdir()
    if MOUNTS is None:
        mount = [f'mount --bind "{place.home}" "{ro}"', f'mount -o remount,bind,ro "{ro}"']
        unmount: list[str] = []
    else:
        ro = place.home
        mount, unmount = [f'chmod -R a-w "{ro}"'], [f'chmod -R u+w "{ro}"']
    mount.append(f'! touch "{ro}/probe" 2>/dev/null')  # read-only indeed
    commands = {
        "runs": ["runs", "--json"],
        "trace": ["trace", "T-90104", "--json"],
        "status": ["status", "--json"],
        "queue": ["queue", "--json"],
        "effects": ["effects", "--json"],
        "signal": ["signal", "P-1", "customer_kept_it", "--id", "e-1"],
        "reset": ["reset"],
    }
    result = in_namespace(place, mount, commands, unmount, ro, isolated=MOUNTS is None)
    for name in ("runs", "trace", "status", "queue", "effects"):
        code, out, err = result[name]
        assert code == 0, (name, out, err)
        assert "Traceback" not in out + err
    assert sorted(r["business_key"] for r in json.loads(result["runs"][1])) == ["P-1", "T-90104"]
    assert json.loads(result["trace"][1])["state"] == "refunded"
    made = [c["operation"] for c in json.loads(result["effects"][1])["changes"]]
    assert sorted(made) == ["create_label", "refund"]
    for name in ("signal", "reset"):
        refused(*result[name], 1, "R300")
        assert "read-only" in result[name][2]
    assert place.snapshot() == before


@needs_mount
def test_a_full_disk_shared_by_the_store_and_the_world_refuses_with_a_code_and_stays_whole(
    place: Place, capsys: pytest.CaptureFixture[str]
) -> None:
    """The home on a small tmpfs, filled: a new run, a decision and a signal are refused with a
    code, and afterwards (space freed) the store and the world are as they were: no run
    without its world, no decision half made; and the commands work again."""
    start_runs(capsys)
    before = place.snapshot()
    disk, copy = place.scratch / "disk", place.scratch / "copy"
    disk.mkdir()
    fill = [
        f'mount -t tmpfs -o size=2m tmpfs "{disk}"',
        f'cp -a "{place.home}/." "{disk}/"',
        f'cat /dev/zero > "{disk}/filler" 2>/dev/null || true',
    ]
    commands = {
        "run": ["run", REFUND, "--example", "T-90603"],
        "approve": ["approve", "T-90104", "--as", "agent-7", "--role", "agent"],
        "signal": ["signal", "P-1", "customer_kept_it", "--id", "e-1"],
    }
    free = [f'rm "{disk}/filler"', f'cp -a "{disk}/." "{copy}/"']
    result = in_namespace(place, fill, commands, free, disk)
    for name in commands:
        refused(*result[name], 1, "R300")
        assert "disk" in result[name][2]
    if place.url is None:
        shutil.rmtree(place.home)
        shutil.copytree(copy, place.home)
    else:
        shutil.copy(copy / "practice.db", place.home / "practice.db")
    assert place.snapshot() == before
    # the space is back: the same commands work
    assert run(capsys, "approve", "T-90104", "--as", "agent-7", "--role", "agent")[0] == 0
    assert run(capsys, "run", REFUND, "--example", "T-90603")[0] == 0
    assert world_rows(place.home)["changes"] == before["world"]["changes"] + 1  # the refund
