"""Effect-safety checks (E5xx/W5xx): what makes an effect happen once, or not at all.

These are the checks behind Ratchet's promise. Each one stops a concrete way of making a change
twice (a call with no write-ahead record, a retry after a timeout with no lookup, two layers
retrying), or of making it without a decision (an approval that does not bind the arguments,
never expires, or is never recorded). The idempotency keys' checks (a key that differs between
attempts, or names less than the work) are :mod:`~ratchet_runner.spec.lint.keys`'s.
:mod:`ratchet_runner.spec.lint` registers them in
:data:`ratchet_runner.spec.lint.CHECKS`.
"""

from __future__ import annotations

from collections.abc import Iterator

from ...errors import Diagnostic
from ..model import Adapter, Effect, Row, Spec
from .support import at, at_field, at_name, col, effect_rows, line_of, only_undoes

#: More calls than this for one approved change, across all retry layers, is a warning (W508).
MAX_CALLS_PER_EFFECT = 10

_OUTCOME_ROWS = ("refused", "exhausted")


def check_effect_states(spec: Spec) -> Iterator[Diagnostic]:
    first_row: dict[str, Row] = {}
    for row, effect in effect_rows(spec):
        first = first_row.setdefault(row.state, row)
        if first.external_effect != effect.name:
            yield at(
                spec,
                col(row, "external_effect"),
                "E514",
                f"state {row.state!r} already performs {first.external_effect!r} (line "
                f"{line_of(spec, first)}), and one state performs one effect, so that each "
                f"outcome says which call it was: give {effect.name!r} a state of its own, "
                f"entered from the 'ok' row of {first.external_effect!r}",
            )
        kind = spec.states[row.state].kind if row.state in spec.states else "step"
        if kind != "step":
            yield at(
                spec,
                col(row, "external_effect"),
                "E406",
                f"only a step state performs an effect, and {row.state!r} is {kind}: move "
                f"{effect.name!r} to a step state",
            )
    for state in spec.states.values():
        if state.name not in first_row and state.kind != "compensate":
            continue
        events = {row.event for row in spec.rows_from(state.name)}
        missing = " or ".join(repr(e) for e in _OUTCOME_ROWS if e not in events)
        if not missing:
            continue
        what = (
            f"{first_row[state.name].external_effect!r} is refused or its retries run out"
            if state.name in first_row
            else "a compensation is refused or its retries run out"
        )
        yield _e506(spec, state.name, first_row.get(state.name), missing, what)


def _e506(spec: Spec, state: str, row: Row | None, missing: str, what: str) -> Diagnostic:
    message = (
        f"state {state!r} has no row for {missing}: when {what}, the run has nowhere to go; "
        f"add a row for each out of {state!r} (an operator queue will do)"
    )
    if row is not None:
        return at(spec, row.pointer, "E506", message)
    return at_name(spec, spec.states[state].pointer, "E506", message)


# -- retry and hope -----------------------------------------------------------------------------


def check_retry_and_hope(spec: Spec) -> Iterator[Diagnostic]:
    for effect in spec.effects.values():
        if effect.reconcile is None:
            yield at_field(
                spec,
                effect.pointer,
                "reconcile",
                "E504",
                f"effect {effect.name!r} has no reconcile lookup: after a timeout nobody can "
                "learn whether the call happened, so a retry may make the change a second time; "
                "name the provider's lookup by operation ID in reconcile: OPERATION",
            )
    for row, effect in effect_rows(spec):
        if "pending" not in row.durable_write:
            yield at(
                spec,
                col(row, "durable_write"),
                "E505",
                f"the row performing {effect.name!r} does not write 'pending' before the call: "
                "after a crash mid-call nothing shows the call was made, so recovery calls again "
                "without reconciling; add 'pending' to durable_write",
            )
        if row.receipt is None:
            yield at(
                spec,
                row.pointer,
                "E513",
                f"the row performing {effect.name!r} names no receipt, so nothing stored proves "
                "the change happened: add receipt: FIELD, the reply field with the provider's "
                "ID (e.g. refund_id)",
            )


# -- retry owners -------------------------------------------------------------------------------


def _owner(effect: Effect, adapter: Adapter) -> str | None:
    """Which layer retries ``effect``: runner, adapter, none, or None when both do."""
    runner, client = effect.retry.max_attempts > 1, adapter.attempts > 1
    if runner and client:
        return None
    return "runner" if runner else "adapter" if client else "none"


