"""The adapters a runner resolves a spec's adapters to: through the binding when there is one
(:func:`bound`); else, on a practice store, the spec's own kinds in the practice world
(:func:`spec_kinds`); else none, every adapter refused with the reason (:func:`refusing`).

The session (the composition root) puts each together with its admission check
(:mod:`ratchet_runner.binding.check`) into the runner's
:class:`~ratchet_runner.engine.resolution.Resolution`: the binding stands beside the engine, and
imports none of it.
"""

from __future__ import annotations

from collections.abc import Callable

from ..adapters.base import Adapter
from ..errors import BindingError
from ..spec.model import Adapter as AdapterSpec
from . import implementations
from .files import Binding
from .implementations import Place

AdapterFactory = Callable[[AdapterSpec], Adapter]


def bound(binding: Binding, place: Place) -> AdapterFactory:
    """Each adapter of a spec as ``binding`` binds it (made at ``place``)."""

    def adapter_for(adapter: AdapterSpec) -> Adapter:
        entry = binding.entries.get(adapter.name)
        if entry is None:
            raise BindingError(f"adapter {adapter.name!r} has no binding in {binding.path}")
        return implementations.make(entry.implementation, entry.settings, adapter, place)

    return adapter_for


def spec_kinds(place: Place) -> AdapterFactory:
    """Each adapter of a spec as its own kind in the practice world (a practice store)."""

    def adapter_for(adapter: AdapterSpec) -> Adapter:
        return implementations.make("practice", {}, adapter, place)

    return adapter_for


def refusing(why: str) -> AdapterFactory:
    """No adapter at all: each is refused (:class:`~ratchet_runner.errors.BindingError`) with
    ``why``."""

    def refuse(adapter: AdapterSpec) -> Adapter:
        raise BindingError(f"adapter {adapter.name!r} has no binding: {why}")

    return refuse
