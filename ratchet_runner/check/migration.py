"""``ratchet check OLD --migrate-to NEW``: a migration's apply and rollback, crash-checked.

For each example of OLD, a population of runs is made on one store, each run with a practice
world of its own: runs left at the example's first decision, one approved and not yet carried
on, one stopped at each crash window of each effect the example reaches (a call written ahead,
a request in flight, a reply lost, a receipt stored; the crashed process's lease then lapses),
and one carried to its end. Each run's business key is the example's, with a number after it.

**Apply.** ``ratchet migrate NEW --apply --only-ready`` is run on the population and killed at
each of its windows: as each of its commits is about to be sent (``commit-K``: commits 1 to
K-1 landed, K is lost with the process), and once it has made them all but before it reports
(``after``). Another window per run it moves (``raced:KEY``): between the migration's reading of
the run and its write, another process takes the run as far as it goes, under the version it is
on, as a worker would. **Rollback.** The same population, migrated (``mig_check``), is rolled
back, killed and raced at the same kinds of windows.

After each crash, the runs are checked wholly on one version (:func:`~ratchet_runner.check.
versions.whole`); the migration is run again to its end in a new process, as an operator would
(a new apply, or the same rollback), and checked again; then every run is carried to its end
under the version it is on (approving what waits, in its own practice world) and checked:
no run lost, none half-migrated or moved from where it no longer stood, no effect made twice, no
approval given under one version consumed under another, no compensation lost
(:func:`~ratchet_runner.check.invariants.verify` on each run, under the version it ended on).

With ``kill``, the commit windows are crashed in a real child process killed with SIGKILL
(``python -m ratchet_runner.check.interrupted``); otherwise in-process, by an exception raised as
the commit is about to be sent (rolled back, as a killed process's transaction is). Raced
windows always run in-process: nothing is killed in them.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import Diagnostic, RatchetError, RunNotFound, SpecError, UsageError
from ..evolve.mapping import check_mapping, mapping_from_text
from ..evolve.migrate import same_numbers
from ..spec.validate import load_stored_spec, validate_path
from ..store.store import Store
from . import versions
from .cases import Case, Crash, _runner, carry
from .interrupted import (
    PHASES,
    MigrationCase,
    Versions,
    kill_at,
    migrating,
    windows,
)
from .invariants import Violation, ViolationKind, verify
from .plan import _as_is, load_checkable
from .population import Seat, populate, seats_of, session_at, store_at


@dataclass
class MigrationResult:
    case: MigrationCase
    violations: list[Violation] = field(default_factory=list)
    runs: int = 0
    moved: int = 0  # by the crashed migration and the one run again, together
    changes: int = 0  # made in the practice worlds by the end
    crashed: bool = False
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.violations

    def to_json(self) -> dict[str, Any]:
        return {
            "case": self.case.name,
            "example": self.case.example,
            "phase": self.case.phase,
            "window": self.case.window,
            "what": self.case.what,
            "crashed": self.crashed,
            "runs": self.runs,
            "moved": self.moved,
            "changes": self.changes,
            "seconds": self.seconds,
            "violations": [v.message for v in self.violations],
            "violation_kinds": [v.kind.value for v in self.violations],
        }


# -- a check ----------------------------------------------------------------------------------


class MigrationCheck:
    """A migration check's populations (one per example, and each migrated for the rollback
    phase), made once in a folder of their own; each case runs on a copy."""

    def __init__(self, versions_: Versions, examples: Sequence[str]) -> None:
        self.versions = versions_
        self.examples = list(examples)
        self._tmp = tempfile.TemporaryDirectory(prefix="ratchet-migrate-")
        self.root = Path(self._tmp.name)

    def __enter__(self) -> MigrationCheck:
        return self

    def __exit__(self, *_exc: object) -> None:
        self._tmp.cleanup()

    def template(self, example: str, phase: str) -> Path:
        """The population a case of ``example`` in ``phase`` starts from, made on first use."""
        folder = self.root / f"{example}.{phase}"
        if folder.exists():
            return folder
        if phase == "apply":
            populate(folder, self.versions.old, self.versions.old_text, example)
        else:
            shutil.copytree(self.template(example, "apply"), folder)
            with store_at(folder) as store:
                migrating(store, self.versions, "apply")
        return folder

    def cases(self, phases: Sequence[str] = PHASES) -> list[MigrationCase]:
        return [
            case
            for example in self.examples
            for phase in phases
            for case in windows(self.template(example, phase), self.versions, example, phase)
        ]

    def case_named(self, name: str) -> MigrationCase:
        """The case ``EXAMPLE:PHASE:WINDOW`` (as a failing one is printed)."""
        example, _, rest = name.partition(":")
        phase, _, _window = rest.partition(":")
        if example not in self.versions.old.examples or phase not in PHASES:
            raise UsageError(
                f"expected EXAMPLE:PHASE:WINDOW with an example of the old version and a phase "
                f"of {', '.join(PHASES)}"
            )
        for case in windows(self.template(example, phase), self.versions, example, phase):
            if case.name == name:
                return case
        raise UsageError(f"{example} has no {phase} window {_window!r} (see the check's table)")

    def run(self, case: MigrationCase, kill: bool = False) -> MigrationResult:
        began = time.monotonic()
        result = MigrationResult(case)
        with tempfile.TemporaryDirectory(prefix="ratchet-migrate-case-") as tmp:
            folder = Path(tmp) / "case"
            shutil.copytree(self.template(case.example, case.phase), folder)
            try:
                self._run(folder, case, kill, result)
            except RatchetError as exc:
                result.violations.append(
                    Violation(ViolationKind.RESUME_FAILED, f"resuming failed: {exc}")
                )
        result.seconds = round(time.monotonic() - began, 3)
        return result

    def _run(self, folder: Path, case: MigrationCase, kill: bool, result: MigrationResult) -> None:
        seats = seats_of(folder)
        result.runs = len(seats)
        versions_ = self.versions
        if case.window.startswith("raced:"):
            key = case.window.removeprefix("raced:")
            by_key = {s.business_key: s for s in seats}
            with store_at(folder) as store:
                seen = migrating(
                    store,
                    versions_,
                    case.phase,
                    race=lambda run_id: _race(folder, case.example, by_key[key], store, run_id),
                )
            result.moved += len(seen.applied.moved) if seen.applied else 0
        else:
            at = 0 if case.window == "after" else int(case.window.removeprefix("commit-"))
            result.crashed = True
            if kill:
                kill_at(folder, case.phase, at, versions_)
            else:
                with store_at(folder) as store, suppress(Crash):
                    migrating(store, versions_, case.phase, die_at=at)
        stopped = "after the race" if case.window.startswith("raced:") else "after the crash"
        result.violations += self._whole(folder, seats, stopped)
        with store_at(folder) as store:  # a new process runs the migration again
            seen = migrating(store, versions_, case.phase, again=True)
            result.moved += len(seen.applied.moved) if seen.applied else 0
        result.violations += self._whole(folder, seats, "after the migration was run again")
        result.violations += self._carried(folder, seats, case.example, result)

    def _whole(self, folder: Path, seats: Sequence[Seat], when: str) -> list[Violation]:
        found: list[Violation] = []
        with store_at(folder) as store:
            for seat in seats:
                try:
                    run = store.get_run(seat.run)
                except RunNotFound:
                    found.append(
                        Violation(ViolationKind.RUN_LOST, f"{seat.business_key} is gone {when}")
                    )
                    continue
                for v in versions.whole(
                    run,
                    store.history(run.id),
                    store.timers(run.id),
                    self.versions.old,
                    self.versions.by_digest,
                ):
                    found.append(Violation(v.kind, f"{v.message} ({when})"))
        return found

    def _carried(
        self, folder: Path, seats: Sequence[Seat], example: str, result: MigrationResult
    ) -> list[Violation]:
        """Every run carried to its end under the version it is on, each in its own world, and
        checked."""
        found: list[Violation] = []
        specs = self.versions.by_digest
        for seat in seats:
            with session_at(folder, seat.home) as session:
                runner = _runner(session, Case(example, "", "none", "none"), None)
                run = carry(runner, runner.store.get_run(seat.run), example)
                spec = specs.get(run.spec_digest) or load_stored_spec(
                    runner.store.spec_text(run.spec_digest)
                )
                history = runner.store.history(run.id)
                found += [
                    Violation(v.kind, f"{seat.business_key} ({seat.position}): {v.message}")
                    for v in verify(spec, runner, session.world, run)
                ]
                found += versions.whole(
                    run, history, runner.store.timers(run.id), self.versions.old, specs
                )
                found += versions.approvals(run, history, self.versions.old, specs)
                result.changes += len(session.world.changes())
        return found


def _race(folder: Path, example: str, seat: Seat, store: Store, run_id: str) -> None:
    """Another process carries the raced run on (the one ``seat`` holds), as far as it goes
    under the version it is on."""
    if seat.run != run_id:
        return
    with session_at(folder, seat.home) as session:
        runner = _runner(session, Case(example, "", "none", "none"), None)
        carry(runner, store.get_run(run_id), example)


def run_cases(
    check: MigrationCheck,
    selected: Sequence[MigrationCase],
    *,
    kill: bool = False,
    progress: Callable[[MigrationResult], None] | None = None,
) -> Iterator[MigrationResult]:
    for case in selected:
        result = check.run(case, kill)
        if progress is not None:
            progress(result)
        yield result


def load_versions(
    old_path: str,
    new_path: str,
    mapping_path: str | None = None,
    *,
    hint: Callable[[str], AbstractContextManager[None]] = _as_is,
) -> tuple[Versions, list[Diagnostic]]:
    """The two versions of a migration check and the mapping's text, and the old version's
    effect-safety findings it is checked despite: OLD must be checkable
    (:func:`~ratchet_runner.check.plan.load_checkable`) with examples, NEW valid, of the same
    workflow, and a version a migration can move runs to (another ``spec_version``, or
    ``policy_version``, than OLD's); the mapping, if any, fitting both. A
    :class:`UsageError` (raised inside ``hint(OPTION)``) or :class:`SpecError` otherwise."""
    old, old_text, findings = load_checkable(old_path)
    with hint("SPEC"):
        if not old.examples:
            raise UsageError(
                f"{old_path} has no examples: a migration check makes its runs from each example "
                "(its input, and the practice world it runs against); add one under examples: "
                "(docs/reference/spec.md#examples)"
            )
    report = validate_path(new_path)
    if report.spec is None or report.errors:
        raise SpecError(report.errors or report.diagnostics)
    new, new_text = report.spec, Path(new_path).read_text(encoding="utf-8")
    with hint("--migrate-to"):
        if new.name != old.name:
            raise UsageError(
                f"{new_path} is workflow {new.name!r}, {old_path} is {old.name!r}: a migration "
                "moves runs between two versions of one workflow"
            )
        if new.digest == old.digest:
            raise UsageError(f"{new_path} is the same text as {old_path}: nothing to migrate")
        if same_numbers(old, new):
            raise UsageError(
                f"{new_path} has the spec_version ({new.spec_version}) and policy_version of "
                f"{old_path} with another text: ratchet migrate refuses it (R208: an approval "
                "given under one text would count under the other); give it a new spec_version"
            )
    mapping_text = None
    if mapping_path is not None:
        with hint("--mapping"):
            mapping_text = Path(mapping_path).read_text(encoding="utf-8")
        mapping = mapping_from_text(mapping_text, mapping_path)
        wrong = check_mapping(mapping, old, new)
        if wrong:
            raise SpecError(wrong)
        if mapping.approvals == "keep":
            with hint("--mapping"):
                raise UsageError(
                    f"{mapping_path}: approvals: keep cannot be honoured by a migration "
                    "(ratchet migrate refuses it): use approvals: void"
                )
    return Versions(old, old_text, new, new_text, mapping_text), findings
