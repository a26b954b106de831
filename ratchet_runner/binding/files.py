"""Bindings: how each adapter a spec names is reached, kept apart from the spec, per environment.

A binding file is TOML (``docs/reference/bindings.md``)::

    name = "production"                    # optional; default: the file's stem
    [adapters.payments]                    # a name of a spec's adapters:
    implementation = "http"                # http | python | noop | practice | a plugin's kind
    base_url = "https://api.example/v1"    # the implementation's settings
    dedupe = true                          # the provider honours the idempotency key
    [adapters.mailer]
    implementation = "python"
    factory = "my_package.mailer:make_adapter"
    replaces_noop = true                   # binds a kind: noop adapter to a real implementation
    dedupe = false                         # a second request makes a second e-mail...
    commits_within = 30                    # ...and it sends a request within 30 s or never

:func:`find` looks for it: ``--bindings FILE``; else ``$RATCHET_BINDINGS``; else ``ratchet.toml``
beside the spec; else ``ratchet.toml`` in the working directory. :func:`load` reads it (``B100``,
``B101`` for a file that is no binding, located in the file); :mod:`~ratchet_runner.binding.check`
checks it against what a spec's effects use (``B102`` to ``B205``). A binding is identified by
its name and its digest, the SHA-256 of its canonical JSON: secrets never live in the file (its
settings name environment variables and files), so the digest holds none.
:mod:`~ratchet_runner.binding.resolve` resolves a runner's adapters through it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..adapters.base import Semantics
from ..errors import BindingInvalid, Diagnostic
from .implementations import Place

#: The environment variable naming a binding file, and the file looked for beside the spec and
#: in the working directory.
ENV, FILE_NAME = "RATCHET_BINDINGS", "ratchet.toml"

#: Every finding about a binding, by code (each one documented in docs/reference/bindings.md).
CODES: dict[str, str] = {
    "B100": "the binding file cannot be read, or is not TOML",
    "B101": "the binding file is not shaped as a binding",
    "B102": "an implementation that is neither built in nor registered by an installed plugin",
    "B103": "an implementation's settings are wrong, or it cannot be made",
    "B201": "an adapter of the spec has no binding",
    "B202": "a kind: noop adapter bound to a real implementation without replaces_noop = true",
    "B203": "an operation an effect uses that the bound implementation does not implement",
    "B204": "a lookup an effect reconciles with that the bound implementation does not answer",
    "B205": "a receipt field the bound operation or lookup returns that the effect does not expect",
    "B206": "an effect whose provider's semantics are not declared: dedupe, and commits_within "
    "when it does not deduplicate",
    "W207": "a lookup of a provider that does not deduplicate that cannot see a change made twice",
}

#: The keys of an adapter's table that are the binding's own; every other key is a setting.
#: ``dedupe`` and ``commits_within`` say what the provider does with a second request under one
#: operation ID, whichever implementation reaches it.
OWN_KEYS = ("implementation", "replaces_noop", "dedupe", "commits_within")


@dataclass(frozen=True)
class Entry:
    """One adapter's binding: its implementation, the settings it is made with, the opt-in that
    lets it replace a ``kind: noop`` adapter, and the line of its table in the file."""

    adapter: str
    implementation: str
    settings: Mapping[str, Any]
    replaces_noop: bool
    line: int
    dedupe: bool | None = None
    commits_within: float | None = None

    @property
    def semantics(self) -> Semantics | None:
        """What the binding says of the provider (None when it says nothing)."""
        if self.dedupe is None and self.commits_within is None:
            return None
        return Semantics(dedupe=self.dedupe, commits_within=self.commits_within)


@dataclass(frozen=True)
class Binding:
    """A loaded binding file: its name, its digest, where it is, and each adapter's entry."""

    name: str
    digest: str
    path: Path
    entries: Mapping[str, Entry]
    lines: Mapping[tuple[str, ...], int] = field(default_factory=dict, repr=False, compare=False)

    @property
    def stamp(self) -> dict[str, Any]:
        """What a run started under this binding records: its name and digest."""
        return {"name": self.name, "digest": self.digest}

    def semantics_of(self, adapter: str) -> Semantics | None:
        """What the binding says of the provider behind ``adapter`` (None: nothing)."""
        entry = self.entries.get(adapter)
        return None if entry is None else entry.semantics

    def line_of(self, *path: str) -> int:
        """The line of the table or key at ``path`` in the file, or of its nearest ancestor."""
        return _line_of(self.lines, *path)

    def at(self, line: int, code: str, message: str, adapter: str = "") -> Diagnostic:
        """A finding at ``line`` of the file (about ``adapter``'s entry, when given)."""
        pointer = f"/adapters/{adapter}" if adapter else ""
        return Diagnostic(str(self.path), line, 1, code, message, pointer)


