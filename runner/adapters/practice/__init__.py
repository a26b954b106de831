"""The practice world (:mod:`.world`): a payment provider, a warehouse, travel providers and a
generic service in one SQLite file (:mod:`.db`), what each operation does (:mod:`.services`), the
faults a call meets (:mod:`.faults`), the fixtures an example seeds (:mod:`.fixtures`), and the
same world served over HTTP (:mod:`.http`, ``ratchet practice serve``).

The names below are :mod:`.world`'s, imported when first used (PEP 562): the command line's
``--help`` reads :mod:`.faults` alone, and must not pay for the world's database.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .world import COMMITS_LATE_SECONDS as COMMITS_LATE_SECONDS
    from .world import COMMITS_WITHIN_SECONDS as COMMITS_WITHIN_SECONDS
    from .world import FAULT_KINDS as FAULT_KINDS
    from .world import PRACTICE_SERVICES as PRACTICE_SERVICES
    from .world import SLOW_COMMIT_SECONDS as SLOW_COMMIT_SECONDS
    from .world import SLOW_REPLY_SECONDS as SLOW_REPLY_SECONDS
    from .world import Change as Change
    from .world import Handled as Handled
    from .world import PracticeAdapter as PracticeAdapter
    from .world import PracticeWorld as PracticeWorld
    from .world import check_fixture as check_fixture
    from .world import parse_fault as parse_fault

__all__ = [
    "COMMITS_LATE_SECONDS",
    "COMMITS_WITHIN_SECONDS",
    "FAULT_KINDS",
    "PRACTICE_SERVICES",
    "SLOW_COMMIT_SECONDS",
    "SLOW_REPLY_SECONDS",
    "Change",
    "Handled",
    "PracticeAdapter",
    "PracticeWorld",
    "check_fixture",
    "parse_fault",
]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(".world", __name__), name)
    globals()[name] = value
    return value
