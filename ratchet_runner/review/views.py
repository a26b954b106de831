"""The read models: what the command line and the service show of specs, runs, the queue,
status and effects, and the one door through which the service (``serve/``) reads the engine,
the store and the rest of ``review/`` (over 400 lines: one concern, what people are shown).

Plain functions from library values to the text lines and JSON documents ``ratchet`` prints,
beside :mod:`~ratchet_runner.review.trace` and :mod:`~ratchet_runner.review.table`; this is also
where a run's history is read for display (its latest ``queued`` event, say). Nothing here
prints, and nothing is imported that ``ratchet validate`` would not need: the store and the
engine are imported only by the functions that ask them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..settings import printable
from ..words import EventKind, RunStatus

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..adapters.practice import Change
    from ..engine.approvals import ApprovalRequest
    from ..engine.host import RunHost
    from ..engine.observe import CallObserver
    from ..engine.runner import Runner
    from ..spec.model import Spec
    from ..spec.validate import Report
    from ..store.records import EventRecord, RunRecord
    from ..store.stats import Stats as Stats  # what the service's metrics read

Json = dict[str, Any]


class CommandOutcome(Protocol):
    """What a run command returns (:class:`~ratchet_runner.engine.commands.CommandResult`)."""

    @property
    def run(self) -> RunRecord: ...

    @property
    def message(self) -> str: ...

    @property
    def then(self) -> str | None: ...

    def to_json(self) -> Json: ...


# -- validation ---------------------------------------------------------------------------------


def validation_json(reports: Sequence[Report], strict: bool, skipped: Sequence[str] = ()) -> Json:
    """``ratchet validate --json``: the verdict, every file's findings, and the files a
    directory held that were skipped as no spec."""
    return {
        "valid": all(r.ok(strict=strict) for r in reports),
        "strict": strict,
        "files": [r.to_json(strict=strict) for r in reports],
        "skipped": list(skipped),
    }


def validation_tally(reports: Sequence[Report], failed: bool, crashed: int) -> str:
    """The line under the findings: files checked, errors, warnings, and the verdict."""
    errors = sum(len(r.errors) for r in reports)
    warnings = sum(len(r.warnings) for r in reports)
    verdict = "invalid" if failed else "valid"
    if crashed:
        verdict = f"{crashed} file(s) not checked (internal error)"
    return f"{len(reports)} file(s) checked: {errors} error(s), {warnings} warning(s): {verdict}"


# -- a run's history ----------------------------------------------------------------------------


def _where(run: RunRecord) -> Json:
    """Which run, and where it is: the keys every view of a run starts with."""
    return {
        "run": run.id,
        "workflow": run.workflow,
        "business_key": run.business_key,
        "state": run.state,
        "status": run.status,
        "version": run.version,
    }


def run_json(run: RunRecord) -> Json:
    """A run as ``ratchet runs --json`` lists it."""
    return {**_where(run), "created_at": run.created_at, "updated_at": run.updated_at}


def run_summary(runner: Runner, run: RunRecord) -> Json:
    """Where ``run`` is, what decision it waits for, and what a person is asked to do."""
    from ..engine.approvals import pending_request
    from ..store.records import latest_event

    request = pending_request(runner, run) if run.status == RunStatus.WAITING else None
    person = run.status == RunStatus.NEEDS_PERSON
    queued = latest_event(runner.store.history(run.id), (EventKind.QUEUED,)) if person else {}
    return {
        **_where(run),
        "waiting_for": request.to_json() if request else None,
        "operator_action": queued.get("operator_action"),
        "ratchet_version": run.context.get("ratchet_version"),
    }


def command_summary(runner: Runner, result: CommandOutcome, key: str | None) -> Json:
    """A run command's JSON: the run's summary, with what the command did under ``key``."""
    summary = run_summary(runner, result.run)
    if key is not None:
        summary[key] = result.to_json()
    return summary


def command_headline(result: CommandOutcome, headline: str | None = None) -> str:
    """What a run command did (``headline`` instead of its message, when given), and what
    happened after it (``then: ...``)."""
    lines = [result.message] if headline is None else ([headline] if headline else [])
    if result.then:
        lines.append(f"then: {result.then}")
    return "\n".join(lines)


def summary_text(summary: Mapping[str, Any], headline: str = "") -> str:
    """A run's summary for a person: where it is, and the commands that take it on."""
    lines = [headline] if headline else []
    run = summary["run"]
    lines.append(
        f"run {run} · {summary['workflow']} {printable(summary['business_key'])} · "
        f"{summary['state']} ({summary['status']})"
    )
    request = summary.get("waiting_for")
    if request:
        lines += [
            f"  waiting for a decision on {request['approval']}",
            f"  action:  {request['action']}",
            f"  who:     {', '.join(request['roles'])}",
            f"  digest:  {request['digest']}",
            f"  approve: ratchet approve {run} --as NAME --role {request['roles'][0]}",
            f"  reject:  ratchet reject {run} --as NAME --reason TEXT",
        ]
    if summary.get("operator_action"):
        lines.append(f"  for a person: {summary['operator_action']}")
    if summary["status"] in (RunStatus.DONE, RunStatus.NEEDS_PERSON):
        lines.append(f"  trace:   ratchet trace {run}")
    return "\n".join(lines)


