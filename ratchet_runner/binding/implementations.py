"""The implementations a binding may name for an adapter: what each offers, and how it is made.

Built in:

- ``http``: :class:`~ratchet_runner.adapters.http.HttpAdapter`, its settings exactly as
  :func:`~ratchet_runner.adapters.http.settings.parse_settings` reads them;
- ``python``: a factory named by ``factory = "package.module:callable"``, called with the other
  settings (a plain dict) and returning an adapter;
- ``noop``: :class:`~ratchet_runner.adapters.noop.NoopAdapter`, which changes nothing (no
  settings);
- ``practice``: the practice world's service of the spec adapter's kind (or of ``service``).

Any other name is a **plugin kind**: one an installed distribution registers under the
entry-point group :data:`GROUP` (``ratchet.adapters``), whose entry point loads a factory called
like a ``python`` one. A factory (or, if the factory says nothing, the adapter it makes) declares
what it implements: ``operations``, the names of the operations it calls (required), and
``lookups``, the names of the lookups it answers (optional; without it, any); and, optionally,
``receipts`` (operation name → the receipt field its ``Done`` holds) and ``lookup_receipts``
(lookup name → the field its ``Found`` holds; a lookup with none returns the field of the
operation it looks up). :func:`offer` reads that, so that a binding can be checked against a
spec before anything runs (a receipt field the spec does not expect would make every reply
"malformed" and cost a lookup per call: ``B205``, as for ``http``); :func:`make` makes the
adapter. Both raise :class:`~ratchet_runner.errors.BindingError` naming what is wrong.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import BindingError, RatchetError

if TYPE_CHECKING:  # imported where used: `ratchet validate` reads no installed metadata
    from importlib.metadata import EntryPoint

    from ..adapters.base import Adapter, Semantics
    from ..adapters.practice import PracticeWorld
    from ..spec.model import Adapter as AdapterSpec

#: The entry-point group under which an installed distribution registers adapter kinds.
GROUP = "ratchet.adapters"
#: The implementations Ratchet itself provides (a plugin cannot take these names).
BUILT_IN = ("http", "python", "noop", "practice")
#: The implementations that change nothing real: binding a ``kind: noop`` adapter to any other
#: needs ``replaces_noop = true``.
NOT_REAL = ("noop", "practice")


@dataclass(frozen=True)
class Place:
    """What making an adapter may need: the binding file's folder (relative files of the HTTP
    settings), where secrets are read from, and the practice world (opened when first asked
    for). ``made`` collects the adapters made, so that their owner can close them."""

    base_dir: Path
    environ: Mapping[str, str]
    world: Callable[[], PracticeWorld]
    made: list[Any] = field(default_factory=list)


@dataclass(frozen=True)
class Offer:
    """What an implementation offers: the operations it implements and the lookups it answers
    (None: any name), and, where it says, the receipt field each returns (a lookup that names
    none returns the field of the operation it looks up, and has no entry)."""

    operations: frozenset[str] | None
    lookups: frozenset[str] | None
    receipts: Mapping[str, str] = field(default_factory=dict)
    lookup_receipts: Mapping[str, str] = field(default_factory=dict)
    #: ``semantics(operation, lookup)``: what the implementation itself says of the provider
    #: (None: nothing; a binding's ``dedupe`` and ``commits_within`` then must).
    semantics: Callable[[str, str | None], Semantics | None] | None = None


def plugin_kinds() -> dict[str, list[EntryPoint]]:
    """The kinds installed distributions register under :data:`GROUP`, each with its entry
    points (more than one: two distributions claim the same kind)."""
    from importlib.metadata import entry_points

    kinds: dict[str, list[EntryPoint]] = {}
    for point in entry_points(group=GROUP):
        kinds.setdefault(point.name, []).append(point)
    return kinds


def known(kind: str) -> bool:
    """Whether ``kind`` is built in or registered by an installed plugin."""
    return kind in BUILT_IN or kind in plugin_kinds()


def offer(kind: str, settings: Mapping[str, Any], adapter: AdapterSpec, place: Place) -> Offer:
    """What implementation ``kind`` with ``settings`` offers for the spec's ``adapter``."""
    if kind == "http":
        from ..adapters.http import lookup_semantics
        from ..adapters.http.settings import parse_settings

        parsed = parse_settings(dict(settings), name=adapter.name, base_dir=place.base_dir)
        return Offer(
            frozenset(parsed.operations),
            frozenset(parsed.lookups),
            {name: op.receipt_field for name, op in parsed.operations.items()},
            {  # a lookup without its own receipt field returns the operation's
                name: lookup.receipt_field
                for name, lookup in parsed.lookups.items()
                if lookup.receipt_field is not None
            },
            lambda operation, lookup: lookup_semantics(parsed, lookup),
        )
    if kind == "noop":
        from ..adapters.noop import NOOP_SEMANTICS

        _no_settings(kind, settings, adapter)
        return Offer(None, None, semantics=lambda operation, lookup: NOOP_SEMANTICS)
    if kind == "practice":
        from ..adapters.practice.services import operation_names, semantics_of

        service = _service(settings, adapter)
        names = operation_names(service, adapter.config)
        return Offer(
            None if names is None else frozenset(names),
            None,
            semantics=lambda operation, lookup: semantics_of(service, operation, adapter.config),
        )
    factory, rest, where = _factory(kind, settings, adapter)
    operations = getattr(factory, "operations", None)
    declarer: Any = factory
    if operations is None:
        declarer = _call(factory, rest, where, adapter)
        operations = getattr(declarer, "operations", None)
        _close(declarer)
    if operations is None:
        raise BindingError(
            f"binding {adapter.name!r}: {where} declares no operations: give the factory or the "
            "adapter it makes an 'operations' attribute naming the operations it implements"
        )
    lookups = getattr(declarer, "lookups", None)
    implemented = _names(operations, f"{where}: 'operations'", adapter)
    answered = None if lookups is None else _names(lookups, f"{where}: 'lookups'", adapter)
    says = getattr(declarer, "semantics", None)
    return Offer(
        implemented,
        answered,
        _receipt_fields(declarer, "receipts", implemented, "operations", where, adapter),
        _receipt_fields(declarer, "lookup_receipts", answered, "lookups", where, adapter),
        semantics=_declared(says) if callable(says) else None,
    )


