"""Resolving a spec's adapters for a runner: through the binding when there is one; else, on a
practice store, through the spec's own kinds in the practice world; else through none, so that
every run is refused before it is created. Each way comes with the admission check
(:class:`~ratchet_runner.engine.resolution.Resolution`) a spec passes before a run of it starts.
"""

from __future__ import annotations

from collections.abc import Callable

from ratchet_runner.adapters.base import Adapter

from ..engine.resolution import SPEC_KINDS, Resolution
from ..errors import BindingError
from ..spec.model import Adapter as AdapterSpec
from . import implementations
from .check import admit, check, kinds_unserved, unbound
from .files import Binding
from .implementations import Place

AdapterFactory = Callable[[AdapterSpec], Adapter]


def resolve(
    binding: Binding | None,
    *,
    practice: bool,
    place: Place,
    looked: str,
    store: str,
) -> tuple[AdapterFactory, Resolution]:
    """The adapter factory and resolution of a runner: through ``binding`` when there is one;
    else, on a ``practice`` store, the spec's own kinds in the practice world; else none, every
    run refused before it is created (``looked``: where bindings were looked for; ``store``: the
    store's redacted URL, for the message)."""
    if binding is not None:
        return _bound(binding, place), Resolution(
            stamp=binding.stamp,
            admit=lambda spec: admit(check(spec, binding, place)),
            semantics=lambda adapter: binding.semantics_of(adapter.name),
        )
    if practice:
        return _spec_kinds(place), Resolution(
            stamp=SPEC_KINDS, admit=lambda spec: admit(kinds_unserved(spec, looked))
        )
    why = (
        f"no binding file was found (looked for {looked}), and the store {store} is not a "
        "practice store: only a practice store runs a spec's adapters as their kinds"
    )

    def refuse(adapter: AdapterSpec) -> Adapter:
        raise BindingError(f"adapter {adapter.name!r} has no binding: {why}")

    return refuse, Resolution(missing=why, admit=lambda spec: admit(unbound(spec, why)))


def _bound(binding: Binding, place: Place) -> AdapterFactory:
    def adapter_for(adapter: AdapterSpec) -> Adapter:
        entry = binding.entries.get(adapter.name)
        if entry is None:
            raise BindingError(f"adapter {adapter.name!r} has no binding in {binding.path}")
        return implementations.make(entry.implementation, entry.settings, adapter, place)

    return adapter_for


def _spec_kinds(place: Place) -> AdapterFactory:
    def adapter_for(adapter: AdapterSpec) -> Adapter:
        return implementations.make("practice", {}, adapter, place)

    return adapter_for
