"""One table of a binding's settings, read key by key, every problem naming its setting.

:class:`Table` reads strings, choices, seconds, whole numbers, flags, JSON pointers and nested
tables from plain data (TOML or JSON), and raises :class:`~ratchet_runner.errors.BindingError`
(R203) naming the setting that is missing, unknown, of the wrong type or out of range;
:func:`template` and :func:`scale` read a path template and a factor the same way. The settings
they make up are :mod:`~ratchet_runner.adapters.http.settings`'s.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from typing import Any, NoReturn

from ...errors import BindingError


class Table:
    """One table of the settings, read key by key; every problem names its setting."""

    def __init__(self, data: Any, where: str, path: str = "") -> None:
        self.where = where
        self.path = path
        if not isinstance(data, Mapping):
            self.fail(path or "settings", f"must be a table, not {kind(data)}")
        self.data: Mapping[str, Any] = data

    def name(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def fail(self, setting: str, problem: str) -> NoReturn:
        raise BindingError(f"{self.where}: setting {setting!r} {problem}")

    def only(self, *known: str) -> None:
        for key in self.data:
            if key not in known:
                self.fail(self.name(str(key)), f"is unknown (known: {', '.join(known)})")

    def text(self, key: str, default: str | None = None, *, required: bool = False) -> Any:
        value = self.data.get(key, default)
        if value is None:
            return self.fail(self.name(key), "is required") if required else None
        if not isinstance(value, str):
            self.fail(self.name(key), f"must be a string, not {kind(value)}")
        return value

    def choice(self, key: str, choices: tuple[str, ...], default: str | None = None) -> Any:
        value = self.text(key, default, required=True)
        if value not in choices:
            self.fail(self.name(key), f"must be one of {', '.join(choices)}, not {value!r}")
        return value

    def seconds(self, key: str, default: float | None, *, zero: bool = False) -> Any:
        value = self.data.get(key, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.fail(self.name(key), f"must be a number of seconds, not {kind(value)}")
        if value < 0 or (value == 0 and not zero) or value != value or value == float("inf"):
            bound = "zero or more" if zero else "more than zero"
            self.fail(self.name(key), f"must be {bound} seconds, not {value!r}")
        return float(value)

    def integer(self, key: str, default: int | None, low: int, high: int) -> Any:
        value = self.data.get(key, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            self.fail(self.name(key), f"must be a whole number from {low} to {high}, not {value!r}")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.data.get(key, default)
        if not isinstance(value, bool):
            self.fail(self.name(key), f"must be true or false, not {kind(value)}")
        return bool(value)

    def pointer(self, key: str, default: str | None = "", *, required: bool = False) -> Any:
        value = self.text(key, default, required=required)
        if value is not None and value != "" and not value.startswith("/"):
            self.fail(
                self.name(key), f"must be a JSON pointer ('' or starting with '/'): {value!r}"
            )
        return value

    def pair(self, first: str, second: str) -> tuple[str | None, str | None]:
        """Two settings that go together: both or neither."""
        a, b = self.pointer(first, None), self.text(second)
        if (a is None) != (b is None):
            self.fail(
                self.name(second if a is not None else first),
                f"goes with {first!r} and {second!r}: set both or neither",
            )
        return a, b

    def table(self, key: str) -> Table | None:
        value = self.data.get(key)
        return None if value is None else Table(value, self.where, self.name(key))


def kind(value: Any) -> str:
    """What ``value`` is, as a message names it (``a table``, ``an array``, ``a string``)."""
    names = {bool: "a boolean", str: "a string", int: "a number", float: "a number"}
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, list | tuple):
        return "an array"
    return names.get(type(value), type(value).__name__)


def template(table: Table, key: str, allowed: frozenset[str] | None) -> str:
    """A path template: starts with '/'; ``{name}`` placeholders only (of ``allowed``, if
    given); returns it unchanged."""
    path: str = table.text(key, required=True)
    if not path.startswith("/"):
        table.fail(table.name(key), f"must start with '/': {path!r}")
    try:
        parts = list(string.Formatter().parse(path))
    except ValueError as exc:
        return table.fail(table.name(key), f"is no path template ({exc}): {path!r}")
    for _, name, spec, conversion in parts:
        if name is None:
            continue
        if spec or conversion or not name.isidentifier():
            table.fail(table.name(key), f"has a placeholder that is no plain name: {path!r}")
        if allowed is not None and name not in allowed:
            table.fail(table.name(key), f"may name only {{operation_id}}, not {{{name}}}")
    return path


def scale(table: Table, key: str) -> float:
    """A factor above 0 and at most 1 (default 1)."""
    value = table.data.get(key, 1.0)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        table.fail(key, f"must be a number above 0 and at most 1, not {value!r}")
    return float(value)