def trace_json(run: RunRecord, history: Sequence[EventRecord]) -> Json:
    """A run and its history, event by event (``ratchet trace --json``), with the binding and
    the Ratchet version it was created under (None for a run created before either was
    recorded)."""
    events = [{"version": e.version, "kind": e.kind, "at": e.at, **e.data} for e in history]
    return {
        **run_json(run),
        "binding": run.context.get("binding"),
        "ratchet_version": run.context.get("ratchet_version"),
        "events": events,
    }


# -- lists of runs, and the store's status -----------------------------------------------------

RUNS_HEADER = f"{'RUN':<22} {'WORKFLOW':<10} {'KEY':<14} {'STATE':<16} {'STATUS':<13} VERSION"


def runs_lines(found: Iterable[RunRecord]) -> list[str]:
    """``ratchet runs``: a header, then one line per run."""
    return [RUNS_HEADER] + [
        f"{r.id:<22} {r.workflow:<10} {printable(r.business_key):<14} {r.state:<16} "
        f"{r.status:<13} {r.version}"
        for r in found
    ]


def stuck_json(stalled: Iterable[tuple[RunRecord, str]]) -> list[Json]:
    return [{**run_json(r), "why": why, "lease_owner": r.lease_owner} for r, why in stalled]


def stuck_lines(stalled: Iterable[tuple[RunRecord, str]]) -> list[str]:
    """``ratchet runs --stuck``: one line per run nobody is moving, and why."""
    return [
        f"{r.id:<22} {r.workflow:<10} {printable(r.business_key):<14} {r.state:<16} {why}"
        + (f" (owner {r.lease_owner})" if r.lease_owner else "")
        for r, why in stalled
    ]


def _held(lease: Mapping[str, Any], now: float) -> float | None:
    taken = lease["taken_at"]
    return None if taken is None else round(max(0.0, now - float(taken)), 1)


def status_json(counts: Mapping[str, int], leases: Iterable[Mapping[str, Any]], now: float) -> Json:
    """``ratchet status --json``: runs by status, and every lease on record."""
    return {
        "runs": dict(counts),
        "leases": [
            {
                "run": lease["id"],
                "workflow": lease["workflow"],
                "business_key": lease["business_key"],
                "state": lease["state"],
                "owner": lease["lease_owner"],
                "held_seconds": _held(lease, now),
                "seconds_left": round(float(lease["left"]), 1),
                "expired": float(lease["left"]) < 0,
            }
            for lease in leases
        ],
    }


