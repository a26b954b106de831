"""The numeric model of expressions: a JSON number is a number, and a boolean is never one.

JSON has one kind of number: ``5`` and ``5.0`` are the same amount, and which of the two a
client sends is an accident of its JSON library. CEL has three (``int``, ``uint``, ``double``),
and the CEL runtime compares only numbers of one kind, so ``input.amount <= 100.0`` could not
be evaluated for ``"amount": 5``. And Python's ``bool`` is an ``int``, so the runtime let
``true > 0.0`` hold. The operators here replace the runtime's for every expression:

- ``<``, ``<=``, ``>``, ``>=``, ``==``, ``!=`` and ``in`` compare an ``int``, a ``uint`` and a
  ``double`` by numeric value, exactly (no rounding: ``9007199254740993 == 9007199254740992.0``
  is false), as the CEL specification's cross-type numeric comparisons do;
- ``+``, ``-``, ``*``, ``/`` with an ``int`` on one side and a ``double`` on the other compute
  with two doubles (CEL itself refuses to mix them; a JSON number cannot say which it is). Two
  ints stay ints, with CEL's integer division and overflow error; ``%`` takes ints only;
- a boolean beside a number, in a comparison or in arithmetic, is an error, not an answer: a
  guard that cannot be evaluated does not hold, and says why.

Everything else (strings, bytes, lists, maps, null, timestamps, durations) keeps the runtime's
own operators, and an expression whose operands are of one kind gives what it gave before.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any

from celpy import celtypes
from celpy.evaluation import CELEvalError, base_functions

Operator = Callable[..., Any]


def _is_boolean(value: Any) -> bool:
    return isinstance(value, bool | celtypes.BoolType)


def _is_number(value: Any) -> bool:
    """An ``int``, ``uint`` or ``double`` of CEL (or plain Python), never a boolean."""
    return isinstance(value, int | float) and not _is_boolean(value)


def _plain(value: Any) -> int | float:
    return float(value) if isinstance(value, float) else int(value)


def _kind(value: Any) -> str:
    if _is_boolean(value):
        return "bool"
    if isinstance(value, celtypes.UintType):
        return "uint"
    if isinstance(value, float):
        return "double"
    if isinstance(value, int):
        return "int"
    name = type(value).__name__
    return name.removesuffix("Type").lower() if value is not None else "null"


def _refused(a: Any, symbol: str, b: Any, why: str) -> CELEvalError:
    return CELEvalError(f"no such overload: {_kind(a)} {symbol} {_kind(b)} ({why})", TypeError)


def _bool_beside_number(a: Any, b: Any) -> bool:
    return (_is_boolean(a) and _is_number(b)) or (_is_number(a) and _is_boolean(b))


_NOT_A_NUMBER = "a boolean is never a number"


def _or_refused(base: Operator, a: Any, symbol: str, b: Any) -> Any:
    """The runtime's own operator; where it has no overload, say so with the two CEL types."""
    try:
        return base(a, b)
    except TypeError:
        if _kind(a) == _kind(b):
            return _refused(a, symbol, b, f"{_kind(a)} has no {symbol}")
        return _refused(a, symbol, b, "values of these types do not go together")


def _failed(a: Any, b: Any) -> Any:
    """The error an operand already is (CEL carries errors as values), or None."""
    if isinstance(a, CELEvalError):
        return a
    return b if isinstance(b, CELEvalError) else None


def _comparison(name: str, symbol: str, compare: Callable[[Any, Any], bool]) -> Operator:
    base = base_functions[name]

    def apply(a: Any, b: Any) -> Any:
        if (failed := _failed(a, b)) is not None:
            return failed
        if _is_number(a) and _is_number(b):
            return celtypes.BoolType(compare(_plain(a), _plain(b)))
        if _bool_beside_number(a, b):
            return _refused(a, symbol, b, _NOT_A_NUMBER)
        return _or_refused(base, a, symbol, b)

    apply.__name__ = f"ratchet_{compare.__name__}"
    return apply


def _arithmetic(name: str, symbol: str, compute: Callable[[Any, Any], Any]) -> Operator:
    base = base_functions[name]

    def apply(a: Any, b: Any) -> Any:
        if (failed := _failed(a, b)) is not None:
            return failed
        if (_is_boolean(a) or _is_number(a)) and (_is_boolean(b) or _is_number(b)):
            if _is_boolean(a) or _is_boolean(b):
                return _refused(a, symbol, b, _NOT_A_NUMBER)
            if isinstance(a, float) != isinstance(b, float):  # an int (or uint) and a double
                if compute is operator.mod:
                    return _refused(a, symbol, b, "% takes two ints")
                return celtypes.DoubleType(compute(celtypes.DoubleType(a), celtypes.DoubleType(b)))
        return _or_refused(base, a, symbol, b)

    apply.__name__ = f"ratchet_{compute.__name__}"
    return apply


def _equal(a: Any, b: Any) -> bool:
    """``a == b`` in this model; raises TypeError where CEL has no such comparison."""
    if _is_number(a) and _is_number(b):
        return _plain(a) == _plain(b)
    if _bool_beside_number(a, b):
        raise TypeError(f"no such overload: {_kind(a)} == {_kind(b)} ({_NOT_A_NUMBER})")
    return bool(a == b)


def _contains(item: Any, container: Any) -> Any:
    """``item in container``, comparing as :func:`_equal` does; as the runtime's own ``in``, a
    match wins over a comparison that could not be made, and with no match that is the error."""
    if isinstance(item, CELEvalError):
        return item
    if isinstance(container, CELEvalError):
        return container
    if not isinstance(container, list | Mapping):
        return base_functions["_in_"](item, container)
    found: Any = celtypes.BoolType(False)
    for candidate in container:
        try:
            if _equal(candidate, item):
                return celtypes.BoolType(True)
        except TypeError as exc:
            found = CELEvalError(str(exc), TypeError)
    return found


#: The operators that replace the runtime's (passed to every program as its functions).
OPERATORS: dict[str, Operator] = {
    "_<_": _comparison("_<_", "<", operator.lt),
    "_<=_": _comparison("_<=_", "<=", operator.le),
    "_>_": _comparison("_>_", ">", operator.gt),
    "_>=_": _comparison("_>=_", ">=", operator.ge),
    "_==_": _comparison("_==_", "==", operator.eq),
    "_!=_": _comparison("_!=_", "!=", operator.ne),
    "_in_": _contains,
    "_+_": _arithmetic("_+_", "+", operator.add),
    "_-_": _arithmetic("_-_", "-", operator.sub),
    "_*_": _arithmetic("_*_", "*", operator.mul),
    "_/_": _arithmetic("_/_", "/", operator.truediv),
    "_%_": _arithmetic("_%_", "%", operator.mod),
}
