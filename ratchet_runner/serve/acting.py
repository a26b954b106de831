"""What an authenticated operator does, for the API and the console alike: decide a run's pending
approval, or carry out an operator action, as themselves, in a role they hold and the spec
allows.

The actor is always the authenticated operator, never a field of the request; the role is the one
asked for (which they must hold) or the first of theirs the spec allows. A request refused here
changes nothing and is answered with the CLI's code (:class:`Refusal`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..engine.commands import decide as decide_run
from ..engine.commands import operate as operate_run
from ..review.views import pending_request
from ..settings import OPERATOR_ACTIONS
from ..words import RunStatus
from .operators import Operator

if TYPE_CHECKING:
    from ..engine.commands import CommandResult
    from .service import Service


class Refusal(Exception):
    """A request refused before the library is asked: its HTTP status, code and message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def text(data: Mapping[str, Any], key: str, required: bool = False) -> str | None:
    """``data[key]``: a non-empty string, or None when absent and not ``required``."""
    value = data.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        raise Refusal(400, "R200", f"{key!r} must be a non-empty string")
    return value


def choose_role(operator: Operator, allowed: Sequence[str], asked: str | None, what: str) -> str:
    """The role an operator acts in: the one asked for (which they must hold), else the first
    of theirs that ``allowed`` lists; refused (403) when none is."""
    if asked is not None and asked not in operator.roles:
        raise Refusal(403, "R200", f"{operator.name} does not hold role {asked!r}")
    for role in (asked,) if asked is not None else operator.roles:
        if role in allowed:
            return role
    raise Refusal(
        403,
        "R401" if what.startswith("decide") else "R405",
        f"{operator.name} in role(s) {', '.join((asked,) if asked else operator.roles)} may "
        f"not {what} "
        f"(allowed: {', '.join(allowed) or 'none declared'}); nothing changed",
    )


def decide(
    service: Service,
    operator: Operator,
    reference: str,
    decision: str,
    *,
    role: str | None = None,
    digest: str | None = None,
    reason: str | None = None,
) -> CommandResult:
    """Approve or reject (``decision``) what the run named by ``reference`` waits for, as
    ``operator``; with ``digest``, only if the arguments waiting are still those (409 R404
    otherwise). The run is left to the workers, whom the commit wakes."""
    runner = service.runner()
    run = runner.store.resolve(reference)
    pending = pending_request(runner, run) if run.status == RunStatus.WAITING else None
    chosen = role  # nothing waits: the library says why, in the role asked for
    if pending is not None:
        chosen = choose_role(operator, pending.roles, role, f"decide {pending.approval!r}")
    if pending is not None and digest is not None and digest != pending.digest:
        raise Refusal(
            409,
            "R404",
            f"the arguments waiting for a decision have changed (digest {pending.digest[:12]}, "
            f"not {digest[:12]}): look again; nothing changed",
        )
    if decision == "reject" and not (reason or "").strip():
        raise Refusal(400, "R200", "a rejection needs a reason")
    return decide_run(
        runner, run.id, decision, operator.name, chosen or operator.roles[0], reason, drive=False
    )


def operate(
    service: Service,
    operator: Operator,
    reference: str,
    action: str,
    *,
    role: str | None = None,
    note: str | None = None,
) -> CommandResult:
    """Carry out the operator ``action`` on the run named by ``reference``, as ``operator``,
    under the run's lease (as ``ratchet ops`` does), and leave the run to the workers, whom the
    commit wakes: a request never waits on the calls the run makes next."""
    if action not in OPERATOR_ACTIONS:
        raise Refusal(404, "R405", f"no operator action {action!r} ({', '.join(OPERATOR_ACTIONS)})")
    runner = service.runner()
    run = runner.store.resolve(reference)
    spec = runner.spec_of(run)
    chosen = choose_role(operator, spec.operator_roles, role, f"{action} runs")
    return operate_run(runner, run.id, action, operator.name, chosen, note, drive=False)
