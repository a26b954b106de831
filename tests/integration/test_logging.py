"""The library logs through :mod:`logging`; the command line sends it to stderr, as text or as
JSON lines (``--log-format``), at the level ``--log-level`` names
(``ratchet_runner/cli/logs.py``)."""

from __future__ import annotations

import io
import json
import logging
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ratchet_runner.cli.logs import JsonFormatter, configure
from ratchet_runner.session import Session
from ratchet_runner.worker.pool import Pool
from tests.conftest import ROOT, ratchet_process


def _worker_lines(tmp_path: Path, *options: str) -> list[str]:
    """What a real ``ratchet worker`` says on stderr from its start to a SIGTERM: the first
    line is said once its signal handlers are in place, so the SIGTERM stops it as it says."""
    url = f"sqlite:///{tmp_path / 'ratchet.db'}"
    process = ratchet_process(tmp_path / "home", url, "worker", *options, capture=True)
    try:
        assert process.stderr is not None
        first = process.stderr.readline()
        process.send_signal(signal.SIGTERM)
        _, rest = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 0, first + rest
    return [line for line in (first + rest).splitlines() if line]


def test_a_worker_logs_json_lines_with_time_level_logger_and_message(tmp_path: Path) -> None:
    lines = _worker_lines(tmp_path, "--log-format", "json", "--poll", "0.1")
    records = [json.loads(line) for line in lines]  # every line is one JSON object
    assert len(records) >= 2
    assert all(set(r) == {"time", "level", "logger", "message"} for r in records), records
    first, last = records[0], records[-1]
    assert first["logger"] == "ratchet_runner.worker.pool"
    assert first["level"] == "info"
    assert first["message"].startswith("worker ")
    assert first["message"].endswith("1 thread(s); SIGTERM or Ctrl-C stops")
    assert first["time"].endswith("+00:00")
    assert "stopped" in last["message"] or "pass" in last["message"], last


def test_a_worker_logs_plain_lines_by_default_and_only_warnings_at_warning(
    tmp_path: Path,
) -> None:
    """At ``warning`` the info lines (its start, its passes) are not shown, and a warning is: a
    store it cannot open (its folder is missing) is retried, and said so, until it stops."""
    plain = _worker_lines(tmp_path, "--poll", "0.1")
    assert plain[0].startswith("worker ")
    assert plain[0].endswith("SIGTERM or Ctrl-C stops")
    missing = tmp_path / "no such folder"
    quiet = _worker_lines(missing, "--poll", "0.1", "--log-level", "warning")
    assert quiet
    assert all("store unreachable" in line for line in quiet), quiet


def test_the_log_format_is_read_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RATCHET_LOG_FORMAT", "json")
    lines = _worker_lines(tmp_path, "--poll", "0.1")
    assert json.loads(lines[0])["logger"] == "ratchet_runner.worker.pool"


def test_a_pool_logs_under_its_module_and_a_given_log_receives_lines_instead(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    configure("info", "json")
    try:
        with Session(f"sqlite:///{tmp_path / 'ratchet.db'}") as session:
            pool = Pool(session.runner_factory())
            pool.note("a line")
            said: list[str] = []
            Pool(session.runner_factory(), log=said.append).note("another")
        record = json.loads(capsys.readouterr().err.strip())
        assert record["logger"] == "ratchet_runner.worker.pool"
        assert record["message"] == f"worker {pool.owner}: a line"
        assert len(said) == 1
        assert said[0].endswith(": another")
    finally:
        configure()


def test_the_library_installs_no_handler_of_its_own() -> None:
    """Embedded, the library leaves its records to the application's logging configuration."""
    code = (
        "import logging, ratchet_runner, ratchet_runner.worker.pool, ratchet_runner.session;"
        "print(len(logging.getLogger('ratchet_runner').handlers))"
    )
    shown = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert shown.stdout.strip() == "0"


def test_configured_twice_one_handler_remains() -> None:
    configure("debug", "text")
    configure("info", "json")
    try:
        logger = logging.getLogger("ratchet_runner")
        ours = [h for h in logger.handlers if type(h).__name__ == "_Stderr"]
        assert len(ours) == 1  # (pytest's own capture handlers aside)
        assert isinstance(ours[0].formatter, JsonFormatter)
        assert logger.level == logging.INFO
    finally:
        configure()


def test_a_record_goes_to_the_stderr_of_its_moment_though_the_one_before_was_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The command line run in-process (a test's runner, an application calling ``main``)
    leaves its handler behind; the stream it wrote to may be closed since. A record after that
    is written to today's stderr, and logging it raises nothing (it made the service answer
    500 to every request that logged)."""
    configure()
    try:
        before = io.TextIOWrapper(io.BytesIO())  # as a capture is (a closed one cannot flush)
        monkeypatch.setattr(sys, "stderr", before)
        logging.getLogger("ratchet_runner.serve.service").error("the first")
        before.close()
        now = io.StringIO()
        monkeypatch.setattr(sys, "stderr", now)
        logging.getLogger("ratchet_runner.serve.service").error("the second")
        assert now.getvalue() == "the second\n"
    finally:
        configure()
