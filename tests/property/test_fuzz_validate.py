"""Validation never raises: mutated specs always come back as a Report of located diagnostics.

The two shipped specs are mutated at the data level (keys dropped, renamed and misspelt, values
retyped, rows duplicated and reordered, then dumped back to YAML) and at the byte level (random
bytes and YAML punctuation spliced in, slices deleted, lines duplicated, the text truncated).
Whatever comes out, :func:`ratchet_runner.spec.validate.validate_text` returns a :class:`Report`
whose every diagnostic has a stable code and a line and column inside the file.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ratchet_runner.spec import loader
from ratchet_runner.spec.codes import CODES
from ratchet_runner.spec.loader import load_text
from ratchet_runner.spec.validate import Report, validate_text

ROOT = Path(__file__).resolve().parents[2]
SPECS = {
    name: (ROOT / "specs" / f"{name}.yaml").read_text(encoding="utf-8")
    for name in ("refund", "booking")
}
DATA = {name: load_text(text).data for name, text in SPECS.items()}
FILE = "fuzzed.yaml"

PARSERS = [pytest.param(yaml.BaseLoader, id="pure-python")]
if hasattr(yaml, "CBaseLoader"):
    PARSERS.insert(0, pytest.param(yaml.CBaseLoader, id="libyaml"))

FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

#: Line breaks as YAML counts them (a mark's line can only be after one of these).
LINE_BREAKS = ("\n", "\r", "\x85", "\u2028", "\u2029")
#: Fragments that mean something to a YAML parser, spliced in at the byte level.
YAML_BITS = [
    b"&a ", b"*a", b"!!python/object/apply:os.system ['true'] ", b"!x ", b"<<: ", b"? ", b"- ",
    b": ", b"{", b"}", b"[", b"]", b",", b"'", b'"', b"#", b"|\n", b">-\n", b"\t", b"---\n",
    b"...\n", b"%YAML 1.1\n", b"\x00", b"\xff", b"\xef\xbb\xbf", b"\r", b"\xc2\x85", b"9" * 60,
    b"\\u0000", b"~", b"null", b"true", b"1e999", b"0x", b"0o9", b".inf", b"${", b"__import__",
]  # fmt: skip


def scalars() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(),
        st.text(max_size=12),
        st.sampled_from(["ok", "none", "all", "10s", "input.amount", "next", "step", "", "-"]),
    )


def values() -> st.SearchStrategy[Any]:
    """Any JSON-like value: what a retyped field becomes."""
    return st.recursive(
        scalars(),
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.dictionaries(st.text(max_size=8), inner, max_size=3),
        ),
        max_leaves=6,
    )


def misspell(key: str, data: st.DataObject) -> str:
    how = data.draw(st.sampled_from(["drop", "swap", "double", "case", "free", "known"]))
    if how == "free" or not key:
        return data.draw(st.text(max_size=10))
    if how == "known":
        return data.draw(st.sampled_from(["state", "event", "next_state", "guard", "kind", "args"]))
    i = data.draw(st.integers(0, len(key) - 1))
    if how == "drop":
        return key[:i] + key[i + 1 :]
    if how == "swap" and i + 1 < len(key):
        return key[:i] + key[i + 1] + key[i] + key[i + 2 :]
    if how == "case":
        return key.upper()
    return key[: i + 1] + key[i:]


def mutate_once(root: dict[str, Any], data: st.DataObject) -> None:
    """Walk down from the top to a random container and break one thing there."""
    node: Any = root
    while True:
        children = list(node) if isinstance(node, dict) else list(range(len(node)))
        deeper = [c for c in children if isinstance(node[c], dict | list) and node[c]]
        if not deeper or not data.draw(st.booleans()):
            break
        node = node[data.draw(st.sampled_from(deeper))]
    if not node:
        return
    where = data.draw(st.sampled_from(list(node) if isinstance(node, dict) else range(len(node))))
    action = data.draw(st.sampled_from(["drop", "rename", "retype", "duplicate", "swap"]))
    if action == "drop":
        del node[where]
    elif action == "rename" and isinstance(node, dict):
        node[misspell(where, data)] = node.pop(where)
    elif action == "duplicate" and isinstance(node, list):
        node.insert(where, copy.deepcopy(node[where]))
    elif action == "swap" and isinstance(node, list):
        other = data.draw(st.integers(0, len(node) - 1))
        node[where], node[other] = node[other], node[where]
    else:
        node[where] = data.draw(values())


EVENTS = ["ok", "refused", "exhausted", "unknown", "next", "due", "expired", "approve", "trigger"]
KEY_ITEMS = ["business_key", "effect", "args", "args.amount", "args.trip", "args.nope"]
KEY_ITEMS += ["input.ticket", "receipts.hold_flight.hold_id", "receipts.ghost.id", "now", "run.id"]
GUARDS = [
    "true", "input.amount > 1", "approval.role == 'team_lead'", "signal.x == 1", "nope(1)",
    "input.nope", "[1, 2].all(x, x > 0)", "size(input.trip) > 0", "input.amount <=", "1 / 0 == 1",
    "has(input.ticket)", "receipts.hold_flight.hold_id != ''", "run.attempts < 3", "'a' + 1",
]  # fmt: skip
INPUT_SCHEMAS = [
    {}, {"type": "object"}, {"type": "strnig"}, {"type": "object", "required": ["x"]},
    {"properties": {"trip": {"type": "string"}}}, {"type": "object", "properties": []},
]  # fmt: skip


REWIRINGS = [
    "cell", "effect", "drop_cell", "key", "guard", "compensation", "durable", "rows", "kind",
    "states", "start", "retry", "approval", "binds", "input", "sections",
]  # fmt: skip


def rewire(spec: dict[str, Any], data: st.DataObject) -> None:
    """Break one reference, column or policy while keeping the schema's shapes, so that the
    semantic checks (references, expressions, graph, effect safety) run on the result."""
    states = [*spec["states"], "limbo"]
    effects = [*spec.get("effects", {}), "ghost"]
    rows = spec["transitions"]
    row = data.draw(st.sampled_from(rows))
    pick = data.draw
    action = pick(st.sampled_from(REWIRINGS))
    if action == "cell":
        column = pick(st.sampled_from(["state", "event", "next_state"]))
        row[column] = pick(st.sampled_from(EVENTS if column == "event" else states))
    elif action == "effect":
        row["external_effect"] = pick(st.sampled_from([*effects, "none"]))
    elif action == "drop_cell" and len(row) > 3:
        del row[pick(st.sampled_from([c for c in row if c not in ("state", "event")]))]
    elif action == "key":
        row["idempotency_key"] = pick(st.lists(st.sampled_from(KEY_ITEMS), min_size=1, unique=True))
    elif action == "guard":
        row["guard"] = pick(st.sampled_from(GUARDS))
    elif action == "compensation":
        row["compensation"] = pick(st.sampled_from([*effects, "none", "none: why", "impossible"]))
    elif action == "durable":
        choices = ["none", "approval", ["pending"], ["pending", "receipt", "compensation"]]
        row["durable_write"] = pick(st.sampled_from(choices))
    elif action == "rows":
        if pick(st.booleans()):
            rows.append(copy.deepcopy(row))
        elif len(rows) > 1:
            rows.remove(row)
    elif action == "kind":
        state = spec["states"][pick(st.sampled_from(list(spec["states"])))]
        state["kind"] = pick(st.sampled_from(["step", "pause", "wait", "compensate", "success"]))
        if pick(st.booleans()):
            state["resumes_on"] = pick(st.lists(st.sampled_from(EVENTS), min_size=1, unique=True))
    elif action == "states" and len(spec["states"]) > 1:
        del spec["states"][pick(st.sampled_from(list(spec["states"])))]
    elif action == "start":
        spec["start"] = pick(st.sampled_from(states))
    elif action == "retry" and spec.get("effects"):
        effect = spec["effects"][pick(st.sampled_from(list(spec["effects"])))]
        effect["retry"] = {"max_attempts": pick(st.integers(1, 100))}
        for adapter in spec.get("adapters", {}).values():
            adapter["attempts"] = pick(st.integers(1, 100))
    elif action == "approval" and spec.get("effects"):
        effect = spec["effects"][pick(st.sampled_from(list(spec["effects"])))]
        effect["approval"] = pick(st.sampled_from([*spec.get("approvals", {}), "ghost"]))
    elif action == "binds" and spec.get("approvals"):
        approval = next(iter(spec["approvals"].values()))
        approval["binds"] = pick(st.sampled_from(["all", ["amount"], ["ghost", "order"]]))
        if pick(st.booleans()):
            approval.pop("expires_after", None)
    elif action == "input":
        spec["input"] = pick(st.sampled_from(INPUT_SCHEMAS))
    elif action == "sections":
        spec.pop(pick(st.sampled_from(["adapters", "effects", "approvals", "examples"])), None)


def mutate_bytes(raw: bytes, data: st.DataObject) -> bytes:
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(raw)))
        action = data.draw(st.sampled_from(["splice", "yaml", "delete", "line", "truncate"]))
        if action == "splice":
            raw = raw[:at] + data.draw(st.binary(min_size=1, max_size=8)) + raw[at:]
        elif action == "yaml":
            raw = raw[:at] + data.draw(st.sampled_from(YAML_BITS)) + raw[at:]
        elif action == "delete":
            raw = raw[:at] + raw[at + data.draw(st.integers(1, 40)) :]
        elif action == "line":
            start = raw.rfind(b"\n", 0, at) + 1
            end = raw.find(b"\n", at)
            line = raw[start : len(raw) if end < 0 else end + 1]
            raw = raw[:start] + line + line + raw[start:][len(line) :]
        else:
            raw = raw[:at]
    return raw


def assert_well_formed(report: Any, source: str | bytes) -> None:
    """The report's invariants, whatever the input was."""
    assert isinstance(report, Report)
    text = source.decode("utf-8", "replace") if isinstance(source, bytes) else source
    last_line = 1 + sum(text.count(b) for b in LINE_BREAKS)
    for diagnostic in report.diagnostics:
        assert diagnostic.file == FILE
        assert diagnostic.code in CODES, diagnostic
        assert 1 <= diagnostic.line <= last_line, diagnostic
        assert diagnostic.column >= 1, diagnostic
        assert diagnostic.message.strip(), diagnostic
    assert report.diagnostics == sorted(report.diagnostics)
    if not report.errors:
        assert report.spec is not None