def _declared(says: Callable[..., Any]) -> Callable[[str, str | None], Semantics | None]:
    """A factory's (or its adapter's) own ``semantics(operation, lookup)``, asked safely: a
    declaration that fails or answers no :class:`Semantics` says nothing."""
    from ..adapters.base import Semantics

    def ask(operation: str, lookup: str | None) -> Semantics | None:
        try:
            found = says(operation, lookup)
        except Exception:
            return None
        return found if isinstance(found, Semantics) else None

    return ask


def make(kind: str, settings: Mapping[str, Any], adapter: AdapterSpec, place: Place) -> Adapter:
    """The adapter implementation ``kind`` with ``settings`` makes for the spec's ``adapter``."""
    made: Adapter
    if kind == "http":
        from ..adapters.http import HttpAdapter

        made = HttpAdapter.from_data(
            dict(settings), name=adapter.name, base_dir=place.base_dir, environ=place.environ
        )
    elif kind == "noop":
        from ..adapters.noop import NoopAdapter

        _no_settings(kind, settings, adapter)
        made = NoopAdapter()
    elif kind == "practice":
        made = place.world().adapter(_service(settings, adapter), adapter.config)
    else:
        factory, rest, where = _factory(kind, settings, adapter)
        made = _call(factory, rest, where, adapter)
    place.made.append(made)
    return made


# -- the built-in implementations' settings ----------------------------------------------------


def _no_settings(kind: str, settings: Mapping[str, Any], adapter: AdapterSpec) -> None:
    if settings:
        raise BindingError(
            f"binding {adapter.name!r}: implementation {kind!r} takes no settings, not "
            f"{', '.join(map(repr, settings))}"
        )


def _service(settings: Mapping[str, Any], adapter: AdapterSpec) -> str:
    """The practice service a ``practice`` binding stands for: ``service``, else the kind."""
    from ..adapters.practice.services import PRACTICE_SERVICES

    unknown = [key for key in settings if key != "service"]
    if unknown:
        raise BindingError(
            f"binding {adapter.name!r}: implementation 'practice' takes only 'service', not "
            f"{', '.join(map(repr, unknown))}"
        )
    service = settings.get("service", adapter.kind)
    if service not in PRACTICE_SERVICES:
        given = "setting 'service'" if "service" in settings else "the spec's kind"
        raise BindingError(
            f"binding {adapter.name!r}: {given} {service!r} is no practice service (the practice "
            f'world serves {", ".join(PRACTICE_SERVICES)}): set service = "..."'
        )
    return str(service)


# -- factories: python and plugins ---------------------------------------------------------------


