"""The hazards of a change (``ratchet_runner.evolve``), each found by a mutation of a shipped
spec: the mutation yields exactly its code, at the row or field it is about; harmless changes
yield none.

Without live runs a hazard is reported for the change itself (``runs`` is None). The live runs
here are made by hand (a :class:`LiveRun` is plain data); ``tests/integration/test_evolve_live.py``
seeds real runs, in every state that matters, on SQLite and PostgreSQL.
"""

from __future__ import annotations

from typing import Any

import pytest

from ratchet_runner.evolve.basis import HAZARD_CODES
from ratchet_runner.evolve.diff import diff
from ratchet_runner.evolve.hazards import Hazard, LiveRun, by_run, hazards
from ratchet_runner.evolve.mapping import mapping_from_text
from ratchet_runner.spec.model import Spec
from ratchet_runner.spec.validate import load_spec_text
from ratchet_runner.store.records import OperationRecord, RunRecord, TimerRecord
from ratchet_runner.words import OperationStatus, RunStatus
from tests.conftest import SPECS


def shipped(name: str) -> tuple[Spec, str]:
    text = (SPECS / f"{name}.yaml").read_text(encoding="utf-8")
    return load_spec_text(text, f"specs/{name}.yaml"), text


def mutated(name: str, *edits: tuple[str, str]) -> tuple[Spec, Spec, str]:
    """The shipped spec, and the version each edit (old text, new text; each must be there
    once, or, starting with ``*``, anywhere) makes of it, as ``v2/NAME.yaml``, with that text."""
    old, text = shipped(name)
    for before, after in edits:
        everywhere = before.startswith("*")
        before = before.removeprefix("*")
        assert text.count(before) == 1 or (everywhere and before in text), before
        text = text.replace(before, after)
    return old, load_spec_text(text, f"v2/{name}.yaml"), text


def line_of(text: str, marker: str) -> int:
    """The line ``marker`` is on (it must be there once)."""
    assert text.count(marker) == 1, marker
    return text[: text.index(marker)].count("\n") + 1


def codes(found: list[Hazard]) -> set[str]:
    return {h.code for h in found}


def run(spec: Spec, state: str, status: RunStatus = RunStatus.WAITING, **more: Any) -> LiveRun:
    """A live run of ``spec``'s first example, standing in ``state``, made by hand."""
    example = next(iter(spec.examples.values()))
    record = RunRecord(
        id=more.pop("id", f"run_{state}"),
        workflow=spec.name,
        spec_digest=spec.digest,
        business_key=more.pop("key", "K-1"),
        state=state,
        status=status,
        version=3,
        input=more.pop("input", example.input),
        context=more.pop("context", {}),
        created_at=1_800_000_000.0,
        updated_at=1_800_000_000.0,
    )
    return LiveRun(record, **more)


def operation(
    effect: str, status: OperationStatus, attempts: int = 1, **more: Any
) -> OperationRecord:
    fields: dict[str, Any] = {
        "operation_id": "a" * 64,
        "run_id": "run_x",
        "effect": effect,
        "role": "forward",
        "args": {},
        "fingerprint": "",
        "status": status,
        "attempts": attempts,
        "receipt": None,
        "last_error": None,
        "compensates": None,
        "created_at": 0.0,
        "updated_at": 0.0,
        **more,
    }
    return OperationRecord(**fields)


# -- each hazard, by a mutation that yields exactly it ---------------------------------------------

REFUND_GUARD = "guard: \"input.amount <= 100.0 || approval.role == 'team_lead'\""

