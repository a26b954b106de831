"""The strict YAML loader: a spec file becomes plain JSON data plus the place of every node.

Only what a transition table needs gets through. The loader reads the file's event stream
(libyaml when available, PyYAML's pure parser otherwise; both are iterative, so deep nesting
cannot overflow the stack) and composes plain ``dict``/``list``/``str``/``int``/``float``/
``bool``/``None`` values itself. It rejects, each with a located code:

* files over :data:`MAX_BYTES` (E102) and text that is not UTF-8 (E101);
* anchors and aliases (E105) — an alias bomb of a few hundred bytes expands to billions of nodes —
  and ``<<`` merge keys (E105), which YAML 1.1 readers merge and YAML 1.2 readers keep as a key;
* tags (E107) — no ``!!python/object/apply``, no custom constructors, nothing that runs code;
* duplicate keys (E106) — PyYAML would silently keep the last one;
* nesting deeper than :data:`MAX_DEPTH` (E103) and numbers longer than :data:`MAX_NUMBER_CHARS`
  (E111).

Plain scalars resolve by the YAML 1.2 core schema, not YAML 1.1: ``on``, ``yes`` and ``no`` are
strings, dates stay strings, and only ``true``/``false``, ``null``/``~``, integers and decimal
floats are typed. Every value's position is kept under its JSON pointer in
:attr:`Document.marks` (and every mapping key's in :attr:`Document.key_marks`), so an error found
later, however deep in the rows, points at its line and column.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..errors import Diagnostic, SpecError

MAX_BYTES = 1024 * 1024
MAX_DEPTH = 64
MAX_NUMBER_CHARS = 40

#: The YAML parser whose events the loader reads: libyaml's (``CBaseLoader``, with PyYAML's inert
#: base constructor) when installed, else the pure-Python one; tests swap it to compare the two.
YAML_PARSER: Any = getattr(yaml, "CBaseLoader", None) or yaml.BaseLoader

_NULL = re.compile(r"^(?:~|null|Null|NULL|)$")
_BOOL = {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}
_INT = re.compile(r"^[-+]?[0-9]+$")
_INT_OCT = re.compile(r"^0o[0-7]+$")
_INT_HEX = re.compile(r"^0x[0-9a-fA-F]+$")
_FLOAT = re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$")

Position = tuple[int, int]

#: What YAML counts as a line break (for positions the parser does not give as marks).
_LINE_BREAK = re.compile("\r\n|[\r\n\x85\u2028\u2029]")


def escape_pointer_part(part: str | int) -> str:
    return str(part).replace("~", "~0").replace("/", "~1")


def pointer_join(base: str, part: str | int) -> str:
    return f"{base}/{escape_pointer_part(part)}"


@dataclass
class Document:
    """A loaded spec: the plain data and where each node stands in the file."""

    file: str
    data: Any
    marks: dict[str, Position] = field(default_factory=dict)
    key_marks: dict[str, Position] = field(default_factory=dict)

    def locate(self, pointer: str, *, key: bool = False) -> Position:
        """The 1-based (line, column) of ``pointer``, or of its nearest located ancestor."""
        if key and pointer in self.key_marks:
            return self.key_marks[pointer]
        probe = pointer
        while probe:
            if probe in self.marks:
                return self.marks[probe]
            probe = probe.rsplit("/", 1)[0]
        return self.marks.get("", (1, 1))

    def diagnostic(self, pointer: str, code: str, message: str, *, key: bool = False) -> Diagnostic:
        line, column = self.locate(pointer, key=key)
        return Diagnostic(self.file, line, column, code, message, pointer)


def _fail(file: str, position: Position, code: str, message: str, pointer: str = "") -> SpecError:
    return SpecError([Diagnostic(file, position[0], position[1], code, message, pointer)])


def _position(event: Any) -> Position:
    mark = event.start_mark
    return (mark.line + 1, mark.column + 1)


def _end_position(text: str) -> Position:
    """Where ``text`` ends, as YAML counts lines."""
    rows = _LINE_BREAK.split(text)
    return (len(rows), len(rows[-1]) + 1)


def _offset_position(text: str, offset: int) -> Position:
    """The 1-based (line, column) of character ``offset`` in ``text``."""
    return (text.count("\n", 0, offset) + 1, offset - (text.rfind("\n", 0, offset) + 1) + 1)


def _scalar(file: str, event: Any, pointer: str) -> Any:
    value: str = event.value
    if event.style:  # quoted or block scalars are always strings (plain: None, or "" in libyaml)
        return value
    if _NULL.match(value):
        return None
    if value in _BOOL:
        return _BOOL[value]
    numeric = _INT.match(value) or _INT_OCT.match(value) or _INT_HEX.match(value)
    if numeric or _FLOAT.match(value):
        if len(value) > MAX_NUMBER_CHARS:
            raise _fail(
                file,
                _position(event),
                "E111",
                f"a number of {len(value)} characters (at most {MAX_NUMBER_CHARS}); "
                "quote it if it is an identifier",
                pointer,
            )
        if _INT_OCT.match(value):
            return int(value[2:], 8)
        if _INT_HEX.match(value):
            return int(value[2:], 16)
        return int(value) if _INT.match(value) else float(value)
    return value


def load_text(text: str | bytes, file: str = "<string>") -> Document:
    """Load one spec document from ``text`` (bytes are decoded as strict UTF-8)."""
    if isinstance(text, bytes):
        if len(text) > MAX_BYTES:
            raise _fail(file, (1, 1), "E102", f"{len(text):,} bytes (at most {MAX_BYTES:,})")
        raw = text
        if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
            raise _fail(
                file,
                (1, 1),
                "E101",
                "the file is UTF-16 (it starts with a byte-order mark); save it as UTF-8",
            )
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = raw.count(b"\n", 0, exc.start) + 1
            column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
            raise _fail(
                file, (line, column), "E101", f"byte 0x{raw[exc.start]:02x} is not UTF-8"
            ) from None
    else:
        try:
            size = len(text.encode("utf-8"))
        except UnicodeEncodeError as exc:  # a lone surrogate: no UTF-8 file can hold it
            raise _fail(
                file,
                _offset_position(text, exc.start),
                "E101",
                f"character U+{ord(text[exc.start]):04X} (a lone surrogate) is not UTF-8 text",
            ) from None
        if size > MAX_BYTES:
            raise _fail(file, (1, 1), "E102", f"{size:,} bytes (at most {MAX_BYTES:,})")
    text = text.removeprefix("\ufeff")
    try:
        return _compose(file, text)
    except yaml.YAMLError as exc:
        raise _syntax_error(file, text, exc) from None
    except RecursionError:  # pragma: no cover - the event stream is iterative; belt and braces
        raise _fail(file, (1, 1), "E103", f"nesting deeper than {MAX_DEPTH}") from None


#: Parser contexts that name something opened and never closed, by what a person calls it.
_OPENERS = {
    "while scanning a quoted scalar": "quoted string",
    "while parsing a flow mapping": "flow mapping '{'",
    "while parsing a flow sequence": "flow sequence '['",
}


def _syntax_error(file: str, text: str, exc: yaml.YAMLError) -> SpecError:
    if isinstance(exc, yaml.reader.ReaderError):
        # A character YAML forbids (NUL, other control characters). The error carries an offset
        # (characters for PyYAML, bytes for libyaml), not a mark: the first occurrence of the
        # character is the one the reader stopped at.
        offset = text.find(chr(exc.character)) if isinstance(exc.character, int) else -1
        where = _offset_position(text, offset) if offset >= 0 else (1, 1)
        what = f"#x{exc.character:04x}" if isinstance(exc.character, int) else "a character"
        return _fail(file, where, "E104", f"unacceptable character {what}: {exc.reason}")
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    position = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
    problem = str(getattr(exc, "problem", None) or exc)
    context = getattr(exc, "context", None)
    if "nesting depth" in problem:  # libyaml's own cap, reached before ours on flow collections
        return _fail(file, position, "E103", f"nesting deeper than {MAX_DEPTH}")
    # The parsers may place a problem at the end of the stream one line past the text's end.
    end = _end_position(text)
    opened = getattr(exc, "context_mark", None)
    if opened is not None and mark is not None and opened.line < mark.line:
        if context in _OPENERS:
            # Unclosed: the parser notices lines later (often at the end of the file); point at
            # the opening instead, where the fix goes.
            ends = position >= end or "end of stream" in problem
            found = "the file ends first" if ends else f"{problem} at line {position[0]}"
            found = " ".join(found.split())
            hint = ""
            if "flow" in context and "expected ','" in problem:
                hint = (
                    "; inside {...} or [...], a value holding a comma, a bracket or a brace "
                    "must be quoted, whole: guard: \"... in ['a', 'b']\""
                )
            return _fail(
                file,
                (opened.line + 1, opened.column + 1),
                "E104",
                f"the {_OPENERS[context]} that starts here is never closed ({found}){hint}",
            )
        if context == "while scanning a simple key":
            # A line that is not `key: value`: the parser gives up only on a later line.
            position = (opened.line + 1, opened.column + 1)
    position = min(position, end)
    message = f"{problem} ({context})" if context else problem
    lines = text.splitlines()
    if mark is not None and mark.line < len(lines) and "\t" in lines[mark.line][: mark.column + 1]:
        message += "; YAML indents with spaces, not tabs"
    return _fail(file, position, "E104", " ".join(message.split()))


def load_file(path: str | Path, display: str | None = None) -> Document:
    """Read and load the spec at ``path``; ``display`` is the name used in diagnostics. Only a
    regular file is opened (E100 otherwise): opening a FIFO would wait for a writer forever, and
    a device or a socket is no spec."""
    name = display if display is not None else str(path)
    try:
        kind = os.stat(path).st_mode
    except OSError as exc:
        raise _fail(name, (1, 1), "E100", exc.strerror or str(exc)) from None
    if not stat.S_ISREG(kind):
        what = "a FIFO" if stat.S_ISFIFO(kind) else "a folder" if stat.S_ISDIR(kind) else "special"
        raise _fail(name, (1, 1), "E100", f"not a regular file ({what})")
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise _fail(name, (1, 1), "E100", exc.strerror or str(exc)) from None
    if len(raw) > MAX_BYTES:
        size = Path(path).stat().st_size
        raise _fail(name, (1, 1), "E102", f"{size:,} bytes (at most {MAX_BYTES:,})")
    return load_text(raw, name)


class _Frame:
    __slots__ = ("container", "key", "keys", "pointer")

    def __init__(self, container: Any, pointer: str) -> None:
        self.container = container
        self.pointer = pointer
        self.key: str | None = None
        self.keys: set[str] = set()


def _compose(file: str, text: str) -> Document:
    doc = Document(file, None)
    stack: list[_Frame] = []
    documents = 0
    root: Any = None
    end: Position | None = None

    parser = YAML_PARSER(text)
    try:
        while parser.check_event():
            event = parser.get_event()
            if isinstance(event, yaml.DocumentStartEvent):
                documents += 1
                if documents > 1:
                    raise _fail(file, _position(event), "E109", "only one YAML document per file")
                continue
            if isinstance(event, yaml.AliasEvent):
                raise _fail(
                    file, _position(event), "E105", f"alias *{event.anchor} (write the value out)"
                )
            if not isinstance(event, yaml.NodeEvent | yaml.CollectionEndEvent):
                continue
            if isinstance(event, yaml.CollectionEndEvent):
                frame = stack.pop()
                if not stack:
                    root = frame.container
                continue
            if event.anchor is not None:
                raise _fail(
                    file, _position(event), "E105", f"anchor &{event.anchor} (write values out)"
                )
            tag = getattr(event, "tag", None)
            if tag is not None:
                raise _fail(file, _position(event), "E107", f"tag {tag}")

            parent = stack[-1] if stack else None
            if parent is not None and isinstance(parent.container, dict) and parent.key is None:
                # this event is a mapping key
                if not isinstance(event, yaml.ScalarEvent):
                    raise _fail(
                        file,
                        _position(event),
                        "E112",
                        "a mapping key must be a plain scalar",
                        parent.pointer,
                    )
                key = event.value
                if key == "<<" and not event.style:
                    # A YAML 1.1 merge key: PyYAML and many editors merge the mapping in, the
                    # YAML 1.2 core schema keeps a key named '<<'. Readers would disagree.
                    raise _fail(
                        file,
                        _position(event),
                        "E105",
                        "merge key << (readers disagree on merges; write the values out)",
                        parent.pointer,
                    )
                if key in parent.keys:
                    raise _fail(
                        file,
                        _position(event),
                        "E106",
                        f"duplicate key {key!r} (YAML would silently keep only the last one)",
                        pointer_join(parent.pointer, key),
                    )
                parent.keys.add(key)
                parent.key = key
                doc.key_marks[pointer_join(parent.pointer, key)] = _position(event)
                continue

            if parent is None:
                pointer = ""
            elif isinstance(parent.container, dict):
                assert parent.key is not None
                pointer = pointer_join(parent.pointer, parent.key)
            else:
                pointer = pointer_join(parent.pointer, len(parent.container))
            position = _position(event)
            if isinstance(event, yaml.ScalarEvent) and not event.value and not event.style:
                # An empty node at the end of the stream: libyaml may place it past the text.
                end = end or _end_position(text)
                position = min(position, end)
            doc.marks[pointer] = position

            value: Any
            if isinstance(event, yaml.ScalarEvent):
                value = _scalar(file, event, pointer)
            else:
                if len(stack) >= MAX_DEPTH:
                    raise _fail(
                        file, _position(event), "E103", f"nesting deeper than {MAX_DEPTH}", pointer
                    )
                value = {} if isinstance(event, yaml.MappingStartEvent) else []

            if parent is None:
                root = value
            elif isinstance(parent.container, dict):
                assert parent.key is not None
                parent.container[parent.key] = value
                parent.key = None
            else:
                parent.container.append(value)
            if not isinstance(event, yaml.ScalarEvent):
                stack.append(_Frame(value, pointer))
    finally:
        dispose = getattr(parser, "dispose", None)
        if dispose is not None:
            dispose()

    if documents == 0 or (root is None and "" not in doc.marks):
        raise _fail(file, (1, 1), "E108", "the file is empty; a spec is a YAML mapping")
    doc.data = root
    if not isinstance(root, dict):
        kind = {list: "a list", str: "a string", type(None): "nothing"}.get(type(root), "a value")
        raise _fail(
            file, doc.marks.get("", (1, 1)), "E110", f"the top level is {kind}; a spec is a mapping"
        )
    return doc
