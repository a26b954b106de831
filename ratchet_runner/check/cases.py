"""``ratchet check``: run every crash window of every effect for real, and prove the invariants.

For each example of a spec, each effect it reaches (forward and compensating), each crash window
and each fault (the single faults, and each ambiguous fault paired with a failing lookup), the
checker runs the example on a fresh store and a fresh practice world, crashes
at that window (in-process by an exception, or with ``kill=True`` in a child process killed with
SIGKILL), resumes in a new runner to the end (approving what waits for a decision), and checks
the invariants of :mod:`~ratchet_runner.check.invariants`: each broken one is a
:class:`~ratchet_runner.check.invariants.Violation` of one
:class:`~ratchet_runner.check.invariants.ViolationKind`.

The checker uses an example's input and world. Of the example's faults it keeps the refusals,
which define the scenario (a hotel that is full); the transient ones are left out, since each
case injects its own. Only effects the example reaches are checked.

**Over HTTP.** When the binding found for the spec binds adapters to ``http``
(:func:`~ratchet_runner.check.http.over_http`), each case serves its practice world over
HTTP on 127.0.0.1 for the whole case and calls it through the real HTTP adapter, made from the
binding's settings (:mod:`~ratchet_runner.check.http`); a ``--kill`` child gets the
binding and the server's URL. Every window and fault acts as in-process.

Over 400 lines: one concern, the cases of ``ratchet check``: which to run, and running each (in
process, killed, over HTTP).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..adapters.base import Adapter, Call, LookupResult, Outcome, Semantics
from ..adapters.practice import PracticeWorld
from ..clock import FakeClock
from ..engine.approvals import pending_request
from ..engine.deciding import decide
from ..engine.providers import ask, declared_by
from ..engine.runner import Runner
from ..errors import ApprovalError, RatchetError, UsageError
from ..review.naive import MARKS, NAIVE, Strategy, step_for
from ..session import Session
from ..spec.model import Adapter as AdapterSpec
from ..spec.model import Spec
from ..spec.validate import validate_path
from ..store.records import RunRecord
from ..words import RunStatus
from .http import HttpReach, OverHttp, over_http, reaching, served
from .invariants import Violation, ViolationKind, verify

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
    violations: list[Violation] = field(default_factory=list)
    changes: int = 0
    amounts: dict[str, float] = field(default_factory=dict)  # per operation (refund, charge)
    calls: int = 0
    seconds: float = 0.0  # how long the case took, crash and resume
    state: str = ""
    status: str = ""
    crashed: bool = False

    @property
    def ok(self) -> bool:
        return not self.violations

    def flag(self, kind: ViolationKind, message: str) -> None:
        self.violations.append(Violation(kind, message))

    @property
    def amount(self) -> float | None:
        """The amounts' total when one operation moved them all (else None: a refund and its
        charge-back are two figures, never one)."""
        return next(iter(self.amounts.values())) if len(self.amounts) == 1 else None

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
            "amounts": self.amounts,
            "seconds": self.seconds,
            "calls": self.calls,
            "final": {"state": self.state, "status": self.status},
            "violations": [v.message for v in self.violations],
            "violation_kinds": [v.kind.value for v in self.violations],
        }


def reached_effects(spec: Spec, text: str, example: str) -> list[str]:
    """The effects the example calls when nothing goes wrong, in call order."""
    clean = Case(example, "", "none", "none")
    with tempfile.TemporaryDirectory(prefix="ratchet-check-") as tmp, _session(tmp) as session:
        _seed(session.world, spec, clean)
        drive(_runner(session, clean, None), spec, text, example)
        return list(dict.fromkeys(str(c["effect"]) for c in session.world.calls()))


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


class _InFlight:
    """An adapter (in-process or over HTTP) whose first request of one effect reaches the
    case's provider (``world``), which never commits it; then the process dies: the request was
    in flight."""

    def __init__(
        self, inner: Adapter, world: PracticeWorld, effect: str, die: Callable[[], None]
    ) -> None:
        self.inner, self.world, self.effect, self.die, self.done = inner, world, effect, die, False

    def call(self, request: Call) -> Outcome:
        if request.effect == self.effect and not self.done:
            self.done = True
            self.world.receive_only(request)
            self.die()
        return self.inner.call(request)

    def lookup(
        self, operation: str, operation_id: str, effect: str = "", **given: Any
    ) -> LookupResult:
        return ask(self.inner, operation, operation_id, effect, given.get("args"))

    def semantics(self, operation: str, lookup: str | None = None) -> Semantics | None:
        return declared_by(self.inner, operation, lookup)


def _session(home: str | Path) -> Session:
    """A case's store and practice world in ``home``, on a fake clock of its own."""
    url = f"sqlite:///{Path(home) / 'store.db'}"
    return Session(url, home=Path(home), clock=FakeClock(), steps=step_for)


