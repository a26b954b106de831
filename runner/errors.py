"""Ratchet's exceptions and diagnostics.

Every error Ratchet raises derives from :class:`RatchetError` and carries a stable ``code``.
The class docstring is the default message::

    RatchetError
    ├── SpecError            a spec cannot be loaded or is invalid (carries diagnostics)
    ├── UsageError           the caller asked for something that cannot be done
    ├── StoreError           the store could not do what was asked
    │   ├── VersionConflict  another worker moved the run first (compare-and-set lost)
    │   │   └── LeaseLost    another worker holds (or took over) the run's lease
    │   │       └── RunBusy  a live lease of another process holds the run: it carries it on
    │   ├── RunNotFound      no run has that ID
    │   └── DuplicateOperation  an operation ID is already recorded (idempotency is data)
    └── RunError             a run cannot take that step
        ├── ApprovalError    no valid approval covers the effect, or a decision is refused
        └── SignalRefused    the signal does not fit the run's state

A :class:`Diagnostic` is one located problem in a spec: ``FILE:LINE:COL: CODE message``. Codes
starting with ``E`` are errors, codes starting with ``W`` are warnings; the full list is in
``docs/reference/lint-codes.md`` and in :data:`ratchet_runner.spec.codes.CODES`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Severity = Literal["error", "warning"]


@dataclass(frozen=True, order=True)
class Diagnostic:
    """One located problem found in a spec file."""

    file: str
    line: int
    column: int
    code: str
    message: str
    pointer: str = field(default="", compare=False)

    @property
    def severity(self) -> Severity:
        return "warning" if self.code.startswith("W") else "error"

    def format(self) -> str:
        """Render as ``FILE:LINE:COL: CODE message`` (the form editors and CI jump to)."""
        return f"{self.file}:{self.line}:{self.column}: {self.code} {self.message}"

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "line": self.line,
            "column": self.column,
            "code": self.code,
            "severity": self.severity,
            "message": self.message,
            "pointer": self.pointer,
        }


class RatchetError(Exception):
    """Ratchet failed."""

    code = "R000"

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())

    @property
    def message(self) -> str:
        return str(self.args[0])


class SpecError(RatchetError):
    """The spec is invalid."""

    code = "R100"

    def __init__(self, diagnostics: list[Diagnostic], message: str | None = None) -> None:
        self.diagnostics = sorted(diagnostics)
        first = self.diagnostics[0].format() if self.diagnostics else None
        super().__init__(message or first)


class UsageError(RatchetError):
    """The request cannot be carried out as given."""

    code = "R200"


class StoreError(RatchetError):
    """The store could not carry out the request."""

    code = "R300"


class VersionConflict(StoreError):
    """The run has moved on: another worker changed it first. Reload; never overwrite."""

    code = "R301"


class LeaseLost(VersionConflict):
    """Another worker holds the run's lease (or took it over): commit nothing more to it."""

    code = "R304"


class RunBusy(LeaseLost):
    """Another live process holds the run's lease: it carries the run on; this one must not."""

    code = "R305"

    def __init__(self, message: str, holder: str = "", seconds_left: float = 0.0) -> None:
        super().__init__(message)
        self.holder = holder
        self.seconds_left = seconds_left


class RunNotFound(StoreError):
    """No run has that ID."""

    code = "R302"


class DuplicateOperation(StoreError):
    """That operation ID is already recorded."""

    code = "R303"


class RunError(RatchetError):
    """The run cannot take that step."""

    code = "R400"


class ApprovalError(RunError):
    """No valid approval covers this effect."""

    code = "R401"


class ApprovalExpired(ApprovalError):
    """The approval expired before the effect ran; the run follows its ``expired`` row."""

    code = "R403"


class ApprovalStale(ApprovalError):
    """The approval no longer covers what would run (arguments or policy changed)."""

    code = "R404"


class SignalRefused(RunError):
    """The signal does not fit the run's current state."""

    code = "R402"
