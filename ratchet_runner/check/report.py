"""What ``ratchet check`` shows: the table of cases (each verdict from the kind of its worst
violation), the line under it, the failed cases with the command that reproduces each, and
``--json``. Plain functions from results to text and JSON; nothing here prints."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .cases import Result, reproduce
from .invariants import ViolationKind

if TYPE_CHECKING:
    from .http import OverHttp
    from .interrupted import Versions
    from .migration import MigrationResult

Json = dict[str, Any]

#: The table's verdict for each kind of violation (see ``invariants.ViolationKind``).
VERDICTS: dict[str, str] = {
    "duplicate": "DUPLICATE",
    "approval_across_versions": "APPROVAL CROSSED",
    "run_lost": "RUN LOST",
    "half_migrated": "HALF-MIGRATED",
    "stale_migration": "STALE MOVE",
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


def worst_kind(result: Result | MigrationResult) -> ViolationKind | None:
    """The most serious kind among a case's violations (the kinds are declared in that order)."""
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


def violation_lines(
    failed: Iterable[Result], spec_path: str, kill: bool, wire: OverHttp | None = None
) -> list[str]:
    """Each failed case of ``ratchet check``: its violations, and the command that reproduces it
    (with ``--bindings FILE`` when its adapters went over HTTP, ``wire``)."""

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


# -- a migration checked (``ratchet check OLD --migrate-to NEW``) -----------------------------

MIGRATION_HEADER = f"{'EXAMPLE':<16} {'PHASE':<9} {'WINDOW':<22} {'RESULT'}"


def migration_intro(versions: Versions, new_path: str, mapping_path: str | None) -> str:
    """The line above a migration check's table: which versions, and the mapping."""
    old, new = versions.old, versions.new
    mapped = f", with the mapping {mapping_path}" if mapping_path else ""
    return (
        f"migrating {old.name} version {old.spec_version} → version {new.spec_version} "
        f"({new_path}){mapped}: apply (--only-ready) and rollback, crashed at each window"
    )


def migration_row(result: MigrationResult) -> str:
    """A migration case's line: the runs moved (the crashed migration and the one run again),
    the changes made by the end, and the verdict from the kind of its worst violation."""
    c = result.case
    worst = worst_kind(result)
    label = "ok" if worst is None else VERDICTS[worst.value]
    told = f"{result.moved} moved · {result.changes} change(s) · {label}"
    return f"{c.example:<16} {c.phase:<9} {c.window:<22} {told}"


def migration_tally(results: Sequence[MigrationResult], kill: bool) -> str:
    """The line under a migration check's table."""
    crashed = sum(1 for r in results if r.crashed)
    raced = len(results) - crashed
    runs = sorted({r.runs for r in results})
    how = "killed with SIGKILL" if kill else "crashed in-process"
    failed = sum(1 for r in results if not r.ok)
    return (
        f"{len(results)} case(s): {crashed} {how} at a commit or the end, {raced} raced by "
        f"another process; {'/'.join(map(str, runs)) or 0} run(s) per example: "
        f"{failed} with violations"
    )


def migration_violations(
    failed: Iterable[MigrationResult],
    old_path: str,
    new_path: str,
    mapping_path: str | None,
    kill: bool,
) -> list[str]:
    """Each failed case: its violations, and the command that runs it again."""
    flags = (f" --mapping {mapping_path}" if mapping_path else "") + (" --kill" if kill else "")
    lines = []
    for result in failed:
        lines.append(f"VIOLATION {result.case.name}: {'; '.join(map(str, result.violations))}")
        lines.append(
            f"  reproduce: ratchet check {old_path} --migrate-to {new_path}{flags} "
            f"--case {result.case.name}"
        )
    return lines


def migration_json(
    old_path: str,
    new_path: str,
    mapping_path: str | None,
    kill: bool,
    results: Sequence[MigrationResult],
) -> Json:
    """``ratchet check --migrate-to --json``: the cases, their violations, every result."""
    return {
        "spec": old_path,
        "migrate_to": new_path,
        "mapping": mapping_path,
        "kill": kill,
        "cases": len(results),
        "violations": sum(len(r.violations) for r in results),
        "results": [r.to_json() for r in results],
    }
