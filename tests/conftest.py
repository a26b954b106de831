"""Shared fixtures: stores on SQLite and PostgreSQL, the practice world, and runners.

The PostgreSQL store tests use ``$RATCHET_TEST_PG`` (default: the local server at
127.0.0.1:5432, database ``test``, user ``postgres``). Outside CI they are skipped when no server
answers; in CI (``CI`` set) an unreachable server fails them instead, so they can never be
skipped silently where they must run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from ratchet_runner.adapters.practice import PracticeWorld
from ratchet_runner.clock import FakeClock
from ratchet_runner.engine.runner import Runner, RunnerOptions
from ratchet_runner.review.naive import MARKS, Strategy, step_for
from ratchet_runner.spec.model import Spec
from ratchet_runner.spec.validate import load_spec, load_spec_text
from ratchet_runner.store.store import Store

ROOT = Path(__file__).resolve().parent.parent
SPECS = ROOT / "specs"
#: The shipped binding of every shipped spec's (and fixture's) adapters to the practice world: what
#: a store that is not a practice store needs to run them.
PRACTICE_BINDING = SPECS / "practice.toml"
PG_URL = os.environ.get("RATCHET_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def postgres_url() -> str:
    """A URL for a new, empty schema of the test PostgreSQL (so that concurrent test runs never
    see each other's tables); skip (or, in CI, fail) when no server answers."""
    schema = f"ratchet_test_{uuid.uuid4().hex[:12]}"
    engine = create_engine(PG_URL, connect_args={"connect_timeout": 3})
    try:
        with engine.begin() as conn:
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    except Exception as exc:
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL at {PG_URL} is required in CI: {exc}")
        reason = str(exc).splitlines()[0]
        pytest.skip(
            f"no PostgreSQL at {PG_URL} ({reason}): install it with 'apt-get install postgresql' "
            "(Debian, Ubuntu) or 'brew install postgresql' (macOS), with a database 'test' that "
            "user 'postgres' reaches by trust, or set RATCHET_TEST_PG to a server of yours"
        )
    finally:
        engine.dispose()
    _SCHEMAS.append(schema)
    separator = "&" if "?" in PG_URL else "?"
    return f"{PG_URL}{separator}options=-csearch_path%3D{schema}"


_SCHEMAS: list[str] = []


#: The system programs some tests need, and the Debian package (and Homebrew formula) that has
#: each: outside CI such a test is skipped with a reason that says what to install; in CI, where
#: ``.ci/run`` installs them, it fails instead, so it can never be skipped where it must run.
PROGRAMS = {
    "dot": ("graphviz", "graphviz", "Graphviz's dot draws SVG, PNG and PDF diagrams"),
    "chromium": ("chromium", "chromium", "the console's browser tests drive Chromium"),
    "chromedriver": ("chromium-driver", "chromedriver", "Selenium drives Chromium through it"),
}


def require_program(name: str) -> None:
    """Skip the calling test (or, in CI, fail it) unless the system program ``name`` is on the
    PATH, naming what to install."""
    if shutil.which(name):
        return
    debian, brew, why = PROGRAMS[name]
    message = (
        f"{name} is not installed ({why}): install it with 'apt-get install {debian}' "
        f"(Debian, Ubuntu) or 'brew install {brew}' (macOS)"
    )
    if os.environ.get("CI"):
        pytest.fail(f"{message}; CI must run this test (.ci/run installs it)")
    pytest.skip(message)


@pytest.fixture
def dot() -> None:
    """A test that draws with Graphviz's dot: skipped outside CI when it is not installed."""
    require_program("dot")


def connection_closed(dbapi_connection: Any) -> bool:
    """Whether a driver's own connection (psycopg's or sqlite3's) has been closed."""
    if hasattr(dbapi_connection, "closed"):
        return bool(dbapi_connection.closed)
    try:
        dbapi_connection.execute("SELECT 1")
    except Exception:
        return True
    return False


#: Lines a test wants in the run's closing summary (the simulation's schedule counts and seeds).
SUMMARY: list[str] = []


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for line in SUMMARY:
        terminalreporter.write_line(line)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """Under pytest-xdist (``make test``), the summary lines a worker's tests kept, brought back
    to the process that prints the summary (they were lost there before)."""
    SUMMARY.extend(getattr(node, "workeroutput", {}).get("ratchet_summary", []))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Hand this worker's summary lines to the controller (under pytest-xdist); drop the
    schemas this session made."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["ratchet_summary"] = list(SUMMARY)
    if not _SCHEMAS:
        return
    engine = create_engine(PG_URL, connect_args={"connect_timeout": 3})
    try:  # one transaction per schema: dropping them all in one takes more locks than allowed
        for schema in _SCHEMAS:
            with engine.begin() as conn:
                conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    finally:
        engine.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty store URL: once on SQLite, once on PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ratchet.db'}"
    return postgres_url()


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    opened = Store(store_url)
    yield opened
    opened.close()


@pytest.fixture
def world(tmp_path: Path) -> PracticeWorld:
    return PracticeWorld(tmp_path / "practice.db")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


MakeRunner = Callable[..., Runner]


@pytest.fixture
def make_runner(store: Store, world: PracticeWorld, clock: FakeClock) -> MakeRunner:
    def make(
        strategy: Strategy = "ratchet",
        interrupt: Callable[[str], None] | None = None,
        options: RunnerOptions | None = None,
    ) -> Runner:
        return Runner(
            store,
            lambda adapter: world.adapter(adapter.kind),
            clock,
            steps=step_for,
            marks=MARKS if strategy == "naive" else None,
            interrupt=interrupt,
            options=options,
        )

    return make


def spec_and_text(name: str, timeout: str | None = None) -> tuple[Spec, str]:
    """A shipped spec and its exact text; with ``timeout`` (a duration such as ``200ms``), every
    effect's timeout set to it: a worker or command trusts its lease only for a call that ends
    (by its timeout) well before the lease does, so tests with short leases need short timeouts."""
    path = SPECS / f"{name}.yaml"
    text = path.read_text(encoding="utf-8")
    if timeout is None:
        return load_spec(path), text
    text, count = re.subn(r"(?m)^(    timeout: )\S+$", rf"\g<1>{timeout}", text)
    assert count, f"{name}.yaml has no effect timeouts to set"
    return load_spec_text(text, str(path)), text


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run ``ratchet ARGS...`` in-process: its exit status, stdout and stderr."""
    from ratchet_runner import cli

    try:
        cli.main(list(args))
    except SystemExit as exited:
        code = int(exited.code or 0)
    else:
        code = 0
    out, err = capsys.readouterr()
    return code, out, err


RATCHET = str(Path(sys.executable).with_name("ratchet"))


def ratchet_process(
    home: Path,
    store_url: str,
    *args: str,
    now: str | None = None,
    capture: bool = False,
    bindings: Path = PRACTICE_BINDING,
) -> subprocess.Popen[str]:
    """Start ``ratchet ARGS...`` as a real process on this home and store (``now`` sets
    ``RATCHET_NOW``, allowed on this store, which is not a practice store, by
    ``RATCHET_ALLOW_CLOCK_OVERRIDE``; its adapters bound to the practice world by
    :data:`PRACTICE_BINDING`, or by ``bindings``; ``capture`` keeps stdout and stderr for
    ``communicate``)."""
    env = {
        **os.environ,
        "RATCHET_HOME": str(home),
        "RATCHET_DB": store_url,
        "RATCHET_BINDINGS": str(bindings),
    }
    env.pop("RATCHET_NOW", None)
    env.pop("RATCHET_ALLOW_CLOCK_OVERRIDE", None)
    if now is not None:
        env["RATCHET_NOW"] = now
        env["RATCHET_ALLOW_CLOCK_OVERRIDE"] = "1"
    sink = subprocess.PIPE if capture else subprocess.DEVNULL
    return subprocess.Popen(
        [RATCHET, *args], stdout=sink, stderr=sink, env=env, cwd=ROOT, text=True
    )
