"""Binding files: where they are found, what a valid one is, and checking one against a spec.

* The search order: ``--bindings``, else ``RATCHET_BINDINGS``, else ``ratchet.toml`` beside the
  spec, else in the working directory.
* A file that is no binding is refused with every finding located in it (``B100``, ``B101``);
  its name is its stem unless it says one; its digest is the SHA-256 of its canonical JSON.
* Against a spec (``ratchet validate --bindings``): an unbound adapter (``B201``, at the spec's
  adapter), an unknown implementation (``B102``), a wrong setting (``B103``, at its line), a
  ``kind: noop`` adapter bound to a real implementation without the opt-in (``B202``), an
  operation, a lookup or a receipt field the implementation lacks (``B203``, ``B204``,
  ``B205``), each at its line of the binding file, as ``FILE:LINE:COL: CODE message``.
* docs/reference/bindings.md documents every code.
"""

from __future__ import annotations

import hashlib
import json
import re
import textwrap
import tomllib
from pathlib import Path

import pytest

from ratchet_runner.binding import implementations
from ratchet_runner.binding.check import admit, check
from ratchet_runner.binding.files import CODES, find, load, place_for
from ratchet_runner.errors import BindingInvalid, Diagnostic
from ratchet_runner.spec.validate import load_spec
from tests.conftest import ROOT, SPECS
from tests.conftest import run_cli as run

REFUND = SPECS / "refund.yaml"
WELCOME = ROOT / "examples" / "plugin-mailer" / "welcome.yaml"
BINDINGS_MD = ROOT / "docs" / "reference" / "bindings.md"

#: An HTTP binding of refund.yaml's payments adapter that covers it.
HTTP_PAYMENTS = """\
name = "staging"

[adapters.payments]
implementation = "http"
base_url = "https://payments.example/v1"
dedupe = true

[adapters.payments.operations.refund]
path = "/refunds"
receipt = ""
receipt_field = "refund_id"

[adapters.payments.lookups.lookup_refund]
by = "endpoint"
path = "/refunds/by-key/{operation_id}"
receipt = ""
receipt_field = "refund_id"
"""


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def _findings(spec_path: Path, binding_path: Path) -> list[Diagnostic]:
    binding = load(binding_path)
    return check(load_spec(spec_path), binding, place_for(binding, _no_world, {}))


def _no_world() -> None:
    raise AssertionError("a check opens no practice world")


# -- where it is found ------------------------------------------------------------------------


def test_the_search_order_is_the_option_then_the_variable_then_beside_the_spec_then_here(
    tmp_path: Path,
) -> None:
    spec_dir, cwd = tmp_path / "specs", tmp_path / "here"
    spec = _write(spec_dir / "refund.yaml", "name: x\n")
    beside = _write(spec_dir / "ratchet.toml", "")
    here = _write(cwd / "ratchet.toml", "")
    env = {"RATCHET_BINDINGS": str(tmp_path / "env.toml")}
    assert find("given.toml", spec=spec, environ=env, cwd=cwd) == Path("given.toml")
    assert find(None, spec=spec, environ=env, cwd=cwd) == tmp_path / "env.toml"
    assert find(None, spec=spec, environ={}, cwd=cwd) == beside
    assert find(None, spec=None, environ={}, cwd=cwd) == here
    beside.unlink()
    assert find(None, spec=spec, environ={}, cwd=cwd) == here
    here.unlink()
    assert find(None, spec=spec, environ={}, cwd=cwd) is None


# -- reading it -------------------------------------------------------------------------------


def test_a_binding_is_named_by_its_stem_unless_it_says_and_digested_as_canonical_json(
    tmp_path: Path,
) -> None:
    path = _write(tmp_path / "prod.toml", HTTP_PAYMENTS.replace('name = "staging"\n', ""))
    binding = load(path)
    assert binding.name == "prod"
    data = {**tomllib.loads(path.read_text(encoding="utf-8")), "name": "prod"}
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert binding.digest == hashlib.sha256(canonical.encode()).hexdigest()
    assert binding.stamp == {"name": "prod", "digest": binding.digest}
    named = load(_write(tmp_path / "other.toml", HTTP_PAYMENTS))
    assert named.name == "staging"
    assert named.digest != binding.digest
    assert load(_write(tmp_path / "copy.toml", HTTP_PAYMENTS)).digest == named.digest
    entry = named.entries["payments"]
    assert (entry.implementation, entry.line, entry.replaces_noop) == ("http", 3, False)
    assert "implementation" not in entry.settings
    assert entry.settings["base_url"] == "https://payments.example/v1"


