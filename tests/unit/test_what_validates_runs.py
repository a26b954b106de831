"""What validates runs: a spec ``ratchet validate`` accepts does not fail at run time for a reason
validation could have seen, and one it rejects is refused by ``ratchet run`` before a run exists.

* An example's ``world:`` fixture is checked with the spec: its keys, the shape of its orders,
  stock and faults, and each fault's kind (schema: E201 to E204, with a "did you mean") and
  effect (E302). ``ratchet run --example`` of such a spec is refused before the run is created,
  and the practice world is left as it was; the practice world still refuses a bad fixture
  itself (``WorldError``, before it writes anything), for callers that skip validation.
* A business key or an effect argument that reads an input field the input schema does not
  require is E314 (a ``has()`` test of the field in the same expression makes it safe; guards
  may read optional fields). At run time an input that lacks a field the business key or an
  argument reads is refused before the run is created, naming the field.
* An adapter kind nothing can run is refused by ``validate`` and by ``run`` before any run
  exists: a kind outside the known ones (E304, which says how a plugin is named), an ``http``
  adapter with no binding found (B201, as ``run`` says), an implementation no one provides in a
  binding (B102).
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from ratchet_runner.adapters import practice
from ratchet_runner.adapters.practice import PracticeWorld, services
from ratchet_runner.adapters.practice.faults import FAULT_KINDS
from ratchet_runner.adapters.practice.services import PRACTICE_SERVICES
from ratchet_runner.clock import FakeClock
from ratchet_runner.engine.runner import Runner
from ratchet_runner.errors import Diagnostic, RunError, WorldError
from ratchet_runner.spec import kinds
from ratchet_runner.spec.kinds import KINDS
from ratchet_runner.spec.schema import spec_schema
from ratchet_runner.spec.validate import load_spec_text, validate_text
from ratchet_runner.store.store import Store
from tests.conftest import SPECS
from tests.conftest import run_cli as run

REFUND = SPECS / "refund.yaml"
BOOKING = SPECS / "booking.yaml"
FAULT_LINE = "      faults: [{effect: request_refund, kind: timeout_after_write, calls: [1]}]\n"


def variant(base: Path, *edits: tuple[str, str], every: bool = False) -> str:
    """The spec at ``base`` with each ``old`` replaced by ``new``: where it first is, or
    (``every``) everywhere."""
    text = base.read_text(encoding="utf-8")
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, -1 if every else 1)
    return text


def found(text: str) -> list[Diagnostic]:
    return validate_text(text, "t.yaml").diagnostics


def place(text: str, needle: str, at: str | None = None) -> tuple[int, int]:
    """The line of the first line holding ``needle``, and the column of ``at`` in it."""
    for number, line in enumerate(text.splitlines(), 1):
        if needle in line:
            return number, line.index(at if at is not None else needle) + 1
    raise AssertionError(needle)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RATCHET_HOME", str(tmp_path / "home"))
    for name in ("RATCHET_DB", "RATCHET_BINDINGS", "RATCHET_NOW"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path / "home"


def world_rows(home: Path) -> dict[str, int]:
    """How many rows each table of the practice world holds (nothing: no practice world yet)."""
    path = home / "practice.db"
    if not path.exists():
        return {}
    with sqlite3.connect(path) as db:
        tables = [t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {t: db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in tables}


def refused_before_any_run(
    capsys: pytest.CaptureFixture[str], home: Path, spec: Path, *args: str
) -> str:
    """Run SPEC and see it refused with nothing made: exit 1, no run, the practice world as it
    was. Returns what it printed on stderr."""
    before = world_rows(home)
    code, _, err = run(capsys, "run", str(spec), *args)
    assert code == 1, err
    assert "internal error" not in err
    code, out, _ = run(capsys, "runs", "--json")
    assert (code, json.loads(out)) == (0, [])
    assert world_rows(home) == before
    assert not any(world_rows(home).values())
    return err


# -- 7. the examples' practice world ---------------------------------------------------------


def test_a_misspelt_fault_kind_is_a_located_e204_with_a_suggestion() -> None:
    text = variant(REFUND, ("kind: timeout_after_write", "kind: timeout_afer_write"))
    [diagnostic] = found(text)
    assert (diagnostic.code, diagnostic.line, diagnostic.column) == (
        "E204",
        *place(text, "timeout_afer_write"),
    )
    assert "did you mean 'timeout_after_write'?" in diagnostic.message


def test_the_schemas_fault_kinds_are_the_practice_worlds() -> None:
    example = spec_schema()["properties"]["examples"]["additionalProperties"]
    fault = example["properties"]["world"]["properties"]["faults"]["items"]
    assert tuple(fault["properties"]["kind"]["enum"]) == FAULT_KINDS


def test_a_misspelt_fixture_key_is_a_located_e201_with_a_suggestion() -> None:
    text = variant(REFUND, ("      orders: [{order: LK-793996", "      order: [{order: LK-793996"))
    [diagnostic] = found(text)
    assert (diagnostic.code, diagnostic.line, diagnostic.column) == (
        "E201",
        *place(text, "      order: [{", "order"),
    )
    assert diagnostic.message.endswith("did you mean 'orders'?")


def test_a_misspelt_field_of_an_order_or_a_fault_is_e201() -> None:
    text = variant(REFUND, ("paid: 34.90", "payd: 34.90"), ("calls: [1]}]", "call: [1]}]"))
    codes = sorted((d.code, d.line, d.column) for d in found(text) if d.code == "E201")
    assert codes == sorted([("E201", *place(text, "payd")), ("E201", *place(text, "call: [1]"))]), (
        found(text)
    )


@pytest.mark.parametrize(
    ("old", "new", "code"),
    [
        (FAULT_LINE, "      faults: 5\n", "E203"),
        ("calls: [1]}]", 'calls: "1"}]', "E203"),
        ("calls: [1]}]", "calls: [0]}]", "E204"),
        ("calls: [1]}]", "times: many}]", "E203"),
        ("kind: timeout_after_write, calls", "calls", "E202"),
        (
            "      orders: [{order: LK-793996,",
            "      stock: {CAN-5: lots}\n      orders: [{order: LK-793996,",
            "E203",
        ),
        ("paid: 34.90, ", "", "E202"),
    ],
)
def test_a_fixture_of_the_wrong_shape_is_a_schema_error_not_an_internal_one(
    old: str, new: str, code: str
) -> None:
    diagnostics = found(variant(REFUND, (old, new)))
    assert diagnostics, "accepted"
    assert {d.code for d in diagnostics} == {code}, [d.format() for d in diagnostics]


def test_a_fault_on_an_effect_that_does_not_exist_is_e302_with_a_suggestion() -> None:
    text = variant(REFUND, ("effect: request_refund, kind", "effect: request_refnd, kind"))
    [diagnostic] = found(text)
    assert (diagnostic.code, diagnostic.line, diagnostic.column) == (
        "E302",
        *place(text, "request_refnd"),
    )
    assert "example 'T-90104'" in diagnostic.message
    assert diagnostic.message.endswith("did you mean 'request_refund'?")


def test_a_fault_on_a_compensating_effect_is_accepted() -> None:
    assert not found(variant(BOOKING, ("effect: hold_hotel, kind", "effect: release_flight, kind")))


def test_run_refuses_an_example_with_a_misspelt_fault_kind_before_the_run_exists(
    capsys: pytest.CaptureFixture[str], home: Path, tmp_path: Path
) -> None:
    text = variant(REFUND, ("kind: timeout_after_write", "kind: timeout_afer_write"))
    spec = tmp_path / "refund.yaml"
    spec.write_text(text, encoding="utf-8")
    err = refused_before_any_run(capsys, home, spec, "--example", "T-90104")
    line, column = place(text, "timeout_afer_write")
    assert f"{spec}:{line}:{column}: E204 " in err
    assert "did you mean 'timeout_after_write'?" in err


def test_run_refuses_an_example_whose_fault_names_no_effect_before_the_run_exists(
    capsys: pytest.CaptureFixture[str], home: Path, tmp_path: Path
) -> None:
    text = variant(REFUND, ("effect: request_refund, kind", "effect: request_refnd, kind"))
    spec = tmp_path / "refund.yaml"
    spec.write_text(text, encoding="utf-8")
    err = refused_before_any_run(capsys, home, spec, "--example", "T-90104")
    assert f"{spec}:{place(text, 'request_refnd')[0]}:" in err
    assert "E302" in err


@pytest.mark.parametrize(
    "fixture",
    [
        {"faults": 5},
        {"faults": [{"effect": "e", "kind": "refuse", "calls": "1"}]},
        {"faults": [{"effect": "e", "kind": "refuse", "times": "many"}]},
        {"faults": [{"effect": "e", "kind": "refuse", "calls": [True]}]},
        {"orders": {"order": "LK-1"}},
        {"stock": {"CAN-5": "lots"}},
        {"orders": [{"order": "LK-1", "paid": 1.0, "currency": "CAD"}], "faults": [{"kind": "x"}]},
        {"order": []},
    ],
)
def test_the_practice_world_refuses_a_bad_fixture_itself_and_writes_nothing(
    tmp_path: Path, fixture: dict[str, Any]
) -> None:
    with pytest.raises(WorldError):
        practice.check_fixture(fixture)
    world = PracticeWorld(tmp_path / "practice.db")
    with pytest.raises(WorldError):
        world.seed(fixture)
    with sqlite3.connect(tmp_path / "practice.db") as db:
        for table in ("orders", "stock", "faults"):
            assert db.execute(f"SELECT COUNT(*) FROM {table}").fetchone() == (0,), table


def test_a_session_refuses_a_bad_fixture_before_any_run_is_started(home: Path) -> None:
    from ratchet_runner.session import Session

    with Session(None) as session, pytest.raises(WorldError):
        session.practice_setup({"faults": 5}, [])
    assert world_rows(home) == {}


def test_every_shipped_example_world_is_one_the_practice_world_takes() -> None:
    for path in sorted(SPECS.glob("*.yaml")):
        spec = load_spec_text(path.read_text(encoding="utf-8"), str(path))
        for example in spec.examples.values():
            practice.check_fixture(example.world)


# -- 8. fields the business key and the arguments read --------------------------------------


def test_a_business_key_that_reads_an_optional_field_is_e313_at_the_key() -> None:
    text = variant(
        REFUND,
        (
            "required: [ticket, order, amount, currency, reason]",
            "required: [order, amount, currency, reason]",
        ),
    )
    [diagnostic] = found(text)
    assert (diagnostic.code, diagnostic.line, diagnostic.column) == (
        "E314",
        *place(text, "business_key: input.ticket", "input.ticket"),
    )
    assert "the business key reads input.ticket" in diagnostic.message
    assert "add 'ticket' to input.required" in diagnostic.message


def test_an_argument_that_reads_an_optional_field_is_e313_at_the_argument() -> None:
    text = variant(
        BOOKING,
        (
            "required: [trip, traveller, flight, hotel, nights]",
            "required: [trip, traveller, flight, hotel]",
        ),
    )
    [diagnostic] = found(text)
    assert (diagnostic.code, diagnostic.line, diagnostic.column) == (
        "E314",
        *place(text, "nights: input.nights", "input.nights"),
    )
    assert "argument 'nights' of effect 'hold_hotel' reads input.nights" in diagnostic.message


def test_an_optional_field_tested_with_has_in_the_expression_is_not_e313() -> None:
    text = variant(
        BOOKING,
        (
            "required: [trip, traveller, flight, hotel, nights]",
            "required: [trip, traveller, flight, hotel]",
        ),
        ("nights: input.nights}", 'nights: "has(input.nights) ? input.nights : 1"}'),
    )
    assert found(text) == []


def test_a_guard_may_read_an_optional_field() -> None:
    text = variant(
        REFUND,
        (
            "    reason:   {type: string,",
            "    note:     {type: string}\n    reason:   {type: string,",
        ),
        (
            "guard: \"input.amount <= 100.0 || approval.role == 'team_lead'\"",
            "guard: \"!has(input.note) || input.note != 'hold'\"",
        ),
    )
    assert found(text) == []


def test_a_nested_optional_field_is_e313_naming_where_to_require_it() -> None:
    text = variant(
        REFUND,
        (
            "    reason:   {type: string, enum: [RFD-LATE, RFD-DOUBLE, RFD-DAMAGED]}\n",
            "    reason:   {type: object, required: [code], properties: "
            "{code: {type: string}, detail: {type: string}}}\n",
        ),
        ("reason: input.reason}", "reason: input.reason.detail}"),
        (
            "input: {ticket: T-90104, order: LK-793996, amount: 9.95, currency: CAD, "
            "reason: RFD-LATE}",
            "input: {ticket: T-90104, order: LK-793996, amount: 9.95, currency: CAD, "
            "reason: {code: LATE, detail: x}}",
        ),
        (
            "input: {ticket: T-90603, order: LK-512877, amount: 45.95, currency: CAD, "
            "reason: RFD-DOUBLE}",
            "input: {ticket: T-90603, order: LK-512877, amount: 45.95, currency: CAD, "
            "reason: {code: DOUBLE, detail: x}}",
        ),
    )
    [diagnostic] = found(text)
    assert diagnostic.code == "E314", diagnostic.format()
    assert "reads input.reason.detail" in diagnostic.message
    assert "add 'detail' to input.properties.reason.required" in diagnostic.message


def test_run_refuses_a_spec_whose_argument_reads_an_optional_field_before_the_run_exists(
    capsys: pytest.CaptureFixture[str], home: Path, tmp_path: Path
) -> None:
    """Today the run holds the flight, then stalls in needs_person on the hotel's arguments."""
    text = variant(
        BOOKING,
        (
            "required: [trip, traveller, flight, hotel, nights]",
            "required: [trip, traveller, flight, hotel]",
        ),
    )
    spec = tmp_path / "booking.yaml"
    spec.write_text(text, encoding="utf-8")
    code, out, _ = run(capsys, "validate", str(spec))
    assert code == 1
    assert f"{spec}:{':'.join(map(str, place(text, 'input.nights')))}: E314 " in out
    given = tmp_path / "input.json"
    given.write_text(
        json.dumps({"trip": "TR-1", "traveller": "Ada", "flight": "AC1", "hotel": "H1"}),
        encoding="utf-8",
    )
    err = refused_before_any_run(capsys, home, spec, "--input", str(given))
    assert "E314" in err


