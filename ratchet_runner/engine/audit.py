"""Where a person's action came from, recorded with it in the run's history.

A decision (``approved``/``rejected``) or an operator action (``operator``) records who, in what
role and when; a signal records its ID. A front end that knows more says so for the actions it
carries out within :func:`acting_from`; each such event then also carries ``via`` and ``from``:
the service's API ``http`` and the request's client address (behind trusted proxies), its
webhooks ``webhook`` and the sender's name. The CLI says nothing: its events carry neither.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_ORIGIN: ContextVar[dict[str, str] | None] = ContextVar("ratchet_origin", default=None)


@contextmanager
def acting_from(via: str, address: str) -> Iterator[None]:
    """Within the block, every decision and operator action records ``via`` and ``from``."""
    token = _ORIGIN.set({"via": via, "from": address})
    try:
        yield
    finally:
        _ORIGIN.reset(token)


def origin() -> dict[str, str]:
    """What the current action records of its origin (empty outside :func:`acting_from`)."""
    return dict(_ORIGIN.get() or {})
