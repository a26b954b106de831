"""Names and places shared by the command line and the runner, kept free of heavy imports so
that ``ratchet validate`` starts quickly."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .errors import UsageError

DEFAULT_HOME = ".ratchet"
ENV_DB = "RATCHET_DB"
ENV_HOME = "RATCHET_HOME"

#: Points at which ``--interrupt`` ends the process (as SIGKILL would).
INTERRUPT_POINTS = ("before-write", "after-write", "after-receipt")


def json_object(text: str) -> dict[str, Any]:
    """``text`` as a JSON object (``--data``); else a :class:`UsageError` that says why."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise UsageError("must be a JSON object")
    return value


def interrupt_point(value: str) -> str:
    """``POINT[:EFFECT]`` as ``--interrupt`` takes it, checked: POINT is one of
    :data:`INTERRUPT_POINTS` (else a :class:`UsageError`)."""
    point = value.partition(":")[0]
    if point not in INTERRUPT_POINTS:
        raise UsageError(f"{point!r} is not one of {', '.join(INTERRUPT_POINTS)}")
    return value


#: A run's statuses (docs/explanation/lifecycle.md).
RUN_STATUSES = ("running", "waiting", "done", "needs_person", "paused", "cancelled")

#: The operator controls (``ratchet ops ACTION``).
OPERATOR_ACTIONS = ("pause", "resume", "cancel", "retry", "reconcile", "compensate")


def home() -> Path:
    """Where the embedded store and the practice world live: ``$RATCHET_HOME``, else
    ``./.ratchet``."""
    return Path(os.environ.get(ENV_HOME) or DEFAULT_HOME)
