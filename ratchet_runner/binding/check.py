"""Checking a binding against a spec: every adapter bound, every operation and lookup implemented.

:func:`check` finds what stops a :class:`~ratchet_runner.binding.files.Binding` from running a
spec, each finding a located :class:`~ratchet_runner.errors.Diagnostic` with a ``B`` code
(:data:`~ratchet_runner.binding.files.CODES`): in the binding file, at the line of the adapter's
table (``B102`` to ``B205``), or, for an adapter the file does not bind, at the spec's adapter
(``B201``). What an implementation offers is asked of
:func:`~ratchet_runner.binding.implementations.offer`. :class:`Checker` is ``ratchet validate
--bindings`` (and ``ratchet check``): each spec against the binding found for it, each file read
once; a spec with no binding found, against the practice world (an adapter of a kind it does not
serve is ``B201``, as ``ratchet run`` would say). :func:`admit` raises the findings as
:class:`~ratchet_runner.errors.BindingInvalid`, which is how a run is refused before it is created.

Over 400 lines: one concern, checking a binding against a spec, every B code with its own
located message.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import BindingError, BindingInvalid, Diagnostic
from ..spec.model import Adapter as AdapterSpec
from ..spec.model import Spec
from ..spec.validate import Report, spec_files, validate_path
from . import implementations
from .files import Binding, Entry, find, load, place_for, searched
from .implementations import NOT_REAL, Offer, Place


def admit(found: list[Diagnostic]) -> None:
    """Raise the errors among ``found`` as :class:`BindingInvalid`, if there are any (a
    warning, ``W207``, stops nothing: ``ratchet validate`` shows it)."""
    errors = [d for d in found if d.severity == "error"]
    if errors:
        raise BindingInvalid(errors)


def check(spec: Spec, binding: Binding, place: Place) -> list[Diagnostic]:
    """What stops ``binding`` from running ``spec``: every adapter of the spec bound (else
    ``B201``, at the spec's adapter), to a known implementation (``B102``) that can be made with
    its settings (``B103``), a ``kind: noop`` adapter only with the opt-in (``B202``), and every
    operation (``B203``), lookup (``B204``) and receipt field (``B205``) its effects use."""
    found: list[Diagnostic] = []
    for name, adapter in spec.adapters.items():
        entry = binding.entries.get(name)
        if entry is None:
            found.append(_unbound(spec, adapter, binding))
            continue
        if (
            adapter.kind == "noop"
            and entry.implementation not in NOT_REAL
            and not entry.replaces_noop
        ):
            found.append(
                binding.at(
                    entry.line,
                    "B202",
                    f"adapter {name!r} is of kind noop in the spec, and binding it to "
                    f"{entry.implementation!r} makes real changes: add replaces_noop = true "
                    "to its table if that is meant",
                    name,
                )
            )
        if not implementations.known(entry.implementation):
            found.append(_unknown(binding, entry))
            continue
        try:
            offered = implementations.offer(entry.implementation, entry.settings, adapter, place)
        except BindingError as exc:
            found.append(binding.at(_setting_line(binding, entry, exc), "B103", exc.message, name))
            continue
        found += _uses(spec, adapter, binding, entry, offered)
        found += _semantics(spec, adapter, binding, entry, offered)
    return found


def _semantics(
    spec: Spec, adapter: AdapterSpec, binding: Binding, entry: Entry, offered: Offer
) -> list[Diagnostic]:
    """``B206`` when the provider behind ``entry``'s adapter makes a change for an effect and
    nobody says what it does with a second request under one operation ID: the binding's
    ``dedupe`` (and ``commits_within`` when it does not deduplicate), or the implementation's
    own declaration. Without them, a lookup that finds nothing cannot be judged: the provider
    may still commit a request the runner gave up on."""
    undeclared: list[str] = []
    untimed: list[str] = []
    blind: list[tuple[str, str, bool | None]] = []
    for effect in spec.effects.values():
        if effect.adapter != adapter.name:
            continue
        own = offered.semantics(effect.operation, effect.reconcile) if offered.semantics else None
        said = own if entry.semantics is None else entry.semantics.over(own)
        if said is None or said.dedupe is None:
            undeclared.append(effect.name)
        elif said.dedupe is False and said.commits_within is None:
            untimed.append(effect.name)
        if said and said.dedupe is False and effect.reconcile and not said.sees_every_change:
            blind.append((effect.name, effect.reconcile, said.sees_every_change))
    found: list[Diagnostic] = _unseen_duplicates(binding, entry, blind)
    name = entry.adapter
    if undeclared:
        found.append(
            binding.at(
                entry.line,
                "B206",
                f"adapter {name!r} ({entry.implementation!r}) makes changes for "
                f"{', '.join(undeclared)}, and the binding does not say whether its provider "
                "deduplicates by the idempotency key: add dedupe = true (a second request with "
                "one key returns the first result) or dedupe = false with commits_within = "
                "SECONDS (a second request makes a second change; the longest after a request "
                "was sent that the provider may still commit it)",
                name,
            )
        )
    if untimed:
        found.append(
            binding.at(
                binding.line_of("adapters", name, "dedupe"),
                "B206",
                f"adapter {name!r}: its provider does not deduplicate (dedupe = false), and the "
                f"binding does not say how late it may commit a request for "
                f"{', '.join(untimed)}: add commits_within = SECONDS, the longest after a "
                "request was sent that it may still commit it (a lookup that finds nothing is "
                "believed only after that)",
                name,
            )
        )
    return found


def _unseen_duplicates(
    binding: Binding, entry: Entry, blind: list[tuple[str, str, bool | None]]
) -> list[Diagnostic]:
    """``W207`` for each lookup of a provider that does not deduplicate which answers with one
    change at most (or does not say): should the provider commit a request later than its
    ``commits_within``, the change made twice is never seen, where a lookup that lists every
    change under the ID would have it recorded, undone and handed to a person."""
    found: list[Diagnostic] = []
    for lookup in dict.fromkeys(name for _, name, _ in blind):
        effects = ", ".join(e for e, named, _ in blind if named == lookup)
        says = next(s for _, named, s in blind if named == lookup)
        how = (
            "answers with one change at most"
            if says is False
            else "does not say whether it answers with every change made under an operation ID"
        )
        found.append(
            binding.at(
                binding.line_of("adapters", entry.adapter, "lookups", lookup),
                "W207",
                f"adapter {entry.adapter!r}: its provider does not deduplicate, and lookup "
                f"{lookup!r}, which {effects} reconcile with, {how}: a change the provider "
                "commits later than its commits_within, made twice, would go unseen. A listing "
                "lookup, or an endpoint whose reply lists every change (every_change = true), "
                "lets the runner find it, undo the extra change and hand the run to a person",
                entry.adapter,
            )
        )
    return found


_SETTING = re.compile(r"setting '([^']+)'")


def _setting_line(binding: Binding, entry: Entry, error: BindingError) -> int:
    """The line of the setting ``error`` names (``setting 'operations.refund.method'``, as the
    HTTP settings say it), else of the adapter's table."""
    named = _SETTING.search(error.message)
    if named is None:
        return entry.line
    return binding.line_of("adapters", entry.adapter, *named.group(1).split("."))


def _unbound(spec: Spec, adapter: AdapterSpec, binding: Binding) -> Diagnostic:
    near = difflib.get_close_matches(adapter.name, list(binding.entries), n=1)
    hint = f"; did you mean [adapters.{near[0]}]?" if near else ""
    bound = ", ".join(binding.entries) or "none"
    return _at_spec(
        spec,
        adapter,
        "B201",
        f"adapter {adapter.name!r} has no binding in {binding.path} (it binds: {bound}){hint}",
    )


def _unknown(binding: Binding, entry: Entry) -> Diagnostic:
    installed = sorted(implementations.plugin_kinds())
    plugins = (
        f"; installed plugins: {', '.join(installed)}" if installed else "; no plugin is installed"
    )
    return binding.at(
        entry.line,
        "B102",
        f"adapter {entry.adapter!r}: no implementation {entry.implementation!r}: built in are "
        f"{', '.join(implementations.BUILT_IN)}{plugins} (entry-point group "
        f"{implementations.GROUP})",
        entry.adapter,
    )


@dataclass(frozen=True)
class _Need:
    """An operation the spec needs of an adapter, the lookup it reconciles with, the receipt
    fields it expects, and who needs it (for messages)."""

    operation: str
    lookup: str | None
    receipts: frozenset[str]
    by: str


def _needs(spec: Spec, adapter: AdapterSpec) -> list[_Need]:
    """What the spec needs of ``adapter``: its contract's operations when it declares one, else
    what its effects call."""
    if adapter.operations is not None:
        return [
            _Need(
                op.name,
                op.lookup,
                _fields(op.receipt),
                f"the spec's contract ({_where(spec, op.pointer, key=True)})",
            )
            for op in adapter.operations.values()
        ]
    return [
        _Need(
            effect.operation,
            effect.reconcile,
            _fields(
                effect.receipt,
                *(row.receipt for row in spec.transitions if row.external_effect == effect.name),
            ),
            f"effect {effect.name!r} ({_where(spec, effect.pointer)})",
        )
        for effect in spec.effects.values()
        if effect.adapter == adapter.name
    ]


def _fields(*names: str | None) -> frozenset[str]:
    return frozenset(name for name in names if name is not None)


def _uses(
    spec: Spec, adapter: AdapterSpec, binding: Binding, entry: Entry, offered: Offer
) -> list[Diagnostic]:
    """The operations, lookups and receipt fields the spec needs of ``entry``'s adapter (its
    contract, or what its effects use) that its implementation does not offer."""
    found: list[Diagnostic] = []
    name, what = entry.adapter, f"{entry.implementation!r}"
    for need in _needs(spec, adapter):
        if offered.operations is not None and need.operation not in offered.operations:
            found.append(
                binding.at(
                    binding.line_of("adapters", name, "operations"),
                    "B203",
                    f"adapter {name!r} ({what}) does not implement operation "
                    f"{need.operation!r}, which {need.by} needs; it implements "
                    f"{', '.join(sorted(offered.operations)) or 'none'}",
                    name,
                )
            )
        lookup = need.lookup
        if lookup and offered.lookups is not None and lookup not in offered.lookups:
            found.append(
                binding.at(
                    binding.line_of("adapters", name, "lookups"),
                    "B204",
                    f"adapter {name!r} ({what}) answers no lookup {lookup!r}, which {need.by} "
                    f"reconciles {need.operation!r} with; it answers "
                    f"{', '.join(sorted(offered.lookups)) or 'none'}",
                    name,
                )
            )
        found += _receipts(binding, entry, offered, need)
    return found


def _receipts(binding: Binding, entry: Entry, offered: Offer, need: _Need) -> list[Diagnostic]:
    returns = [
        ("operation", need.operation, offered.receipts.get(need.operation)),
        ("lookup", need.lookup, offered.lookup_receipts.get(need.lookup or "")),
    ]
    tables = {"operation": "operations", "lookup": "lookups"}
    return [
        binding.at(
            binding.line_of("adapters", entry.adapter, tables[kind], str(named), "receipt_field"),
            "B205",
            f"adapter {entry.adapter!r}: {kind} {named!r} returns receipt field {field!r}, but "
            f"{need.by} expects {', '.join(sorted(need.receipts))}",
            entry.adapter,
        )
        for kind, named, field in returns
        if field is not None and need.receipts and field not in need.receipts
    ]


def _where(spec: Spec, pointer: str, key: bool = False) -> str:
    if spec.document is None:
        return pointer
    line, column = spec.document.locate(pointer, key=key)
    return f"{spec.document.file}:{line}:{column}"


def _at_spec(spec: Spec, adapter: AdapterSpec, code: str, message: str) -> Diagnostic:
    if spec.document is None:
        return Diagnostic("<spec>", 1, 1, code, message, adapter.pointer)
    return spec.document.diagnostic(adapter.pointer, code, message, key=True)


def unbound(spec: Spec, why: str) -> list[Diagnostic]:
    """``B201`` at every adapter of ``spec``: none has a binding, for the reason ``why``."""
    return [
        _at_spec(spec, adapter, "B201", f"adapter {adapter.name!r} has no binding: {why}")
        for adapter in spec.adapters.values()
    ]


def kinds_unserved(spec: Spec, looked: str) -> list[Diagnostic]:
    """``B201`` at every adapter of ``spec`` whose kind the practice world does not serve (an
    ``http`` adapter needs a binding, even on a practice store); a kind no implementation has is
    the spec's error (``E304``), not reported again here."""
    from ..adapters.practice.services import PRACTICE_SERVICES
    from ..spec.kinds import KINDS

    return [
        _at_spec(
            spec,
            adapter,
            "B201",
            f"adapter {adapter.name!r} is of kind {adapter.kind!r}, which the practice world "
            f"does not serve ({', '.join(PRACTICE_SERVICES)}): it needs a binding, and none was "
            f"found (looked for {looked})",
        )
        for adapter in spec.adapters.values()
        if adapter.kind not in PRACTICE_SERVICES and adapter.kind in KINDS
    ]


# -- validating: a binding checked against several specs ---------------------------------------


class Checker:
    """``ratchet validate --bindings``: each spec checked against the binding :func:`find`
    finds for it, each file loaded once; a file's own findings (``B100``, ``B101``) are returned
    once, with the first spec that uses it. Nothing is made but what a ``python`` or plugin
    factory must make to say what it implements."""

    def __init__(self, explicit: str | Path | None, environ: Mapping[str, str]) -> None:
        self.explicit = explicit
        self.environ = environ
        self._loaded: dict[Path, Binding | None] = {}

    def findings(self, spec_path: str | Path, spec: Spec | None) -> list[Diagnostic]:
        """What stops ``spec`` from running through the binding found for it; with none found,
        its adapters whose kind only a binding can run (``http``: ``B201``, as ``ratchet run``
        says on any store)."""
        path = find(self.explicit, spec=spec_path, environ=self.environ)
        if path is None:
            return [] if spec is None else kinds_unserved(spec, searched(spec_path))
        key = path.resolve()
        if key not in self._loaded:
            try:
                self._loaded[key] = load(path)
            except BindingInvalid as invalid:
                self._loaded[key] = None
                return invalid.diagnostics
        binding = self._loaded[key]
        if binding is None or spec is None:
            return []
        return check(spec, binding, place_for(binding, _no_world, self.environ))

    def add_to(self, report: Report, spec_path: str | Path) -> Report:
        """``report`` (of the spec at ``spec_path``) with the binding's findings added."""
        found = self.findings(spec_path, report.spec)
        if found:
            report.diagnostics = sorted(report.diagnostics + found)
        return report

    def require(self, spec_path: str | Path, spec: Spec) -> None:
        """Raise :class:`BindingInvalid` when the binding found for ``spec`` has findings."""
        admit(self.findings(spec_path, spec))

    def validate(self, paths: Iterable[str], *, debug: bool = False) -> Validated:
        """Validate each spec file (a directory: every ``.yaml``/``.yml`` under it) with its
        binding's findings. A file whose validation fails unexpectedly (a bug) is named in
        ``crashed`` with the error, and the others go on; ``debug`` raises it instead."""
        done = Validated()
        for path, name in spec_files(paths, done.skipped):
            try:
                done.reports.append(self.add_to(validate_path(path, name), path))
            except Exception as exc:
                if debug:
                    raise
                done.crashed.append((name, f"{type(exc).__name__}: {exc}"))
        return done


@dataclass
class Validated:
    """What validating spec files found: a report per file, the files that crashed, and the
    files a directory held that are not specs (skipped)."""

    reports: list[Report] = field(default_factory=list)
    crashed: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def failed(self, strict: bool) -> list[Report]:
        return [r for r in self.reports if not r.ok(strict=strict)]


def _no_world() -> Any:
    raise BindingError("checking a binding opens no practice world")
