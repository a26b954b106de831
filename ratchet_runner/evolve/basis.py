"""What every check of a change stands on: :class:`Hazard`, the codes, and :class:`Check`.

A hazard is a verdict on a change: its code (``V101`` to ``V114``, each documented in
``docs/reference/versions.md``), its severity (``error``: the runs it touches cannot move as the
change stands, a mapping or a wait is needed; ``warning``: they can, and something about them
changes that a reviewer must know), a message that ends with what to do, where it is written
(the new version's file, or the old one's for something removed, or the mapping file), and,
when live runs were given, the IDs of those it touches, each with a note.

:class:`Check` holds what the checks share: both versions, their diff, the mapping, and the live
runs on the old version (the runs whose spec digest is the old version's; others are on another
version, which this change does not move). A check finds its **sites** (a state, an effect, a
row the change makes dangerous) and, for each, the runs it touches; :meth:`Check.add` then
decides what is reported:

* without live runs (``live=None``), every site, as what it would do to runs there ("runs in
  state 'proposed' would ..."), its runs not known (``runs`` is None);
* with live runs, a site that touches at least one run, with their IDs and count; a site that
  touches none is dropped, but where the change itself is dangerous whatever runs there are now
  (an operation-ID recipe or the business key changed: runs that start on the old version before
  the deploy, or ended ones asked again, would meet it), and then it is shown with no run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..engine.activation import activation
from ..errors import Severity
from ..spec.model import Spec
from .diff import ENDED_KINDS, SpecDiff, Where, reachable, where
from .mapping import VersionMapping
from .runs import LiveRun

#: Every hazard's code, with its default severity and what it means in one line.
HAZARD_CODES: dict[str, tuple[Severity, str]] = {
    "V101": ("error", "a state runs can be in is removed or renamed, with no mapping for them"),
    "V102": ("error", "runs would move into a state of another kind"),
    "V103": ("error", "runs are inside an effect window: they cannot move until it closes"),
    "V104": ("error", "the operation-ID recipe changes for an effect runs have attempted"),
    "V105": ("warning", "an effect's arguments change for runs that have not called it yet"),
    "V106": ("warning", "an approval's rules change where runs hold or await it"),
    "V107": ("error", "the undo of an effect runs already made changes or is removed"),
    "V108": ("warning", "the rows out of an occupied state route its runs elsewhere"),
    "V109": ("error", "a timer changes in a state where runs have it armed"),
    "V110": ("error", "the new version reads input fields old runs may lack, or retypes them"),
    "V111": ("error", "an event or operator action waiting or queued runs need is removed"),
    "V112": ("warning", "the new version reads receipt fields old effects never recorded"),
    "V113": ("warning", "the retry owner or budget changes for runs between attempts"),
    "V114": ("warning", "a state that holds runs is unreachable in the new version"),
}


@dataclass(frozen=True)
class Hazard:
    """One verdict on a change: located, with what to do, and the live runs it touches."""

    code: str
    severity: Severity
    message: str
    file: str
    line: int
    column: int
    pointer: str = ""
    #: The IDs of the live runs it touches; None when no live runs were given.
    runs: tuple[str, ...] | None = None
    #: What it does to each run it touches: (run ID, note).
    notes: tuple[tuple[str, str], ...] = ()

    @property
    def count(self) -> int | None:
        """How many live runs it touches (None: not checked against live runs)."""
        return None if self.runs is None else len(self.runs)

    def note(self, run_id: str) -> str | None:
        return dict(self.notes).get(run_id)

    def format(self) -> str:
        """``FILE:LINE:COL: CODE message``, as a lint finding is shown."""
        return f"{self.file}:{self.line}:{self.column}: {self.code} {self.message}"

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "severity": self.severity,
            "message": self.message,
            "file": self.file,
            "line": self.line,
            "column": self.column,
            "pointer": self.pointer,
            "runs": None if self.runs is None else list(self.runs),
            "count": self.count,
            "notes": dict(self.notes),
        }

    @property
    def sort_key(self) -> tuple[int, str, int, int, str]:
        order = 0 if self.severity == "error" else 1
        return (order, self.file, self.line, self.column, self.code)


def plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


class Check:
    """What the checks of one change share, and where their hazards go."""

    def __init__(
        self,
        old: Spec,
        new: Spec,
        changes: SpecDiff,
        live: Sequence[LiveRun] | None,
        mapping: VersionMapping | None,
    ) -> None:
        self.old, self.new, self.diff, self.mapping = old, new, changes, mapping
        #: The live runs on the old version (None: no live runs were given).
        self.live = None if live is None else [r for r in live if r.spec_digest == old.digest]
        self.found: list[Hazard] = []
        self._reach: dict[str, set[str]] = {}

    # -- states and runs ------------------------------------------------------------------

    @property
    def checked(self) -> bool:
        """Whether live runs were given (the hazards then name the runs they touch)."""
        return self.live is not None

    def target(self, state: str) -> str:
        """The state of the new version a run standing in ``state`` moves to."""
        return self.mapping.target(state) if self.mapping is not None else state

    def mapped(self, state: str) -> bool:
        return self.mapping is not None and state in self.mapping.states

    def occupiable(self) -> list[str]:
        """The old version's states a live run can stand in (all but those that end a run)."""
        return [n for n, s in self.old.states.items() if s.kind not in ENDED_KINDS]

    def runs_in(self, *states: str) -> list[LiveRun]:
        """The live runs standing in any of ``states`` (none without live runs)."""
        return [r for r in self.live or () if r.state in states]

    def runs(self, keep: Callable[[LiveRun], bool]) -> list[LiveRun]:
        return [r for r in self.live or () if keep(r)]

    def reaches(self, run: LiveRun, state: str) -> bool:
        """Whether ``run``, moved to the new version, can still come to the new version's
        ``state`` (it stands there, or a path of rows leads there)."""
        start = self.target(run.state)
        if start not in self._reach:
            self._reach[start] = reachable(self.new, start)
        return state in self._reach[start]

    def reached(self) -> set[str]:
        """The new version's states a run of the old one could come to: those reachable from
        where any occupiable state's runs move (what only a state nothing reaches reads, no
        run reads)."""
        if "" not in self._reach:
            found: set[str] = set()
            for state in self.occupiable():
                if self.target(state) in self.new.states:
                    found |= reachable(self.new, self.target(state))
            self._reach[""] = found
        return self._reach[""]

    def activation(self, run: LiveRun, spec: Spec, **extra: Any) -> dict[str, Any]:
        """What ``spec``'s guards and arguments would see of ``run`` (in the new version: as
        moved, standing in its target state), as the runner builds it."""
        record = run.run if spec is self.old else replace(run.run, state=self.target(run.state))
        return activation(record, spec, **extra)

    # -- places ---------------------------------------------------------------------------

    def at_new(self, pointer: str, *, key: bool = False) -> Where:
        return where(self.new, pointer, key=key)

    def at_old(self, pointer: str, *, key: bool = False) -> Where:
        return where(self.old, pointer, key=key)

    def at_state(self, state: str) -> Where:
        """Where ``state`` (an old state's name) is written: in the new version if it is
        there, else in the old one."""
        if state in self.new.states:
            return self.at_new(f"/states/{state}", key=True)
        return self.at_old(f"/states/{state}", key=True)

    def who(self, touched: Sequence[LiveRun], what: str) -> str:
        """``runs in state 'proposed'`` without live runs; ``2 runs in ...`` with them."""
        if not self.checked:
            return f"runs {what}"
        return f"{plural(len(touched), 'run')} {what}"

    # -- reporting ------------------------------------------------------------------------

    def add(
        self,
        code: str,
        at: Where,
        message: str,
        touched: Iterable[LiveRun] = (),
        notes: Mapping[str, str] | None = None,
        *,
        severity: Severity | None = None,
        always: bool = False,
    ) -> None:
        """Report a site: as it stands without live runs; with them, only when it touches a
        run, or ``always`` (the change itself is dangerous: shown with no run)."""
        runs = list(dict.fromkeys(r.id for r in touched))
        if self.checked and not runs and not always:
            return
        self.found.append(
            Hazard(
                code,
                severity or HAZARD_CODES[code][0],
                message,
                at.file,
                at.line,
                at.column,
                at.pointer,
                tuple(runs) if self.checked else None,
                tuple((run, note) for run, note in (notes or {}).items() if run in runs),
            )
        )
