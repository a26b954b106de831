"""The practice world (:mod:`.world`): a payment provider, a warehouse, travel providers and a
generic service in one SQLite file (:mod:`.db`), what each operation does (:mod:`.services`), the
faults a call meets (:mod:`.faults`), the fixtures an example seeds (:mod:`.fixtures`), and the
same world served over HTTP (:mod:`.http`, ``ratchet practice serve``).

The names below are imported from the module each lives in when first used (PEP 562): the
command line's ``--help`` reads :mod:`.faults` alone, and must not pay for the world's database.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .faults import COMMITS_LATE_SECONDS as COMMITS_LATE_SECONDS
    from .faults import COMMITS_WITHIN_SECONDS as COMMITS_WITHIN_SECONDS
    from .faults import FAULT_KINDS as FAULT_KINDS
    from .faults import SLOW_COMMIT_SECONDS as SLOW_COMMIT_SECONDS
    from .faults import SLOW_REPLY_SECONDS as SLOW_REPLY_SECONDS
    from .faults import parse_fault as parse_fault
    from .fixtures import check_fixture as check_fixture
    from .services import PRACTICE_SERVICES as PRACTICE_SERVICES
    from .world import Change as Change
    from .world import Handled as Handled
    from .world import PracticeAdapter as PracticeAdapter
    from .world import PracticeWorld as PracticeWorld

#: Each public name, and the module it lives in.
_HOMES = {
    "COMMITS_LATE_SECONDS": ".faults",
    "COMMITS_WITHIN_SECONDS": ".faults",
    "FAULT_KINDS": ".faults",
    "PRACTICE_SERVICES": ".services",
    "SLOW_COMMIT_SECONDS": ".faults",
    "SLOW_REPLY_SECONDS": ".faults",
    "Change": ".world",
    "Handled": ".world",
    "PracticeAdapter": ".world",
    "PracticeWorld": ".world",
    "check_fixture": ".fixtures",
    "parse_fault": ".faults",
}

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
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(home, __name__), name)
    globals()[name] = value
    return value
