"""What the service's routes share: the :class:`Service` they work with, and how a library
error becomes an HTTP answer (its status, and the JSON body with the CLI's code)."""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from starlette.responses import JSONResponse

from ..errors import (
    RatchetError,
    RunError,
    RunNotFound,
    SpecError,
    StoreError,
    UsageError,
    VersionConflict,
)
from .operators import Config, load_config
from .sessions import Sessions

LOG = logging.getLogger(__name__)

if TYPE_CHECKING:
    from ..engine.runner import Runner
    from ..session import Session
    from ..spec.model import Spec
    from ..worker.pool import Pool
    from .metrics import Metrics


@dataclass
class Service:
    """What the application works with: the session (its store), the configuration, the specs
    it can start runs of (by workflow name, with their text), and its own workers."""

    session: Session
    config: Config
    specs: dict[str, tuple[Spec, str]] = field(default_factory=dict)
    workers: int = 0
    pool: Pool | None = None
    metrics: Metrics | None = None
    #: The clock webhook timestamps are checked against (the system's).
    now: Callable[[], float] = time.time
    #: What the service counted: webhooks delivered, duplicated, ignored, refused by reason.
    counts: Counter[str] = field(default_factory=Counter)
    #: The console's signed-in operators.
    sessions: Sessions = field(default_factory=Sessions)
    #: How often, at most, the configuration file is looked at for a change (seconds).
    config_interval: float = 1.0
    _local: threading.local = field(default_factory=threading.local)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _looked: float = 0.0
    _stamp: str | None = None

    def __post_init__(self) -> None:
        self._stamp = _stamp(self.config.path)

    def check_config(self) -> None:
        """Read the configuration file again if it changed since it was read (looked at once
        every :attr:`config_interval` seconds at most): an operator added, removed or given
        other roles counts from the next request, and the console's sessions of an operator
        removed or changed end. A file that no longer reads is not taken: the configuration
        before it stays, and the log says why."""
        path = self.config.path
        now = time.monotonic()
        if path is None or now - self._looked < self.config_interval:
            return
        with self._lock:
            self._looked = now
            stamp = _stamp(path)
            if stamp is None or stamp == self._stamp:
                return
            self._stamp = stamp
            try:
                fresh = load_config(path)
            except UsageError as exc:
                LOG.warning(
                    "ratchet serve: %s changed but was not taken (%s); the configuration before "
                    "it stays",
                    path,
                    exc.message,
                )
                return
            self.config = fresh
            self.sessions.keep_only(fresh.operators)
        LOG.info(
            "ratchet serve: %s read again: %d operator(s), %d sender(s)",
            path,
            len(fresh.operators),
            len(fresh.senders),
        )

    def count(self, what: str) -> None:
        with self._lock:
            self.counts[what] += 1

    def runner(self) -> Runner:
        """This thread's runner (made on first use)."""
        made: Runner | None = getattr(self._local, "runner", None)
        if made is None:
            made = self._local.runner = self.session.runner()
        return made


def _stamp(path: Path | None) -> str | None:
    """The SHA-256 of the file at ``path`` (None: no file it can read). Its content, not its
    time and size: a change that keeps both (an edit of the same length copied in with its
    time, as ``cp -p`` and ``rsync -t`` do) must count too, since a token revoked that way would
    otherwise stay valid. The file is small, and read at most once a second."""
    if path is None:
        return None
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


#: What a client is told of a bug (the log has its one line).
INTERNAL = "internal error (the service logged it); please report it"


def log_bug(exc: Exception) -> None:
    """A bug in a route: one line in the service's log (the traceback with RATCHET_DEBUG=1,
    re-raised)."""
    if os.environ.get("RATCHET_DEBUG"):
        raise exc
    LOG.error(
        "ratchet serve: internal error: %s: %s (set RATCHET_DEBUG=1 to see the traceback, and "
        "please report it)",
        type(exc).__name__,
        exc,
    )


def status_of(exc: RatchetError) -> int:
    """The HTTP status of a library error."""
    if isinstance(exc, RunNotFound):
        return 404
    if isinstance(exc, VersionConflict):  # RunBusy too
        return 409
    if isinstance(exc, StoreError):
        return 503
    if isinstance(exc, SpecError):
        return 422
    if isinstance(exc, UsageError):
        return 400
    if isinstance(exc, RunError):
        return 409
    return 500


def error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)