def status_lines(
    counts: Mapping[str, int], leases: Sequence[Mapping[str, Any]], now: float
) -> list[str]:
    """``ratchet status``: runs by status, then one line per lease."""
    lines = ["runs: " + (", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "none")]
    if not leases:
        lines.append("leases: none")
    for lease in leases:
        left = float(lease["left"])
        when = f"expired {-left:.0f} s ago" if left < 0 else f"{left:.0f} s left"
        age = _held(lease, now)
        since = "" if age is None else f"held {age:.0f} s · "
        lines.append(
            f"lease  {lease['id']:<22} {printable(lease['business_key']):<14} {lease['state']:<16} "
            f"{lease['lease_owner']} · {since}{when}"
        )
    return lines


# -- the practice world's effects ---------------------------------------------------------------


def effects_json(changes: Iterable[Change], calls: list[dict[str, Any]]) -> Json:
    return {"changes": [c.__dict__ for c in changes], "calls": calls}


def effects_lines(changes: Iterable[Change]) -> list[str]:
    """``ratchet effects``: one line per change, with what it returned and its operation ID."""
    lines = []
    for c in changes:
        args = " ".join(str(v) for v in c.args.values())
        ids = [v for k, v in c.result.items() if k.endswith("_id")]
        result = next((v for v in ids if v not in c.args.values()), ids[0] if ids else "")
        lines.append(
            f"#{c.seq:<3} {c.service:<9} {c.operation:<12} {args:<40} -> {result}"
            f"  op {c.operation_id[:12]}"
        )
    return lines


def effects_tally(changes: Sequence[Change], calls: Sequence[Mapping[str, Any]]) -> str:
    """How many changes, calls and lookups the practice world received."""
    made = sum(1 for c in calls if not str(c["operation"]).startswith("lookup"))
    return f"{len(changes)} change(s) · {made} call(s) · {len(calls) - made} lookup(s)"


def reset_json(everything: bool, practice: bool) -> Json:
    """``ratchet reset --json``: what was emptied, and whether the store is a practice store."""
    return {
        "practice_world": "reset",
        "store": "emptied" if everything else "kept",
        **({"practice_store": True} if practice else {}),
    }


def reset_line(everything: bool, practice: bool) -> str:
    emptied = " and store emptied" if everything else ""
    declared = ", now a practice store" if practice else ""
    return f"practice world reset{emptied}{declared}"


# -- the operator queue -------------------------------------------------------------------------


def age(seconds: float) -> str:
    """A duration for a person: seconds, minutes, hours or days."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def queue_lines(items: Iterable[Mapping[str, Any]]) -> list[str]:
    """``ratchet queue``: per run waiting for a person, what to do and the evidence."""
    lines = []
    for item in items:
        ev = item["evidence"]
        lines.append(
            f"{item['run']} · {item['workflow']} {printable(item['business_key'])} · "
            f"{item['state']} · waiting {age(item['age_seconds'])}"
        )
        lines.append(f"  to do:  {item['operator_action']}")
        for label, key in (("done", "done"), ("undone", "undone")):
            if ev[key]:
                lines.append(f"  {label + ':':<7} " + ", ".join(e["effect"] for e in ev[key]))
        lines += [
            f"  left:   {left['undo']} (undoes {left['effect']}; {left['status']})"
            for left in ev["left"]
        ]
        lines += [
            f"  kept:   {kept['effect']} ({kept['undo']}: {kept['reason']})"
            for kept in ev["not_undoable"]
        ]
        lines += [
            f"  failed: {failed['effect']} {failed['status']} after "
            f"{failed['attempts']} attempt(s): {failed['error']}"
            for failed in ev["failed"]
        ]
    return lines


# -- what the service reads --------------------------------------------------------------------
# The service (serve/) reads the engine's and the store's read models here, not inside them;
# each is imported when first asked for, as everywhere in this module.


def pending_request(runner: RunHost, run: RunRecord) -> ApprovalRequest | None:
    """The decision ``run`` is waiting for, if any."""
    from ..engine.approvals import pending_request as pending

    return pending(runner, run)


def queue(runner: Runner, *, offset: int = 0, limit: int = 1000) -> list[Json]:
    """A page of the runs waiting for a person: what to do, and the evidence."""
    from ..engine import operator_queue

    return operator_queue.queue(runner, offset=offset, limit=limit)


def decision(
    runner: Runner, run: RunRecord, now: float, *, actor: str, holding: Sequence[str]
) -> Json | None:
    """The decision ``run`` waits for, as ``actor`` holding ``holding`` may take it."""
    from ..engine import operator_queue

    return operator_queue.decision(runner, run, now, actor=actor, holding=holding)


def decisions(
    runner: Runner, *, offset: int, limit: int, actor: str, holding: Sequence[str]
) -> tuple[list[Json], int]:
    """A page of the decisions waiting, and how many runs the page read."""
    from ..engine import operator_queue

    return operator_queue.decisions(
        runner, offset=offset, limit=limit, actor=actor, holding=holding
    )


def evidence(runner: Runner, run: RunRecord) -> Json:
    """What a person finishing ``run`` is shown: its effects done, undone, left and failed."""
    from ..engine import operator_queue

    return operator_queue.evidence(runner, run)


def latest_event(history: Sequence[EventRecord], kinds: Iterable[str]) -> Json:
    """The data of the newest event of one of ``kinds`` in ``history``, or ``{}``."""
    from ..store.records import latest_event as latest

    return latest(history, kinds)


def parse_duration(text: str | None) -> float | None:
    """A spec's duration (``'500ms'``, ``'24h'``) in seconds; None stays None."""
    from ..settings import parse_duration as parse

    return parse(text)


def watch_calls(observer: CallObserver) -> Callable[[], None]:
    """Report every call this process makes to ``observer`` from now on; returns what stops it."""
    from ..engine.observe import watch_calls as watch

    return watch(observer)


def relative(seconds: float) -> str:
    """A moment ``seconds`` from now, for a person: ``in 45 s``, ``in 12m``, ``in 1h 12m``,
    ``in 3d 4h``, or as long ago (``1h 12m ago``)."""
    later = seconds >= 0
    left = round(abs(seconds))
    if left < 60:
        span = f"{left} s"
    elif left < 3600:
        span = f"{left // 60}m"
    elif left < 172800:
        span = f"{left // 3600}h {left % 3600 // 60}m"
    else:
        span = f"{left // 86400}d {left % 86400 // 3600}h"
    return f"in {span}" if later else f"{span} ago"


def when(epoch: Any) -> str:
    """A moment of a run's history, as the trace writes it."""
    from .trace import when as moment

    return moment(epoch)


def event_line(event: EventRecord) -> tuple[str, str]:
    """An event of a run's history as the trace shows it: its title and what it says."""
    from .trace import describe, title

    return title(event), describe(event)


def table_html(spec: Spec) -> str:
    """The transition table of ``spec`` as an HTML table (``ratchet table --format html``)."""
    from .table import to_html

    return to_html(spec)


def diagram_svg(spec: Spec, view: str, current: str | None = None) -> bytes:
    """``ratchet diagram``'s drawing of ``spec`` as SVG (the states view with ``current``
    emphasised); :class:`~ratchet_runner.errors.GraphvizNotFound` without Graphviz's ``dot``."""
    from .diagram.draw import build, image
    from .diagram.states import states_graph

    return image(states_graph(spec, current) if view == "states" else build(spec, view), "svg")


def age_buckets() -> tuple[float, ...]:
    """The upper bounds of the store's histogram of run ages, in seconds."""
    from ..store.stats import AGE_BUCKETS

    return AGE_BUCKETS


# -- ratchet run --naive -----------------------------------------------------------------------

#: What ``ratchet run --naive`` says first.
NAIVE_WARNING = (
    "warning: --naive makes a new operation ID on every attempt and never reconciles; it exists "
    "to show how duplicates happen"
)