def _runner(
    session: Session, case: Case, die: Callable[[], None] | None, http: HttpReach | None = None
) -> Runner:
    point = WINDOWS.get(case.window)
    fired = {"done": False}
    world = session.world
    world.sleep = session.clock.sleep  # a slow reply moves the case's clock; it never sleeps

    def adapter_for(adapter: AdapterSpec) -> Adapter:
        inner: Adapter
        if http is not None and adapter.name in http.wire.http:
            inner = http.wire.make(adapter, http.url, http.place)
        else:
            inner = world.adapter(adapter.kind, adapter.config)
        if die is not None and point == "in-flight":
            return _InFlight(inner, world, case.effect, die)
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

    marks = MARKS if case.strategy == NAIVE else None
    return session.runner(adapters=adapter_for, interrupt=interrupt, marks=marks)


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
    """Start (or find) the example's run and take it as far as it goes, approving decisions:
    each as the first of the approval's roles (in the order the spec lists them) for which the
    guard of the approving row holds (a refund above 100 needs a team lead); a
    :class:`UsageError` naming the example when none does."""
    run, _ = runner.start(spec, text, spec.examples[example].input)
    return carry(runner, run, example)


def carry(runner: Runner, run: RunRecord, example: str) -> RunRecord:
    """Take ``run`` (of ``example``) as far as it goes, approving decisions as :func:`drive`
    does, under the spec version it is on."""
    for _ in range(50):
        run = runner.advance(run.id)
        if _wait_for_wake_up(runner, run):
            continue  # a back-off or a provider's commit window, waited out on the case's clock
        request = pending_request(runner, run) if run.status == RunStatus.WAITING else None
        if request is None:
            return run
        _approve(runner, run, example, request.roles)
    return run


def _wait_for_wake_up(runner: Runner, run: RunRecord) -> bool:
    """A run left running until a wake-up time (a long back-off, a lookup that is believed only
    once the provider's commit window has passed): move the case's fake clock there, as time
    would pass before a worker took it up; False when the run waits for nothing of the kind."""
    wake = run.context.get("wake_at")
    if run.status != RunStatus.RUNNING or not isinstance(wake, int | float):
        return False
    if not isinstance(runner.clock, FakeClock):
        return False
    runner.clock.advance(max(0.0, wake - runner.clock.now()))
    return True


def _approve(runner: Runner, run: RunRecord, example: str, roles: Sequence[str]) -> None:
    refusals: list[str] = []
    for role in roles:
        try:
            decide(runner, run.id, "approve", CHECKER[0], role)
            return
        except ApprovalError as refused:
            if run.status != runner.store.get_run(run.id).status:
                raise  # the run moved on meanwhile: not a role the guard refuses
            refusals.append(f"{role}: {refused}")
    raise UsageError(
        f"example {example!r} waits for an approval that no role it allows can give "
        f"({'; '.join(refusals)}): check approves as the first role the approval lists for "
        "which the guard holds; change the example's input, or the roles or the guard"
    )


def _crash() -> None:
    raise Crash


