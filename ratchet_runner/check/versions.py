"""The invariants a run keeps across a migration, as ``ratchet check --migrate-to`` proves them.

* **Wholly on one version** (:func:`whole`): the run's record names a version the migration
  moved between and a state of that version; its history, walked from its start on the old
  version through every ``moved``, ``migrated`` and ``migration_rolled_back`` event, arrives at
  the same version and state as the record; its context says where it came from exactly when its
  last migration event moved it (so that it can be rolled back), and no timer is armed for a
  state it is not in (a receipt's later verification is armed for any state).
* **Moved from where it stood** (:func:`whole` too): each ``migrated`` or
  ``migration_rolled_back`` event names the version and state the run stood in when it was
  written, of a run that had not ended: a migration that wrote over a run another process had
  moved meanwhile (no compare-and-set) breaks it.
* **No approval crosses versions** (:func:`approvals`): every effect that needs an approval is
  sent under the version its approval was given under: an approval given under one version is
  never consumed under another.

Each broken one is a :class:`~ratchet_runner.check.invariants.Violation`; the effects made
twice, the undos lost and the runs stuck are :func:`~ratchet_runner.check.invariants.verify`'s.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from ..engine.verify import STATE as ANY_STATE
from ..spec.model import Spec
from ..store.records import EventRecord, RunRecord, TimerRecord
from ..words import EventKind
from .invariants import Violation, ViolationKind

#: The kinds of state a run has ended in.
ENDINGS = ("success", "cancelled", "compensated")
MIGRATIONS = (EventKind.MIGRATED, EventKind.MIGRATION_ROLLED_BACK)
#: The events that move a run to another state (its ``to``): a row followed, or a decision asked
#: again in the state that asks it.
MOVES = (EventKind.MOVED, EventKind.DECISION_NEEDED)


def whole(
    run: RunRecord,
    history: list[EventRecord],
    armed: list[TimerRecord],
    old: Spec,
    specs: Mapping[str, Spec],
) -> list[Violation]:
    """How ``run`` (started on ``old``; ``specs``: the versions a migration moves between, by
    digest) is not wholly on one version, or was moved from where it no longer stood."""
    found: list[Violation] = []

    def half(message: str) -> None:
        found.append(Violation(ViolationKind.HALF_MIGRATED, f"{run.business_key}: {message}"))

    spec = specs.get(run.spec_digest)
    if spec is None:
        half(f"its record names spec {run.spec_digest[:12]}, neither version of the migration")
        return found
    if run.state not in spec.states:
        half(f"it stands in {run.state!r}, which version {spec.spec_version} does not have")
    by_version = {s.spec_version: s for s in specs.values()}
    version, state, ended = old.spec_version, old.start, False
    last: EventRecord | None = None
    for event in history:
        if event.kind in MOVES and event.data.get("to"):
            state = str(event.data.get("to"))
            kind = by_version[version].states.get(state)
            ended = kind is not None and kind.kind in ENDINGS
            continue
        if event.kind not in MIGRATIONS:
            continue
        data = event.data
        was = data.get("old") if event.kind == EventKind.MIGRATED else data.get("new", version)
        if (
            data.get("from_state") != state
            or ended
            or (event.kind == EventKind.MIGRATED and was != version)
        ):
            found.append(
                Violation(
                    ViolationKind.STALE_MIGRATION,
                    f"{run.business_key}: {event.kind} (migration {data.get('migration')}) moved "
                    f"it from {data.get('from_state')!r} of version {was}, but it stood in "
                    f"{state!r} of version {version}{' and had ended' if ended else ''}: it was "
                    "written over a run another process had moved",
                )
            )
        version = int(data["new"] if event.kind == EventKind.MIGRATED else data["old"])
        state, last = str(data.get("to_state")), event
    if (version, state) != (spec.spec_version, run.state):
        half(
            f"its record is on version {spec.spec_version} in {run.state!r}, its history on "
            f"version {version} in {state!r}"
        )
    came = run.context.get("migrated")
    if last is not None and last.kind == EventKind.MIGRATED:
        if not isinstance(came, dict) or came.get("migration") != last.data.get("migration"):
            half(
                f"migration {last.data.get('migration')} moved it, but its context does not keep "
                "where it came from (it could not be rolled back)"
            )
    elif came is not None:
        half("its context says a migration moved it, but its history says it is not moved")
    for timer in armed:
        if timer.fired_at is None and timer.state not in (run.state, ANY_STATE):
            half(
                f"a timer ({timer.event}) of {timer.state!r} is armed while it is in {run.state!r}"
            )
    return found


def approvals(
    run: RunRecord, history: list[EventRecord], old: Spec, specs: Mapping[str, Spec]
) -> Iterator[Violation]:
    """Each effect of ``run`` that needs an approval, sent under a version other than the one its
    approval was given under."""
    by_version = {s.spec_version: s for s in specs.values()}
    version = old.spec_version
    given: int | None = None  # the version the last approval was given under
    for event in history:
        if event.kind == EventKind.MIGRATED:
            version = int(event.data["new"])
        elif event.kind == EventKind.MIGRATION_ROLLED_BACK:
            version = int(event.data["old"])
        elif event.kind == EventKind.APPROVED:
            given = version
        elif event.kind == EventKind.PENDING and event.data.get("role", "forward") == "forward":
            effect = by_version[version].effects.get(str(event.data.get("effect")))
            if effect is None or effect.approval is None or given == version:
                continue
            yield Violation(
                ViolationKind.APPROVAL_ACROSS_VERSIONS,
                f"{run.business_key}: {effect.name} was sent under version {version} on "
                + (
                    f"an approval given under version {given}"
                    if given is not None
                    else "no approval"
                ),
            )