#: code -> (spec, edits, the text on the line the hazard points at, in the new version unless
#: ``old`` is said)
MUTATIONS: dict[str, tuple[str, tuple[tuple[str, str], ...], str]] = {
    # a pause renamed: its runs have nowhere to go (in the old file: the state is gone)
    "V101": (
        "refund",
        (
            ("start: proposed", "start: deciding"),
            ("  proposed:     {kind: pause", "  deciding:     {kind: pause"),
            ("  - {state: proposed,  event: approve", "  - {state: deciding,  event: approve"),
            ("  - {state: proposed,  event: reject", "  - {state: deciding,  event: reject"),
            ("  - {state: proposed,  event: expired", "  - {state: deciding,  event: expired"),
        ),
        "old:  proposed:     {kind: pause",
    ),
    # the operator queue becomes a cancelled state: runs waiting for a person would end
    "V102": (
        "refund",
        (("  needs_person: {kind: operator_queue}", "  needs_person: {kind: cancelled}"),),
        "  needs_person: {kind: cancelled}",
    ),
    # the refund's timeout: a call in flight would be judged by another deadline
    "V103": (
        "refund",
        (("    timeout: 10s\n", "    timeout: 20s\n"),),
        "  - {state: refunding, event: ok",
    ),
    # the same arguments named one by one: another operation ID for the same refund
    "V104": (
        "refund",
        (
            (
                "idempotency_key: [business_key, effect, args],",
                "idempotency_key: [business_key, effect, args.order, args.amount, args.currency, "
                "args.reason],",
            ),
        ),
        "     external_effect: request_refund, idempotency_key:",
    ),
    # only team leads may approve refunds: runs holding an agent's approval keep it under pin
    "V106": (
        "refund",
        (("    roles: [agent, team_lead]", "    roles: [team_lead]"),),
        "  refund_approval:",
    ),
    # the flight hold is undone by another effect: runs that made it registered the old one
    "V107": (
        "booking",
        (
            (
                "retry_owner: runner, compensation: release_flight}",
                "retry_owner: runner, compensation: cancel_flight_hold}",
            ),
            (
                "  release_hotel:\n",
                "  cancel_flight_hold:\n    adapter: airline\n    operation: release\n"
                "    args: {hold_id: receipts.hold_flight.hold_id}\n    receipt: release_id\n"
                "    reconcile: lookup\n"
                "    retry: {max_attempts: 3, initial_backoff: 500ms, max_backoff: 10s}\n"
                "    timeout: 15s\n  release_hotel:\n",
            ),
        ),
        "retry_owner: runner, compensation: cancel_flight_hold}",
    ),
    # a reship decided otherwise
    "V108": (
        "returns",
        (
            (
                "guard: \"input.action == 'reship'\",",
                "guard: \"input.action == 'reship' && input.reason != 'change_of_mind'\",",
            ),
        ),
        "guard: \"input.action == 'reship' && input.reason",
    ),
    # the pause waits 48 hours instead of 72
    "V109": (
        "refund",
        (
            (
                "resumes_on: [approve, reject], expires_after: 72h}",
                "resumes_on: [approve, reject], expires_after: 48h}",
            ),
        ),
        "  proposed:     {kind: pause",
    ),
    # a reason the new version no longer declares
    "V110": (
        "refund",
        (
            (
                "reason:   {type: string, enum: [RFD-LATE, RFD-DOUBLE, RFD-DAMAGED]}",
                "reason:   {type: string, enum: [RFD-LATE, RFD-DOUBLE]}",
            ),
        ),
        "    reason:   {type: string, enum: [RFD-LATE, RFD-DOUBLE]}",
    ),
    # nobody can reject any more: a runs' rejection would be refused
    "V111": (
        "refund",
        (
            (
                "resumes_on: [approve, reject], expires_after",
                "resumes_on: [approve], expires_after",
            ),
            (
                "  - {state: proposed,  event: reject,  next_state: rejected,  durable_write: "
                "decision}\n",
                "",
            ),
        ),
        "  proposed:     {kind: pause",
    ),
    # a new signal whose guard reads a receipt field the hotel hold never declared
    "V112": (
        "booking",
        (
            (
                "resumes_on: [approve, reject], expires_after: 4h}",
                "resumes_on: [approve, reject, requote], expires_after: 4h}",
            ),
            (
                "  - {state: approving,      event: expired, next_state: releasing,  "
                "durable_write: timer}\n",
                "  - {state: approving,      event: expired, next_state: releasing,  "
                "durable_write: timer}\n"
                "  - {state: approving,      event: requote, next_state: releasing,  "
                "durable_write: signal,\n"
                '     guard: "receipts.hold_hotel.rate > 100.0"}\n',
            ),
        ),
        '     guard: "receipts.hold_hotel.rate > 100.0"}',
    ),
    # five attempts instead of three
    "V113": (
        "refund",
        (
            (
                "retry: {max_attempts: 3, initial_backoff: 1s",
                "retry: {max_attempts: 5, initial_backoff: 1s",
            ),
        ),
        "    retry: {max_attempts: 5",
    ),
    # returns start labelling: deciding and reshipping are reached no more
    "V114": (
        "returns",
        (("start: deciding", "start: labelling"),),
        "  deciding:     {kind: step} |   reshipping:   {kind: step}",
    ),
}


