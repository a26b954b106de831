"""CEL expressions: guards, argument mappings, business keys and deadlines.

Expressions are Common Expression Language (CEL) — side-effect free, not Turing-complete, and
without any path to Python: no ``eval``, no attribute walk to ``__globals__``. Each is compiled
once at load (:func:`compile_expression`, cached by its text) and its names are checked against
what exists at that place (:class:`Scope`): a name that does not exist, or a call to a function
CEL does not have, is a located spec error, found before any run.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import celpy
import celpy.celtypes
import celpy.evaluation
from celpy import celparser
from celpy.celparser import CELParseError
from lark import Lark, Token, Tree

from ..errors import ExpressionError
from .numbers import OPERATORS


def _cache_dir() -> Path | None:
    configured = os.environ.get("RATCHET_CACHE_DIR")
    if configured == "off":
        return None
    base = Path(configured or os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    folder = base if configured else base / "ratchet"
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError:
        return None
    return folder if os.access(folder, os.W_OK) else None


def _prebuild_parser(folder: Path) -> None:
    """Build celpy's LALR parser with Lark's grammar cache, in the user's own cache folder.

    Analysing the CEL grammar costs about 0.3 s per process; Lark can keep the analysis in a
    file that it checks against a digest of the grammar, its options and Lark's version, so a
    stale or foreign file is ignored. The options repeat celpy's own; if celpy ever stops
    building its parser this way, nothing is prebuilt and celpy builds it as usual.
    """
    grammar = (Path(celparser.__file__).parent / "cel.lark").read_text(encoding="utf-8")
    celparser.CELParser.CEL_PARSER = Lark(
        grammar,
        parser="lalr",
        start="expr",
        debug=True,
        g_regex_flags=re.M,
        lexer_callbacks={"IDENT": celparser.CELParser.ambiguous_literals},
        propagate_positions=True,
        maybe_placeholders=False,
        priority="invert",
        tree_class=celpy.InterpretedRunner.tree_node_class,
        cache=str(folder / f"cel-grammar-{_grammar_tag(grammar)}.lark"),
    )


def _grammar_tag(grammar: str) -> str:
    import hashlib

    return hashlib.sha256(grammar.encode()).hexdigest()[:16]


@lru_cache(maxsize=1)
def _env() -> celpy.Environment:
    """The CEL environment, built on first use."""
    folder = _cache_dir()
    if folder is not None and celparser.CELParser.CEL_PARSER is None:
        try:
            _prebuild_parser(folder)
        except Exception:  # any surprise: let celpy build its parser itself
            celparser.CELParser.CEL_PARSER = None
    return celpy.Environment()


#: Functions a CEL expression may call: the standard library that the runtime implements, and
#: the ``has`` macro.
FUNCTIONS = frozenset(name for name in celpy.evaluation.base_functions if name[0].isalpha()) | {
    "has",
    "dyn",
}
#: Methods that are macros binding a loop variable (``list.all(x, x > 0)``).
MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})

#: Fields of the ``approval`` variable in a guard.
APPROVAL_FIELDS = frozenset({"actor", "role", "decided_at", "expires_at", "digest", "name"})
#: Fields of the ``run`` variable.
RUN_FIELDS = frozenset(
    {"id", "state", "version", "started_at", "spec_version", "policy_version", "attempts"}
)


@dataclass(frozen=True)
class Expression:
    """A compiled CEL expression and the dotted names it reads."""

    source: str
    tree: Any = field(repr=False, compare=False)
    paths: tuple[tuple[str, ...], ...] = ()
    functions: tuple[str, ...] = ()
    lookup: tuple[str, ...] | None = None  # set when the whole expression is one name path

    @property
    def names(self) -> frozenset[str]:
        """The top-level variables the expression reads (only these are converted to CEL)."""
        return frozenset(path[0] for path in self.paths)

    def evaluate(self, activation: Mapping[str, Any]) -> Any:
        """Evaluate over plain JSON values; returns plain Python values."""
        if self.lookup is not None:  # a plain name path: read it, as CEL would, without CEL
            value: Any = activation
            for part in self.lookup:
                if not isinstance(value, Mapping) or part not in value:
                    raise ExpressionError(
                        "E305", f"{self.source!r} cannot be evaluated: no such member {part!r}"
                    )
                value = value[part]
            return _to_json(value)
        program = _program(self.source)
        to_cel = celpy.json_to_cel  # type: ignore[attr-defined]
        try:
            result = program.evaluate(
                {name: to_cel(activation[name]) for name in self.names if name in activation}
            )
        except Exception as exc:  # celpy raises CELEvalError, and others on odd values
            message = f"{self.source!r} cannot be evaluated: {_brief(exc)}"
            raise ExpressionError("E305", message) from None
        if isinstance(result, Exception):
            raise ExpressionError("E305", f"{self.source!r} cannot be evaluated: {_brief(result)}")
        return _to_json(result)


def _brief(exc: BaseException) -> str:
    text = str(exc.args[0]) if exc.args else str(exc)
    return text.split(" (in activation")[0][:200]


def _to_json(value: Any) -> Any:
    if isinstance(value, bool | celpy.celtypes.BoolType):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): _to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_to_json(v) for v in value]
    if value is None or type(value).__name__ == "NullType":
        return None
    return str(value)


def _dotted(node: Any) -> list[str] | None:
    """``input.a.b`` as ``['input', 'a', 'b']``; None when the node is not a plain name path.
    Iterative, like :func:`_walk`: a guard of a thousand parentheses must not overflow."""
    suffix: list[str] = []
    while isinstance(node, Tree):
        if node.data == "ident" and node.children:
            return [str(node.children[0]), *reversed(suffix)]
        if len(node.children) == 1 and isinstance(node.children[0], Tree):
            node = node.children[0]
        elif node.data == "member_dot" and len(node.children) == 2:
            suffix.append(str(node.children[1]))
            node = node.children[0]
        else:
            return None
    return None


def _walk(root: Any) -> Iterator[tuple[str, tuple[str, ...]]]:
    """Yield ``("path", parts)`` for every free name path and ``("call", (name,))`` for calls,
    in source order, without recursion. A macro's loop variable (``x`` in
    ``list.all(x, x > 0)``) is bound only inside that macro's arguments: the same name anywhere
    else in the expression is a free name, checked like any other."""
    stack: list[tuple[Any, frozenset[str]]] = [(root, frozenset())]
    while stack:
        node, bound = stack.pop()
        if not isinstance(node, Tree):
            continue
        if node.data == "member_dot":
            path = _dotted(node)
            if path is not None:
                if path[0] not in bound:
                    yield "path", tuple(path)
                continue
        elif node.data == "ident" and node.children:
            if str(node.children[0]) not in bound:
                yield "path", (str(node.children[0]),)
            continue
        elif node.data == "ident_arg" and node.children:
            yield "call", (str(node.children[0]),)
        elif node.data == "member_dot_arg" and len(node.children) >= 2:
            method = str(node.children[1])
            yield "call", (method,)
            if method in MACROS and len(node.children) > 2 and isinstance(node.children[2], Tree):
                args = node.children[2].children
                loop = _dotted(args[0]) if args else None
                if loop is not None and len(loop) == 1:
                    inner = bound | {loop[0]}
                    stack.extend((arg, inner) for arg in reversed(args[1:]))
                    stack.append((node.children[0], bound))
                    continue
        stack.extend(
            (child, bound) for child in reversed(node.children) if not isinstance(child, Token)
        )


#: Deepest parse tree accepted (about ten levels per parenthesis): evaluation recurses per level.
MAX_TREE_DEPTH = 300


def _depth(root: Any) -> int:
    deepest, stack = 0, [(root, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(node, Tree):
            stack.extend((child, depth + 1) for child in node.children)
    return deepest


@lru_cache(maxsize=4096)
def _program(source: str) -> Any:
    """The runnable form of a compiled expression (building it costs more than running it), with
    the operators of the numeric model (:mod:`~ratchet_runner.spec.numbers`)."""
    return _env().program(compile_expression(source).tree, functions=OPERATORS)


@lru_cache(maxsize=4096)
def compile_expression(source: str) -> Expression:
    """Compile ``source``; raises :class:`ExpressionError` (E305) when it does not parse."""
    try:
        tree = _env().compile(source)
    except CELParseError as exc:
        column = getattr(exc, "column", None)
        first = str(exc).splitlines()[0] if str(exc) else "syntax error"
        where = f" at character {column}" if column else ""
        raise ExpressionError(
            "E305", f"{source!r} is not a valid CEL expression{where}: {first.strip()}", column
        ) from None
    except Exception as exc:  # celpy raises a few other types on odd input
        raise ExpressionError("E305", f"{source!r} is not a valid CEL expression: {exc}") from None
    if _depth(tree) > MAX_TREE_DEPTH:
        raise ExpressionError(
            "E305",
            f"{source[:60]!r}... nests too deeply to evaluate safely (more than about "
            f"{MAX_TREE_DEPTH // 10} levels of parentheses); simplify it",
        )
    found = list(_walk(tree))
    paths = tuple(parts for kind, parts in found if kind == "path")
    calls = tuple(parts[0] for kind, parts in found if kind == "call")
    whole = _dotted(tree)
    return Expression(source, tree, paths, calls, tuple(whole) if whole else None)


def _did_you_mean(walked: str, part: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(part, [str(k) for k in known], n=1)
    return f"did you mean {walked}.{close[0]}? " if close else ""


@dataclass(frozen=True)
class Scope:
    """What an expression at one place may name.

    ``variables`` maps each top-level name to how its fields are checked: ``None`` (any field),
    a set of allowed field names, or a JSON Schema whose ``properties`` list the fields.
    """

    variables: Mapping[str, Any]

    def check(self, expression: Expression) -> None:
        for name in expression.functions:
            if name not in FUNCTIONS and name not in MACROS:
                raise ExpressionError(
                    "E307", f"{expression.source!r} calls {name}(), which is not a CEL function"
                )
        for path in expression.paths:
            self._check_path(expression.source, path)

    def _check_path(self, source: str, path: tuple[str, ...]) -> None:
        head = path[0]
        if head not in self.variables:
            known = ", ".join(sorted(self.variables))
            raise ExpressionError(
                "E306", f"{source!r} names {head!r}, which does not exist here (known: {known})"
            )
        rule = self.variables[head]
        walked = head
        for part in path[1:]:
            if rule is None:
                return
            if isinstance(rule, dict):
                props = rule.get("properties")
                if not isinstance(props, dict):
                    return
                if part not in props:
                    fields = ", ".join(sorted(props)) or "none"
                    raise ExpressionError(
                        "E306",
                        f"{source!r} names {walked}.{part}, which is not a declared field "
                        f"({_did_you_mean(walked, part, props)}fields: {fields})",
                    )
                rule = props[part] if isinstance(props[part], dict) else None
            else:
                if part not in rule:
                    fields = ", ".join(sorted(rule))
                    raise ExpressionError(
                        "E306",
                        f"{source!r} names {walked}.{part}, which does not exist "
                        f"({_did_you_mean(walked, part, rule)}known: {fields})",
                    )
                rule = None
            walked = f"{walked}.{part}"


def check(source: str, scope: Scope) -> Expression:
    """Compile ``source`` and check its names against ``scope``."""
    expression = compile_expression(source)
    scope.check(expression)
    return expression