def _who(owner: str, effect: Effect, adapter: Adapter) -> str:
    if owner == "runner":
        attempts = effect.retry.max_attempts
        return f"the runner retries {effect.name!r} (retry max_attempts {attempts})"
    if owner == "adapter":
        return f"adapter {adapter.name!r} retries {effect.name!r} (attempts {adapter.attempts})"
    return f"nothing retries {effect.name!r}"


def check_retry_owners(spec: Spec) -> Iterator[Diagnostic]:
    for effect in spec.effects.values():
        adapter = spec.adapters.get(effect.adapter)
        if adapter is None:
            continue
        if _owner(effect, adapter) is None:
            yield at_field(
                spec,
                adapter.pointer,
                "attempts",
                "E507",
                f"{effect.name!r} is retried by the runner (retry max_attempts "
                f"{effect.retry.max_attempts}) and by adapter {adapter.name!r} (attempts "
                f"{adapter.attempts}): the layers multiply and neither keeps the other's budget; "
                "let one layer own the retries (set the adapter's attempts or the effect's "
                "max_attempts to 1)",
            )
        calls = effect.retry.max_attempts * adapter.attempts * adapter.upstream_attempts
        if calls > MAX_CALLS_PER_EFFECT:
            yield at_field(
                spec,
                effect.pointer,
                "retry",
                "W508",
                f"{effect.name!r} may reach the provider {calls} times for one change: "
                f"{effect.retry.max_attempts} (runner) x {adapter.attempts} (adapter) x "
                f"{adapter.upstream_attempts} (upstream) > {MAX_CALLS_PER_EFFECT}; lower the "
                f"attempts so that the product is at most {MAX_CALLS_PER_EFFECT}",
            )
    declared_by_adapter: dict[str, tuple[Row, str]] = {}
    for row, effect in effect_rows(spec):
        adapter = spec.adapters.get(effect.adapter)
        owner = None if adapter is None else _owner(effect, adapter)
        if adapter is None or owner is None or row.retry_owner is None:
            continue
        if row.retry_owner != owner:
            yield at(
                spec,
                col(row, "retry_owner"),
                "E507",
                f"the row says retry_owner {row.retry_owner!r}, but {_who(owner, effect, adapter)}:"
                f" say retry_owner: {owner}, or move the retries to the {row.retry_owner}",
            )
            continue
        if owner == "none":
            continue
        first, first_owner = declared_by_adapter.setdefault(adapter.name, (row, owner))
        if first_owner != owner:
            yield at(
                spec,
                col(row, "retry_owner"),
                "E507",
                f"dependency {adapter.name!r} has two retry owners: the {first_owner} for "
                f"{first.external_effect!r} (line {line_of(spec, first)}) and the {owner} for "
                f"{effect.name!r}; let one layer own its retries",
            )


# -- compensation, approvals, operator queues ---------------------------------------------------


def check_compensation(spec: Spec) -> Iterator[Diagnostic]:
    compensating = spec.compensating_effects
    # A spec is a saga when a step names a compensation, or when it has a compensate state.
    saga = bool(compensating) or any(s.kind == "compensate" for s in spec.states.values())
    for row, effect in effect_rows(spec):
        if effect.name in compensating:
            continue
        comp = row.compensation
        if comp is None and saga:
            yield at(
                spec,
                row.pointer,
                "E509",
                f"saga step {effect.name!r} says nothing about undoing it, so when a later step "
                "fails it is left in place: add compensation: EFFECT (the effect that undoes "
                "it), or 'none: REASON' / 'impossible: REASON'",
            )
        elif comp is not None and comp.kind != "effect" and comp.reason is None:
            yield at(
                spec,
                col(row, "compensation"),
                "E509",
                f"compensation '{comp.kind}' gives no reason, and the operator who finds "
                f"{effect.name!r} not undone needs one: write '{comp.kind}: WHY'",
            )