@pytest.mark.parametrize("code", sorted(MUTATIONS))
def test_each_mutation_yields_exactly_its_code_where_the_change_is(code: str) -> None:
    name, edits, marker = MUTATIONS[code]
    old, new, text = mutated(name, *edits)
    found = hazards(old, new)
    assert codes(found) == {code}, [h.format() for h in found]
    places = set()
    for one in marker.split(" | "):
        if one.startswith("old:"):
            places.add((f"specs/{name}.yaml", line_of(shipped(name)[1], one.removeprefix("old:"))))
        else:
            places.add((f"v2/{name}.yaml", line_of(text, one)))
    assert {(h.file, h.line) for h in found} == places, [h.format() for h in found]
    assert all(h.severity == HAZARD_CODES[code][0] or code in SEVERITY_BY_CASE for h in found)
    assert all(h.runs is None for h in found)  # no live runs given: the change's own


#: Codes whose severity depends on the case (the default one is in HAZARD_CODES).
SEVERITY_BY_CASE = {"V104", "V106", "V107", "V109", "V110", "V111", "V112"}


def test_an_argument_changed_for_runs_that_have_not_called_it_is_v105_with_their_count() -> None:
    old, new, text = mutated(
        "booking",
        ("nights: input.nights}", 'nights: "input.nights + 1"}'),
    )
    waiting = run(old, "holding_flight", RunStatus.RUNNING)
    found = hazards(old, new, [waiting])
    assert codes(found) == {"V105"}, [h.format() for h in found]
    (hazard,) = found
    assert (hazard.severity, hazard.runs, hazard.line) == (
        "warning",
        (waiting.id,),
        line_of(text, 'nights: "input.nights + 1"}'),
    )
    assert "hold_hotel" in hazard.message
    assert "nights" in hazard.message
    assert "→" in (hazard.note(waiting.id) or "")  # its old and its new arguments


# -- harmless changes ------------------------------------------------------------------------------

HARMLESS = {
    "a description": (
        "refund",
        (
            (
                "  refunding:    {kind: step, description: The refund is being made (or "
                "reconciled)}",
                "  refunding:    {kind: step, description: The money is on its way back}",
            ),
        ),
    ),
    "an operator_action's wording": (
        "refund",
        (
            (
                "operator_action: \"Read the provider's refusal; refund by hand or tell the "
                'customer why not"',
                'operator_action: "Read the refusal; refund by hand, or tell the customer why not"',
            ),
        ),
    ),
    "a new state nothing reaches yet": (
        "booking",
        (
            (
                "  confirmed:      {kind: success}\n",
                "  confirmed:      {kind: success}\n  quoting:        {kind: wait, until: "
                '"receipts.hold_hotel.quote_until"}\n',
            ),
            (
                "examples:\n",
                "  - {state: quoting, event: due, next_state: approving, durable_write: "
                "timer}\n\nexamples:\n",
            ),
        ),
    ),
    "the same spec written otherwise": (
        "refund",
        (("    timeout: 10s\n", "    timeout: 10000ms  # the same ten seconds\n"),),
    ),
}


@pytest.mark.parametrize("case", sorted(HARMLESS))
def test_a_harmless_change_yields_no_hazard_with_or_without_live_runs(case: str) -> None:
    name, edits = HARMLESS[case]
    old, new, _ = mutated(name, *edits)
    example = next(iter(old.examples.values()))
    everywhere = [
        run(old, state, id=f"run_{state}", input=example.input)
        for state, made in old.states.items()
        if made.kind not in ("success", "cancelled", "compensated")
    ]
    assert hazards(old, new) == []
    assert hazards(old, new, everywhere) == []
    if case != "the same spec written otherwise":
        assert diff(old, new).changes  # a change, and a harmless one
    else:
        assert diff(old, new).changes == ()


# -- with live runs --------------------------------------------------------------------------------


def refund_op(
    spec: Spec, live: LiveRun, status: OperationStatus, attempts: int = 1
) -> OperationRecord:
    """The refund operation ``live`` would record under ``spec``, with its real operation ID."""
    from ratchet_runner.engine.activation import activation
    from ratchet_runner.engine.identity import evaluate_args, operation_id

    effect = spec.effects["request_refund"]
    row = next(r for r in spec.transitions if r.external_effect == "request_refund")
    ctx = activation(live.run, spec)
    args = evaluate_args(effect, ctx)
    return operation(
        "request_refund",
        status,
        attempts,
        operation_id=operation_id(spec, row, effect, args, ctx),
        run_id=live.id,
        args=args,
    )


