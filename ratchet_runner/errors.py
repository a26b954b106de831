"""Ratchet's exceptions and diagnostics.

Every error Ratchet raises to its user derives from :class:`RatchetError` and carries a stable
``code`` (``R`` and three digits: the hundreds name the family, ``R1xx`` spec, ``R2xx`` usage,
``R3xx`` store, ``R4xx`` run; a code once given is never reused or renumbered). The class
docstring is the default message. The whole tree, with each code (a test keeps this drawing true)::

    RatchetError                R000  Ratchet failed
    ├── SpecError               R100  a spec cannot be loaded or is invalid (carries diagnostics)
    │   └── ExpressionError     R101  an expression does not compile or cannot be evaluated
    ├── UsageError              R200  the caller asked for something that cannot be done
    │   ├── GraphvizNotFound    R201  an SVG, PNG or PDF diagram needs Graphviz's dot program
    │   ├── WorldError          R202  the practice world was given a fixture or fault it cannot use
    │   ├── BindingError        R203  an adapter binding's settings are missing, mistyped or wrong
    │   │   ├── BindingInvalid  R204  a binding file is invalid or does not cover what a spec uses
    │   │   └── BindingMismatch R205  the run started under another binding than this process's
    │   ├── CommandLineError    R206  the command line is malformed (exit status 2)
    │   ├── MappingInvalid      R207  a version mapping file is unreadable or malformed
    │   ├── MigrationRefused    R208  a migration holds runs that cannot move, or has none to undo
    │   └── HistoriesInvalid    R209  a histories file (ratchet export's JSONL) cannot be read
    ├── StoreError              R300  the store could not do what was asked
    │   ├── VersionConflict     R301  another worker moved the run first (compare-and-set lost)
    │   │   └── LeaseLost       R304  another worker holds (or took over) the run's lease
    │   │       └── RunBusy     R305  another process holds the run under a live lease
    │   ├── RunNotFound         R302  no run has that ID
    │   ├── DuplicateOperation  R303  an operation ID is already recorded (idempotency is data)
    │   ├── StoreRevision       R306  the store's schema is older or newer than this Ratchet's
    │   └── StoreCopiedBack     R307  the store's file was copied back, not put back by restore
    └── RunError                R400  a run cannot take that step
        ├── ApprovalError       R401  no valid approval covers the effect, or a decision is refused
        │   ├── ApprovalExpired R403  the approval expired before the effect ran
        │   └── ApprovalStale   R404  the approval no longer covers what would run
        ├── SignalRefused       R402  the signal does not fit the run's state
        ├── OperatorRefused     R405  an operator control was refused; nothing changed
        ├── LeaseTooShort       R406  no lease this process takes covers the effect's timeout
        ├── StepFailed          R407  a step failed for good: the run waits for a person
        ├── UnstorableValue     R408  a value the store cannot keep, refused before any write
        └── InputConflict       R409  the business key has a run already, with another input

``docs/reference/errors.md`` documents every code and the exit status the CLI gives it. This
module imports nothing else of the package, so adapters and plugins may import it.

A :class:`Diagnostic` is one located problem in a spec: ``FILE:LINE:COL: CODE message``. Codes
starting with ``E`` are errors, codes starting with ``W`` are warnings; the full list is in
``docs/reference/lint-codes.md`` and in :data:`ratchet_runner.spec.codes.CODES`. Codes starting
with ``B`` are errors found in a binding file (``docs/reference/bindings.md``).

Over 400 lines, as one concern: every error Ratchet raises, in the one tree its codes and the
reference page follow, each class short.
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
    #: The exit status of a command that ends in this error (``docs/reference/errors.md``).
    exit_status = 1

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())

    @property
    def message(self) -> str:
        return str(self.args[0])

    def report(self) -> list[str]:
        """What a command that ends in this error prints on stderr, line by line."""
        return [f"ratchet: {self.code} {self.message}"]


class SpecError(RatchetError):
    """The spec is invalid."""

    code = "R100"

    def __init__(self, diagnostics: list[Diagnostic], message: str | None = None) -> None:
        self.diagnostics = sorted(diagnostics)
        first = self.diagnostics[0].format() if self.diagnostics else None
        super().__init__(message or first)

    def report(self) -> list[str]:
        """Every diagnostic as ``FILE:LINE:COL: CODE message``; with none (an expression that
        cannot be evaluated, say), the code and message."""
        return [d.format() for d in self.diagnostics] or super().report()


class ExpressionError(SpecError):
    """An expression does not compile, names what does not exist, or cannot be evaluated.

    ``lint_code`` is the code the validator reports it under (``E305``, ``E306``, ...);
    ``column`` is where in the expression, when known. It carries no diagnostics: it is raised
    before (or after) anything is located in a file."""

    code = "R101"

    def __init__(self, lint_code: str, message: str, column: int | None = None) -> None:
        super().__init__([], message)
        self.lint_code = lint_code
        self.column = column


class UsageError(RatchetError):
    """The request cannot be carried out as given."""

    code = "R200"


class GraphvizNotFound(UsageError):
    """Graphviz's dot program was not found, and SVG, PNG and PDF need it."""

    code = "R201"

    def __init__(self) -> None:
        super().__init__(
            "Graphviz's `dot` program was not found on PATH, and --format svg, png and pdf need "
            "it to draw. Install Graphviz: `apt-get install graphviz` (Debian, Ubuntu), "
            "`brew install graphviz` (macOS), or see https://graphviz.org/download/. "
            "--format dot and --format mermaid print text and need no Graphviz."
        )


