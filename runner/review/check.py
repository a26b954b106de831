"""``ratchet check``: run every crash window of every effect for real, and prove the invariants.

For each example of a spec, each effect it reaches (forward and compensating), each crash window
and each fault (the single faults, and each ambiguous fault paired with a failing lookup), the
checker runs the example on a fresh store and a fresh practice world, crashes
at that window (in-process by an exception, or with ``kill=True`` in a child process killed with
SIGKILL), resumes in a new runner to the end (approving what waits for a decision), and checks:

* at most one applied change per operation ID, and per effect of a run (a retry that renamed the
  change shows up here); exactly one for each effect a completed run needed;
* every applied change preceded by a committed pending record of its operation;
* every stored receipt equal to what the practice database holds;
* attempts within budget;
* no run lost or stuck (it ends done, or with a person holding an operator item);
* in a saga that compensated (it entered a ``compensate`` state), every forward effect applied in
  the practice world is undone exactly once, or kept on purpose (its compensation is ``none`` or
  ``impossible``, recorded in the history), or named by the open operator item the run ends in:
  a run never ends compensated, or cancelled, with a change still made.

The checker uses an example's input and world. Of the example's faults it keeps the refusals,
which define the scenario (a hotel that is full); the transient ones are left out, since each
case injects its own. Only effects the example reaches are checked.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ratchet_runner.adapters.base import Call, LookupResult, Outcome
from ratchet_runner.adapters.practice import Change, PracticeAdapter, PracticeWorld
from ratchet_runner.clock import FakeClock
from ratchet_runner.engine.approvals import decide, pending_request
from ratchet_runner.engine.identity import compensation_id
from ratchet_runner.engine.runner import Runner, Strategy
from ratchet_runner.errors import RatchetError
from ratchet_runner.spec.model import Compensation, Spec
from ratchet_runner.store.store import EventRecord, OperationRecord, RunRecord, Store

#: The four crash windows of an effect, and the runner point each crashes at.
WINDOWS: dict[str, str | None] = {
    "none": None,  # no crash: the fault alone
    "before-request": "before-write",  # pending record and attempt committed, nothing sent
    "in-flight": "in-flight",  # the request reached the provider, which has not committed
    "response-lost": "after-write",  # the provider committed; the reply dies with the process
    "receipt-stored": "after-receipt",  # receipt and move committed; the rest of the run is not
}
#: The faults injected into a case's effect, each once (``refuse``: on every call). The single
#: faults, then each ambiguous fault paired with ``lookup_fails``: the reply is lost or garbled
#: and the lookup that follows fails too, so the outcome stays unknown.
SINGLE_FAULTS = (
    "none",
    "timeout_before_write",
    "timeout_after_write",
    "unavailable",
    "refuse",
    "malformed",
    "slow_reply",
)
AMBIGUOUS_FAULTS = ("timeout_before_write", "timeout_after_write", "malformed")
PAIRED_FAULTS = tuple(f"{fault}+lookup_fails" for fault in AMBIGUOUS_FAULTS)
FAULTS = SINGLE_FAULTS + PAIRED_FAULTS
CHECKER = ("ratchet-check", "")  # the actor who approves what a case waits for


class Crash(BaseException):
    """The in-process stand-in for a process that died at a crash window (a BaseException, so
    that no ``except Exception`` on the way can mistake it for an adapter error)."""


@dataclass(frozen=True)
class Case:
    example: str
    effect: str
    window: str
    fault: str
    strategy: Strategy = "ratchet"

    @property
    def name(self) -> str:
        return f"{self.example}:{self.effect}:{self.window}:{self.fault}"


@dataclass
class Result:
    case: Case
    violations: list[str] = field(default_factory=list)
    changes: int = 0
    amount: float | None = None
    calls: int = 0
    state: str = ""
    status: str = ""
    crashed: bool = False

    @property
    def ok(self) -> bool:
        return not self.violations

    def to_json(self) -> dict[str, Any]:
        return {
            "case": self.case.name,
            "example": self.case.example,
            "effect": self.case.effect,
            "window": self.case.window,
            "fault": self.case.fault,
            "strategy": self.case.strategy,
            "crashed": self.crashed,
            "changes": self.changes,
            "amount": self.amount,
            "calls": self.calls,
            "final": {"state": self.state, "status": self.status},
            "violations": self.violations,
        }


def reached_effects(spec: Spec, text: str, example: str) -> list[str]:
    """The effects the example calls when nothing goes wrong, in call order."""
    with tempfile.TemporaryDirectory(prefix="ratchet-check-") as tmp:
        world = PracticeWorld(Path(tmp) / "practice.db")
        _seed(world, spec, Case(example, "", "none", "none"))
        store = Store(f"sqlite:///{Path(tmp) / 'store.db'}")
        try:
            drive(
                _runner(store, world, Case(example, "", "none", "none"), None), spec, text, example
            )
        finally:
            store.close()
        return list(dict.fromkeys(str(c["effect"]) for c in world.calls()))


def cases(
    spec: Spec, text: str, examples: list[str], strategies: tuple[Strategy, ...]
) -> list[Case]:
    """Every example by reached effect by window by fault by strategy."""
    return [
        Case(example, effect, window, fault, strategy)
        for example in examples
        for effect in reached_effects(spec, text, example)
        for window in WINDOWS
        for fault in FAULTS
        for strategy in strategies
    ]


# -- one case ---------------------------------------------------------------------------------


class _InFlight:
    """An adapter that delivers the first request of one effect to a provider that never commits
    it, then lets the process die: the request was in flight."""

    def __init__(self, inner: PracticeAdapter, effect: str, die: Callable[[], None]) -> None:
        self.inner, self.effect, self.die, self.done = inner, effect, die, False

    def call(self, request: Call) -> Outcome:
        if request.effect == self.effect and not self.done:
            self.done = True
            self.inner.world.receive_only(request)
            self.die()
        return self.inner.call(request)

    def lookup(self, operation: str, operation_id: str, effect: str = "") -> LookupResult:
        return self.inner.lookup(operation, operation_id, effect)


def _runner(
    store: Store, world: PracticeWorld, case: Case, die: Callable[[], None] | None
) -> Runner:
    point = WINDOWS.get(case.window)
    fired = {"done": False}
    clock = FakeClock()
    world.sleep = clock.sleep  # a slow reply moves the case's clock; it never sleeps for real

    def adapter_for(adapter: Any) -> Any:
        inner = world.adapter(adapter.kind)
        if die is not None and point == "in-flight":
            return _InFlight(inner, case.effect, die)
        return inner

    def interrupt(reached: str, effect: str) -> None:
        if (
            die is not None
            and point is not None
            and reached == point
            and effect == case.effect
            and not fired["done"]
        ):
            fired["done"] = True
            die()

    return Runner(store, adapter_for, clock, interrupt=interrupt, strategy=case.strategy)


def _seed(world: PracticeWorld, spec: Spec, case: Case) -> None:
    fixture = dict(spec.examples[case.example].world)
    fixture["faults"] = [f for f in fixture.get("faults", []) if f.get("kind") == "refuse"]
    world.seed(fixture)
    if case.fault == "refuse":
        world.add_fault(case.effect, "refuse", times=100)
    elif case.fault != "none":
        for fault in case.fault.split("+"):  # a pair: each once, in order
            world.add_fault(case.effect, fault, times=1)


def drive(runner: Runner, spec: Spec, text: str, example: str) -> RunRecord:
    """Start (or find) the example's run and take it as far as it goes, approving decisions."""
    run, _ = runner.start(spec, text, spec.examples[example].input)
    for _ in range(50):
        run = runner.advance(run.id)
        request = pending_request(runner, run) if run.status == "waiting" else None
        if request is None:
            return run
        decide(runner, run.id, "approve", CHECKER[0], request.roles[0])
    return run