def test_a_key_recipe_changed_names_the_runs_that_called_it_with_their_old_and_new_ids() -> None:
    old, new, _ = mutated("refund", (MUTATIONS["V104"][1][0]))
    waiting = run(old, "proposed", id="run_waiting")
    calling = run(old, "refunding", RunStatus.RUNNING, id="run_calling")
    calling = LiveRun(calling.run, (refund_op(old, calling, OperationStatus.PENDING),))
    (hazard,) = [h for h in hazards(old, new, [waiting, calling]) if h.code == "V104"]
    assert (hazard.severity, hazard.runs) == ("error", ("run_calling",))
    assert "would be op" in (hazard.note("run_calling") or "")


def test_a_key_recipe_changed_is_shown_with_no_run_when_no_live_run_has_called_it() -> None:
    old, new, _ = mutated("refund", (MUTATIONS["V104"][1][0]))
    (hazard,) = hazards(old, new, [run(old, "proposed")])
    assert (hazard.code, hazard.severity, hazard.runs) == ("V104", "warning", ())
    assert "no live run has called it" in hazard.message


def test_a_run_that_made_the_effect_and_cannot_come_back_to_it_keeps_its_id() -> None:
    old, new, _ = mutated("refund", (MUTATIONS["V104"][1][0]))
    done = run(old, "needs_person", RunStatus.NEEDS_PERSON, id="run_done")
    done = LiveRun(done.run, (refund_op(old, done, OperationStatus.DONE),))
    (hazard,) = hazards(old, new, [done])
    assert hazard.runs == ()


def test_a_guard_changed_is_evaluated_for_each_run_and_each_role_that_may_decide() -> None:
    old, new, _ = mutated(
        "refund", (REFUND_GUARD, "guard: \"input.amount <= 40.0 || approval.role == 'team_lead'\"")
    )
    small = run(old, "proposed", id="run_small", input={**old.examples["T-90104"].input})
    large = run(old, "proposed", id="run_large", input={**old.examples["T-90603"].input})
    found = hazards(old, new, [small, large])
    (routes,) = [h for h in found if h.code == "V108"]
    assert routes.runs == ("run_large",)  # 45.95: an agent's approval no longer takes it
    assert routes.note("run_large") == (
        "on approve as agent: refunding → no row holds (to a person)"
    )
    assert "V106" in codes(found)  # the guard of approving is an approval's rule too


def test_a_timer_changed_needs_the_mapping_to_say_keep_or_restart() -> None:
    old, new, _ = mutated("refund", *MUTATIONS["V109"][1])
    armed = TimerRecord(1, "run_proposed", "proposed", "expired", 1_800_259_200.0, 0.0, None, None)
    waiting = run(old, "proposed", timers=(armed,))
    (unsaid,) = hazards(old, new, [waiting])
    assert (unsaid.code, unsaid.severity, unsaid.runs) == ("V109", "error", ("run_proposed",))
    assert unsaid.note("run_proposed") == "armed for 2027-01-18 08:00:00Z"
    for said in ("keep", "restart"):
        mapping = mapping_from_text(f"timers: {said}\n", "move.yaml")
        (hazard,) = hazards(old, new, [waiting], mapping)
        assert (hazard.code, hazard.severity) == ("V109", "warning")
        assert f"timers: {said}" in hazard.message


def test_a_call_in_flight_blocks_the_run_only_when_the_change_touches_its_effect() -> None:
    old, new, _ = mutated("refund", *MUTATIONS["V103"][1])
    calling = run(old, "refunding", RunStatus.RUNNING, id="run_calling")
    calling = LiveRun(calling.run, (refund_op(old, calling, OperationStatus.PENDING, 2),))
    unknown = run(old, "needs_person", RunStatus.NEEDS_PERSON, id="run_unknown")
    unknown = LiveRun(unknown.run, (refund_op(old, unknown, OperationStatus.UNKNOWN),))
    (hazard,) = hazards(old, new, [calling, unknown])
    assert (hazard.code, hazard.runs) == ("V103", ("run_calling", "run_unknown"))
    assert hazard.note("run_calling") == "pending (2 attempts made)"
    assert hazard.note("run_unknown") == "unknown outcome (1 attempt made)"
    described, _, _ = mutated("refund", *HARMLESS["a description"][1])
    assert hazards(described, mutated("refund", *HARMLESS["a description"][1])[1], [calling]) == []


