"""Reading a histories file (``ratchet.run/1``): each line checked as a hostile file needs, every
bad line reported as ``FILE:LINE: CODE message`` with nothing read; what an export writes always
reads back; and the JSON Schema and its reference page say the same fields."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from ratchet_runner.errors import HistoriesInvalid, UsageError
from ratchet_runner.evolve import history
from ratchet_runner.evolve.history import (
    FORMAT,
    MAX_NESTING,
    dump_line,
    history_from_json,
    history_json,
    history_schema,
    is_sealed,
    read_histories,
    sealed_path,
)
from tests.conftest import ROOT

HISTORIES_MD = ROOT / "docs" / "reference" / "histories.md"
DIGEST = "5" * 64

#: One run, as an export writes it (a refund approved and made: the fields every line has).
LINE: dict[str, Any] = {
    "format": FORMAT,
    "run": {
        "id": "run_0123456789abcdef",
        "workflow": "refund",
        "business_key": "T-90104",
        "spec_digest": DIGEST,
        "state": "refunded",
        "status": "done",
        "version": 4,
        "input": {"ticket": "T-90104", "order": "LK-793996", "amount": 9.95},
        "context": {"receipts": {"request_refund": {"refund_id": "re_1"}}},
        "created_at": 1800000000.0,
        "updated_at": 1800000000.5,
    },
    "specs": [{"digest": DIGEST, "name": "refund", "spec_version": 1, "policy_version": "1"}],
    "events": [
        {"version": 1, "kind": "created", "at": 1800000000.0, "data": {"state": "proposed"}},
        {
            "version": 2,
            "kind": "moved",
            "at": 1800000000.0,
            "data": {"from": "proposed", "event": "approve", "to": "refunding"},
        },
    ],
    "operations": [
        {
            "operation_id": "6" * 64,
            "effect": "request_refund",
            "role": "forward",
            "args": {"order": "LK-793996", "amount": 9.95},
            "fingerprint": "f" * 64,
            "status": "done",
            "attempts": 1,
            "receipt": {"refund_id": "re_1"},
            "last_error": None,
            "compensates": None,
            "created_at": 1800000000.0,
            "updated_at": 1800000000.0,
        }
    ],
    "approvals": [
        {
            "name": "refund_approval",
            "effect": "request_refund",
            "digest": "a" * 64,
            "decision": "approved",
            "actor": "agent-7",
            "role": "agent",
            "reason": None,
            "policy_version": "1",
            "spec_digest": DIGEST,
            "decided_at": 1800000000.0,
            "expires_at": 1800086400.0,
            "consumed_at": 1800000000.0,
        }
    ],
    "timers": [
        {
            "state": "proposed",
            "event": "expired",
            "due_at": 1800259200.0,
            "created_at": 1800000000.0,
            "fired_at": 1800000000.0,
            "outcome": "cancelled",
        }
    ],
    "signals": [],
    "duplicates": [],
}


def line(**changes: Any) -> str:
    """:data:`LINE` as JSON, with ``changes`` at JSON-pointer-like paths (``run/status``)."""
    data = copy.deepcopy(LINE)
    for path, value in changes.items():
        *parents, last = path.split("__")
        target: Any = data
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        target[last] = value
    return json.dumps(data)


def problems(tmp_path: Path, *lines: str | bytes) -> list[str]:
    """What reading a file of ``lines`` reports, one ``FILE:LINE: CODE message`` each."""
    path = tmp_path / "golden.jsonl"
    path.write_bytes(
        b"\n".join(x if isinstance(x, bytes) else x.encode("utf-8") for x in lines) + b"\n"
    )
    with pytest.raises(HistoriesInvalid) as refused:
        read_histories(path, "golden.jsonl")
    assert refused.value.code == "R209"
    return refused.value.report()


def test_a_line_an_export_writes_reads_back_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "golden.jsonl"
    path.write_text(line() + "\n\n" + line(run__id="run_2") + "\n", encoding="utf-8")
    first, second = read_histories(path)
    assert history_json(first) == LINE
    assert (first.source, second.source) == (f"{path}:1", f"{path}:3")
    assert second.run.id == "run_2"
    assert json.loads(dump_line(first)) == LINE


def test_a_byte_order_mark_and_crlf_line_ends_are_read(tmp_path: Path) -> None:
    path = tmp_path / "golden.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + line().encode() + b"\r\n")
    (found,) = read_histories(path)
    assert found.run.business_key == "T-90104"


HOSTILE = [
    pytest.param(b"\xff\xfe{}", "V401 the line is not UTF-8 (byte 1)", id="not UTF-8"),
    pytest.param("not json", "V402 not JSON: Expecting value (column 1)", id="not JSON"),
    pytest.param("[1, 2]", "V402 a line is one JSON object, not list", id="not an object"),
    pytest.param(
        line(run__version=1).replace('"version": 1', '"version": NaN', 1),
        "V403 NaN is not a number JSON carries (no NaN or Infinity)",
        id="NaN",
    ),
    pytest.param(
        line().replace("9.95", "1e400", 1), "V403 1e400 is too large for a double", id="1e400"
    ),
    pytest.param(
        line().replace("9.95", "9" * 5000, 1),
        "V403 an integer of 5,000 digits is too long",
        id="a long integer",
    ),
    pytest.param(
        line().replace('"T-90104"', '"\\ud800"', 1),
        "V403 run/business_key: '\\ud800' is not valid Unicode (a lone surrogate)",
        id="a lone surrogate",
    ),
    pytest.param(
        '{"format": "' + FORMAT + '", "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
        f"V404 nested deeper than {MAX_NESTING} levels",
        id="nested past the parser",
    ),
    pytest.param(
        line(run__input={"deep": json.loads("[" * 150 + "]" * 150)}),
        f"V404 nested deeper than {MAX_NESTING} levels",
        id="nested past the limit",
    ),
    pytest.param(
        line(format="ratchet.run/2"),
        'V405 format "ratchet.run/2": this Ratchet reads ratchet.run/1',
        id="a newer format",
    ),
    pytest.param(
        json.dumps({k: v for k, v in LINE.items() if k != "format"}),
        "V405 no format: this Ratchet reads ratchet.run/1",
        id="no format",
    ),
    pytest.param(
        line(run__status="flying"),
        "V406 /run/status: 'flying' is not one of ['running', 'waiting', 'done', "
        "'needs_person', 'paused', 'cancelled']",
        id="an unknown status",
    ),
    pytest.param(
        line(events__1__kind=5), "V406 /events/1/kind: 5 is not of type 'string'", id="a number"
    ),
    pytest.param(
        line(events__1__data={"from": "proposed", "event": "approve"}),
        "V406 /events/1/data: 'to' is a required property",
        id="a move without its target",
    ),
    pytest.param(
        line(events__0__kind="moved"),
        "V406 /events/0/kind: 'created' was expected",
        id="a history that does not start with created",
    ),
    pytest.param(
        line(run__lease_token="x"),
        "V406 /run: Additional properties are not allowed ('lease_token' was unexpected)",
        id="an unknown field",
    ),
    pytest.param(
        line(approvals__0__spec_digest="7" * 64),
        "V409 /approvals/0/spec_digest: spec 777777777777 is not in specs",
        id="a spec version not listed",
    ),
]


@pytest.mark.parametrize(("raw", "said"), HOSTILE)
def test_a_hostile_line_is_refused_with_its_code_and_nothing_is_read(
    tmp_path: Path, raw: str | bytes, said: str
) -> None:
    assert problems(tmp_path, line(), raw) == [f"golden.jsonl:2: {said}"]


def test_every_bad_line_is_reported_not_only_the_first(tmp_path: Path) -> None:
    found = problems(tmp_path, "nope", line(), line(), line(format=1))
    assert found == [
        "golden.jsonl:1: V402 not JSON: Expecting value (column 1)",
        "golden.jsonl:3: V408 run run_0123456789abcdef is on line 2 too",
        "golden.jsonl:4: V405 format 1: this Ratchet reads ratchet.run/1",
    ]


def test_a_line_longer_than_a_reader_takes_is_refused_and_the_next_line_still_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(history, "MAX_LINE_BYTES", 4096)
    long = line(run__input={"note": "x" * 10_000})
    found = problems(tmp_path, long, "nope")
    assert found == [
        "golden.jsonl:1: V407 the line is 4,097 bytes long (at most 4,096)",
        "golden.jsonl:2: V402 not JSON: Expecting value (column 1)",
    ]


def test_reading_stops_after_fifty_lines_that_cannot_be_read(tmp_path: Path) -> None:
    found = problems(tmp_path, *(["nope"] * 60))
    assert len(found) == 51
    assert found[49] == "golden.jsonl:50: V402 not JSON: Expecting value (column 1)"
    assert found[50] == "golden.jsonl:51: V400 reading stopped: 50 lines before it cannot be read"


def test_a_file_that_cannot_be_read_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"cannot read .*missing\.jsonl: No such file"):
        read_histories(tmp_path / "missing.jsonl")


def test_an_export_never_writes_a_line_a_reader_refuses() -> None:
    deep: Any = []
    for _ in range(MAX_NESTING + 5):
        deep = [deep]
    too_deep = history_from_json(json.loads(line(run__input={"deep": deep})))
    with pytest.raises(
        HistoriesInvalid, match=r"run run_0123456789abcdef cannot be exported: V404"
    ):
        dump_line(too_deep)
    separators = history_from_json(json.loads(line(run__input={"note": "a\u2028b\u2029c"})))
    written = dump_line(separators)
    assert "\u2028" not in written
    assert "\\u2028" in written
    assert len(written.splitlines()) == 1
    assert json.loads(written)["run"]["input"]["note"] == "a\u2028b\u2029c"


def test_a_sealed_value_is_exactly_a_ciphertext_and_a_key_id() -> None:
    sealed = {"ciphertext": "AAEC", "key_id": "kms/1"}
    assert is_sealed(sealed)
    assert not is_sealed({"ciphertext": "AAEC", "key_id": "kms/1", "note": "x"})
    assert not is_sealed({"ciphertext": "", "key_id": "kms/1"})
    assert not is_sealed({"ciphertext": 1, "key_id": "kms/1"})
    assert sealed_path({"a": [1, {"b": sealed}]}, "input") == "input/a/1/b"
    assert sealed_path({"a": 1}) is None
    schema = history_schema()["definitions"]["sealed"]
    assert schema["required"] == ["ciphertext", "key_id"]
    assert schema["additionalProperties"] is False


def _schema_fields(node: Any, schema: dict[str, Any]) -> set[str]:
    """The names of every property the schema declares under ``node``."""
    found: set[str] = set()
    for name, value in node.get("properties", {}).items():
        found.add(name)
        ref = value.get("$ref", "")
        if ref.startswith("#/definitions/") and "properties" in schema["definitions"][ref[14:]]:
            found |= _schema_fields(schema["definitions"][ref[14:]], schema)
        if isinstance(value.get("items"), dict):
            ref = value["items"].get("$ref", "")
            if ref.startswith("#/definitions/"):
                found |= _schema_fields(schema["definitions"][ref[14:]], schema)
    return found


def test_the_reference_page_documents_every_field_of_the_schema_and_every_code() -> None:
    page = HISTORIES_MD.read_text(encoding="utf-8")
    schema = history_schema()
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", page, re.M))
    fields = _schema_fields(schema, schema) | _schema_fields(schema["definitions"]["event"], schema)
    assert fields - documented == set()
    from ratchet_runner.evolve.results import CODES

    for code in [*CODES, *(f"V40{n}" for n in range(10))]:
        assert re.search(rf"^\| `{code}` \|", page, re.M), code
