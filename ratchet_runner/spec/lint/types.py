"""Type checks of expressions (E313): a comparison or a sum whose two sides can never go together.

Only what is certain is flagged. A side's type is known when it is a literal (``100.0``,
``'CAD'``, ``true``), a field the input schema declares with one ``type`` (``string``,
``boolean``, ``number`` or ``integer``), a field of ``approval`` or ``run`` the runner always
fills with one type, a call whose result has one type (``size``, ``int``, ``double``,
``string``, ``has``, ``startsWith`` ...), or an operation on known sides. Anything else (signal
data, receipts, a field typed ``[number, "null"]`` or not typed at all) is unknown and never
flagged. Numbers are one type: ``int`` and ``double`` compare and compute together (the numeric
model, :mod:`~ratchet_runner.spec.numbers`); a boolean is never a number.

The registry of every check is :data:`ratchet_runner.spec.lint.CHECKS`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from lark import Token, Tree

from ...errors import Diagnostic, ExpressionError
from ..expressions import compile_expression
from ..model import Spec
from .support import at, col

NUMBER, STRING, BOOLEAN = "number", "string", "boolean"
_SCHEMA_KINDS = {"number": NUMBER, "integer": NUMBER, "string": STRING, "boolean": BOOLEAN}
_LITERAL_KINDS = {
    "INT_LIT": NUMBER,
    "UINT_LIT": NUMBER,
    "FLOAT_LIT": NUMBER,
    "STRING_LIT": STRING,
    "BOOL_LIT": BOOLEAN,
}
#: Fields the runner fills with one type whatever the run (see the engine's activation).
_FIELD_KINDS: dict[str, dict[str, str]] = {
    "approval": {"actor": STRING, "role": STRING, "name": STRING, "digest": STRING},
    "run": {
        "id": STRING,
        "state": STRING,
        "version": NUMBER,
        "spec_version": NUMBER,
        "attempts": NUMBER,
    },
}
_CALL_KINDS = {
    "size": NUMBER,
    "int": NUMBER,
    "uint": NUMBER,
    "double": NUMBER,
    "string": STRING,
    "bool": BOOLEAN,
    "has": BOOLEAN,
    "startsWith": BOOLEAN,
    "endsWith": BOOLEAN,
    "matches": BOOLEAN,
    "contains": BOOLEAN,
    "all": BOOLEAN,
    "exists": BOOLEAN,
    "exists_one": BOOLEAN,
}
_OPERATORS = {
    "relation_lt": "<",
    "relation_le": "<=",
    "relation_gt": ">",
    "relation_ge": ">=",
    "relation_eq": "==",
    "relation_ne": "!=",
    "addition_add": "+",
    "addition_sub": "-",
    "multiplication_mul": "*",
    "multiplication_div": "/",
    "multiplication_mod": "%",
}
_COMPARISONS = frozenset({"<", "<=", ">", ">=", "==", "!="})


def check_expression_types(spec: Spec) -> Iterator[Diagnostic]:
    """E313 for every expression of ``spec`` (business key, guards, arguments, deadlines)."""
    schema = spec.input_schema if isinstance(spec.input_schema, dict) else None
    places = [(spec.business_key, "/business_key")]
    places += [(row.guard, col(row, "guard")) for row in spec.transitions if row.guard is not None]
    for effect in spec.effects.values():
        places += [
            (value, f"{effect.pointer}/args/{name}")
            for name, value in effect.args.items()
            if isinstance(value, str)
        ]
    places += [
        (state.until, f"{state.pointer}/until")
        for state in spec.states.values()
        if state.until is not None
    ]
    for source, pointer in places:
        for problem in mismatches(source, schema):
            yield at(spec, pointer, "E313", problem)


def mismatches(source: str, input_schema: Mapping[str, Any] | None) -> list[str]:
    """What in ``source`` can never be evaluated, given the declared types (empty when nothing
    is certain, or when ``source`` does not compile: that is another check's finding)."""
    try:
        tree = compile_expression(source).tree
    except ExpressionError:
        return []
    order: list[Any] = []
    stack = [tree]
    while stack:  # iterative, like the expression walker: the tree may be deep
        node = stack.pop()
        if isinstance(node, Tree):
            order.append(node)
            stack.extend(reversed(node.children))
    kinds: dict[int, str | None] = {}
    found: list[tuple[int, str]] = []
    for index in range(len(order) - 1, -1, -1):  # children before their parents
        node = order[index]
        kind, problem = _kind(node, kinds, input_schema, source)
        kinds[id(node)] = kind
        if problem is not None:
            found.append((index, problem))
    return [problem for _, problem in sorted(found)]


def _kind(
    node: Tree[Any], kinds: Mapping[int, str | None], schema: Mapping[str, Any] | None, source: str
) -> tuple[str | None, str | None]:
    """The kind of ``node``'s value (None: unknown) and, for a binary operation whose sides can
    never go together, what is wrong."""
    children = node.children
    trees = [child for child in children if isinstance(child, Tree)]
    if node.data == "literal" and children and isinstance(children[0], Token):
        return _LITERAL_KINDS.get(children[0].type), None
    if node.data in ("member_dot", "ident"):
        return _path_kind(node, schema), None
    if node.data == "ident_arg" and children:
        return _CALL_KINDS.get(str(children[0])), None
    if node.data == "member_dot_arg" and len(children) >= 2:
        return _CALL_KINDS.get(str(children[1])), None
    if node.data in ("conditionalor", "conditionaland") and len(trees) == 2:
        return BOOLEAN, None
    if node.data == "expr" and len(trees) == 3:  # a ? b : c
        then, otherwise = kinds.get(id(trees[1])), kinds.get(id(trees[2]))
        return (then if then == otherwise else None), None
    if node.data == "unary" and len(trees) == 2:
        inner = kinds.get(id(trees[1]))
        if trees[0].data == "unary_not":
            return BOOLEAN, None
        return (NUMBER if inner == NUMBER else None), None
    if node.data in ("relation", "addition", "multiplication") and len(trees) == 2:
        op = trees[0]
        if op.data == "relation_in":
            return BOOLEAN, None
        left_node = op.children[0] if op.children else None
        symbol = _OPERATORS.get(op.data)
        left, right = kinds.get(id(left_node)), kinds.get(id(trees[1]))
        if symbol is None or left is None or right is None:
            return (BOOLEAN if node.data == "relation" else None), None
        result = _result(symbol, left, right)
        if result is None:
            return None, _explain(source, symbol, (left_node, left), (trees[1], right), schema)
        if symbol == "%":
            fraction = _fraction(left_node, schema) or _fraction(trees[1], schema)
            if fraction is not None:
                return None, (
                    f"{source!r} cannot be evaluated for every input: '%' takes two ints, and "
                    f"{fraction}"
                )
        return result, None
    if len(trees) == 1 and len(children) == 1:  # expr, member, primary, paren_expr, ...
        return kinds.get(id(trees[0])), None
    return None, None


def _result(symbol: str, left: str, right: str) -> str | None:
    """The kind of ``left symbol right``; None when the two can never go together."""
    if symbol in _COMPARISONS:
        return BOOLEAN if left == right else None
    if left == right == NUMBER:
        return NUMBER
    if symbol == "+" and left == right == STRING:
        return STRING
    return None


def _path_kind(node: Tree[Any], schema: Mapping[str, Any] | None) -> str | None:
    path = _name_path(node)
    if not path:
        return None
    head, rest = path[0], path[1:]
    if head in _FIELD_KINDS:
        return _FIELD_KINDS[head].get(rest[0]) if len(rest) == 1 else None
    if head != "input" or schema is None:
        return None
    declared = _declared(schema, rest)
    return None if declared is None else _SCHEMA_KINDS.get(declared)


def _declared(schema: Mapping[str, Any], path: list[str]) -> str | None:
    """The one JSON type the input schema declares at ``path`` (None: several, or none)."""
    rule: Any = schema
    for part in path:
        props = rule.get("properties") if isinstance(rule, Mapping) else None
        if not isinstance(props, Mapping) or part not in props:
            return None
        rule = props[part]
    declared = rule.get("type") if isinstance(rule, Mapping) else None
    if isinstance(declared, list) and len(declared) == 1:
        declared = declared[0]
    if isinstance(declared, list) and set(declared) == {"number", "integer"}:
        declared = "number"
    return declared if isinstance(declared, str) else None


def _name_path(node: Tree[Any]) -> list[str] | None:
    """``input.a.b`` as ``['input', 'a', 'b']``; None for anything but a plain name path."""
    suffix: list[str] = []
    while isinstance(node, Tree):
        if node.data == "ident" and node.children:
            return [str(node.children[0]), *reversed(suffix)]
        if node.data == "member_dot" and len(node.children) == 2:
            suffix.append(str(node.children[1]))
            node = node.children[0]
        elif len(node.children) == 1 and isinstance(node.children[0], Tree):
            node = node.children[0]
        else:
            return None
    return None


def _side(node: Any, kind: str, schema: Mapping[str, Any] | None) -> tuple[str, str]:
    """How a message names one side, and what it says that side is."""
    path = _name_path(node) if isinstance(node, Tree) else None
    if path and path[0] == "input" and schema is not None:
        declared = _declared(schema, path[1:]) or kind
        return ".".join(path), f"{_a(declared)} in input:"
    if path and path[0] in _FIELD_KINDS:
        return ".".join(path), f"always {_a(kind)}"
    literal = _single_literal(node)
    if literal is not None:
        return literal, _a(kind)
    return "the other side", _a(kind)


def _a(kind: str) -> str:
    return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"


def _fraction(node: Any, schema: Mapping[str, Any] | None) -> str | None:
    """How one side of ``%`` may hold a fraction (a double literal, ``double(...)``, or an input
    field declared ``number`` rather than ``integer``), and what to write instead; None when it
    cannot."""
    path = _name_path(node) if isinstance(node, Tree) else None
    if path and path[0] == "input" and schema is not None:
        if _declared(schema, path[1:]) != "number":
            return None
        name = ".".join(path)
        return (
            f"{name} is a number in input: (9.95 has a fraction); declare it an integer in "
            f"input:, or write int({name})"
        )
    inner = node
    while isinstance(inner, Tree) and len(inner.children) == 1:
        inner = inner.children[0]
    if isinstance(inner, Token) and inner.type == "FLOAT_LIT":
        return f"{inner} is a double; write an int"
    called = inner.children[0] if isinstance(inner, Tree) and inner.children else None
    if isinstance(inner, Tree) and inner.data == "ident_arg" and str(called) == "double":
        return "double(...) is a double; use int(...)"
    return None


def _single_literal(node: Any) -> str | None:
    """The text of ``node`` when it is one literal (``100.0``, ``'CAD'``), else None."""
    while isinstance(node, Tree) and node.data != "literal":
        if len(node.children) != 1 or not isinstance(node.children[0], Tree):
            return None
        node = node.children[0]
    if isinstance(node, Tree) and node.children:
        return str(node.children[0])
    return None


def _explain(
    source: str,
    symbol: str,
    left: tuple[Any, str],
    right: tuple[Any, str],
    schema: Mapping[str, Any] | None,
) -> str:
    (lname, lwhat), (rname, rwhat) = (_side(*left, schema), _side(*right, schema))
    if lname == rname == "the other side":
        lname, rname = "the left side", "the right side"
    elif lname == "the other side":
        lname = "the left side"
    elif rname == "the other side":
        rname = "the right side"
    kinds = {left[1], right[1]}
    if BOOLEAN in kinds and NUMBER in kinds:
        fix = "a boolean is never a number; compare a boolean with true or false"
    elif STRING in kinds and NUMBER in kinds:
        text = lname if left[1] == STRING else rname
        if text.startswith("input."):
            fix = (
                f"a string is never a number; declare {text} a number in input:, or convert "
                f"it: double({text})"
            )
        else:
            fix = "a string is never a number; convert it with double() or int()"
    elif kinds == {STRING, BOOLEAN}:
        fix = "a string is never a boolean"
    elif symbol == "+":
        fix = "+ adds two numbers or joins two strings"
    else:
        fix = f"{symbol} takes two numbers"
    return (
        f"{source!r} can never be evaluated: in {symbol!r}, {lname} is {lwhat} and {rname} "
        f"{rwhat}; {fix}"
    )