def check_approvals(spec: Spec) -> Iterator[Diagnostic]:
    for approval in spec.approvals.values():
        effect = spec.effects.get(approval.effect)
        if effect is not None and approval.binds != "all":
            unbound = [a for a in effect.args if a not in approval.binds]
            if unbound:
                yield at(
                    spec,
                    f"{approval.pointer}/binds",
                    "E510",
                    f"approval {approval.name!r} does not bind {', '.join(unbound)}, so "
                    f"{'they' if len(unbound) > 1 else 'it'} could change after the decision and "
                    "the effect would still run: bind 'all'",
                )
        if approval.expires_after is None:
            yield at_name(
                spec,
                approval.pointer,
                "E511",
                f"approval {approval.name!r} never expires, so a decision could be used weeks "
                "later, when the facts have changed: add expires_after: DURATION (e.g. 24h)",
            )
    for effect in spec.effects.values():
        if effect.approval is None:
            continue
        states = {row.state for row, e in effect_rows(spec) if e.name == effect.name}
        if spec.start in states:
            yield at(
                spec,
                "/start",
                "E515",
                f"the run starts in {spec.start!r}, which performs {effect.name!r}, so approval "
                f"{effect.approval!r} is never recorded: start in a pause state that asks for it, "
                f"and enter {spec.start!r} from its approve row with durable_write: approval",
            )
        for row in spec.transitions:
            if row.next_state in states and "approval" not in row.durable_write:
                yield at(
                    spec,
                    row.pointer,
                    "E515",
                    f"this row enters {row.next_state!r}, which performs {effect.name!r}, "
                    f"without recording approval {effect.approval!r}: add 'approval' to its "
                    "durable_write (the row that follows the decision)",
                )


def check_compensation_approvals(spec: Spec) -> Iterator[Diagnostic]:
    """E519: a compensation runs while the run stands in a ``compensate`` state, and nothing
    there asks for a decision, so an approval on an effect that runs only as one is never used.
    An effect that is also some row's forward effect asks for its approval on that row."""
    undoes: dict[str, dict[str, None]] = {name: {} for name in only_undoes(spec)}
    for row in spec.transitions:
        comp = row.compensation
        if comp is not None and comp.effect in undoes and row.external_effect is not None:
            undoes[comp.effect][row.external_effect] = None
    for name, undone in undoes.items():
        effect = spec.effects[name]
        asking = {
            a.name: f"{a.pointer}/effect" for a in spec.approvals.values() if a.effect == name
        }
        if effect.approval in spec.approvals and effect.approval not in asking:
            asking[effect.approval] = f"{effect.pointer}/approval"
        which = f"the undo of {', '.join(map(repr, undone))}" if undone else "an undo"
        for approval, pointer in asking.items():
            yield at(
                spec,
                pointer,
                "E519",
                f"approval {approval!r} is on {name!r}, which only runs as a compensation "
                f"({which}), and a compensation never waits for a decision: the undo "
                "would run without one; for a person to decide before undoing, send the row "
                "that fails to a pause state whose approval is on a forward effect that does the "
                "undo, or to an operator_queue state, and drop this approval",
            )


def check_pinned_approvals(spec: Spec) -> Iterator[Diagnostic]:
    """W520: under the default ``pin``, a run approved under an older policy_version keeps its
    approval after a version with another policy is deployed. For a change that is never undone
    (``none``/``impossible``), that should be chosen, not inherited from a default."""
    if spec.on_version_change_written:
        return
    warned: set[str] = set()
    for row, effect in effect_rows(spec):
        comp = row.compensation
        if effect.approval is None or effect.name in warned:
            continue
        if comp is None or comp.kind not in ("none", "impossible"):
            continue
        warned.add(effect.name)
        yield at_field(
            spec,
            effect.pointer,
            "approval",
            "W520",
            f"{effect.name!r} needs approval {effect.approval!r} and is never undone "
            f"(compensation: {comp.kind}), and on_version_change is left to its default, pin: "
            "after a version with another policy_version is deployed, a run approved under the "
            "older one still makes this change, without being asked again; set "
            "on_version_change: revalidate to ask again, or write on_version_change: pin to "
            "keep this on purpose",
        )


def check_operator_actions(spec: Spec) -> Iterator[Diagnostic]:
    for row in spec.transitions:
        target = spec.states.get(row.next_state)
        if target is None or target.kind != "operator_queue":
            continue
        if row.operator_action is None and target.operator_action is None:
            yield at(
                spec,
                row.pointer,
                "W512",
                f"this row ends in operator queue {target.name!r} without an operator_action, "
                "so the person who picks the run up is not told what to do: add "
                "operator_action: WHAT TO DO to the row (or to the state)",
            )
