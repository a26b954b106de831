"""Ratchet: durable workflows whose external effects happen exactly once.

The public API is the names in ``__all__``, documented in ``docs/reference/python-api.md``;
everything else (any module path below this package) may change without notice. The names are
imported lazily (PEP 562): ``import ratchet_runner`` loads nothing else, and a name's module is
imported when the name is first used, so ``ratchet validate`` never pays for the store, the
engine or the database drivers it does not use.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what mypy and editors see; keep in step with _EXPORTS (a test checks)
    #: The distribution's version (``settings.VERSION``, on the ground floor): read lazily too.
    __version__: str

    # one statement a name, as the explicit re-export form of PEP 484 spells it
    from .adapters.base import Adapter as Adapter
    from .adapters.base import Ambiguous as Ambiguous
    from .adapters.base import Call as Call
    from .adapters.base import Done as Done
    from .adapters.base import Escalate as Escalate
    from .adapters.base import Found as Found
    from .adapters.base import LookupFailed as LookupFailed
    from .adapters.base import LookupResult as LookupResult
    from .adapters.base import NotFound as NotFound
    from .adapters.base import Outcome as Outcome
    from .adapters.base import Refused as Refused
    from .adapters.base import Semantics as Semantics
    from .adapters.base import Transient as Transient
    from .adapters.base import receipt_of as receipt_of
    from .adapters.http import HttpAdapter as HttpAdapter
    from .adapters.practice import PracticeWorld
    from .clock import Clock, FakeClock, SystemClock
    from .engine.commands import CommandResult
    from .engine.commands import decide as decide_run
    from .engine.commands import operate as operate_run
    from .engine.commands import resume as resume_run
    from .engine.commands import signal as signal_run
    from .engine.commands import start as start_run
    from .engine.runner import Runner
    from .errors import (
        ApprovalError,
        ApprovalExpired,
        ApprovalStale,
        BindingError,
        BindingInvalid,
        BindingMismatch,
        Diagnostic,
        DuplicateOperation,
        ExpressionError,
        GraphvizNotFound,
        HistoriesInvalid,
        InputConflict,
        LeaseLost,
        LeaseTooShort,
        OperatorRefused,
        RatchetError,
        RunBusy,
        RunError,
        RunNotFound,
        SignalRefused,
        SpecError,
        StepFailed,
        StoreCopiedBack,
        StoreError,
        StoreRevision,
        UsageError,
        VersionConflict,
        WorldError,
    )
    from .evolve.history import History, export_runs, read_histories
    from .evolve.replay import assert_replays_clean, replay_histories
    from .evolve.results import ReplayResult
    from .review.trace import lines as trace_lines
    from .session import Session
    from .spec.model import Spec
    from .spec.validate import (
        Report,
        load_spec,
        load_spec_text,
        validate_path,
        validate_text,
    )
    from .store.records import RunRecord
    from .store.store import Store
    from .worker.passes import worker_pass
    from .worker.pool import Pool

__all__ = [  # the public API, grouped in docs/reference/python-api.md
    "Adapter",
    "Ambiguous",
    "ApprovalError",
    "ApprovalExpired",
    "ApprovalStale",
    "BindingError",
    "BindingInvalid",
    "BindingMismatch",
    "Call",
    "Clock",
    "CommandResult",
    "Diagnostic",
    "Done",
    "DuplicateOperation",
    "Escalate",
    "ExpressionError",
    "FakeClock",
    "Found",
    "GraphvizNotFound",
    "HistoriesInvalid",
    "History",
    "HttpAdapter",
    "InputConflict",
    "LeaseLost",
    "LeaseTooShort",
    "LookupFailed",
    "LookupResult",
    "NotFound",
    "OperatorRefused",
    "Outcome",
    "Pool",
    "PracticeWorld",
    "RatchetError",
    "Refused",
    "ReplayResult",
    "Report",
    "RunBusy",
    "RunError",
    "RunNotFound",
    "RunRecord",
    "Runner",
    "Semantics",
    "Session",
    "SignalRefused",
    "Spec",
    "SpecError",
    "StepFailed",
    "Store",
    "StoreCopiedBack",
    "StoreError",
    "StoreRevision",
    "SystemClock",
    "Transient",
    "UsageError",
    "VersionConflict",
    "WorldError",
    "assert_replays_clean",
    "decide_run",
    "export_runs",
    "load_spec",
    "load_spec_text",
    "operate_run",
    "read_histories",
    "receipt_of",
    "replay_histories",
    "resume_run",
    "signal_run",
    "start_run",
    "trace_lines",
    "validate_path",
    "validate_text",
    "worker_pass",
]

#: The module each public name lives in, and its names there (space-separated); a name is
#: imported under its own name there, but for the command functions, whose names there are bare
#: verbs (:data:`_RENAMED`).
_HOMES: dict[str, str] = {
    "ratchet_runner.spec.validate": "Report load_spec load_spec_text validate_path validate_text",
    "ratchet_runner.spec.model": "Spec",
    "ratchet_runner.session": "Session",
    "ratchet_runner.engine.runner": "Runner",
    "ratchet_runner.engine.commands": "CommandResult",
    "ratchet_runner.store.store": "Store",
    "ratchet_runner.store.records": "RunRecord",
    "ratchet_runner.worker.passes": "worker_pass",
    "ratchet_runner.worker.pool": "Pool",
    "ratchet_runner.evolve.history": "History export_runs read_histories",
    "ratchet_runner.evolve.replay": "assert_replays_clean replay_histories",
    "ratchet_runner.evolve.results": "ReplayResult",
    "ratchet_runner.adapters.practice": "PracticeWorld",
    "ratchet_runner.adapters.http": "HttpAdapter",
    "ratchet_runner.adapters.base": (
        "Adapter Ambiguous Call Done Escalate Found LookupFailed LookupResult NotFound Outcome"
        " Refused Semantics Transient receipt_of"
    ),
    "ratchet_runner.clock": "Clock FakeClock SystemClock",
    "ratchet_runner.errors": (
        "Diagnostic ApprovalError ApprovalExpired ApprovalStale BindingError BindingInvalid"
        " BindingMismatch DuplicateOperation ExpressionError GraphvizNotFound HistoriesInvalid"
        " InputConflict"
        " LeaseLost LeaseTooShort OperatorRefused RatchetError RunBusy RunError RunNotFound"
        " SignalRefused SpecError StepFailed StoreCopiedBack StoreError StoreRevision UsageError"
        " VersionConflict WorldError"
    ),
}
_RENAMED = {
    f"{verb}_run": ("ratchet_runner.engine.commands", verb)
    for verb in ("start", "resume", "decide", "signal", "operate")
} | {"trace_lines": ("ratchet_runner.review.trace", "lines")}
#: Each public name -> (its module, its name there).
_EXPORTS: dict[str, tuple[str, str]] = {
    **{name: (module, name) for module, names in _HOMES.items() for name in names.split()},
    **_RENAMED,
}


def __getattr__(name: str) -> Any:
    """Import a public name's module when the name is first used, and keep the name."""
    if name == "__version__":  # kept on the ground floor, which the engine may import
        from .settings import VERSION

        globals()[name] = VERSION
        return VERSION
    try:
        module, attribute = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
