"""The mapping file: how an operator says where the runs of an old version go in a new one.

A mapping is a small YAML file, read by the spec's own strict loader (no anchors, tags or
duplicate keys, 1 MiB at most: ``E100`` to ``E112`` as for a spec)::

    states:              # old state: the state of the new version its runs move to
      proposed: awaiting_approval
    timers: keep         # keep: armed timers fire when they were due; restart: armed anew
    approvals: void      # void: held approvals no longer count; keep: they do

Every key is optional; ``timers`` and ``approvals`` left out mean "not said", which the hazards
of a change that needs them to be said report (``V109``, ``V106``). :func:`read_mapping` and
:func:`mapping_from_text` refuse a file with a key it does not know (``V201``), a value of the
wrong type (``V202``) or a value it may not have (``V203``) with
:class:`~ratchet_runner.errors.MappingInvalid`, every finding located; :func:`check_mapping` then
checks the mapping against the two versions: an old state the old version does not have
(``V204``), a target the new version does not have (``V205``), a move into a state of another
kind (``V102``, a hazard: a run waiting for a decision is no run about to call a provider).
Pure: it imports the spec's loader and model and the ground floor only.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..errors import Diagnostic, MappingInvalid, SpecError
from ..spec.loader import Document, load_file, load_text, pointer_join
from ..spec.model import Spec
from .diff import article

#: The mapping's own codes, one line each (docs/reference/versions.md explains each).
MAPPING_CODES: dict[str, str] = {
    "V201": "the mapping file has a key it does not know",
    "V202": "a value of the mapping file has the wrong type",
    "V203": "a value of the mapping file is not one it may have",
    "V204": "the mapping names a state the old version does not have",
    "V205": "the mapping moves runs to a state the new version does not have",
}

#: What a mapping may say of the timers armed, and of the approvals held, by the runs it moves.
TIMERS = ("keep", "restart")
APPROVALS = ("void", "keep")
_KEYS = ("states", "timers", "approvals")

Timers = Literal["keep", "restart"]
Approvals = Literal["void", "keep"]


@dataclass(frozen=True)
class VersionMapping:
    """A mapping file as read: ``states`` (old state to new state), and what happens to armed
    timers and held approvals (None: the file does not say)."""

    file: str
    states: dict[str, str] = field(default_factory=dict)
    timers: Timers | None = None
    approvals: Approvals | None = None
    document: Document | None = field(default=None, repr=False, compare=False)

    def target(self, state: str) -> str:
        """The state of the new version a run standing in ``state`` moves to: the one the
        mapping names, else the state of the same name."""
        return self.states.get(state, state)

    def diagnostic(self, pointer: str, code: str, message: str, *, key: bool = False) -> Diagnostic:
        """A finding located in the mapping file (line 1, column 1 for one made in code)."""
        if self.document is None:
            return Diagnostic(self.file, 1, 1, code, message, pointer)
        return self.document.diagnostic(pointer, code, message, key=key)


def read_mapping(path: str | Path, display: str | None = None) -> VersionMapping:
    """The mapping file at ``path``; :class:`~ratchet_runner.errors.MappingInvalid` when it
    cannot be read as one (``display``: the name used in findings)."""
    try:
        doc = load_file(path, display)
    except SpecError as exc:
        raise MappingInvalid(exc.diagnostics) from None
    return _build(doc)


def mapping_from_text(text: str | bytes, file: str = "<mapping>") -> VersionMapping:
    """The mapping held in ``text``; :class:`~ratchet_runner.errors.MappingInvalid` when it
    is not one."""
    try:
        doc = load_text(text, file)
    except SpecError as exc:
        raise MappingInvalid(exc.diagnostics) from None
    return _build(doc)


def _build(doc: Document) -> VersionMapping:
    data: dict[str, Any] = doc.data
    found: list[Diagnostic] = []
    for key in data:
        if key not in _KEYS:
            close = difflib.get_close_matches(key, _KEYS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            found.append(
                doc.diagnostic(
                    pointer_join("", key),
                    "V201",
                    f"unknown key {key!r}: a mapping has {', '.join(_KEYS)}{hint}",
                    key=True,
                )
            )
    states = _states(doc, data.get("states", {}), found)
    timers = _choice(doc, data, "timers", TIMERS, found)
    approvals = _choice(doc, data, "approvals", APPROVALS, found)
    if found:
        raise MappingInvalid(found)
    return VersionMapping(doc.file, states, timers, approvals, doc)  # type: ignore[arg-type]


def _states(doc: Document, given: Any, found: list[Diagnostic]) -> dict[str, str]:
    if not isinstance(given, dict):
        found.append(
            doc.diagnostic(
                "/states",
                "V202",
                f"states is {_kind(given)}; it maps each old state to a state of the new "
                "version: states: {old_state: new_state}",
            )
        )
        return {}
    states: dict[str, str] = {}
    for old, new in given.items():
        if not isinstance(new, str):
            found.append(
                doc.diagnostic(
                    pointer_join("/states", old),
                    "V202",
                    f"state {old!r} is mapped to {_kind(new)}; map it to the name of one "
                    "state of the new version",
                )
            )
            continue
        states[old] = new
    return states


def _choice(
    doc: Document, data: dict[str, Any], key: str, allowed: tuple[str, ...], found: list[Diagnostic]
) -> str | None:
    if key not in data:
        return None
    value = data[key]
    said = " or ".join(allowed)
    if not isinstance(value, str):
        found.append(
            doc.diagnostic(f"/{key}", "V202", f"{key} is {_kind(value)}; write {key}: {said}")
        )
        return None
    if value not in allowed:
        close = difflib.get_close_matches(value, allowed, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        found.append(doc.diagnostic(f"/{key}", "V203", f"{key}: {value!r} is not {said}{hint}"))
        return None
    return value


def _kind(value: Any) -> str:
    if value is None:
        return "empty (null)"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, int | float):
        return f"a number ({value})"
    if isinstance(value, str):
        return f"a string ({value!r})"
    return "a list" if isinstance(value, list) else "a mapping"


def check_mapping(mapping: VersionMapping, old: Spec, new: Spec) -> list[Diagnostic]:
    """What is wrong with ``mapping`` between ``old`` and ``new``, located in the mapping file:
    an old state ``old`` does not have (``V204``), a target ``new`` does not have (``V205``),
    a move into a state of another kind (``V102``). Empty when the mapping fits."""
    found: list[Diagnostic] = []
    for source, target in mapping.states.items():
        at = pointer_join("/states", source)
        if source not in old.states:
            close = difflib.get_close_matches(source, list(old.states), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            found.append(
                mapping.diagnostic(
                    at,
                    "V204",
                    f"state {source!r} is not a state of {old.name} version "
                    f"{old.spec_version} (its states: {', '.join(old.states)}): no run stands "
                    f"there to move; name a state of the old version{hint}",
                    key=True,
                )
            )
            continue
        if target not in new.states:
            close = difflib.get_close_matches(target, list(new.states), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            found.append(
                mapping.diagnostic(
                    at,
                    "V205",
                    f"{source!r} is mapped to {target!r}, which is not a state of {new.name} "
                    f"version {new.spec_version} (its states: {', '.join(new.states)}); map it "
                    f"to a state the new version has{hint}",
                )
            )
            continue
        was, now = old.states[source].kind, new.states[target].kind
        if was != now:
            found.append(
                mapping.diagnostic(
                    at,
                    "V102",
                    f"{source!r} ({was}) is mapped to {target!r} ({now}): a run moved there "
                    f"would stand in {article(now)} state with what {article(was)} state left "
                    f"it (its timers, its pending decision, its effect); map it to "
                    f"{article(was)} state of the new version",
                )
            )
    return found