def test_a_file_that_is_not_toml_is_located_where_the_parser_stopped(tmp_path: Path) -> None:
    path = _write(tmp_path / "b.toml", 'name = "x"\n[adapters.payments\nimplementation = "noop"\n')
    with pytest.raises(BindingInvalid) as refused:
        load(path)
    [found] = refused.value.diagnostics
    assert (found.code, found.line, found.file) == ("B100", 2, str(path))
    assert found.message.startswith("not TOML: ")
    with pytest.raises(BindingInvalid, match="B100 cannot read it"):
        load(tmp_path / "missing.toml")


def test_every_shape_problem_is_reported_at_its_line(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "b.toml",
        """\
        name = 7
        timeout = 3

        [adapters.payments]
        base_url = "https://payments.example"

        [adapters.mailer]
        implementation = "noop"
        replaces_noop = "yes"
        """,
    )
    with pytest.raises(BindingInvalid) as refused:
        load(path)
    found = [(d.line, d.code, d.message) for d in refused.value.diagnostics]
    assert found == [
        (1, "B101", "'name' must be a non-empty string"),
        (2, "B101", "unknown key 'timeout': a binding file holds 'name' and [adapters.NAME]"),
        (4, "B101", "adapter 'payments': 'implementation' (a string) is required"),
        (9, "B101", "adapter 'mailer': 'replaces_noop' must be true or false"),
    ]
    with pytest.raises(BindingInvalid, match="it binds no adapter"):
        load(_write(tmp_path / "empty.toml", 'name = "empty"\n'))


# -- checking it against a spec ---------------------------------------------------------------


def test_a_binding_that_covers_the_spec_has_no_findings(tmp_path: Path) -> None:
    assert _findings(REFUND, _write(tmp_path / "b.toml", HTTP_PAYMENTS)) == []
    assert _findings(REFUND, SPECS / "practice.toml") == []


def test_an_unbound_adapter_is_located_at_the_spec_and_a_near_name_is_suggested(
    tmp_path: Path,
) -> None:
    path = _write(
        tmp_path / "b.toml", HTTP_PAYMENTS.replace("adapters.payments", "adapters.paymnts")
    )
    [found] = _findings(REFUND, path)
    assert (found.file, found.line, found.column, found.code) == (str(REFUND), 26, 3, "B201")
    assert "did you mean [adapters.paymnts]?" in found.message


def test_an_implementation_nobody_provides_is_refused_naming_what_there_is(tmp_path: Path) -> None:
    path = _write(tmp_path / "b.toml", '[adapters.payments]\nimplementation = "stripe"\n')
    [found] = _findings(REFUND, path)
    assert (found.line, found.code) == (1, "B102")
    assert "built in are http, python, noop, practice" in found.message
    assert "ratchet.adapters" in found.message


def test_a_wrong_http_setting_is_located_at_its_own_line(tmp_path: Path) -> None:
    wrong = HTTP_PAYMENTS.replace('path = "/refunds"', 'path = "/refunds"\nmethod = "FETCH"')
    [found] = _findings(REFUND, _write(tmp_path / "b.toml", wrong))
    assert (found.line, found.code) == (10, "B103")
    assert "operations.refund" in found.message
    assert "FETCH" in found.message


