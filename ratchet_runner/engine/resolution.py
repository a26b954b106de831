"""How a runner resolves its adapters: the binding a run records, and who may drive a run.

A runner is made with a :class:`Resolution`, which the session builds from the binding it found
(``ratchet_runner.binding.files``): the **stamp** every run it starts records (the binding's name
and digest; on a practice store without a binding, ``{"name": None, "digest": None}``: the spec's
own kinds), why it can resolve **no adapter at all** (a store that is not a practice store, and no
binding), and the check (**admit**) a spec must pass before a run of it is created (every adapter
bound, every operation and lookup implemented). A runner made with the default resolution (a test,
a benchmark, ``ratchet check``, an embedding that passes its own adapter factory) records nothing
and drives any run.

:func:`refusal` says why a runner must not drive a run: the run recorded another binding
(:class:`~ratchet_runner.errors.BindingMismatch`: a worker leaves the run to a worker that has it,
a command changes nothing), or the runner has no binding at all
(:class:`~ratchet_runner.errors.BindingError`: a worker parks the run for a person with the reason,
a command changes nothing). A run that recorded no binding (one started by a runner with the
default resolution) is driven by whoever drives it, through its own adapters.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..adapters.base import Semantics
from ..errors import BindingError, BindingMismatch
from ..spec.model import Adapter as AdapterSpec
from ..spec.model import Spec
from ..store.records import RunRecord

#: The stamp of a run started on a practice store without a binding: the spec's own kinds.
SPEC_KINDS: Mapping[str, Any] = {"name": None, "digest": None}


@dataclass(frozen=True)
class Resolution:
    """What a runner's adapters resolve through (see the module docstring). ``stamp``: what a run
    started by the runner records (None: nothing); ``missing``: why the runner can resolve no
    adapter (None: it can); ``admit``: raises before a run of a spec is created when the spec
    cannot be run through these adapters; ``semantics``: what the binding declares of the
    provider behind a spec's adapter (``dedupe``, ``commits_within``), None when it says
    nothing (the adapter's own word then stands)."""

    stamp: Mapping[str, Any] | None = None
    missing: str | None = None
    admit: Callable[[Spec], None] | None = None
    semantics: Callable[[AdapterSpec], Semantics | None] | None = None


def recorded(run: RunRecord) -> Mapping[str, Any] | None:
    """The binding ``run`` recorded when it was created (None when it recorded none)."""
    stamp = run.context.get("binding")
    return stamp if isinstance(stamp, Mapping) else None


def describe(stamp: Mapping[str, Any] | None) -> str:
    """A binding stamp for a person: ``binding 'prod' (sha256 3f2a9c0e1b2d…)``."""
    if stamp is None:
        return "no binding recorded"
    if stamp.get("digest") is None:
        return "the spec's own kinds (a practice store, no binding)"
    return f"binding {stamp.get('name')!r} (sha256 {str(stamp.get('digest'))[:12]}…)"


def refusal(resolution: Resolution, run: RunRecord, spec: Spec) -> BindingError | None:
    """Why a runner with ``resolution`` must not drive ``run`` (of ``spec``, the version it is
    pinned to), or None when it may. A spec with no adapters needs no binding."""
    if not spec.adapters:
        return None
    if resolution.missing is not None:
        return BindingError(f"run {run.id} cannot be driven here: {resolution.missing}")
    theirs = recorded(run)
    if theirs is None or resolution.stamp is None:
        return None
    if theirs.get("digest") == resolution.stamp.get("digest"):
        return None
    return BindingMismatch(
        f"run {run.id} started under {describe(theirs)}; this process resolves adapters through "
        f"{describe(resolution.stamp)}: it is left to a process that has that binding "
        "(--bindings FILE or RATCHET_BINDINGS); nothing changed"
    )
