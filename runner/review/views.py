"""What the command line shows of specs, runs, the queue, status, effects and check results.

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
    from ratchet_runner.adapters.practice import Change

    from ..engine.runner import Runner
    from ..spec.validate import Report
    from ..store.records import EventRecord, RunRecord
    from ..worker.passes import PassReport
    from ..worker.pool import PoolReport
    from .check import Result
    from .check_http import OverHttp
    from .invariants import ViolationKind

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


# -- workers ------------------------------------------------------------------------------------


def pass_lines(report: PassReport) -> tuple[list[str], list[str]]:
    """``ratchet worker --once``: the lines for stdout (timers, runs) and for stderr (failures,
    the tally)."""
    out = [
        f"timer  {f.timer.event:<8} run {f.timer.run_id} ({f.outcome})" for f in report.fired
    ] + [f"run    {moved.id} -> {moved.state} ({moved.status})" for moved in report.advanced]
    err = [f"failed {run_id}: {error}" for run_id, error in report.failed]
    err += [f"left   {run_id}: {reason}" for run_id, reason in report.left]
    err.append(f"{len(report.fired)} timer(s) fired, {len(report.advanced)} run(s) advanced")
    return out, err


def pool_json(owner: str, report: PoolReport) -> Json:
    """What a worker pool did, when it stops (``ratchet worker --json``)."""
    return {
        "owner": owner,
        "runs_advanced": report.advanced,
        "fenced": report.fenced,
        "timers_fired": report.timers,
        "failed": [{"run": r, "error": e} for r, e in report.failed],
        "store_outages": report.outages,
        "store_unreachable_seconds": round(report.unreachable_seconds, 2),
        "store_unreachable": report.unreachable,
        "left_to_other_binding": report.left,
        "left_for_a_longer_lease": report.left_for_lease,
    }


def pool_line(report: PoolReport) -> str:
    outages = ""
    if report.outages:
        outages = (
            f"; the store was unreachable {report.outages} time(s), "
            f"{report.unreachable_seconds:.1f} s in all"
            + (", and still was when the worker stopped" if report.unreachable else "")
        )
    left = f", {report.left} left to a worker with their binding" if report.left else ""
    if report.left_for_lease:
        left += f", {report.left_for_lease} left to a worker with a longer --lease"
    return (
        f"stopped: {report.advanced} run(s) advanced, {report.timers} timer(s) "
        f"fired, {report.fenced} fenced{left}{outages}"
    )


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


# -- ratchet check ------------------------------------------------------------------------------

#: The table's verdict for each kind of violation (see ``invariants.ViolationKind``).
VERDICTS: dict[str, str] = {
    "duplicate": "DUPLICATE",
    "applied_without_write_ahead": "NO WRITE-AHEAD",
    "never_applied": "NEVER APPLIED",
    "left_uncompensated": "NOT UNDONE",
    "left_unreported": "NOT REPORTED",
    "kept_unrecorded": "KEPT, UNRECORDED",
    "done_without_change": "NO SUCH CHANGE",
    "receipt_mismatch": "RECEIPT DIFFERS",
    "over_budget": "OVER BUDGET",
    "stuck": "STUCK",
    "resume_failed": "RESUME FAILED",
}


def worst_kind(result: Result) -> ViolationKind | None:
    """The most serious kind among a case's violations (the kinds are declared in that order)."""
    from .invariants import ViolationKind

    order = list(ViolationKind)
    return min((v.kind for v in result.violations), key=order.index, default=None)


def verdict(result: Result) -> str:
    """One cell of the check table: changes, amount, calls, and the verdict from the kind."""
    if result.amount is not None:
        amount = f" {result.amount:.2f}"
    else:  # several operations moved amounts: each its own figure, never one sum
        amount = "".join(f" {op} {value:.2f}" for op, value in result.amounts.items())
    worst = worst_kind(result)
    label = "ok" if worst is None else VERDICTS[worst.value]
    return f"{result.changes} change(s){amount} · {result.calls} call(s) · {label}"


CHECK_HEADER = f"{'EXAMPLE':<16} {'EFFECT':<18} {'WINDOW':<15} {'FAULT':<21} {'RATCHET':<36}"


