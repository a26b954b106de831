"""Migrating a workflow's live runs to a new version: a plan, its apply, and its rollback.

:func:`plan` gives every unfinished run of the workflow a verdict from the hazards of moving it
(:func:`~ratchet_runner.evolve.hazards.hazards`, against the version it is on, with the mapping
if one is given): it ``stays`` (already on the new version), ``moves``, ``moves with mapping``
(its state is mapped to another), ``asks for a new decision`` (it moves, and an approval it holds
or awaits no longer counts: an approval's digest covers the spec and policy versions), ``must
first reach a wait state`` (it is inside an effect window, ``V103``: a call written ahead, an
outcome unknown, a lookup due), or is ``refused`` (an error hazard touches it, named).

:func:`apply` moves each run the plan finds ready, one transaction each, under a
compare-and-set of the run's version and only while no live lease holds it (a worker driving it
keeps it: the run is left for the next apply, and said so). Each run's verdict is taken again
from what it is at that moment, so a run that entered an effect window since the plan is not
moved. The move records a ``migrated`` event naming the migration's ID, who migrated it, the
versions and states, and keeps in the run's context where it came from, which is what
:func:`rollback` moves it back by: only while it is still where the migration put it and has
made no call, recorded no decision and received no signal under the new version since.

Over 400 lines, as one concern: a migration's three moves (plan, apply, rollback) and the one
change each run's move is, kept together so that apply and rollback undo each other exactly.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..engine import timers
from ..errors import LeaseLost, MigrationRefused, RunNotFound, VersionConflict
from ..spec.model import Spec, State
from ..spec.validate import load_stored_spec
from ..store.context import RunContext
from ..store.records import Change, NewTimer, RunRecord, TimerRecord
from ..store.store import Store
from ..words import EventKind, RunStatus
from .basis import Hazard
from .hazards import by_run, hazards
from .mapping import VersionMapping
from .runs import LiveRun, live_run, live_runs

#: The verdicts of a plan, in the order a plan lists them.
STAYS, MOVES, MAPPED, DECIDE, WAIT, REFUSED = (
    "stays",
    "moves",
    "moves with mapping",
    "asks for a new decision",
    "must first reach a wait state",
    "refused",
)
#: The verdicts :func:`apply` moves.
READY = (MOVES, MAPPED, DECIDE)
#: How a run left because another process moved or held it meanwhile is said.
BUSY = "busy"
#: Called with a run's ID once its move (or its move back) is read and decided, just before the
#: move is written: where ``ratchet check --migrate-to`` lets another process act on the run.
Interrupt = Callable[[str], None]


@dataclass(frozen=True)
class RunVerdict:
    """One run's place in a plan: where it is, where it would go, and why."""

    run_id: str
    business_key: str
    from_version: int
    state: str
    to_state: str
    verdict: str
    #: The hazards that touch it (errors first).
    hazards: tuple[Hazard, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run_id,
            "business_key": self.business_key,
            "from_version": self.from_version,
            "state": self.state,
            "to_state": self.to_state,
            "verdict": self.verdict,
            "hazards": [{"code": h.code, "severity": h.severity} for h in self.hazards],
            "reasons": self.reasons(),
        }

    def reasons(self) -> list[str]:
        """Why it has its verdict: each hazard that touches it, in its words for this run; for a
        run asked again that no hazard touches, that its approval is bound to its version."""
        said = [h.note(self.run_id) or h.message for h in self.hazards]
        if not said and self.verdict == DECIDE:
            said = [
                "it holds or awaits an approval, bound to the spec and policy versions it was "
                "asked under: it is asked again under the new version before anything is sent"
            ]
        return said


