"""What a process may watch of the calls it makes: each call's effect, outcome and duration.

Metrics (``ratchet serve``, ``ratchet worker --metrics-port``) register an observer; the effect
protocol reports every call to a provider once it has its outcome. An observer that fails is
ignored: watching never changes what a call does.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

#: observer(workflow, effect, outcome, seconds): the outcome as the protocol classified it
#: (``done``, ``refused``, ``escalate``, ``transient``, ``ambiguous``).
CallObserver = Callable[[str, str, str, float], None]

_observers: list[CallObserver] = []
_lock = threading.Lock()


def watch_calls(observer: CallObserver) -> Callable[[], None]:
    """Report every call to ``observer`` from now on; returns what stops it."""
    with _lock:
        _observers.append(observer)

    def stop() -> None:
        with _lock, contextlib.suppress(ValueError):
            _observers.remove(observer)

    return stop


def called(workflow: str, effect: str, outcome: str, seconds: float) -> None:
    """Tell every observer of one call."""
    for observer in list(_observers):
        with contextlib.suppress(Exception):
            observer(workflow, effect, outcome, seconds)