def check_table(results: Iterable[Result], compare: bool) -> list[str]:
    """One line per case: Ratchet's verdict, and with ``compare`` the naive strategy's beside."""
    by_case: dict[tuple[str, str, str, str], dict[str, Result]] = {}
    for result in results:
        c = result.case
        by_case.setdefault((c.example, c.effect, c.window, c.fault), {})[c.strategy] = result
    return [check_header(compare)] + [check_row(pair, compare) for pair in by_case.values()]


def check_header(compare: bool) -> str:
    return CHECK_HEADER + ("NAIVE" if compare else "")


def check_row(pair: Mapping[str, Result], compare: bool) -> str:
    """A case's line of the table, from its result under each strategy run."""
    c = pair["ratchet"].case
    ours = verdict(pair["ratchet"])  # a long verdict still leaves a space before NAIVE
    line = f"{c.example:<16} {c.effect:<18} {c.window:<15} {c.fault:<21} {ours:<35} "
    if compare and "naive" in pair:
        line += verdict(pair["naive"])
    return line.rstrip()


def slowest(results: Sequence[Result], most: int = 3) -> str:
    """``slowest: CASE 3.2 s, CASE 2.9 s, …``: the ``most`` cases that took longest
    (strategies added up); "" when there are no more cases than that."""
    per_case: dict[str, float] = {}
    for r in results:
        per_case[r.case.name] = per_case.get(r.case.name, 0.0) + r.seconds
    if len(per_case) <= most:  # a few cases: the table says it all
        return ""
    ranked = sorted(per_case.items(), key=lambda item: -item[1])[:most]
    return "slowest: " + ", ".join(f"{name} {sec:.1f} s" for name, sec in ranked)


#: What ``ratchet run --naive`` says first.
NAIVE_WARNING = (
    "warning: --naive makes a new operation ID on every attempt and never reconciles; it exists "
    "to show how duplicates happen"
)


def violation_lines(
    failed: Iterable[Result], spec_path: str, kill: bool, wire: OverHttp | None = None
) -> list[str]:
    """Each failed case of ``ratchet check``: its violations, and the command that reproduces it
    (with ``--bindings FILE`` when its adapters went over HTTP, ``wire``)."""
    from .check import reproduce

    bindings = None if wire is None else wire.file
    lines = []
    for result in failed:
        lines.append(f"VIOLATION {result.case.name}: {'; '.join(map(str, result.violations))}")
        lines.append(f"  reproduce: {reproduce(spec_path, result.case, kill, bindings)}")
    return lines


def failed_cases(results: Iterable[Result]) -> list[Result]:
    """The cases Ratchet's protocol failed (the naive strategy's are the comparison's point)."""
    return [r for r in results if r.case.strategy == "ratchet" and not r.ok]


def check_json(
    spec_path: str, kill: bool, results: Sequence[Result], wire: OverHttp | None = None
) -> Json:
    """``ratchet check --json``: the cases, Ratchet's violations, and every result; ``over_http``,
    the binding and the adapters reached over HTTP (None: every adapter in-process)."""
    return {
        "spec": spec_path,
        "kill": kill,
        "over_http": None if wire is None else wire.to_json(),
        "cases": len({r.case.name for r in results}),  # a case run by both strategies is one
        "runs": len(results),
        "violations": sum(len(r.violations) for r in failed_cases(results)),
        "results": [r.to_json() for r in results],
    }


def check_tally(
    results: Sequence[Result],
    strategies: int,
    kill: bool,
    compare: bool,
    wire: OverHttp | None = None,
) -> str:
    """The line under the table: how many cases, and how many failed under each strategy."""
    naive_bad = sum(1 for r in results if r.case.strategy == "naive" and not r.ok)
    mode = "killed with SIGKILL" if kill else "in-process"
    mode += ", calls over HTTP" if wire is not None else ""
    return (
        f"{len(results) // strategies} case(s), crashes {mode}: "
        f"{len(failed_cases(results))} with violations under Ratchet's protocol"
        + (f"; {naive_bad} under the naive strategy" if compare else "")
    )