def run_case(
    spec: Spec, text: str, case: Case, *, kill: bool = False, wire: OverHttp | None = None
) -> Result:
    """Run one case on a fresh store and practice world; check the invariants. With ``wire``,
    the adapters it names call the case's world served over HTTP (:func:`over_http`)."""
    result = Result(case)
    with tempfile.TemporaryDirectory(prefix="ratchet-check-") as tmp, served(tmp, wire) as server:
        url = None if server is None else server.url
        with _session(tmp) as crashing:  # the process that crashes at the window
            _seed(crashing.world, spec, case)
            if server is not None:  # a slow reply moves this process's clock
                server.world.sleep = crashing.clock.sleep
            if kill and WINDOWS.get(case.window) is not None:
                result.crashed = _run_child(tmp, text, case, wire, url)
            else:  # in-process (a case with no crash window runs here under --kill too)
                with reaching(crashing, wire, url) as http:
                    try:
                        drive(_runner(crashing, case, _crash, http), spec, text, case.example)
                    except Crash:
                        result.crashed = True
        with _session(tmp) as resuming, reaching(resuming, wire, url) as http:  # a new process
            if server is not None:
                server.world.sleep = resuming.clock.sleep
            try:
                runner = _runner(resuming, case, None, http)
                final = drive(runner, spec, text, case.example)
                _tally(result, resuming.world, final)
                result.violations += verify(spec, runner, resuming.world, final)
            except RatchetError as exc:
                result.flag(ViolationKind.RESUME_FAILED, f"resuming failed: {exc}")
    return result


def _tally(result: Result, world: PracticeWorld, run: RunRecord) -> None:
    """What the case left: the changes made (and their amount), the calls, where the run is."""
    changes = world.changes()
    result.changes = len(changes)
    result.calls = sum(1 for c in world.calls() if not str(c["operation"]).startswith("lookup"))
    amounts: dict[str, float] = {}
    for c in changes:  # per operation: a refund and its charge-back are not one figure
        if "amount" in c.args:
            amounts[c.operation] = round(amounts.get(c.operation, 0.0) + float(c.args["amount"]), 2)
    result.amounts = amounts
    result.state, result.status = run.state, run.status


def _run_child(
    tmp: str, text: str, case: Case, wire: OverHttp | None = None, url: str | None = None
) -> bool:
    spec_path = Path(tmp) / "spec.yaml"
    spec_path.write_text(text, encoding="utf-8")
    http = [str(wire.binding.path.resolve()), url] if wire is not None and url else []
    child = subprocess.run(
        [
            sys.executable,
            "-m",
            "ratchet_runner.check.cases",
            str(spec_path),
            tmp,
            case.example,
            case.effect,
            case.window,
            case.fault,
            case.strategy,
            *http,
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
    """``python -m ratchet_runner.check.cases SPEC HOME EXAMPLE EFFECT WINDOW FAULT STRATEGY
    [BINDING URL]``: drive the case (its store and practice world in HOME; with BINDING, its
    adapters bound to http calling the case's practice server at URL through the HTTP adapter)
    until its window, then die by SIGKILL (no cleanup, as a real crash)."""
    spec_path, tmp, example, effect, window, fault, strategy, *http = argv
    report = validate_path(spec_path)
    assert report.spec is not None
    case = Case(example, effect, window, fault, "naive" if strategy == "naive" else "ratchet")
    wire = over_http(report.spec, spec_path, http[0]) if http else None

    def die() -> None:
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    text = Path(spec_path).read_text(encoding="utf-8")
    with _session(tmp) as session, reaching(session, wire, http[1] if http else None) as reach:
        drive(_runner(session, case, die, reach), report.spec, text, example)


# -- many cases -------------------------------------------------------------------------------


def run_cases(
    spec: Spec,
    text: str,
    selected: list[Case],
    *,
    kill: bool = False,
    progress: Callable[[Result], None] | None = None,
    wire: OverHttp | None = None,
) -> Iterator[Result]:
    for case in selected:
        began = time.monotonic()
        result = run_case(spec, text, case, kill=kill, wire=wire)
        result.seconds = round(time.monotonic() - began, 3)
        if progress is not None:
            progress(result)
        yield result


def reproduce(spec_path: str, case: Case, kill: bool, bindings: str | None = None) -> str:
    """The command that runs one case again (``bindings``: the binding file its adapters were
    reached through over HTTP)."""
    flags = (" --kill" if kill else "") + (" --compare naive" if case.strategy == "naive" else "")
    flags += f" --bindings {bindings}" if bindings else ""
    return f"ratchet check {spec_path} --case {case.name}{flags}"


if __name__ == "__main__":  # the child process of a --kill case
    _child(sys.argv[1:])