def test_operations_lookups_and_receipts_the_binding_lacks_are_each_found(tmp_path: Path) -> None:
    text = HTTP_PAYMENTS.replace("operations.refund]", "operations.refund_v2]")
    text = text.replace("lookups.lookup_refund]", "lookups.lookup_v2]")
    found = sorted((d.code, d.line) for d in _findings(REFUND, _write(tmp_path / "b.toml", text)))
    assert found == [("B203", 8), ("B204", 13)]
    text = HTTP_PAYMENTS.replace('receipt_field = "refund_id"\n', 'receipt_field = "id"\n', 1)
    [receipt] = _findings(REFUND, _write(tmp_path / "c.toml", text))
    assert (receipt.code, receipt.line) == ("B205", 11)
    contract = f"but the spec's contract ({REFUND}:{_line_of(REFUND, '      refund:')}"
    assert f"returns receipt field 'id', {contract}" in receipt.message
    assert receipt.message.endswith("expects refund_id")


def _line_of(path: Path, text: str) -> int:
    return path.read_text(encoding="utf-8").splitlines().index(text) + 1


def _without_contract(tmp_path: Path) -> Path:
    """The refund spec with its adapter's contract taken out."""
    text = REFUND.read_text(encoding="utf-8")
    start = text.index("    operations:  # the contract")
    end = text.index("\neffects:")
    return _write(tmp_path / "refund.yaml", text[:start].rstrip() + "\n" + text[end:])


def test_without_a_contract_the_binding_is_checked_against_what_the_effects_use(
    tmp_path: Path,
) -> None:
    spec = _without_contract(tmp_path)
    assert "operations:" not in spec.read_text(encoding="utf-8").split("effects:")[0]
    text = HTTP_PAYMENTS.replace('receipt_field = "refund_id"\n', 'receipt_field = "id"\n', 1)
    [receipt] = _findings(spec, _write(tmp_path / "c.toml", text))
    assert "returns receipt field 'id', but effect 'request_refund'" in receipt.message


def test_every_operation_of_the_contract_is_checked_even_one_no_effect_calls_yet(
    tmp_path: Path,
) -> None:
    text = REFUND.read_text(encoding="utf-8").replace(
        "        lookup: lookup_refund\n",
        "        lookup: lookup_refund\n"
        "      charge: {args: [order, amount], receipt: charge_id, lookup: lookup_charge}\n",
        1,
    )
    spec = _write(tmp_path / "refund.yaml", text)
    found = _findings(spec, _write(tmp_path / "b.toml", HTTP_PAYMENTS))
    assert sorted(d.code for d in found) == ["B203", "B204"]
    assert all("the spec's contract" in d.message for d in found)
    assert any("does not implement operation 'charge'" in d.message for d in found)
    assert any("answers no lookup 'lookup_charge'" in d.message for d in found)


def test_a_lookup_without_a_receipt_field_is_checked_by_its_operations_field_alone(
    tmp_path: Path,
) -> None:
    """It returns the receipt field of the operation it looks up: no B205 of its own."""
    text = HTTP_PAYMENTS.removesuffix('receipt_field = "refund_id"\n')  # the lookup's, the last
    assert text.count("receipt_field") == 1
    binding = load(_write(tmp_path / "b.toml", text))
    spec = load_spec(REFUND)
    entry = binding.entries["payments"]
    offered = implementations.offer(
        "http", entry.settings, spec.adapters["payments"], place_for(binding, _no_world, {})
    )
    assert offered.lookups == {"lookup_refund"}
    assert (dict(offered.receipts), dict(offered.lookup_receipts)) == ({"refund": "refund_id"}, {})
    assert _findings(REFUND, tmp_path / "b.toml") == []
    wrong = text.replace('receipt_field = "refund_id"', 'receipt_field = "id"')
    [receipt] = _findings(REFUND, _write(tmp_path / "c.toml", wrong))
    assert (receipt.code, receipt.line) == ("B205", 11)
    assert "operation 'refund' returns receipt field 'id'" in receipt.message


def test_binding_a_noop_adapter_to_a_real_implementation_needs_the_opt_in(tmp_path: Path) -> None:
    real = '[adapters.mailer]\nimplementation = "python"\nfactory = "json:loads"\n'
    [found] = [d for d in _findings(WELCOME, _write(tmp_path / "b.toml", real)) if d.code == "B202"]
    assert found.line == 1
    assert "replaces_noop = true" in found.message
    opted = real + "replaces_noop = true\n"
    assert not [
        d for d in _findings(WELCOME, _write(tmp_path / "c.toml", opted)) if d.code == "B202"
    ]
    for harmless in ("noop", "practice"):
        bound = f'[adapters.mailer]\nimplementation = "{harmless}"\n'
        assert _findings(WELCOME, _write(tmp_path / f"{harmless}.toml", bound)) == []


