"""An example's ``world:`` fixture, checked before the practice world writes any of it.

``ratchet validate`` checks a spec's fixtures against the spec schema (their keys and shapes,
each fault's kind) and its effects (each fault's effect), so a spec that validates has fixtures
the practice world takes. :func:`check_fixture` is the practice world's own last line of
defence, for whoever seeds it without a validated spec (the Python API, a test): anything it
could not use is a :class:`~ratchet_runner.errors.WorldError` (``R202``) naming it, raised
before anything is written, never a ``TypeError`` halfway through.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...errors import WorldError
from .faults import check_fault_calls

#: The keys of a fixture, of an order, and of a fault.
FIXTURE_KEYS = ("orders", "stock", "faults")
ORDER_KEYS = ("order", "item", "sku", "paid", "currency")
FAULT_KEYS = ("effect", "kind", "calls", "times")


def check_fixture(fixture: Any) -> None:
    """Raise :class:`WorldError` unless ``fixture`` is a world fixture the practice world can
    seed: ``orders`` (a list of orders: ``order``, ``paid``, ``currency``, optionally ``item``
    and ``sku``), ``stock`` (whole numbers of units, none below 0, by SKU) and ``faults``."""
    if not isinstance(fixture, Mapping):
        raise WorldError("a world fixture is a mapping")
    _known("world fixture", fixture, FIXTURE_KEYS)
    for order in _list(fixture, "orders"):
        if not isinstance(order, Mapping):
            raise WorldError(f"an order in the world fixture is a mapping, not {order!r}")
        _known("order", order, ORDER_KEYS)
        if not _text(order.get("order")) or not _text(order.get("currency")):
            raise WorldError(f"an order needs 'order' and 'currency' (text): {dict(order)!r}")
        if not _number(order.get("paid")) or order["paid"] < 0:
            raise WorldError(f"an order needs 'paid', a number not below 0: {dict(order)!r}")
        if any(key in order and not isinstance(order[key], str) for key in ("item", "sku")):
            raise WorldError(f"an order's 'item' and 'sku' are text: {dict(order)!r}")
    stock = fixture.get("stock", {})
    if not isinstance(stock, Mapping):
        raise WorldError("the world fixture's stock is a mapping of SKU to units")
    for sku, units in stock.items():
        if not _whole(units) or units < 0:
            raise WorldError(f"stock of {sku!r} is {units!r}: a whole number, not below 0")
    for fault in _list(fixture, "faults"):
        check_fault(fault)


def check_fault(fault: Any) -> None:
    """Raise :class:`WorldError` unless ``fault`` is a fault the practice world can inject:
    ``effect``, a known ``kind``, and either ``calls`` (call numbers from 1) or ``times`` (from
    1), or neither (the next call)."""
    if not isinstance(fault, Mapping) or not _text(fault.get("effect")) or "kind" not in fault:
        raise WorldError(f"a fault needs 'effect' and 'kind': {fault!r}")
    _known("fault", fault, FAULT_KEYS)
    check_fault_calls(fault["kind"], fault.get("calls"), fault.get("times"))


def _known(what: str, value: Mapping[str, Any], keys: tuple[str, ...]) -> None:
    unknown = sorted(str(key) for key in value if key not in keys)
    if unknown:
        raise WorldError(f"unknown {what} keys: {', '.join(unknown)} (known: {', '.join(keys)})")


def _list(fixture: Mapping[str, Any], key: str) -> list[Any]:
    value = fixture.get(key, [])
    if not isinstance(value, list):
        raise WorldError(f"the world fixture's {key} are a list, not {value!r}")
    return value


def _text(value: Any) -> bool:
    return isinstance(value, str) and value != ""


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