def _factory(
    kind: str, settings: Mapping[str, Any], adapter: AdapterSpec
) -> tuple[Callable[..., Any], dict[str, Any], str]:
    """The factory of a ``python`` binding or a plugin kind, the settings it is called with,
    and how to name it in a message."""
    if kind == "python":
        named = settings.get("factory")
        if not isinstance(named, str) or named.count(":") != 1 or not all(named.split(":")):
            raise BindingError(
                f"binding {adapter.name!r}: implementation 'python' needs factory = "
                f'"package.module:callable", not {named!r}'
            )
        rest = {key: value for key, value in settings.items() if key != "factory"}
        return _imported(named, adapter), rest, f"factory {named!r}"
    points = plugin_kinds().get(kind)
    if not points:
        raise BindingError(f"binding {adapter.name!r}: no installed plugin registers {kind!r}")
    if len(points) > 1:
        raise BindingError(
            f"binding {adapter.name!r}: {len(points)} installed entry points register {kind!r} "
            f"({', '.join(p.value for p in points)}): uninstall all but one"
        )
    where = f"plugin {kind!r} ({points[0].value})"
    try:
        loaded = points[0].load()
    except Exception as exc:
        raise BindingError(
            f"binding {adapter.name!r}: {where} cannot be loaded: {type(exc).__name__}: {exc}"
        ) from None
    if not callable(loaded):
        raise BindingError(f"binding {adapter.name!r}: {where} is no factory (not callable)")
    return loaded, dict(settings), where


def _imported(named: str, adapter: AdapterSpec) -> Callable[..., Any]:
    """The callable ``package.module:callable`` names (its module on ``sys.path``)."""
    module_name, attribute = named.split(":")
    try:
        found: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            found = getattr(found, part)
    except Exception as exc:
        raise BindingError(
            f"binding {adapter.name!r}: factory {named!r} cannot be imported: "
            f"{type(exc).__name__}: {exc} (is its module installed, or on PYTHONPATH?)"
        ) from None
    if not callable(found):
        raise BindingError(f"binding {adapter.name!r}: factory {named!r} is not callable")
    return found  # type: ignore[no-any-return]


def _call(
    factory: Callable[..., Any], settings: dict[str, Any], where: str, adapter: AdapterSpec
) -> Adapter:
    """``factory(settings)``, which must make an adapter (``call`` and ``lookup``)."""
    from ..adapters.base import Adapter

    try:
        made = factory(settings)
    except BindingError:
        raise
    except Exception as exc:
        kind = exc.code if isinstance(exc, RatchetError) else type(exc).__name__
        raise BindingError(
            f"binding {adapter.name!r}: {where} failed to make the adapter: {kind}: {exc}"
        ) from None
    if not isinstance(made, Adapter):
        raise BindingError(
            f"binding {adapter.name!r}: {where} made {type(made).__name__}, which is no adapter "
            "(it needs call(request) and lookup(operation, operation_id, effect))"
        )
    return made


def _names(value: Any, where: str, adapter: AdapterSpec) -> frozenset[str]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise BindingError(
            f"binding {adapter.name!r}: {where} must be a collection of names, not "
            f"{type(value).__name__}"
        )
    names = list(value)
    if not all(isinstance(name, str) for name in names):
        raise BindingError(f"binding {adapter.name!r}: {where} must hold names (strings) only")
    return frozenset(names)


def _receipt_fields(
    declarer: Any,
    attribute: str,
    declared: frozenset[str] | None,
    names: str,
    where: str,
    adapter: AdapterSpec,
) -> dict[str, str]:
    """The receipt fields ``declarer`` says its operations (or lookups) return, by name: its
    ``attribute``, a mapping of names it declares in ``names`` (any, when ``declared`` is None)
    to field names. Without it, none: a factory that says nothing is not checked (``B205``
    needs a field to compare), as before receipts could be declared."""
    value = getattr(declarer, attribute, None)
    if value is None:
        return {}
    what = f"binding {adapter.name!r}: {where}: {attribute!r}"
    if not isinstance(value, Mapping):
        raise BindingError(
            f"{what} must map each name in {names!r} to the receipt field it returns, not "
            f"{type(value).__name__}"
        )
    fields: dict[str, str] = {}
    for name, field_name in value.items():
        if not isinstance(name, str) or not isinstance(field_name, str) or not field_name:
            raise BindingError(
                f"{what} must map names (strings) to receipt field names (non-empty strings), "
                f"not {name!r} to {field_name!r}"
            )
        if declared is not None and name not in declared:
            raise BindingError(
                f"{what} names {name!r}, which {names!r} does not declare "
                f"({', '.join(sorted(declared)) or 'none'})"
            )
        fields[name] = field_name
    return fields


def _close(made: Any) -> None:
    """Close an adapter made only to ask what it implements, if it can be closed."""
    closing = getattr(made, "close", None)
    if callable(closing):
        try:
            closing()
        except Exception:  # it was made only to be asked; its close failing changes nothing
            return
