"""The service's application served by uvicorn in a thread on a free local port, for tests."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import uvicorn

from ratchet_runner.serve.app import create_app
from ratchet_runner.serve.operators import config_entry, new_token
from ratchet_runner.serve.run import listening_socket
from ratchet_runner.serve.service import Service


@contextmanager
def serve_command(home: Path, config: Path, cwd: Path, *args: str) -> Iterator[str]:
    """The real ``ratchet serve`` on a free port over ``home``'s store, with ``config`` and the
    further ``args``, until the block ends; yields its base URL. It must stop on SIGTERM with no
    traceback in its log."""
    from tests.conftest import RATCHET

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    env = {**os.environ, "RATCHET_HOME": str(home), "RATCHET_SERVE_CONFIG": str(config)}
    for name in ("RATCHET_DB", "RATCHET_BINDINGS", "RATCHET_NOW"):
        env.pop(name, None)
    server = subprocess.Popen(
        [RATCHET, "serve", "--port", str(port), *args],
        env=env,
        cwd=cwd,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stderr is not None
        line = server.stderr.readline()
        assert f"serving on http://127.0.0.1:{port}" in line, line
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        _, err = server.communicate(timeout=30)
    assert server.returncode in (0, -15), err
    assert "Traceback" not in err


@contextmanager
def serving(service: Service) -> Iterator[str]:
    """Serve ``service`` until the block ends; yields its base URL."""
    server = uvicorn.Server(uvicorn.Config(create_app(service), log_level="warning", lifespan="on"))
    sock = listening_socket("127.0.0.1", 0)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]})
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            assert time.monotonic() < deadline
            assert thread.is_alive()
            time.sleep(0.01)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join()
        sock.close()


class People:
    """Four operators: an agent (may approve refunds up to 100), an ops engineer (operator
    actions), a viewer (may do neither), and a team lead who is an agent too (may approve any
    refund, in the role of team lead)."""

    def __init__(self, folder: Path) -> None:
        self.tokens: dict[str, str] = {}
        entries = []
        for name, roles in (
            ("ana", ["agent"]),
            ("olu", ["payments_ops"]),
            ("vic", ["viewer"]),
            ("lead", ["agent", "team_lead"]),
        ):
            token, digest = new_token()
            self.tokens[name] = token
            entries.append(config_entry(name, roles, digest))
        self.path = folder / "ratchet-serve.toml"
        self.path.write_text('trusted_proxies = ["127.0.0.1/32"]\n\n' + "\n".join(entries))

    def auth(self, name: str) -> dict[str, str]:
        return {"authorization": f"Bearer {self.tokens[name]}"}