# -- finding the file ---------------------------------------------------------------------------


def find(
    explicit: str | Path | None,
    *,
    spec: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Path | None:
    """The binding file to use: ``explicit`` (``--bindings``), else ``$RATCHET_BINDINGS``, else
    ``ratchet.toml`` beside ``spec``, else ``ratchet.toml`` in ``cwd``; None when none is."""
    environ = os.environ if environ is None else environ
    if explicit:
        return Path(explicit)
    if environ.get(ENV):
        return Path(environ[ENV])
    places = ([Path(spec).parent] if spec is not None else []) + [cwd or Path.cwd()]
    return next((p / FILE_NAME for p in places if (p / FILE_NAME).is_file()), None)


def searched(spec: str | Path | None = None) -> str:
    """Where :func:`find` looks, for a message that says none was found."""
    beside = f"{Path(spec).parent / FILE_NAME}, " if spec is not None else ""
    return f"--bindings FILE, ${ENV}, {beside}./{FILE_NAME}"


# -- reading it ---------------------------------------------------------------------------------

_HEADER = re.compile(r"^\s*\[(?!\[)\s*([^\]]+?)\s*\]\s*(?:#.*)?$")
_KEY = re.compile(
    r"^\s*((?:\"[^\"]*\"|'[^']*'|[A-Za-z0-9_-]+)(?:\s*\.\s*(?:\"[^\"]*\"|'[^']*'|[A-Za-z0-9_-]+))*)\s*="
)
_PART = re.compile(r"\"([^\"]*)\"|'([^']*)'|([A-Za-z0-9_-]+)")
_TOML_AT = re.compile(r"\(at line (\d+), column (\d+)\)")


def _dotted(text: str) -> tuple[str, ...]:
    return tuple(next(g for g in m.groups() if g is not None) for m in _PART.finditer(text))


def _lines(text: str) -> dict[tuple[str, ...], int]:
    """The line of every table header and key in a TOML text, by its dotted path (as well as a
    line scan can tell; a key's line is that of its first mention)."""
    found: dict[tuple[str, ...], int] = {}
    table: tuple[str, ...] = ()
    for number, line in enumerate(text.splitlines(), start=1):
        header = _HEADER.match(line)
        if header:
            table = _dotted(header.group(1))
            for end in range(1, len(table) + 1):
                found.setdefault(table[:end], number)
            continue
        key = _KEY.match(line)
        if key:
            path = table + _dotted(key.group(1))
            for end in range(len(table) + 1, len(path) + 1):
                found.setdefault(path[:end], number)
    return found


def _line_of(lines: Mapping[tuple[str, ...], int], *path: str) -> int:
    """The line of ``path``, or of its nearest ancestor that has one, or 1."""
    for end in range(len(path), 0, -1):
        if path[:end] in lines:
            return lines[path[:end]]
    return 1


def digest_of(data: Mapping[str, Any]) -> str:
    """The SHA-256 of the canonical JSON of a binding's data (sorted keys, no spaces; a TOML date
    as its ISO text)."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def load(path: str | Path) -> Binding:
    """The binding file at ``path``; :class:`BindingInvalid` with every ``B100``/``B101``
    finding, located, when it is unreadable or not shaped as a binding."""
    path = Path(path)
    try:
        if path.exists() and not path.is_file():  # a FIFO would wait for a writer forever
            raise OSError(0, "not a regular file")
        text = path.read_bytes().decode("utf-8")
        data = tomllib.loads(text)
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        found = Diagnostic(str(path), 1, 1, "B100", f"cannot read it: {why}")
        raise BindingInvalid([found]) from None
    except tomllib.TOMLDecodeError as exc:
        where = _TOML_AT.search(str(exc))
        line, column = (int(where.group(1)), int(where.group(2))) if where else (1, 1)
        message = f"not TOML: {_TOML_AT.sub('', str(exc)).strip()}"
        raise BindingInvalid([Diagnostic(str(path), line, column, "B100", message)]) from None
    lines = _lines(text)
    problems: list[Diagnostic] = []

    def bad(message: str, *where: str) -> None:
        line = _line_of(lines, *where)
        problems.append(Diagnostic(str(path), line, 1, "B101", message, "/" + "/".join(where)))

    name = data.get("name", path.stem)
    if not isinstance(name, str) or not name.strip():
        bad("'name' must be a non-empty string", "name")
    for key in data:
        if key not in ("name", "adapters"):
            bad(f"unknown key {key!r}: a binding file holds 'name' and [adapters.NAME]", key)
    tables = data.get("adapters")
    if not isinstance(tables, dict) or not tables:
        bad("it binds no adapter: give an [adapters.NAME] table per adapter", "adapters")
        tables = {}
    entries = {
        adapter: entry
        for adapter, table in tables.items()
        if (entry := _entry(adapter, table, lines, bad)) is not None
    }
    if problems:
        raise BindingInvalid(problems)
    return Binding(str(name), digest_of({**data, "name": name}), path, entries, lines)


def _entry(
    adapter: str,
    table: Any,
    lines: Mapping[tuple[str, ...], int],
    bad: Callable[..., None],
) -> Entry | None:
    """One adapter's entry, or None after reporting what is wrong with it."""
    where = ("adapters", adapter)
    if not isinstance(table, dict):
        bad(f"adapter {adapter!r}: must be a table ([adapters.{adapter}])", *where)
        return None
    implementation = table.get("implementation")
    replaces = table.get("replaces_noop", False)
    if not isinstance(implementation, str) or not implementation:
        bad(f"adapter {adapter!r}: 'implementation' (a string) is required", *where)
        return None
    if not isinstance(replaces, bool):
        bad(f"adapter {adapter!r}: 'replaces_noop' must be true or false", *where, "replaces_noop")
        return None
    dedupe, within = table.get("dedupe"), table.get("commits_within")
    if dedupe is not None and not isinstance(dedupe, bool):
        bad(f"adapter {adapter!r}: 'dedupe' must be true or false", *where, "dedupe")
        return None
    if within is not None and (
        isinstance(within, bool)
        or not isinstance(within, int | float)
        or not 0 <= within < float("inf")
    ):
        bad(
            f"adapter {adapter!r}: 'commits_within' must be a number of seconds, zero or more "
            f"(how long after a request was sent the provider may still commit it), not "
            f"{within!r}",
            *where,
            "commits_within",
        )
        return None
    if within is not None and dedupe is True:
        bad(
            f"adapter {adapter!r}: 'commits_within' is for a provider that does not deduplicate "
            "(dedupe = false); one that does returns the first result whatever the timing",
            *where,
            "commits_within",
        )
        return None
    settings = {key: value for key, value in table.items() if key not in OWN_KEYS}
    return Entry(
        adapter,
        implementation,
        settings,
        replaces,
        _line_of(lines, *where),
        dedupe,
        None if within is None else float(within),
    )


# -- resolving adapters ---------------------------------------------------------------------------


def place_for(
    binding: Binding | None,
    world: Callable[[], Any],
    environ: Mapping[str, str] | None = None,
) -> Place:
    """Where a binding's adapters are made: its file's folder, the environment, the world."""
    base = binding.path.parent if binding is not None else Path.cwd()
    return Place(base, os.environ if environ is None else environ, world)
