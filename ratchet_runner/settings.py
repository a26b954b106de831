"""Names and places shared by the command line and the runner, kept free of heavy imports so
that ``ratchet validate`` starts quickly.

On the ground floor, it imports nothing of the package: what refuses a value with an error
lives with its user (the home folder in :mod:`ratchet_runner.store.home`, ``--data`` and
``--interrupt`` in the command line's options); what only says why a value is wrong
(:func:`name_problem`, :func:`unstorable`) stays here."""

from __future__ import annotations

import json
import math
import os
import re
from typing import TYPE_CHECKING, Any

#: A duration as specs write it, and every option of the command line that takes one: a whole
#: number and its unit (``500ms``, ``30s``, ``5m``, ``2h``, ``1d``).
_DURATION = re.compile(r"^([0-9]+)(ms|s|m|h|d)$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str | None) -> float | None:
    """``'500ms'`` → 0.5, ``'24h'`` → 86400.0; None stays None."""
    if text is None:
        return None
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"not a duration: {text!r}")
    return int(match.group(1)) * _UNIT_SECONDS[match.group(2)]


if TYPE_CHECKING:  # pathlib is imported when a path is made: the command line starts without it
    from pathlib import Path

#: The distribution's version, pyproject.toml's (a test keeps them equal), and
#: ``ratchet_runner.__version__``: ``ratchet --version`` prints it without reading the installed
#: distribution's metadata, and a run and a decision record it.
VERSION = "0.1.0.dev0"

DEFAULT_HOME = ".ratchet"
ENV_DB = "RATCHET_DB"
ENV_HOME = "RATCHET_HOME"

#: Points at which ``--interrupt`` ends the process (as SIGKILL would).
INTERRUPT_POINTS = ("before-write", "after-write", "after-receipt")


#: The longest business key the store keeps, and the longest name (a signal ID, an actor, a
#: role, a state or an event): the lengths of their columns, the same on every database.
MAX_BUSINESS_KEY = 400
MAX_NAME = 200

#: C0 and C1 control characters and DEL: a terminal acts on them instead of showing them.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` safe to print on one line of a terminal: control characters (a newline, an
    escape sequence) and lone surrogates shown as escapes (``\\n``, ``\\x1b``)."""
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return _CONTROL.sub(lambda found: found.group().encode("unicode_escape").decode(), text)


def shown(text: str, limit: int = 60) -> str:
    """``text`` as a message may quote it: :func:`printable`, and, past ``limit`` characters,
    its middle left out."""
    if len(text) > limit:
        text = f"{text[: limit // 2]}...{text[-(limit // 2) :]}"
    return printable(text)


#: Characters that mean something to Mermaid, as its entity codes: ``#`` itself too, so that no
#: text can spell an entity.
_MERMAID = {
    '"': "#quot;",
    "#": "#35;",
    ";": "#59;",
    "<": "#lt;",
    ">": "#gt;",
    "&": "#amp;",
    "%": "#37;",
    "`": "#96;",
    "|": "#124;",
    "[": "#91;",
    "]": "#93;",
    "{": "#123;",
    "}": "#125;",
    "\\": "#92;",
}


def mermaid_label(text: str) -> str:
    """``text`` safe in a Mermaid label (``ratchet diagram --format mermaid``, ``ratchet diff
    --format markdown``): one line, each character Mermaid reads as syntax as its entity code,
    so that a quote cannot end a label, a ``;`` or ``#`` cannot end a statement and no text can
    spell markup; and the words its pre-parser rewrites (``style``, ``classDef``) broken up."""
    escaped = "".join(_MERMAID.get(char, char) for char in " ".join(text.split()))
    return escaped.replace("style", "#115;tyle").replace("classDef", "#99;lassDef")


def is_unicode(text: str) -> bool:
    """Whether ``text`` is valid Unicode: no lone surrogate (which is how Python hands over
    bytes that are not UTF-8, and what a JSON ``"\\ud800"`` decodes to)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _unprintable(text: str) -> str | None:
    """Why ``text`` cannot be shown as a name on one line: not valid Unicode, or a control
    character in it; None when it can."""
    if not is_unicode(text):
        return f"'{shown(text)}' is not valid UTF-8"
    control = _CONTROL.search(text)
    if control is not None:
        return f"'{shown(text)}' holds a control character ({shown(control.group())})"
    return None