def test_a_python_factory_that_cannot_be_imported_or_declares_nothing_is_b103(
    tmp_path: Path,
) -> None:
    for factory, says in (
        ("no_such_module_here:make", "cannot be imported"),
        ("json", "needs factory"),
        ("json:loads", "failed to make the adapter"),
    ):
        text = f'[adapters.payments]\nimplementation = "python"\nfactory = "{factory}"\n'
        [found] = _findings(REFUND, _write(tmp_path / "b.toml", text))
        assert (found.code, found.line) == ("B103", 1)
        assert says in found.message


#: A warehouse adapter of your own (a ``python`` factory) that declares what it implements;
#: ``DECLARED`` stands for what else its class declares (its receipt fields).
OWN_WAREHOUSE = """\
from ratchet_runner import Done, NotFound


class Warehouse:
    operations = ("create_label", "reship")
    lookups = ("lookup",)
    DECLARED

    def __init__(self, settings):
        pass

    def call(self, request):
        return Done({"label": "LBL-1"})

    def lookup(self, operation, operation_id, effect=""):
        return NotFound()
"""


def _own_warehouse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str, declared: str
) -> Path:
    """A binding of returns.yaml's warehouse to ``OWN_WAREHOUSE`` declaring ``declared``, in
    module ``module`` (a new name each time: an imported module stays imported) on
    ``sys.path``."""
    _write(tmp_path / f"{module}.py", OWN_WAREHOUSE.replace("DECLARED", declared or "pass"))
    monkeypatch.syspath_prepend(str(tmp_path))
    return _write(
        tmp_path / f"{module}.toml",
        f'[adapters.warehouse]\nimplementation = "python"\nfactory = "{module}:Warehouse"\n'
        "dedupe = false\ncommits_within = 3\n",
    )


def test_a_python_factory_declaring_another_receipt_field_than_the_spec_is_b205(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    returns = SPECS / "returns.yaml"
    wrong = _own_warehouse(
        tmp_path,
        monkeypatch,
        "wrong_wh",
        'receipts = {"create_label": "label", "reship": "reship_id"}',
    )
    code, out, err = run(capsys, "validate", str(returns), "--bindings", str(wrong))
    assert code == 1, err
    [line] = [line for line in out.splitlines() if " W207 " not in line]  # its lookup: below
    assert line.startswith(f"{wrong}:1:1: B205 adapter 'warehouse': operation 'create_label' ")
    assert "returns receipt field 'label', but the spec's contract (" in line
    assert line.endswith("expects label_id")
    right = _own_warehouse(
        tmp_path,
        monkeypatch,
        "right_wh",
        'receipts = {"create_label": "label_id", "reship": "reship_id"}',
    )
    assert run(capsys, "validate", str(returns), "--bindings", str(right))[0] == 0


def test_a_lookups_declared_receipt_field_is_checked_and_declaring_none_is_accepted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    returns = SPECS / "returns.yaml"
    for module, declared in (("silent_wh", ""), ("none_wh", "receipts = lookup_receipts = None")):
        found = _findings(returns, _own_warehouse(tmp_path, monkeypatch, module, declared))
        assert [d.code for d in found] == ["W207"]  # its lookup's sight, not its receipts
    binding = _own_warehouse(
        tmp_path, monkeypatch, "lookup_wh", 'lookup_receipts = {"lookup": "id"}'
    )
    found = [d for d in _findings(returns, binding) if d.severity == "error"]
    assert [d.code for d in found] == ["B205", "B205"]  # create_label's lookup, and reship's
    assert all("lookup 'lookup' returns receipt field 'id'" in d.message for d in found)


@pytest.mark.parametrize(
    ("number", "declared", "says"),
    [
        (1, 'receipts = ("label_id",)', "'receipts' must map each name in 'operations'"),
        (2, 'receipts = {"create_label": 3}', "not 'create_label' to 3"),
        (3, 'receipts = {"create_label": ""}', "not 'create_label' to ''"),
        (4, 'receipts = {"relabel": "label_id"}', "names 'relabel', which 'operations' does not"),
        (5, 'lookup_receipts = {"find": "id"}', "names 'find', which 'lookups' does not"),
        (6, 'lookup_receipts = "id"', "'lookup_receipts' must map each name in 'lookups'"),
    ],
)
def test_receipt_declarations_of_the_wrong_shape_are_b103_naming_what_is_wrong(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, number: int, declared: str, says: str
) -> None:
    module = f"shape_wh_{number}"
    [found] = _findings(
        SPECS / "returns.yaml", _own_warehouse(tmp_path, monkeypatch, module, declared)
    )
    assert (found.code, found.line) == ("B103", 1)
    assert f"binding 'warehouse': factory '{module}:Warehouse': " in found.message
    assert says in found.message


# -- on the command line ----------------------------------------------------------------------


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RATCHET_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RATCHET_BINDINGS", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_validate_reports_the_bindings_findings_located_with_the_specs(
    capsys: pytest.CaptureFixture[str], isolated: Path
) -> None:
    path = _write(isolated / "b.toml", HTTP_PAYMENTS.replace("lookups.lookup_refund", "lookups.x"))
    code, out, err = run(capsys, "validate", str(REFUND), "--bindings", str(path))
    assert code == 1
    assert re.fullmatch(rf"{re.escape(str(path))}:13:1: B204 adapter 'payments' .*\n", out)
    assert "1 error(s)" in err
    code, out, _ = run(capsys, "validate", str(REFUND), "--bindings", str(path), "--json")
    [diagnostic] = json.loads(out)["files"][0]["diagnostics"]
    assert (diagnostic["code"], diagnostic["file"], diagnostic["line"]) == ("B204", str(path), 13)