@pytest.fixture(autouse=True, scope="module")
def _cel_environment_built_before_hypothesis_runs() -> None:
    """celpy raises the recursion limit when its environment is first built (on the first guard
    compiled); Hypothesis warns, an error here, if that happens inside one of its tests."""
    validate_text(SPECS["refund"], FILE)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_the_unmutated_specs_are_valid(name: str) -> None:
    report = validate_text(SPECS[name], FILE)
    assert report.ok(strict=True), report.diagnostics
    assert_well_formed(report, SPECS[name])


@FUZZ
@given(name=st.sampled_from(sorted(SPECS)), data=st.data())
def test_validation_never_raises_on_mutated_specs(name: str, data: st.DataObject) -> None:
    spec = copy.deepcopy(DATA[name])
    for _ in range(data.draw(st.integers(1, 4), label="mutations")):
        mutate_once(spec, data)
    text = yaml.safe_dump(spec, sort_keys=False, allow_unicode=True)

    report = validate_text(text, FILE)

    assert_well_formed(report, text)


@FUZZ
@pytest.mark.parametrize("parser", PARSERS)
@given(name=st.sampled_from(sorted(SPECS)), data=st.data())
def test_validation_never_raises_on_spliced_or_truncated_bytes(
    parser: Any, name: str, data: st.DataObject
) -> None:
    raw = mutate_bytes(SPECS[name].encode("utf-8"), data)
    # also as text: undecodable bytes become lone surrogates, which no UTF-8 file can hold
    source = data.draw(st.sampled_from([raw, raw.decode("utf-8", "surrogateescape")]))

    with mock.patch.object(loader, "YAML_PARSER", parser):
        report = validate_text(source, FILE)

    assert_well_formed(report, source)


@FUZZ
@given(name=st.sampled_from(sorted(SPECS)), data=st.data())
def test_validation_never_raises_when_data_and_bytes_are_both_mutated(
    name: str, data: st.DataObject
) -> None:
    spec = copy.deepcopy(DATA[name])
    mutate_once(spec, data)
    dumped = yaml.safe_dump(spec, sort_keys=False, allow_unicode=True, default_flow_style=None)
    raw = mutate_bytes(dumped.encode("utf-8"), data)

    report = validate_text(raw, FILE)

    assert_well_formed(report, raw)


@FUZZ
@given(name=st.sampled_from(sorted(SPECS)), data=st.data())
def test_validation_never_raises_on_specs_rewired_within_the_schema(
    name: str, data: st.DataObject
) -> None:
    spec = copy.deepcopy(DATA[name])
    for _ in range(data.draw(st.integers(1, 5), label="rewirings")):
        rewire(spec, data)
    text = yaml.safe_dump(spec, sort_keys=False, allow_unicode=True)

    report = validate_text(text, FILE)

    assert_well_formed(report, text)