def name_problem(text: str, limit: int = MAX_NAME) -> str | None:
    """What is wrong with ``text`` as a name the store records (an actor, a role, a signal ID),
    or None: empty or blank, not valid Unicode, a control character, longer than ``limit``."""
    if not text.strip():
        return "must not be empty"
    unreadable = _unprintable(text)
    if unreadable is not None:
        return unreadable
    if len(text) > limit:
        return f"{len(text):,} characters long (at most {limit})"
    return None


def business_key_problem(key: str) -> str | None:
    """What is wrong with ``key`` as a business key, or None: a business key names a piece of
    work on a command line and in every listing, so it holds no control character, is not
    longer than the store keeps, and does not start with ``run_`` (which names run IDs)."""
    unreadable = _unprintable(key)
    if unreadable is not None:
        return unreadable
    if len(key) > MAX_BUSINESS_KEY:
        return f"it is {len(key):,} characters long (at most {MAX_BUSINESS_KEY})"
    if key.startswith("run_"):
        return f"'{shown(key)}' starts with 'run_', which names run IDs on the command line"
    return None


#: The encoder of :func:`_plainly_storable`, made once (``json.dumps`` makes one per call when
#: given options).
_STRICT_JSON = json.JSONEncoder(ensure_ascii=False, allow_nan=False)


def _plainly_storable(value: Any) -> bool:
    """Whether ``value`` is storable beyond doubt, in one call of the C JSON encoder: it encodes
    with finite numbers only (``allow_nan=False`` refuses the others, as keys too), and the text
    is valid Unicode (a lone surrogate, in a key or a value, is kept as it is by
    ``ensure_ascii=False``). False sends it to the walk of :func:`unstorable`, which says what
    is wrong, if anything (a value JSON cannot encode at all is not this check's to refuse)."""
    try:
        text = _STRICT_JSON.encode(value)
    except (ValueError, TypeError, RecursionError):
        return False
    return text.isascii() or is_unicode(text)


def unstorable(value: Any, where: str = "") -> str | None:
    """Why the JSON value ``value`` cannot be stored as it is, or None: a number that is not
    finite (no database keeps ``NaN`` or ``Infinity`` as JSON the same way), or text that is not
    valid Unicode (a lone surrogate). ``where`` names the value; the message adds the path to
    the part at fault (``input/weight``)."""
    if _plainly_storable(value):  # nearly always: then no walk, no path built
        return None
    stack: list[tuple[str, Any]] = [(where, value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return f"{path or 'a value'}: {item!r} is not a finite number"
        if isinstance(item, str) and not is_unicode(item):
            return f"{path or 'a value'}: '{shown(item)}' is not valid Unicode (a lone surrogate)"
        if isinstance(item, dict):
            for key, part in item.items():
                if isinstance(key, str) and not is_unicode(key):
                    return f"{path or 'a value'}: the key '{shown(key)}' is not valid Unicode"
                name = shown(str(key), 40)
                stack.append((f"{path}/{name}" if path else name, part))
        elif isinstance(item, list | tuple):
            stack.extend((f"{path}/{i}", part) for i, part in enumerate(item))
    return None


#: The operator controls (``ratchet ops ACTION``).
OPERATOR_ACTIONS = ("pause", "resume", "cancel", "retry", "reconcile", "compensate")

#: The views ``ratchet diagram`` draws, and the formats it writes: text, or drawn by Graphviz
#: (here, not in the diagram package, so that ``ratchet diagram --help`` imports no diagram).
DIAGRAM_VIEWS = ("states", "crash-windows", "saga")
DIAGRAM_TEXT_FORMATS = ("dot", "mermaid")
DIAGRAM_IMAGE_FORMATS = ("svg", "png", "pdf")


def home() -> Path:
    """Where the embedded store and the practice world live: ``$RATCHET_HOME``, else
    ``./.ratchet``."""
    from pathlib import Path

    return Path(os.environ.get(ENV_HOME) or DEFAULT_HOME)
