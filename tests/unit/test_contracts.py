"""An adapter's contract in the spec (``adapters.<name>.operations``): every effect is checked
against it (E309 to E312), a practice kind's contract against the practice world, and a spec
that breaks its contract never starts a run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ratchet_runner.adapters.base import Call, Done
from ratchet_runner.adapters.practice import PracticeWorld
from ratchet_runner.errors import Diagnostic
from ratchet_runner.spec.kinds import receipt_field
from ratchet_runner.spec.validate import load_spec, validate_text
from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parents[2]
SPECS = ROOT / "specs"
REFUND = (SPECS / "refund.yaml").read_text(encoding="utf-8")
CONTRACT = """    operations:  # the contract: what this workflow needs of the provider
      refund:
        args: [order, amount, currency, reason]
        receipt: refund_id
        lookup: lookup_refund
"""


def _refund(contract: str = CONTRACT, **replace: str) -> str:
    assert CONTRACT in REFUND
    text = REFUND.replace(CONTRACT, contract, 1)
    for old, new in replace.items():
        assert old in text, old
        text = text.replace(old, new, 1)
    return text


def _found(text: str) -> list[Diagnostic]:
    return [d for d in validate_text(text, "refund.yaml").diagnostics if d.severity == "error"]


def _line(text: str, fragment: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if fragment in line)


def test_the_shipped_specs_declare_contracts_and_validate_strictly() -> None:
    for name in ("refund", "returns", "booking"):
        spec = load_spec(SPECS / f"{name}.yaml")
        assert all(a.operations for a in spec.adapters.values()), name
        assert validate_text((SPECS / f"{name}.yaml").read_text(), name).ok(strict=True)


def test_an_operation_the_contract_lacks_is_e309_even_for_an_http_adapter() -> None:
    text = _refund(
        **{"    kind: payments\n": "    kind: http\n", "operation: refund": "operation: refnd"}
    )
    [found] = _found(text)
    assert (found.code, found.line) == ("E309", _line(text, "operation: refnd"))
    assert "the contract of adapter 'payments' declares no operation 'refnd'" in found.message
    assert "adapters.payments.operations" in found.message
    assert found.message.endswith("did you mean 'refund'?")


def test_a_required_argument_the_effect_does_not_pass_is_e310_at_its_arguments() -> None:
    text = _refund(CONTRACT.replace("reason]", "reason, customer]"))
    [found] = _found(text)
    assert (found.code, found.line) == ("E310", _line(text, "    args: {order: input.order"))
    assert "does not pass 'customer', which operation 'refund' requires" in found.message


def test_an_optional_argument_may_be_passed_or_left_out() -> None:
    optional = CONTRACT.replace(
        "args: [order, amount, currency, reason]",
        "args: [order, amount, currency]\n        optional_args: [reason, note]",
    )
    assert _found(_refund(optional)) == []


def test_a_practice_contract_naming_an_operation_the_practice_world_lacks_is_e309() -> None:
    text = _refund(CONTRACT.replace("      refund:\n", "      refunds:\n"))
    found = sorted((d.code, d.line) for d in _found(text))
    # the contract's operation, where it is declared, and the effect that calls one it lacks
    assert found == [("E309", _line(text, "      refunds:")), ("E309", _line(text, "operation:"))]


def test_a_practice_contract_naming_another_receipt_field_is_e311_at_the_contract() -> None:
    text = _refund(
        CONTRACT.replace("receipt: refund_id", "receipt: refund_ref"),
        **{"receipt: refund_id, retry_owner": "receipt: refund_ref, retry_owner"},
    )
    [found] = _found(text)
    assert (found.code, found.line) == ("E311", _line(text, "receipt: refund_ref"))
    assert "practice world's payments returns receipt field 'refund_id', not 'refund_ref'" in (
        found.message
    )


def test_a_lookup_the_contract_does_not_name_is_e312_and_says_how_to_declare_one() -> None:
    text = _refund(CONTRACT.replace("        lookup: lookup_refund\n", ""))
    [found] = _found(text)
    assert (found.code, found.line) == ("E312", _line(text, "reconcile: lookup_refund"))
    assert "add lookup: lookup_refund to adapters.payments.operations.refund" in found.message


def test_a_contract_with_no_operations_or_an_unknown_field_is_refused_by_the_schema() -> None:
    empty = _refund("    operations: {}\n")
    assert [d.code for d in _found(empty)] == ["E204"]
    typo = _refund(CONTRACT.replace("receipt:", "reciept:"))
    assert "E201" in [d.code for d in _found(typo)]


def test_run_refuses_a_spec_that_breaks_its_contract_and_nothing_changes_anywhere(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RATCHET_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RATCHET_BINDINGS", raising=False)
    monkeypatch.chdir(tmp_path)
    spec = tmp_path / "refund.yaml"
    spec.write_text(_refund(CONTRACT.replace("receipt: refund_id", "receipt: id")), "utf-8")
    code, out, err = run_cli(capsys, "run", str(spec), "--example", "T-90104", "--json")
    assert code == 1
    assert "E311" in err
    assert out == ""
    assert json.loads(run_cli(capsys, "runs", "--json")[1]) == []
    assert json.loads(run_cli(capsys, "effects", "--json")[1]) == {"changes": [], "calls": []}


# -- the practice world returns the receipt fields the validator checks contracts against ---------


def _example(spec: str, name: str) -> dict[str, Any]:
    examples: dict[str, Any] = load_spec(SPECS / f"{spec}.yaml").examples
    example = examples[name]
    return {"input": example.input, "world": example.world}


def _done(world: PracticeWorld, kind: str, op: str, args: dict[str, Any]) -> dict[str, Any]:
    outcome = world.adapter(kind).call(Call(op, f"op-{op}", args, effect=op))
    assert isinstance(outcome, Done), (op, outcome)
    field = receipt_field(kind, op)
    assert field is not None
    assert field in outcome.receipt, (op, outcome.receipt)
    return outcome.receipt


def test_every_fixed_practice_operation_returns_the_receipt_field_the_validator_expects(
    tmp_path: Path,
) -> None:
    refund = _example("refund", "T-90104")
    world = PracticeWorld(tmp_path / "refund.db")
    world.seed(refund["world"])
    paid = {k: refund["input"][k] for k in ("order", "amount", "currency", "reason")}
    _done(world, "payments", "refund", paid)
    _done(world, "payments", "charge", paid)

    returns = _example("returns", "T-90604")
    world = PracticeWorld(tmp_path / "returns.db")
    world.seed({k: v for k, v in returns["world"].items() if k != "faults"} | {"stock": {}})
    order = {"order": returns["input"]["order"], "sku": returns["input"]["sku"]}
    _done(world, "warehouse", "create_label", order | {"reason": "damaged"})
    world.seed({"stock": {order["sku"]: 1}})
    _done(world, "warehouse", "reship", order)

    trip = _example("booking", "happy")["input"]
    world = PracticeWorld(tmp_path / "booking.db")
    person = {"trip": trip["trip"], "traveller": trip["traveller"]}
    flight = _done(world, "travel", "hold_flight", person | {"flight": trip["flight"]})
    hotel = _done(world, "travel", "hold_hotel", person | {"hotel": trip["hotel"], "nights": 3})
    holds = {"flight_hold": flight["hold_id"], "hotel_hold": hotel["hold_id"]}
    _done(world, "travel", "confirm", {"trip": trip["trip"]} | holds)
    _done(world, "travel", "release", {"hold_id": flight["hold_id"]})