#: A spec whose effect reads a field of a free-form object: validation cannot tell whether it is
#: there, so the run checks the input before it is created.
FREE_FORM = (
    (
        "required: [trip, traveller, flight, hotel, nights]",
        "required: [trip, traveller, flight, hotel, stay]",
    ),
    (
        "    nights:    {type: integer, minimum: 1, maximum: 60}\n",
        "    stay:      {type: object}\n",
    ),
    ("nights: input.nights}", "nights: input.stay.nights}"),
    ("hotel: HARBOUR-INN, nights: 3}", "hotel: HARBOUR-INN, stay: {nights: 3}}"),
    ("hotel: FULL-HOUSE, nights: 3}", "hotel: FULL-HOUSE, stay: {nights: 3}}"),
)


def test_an_input_lacking_a_field_an_argument_reads_is_refused_before_the_run_exists(
    tmp_path: Path,
) -> None:
    text = variant(BOOKING, *FREE_FORM, every=True)
    spec = load_spec_text(text, "booking.yaml")
    world = PracticeWorld(tmp_path / "practice.db")
    store = Store(f"sqlite:///{tmp_path / 'ratchet.db'}")
    try:
        runner = Runner(store, lambda adapter: world.adapter(adapter.kind), FakeClock())
        given = {"trip": "TR-1", "traveller": "Ada", "flight": "AC1", "hotel": "H1", "stay": {}}
        with pytest.raises(RunError) as refused:
            runner.start(spec, text, given)
        message = str(refused.value)
        assert "'stay.nights'" in message
        assert "argument 'nights' of effect 'hold_hotel'" in message
        assert store.list_runs() == []
        assert world.calls() == []
        made, created = runner.start(spec, text, {**given, "stay": {"nights": 2}})
        assert created
        assert made.state == "holding_flight"
    finally:
        store.close()


