"""What replaying a history says: clean, or the first divergence; and where an unfinished run
would go on.

:class:`ReplayResult` is one run's verdict: it replays clean, or it diverges at one event, with
the divergence's class and code (:data:`CODES`, the ``V3xx`` codes of
docs/reference/histories.md) located in the new spec version as ``FILE:LINE:COL: CODE message``
(a :class:`~ratchet_runner.errors.Diagnostic`); for a run that has not ended, its
:class:`Continuation`: the state it stands in under the new version and the rows out of it. Each
says itself as text lines and as JSON; :func:`tally` words a whole replay.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import Diagnostic
from ..settings import shown

#: Every replay code: its class, as the reference names it.
CODES: dict[str, str] = {
    "V301": "row changed",
    "V302": "state removed",
    "V303": "event unknown",
    "V304": "guard result differs",
    "V305": "operation ID differs",
    "V306": "approval digest differs",
    "V307": "compensation plan differs",
    "V308": "effect moved",
    "V309": "arguments differ",
    "V310": "timer differs",
    "V311": "approval expiry differs",
    "V312": "decision refused",
    "V313": "operator action refused",
    "V314": "business key differs",
    "V315": "input refused",
    "V316": "start state differs",
}


@dataclass(frozen=True)
class Divergence:
    """The first recorded step the new version would not take the same way: at event number
    ``event`` (from 1) of the history, of kind ``kind``; ``where`` locates it in the new version
    (its code and message are the divergence's)."""

    event: int
    kind: str
    where: Diagnostic

    @property
    def code(self) -> str:
        return self.where.code

    @property
    def title(self) -> str:
        return CODES[self.code]

    @property
    def message(self) -> str:
        return self.where.message

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "class": self.title,
            "event": self.event,
            "kind": self.kind,
            "message": self.message,
            "file": self.where.file,
            "line": self.where.line,
            "column": self.where.column,
            "pointer": self.where.pointer,
        }


@dataclass(frozen=True)
class Way:
    """A row out of the state an unfinished run stands in, under the new version."""

    event: str
    next_state: str
    guard: str | None
    effect: str | None
    where: str

    def to_json(self) -> dict[str, Any]:
        return {
            "event": self.event,
            "next_state": self.next_state,
            "guard": self.guard,
            "effect": self.effect,
            "where": self.where,
        }

    def line(self, state: str) -> str:
        guard = f"  if {shown(self.guard, 80)}" if self.guard else ""
        effect = f"  making {self.effect}" if self.effect else ""
        return f"{state} --{self.event}--> {self.next_state}{guard}{effect}  ({self.where})"


@dataclass(frozen=True)
class Continuation:
    """Where an unfinished run would go on under the new version: its state (``kind`` None
    when the version has no such state), the status it would have there, the rows out of it,
    and what else matters (an approval that would not count, a call in flight, a timer)."""

    state: str
    kind: str | None
    status: str
    ways: tuple[Way, ...] = ()
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "kind": self.kind,
            "status": self.status,
            "rows": [w.to_json() for w in self.ways],
            "notes": list(self.notes),
        }

    def lines(self) -> list[str]:
        if self.kind is None:
            head = f"  cannot continue: this version has no state {self.state!r}"
        else:
            head = f"  would continue in {self.state} ({self.kind}, {self.status}) here"
            head += ":" if self.ways else ", with no row out of it"
        return [
            head,
            *(f"    {way.line(self.state)}" for way in self.ways),
            *(f"    {note}" for note in self.notes),
        ]


@dataclass(frozen=True)
class ReplayResult:
    """One run's history replayed under a spec version: clean, or its first divergence."""

    run_id: str
    workflow: str
    business_key: str
    #: Where the history was read (``FILE:LINE``), or empty (from a store).
    source: str
    state: str
    status: str
    events: int
    divergence: Divergence | None = None
    continuation: Continuation | None = None
    notes: tuple[str, ...] = ()

    @property
    def clean(self) -> bool:
        return self.divergence is None

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run_id,
            "workflow": self.workflow,
            "business_key": self.business_key,
            "source": self.source or None,
            "state": self.state,
            "status": self.status,
            "events": self.events,
            "clean": self.clean,
            "divergence": None if self.divergence is None else self.divergence.to_json(),
            "continues": None if self.continuation is None else self.continuation.to_json(),
            "notes": list(self.notes),
        }

    def headline(self) -> str:
        who = f"{self.run_id} ({shown(self.business_key)})"
        where = f"{self.source}: " if self.source else ""
        if self.divergence is None:
            ended = f"{self.state}, {self.status}"
            return f"{where}{who}: replays clean ({self.events} events; {ended})"
        found = self.divergence
        return f"{where}{who}: diverges at event {found.event} of {self.events} ({found.kind})"

    def lines(self) -> list[str]:
        """The verdict, the divergence located in the spec, where the run would go on, notes."""
        found = [] if self.divergence is None else [f"  {self.divergence.where.format()}"]
        going = [] if self.continuation is None else self.continuation.lines()
        return [self.headline(), *found, *going, *(f"  note: {n}" for n in self.notes)]


def tally(results: Sequence[ReplayResult], against: str) -> str:
    """One line for a whole replay: how many runs replay clean against ``against``."""
    diverged = sum(1 for r in results if not r.clean)
    runs = f"{len(results)} run{'s' if len(results) != 1 else ''}"
    if not diverged:
        verb = "replays" if len(results) == 1 else "replay"
        return f"replay: {runs} {verb} clean against {against}"
    return f"replay: {diverged} of {runs} diverge{'s' if diverged == 1 else ''} from {against}"
