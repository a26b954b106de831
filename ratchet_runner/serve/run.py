"""Running the service: its socket, uvicorn, and what it says when it listens."""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence
from pathlib import Path

import uvicorn

from ..errors import UsageError
from ..review.naive import step_for
from ..session import Session
from .app import create_app, load_specs
from .operators import find_config, load_config
from .service import Service


def serve(
    *,
    host: str,
    port: int,
    db: str | None,
    bindings: str | None,
    config: str | Path | None,
    specs: Sequence[str],
    workers: int,
    say: Callable[[str], None],
) -> None:
    """Serve until SIGTERM or Ctrl-C: bind first (so a port in use is a clear error, and port 0
    picks a free one), then say the URL, then hand the socket to uvicorn."""

    settings = load_config(find_config(config))
    served = load_specs(specs)
    with Session(db, bindings=bindings, steps=step_for) as session:  # naive runs stay naive
        session.store  # noqa: B018 -- opened (and created) before the first request
        app = create_app(Service(session, settings, served, workers))
        sock = listening_socket(host, port)
        family = sock.family
        bound = sock.getsockname()[1]
        shown = f"[{host}]" if family == socket.AF_INET6 else host
        operators = len(settings.operators)
        say(
            f"serving on http://{shown}:{bound} ({operators} operator(s) from {settings.path}; "
            f"{len(served)} workflow(s); {workers} worker thread(s)); SIGTERM or Ctrl-C stops"
        )
        server = uvicorn.Server(
            uvicorn.Config(app, log_level="warning", lifespan="on", server_header=False)
        )
        try:
            server.run(sockets=[sock])
        finally:
            sock.close()


def listening_socket(host: str, port: int) -> socket.socket:
    """The service's socket, bound and listening (a usage error when it cannot be). Made with
    its protocol named (``IPPROTO_TCP``): asyncio turns Nagle's algorithm off on the
    connections it accepts only then, and with it on a reply's body waited for the client's
    delayed ACK of its headers, 40 ms a request."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(128)
    return sock
