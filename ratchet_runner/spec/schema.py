"""The published JSON Schema of a spec, and validation against it with located diagnostics."""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Iterator
from functools import cache
from importlib import resources
from typing import Any

import fastjsonschema
from jsonschema import Draft7Validator
from jsonschema.exceptions import ValidationError, best_match

from ..errors import Diagnostic
from .loader import Document, pointer_join

SCHEMA_RESOURCE = "spec.schema.json"


@cache
def spec_schema_text() -> str:
    """The schema exactly as shipped (what ``ratchet schema`` prints)."""
    return (
        resources.files(__package__ or "ratchet_runner.spec")
        .joinpath(SCHEMA_RESOURCE)
        .read_text(encoding="utf-8")
    )


@cache
def spec_schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(spec_schema_text())
    return schema


@cache
def _validator() -> Draft7Validator:
    return Draft7Validator(spec_schema())


def _pointer(path: Any) -> str:
    pointer = ""
    for part in path:
        pointer = pointer_join(pointer, part)
    return pointer


def _describe(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


_TYPE_WORDS = {
    "object": "a mapping",
    "array": "a list",
    "string": "a string",
    "integer": "a whole number",
    "number": "a number",
    "boolean": "true or false",
    "null": "null",
}


def _type_word(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if value is None:
        return "null"
    return "a string"


def _expected(types: Any) -> str:
    if isinstance(types, str):
        types = [types]
    return " or ".join(_TYPE_WORDS.get(t, t) for t in types)


def _subschema_properties(error: ValidationError) -> list[str]:
    props = error.schema.get("properties", {}) if isinstance(error.schema, dict) else {}
    return sorted(props)


def _misspelling(error: ValidationError, missing: str) -> str | None:
    """The unknown field of the same mapping that looks like ``missing`` misspelt, if any (its
    E201 says "did you mean ...?")."""
    schema = error.schema if isinstance(error.schema, dict) else {}
    if schema.get("additionalProperties") is not False or not isinstance(error.instance, dict):
        return None
    known = _subschema_properties(error)
    for key in error.instance:
        if key not in known and difflib.get_close_matches(str(key), known, n=1) == [missing]:
            return str(key)
    return None


#: The schema's pattern of a duration (``30s``, ``24h``).
DURATION = "^[0-9]+(ms|s|m|h|d)$"
_DURATION_WORDS = "a duration is a whole number and a unit, ms, s, m, h or d (e.g. 30s, 24h)"
#: An unknown field with a space or a quote in its name and no value: what YAML makes of the
#: rest of a value that an unquoted comma cut short inside ``{...}``.
_SPLIT_BY_COMMA = (
    "; a comma inside {...} ends a value: if this is the rest of the value before it, quote that "
    "whole value"
)


def _looks_cut(key: object) -> bool:
    """Whether a key is what a comma cut off the end of a value: a space or a quote in it."""
    return isinstance(key, str) and any(c.isspace() or c in "'\"()[]" for c in key)


def _cut_name(doc: Document, error: ValidationError) -> bool:
    """Whether the name a ``pattern`` error is about is a key with no value that a comma cut off
    the end of a value in ``{...}`` (its mapping is at the error's path)."""
    parent: Any = doc.data
    for step in error.absolute_path:
        try:
            parent = parent[step]
        except (KeyError, IndexError, TypeError):
            return False
    key = error.instance
    return isinstance(parent, dict) and key in parent and parent[key] is None and _looks_cut(key)


def _duration_hint(error: ValidationError, where: str) -> str:
    """For a number where a duration goes: what to write instead (else "")."""
    schema = error.schema if isinstance(error.schema, dict) else {}
    number = error.instance
    if schema.get("pattern") != DURATION or not isinstance(number, int | float):
        return ""
    if isinstance(number, bool):
        return ""
    if isinstance(number, int) or number.is_integer():
        written = f"{int(number)}s (or ms, m, h, d)"
    else:
        written = f"{round(number * 1000)}ms"
    return f"{where} is a number, and a duration goes here: write {written}; {_DURATION_WORDS}"


def _leaf(error: ValidationError) -> ValidationError:
    """For oneOf/anyOf failures, the alternative that came closest."""
    while error.context:
        error = best_match(error.context)
    return error


def _diagnostics(doc: Document, error: ValidationError) -> Iterator[Diagnostic]:
    error = _leaf(error) if error.validator in ("oneOf", "anyOf") else error
    pointer = _pointer(error.absolute_path)
    where = pointer or "the spec"
    kind = error.validator
    if kind == "additionalProperties" and isinstance(error.instance, dict):
        known = _subschema_properties(error)
        for key in sorted(set(error.instance) - set(known)):
            hint = difflib.get_close_matches(key, known, n=1)
            tail = f"; did you mean {hint[0]!r}?" if hint else f"; allowed: {', '.join(known)}"
            if error.instance[key] is None and _looks_cut(key):
                tail += _SPLIT_BY_COMMA
            yield doc.diagnostic(
                pointer_join(pointer, key),
                "E201",
                f"unknown field {key!r} in {where}{tail}",
                key=True,
            )
        return
    if kind == "required":
        missing = str(error.message).split("'")[1] if "'" in error.message else error.message
        typo = _misspelling(error, missing)
        if typo is None:
            yield doc.diagnostic(pointer, "E202", f"{where} needs the field {missing!r}")
        else:  # at the misspelt key, so that its E201 "did you mean ...?" comes first
            yield doc.diagnostic(
                pointer_join(pointer, typo),
                "E202",
                f"{where} needs the field {missing!r} (is {typo!r} a misspelling of it?)",
                key=True,
            )
        return
    if kind == "type":
        yield doc.diagnostic(
            pointer,
            "E203",
            _duration_hint(error, where)
            or f"{where} is {_type_word(error.instance)}; "
            f"expected {_expected(error.validator_value)}",
        )
        return
    if kind == "propertyNames":
        bad = error.instance
        yield doc.diagnostic(
            pointer_join(pointer, bad) if isinstance(bad, str) else pointer,
            "E204",
            f"the name {_describe(bad)} in {where} is not allowed: names are lowercase letters, "
            "digits and '_', starting with a letter",
            key=True,
        )
        return
    if kind == "enum":
        options = [str(v) for v in list(error.validator_value)]  # type: ignore[arg-type]
        close = (
            difflib.get_close_matches(error.instance, options, n=1)
            if isinstance(error.instance, str)
            else []
        )
        guess = f"; did you mean {close[0]!r}?" if close else ""
        message = f"{where} is {_describe(error.instance)}; allowed: {', '.join(options)}{guess}"
    elif kind == "pattern" and error.validator_value == DURATION:
        message = f"{where} is {_describe(error.instance)}; {_DURATION_WORDS}"
    elif kind == "pattern" and _cut_name(doc, error):
        message = f"{where} has a name {_describe(error.instance)} with no value{_SPLIT_BY_COMMA}"
    elif kind == "pattern":
        message = f"{where} is {_describe(error.instance)}; it must match {error.validator_value}"
    else:
        message = f"{where}: {error.message}"
    yield doc.diagnostic(pointer, "E204", message)


#: A document of more nodes than this is first checked by the compiled check (:func:`is_valid`);
#: a smaller one by :mod:`jsonschema` alone, unless the check is compiled already. Compiling it
#: costs about 75 ms once per process, more than jsonschema takes for a document of 10,000 nodes
#: (a shipped spec has about 300; the compiled check pays from about 20,000).
COMPILED_FROM_NODES = 10_000


@cache
def _fast_check() -> Callable[[Any], Any]:
    # use_default=False: a check, never a change; fastjsonschema otherwise writes the schema's
    # defaults into the document it checks, and what a spec leaves out would read as written
    return fastjsonschema.compile(spec_schema(), use_default=False)


def is_valid(data: Any) -> bool:
    """Whether ``data`` matches the schema: a compiled check, faster than walking it with
    :mod:`jsonschema` (which :func:`validate_document` uses to explain a failure) once compiled."""
    try:
        _fast_check()(data)
    except fastjsonschema.JsonSchemaException:
        return False
    return True


def validate_document(doc: Document) -> list[Diagnostic]:
    """Every place where ``doc`` breaks the spec schema."""
    compiled = _fast_check.cache_info().currsize > 0
    if (compiled or len(doc.marks) > COMPILED_FROM_NODES) and is_valid(doc.data):
        return []
    found: list[Diagnostic] = []
    for error in _validator().iter_errors(doc.data):
        found.extend(_diagnostics(doc, error))
    return found
