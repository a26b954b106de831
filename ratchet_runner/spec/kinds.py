"""The adapter kinds a spec may declare, and what the practice kinds offer: the vocabulary of a
spec's ``adapters:`` section, as the validator checks it.

A kind is a word of the spec language, like a state's ``kind``: ``payments``, ``warehouse``,
``travel``, ``service`` (the generic service, whose operations the adapter's ``config`` declares),
``http`` (a real provider that takes an ``Idempotency-Key`` header) and ``noop``. For each kind
the practice world stands in for, this module names the operations it offers and the receipt
field each returns, so that ``ratchet validate`` can say "the practice world's travel has no
operation 'hold_car'" without loading the practice world. The practice world implements them
(``ratchet_runner/adapters/practice/services.py``); ``tests/unit/test_layering.py`` pins the
two to agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Adapter kinds a spec may name (E304 for any other).
KINDS: tuple[str, ...] = ("payments", "warehouse", "travel", "service", "http", "noop")

#: The generic service: any operation its adapter declares under ``config.operations``.
GENERIC = "service"

#: The operations of each fixed practice kind, each with the reply field that identifies the
#: change it makes (its receipt).
PRACTICE_OPERATIONS: dict[str, dict[str, str]] = {
    "payments": {"refund": "refund_id", "charge": "charge_id"},
    "warehouse": {"create_label": "label_id", "reship": "reship_id"},
    "travel": {
        "hold_flight": "hold_id",
        "hold_hotel": "hold_id",
        "confirm": "itinerary_id",
        "release": "release_id",
    },
}


def operation_names(kind: str, config: Mapping[str, Any] | None) -> tuple[str, ...] | None:
    """The operations an adapter of ``kind`` offers in the practice world; None when any name
    will do (``noop``) or ``kind`` is no practice service (``http``, an unknown kind)."""
    if kind == GENERIC:
        operations = (config or {}).get("operations")
        return tuple(operations) if isinstance(operations, Mapping) else ()
    offered = PRACTICE_OPERATIONS.get(kind)
    return None if offered is None else tuple(offered)


def receipt_field(kind: str, name: str) -> str | None:
    """The reply field that identifies the change ``kind``'s operation ``name`` makes in the
    practice world (``noop``: ``id``; a generic operation: ``<name>_id``); None for no practice
    service."""
    if kind == "noop":
        return "id"
    if kind == GENERIC:
        return f"{name}_id"
    return PRACTICE_OPERATIONS.get(kind, {}).get(name)