@dataclass(frozen=True)
class Plan:
    """Every unfinished run of the workflow with its verdict, and the hazards found."""

    workflow: str
    new: Spec
    runs: tuple[RunVerdict, ...]
    found: tuple[Hazard, ...] = ()
    mapping: VersionMapping | None = None

    @property
    def ready(self) -> list[RunVerdict]:
        return [r for r in self.runs if r.verdict in READY]

    @property
    def held(self) -> list[RunVerdict]:
        """The runs that cannot move now: in an effect window, or refused."""
        return [r for r in self.runs if r.verdict in (WAIT, REFUSED)]

    def to_json(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for run in self.runs:
            counts[run.verdict] = counts.get(run.verdict, 0) + 1
        return {
            "workflow": self.workflow,
            "to_version": self.new.spec_version,
            "to_digest": self.new.digest,
            "runs": [r.to_json() for r in self.runs],
            "counts": counts,
            "hazards": [h.to_json() for h in self.found],
        }


@dataclass
class Applied:
    """What :func:`apply` or :func:`rollback` did: the migration's ID, the runs moved, and the
    runs left with why."""

    migration: str
    moved: list[RunVerdict] = field(default_factory=list)
    left: list[tuple[str, str]] = field(default_factory=list)
    #: Runs with nothing left to move: ended, or on the new version already, since the plan.
    skipped: list[tuple[str, str]] = field(default_factory=list)

    @property
    def busy(self) -> bool:
        """Whether every run left was left only because another process moved or held it."""
        return bool(self.left) and all(why.startswith(BUSY) for _run, why in self.left)

    def to_json(self) -> dict[str, Any]:
        return {
            "migration": self.migration,
            "moved": [r.to_json() for r in self.moved],
            "left": [{"run": run, "reason": why} for run, why in self.left],
            "skipped": [{"run": run, "reason": why} for run, why in self.skipped],
        }


def _specs(store: Store, digests: Sequence[str]) -> dict[str, Spec]:
    return {d: load_stored_spec(store.spec_text(d), f"spec {d[:12]} (stored)") for d in digests}


def plan(store: Store, new: Spec, mapping: VersionMapping | None = None) -> Plan:
    """The verdict of every unfinished run of ``new``'s workflow, against the version it is on
    (each older version is compared with ``new`` on its own)."""
    if mapping is not None and mapping.approvals == "keep":
        raise MigrationRefused(
            f"{mapping.file}: approvals: keep cannot be honoured by a migration: an approval's "
            "digest covers the spec and policy versions, so a run moved to another version is "
            "asked again (approvals: void, the default); leave the runs on their version to keep "
            "their approvals (on_version_change: pin)"
        )
    live = live_runs(store, new.name)
    return _plan(store, new, live, mapping)


def same_numbers(old: Spec, new: Spec) -> bool:
    """Whether ``new`` is another text under ``old``'s spec and policy versions: what no
    migration may move runs between (an approval's digest names those numbers only)."""
    return old.digest != new.digest and (old.spec_version, str(old.policy_version)) == (
        new.spec_version,
        str(new.policy_version),
    )


def _plan(store: Store, new: Spec, live: Sequence[LiveRun], mapping: VersionMapping | None) -> Plan:
    olds = _specs(store, sorted({r.spec_digest for r in live if r.spec_digest != new.digest}))
    for old in olds.values():
        if same_numbers(old, new):
            raise MigrationRefused(
                f"runs of {new.name!r} are on another text of version {new.spec_version} (digest "
                f"{old.digest[:12]}), with the same policy_version: an approval's digest names the "
                "spec and policy versions, so an approval given under the old text would count "
                "under the new one; give the new text a new spec_version (and policy_version if "
                "what is approved changed): nothing was migrated"
            )
    found: list[Hazard] = []
    verdicts: list[RunVerdict] = []
    for digest, old in olds.items():
        mine = [r for r in live if r.spec_digest == digest]
        these = hazards(old, new, mine, mapping)
        found.extend(these)
        touched = by_run(these)
        verdicts.extend(_verdict(r, old, new, mapping, touched.get(r.id, [])) for r in mine)
    verdicts.extend(
        RunVerdict(r.id, r.run.business_key, new.spec_version, r.state, r.state, STAYS)
        for r in live
        if r.spec_digest == new.digest
    )
    order = {v: i for i, v in enumerate((REFUSED, WAIT, DECIDE, MAPPED, MOVES, STAYS))}
    verdicts.sort(key=lambda v: (order[v.verdict], v.run_id))
    return Plan(new.name, new, tuple(verdicts), tuple(found), mapping)


def _verdict(
    run: LiveRun,
    old: Spec,
    new: Spec,
    mapping: VersionMapping | None,
    touching: list[Hazard],
) -> RunVerdict:
    to_state = mapping.target(run.state) if mapping is not None else run.state
    errors = [h for h in touching if h.severity == "error"]
    if any(h.code != "V103" for h in errors):
        verdict = REFUSED
    elif errors:
        verdict = WAIT
    elif run.held or any(h.code == "V106" for h in touching) or _awaits_decision(run, new):
        verdict = DECIDE
    elif to_state != run.state:
        verdict = MAPPED
    else:
        verdict = MOVES
    if verdict != REFUSED and to_state not in new.states:
        verdict = REFUSED  # a hazard names it (V101); never moved into nowhere
    return RunVerdict(
        run.id,
        run.run.business_key,
        old.spec_version,
        run.state,
        to_state,
        verdict,
        tuple(touching),
    )


def _awaits_decision(run: LiveRun, new: Spec) -> bool:
    """Whether the run waits, in a pause state, for an approval (asked again under the new
    version: the decision it gets is bound to that version)."""
    state = new.states.get(run.state)
    return state is not None and state.kind == "pause" and state.approval is not None


def apply(
    store: Store,
    new: Spec,
    text: str,
    by: str,
    now: float,
    *,
    mapping: VersionMapping | None = None,
    only_ready: bool = False,
    migration: str | None = None,
    interrupt: Interrupt | None = None,
) -> Applied:
    """Move every run the plan finds ready to ``new`` (whose exact text is ``text``), each in one
    transaction, recording ``by`` and the migration's ID (a new one unless given). Without
    ``only_ready``, a plan with a run that cannot move is refused whole, nothing moved
    (:class:`MigrationRefused`). ``interrupt`` is called with each run's ID just before its move
    is written."""
    first = plan(store, new, mapping)
    if first.held and not only_ready:
        shown = ", ".join(f"{r.run_id} ({r.verdict})" for r in first.held[:5])
        more = f" and {len(first.held) - 5} more" if len(first.held) > 5 else ""
        raise MigrationRefused(
            f"{len(first.held)} run(s) of {new.name!r} cannot move now: {shown}{more}; nothing "
            "was migrated: see the plan (ratchet migrate NEW --plan), or move the others with "
            "--only-ready"
        )
    store.save_spec(new.digest, new.name, new.spec_version, str(new.policy_version), text, now)
    done = Applied(migration or f"mig_{uuid.uuid4().hex[:16]}")
    for planned in first.runs:
        if planned.verdict == STAYS:
            continue
        if planned.verdict not in READY:
            done.left.append((planned.run_id, planned.verdict))
            continue
        _move(store, new, planned.run_id, by, now, mapping, done, interrupt)
    return done


def _move(
    store: Store,
    new: Spec,
    run_id: str,
    by: str,
    now: float,
    mapping: VersionMapping | None,
    done: Applied,
    interrupt: Interrupt | None = None,
) -> None:
    """Move one run, if its verdict, taken again now, still lets it."""
    try:
        run = store.get_run(run_id)
    except RunNotFound:
        done.left.append((run_id, "gone"))
        return
    if run.status in (RunStatus.DONE, RunStatus.CANCELLED):
        done.skipped.append((run_id, f"it ended ({run.status}) since the plan"))
        return
    if run.spec_digest == new.digest:
        done.skipped.append((run_id, f"it is on version {new.spec_version} already"))
        return
    again = _plan(store, new, [live_run(store, run)], mapping).runs[0]
    if again.verdict not in READY:
        done.left.append((run_id, again.verdict))
        return
    old = _specs(store, [run.spec_digest])[run.spec_digest]
    armed = [t for t in store.timers(run.id) if t.fired_at is None]
    change = _migration_change(run, armed, old, new, again, by, now, mapping, done.migration)
    if interrupt is not None:
        interrupt(run_id)
    try:
        _write(store, change)
    except (VersionConflict, LeaseLost) as exc:
        done.left.append((run_id, f"{BUSY}: {exc}; plan again"))
        return
    done.moved.append(again)


def _migration_change(
    run: RunRecord,
    armed: Sequence[TimerRecord],
    old: Spec,
    new: Spec,
    verdict: RunVerdict,
    by: str,
    now: float,
    mapping: VersionMapping | None,
    migration: str,
) -> Change:
    target = new.states[verdict.to_state]
    context: RunContext = dict(run.context)  # type: ignore[assignment]
    context["migrated"] = {
        "migration": migration,
        "from_digest": old.digest,
        "from_version": old.spec_version,
        "from_state": run.state,
        "to_version": new.spec_version,
        "to_state": target.name,
        "at": now,
        "by": by,
        # the timers it had armed, to be armed again as they were if the migration is rolled back
        "timers": [{"event": t.event, "due_at": t.due_at} for t in armed if t.state == run.state],
        "pause": run.context.get("pause"),
    }
    change = Change(run.id, run.version, now, base=run, spec_digest=new.digest, context=context)
    if target.name != run.state:
        change.state = target.name
    restart = mapping is not None and mapping.timers == "restart"
    if target.name != run.state or restart:
        change.cancel_timers_of_state = run.state
        moved = replace(run, state=target.name, spec_digest=new.digest)
        fresh = timers.arm(moved, new, target, now)
        if not restart:  # keep: the timers armed run out when they would have
            due = {t.event: t.due_at for t in armed if t.state == run.state}
            fresh = [{**t, "due_at": due.get(t["event"], t["due_at"])} for t in fresh]
        change.new_timers.extend(fresh)
        context["timers_of"] = target.name
    if target.kind in ("pause", "wait"):
        moved = replace(run, state=target.name, spec_digest=new.digest, context=context)
        in_effect = (
            change.new_timers if change.cancel_timers_of_state else _as_new(armed, run.state)
        )
        context["pause"] = _pause(run, moved, new, target, now, in_effect)
    change.event(
        EventKind.MIGRATED,
        migration=migration,
        by=by,
        old=old.spec_version,
        new=new.spec_version,
        from_state=run.state,
        to_state=target.name,
        verdict=verdict.verdict,
    )
    return change


def _as_new(armed: Sequence[TimerRecord], state: str) -> list[NewTimer]:
    return [
        {"state": t.state, "event": t.event, "due_at": t.due_at} for t in armed if t.state == state
    ]


def _pause(
    run: RunRecord,
    moved: RunRecord,
    spec: Spec,
    state: State,
    now: float,
    armed: Sequence[NewTimer],
) -> dict[str, Any]:
    """The pause record of ``moved`` in ``state`` of ``spec``, as its timers say: since when the
    run has waited there (kept when it stays in the state), and when it expires (the due time of
    its ``expired`` timer, none without one)."""
    record = timers.pause_record(moved, spec, state, now)
    before = run.context.get("pause") or {}
    if state.name == run.state and isinstance(before.get("since"), int | float):
        record["since"] = before["since"]
    expiry = [t["due_at"] for t in armed if t["state"] == state.name and t["event"] == "expired"]
    record["expires_at"] = expiry[0] if expiry else None
    return record


def rollback(
    store: Store,
    workflow: str,
    migration: str,
    by: str,
    now: float,
    *,
    interrupt: Interrupt | None = None,
) -> Applied:
    """Move the runs migration ``migration`` moved back to the versions and states they came
    from, each in one transaction, where each still stands where the migration put it and has
    made no call, recorded no decision and received no signal since; the others are left, each
    with why. ``interrupt`` is called with each run's ID just before its move back is
    written."""
    done = Applied(migration)
    ours = [
        r
        for r in store.open_runs(workflow)
        if r.context.get("migrated", {}).get("migration") == migration
    ]
    for ended in _ended_under(store, workflow, migration):
        version = ended.context["migrated"].get("to_version") or "the new version"
        done.left.append(
            (
                ended.id,
                f"it ended under version {version} ({ended.state}, {ended.status}): it stays on it",
            )
        )
    if not ours and not done.left:
        raise MigrationRefused(
            f"no run of {workflow!r} was moved by migration {migration!r}: nothing to roll back"
        )
    for run in ours:
        why = _kept_by_new_version(store, run)
        if why is not None:
            done.left.append((run.id, why))
            continue
        came = run.context["migrated"]
        old = _specs(store, [came["from_digest"]])[came["from_digest"]]
        context: RunContext = {k: v for k, v in run.context.items() if k != "migrated"}  # type: ignore[assignment]
        change = Change(run.id, run.version, now, base=run, spec_digest=old.digest, context=context)
        back = old.states[came["from_state"]]
        if back.name != run.state:
            change.state = back.name
        # the timers it had and its pause record, as they were before the migration
        change.cancel_timers_of_state = run.state
        change.new_timers.extend(
            {"state": back.name, "event": t["event"], "due_at": t["due_at"]}
            for t in came.get("timers", [])
        )
        context["timers_of"] = back.name
        pause = came.get("pause")
        if pause is not None:
            context["pause"] = pause
        else:
            context.pop("pause", None)
        change.event(
            EventKind.MIGRATION_ROLLED_BACK,
            migration=migration,
            by=by,
            old=came["from_version"],
            from_state=run.state,
            to_state=back.name,
        )
        if interrupt is not None:
            interrupt(run.id)
        try:
            _write(store, change)
        except (VersionConflict, LeaseLost) as exc:
            done.left.append((run.id, f"{BUSY}: {exc}; roll back again"))
            continue
        done.moved.append(
            RunVerdict(
                run.id, run.business_key, came["from_version"], run.state, back.name, "rolled back"
            )
        )
    return done


def _ended_under(store: Store, workflow: str, migration: str) -> list[RunRecord]:
    """The runs of ``workflow`` that migration ``migration`` moved and that ended since, under
    the version it moved them to (every ended run of the workflow is read: a rollback is
    rare, and a run's ``updated_at`` is written by other processes' clocks)."""
    found: list[RunRecord] = []
    page = 500
    for status in (RunStatus.DONE, RunStatus.CANCELLED):
        offset = 0
        while True:
            runs = store.list_runs(status, page, offset=offset, workflow=workflow)
            found += [r for r in runs if _moved_by(r, migration)]
            if len(runs) < page:
                break
            offset += page
    return sorted(found, key=lambda r: r.id)


def _moved_by(run: RunRecord, migration: str) -> bool:
    came = run.context.get("migrated")
    return came is not None and came.get("migration") == migration


def _write(store: Store, change: Change) -> None:
    """Write one run's move (or move back) as one transaction, compare-and-set on the run's
    version as read: a run another process moved meanwhile raises
    :class:`~ratchet_runner.errors.VersionConflict`, one it holds under a live lease
    :class:`~ratchet_runner.errors.LeaseLost`, and nothing is written."""
    store.commit(change)


def _kept_by_new_version(store: Store, run: RunRecord) -> str | None:
    """Why ``run`` cannot go back to the version it was migrated from, or None: it has moved on
    from where the migration put it, or made a call, recorded a decision or received a signal
    under the new version."""
    came = run.context["migrated"]
    if run.state != came["to_state"]:
        return f"it has moved on since (now in {run.state!r}, migrated to {came['to_state']!r})"
    history = store.history(run.id)
    marks = [
        i
        for i, e in enumerate(history)
        if e.kind == EventKind.MIGRATED and e.data.get("migration") == came["migration"]
    ]
    if not marks:
        return "its history has no migrated event of this migration: left as it is"
    acted = [e.kind for e in history[marks[-1] + 1 :] if e.kind not in _HARMLESS]
    if acted:  # by the history's order, not by times that other processes' clocks wrote
        return f"it has acted under the new version since ({acted[0]}): it stays on it"
    if live_run(store, run).in_window:
        return "it is inside an effect window under the new version: it stays on it"
    return None


#: What a run may meet under the new version and still go back: a worker taking it up (a lease,
#: a rescue) changes nothing of what it is; any other event (a call, a decision, a signal, a
#: move, a timer, a retry scheduled, ...) ties it to the new version.
_HARMLESS = frozenset({EventKind.LEASED, EventKind.RESCUED})
