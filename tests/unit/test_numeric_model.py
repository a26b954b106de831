"""Numbers in expressions: a JSON number is a number, whatever its spelling; a boolean never is.

* ``"amount": 5`` compares with ``100.0`` (and ``9.95`` with ``100``): ``int``, ``uint`` and
  ``double`` compare by value, exactly, in guards, arguments and ``in``; an ``int`` and a
  ``double`` compute together as doubles.
* A boolean beside a number, in a comparison or in arithmetic, cannot be evaluated: signal data
  ``{"weight_kg": true}`` does not pass ``signal.weight_kg > 0.0``.
* The input schema already refuses ``true`` where it says ``number`` (JSON Schema); data with no
  schema (signal data, receipts) is where a boolean met a number.
* Money written as a decimal string compares through ``double()`` and passes unchanged.
* Effect arguments keep their values, so the operation IDs and approval digests of existing runs
  do not change (pinned below).
* Two inputs are the same input when their normalised JSON is the same: ``10.0`` is ``10``,
  ``true`` is not ``1``; the first field that differs is found in key order.
* E313 flags, from the input schema's declared types and the literals, a comparison or a sum
  that can never be evaluated, and nothing that is not certain.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ratchet_runner.engine.identity import (
    approval_digest,
    evaluate_args,
    first_difference,
    normalise,
    operation_id,
)
from ratchet_runner.errors import ExpressionError
from ratchet_runner.spec.expressions import compile_expression
from ratchet_runner.spec.lint.types import mismatches
from ratchet_runner.spec.validate import load_spec, validate_text
from tests.conftest import SPECS
from tests.conftest import run_cli as run

REFUND = SPECS / "refund.yaml"
PARCEL = Path(__file__).resolve().parents[1] / "fixtures" / "parcel.yaml"
EXAMPLES = Path(__file__).resolve().parents[1] / "lint_examples"
ERROR = "cannot be evaluated"


def value(source: str, activation: dict[str, Any]) -> Any:
    """What ``source`` gives over ``activation``, or ERROR when it cannot be evaluated."""
    try:
        return compile_expression(source).evaluate(activation)
    except ExpressionError as exc:
        message = str(exc)
    assert ERROR in message
    return ERROR


# -- guards: int, double, uint, bool and decimal strings ---------------------------------------

GUARD = "input.amount <= 100.0 || approval.role == 'team_lead'"


@pytest.mark.parametrize(
    ("source", "data", "expected"),
    [
        # the refund's own guard, with every spelling of the amount
        (GUARD, {"amount": 5}, True),
        (GUARD, {"amount": 5.0}, True),
        (GUARD, {"amount": 9.95}, True),
        (GUARD, {"amount": 100}, True),
        (GUARD, {"amount": 100.01}, False),
        (GUARD, {"amount": 150}, False),
        # an int literal against a double, and equality across spellings
        ("input.amount <= 100", {"amount": 9.95}, True),
        ("input.amount <= 100", {"amount": 100.0}, True),
        ("input.amount == 5", {"amount": 5.0}, True),
        ("input.amount != 5.0", {"amount": 5}, False),
        ("input.amount == 5u", {"amount": 5.0}, True),
        ("input.amount > 5u", {"amount": 5.5}, True),
        # exactly, not through a rounded double
        ("input.amount > 9007199254740992.0", {"amount": 9007199254740993}, True),
        ("input.amount == 9007199254740992.0", {"amount": 9007199254740993}, False),
        # in
        ("input.amount in [1, 2, 5]", {"amount": 5.0}, True),
        ("input.amount in [1.5, 2.5]", {"amount": 2}, False),
        # a boolean is never a number
        ("input.amount > 0.0", {"amount": True}, ERROR),
        ("input.amount > 0", {"amount": True}, ERROR),
        ("input.amount == 1", {"amount": True}, ERROR),
        ("input.amount != 0", {"amount": False}, ERROR),
        ("input.amount in [0, 1]", {"amount": True}, ERROR),
        ("input.amount == true", {"amount": True}, True),
        ("input.amount in [true]", {"amount": True}, True),
        # a string is never a number, however it reads; a decimal string goes through double()
        ("input.amount <= 100.0", {"amount": "9.95"}, ERROR),
        ("input.amount == 5", {"amount": "5"}, ERROR),
        ("double(input.amount) <= 100.0", {"amount": "9.95"}, True),
        ("double(input.amount) <= 100.0", {"amount": "100.00"}, True),
        ("double(input.amount) <= 100.0", {"amount": "100.01"}, False),
        ("int(input.amount_minor) <= 10000", {"amount_minor": "995"}, True),
        # integer minor units: exact, and as before
        ("input.amount_minor <= 10000", {"amount_minor": 995}, True),
        ("input.amount_minor <= 10000", {"amount_minor": 10001}, False),
        # one kind on both sides: as before
        ("input.amount < input.limit", {"amount": 1.5, "limit": 2.5}, True),
        ("input.amount < input.limit", {"amount": 2, "limit": 3}, True),
        ("input.amount < input.limit", {"amount": 2, "limit": 2.5}, True),
        ("input.flag == input.other", {"flag": True, "other": False}, False),
        ("input.name < input.other", {"name": "a", "other": "b"}, True),
    ],
)
def test_a_guard_compares_numbers_by_value_and_never_a_boolean_as_a_number(
    source: str, data: dict[str, Any], expected: Any
) -> None:
    result = value(source, {"input": data, "approval": {"role": "agent"}})
    assert result == expected
    assert type(result) is type(expected)  # True is not 1


def test_an_error_in_one_side_of_an_or_does_not_hide_a_true_other_side() -> None:
    # CEL's || is commutative over errors: the team lead's approval holds whatever the amount.
    assert value(GUARD, {"input": {"amount": True}, "approval": {"role": "team_lead"}}) is True
    assert value(GUARD, {"input": {"amount": True}, "approval": {"role": "agent"}}) == ERROR


def test_the_message_names_the_two_types_and_why() -> None:
    with pytest.raises(ExpressionError) as caught:
        compile_expression("signal.weight_kg > 0.0").evaluate({"signal": {"weight_kg": True}})
    assert "no such overload: bool > double (a boolean is never a number)" in str(caught.value)
    with pytest.raises(ExpressionError) as caught:
        compile_expression("input.amount <= 100.0").evaluate({"input": {"amount": "9.95"}})
    assert "no such overload: string <= double" in str(caught.value)


# -- arguments: computed values, and what reaches the adapter ----------------------------------


@pytest.mark.parametrize(
    ("source", "data", "expected"),
    [
        # a plain name is passed as it is (then normalised: 5.0 and 5 name the same amount)
        ("input.amount", {"amount": 5}, 5),
        ("input.amount", {"amount": 5.0}, 5),
        ("input.amount", {"amount": 9.95}, 9.95),
        ("input.amount", {"amount": "9.95"}, "9.95"),
        ("input.amount", {"amount": True}, True),
        # an int and a double compute as doubles, whichever side the int is on
        ("input.amount * 100.0", {"amount": 5}, 500),
        ("100.0 * input.amount", {"amount": 5}, 500),
        ("input.amount + 0.5", {"amount": 5}, 5.5),
        ("input.amount - 0.5", {"amount": 5}, 4.5),
        ("input.amount / 2.0", {"amount": 5}, 2.5),
        ("input.amount / 2", {"amount": 5.0}, 2.5),
        # two ints stay ints, with CEL's integer division
        ("input.amount_minor * 2", {"amount_minor": 995}, 1990),
        ("input.amount_minor / 2", {"amount_minor": 995}, 497),
        ("input.amount_minor % 2", {"amount_minor": 995}, 1),
        # binary doubles are not decimals: money arithmetic belongs in minor units
        ("input.amount * 100.0", {"amount": 9.95}, 994.9999999999999),
        ("int(input.amount_minor) * 2", {"amount_minor": "995"}, 1990),
        # what cannot be evaluated
        ("input.amount % 2.0", {"amount": 5}, ERROR),
        ("input.amount + 1", {"amount": True}, ERROR),
        ("input.amount * 1.0", {"amount": False}, ERROR),
        ("input.amount + 1", {"amount": "5"}, ERROR),
    ],
)
def test_an_argument_computes_with_int_and_double_and_refuses_a_boolean(
    source: str, data: dict[str, Any], expected: Any
) -> None:
    result = value(source, {"input": data})
    if result != ERROR:
        result = normalise(result)
    assert result == expected
    assert type(result) is type(expected)


# -- digests: existing runs keep their names ---------------------------------------------------

#: Operation IDs and approval digests (for run ``run_0000000000000000``) of the refund, computed
#: before the numeric model changed; a change that moves any of them renames existing changes.
PINNED = {
    "T-90104": (
        "6ff5168501a12a8d67efcaff93b488e030f20cec7318ae704dee535878619304",
        "88ccc304e5b70410e4e4d241b584af8c0bd9a31e693f3db6b7dc17541bdc5931",
    ),
    "T-90603": (
        "73656f65cfef946835cd04f43db0fa16eb5519958c3d4ae0b8168729bdb1a1fd",
        "3f1c2f10cc987449c0be6fb28fa79e96c5e69dcb0f879ad887ec20baae7dcc70",
    ),
    "amount 5": (
        "51c89c03234942e85f69d6b5647ac26b652b368602b3f43642d23849b08d9ecc",
        "9b8b2030327b5180db4c8912cd7f3bd21812429fe1a5d04e9e7e73eeeec4864d",
    ),
    "amount 5.0": (
        "51c89c03234942e85f69d6b5647ac26b652b368602b3f43642d23849b08d9ecc",
        "9b8b2030327b5180db4c8912cd7f3bd21812429fe1a5d04e9e7e73eeeec4864d",
    ),
    "amount 100": (
        "0a47407c2fec35c56a34bb840f7d5594060934307dc7144862d6f2636b3837a4",
        "108640f5b4d83e0c25aa7e5331b3bb727c278b2fbc87a5e8006045fb616df8c0",
    ),
}


@pytest.mark.parametrize(
    ("there", "here", "found"),
    [
        ({"amount": 10.0, "note": "x"}, {"note": "x", "amount": 10}, None),
        ({"amount": 9.95}, {"amount": 19.9}, ("input/amount", "9.95", "19.9")),
        ({"gift": True}, {"gift": 1}, ("input/gift", "true", "1")),
        ({"amount": "10"}, {"amount": 10}, ("input/amount", '"10"', "10")),
        ({"a": 1, "c": 1}, {"a": 1, "b": 2, "c": 2}, ("input/b", "absent", "2")),
        ({"items": [1, 2]}, {"items": [1.0]}, ("input/items/1", "2", "absent")),
        ({"to": {"zip": "1"}}, {"to": ["1"]}, ("input/to", '{"zip":"1"}', '["1"]')),
    ],
)
def test_two_inputs_are_compared_as_normalised_json_and_the_first_difference_is_named(
    there: dict[str, Any], here: dict[str, Any], found: tuple[str, str, str] | None
) -> None:
    assert first_difference(there, here, "input") == found


@pytest.mark.parametrize("case", list(PINNED))
def test_the_operation_id_and_approval_digest_of_a_refund_do_not_change(case: str) -> None:
    spec = load_spec(REFUND)
    effect = spec.effects["request_refund"]
    row = next(r for r in spec.transitions if r.external_effect == "request_refund")
    if case.startswith("amount "):
        amount = json.loads(case.removeprefix("amount "))
        data = {**spec.examples["T-90104"].input, "amount": amount}
    else:
        data = dict(spec.examples[case].input)
    ctx = {"input": data, "receipts": {}, "business_key": data["ticket"], "run": {}}
    args = evaluate_args(effect, ctx)
    assert (
        operation_id(spec, row, effect, args, ctx),
        approval_digest(spec, "run_0000000000000000", "refund_approval", effect, args),
    ) == PINNED[case]


# -- E313: what can never be evaluated, from the declared types --------------------------------

SCHEMA = {
    "type": "object",
    "properties": {
        "amount": {"type": "number"},
        "count": {"type": "integer"},
        "price": {"type": "string"},
        "gift": {"type": "boolean"},
        "maybe": {"type": ["number", "null"]},
        "either": {"type": ["number", "integer"]},
        "free": {},
        "address": {"type": "object", "properties": {"zip": {"type": "string"}}},
    },
}


@pytest.mark.parametrize(
    "source",
    [
        "input.price <= 100.0",
        "input.price == 5",
        "input.gift > 0.0",
        "input.gift == 1",
        "input.amount == 'free'",
        "input.amount == true",
        "input.address.zip > 10000",
        "input.count < input.price",
        "input.gift == input.price",
        "(input.price + 1) > 2",
        "input.amount + 'x'",
        "input.amount * true",
        "input.price - input.price",
        "true + false",
        "size(input.price) == 'three'",
        "approval.role == 1",
        "run.attempts < '3'",
        "input.price == 'a' && input.gift > 0",
    ],
)
def test_a_comparison_or_sum_of_types_that_never_go_together_is_flagged(source: str) -> None:
    [problem] = mismatches(source, SCHEMA)
    assert problem.startswith(f"{source!r} can never be evaluated: in ")


@pytest.mark.parametrize(
    "source",
    [
        "input.amount <= 100.0 || approval.role == 'team_lead'",
        "input.count <= 100.0",
        "input.amount == 5",
        "input.either > 1.5",
        "double(input.price) <= 100.0",
        "int(input.price) * 2 > 10",
        "input.price + '-' + string(input.count)",
        "input.gift == true",
        "input.gift == input.gift",
        "input.maybe > 'x'",  # may be null: not certain
        "input.free > 1",  # not typed
        "signal.weight_kg > 0.0",  # signal data has no schema
        "receipts.hold_flight.price > 0.0",
        "input.price == null",
        "input.count in [1, 2]",
        "input.gift ? 1 : 'one'",
        "input.lines.all(x, x > 'a')",
        "input.amount <",  # does not compile: E305's finding, not this one's
    ],
)
def test_nothing_uncertain_is_flagged(source: str) -> None:
    assert mismatches(source, SCHEMA) == []


@pytest.mark.parametrize(
    ("source", "why"),
    [
        ("input.amount % 2 == 0", "input.amount is a number in input: (9.95 has a fraction)"),
        ("input.count % 2.5 == 0", "2.5 is a double; write an int"),
        ("double(input.count) % 2 == 0", "double(...) is a double; use int(...)"),
        ("input.count % input.amount", "declare it an integer in input:, or write int("),
    ],
)
def test_a_remainder_of_what_may_have_a_fraction_is_flagged(source: str, why: str) -> None:
    """``%`` takes two ints: 9.95 % 2, and even 10.0 % 2, cannot be evaluated at run time."""
    [problem] = mismatches(source, SCHEMA)
    assert problem.startswith(f"{source!r} cannot be evaluated for every input: '%' takes two ")
    assert why in problem
    with pytest.raises(ExpressionError, match="% takes two ints"):
        compile_expression("input.amount % 2 == 0").evaluate({"input": {"amount": 10.0}})


@pytest.mark.parametrize(
    "source", ["input.count % 2 == 0", "int(input.amount) % 2 == 0", "input.free % 2 == 0"]
)
def test_a_remainder_of_ints_is_not_flagged(source: str) -> None:
    assert mismatches(source, SCHEMA) == []


def test_e313_is_located_at_the_argument_that_computes_with_a_string() -> None:
    fixed = (EXAMPLES / "E313.fixed.yaml").read_text(encoding="utf-8")
    old = "args: {order: input.order, amount: input.amount}"
    assert old in fixed
    text = fixed.replace(old, 'args: {order: input.order, amount: "input.amount * 100"}')
    [found] = validate_text(text, "refund.yaml").diagnostics
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "input.amount * 100" in t)
    assert (found.code, found.line) == ("E313", line)
    assert "in '*', input.amount is a string in input: and 100 a number" in found.message


@pytest.mark.parametrize("name", ["refund.yaml", "booking.yaml", "returns.yaml"])
def test_the_shipped_specs_have_no_comparison_that_cannot_be_evaluated(name: str) -> None:
    found = validate_text((SPECS / name).read_text(encoding="utf-8"), name).diagnostics
    assert [d.format() for d in found if d.code == "E313"] == []


# -- end to end --------------------------------------------------------------------------------


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RATCHET_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RATCHET_DB", raising=False)
    return tmp_path


def test_an_agent_approves_a_refund_of_amount_5_written_as_a_json_int(
    capsys: pytest.CaptureFixture[str], home: Path
) -> None:
    refund = str(REFUND)
    assert run(capsys, "run", refund, "--example", "T-90104")[0] == 0  # the order, in the world
    five = home / "five.json"
    five.write_text(
        json.dumps(
            {
                "ticket": "T-5",
                "order": "LK-793996",
                "amount": 5,
                "currency": "CAD",
                "reason": "RFD-LATE",
            }
        ),
        encoding="utf-8",
    )
    assert run(capsys, "run", refund, "--input", str(five))[0] == 0
    code, out, err = run(capsys, "approve", "T-5", "--as", "agent-7", "--role", "agent", "--json")
    assert code == 0, err
    summary = json.loads(out)
    approved = "agent-7 approved request_refund LK-793996 5 CAD RFD-LATE"
    assert (summary["decision"]["message"], summary["state"]) == (approved, "refunded")


def test_a_boolean_in_signal_data_does_not_pass_a_numeric_guard(
    capsys: pytest.CaptureFixture[str], home: Path
) -> None:
    assert run(capsys, "run", str(PARCEL), "--example", "P-1")[0] == 0
    signal = ["signal", "P-1", "parcel_received", "--id", "evt-1", "--data"]
    code, _, err = run(capsys, *signal, '{"weight_kg": true}')
    assert code == 1
    assert "a boolean is never a number" in err
    assert "nothing changed" in err
    code, out, _ = run(capsys, *signal, '{"weight_kg": 2}', "--json")
    assert (code, json.loads(out)["state"]) == (0, "inspecting")


def test_the_input_schema_already_refuses_a_boolean_where_it_says_number(
    capsys: pytest.CaptureFixture[str], home: Path
) -> None:
    data = home / "true.json"
    data.write_text(
        '{"ticket": "T-6", "order": "LK-793996", "amount": true, "currency": "CAD",'
        ' "reason": "RFD-LATE"}',
        encoding="utf-8",
    )
    code, _, err = run(capsys, "run", str(REFUND), "--input", str(data))
    assert code == 1
    assert "amount: True is not of type 'number'" in err