def test_an_input_lacking_a_field_a_has_test_guards_is_not_refused(tmp_path: Path) -> None:
    text = variant(
        BOOKING,
        *FREE_FORM,
        ("nights: input.stay.nights}", 'nights: "has(input.stay.nights) ? input.stay.nights : 1"}'),
        every=True,
    )
    spec = load_spec_text(text, "booking.yaml")
    store = Store(f"sqlite:///{tmp_path / 'ratchet.db'}")
    try:
        world = PracticeWorld(tmp_path / "practice.db")
        runner = Runner(store, lambda adapter: world.adapter(adapter.kind), FakeClock())
        given = {"trip": "TR-1", "traveller": "Ada", "flight": "AC1", "hotel": "H1", "stay": {}}
        _, created = runner.start(spec, text, given)
        assert created
    finally:
        store.close()


# -- 9. adapter kinds nothing can run --------------------------------------------------------


def test_every_kind_a_spec_may_name_is_served_by_the_practice_world_or_needs_a_binding() -> None:
    assert set(KINDS) - set(PRACTICE_SERVICES) == {"http"}


def test_the_spec_languages_practice_operations_are_the_ones_the_practice_world_implements() -> (
    None
):
    """The validator's vocabulary (``spec/kinds.py``, which loads no adapter) and the practice
    world's handlers name the same operations, kind by kind, and the generic service's are the
    ones its adapter declares."""
    for kind in PRACTICE_SERVICES:
        assert kinds.operation_names(kind, None) == services.operation_names(kind, None), kind
    declared = {"operations": {"enrol": {"dedupe": True}, "page": {"dedupe": False}}}
    assert kinds.operation_names("service", declared) == services.operation_names(
        "service", declared
    )
    assert kinds.receipt_field("service", "enrol") == "enrol_id"


