"""The population of runs a migration check migrates: for one example of the old version, on
one store, each run with a practice world of its own, runs left at every place a migration may
find one (:func:`positions`), made by :func:`populate`.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..clock import FakeClock
from ..engine.approvals import pending_request
from ..engine.runner import Runner
from ..errors import UsageError
from ..review.naive import step_for
from ..session import Session
from ..spec.model import Spec
from ..store.records import RunRecord
from ..store.store import Store
from ..words import RunStatus
from .cases import WINDOWS, Case, Crash, _approve, _runner, _seed, carry, reached_effects

WAITING = 3  # runs left at the example's first decision
STORE = "store.db"


@dataclass(frozen=True)
class Seat:
    """One run of a population: its ID, business key, the folder of its practice world (under
    the population's), and the position it was left in."""

    run: str
    business_key: str
    home: str
    position: str


def url_of(folder: Path) -> str:
    return f"sqlite:///{folder / STORE}"


@contextmanager
def store_at(folder: Path) -> Iterator[Store]:
    """A process of the check that only reads or migrates: the population's store, on the
    check's fake clock (the runs' timers and leases are of that time)."""
    store = Store(url_of(folder), clock=FakeClock())
    try:
        yield store
    finally:
        store.close()


def session_at(folder: Path, home: str) -> Session:
    """A process of the check: the population's store, the practice world of one run."""
    return Session(url_of(folder), home=folder / home, clock=FakeClock(), steps=step_for)


def keyed(spec: Spec, example: str, number: int) -> dict[str, Any]:
    """The example's input with its business key made the ``number``-th of its population: the
    key's field with two digits after it (a :class:`UsageError` when it is not text)."""
    given = copy.deepcopy(dict(spec.examples[example].input))
    path = spec.business_key.removeprefix("input.").split(".")
    holder: Any = given
    for part in path[:-1]:
        holder = holder.get(part) if isinstance(holder, dict) else None
    if not isinstance(holder, dict) or not isinstance(holder.get(path[-1]), str):
        raise UsageError(
            f"example {example!r}: a migration check makes many runs of each example, each with "
            f"a business key of its own ({spec.business_key} with two digits after it), so "
            f"{spec.business_key} must be text"
        )
    holder[path[-1]] = f"{holder[path[-1]]}{number:02d}"
    return given


def positions(spec: Spec, text: str, example: str) -> list[tuple[str, Case | None]]:
    """Where the population's runs are left: ``waiting-N`` at the first decision, ``approved``
    just approved, ``EFFECT@WINDOW`` crashed at that window, ``ended`` carried to the end."""
    crashed = [
        (f"{effect}@{window}", Case(example, effect, window, "none"))
        for effect in reached_effects(spec, text, example)
        for window, point in WINDOWS.items()
        if point is not None
    ]
    waiting: list[tuple[str, Case | None]] = [(f"waiting-{n}", None) for n in range(1, WAITING + 1)]
    return [*waiting, ("approved", None), *crashed, ("ended", None)]


def populate(folder: Path, spec: Spec, text: str, example: str) -> list[Seat]:
    """Make the example's population in ``folder`` (its store, and a world per run), with every
    lease of a crashed process lapsed; the seats, also written to ``population.json``."""
    seats: list[Seat] = []
    for number, (position, crash) in enumerate(positions(spec, text, example), 1):
        home = f"runs/{number:02d}"
        case = crash or Case(example, "", "none", "none")
        with session_at(folder, home) as session:
            _seed(session.world, spec, case)
            runner = _runner(session, case, die if crash else None)
            run, _ = runner.start(spec, text, keyed(spec, example, number))
            try:
                if crash is not None or position == "ended":
                    run = carry(runner, run, example)
                else:
                    run = _to_first_decision(runner, run, example, position == "approved")
            except Crash:
                run = runner.store.get_run(run.id)
            seats.append(Seat(run.id, run.business_key, home, position))
    with store_at(folder) as store:  # the crashed processes' leases lapse
        for seat in seats:
            run = store.get_run(seat.run)
            if run.lease_token:
                store.release(run.id, run.lease_token)
    (folder / "population.json").write_text(
        json.dumps([seat.__dict__ for seat in seats]), encoding="utf-8"
    )
    return seats


def _to_first_decision(runner: Runner, run: RunRecord, example: str, approve: bool) -> RunRecord:
    """Advance ``run`` to the first decision it waits for (approved, with ``approve``)."""
    for _ in range(50):
        run = runner.advance(run.id)
        request = pending_request(runner, run) if run.status == RunStatus.WAITING else None
        if request is not None:
            if approve:
                _approve(runner, run, example, request.roles)
                run = runner.store.get_run(run.id)
            return run
        if run.status != RunStatus.RUNNING:
            return run
    return run


def seats_of(folder: Path) -> list[Seat]:
    return [Seat(**s) for s in json.loads((folder / "population.json").read_text("utf-8"))]


def die() -> None:
    """The in-process crash: a :class:`~ratchet_runner.check.cases.Crash`."""
    raise Crash
