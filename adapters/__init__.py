"""Adapters: the one small protocol through which Ratchet changes the outside world.

:data:`KINDS` names the adapter implementations a spec's ``adapters:`` section may use; the
validator reports any other kind as an unknown adapter (E304).
"""

from __future__ import annotations

#: Adapter kinds a spec may name: the practice world's ``payments``, ``warehouse``, ``travel`` and
#: ``service`` (the generic service, whose operations the adapter's ``config`` declares);
#: ``http`` for a real provider that takes an ``Idempotency-Key`` header; ``noop``.
KINDS: tuple[str, ...] = ("payments", "warehouse", "travel", "service", "http", "noop")

__all__ = ["KINDS"]