def test_an_unknown_kind_is_refused_by_validate_located_and_by_run_before_any_run(
    capsys: pytest.CaptureFixture[str], home: Path, tmp_path: Path
) -> None:
    text = variant(REFUND, ("    kind: payments\n", "    kind: smtp\n"))
    spec = tmp_path / "refund.yaml"
    spec.write_text(text, encoding="utf-8")
    code, out, _ = run(capsys, "validate", "--strict", str(spec))
    line, column = place(text, "kind: smtp", "smtp")
    assert code == 1
    assert out.startswith(f"{spec}:{line}:{column}: E304 unknown adapter kind 'smtp'")
    assert 'implementation = "smtp"' in out  # a plugin is named in a binding, not in the spec
    err = refused_before_any_run(capsys, home, spec, "--example", "T-90104")
    assert f"{spec}:{line}:{column}: E304 " in err


def test_a_kind_that_needs_a_binding_without_one_is_refused_by_validate_as_by_run(
    capsys: pytest.CaptureFixture[str], home: Path, tmp_path: Path
) -> None:
    text = variant(REFUND, ("    kind: payments\n", "    kind: http\n"))
    spec = tmp_path / "refund.yaml"
    spec.write_text(text, encoding="utf-8")
    code, out, _ = run(capsys, "validate", "--strict", str(spec))
    line = place(text, "  payments:")[0]
    assert code == 1, out
    assert re.match(
        rf"{re.escape(str(spec))}:{line}:3: B201 adapter 'payments' is of kind 'http'", out
    )
    err = refused_before_any_run(capsys, home, spec, "--example", "T-90104")
    assert f"{spec}:{line}:3: B201 " in err


def test_a_binding_naming_an_implementation_nobody_provides_is_refused_by_both(
    capsys: pytest.CaptureFixture[str], home: Path, tmp_path: Path
) -> None:
    binding = tmp_path / "b.toml"
    binding.write_text('name = "x"\n\n[adapters.payments]\nimplementation = "smtp"\n')
    code, out, _ = run(capsys, "validate", "--strict", str(REFUND), "--bindings", str(binding))
    assert code == 1
    assert out.startswith(f"{binding}:3:1: B102 adapter 'payments': no implementation 'smtp'")
    err = refused_before_any_run(
        capsys, home, REFUND, "--example", "T-90104", "--bindings", str(binding)
    )
    assert f"{binding}:3:1: B102 " in err