def _crash() -> None:
    raise Crash


def run_case(spec: Spec, text: str, case: Case, *, kill: bool = False) -> Result:
    """Run one case on a fresh store and practice world; check the invariants."""
    with tempfile.TemporaryDirectory(prefix="ratchet-check-") as tmp:
        store_url = f"sqlite:///{Path(tmp) / 'store.db'}"
        world_path = Path(tmp) / "practice.db"
        world = PracticeWorld(world_path)
        _seed(world, spec, case)
        result = Result(case)
        if kill and WINDOWS.get(case.window) is not None:
            result.crashed = _run_child(tmp, text, case, store_url, world_path)
        else:  # in-process (a case with no crash window runs here under --kill too)
            store = Store(store_url)
            try:
                drive(_runner(store, world, case, _crash), spec, text, case.example)
            except Crash:
                result.crashed = True
            finally:
                store.close()
        store = Store(store_url)
        try:
            runner = _runner(store, world, case, None)
            final = drive(runner, spec, text, case.example)
            _verify(result, spec, runner, world, final)
        except RatchetError as exc:
            result.violations.append(f"resuming failed: {exc}")
        finally:
            store.close()
        return result


def _run_child(tmp: str, text: str, case: Case, store_url: str, world_path: Path) -> bool:
    spec_path = Path(tmp) / "spec.yaml"
    spec_path.write_text(text, encoding="utf-8")
    child = subprocess.run(
        [
            sys.executable,
            "-m",
            "ratchet_runner.review.check",
            str(spec_path),
            store_url,
            str(world_path),
            case.example,
            case.effect,
            case.window,
            case.fault,
            case.strategy,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if child.returncode not in (0, -signal.SIGKILL):
        raise RatchetError(f"the crashing process failed: {child.stderr.strip()[-400:]}")
    return child.returncode == -signal.SIGKILL


def _child(argv: list[str]) -> None:
    """``python -m ratchet_runner.review.check SPEC STORE WORLD EXAMPLE EFFECT WINDOW FAULT
    STRATEGY``: drive the case until its window, then die by SIGKILL (no cleanup, as a real
    crash)."""
    from ratchet_runner.spec.validate import validate_path

    spec_path, store_url, world_path, example, effect, window, fault, strategy = argv
    report = validate_path(spec_path)
    assert report.spec is not None
    case = Case(example, effect, window, fault, strategy)  # type: ignore[arg-type]

    def die() -> None:
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    store = Store(store_url)
    world = PracticeWorld(world_path)
    drive(_runner(store, world, case, die), report.spec, Path(spec_path).read_text(), example)


# -- the invariants ---------------------------------------------------------------------------


def _verify(
    result: Result, spec: Spec, runner: Runner, world: PracticeWorld, run: RunRecord
) -> None:
    store = runner.store
    changes = world.changes()
    operations = {op.operation_id: op for op in store.operations(run.id)}
    result.changes = len(changes)
    result.calls = sum(1 for c in world.calls() if not str(c["operation"]).startswith("lookup"))
    amounts = [float(c.args["amount"]) for c in changes if "amount" in c.args]
    result.amount = round(sum(amounts), 2) if amounts else None
    result.state, result.status = run.state, run.status
    v = result.violations

    per_id = Counter(c.operation_id for c in changes)
    v += [f"operation {i[:12]} applied {n} times" for i, n in per_id.items() if n > 1]
    forward = Counter(c.effect for c in changes if c.operation != "release")
    per_target = Counter(str(c.args.get("hold_id")) for c in changes if c.operation == "release")
    v += [f"{effect} applied {n} times" for effect, n in forward.items() if n > 1]
    v += [f"hold {hold} released {n} times" for hold, n in per_target.items() if n > 1]

    for change in changes:
        op = operations.get(change.operation_id)
        if op is None:
            v.append(
                f"{change.effect} applied with no pending record (op {change.operation_id[:12]})"
            )
        elif op.status == "done" and op.receipt != change.result and per_id[op.operation_id] == 1:
            v.append(f"{change.effect}: the stored receipt differs from the practice database")
    for op in operations.values():
        limit = spec.effects[op.effect].retry.max_attempts + int(
            run.context.get("grants", {}).get(op.operation_id, 0)
        )
        if op.attempts > limit:
            v.append(f"{op.effect}: {op.attempts} attempts, above its budget of {limit}")
        if op.status == "done" and op.operation_id not in per_id and op.role == "forward":
            v.append(f"{op.effect} recorded done but the provider has no such change")

    if run.status not in ("done", "needs_person", "cancelled"):
        v.append(f"the run is stuck in {run.state} ({run.status})")
    if run.status == "done" and spec.states[run.state].kind == "success":
        needed = {op.effect for op in operations.values() if op.role == "forward"}
        v += [
            f"{e} was needed but never applied"
            for e in needed
            if forward[e] == 0 and not any(c.effect == e for c in changes)
        ]
    if _compensated(spec, store.history(run.id)):
        _verify_saga(result, spec, runner, operations, changes, run)


def _compensated(spec: Spec, history: list[EventRecord]) -> bool:
    """Whether the run entered a ``compensate`` state."""
    return any(
        e.kind == "moved"
        and str(e.data.get("to")) in spec.states
        and spec.states[str(e.data.get("to"))].kind == "compensate"
        for e in history
    )


def _verify_saga(
    result: Result,
    spec: Spec,
    runner: Runner,
    operations: dict[str, OperationRecord],
    changes: list[Change],
    run: RunRecord,
) -> None:
    """Every forward effect applied in the practice world is undone exactly once, kept on
    purpose (and recorded as kept), or named by the operator item the run is left in."""
    applied = {c.operation_id for c in changes}
    history = runner.store.history(run.id)
    kept = {e.data.get("operation_id") for e in history if e.kind == "no_compensation"}
    named = _named_in_queue(runner, run) if run.status == "needs_person" else set()
    ending = f"the run ended {run.state} ({run.status})"
    for op in operations.values():
        if op.role != "forward" or op.operation_id not in applied:
            continue
        where = f"{op.effect} (op {op.operation_id[:12]})"
        declared = _declared_undo(spec, op.effect)
        if declared is not None and declared.effect is None:  # none / impossible
            if op.operation_id not in kept:
                result.violations.append(
                    f"{where} is kept ({declared.kind}) but the run never recorded it as kept"
                )
            continue
        undo_ids = {u.operation_id for u in operations.values() if u.compensates == op.operation_id}
        if declared is not None and declared.effect is not None:
            undo_ids.add(compensation_id(op.operation_id, declared.effect))
        undone = sum(1 for c in changes if c.operation_id in undo_ids)
        if undone > 1:
            result.violations.append(f"{op.effect} undone {undone} times")
        elif undone == 0 and run.status != "needs_person":
            result.violations.append(f"{where} was made and never undone, yet {ending}")
        elif undone == 0 and op.effect not in named and op.operation_id not in named:
            result.violations.append(
                f"{where} was made and never undone, and the operator item {run.id} is left in "
                "does not name it"
            )


def _declared_undo(spec: Spec, effect: str) -> Compensation | None:
    for row in spec.transitions:
        if row.external_effect == effect and row.compensation is not None:
            return row.compensation
    return None


def _named_in_queue(runner: Runner, run: RunRecord) -> set[str]:
    """The effects and operation IDs the run's operator item names: in its evidence (left to
    undo, or failed), or in what it asks the person to do."""
    from ratchet_runner.engine.lifecycle import evidence

    found = evidence(runner, run)
    named = {str(d["effect"]) for d in found["left"]} | {str(d["effect"]) for d in found["failed"]}
    queued = next(
        (e.data for e in reversed(runner.store.history(run.id)) if e.kind in ("queued", "stuck")),
        {},
    )
    named |= {str(queued[k]) for k in ("effect", "operation_id") if queued.get(k)}
    return named


# -- many cases -------------------------------------------------------------------------------


def run_cases(
    spec: Spec,
    text: str,
    selected: list[Case],
    *,
    kill: bool = False,
    progress: Callable[[Result], None] | None = None,
) -> Iterator[Result]:
    for case in selected:
        result = run_case(spec, text, case, kill=kill)
        if progress is not None:
            progress(result)
        yield result


def reproduce(spec_path: str, case: Case, kill: bool) -> str:
    """The command that runs one case again."""
    flags = (" --kill" if kill else "") + (" --compare naive" if case.strategy == "naive" else "")
    return f"ratchet check {spec_path} --case {case.name}{flags}"


if __name__ == "__main__":  # the child process of a --kill case
    _child(sys.argv[1:])