class WorldError(UsageError):
    """The practice world was given something it cannot use (a bad fixture or fault)."""

    code = "R202"


class BindingError(UsageError):
    """An adapter binding cannot be used: a setting is missing, mistyped or out of range, or a
    secret it names cannot be read. The message names the setting (never a secret's value)."""

    code = "R203"


class BindingInvalid(BindingError):
    """A binding file cannot be read, or does not cover what a spec uses (an adapter unbound, an
    operation or lookup its implementation lacks): nothing was started. It carries the located
    findings (``B`` codes, ``docs/reference/bindings.md``), which the CLI prints one per line."""

    code = "R204"

    def __init__(self, diagnostics: list[Diagnostic], message: str | None = None) -> None:
        self.diagnostics = sorted(diagnostics)
        first = self.diagnostics[0].format() if self.diagnostics else None
        super().__init__(message or first)

    def report(self) -> list[str]:
        """Every finding as ``FILE:LINE:COL: CODE message``; with none, the code and message."""
        return [d.format() for d in self.diagnostics] or super().report()


class BindingMismatch(BindingError):
    """The run started under another binding than the one this process resolves adapters
    through: a worker leaves it to a worker that has that binding; a command changes nothing."""

    code = "R205"


class CommandLineError(UsageError):
    """The command line is malformed: an unknown command or option, a missing argument, a bad
    option value, an argument that is not UTF-8. Exit status 2, as for every usage error."""

    code = "R206"
    exit_status = 2


class MigrationRefused(UsageError):
    """A migration cannot be applied as asked (``ratchet migrate``): its plan holds runs that
    cannot move now (without ``--only-ready``), or a rollback names a migration no run of the
    workflow came by. Nothing was moved."""

    code = "R208"


class MappingInvalid(UsageError):
    """A version mapping file (``ratchet diff --mapping``) cannot be used: it cannot be read as
    a safe YAML mapping (the spec loader's ``E1xx``), or has a key, a type or a value a mapping
    may not have (``V201`` to ``V203``). It carries the located findings, which the CLI prints
    one per line."""

    code = "R207"

    def __init__(self, diagnostics: list[Diagnostic], message: str | None = None) -> None:
        self.diagnostics = sorted(diagnostics)
        first = self.diagnostics[0].format() if self.diagnostics else None
        super().__init__(message or first)

    def report(self) -> list[str]:
        """Every finding as ``FILE:LINE:COL: CODE message``; with none, the code and message."""
        return [d.format() for d in self.diagnostics] or super().report()