def test_held_and_awaited_approvals_are_listed_as_voided_when_runs_move() -> None:
    old, new, _text = mutated(
        "refund",
        *MUTATIONS["V106"][1],
        ("on_version_change: pin  #", "on_version_change: revalidate  #"),
    )
    from ratchet_runner.store.records import ApprovalRecord

    given = ApprovalRecord(
        7,
        "run_refunding",
        "refund_approval",
        "request_refund",
        "d" * 64,
        "approved",
        "agent-7",
        "agent",
        None,
        "1",
        old.digest,
        0.0,
        86400.0,
        None,
    )
    holding = run(old, "refunding", RunStatus.RUNNING, id="run_refunding", approvals=(given,))
    awaiting = run(old, "proposed", id="run_proposed")
    (hazard,) = [h for h in hazards(old, new, [holding, awaiting]) if h.code == "V106"]
    assert (hazard.severity, hazard.runs) == ("warning", ("run_refunding", "run_proposed"))
    assert hazard.note("run_refunding") == "holds approval #7 by agent-7 (agent)"
    assert hazard.note("run_proposed") == "awaits the decision"
    assert "voided" in hazard.message
    kept = mapping_from_text("approvals: keep\n", "move.yaml")
    (refused,) = [h for h in hazards(old, new, [holding], kept) if h.code == "V106"]
    assert refused.severity == "error"
    assert "approvals: void" in refused.message


def test_an_argument_reading_an_input_field_old_runs_lack_stops_them_there() -> None:
    old, new, text = mutated(
        "booking",
        (
            "required: [trip, traveller, flight, hotel, nights]",
            "required: [trip, traveller, flight, hotel, nights, rooms]",
        ),
        (
            "    nights:    {type: integer, minimum: 1, maximum: 60}",
            "    nights:    {type: integer, minimum: 1, maximum: 60}\n    rooms:     {type: "
            "integer}",
        ),
        ("hotel: input.hotel, nights: input.nights}", "hotel: input.hotel, nights: input.rooms}"),
        ("*nights: 3}", "nights: 3, rooms: 1}"),
    )
    before = run(old, "holding_flight", RunStatus.RUNNING, id="run_before")
    found = [h for h in hazards(old, new, [before]) if h.code == "V110"]
    reads = next(h for h in found if "reads input.rooms" in h.message)
    assert (reads.severity, reads.runs, reads.line) == (
        "error",
        ("run_before",),
        line_of(text, "hotel: input.hotel, nights: input.rooms}"),
    )
    assert reads.note("run_before") == "its input has no input.rooms"


def test_a_receipt_field_read_is_looked_for_in_each_runs_recorded_receipt() -> None:
    old, new, _ = mutated("booking", *MUTATIONS["V112"][1])
    with_rate = run(
        old,
        "approving",
        id="run_rate",
        context={"receipts": {"hold_hotel": {"hold_id": "H", "rate": 90}}},
    )
    without = run(
        old, "approving", id="run_plain", context={"receipts": {"hold_hotel": {"hold_id": "H"}}}
    )
    (hazard,) = hazards(old, new, [with_rate, without])
    assert (hazard.code, hazard.runs) == ("V112", ("run_plain",))
    assert hazard.note("run_plain") == "its receipt of hold_hotel has hold_id"


def test_retries_changed_say_what_is_left_for_a_run_between_attempts() -> None:
    old, new, _ = mutated(
        "refund",
        (
            "retry: {max_attempts: 3, initial_backoff: 1s",
            "retry: {max_attempts: 2, initial_backoff: 1s",
        ),
    )
    between = run(old, "refunding", RunStatus.RUNNING, id="run_between", context={"wake_at": 1.0})
    between = LiveRun(between.run, (refund_op(old, between, OperationStatus.PENDING, 2),))
    (hazard,) = [h for h in hazards(old, new, [between]) if h.code == "V113"]
    assert hazard.runs == ("run_between",)
    assert hazard.note("run_between") == (
        "2 attempts made (pending); none left under version 1: its next step finds the budget spent"
    )


