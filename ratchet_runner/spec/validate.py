"""Validation of spec files: load safely, check the schema, build the model, lint.

:func:`validate_path` never raises for a bad spec: every problem, including an unreadable or
hostile file, comes back as a located :class:`~ratchet_runner.errors.Diagnostic`. :func:`load_spec`
is the strict form the runner uses: it returns a :class:`~ratchet_runner.spec.model.Spec` or raises
:class:`~ratchet_runner.errors.SpecError`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import Diagnostic, SpecError
from .lint import lint
from .loader import MAX_BYTES, Document, load_file, load_text
from .model import Spec, build
from .schema import validate_document


@dataclass
class Report:
    """What validating one file found."""

    file: str
    diagnostics: list[Diagnostic] = field(default_factory=list)
    spec: Spec | None = None

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "error"]

    @property
    def warnings(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "warning"]

    def ok(self, *, strict: bool = False) -> bool:
        return not self.errors and not (strict and self.warnings)

    def to_json(self, *, strict: bool = False) -> dict[str, Any]:
        return {
            "file": self.file,
            "valid": self.ok(strict=strict),
            "errors": len(self.errors),
            "warnings": len(self.warnings),
            "diagnostics": [d.to_json() for d in self.diagnostics],
        }


def validate_document_full(doc: Document) -> Report:
    report = Report(doc.file)
    report.diagnostics = validate_document(doc)
    if report.diagnostics:
        # Semantic checks assume the shapes the schema promises; fix those first.
        report.diagnostics.sort()
        return report
    spec = build(doc)
    report.diagnostics = sorted(set(lint(spec)))
    report.spec = spec
    return report


#: A top-level key every spec has. A file found in a directory with neither is not a spec (an
#: input file, a CI config, notes) and is skipped with a note, not reported as spec errors.
_SPEC_KEY = re.compile(rb"^(?:name|transitions)[ \t]*:", re.M)


def looks_like_spec(path: Path) -> bool:
    """Whether the file at ``path`` has a top-level ``name:`` or ``transitions:`` line (or
    cannot be read: then it is validated, and its error reported)."""
    try:
        with path.open("rb") as file:
            head = file.read(MAX_BYTES + 1)
    except OSError:
        return True
    return _SPEC_KEY.search(head) is not None


def spec_files(
    paths: Iterable[str], skipped: list[str] | None = None
) -> Iterator[tuple[Path, str]]:
    """Each given path with the name to report it by; a directory stands for every ``.yaml`` and
    ``.yml`` file under it that looks like a spec (:func:`looks_like_spec`), in sorted order, and
    the others are added to ``skipped``. A file named explicitly is always validated."""
    for given in paths:
        path = Path(given)
        if path.is_dir():
            for found in sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml")):
                if found.is_file() and not looks_like_spec(found):
                    if skipped is not None:
                        skipped.append(str(found))
                    continue
                yield found, str(found)
        else:
            yield path, given


def validate_path(path: str | Path, display: str | None = None) -> Report:
    """Validate the spec file at ``path``."""
    name = display if display is not None else str(path)
    try:
        doc = load_file(path, name)
    except SpecError as exc:
        return Report(name, exc.diagnostics)
    return validate_document_full(doc)


def validate_text(text: str | bytes, file: str = "<string>") -> Report:
    """Validate spec text held in memory."""
    try:
        doc = load_text(text, file)
    except SpecError as exc:
        return Report(file, exc.diagnostics)
    return validate_document_full(doc)


def load_spec(path: str | Path, *, strict: bool = False) -> Spec:
    """The spec at ``path``; raises :class:`SpecError` unless it is valid."""
    report = validate_path(path)
    if not report.ok(strict=strict) or report.spec is None:
        raise SpecError(report.errors or report.diagnostics)
    return report.spec


def load_stored_spec(text: str, name: str = "<stored spec>") -> Spec:
    """The spec version a run is pinned to, from the text stored when its first run started.

    That text was valid then; a check added to Ratchet since (a stricter schema, a new lint) must
    not strand the runs pinned to it, so its findings are not held against it: only a text that
    no longer loads, or no longer builds into a spec, is refused (:class:`SpecError`)."""
    doc = load_text(text, name)
    report = validate_document_full(doc)
    if report.spec is not None:
        return report.spec
    try:
        return build(doc)
    except Exception:  # the shapes the model needs are gone: nothing can drive it
        raise SpecError(report.errors or report.diagnostics) from None


def load_spec_text(text: str, name: str = "<stored spec>") -> Spec:
    """The spec held in ``text`` (e.g. the version a run was pinned to); raises
    :class:`SpecError` unless it is valid."""
    report = validate_text(text, name)
    if not report.ok() or report.spec is None:
        raise SpecError(report.errors or report.diagnostics)
    return report.spec
