"""The service's application served by uvicorn in a thread on a free local port, for tests."""

from __future__ import annotations

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
    """Three operators: an agent (may approve refunds), an ops engineer (operator actions), and
    a viewer (may do neither)."""

    def __init__(self, folder: Path) -> None:
        self.tokens: dict[str, str] = {}
        entries = []
        for name, roles in (
            ("ana", ["agent"]),
            ("olu", ["payments_ops"]),
            ("vic", ["viewer"]),
        ):
            token, digest = new_token()
            self.tokens[name] = token
            entries.append(config_entry(name, roles, digest))
        self.path = folder / "ratchet-serve.toml"
        self.path.write_text('trusted_proxies = ["127.0.0.1/32"]\n\n' + "\n".join(entries))

    def auth(self, name: str) -> dict[str, str]:
        return {"authorization": f"Bearer {self.tokens[name]}"}