class HistoriesInvalid(UsageError):
    """A file of run histories (``ratchet export``'s JSONL) cannot be read: a line that is not
    JSON, holds a number JSON cannot carry the same everywhere, nests too deep, names a format
    this Ratchet does not read, or does not fit the schema. Nothing was replayed. It carries
    the findings (``problems``: each with ``format()``, ``FILE:LINE: CODE message``, with the
    ``V4xx`` codes of docs/reference/histories.md), which the CLI prints one per line."""

    code = "R209"

    def __init__(self, problems: list[Any], message: str | None = None) -> None:
        self.problems = list(problems)
        first = self.problems[0].format() if self.problems else None
        super().__init__(message or first)

    def report(self) -> list[str]:
        """Every finding as ``FILE:LINE: CODE message``; with none, the code and message."""
        return [p.format() for p in self.problems] or super().report()


class StoreError(RatchetError):
    """The store could not carry out the request."""

    code = "R300"


class VersionConflict(StoreError):
    """The run has moved on: another worker changed it first. Reload; never overwrite."""

    code = "R301"
    exit_status = 4

    def report(self) -> list[str]:
        return [f"ratchet: {self.code} {self.message}; this command changed nothing"]


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


class StoreRevision(StoreError):
    """The store's schema is at another revision than this Ratchet's: older (``ratchet db
    upgrade`` moves it to this code's; SQLite upgrades itself) or newer (a newer Ratchet moved
    it on). Nothing was changed."""

    code = "R306"


class StoreCopiedBack(StoreError):
    """The store's file is behind the high-water mark kept beside it: it was put back from a copy
    without ``ratchet restore``, and would make again the calls made after that copy was taken.
    Refused, nothing changed, until an operator confirms it with ``ratchet restore --mark``."""

    code = "R307"


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


class OperatorRefused(RunError):
    """The operator control was refused; nothing changed."""

    code = "R405"


class LeaseTooShort(RunError):
    """No lease this process takes covers the effect's timeout: run with a longer --lease.

    Not the run's fault, but the process's: a driver that meets it leaves the run unchanged to
    a process whose lease is long enough, and never parks it. ``spec`` and ``digest`` name the
    spec version that needs the longer lease (empty when not known), ``needed`` the smallest
    whole ``--lease`` that is enough."""

    code = "R406"

    def __init__(
        self, message: str | None = None, *, spec: str = "", digest: str = "", needed: int = 0
    ) -> None:
        super().__init__(message)
        self.spec = spec
        self.digest = digest
        self.needed = needed


class StepFailed(RunError):
    """A step failed with an error the run cannot recover from by itself: the run was moved to
    the operator queue with the error as evidence.

    ``run`` is the run record as parked (a ``RunRecord``; typed loosely because this module
    imports nothing else of the package)."""

    code = "R407"

    def __init__(self, message: str, run: Any) -> None:
        super().__init__(message)
        self.run = run


class UnstorableValue(RunError):
    """A value the store cannot keep as given: a number that is not finite (``NaN``,
    ``Infinity``, ``1e400``), text that is not valid Unicode (a lone surrogate), or a name
    longer than the store keeps. Refused before anything is written, the same way on every
    database (PostgreSQL would refuse it, SQLite would keep what no reader can use)."""

    code = "R408"


class InputConflict(RunError):
    """The business key already names a run, started with another input: starting is idempotent
    for the same input only (normalised JSON: ``10.0`` is ``10``), and other input for the same
    key is a conflict, refused with nothing written, as a payment API refuses an idempotency key
    reused with other parameters. Exit status 5: a script can tell it from other refusals.

    ``run`` is the existing run (a ``RunRecord``; typed loosely because this module imports
    nothing else of the package); ``field`` the path of the first field that differs
    (``input/amount``)."""

    code = "R409"
    exit_status = 5

    def __init__(self, message: str, run: Any, field: str) -> None:
        super().__init__(message)
        self.run = run
        self.field = field