def test_a_queued_run_whose_failed_effect_no_state_performs_any_more_needs_it() -> None:
    old, new, _ = mutated(
        "returns",
        (
            "  - {state: deciding, event: next, guard: \"input.action == 'reship'\",       "
            "next_state: reshipping}\n",
            "",
        ),
        ("  reshipping:   {kind: step}\n", ""),
        (
            "  - {state: reshipping, event: ok, next_state: reshipped, durable_write: "
            "[pending, receipt],\n"
            "     external_effect: reship, idempotency_key: [business_key, effect, args],\n"
            "     receipt: reship_id, retry_owner: runner,\n"
            '     compensation: "impossible: a parcel that has left cannot be called back"}\n'
            "  - {state: reshipping, event: refused,   next_state: needs_person, "
            "durable_write: outcome,\n"
            '     operator_action: "The warehouse refused the reship; offer a refund or a '
            'substitute"}\n'
            "  - {state: reshipping, event: exhausted, next_state: needs_person, "
            "durable_write: outcome,\n"
            '     operator_action: "The warehouse stayed unavailable; run `ratchet ops retry` '
            'when it is back"}\n',
            "",
        ),
    )
    queued = run(old, "needs_person", RunStatus.NEEDS_PERSON, id="run_queued")
    queued = LiveRun(queued.run, (operation("reship", OperationStatus.EXHAUSTED, 3),))
    found = hazards(old, new, [queued])
    (needs,) = [h for h in found if h.code == "V111"]
    assert (needs.severity, needs.runs) == ("error", ("run_queued",))
    assert needs.note("run_queued") == "reship exhausted after 3 attempts"
    assert "ratchet ops retry" in needs.message


def test_an_unreachable_state_is_reported_only_for_the_runs_standing_in_it() -> None:
    old, new, _ = mutated("returns", *MUTATIONS["V114"][1])
    found = hazards(old, new, [run(old, "deciding", RunStatus.RUNNING, id="run_deciding")])
    assert [(h.code, h.runs) for h in found] == [("V114", ("run_deciding",))]


def test_runs_on_another_version_are_not_checked_against_this_change() -> None:
    old, new, _ = mutated("refund", *MUTATIONS["V109"][1])
    elsewhere = run(old, "proposed")
    elsewhere = LiveRun(replace_digest(elsewhere.run, "e" * 64))
    assert hazards(old, new, [elsewhere]) == []


def replace_digest(record: RunRecord, digest: str) -> RunRecord:
    from dataclasses import replace

    return replace(record, spec_digest=digest)


# -- a mapping -------------------------------------------------------------------------------------


def test_a_mapping_moves_the_runs_of_a_renamed_state_and_its_own_problems_are_hazards() -> None:
    old, new, _ = mutated("refund", *MUTATIONS["V101"][1])
    waiting = run(old, "proposed")
    moved = mapping_from_text("states: {proposed: deciding}\n", "move.yaml")
    assert hazards(old, new, [waiting], moved) == []
    hostile = mapping_from_text(
        "states:\n  proposed: decidng\n  nowhere: deciding\n  needs_person: refunded\n",
        "move.yaml",
    )
    found = hazards(old, new, [waiting], hostile)
    by_code = {h.code: h for h in found if h.file == "move.yaml"}
    assert set(by_code) == {"V102", "V204", "V205"}
    assert (by_code["V205"].line, by_code["V205"].runs) == (2, ("run_proposed",))
    assert "did you mean 'deciding'?" in by_code["V205"].message
    assert (by_code["V204"].line, by_code["V204"].runs) == (3, ())
    assert (by_code["V102"].line, by_code["V102"].severity) == (4, "error")
    assert "operator_queue" in by_code["V102"].message
    assert "success" in by_code["V102"].message


def test_by_run_gives_each_touched_run_its_hazards_errors_first() -> None:
    old, new, _ = mutated(
        "refund",
        *MUTATIONS["V109"][1],
        (REFUND_GUARD, "guard: \"input.amount <= 40.0 || approval.role == 'team_lead'\""),
    )
    large = run(old, "proposed", id="run_large", input={**old.examples["T-90603"].input})
    small = run(old, "proposed", id="run_small")
    found = hazards(old, new, [large, small])
    verdicts = by_run(found)
    assert [h.code for h in verdicts["run_large"]] == ["V109", "V106", "V108"]
    assert [h.code for h in verdicts["run_small"]] == ["V109", "V106"]
    assert by_run(hazards(old, new)) == {}  # without live runs, no run is named