def test_validate_finds_the_binding_by_the_variable_and_beside_the_spec(
    capsys: pytest.CaptureFixture[str], isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = isolated / "specs" / "refund.yaml"
    _write(spec, REFUND.read_text(encoding="utf-8"))
    assert run(capsys, "validate", str(spec))[0] == 0  # no binding anywhere: the spec alone
    _write(isolated / "specs" / "ratchet.toml", '[adapters.payment]\nimplementation = "noop"\n')
    code, out, _ = run(capsys, "validate", str(spec))
    assert code == 1
    assert f"{spec}:26:3: B201 adapter 'payments' has no binding" in out
    monkeypatch.setenv("RATCHET_BINDINGS", str(SPECS / "practice.toml"))
    assert run(capsys, "validate", str(spec))[0] == 0


def test_a_broken_binding_file_is_reported_once_for_many_specs(
    capsys: pytest.CaptureFixture[str], isolated: Path
) -> None:
    path = _write(isolated / "b.toml", "name = \n")
    code, out, _ = run(
        capsys, "validate", str(REFUND), str(SPECS / "returns.yaml"), "--bindings", str(path)
    )
    assert code == 1
    assert out.count("B100") == 1


def test_the_reference_documents_every_binding_code() -> None:
    text = BINDINGS_MD.read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| `([BW]2?\d{2,3})` \|", text, re.M))
    assert documented == set(CODES)
    assert set(re.findall(r"\b(B\d{3})\b", text)) <= set(CODES)


def test_check_refuses_a_spec_its_binding_does_not_cover_before_any_case(
    capsys: pytest.CaptureFixture[str], isolated: Path
) -> None:
    path = _write(isolated / "b.toml", '[adapters.payments]\nimplementation = "practice"\n')
    code, out, err = run(capsys, "check", str(SPECS / "returns.yaml"), "--bindings", str(path))
    assert code == 1
    assert out == ""
    assert f"{SPECS / 'returns.yaml'}:25:3: B201 adapter 'warehouse' has no binding" in err


def test_even_a_practice_store_needs_a_binding_for_a_kind_the_practice_world_lacks(
    capsys: pytest.CaptureFixture[str], isolated: Path
) -> None:
    spec = _write(
        isolated / "refund_http.yaml",
        REFUND.read_text(encoding="utf-8").replace("    kind: payments\n", "    kind: http\n"),
    )
    code, _, err = run(capsys, "run", str(spec), "--example", "T-90104")
    assert code == 1
    assert (
        f"{spec}:26:3: B201 adapter 'payments' is of kind 'http', which the practice world" in err
    )
    code, out, _ = run(capsys, "runs", "--json")
    assert json.loads(out) == []


# -- what the provider does with a second request: B206, and whether a duplicate is seen: W207 --

#: returns.yaml's warehouse over HTTP; SEMANTICS and LOOKUP filled in by each test.
HTTP_WAREHOUSE = """\
[adapters.warehouse]
implementation = "http"
base_url = "https://warehouse.example/v1"
SEMANTICS

[adapters.warehouse.operations.create_label]
path = "/labels"
receipt_field = "label_id"

[adapters.warehouse.operations.reship]
path = "/reships"
receipt_field = "reship_id"

[adapters.warehouse.lookups.lookup]
LOOKUP
"""

ENDPOINT = 'by = "endpoint"\npath = "/by-key/{operation_id}"'
EVERY = (
    'by = "endpoint"\npath = "/changes/{operation_id}"\nreceipt = "/changes"\nevery_change = true'
)
LISTING = 'by = "listing"\npath = "/labels"\nitems = "/data"\nreference = "/key"\nsettle = 2'


def _warehouse(tmp_path: Path, semantics: str, lookup: str) -> Path:
    text = HTTP_WAREHOUSE.replace("SEMANTICS", semantics).replace("LOOKUP", lookup)
    return _write(tmp_path / "warehouse.toml", text)


def test_a_provider_nobody_says_deduplicates_or_not_is_b206_and_refused_before_a_run(
    tmp_path: Path,
) -> None:
    returns = SPECS / "returns.yaml"
    silent = _warehouse(tmp_path, "", ENDPOINT)
    [found] = _findings(returns, silent)
    assert (found.code, found.line) == ("B206", 1)
    assert "create_label, reship" in found.message
    assert "add dedupe = true" in found.message
    untimed = _warehouse(tmp_path, "dedupe = false", EVERY)
    [found] = _findings(returns, untimed)
    assert (found.code, found.line) == ("B206", 4)  # at its dedupe
    assert "add commits_within = SECONDS" in found.message
    with pytest.raises(BindingInvalid):
        admit(_findings(returns, untimed))


def test_an_endpoint_lookup_that_sees_one_change_of_a_provider_without_dedupe_is_w207(
    tmp_path: Path,
) -> None:
    """Should the provider commit a request later than it said, the change made twice is never
    seen by a lookup that answers with one change: a warning, at the lookup, which stops no
    run; a lookup that lists every change under the ID, or a listing, is not warned about, nor
    is an endpoint of a provider that deduplicates."""
    returns = SPECS / "returns.yaml"
    semantics = "dedupe = false\ncommits_within = 3"
    [found] = _findings(returns, _warehouse(tmp_path, semantics, ENDPOINT))
    assert (found.code, found.severity, found.line) == ("W207", "warning", 15)
    assert "lookup 'lookup', which create_label, reship reconcile with" in found.message
    assert "answers with one change at most" in found.message
    admit([found])  # a warning refuses nothing
    assert _findings(returns, _warehouse(tmp_path, semantics, EVERY)) == []
    assert _findings(returns, _warehouse(tmp_path, semantics, LISTING)) == []
    assert _findings(returns, _warehouse(tmp_path, "dedupe = true", ENDPOINT)) == []


def test_validate_shows_w207_and_fails_on_it_only_when_strict(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    returns = str(SPECS / "returns.yaml")
    path = str(_warehouse(tmp_path, "dedupe = false\ncommits_within = 3", ENDPOINT))
    code, out, _ = run(capsys, "validate", returns, "--bindings", path)
    assert code == 0
    assert f"{path}:15:1: W207 adapter 'warehouse'" in out
    code, _, _ = run(capsys, "validate", returns, "--bindings", path, "--strict")
    assert code == 1
