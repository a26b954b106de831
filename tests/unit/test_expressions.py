"""CEL expressions: compiled once, names checked, no way to Python."""

from __future__ import annotations

import pytest

from ratchet_runner.errors import ExpressionError
from ratchet_runner.spec.expressions import APPROVAL_FIELDS, Scope, check, compile_expression

SCOPE = Scope(
    {
        "input": {
            "properties": {
                "amount": {},
                "lines": {"type": "array"},
                "addr": {"type": "object", "properties": {"city": {}}},
            }
        },
        "approval": APPROVAL_FIELDS,
        "receipts": {"properties": {"hold_flight": {}}},
        "signal": None,
    }
)


def code(source: str) -> str:
    with pytest.raises(ExpressionError) as caught:
        check(source, SCOPE)
    return caught.value.lint_code


def test_a_guard_over_known_names_compiles_and_evaluates() -> None:
    expr = check("input.amount <= 100.0 || approval.role == 'team_lead'", SCOPE)
    assert expr.paths == (("input", "amount"), ("approval", "role"))
    assert expr.evaluate({"input": {"amount": 150.0}, "approval": {"role": "team_lead"}}) is True
    assert expr.evaluate({"input": {"amount": 150.0}, "approval": {"role": "agent"}}) is False


def test_compilation_is_cached_by_source_text() -> None:
    assert compile_expression("input.amount > 1.0") is compile_expression("input.amount > 1.0")


@pytest.mark.parametrize(
    "source",
    ["__import__('os').system('id')", "eval('1')", "open('/etc/passwd')", "getattr(input, 'x')"],
)
def test_python_builtins_are_not_functions(source: str) -> None:
    assert code(source) == "E307"


@pytest.mark.parametrize(
    "source",
    [
        "input.__class__",
        "os.system",
        "input.amont > 1",
        "approval.rol == 'x'",
        "receipts.hold_hotel.hold_id",
        "input.addr.town == 'x'",
    ],
)
def test_names_that_do_not_exist_are_refused(source: str) -> None:
    assert code(source) == "E306"


@pytest.mark.parametrize("source", ["input.amount <=", "(input.amount", "().__class__", "a ? b"])
def test_text_that_is_not_cel_does_not_compile(source: str) -> None:
    assert code(source) == "E305"


def test_macro_loop_variables_are_not_mistaken_for_free_names() -> None:
    expr = check("input.lines.all(l, l.qty > 0) && input.lines.exists(x, x.sku == 'A')", SCOPE)
    assert expr.paths == (("input", "lines"), ("input", "lines"))


@pytest.mark.parametrize(
    "source",
    [
        "input.lines.all(x, x.qty > 0) && x.qty > 1",
        "x > 0 || input.lines.exists(x, x.qty > 0)",
        "input.lines.all(x, input.lines.exists(y, y == x)) && y == 1",
    ],
)
def test_a_macro_loop_variable_outside_its_macro_is_an_unknown_name(source: str) -> None:
    assert code(source) == "E306"


def test_a_loop_variable_is_bound_inside_nested_macros() -> None:
    expr = check("input.lines.all(x, input.lines.exists(y, y == x))", SCOPE)
    assert expr.paths == (("input", "lines"), ("input", "lines"))


def test_fields_of_free_form_variables_are_not_checked() -> None:
    check("signal.note == 'ok' && has(receipts.hold_flight.hold_id)", SCOPE)


def test_standard_functions_are_allowed() -> None:
    check("size(input.lines) > 0 && string(input.amount).startsWith('1')", SCOPE)
