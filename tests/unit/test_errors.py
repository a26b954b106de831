"""Every user-facing failure is a coded RatchetError, defined in ``ratchet_runner.errors``.

* The tree drawn in the module's docstring is the real class tree, codes included; the one in
  ``docs/reference/errors.md`` is the same; its table documents every code and no other, with
  the exit status the CLI really gives.
* No module of the package defines an exception class outside the errors module (an allow-list
  names the exceptions, with the reason, that are no failure a user sees).
* Bad input that used to reach users as "internal error ... please report it" is a coded error:
  a guard or a business key that cannot be evaluated; a practice world fixture it cannot use is
  a located spec error.
"""

from __future__ import annotations

import ast
import doctest
import re
from pathlib import Path

import click
import pytest

from ratchet_runner import errors
from ratchet_runner.errors import (
    BindingInvalid,
    Diagnostic,
    ExpressionError,
    GraphvizNotFound,
    HistoriesInvalid,
    InputConflict,
    MappingInvalid,
    RatchetError,
    SpecError,
    StepFailed,
)
from ratchet_runner.evolve.history import LineProblem
from tests.conftest import ROOT
from tests.conftest import run_cli as run

ERRORS_MD = ROOT / "docs" / "reference" / "errors.md"
REFUND = ROOT / "specs" / "refund.yaml"

#: Exception classes defined outside the errors module, each with the reason it is no failure
#: a user ever sees.
NOT_USER_FACING = {
    ("ratchet_runner/check/cases.py", "Crash"): "the in-process stand-in for a killed process: a "
    "BaseException that no `except Exception` may catch, and that `ratchet check` always catches",
    (
        "ratchet_runner/adapters/practice/http.py",
        "_Refusal",
    ): "a request the practice HTTP server refuses "
    "before it reaches the world: always caught in the request's handler and answered as a JSON "
    "error",
    (
        "ratchet_runner/serve/acting.py",
        "Refusal",
    ): "a request the service refuses before it asks the "
    "library (a malformed body, a role the operator does not hold): always caught by the "
    "route's wrapper and answered as a JSON error with the CLI's code",
    ("ratchet_runner/evolve/walk.py", "Diverged"): "the first step a history would not take "
    "the same way under a new version: it ends the walk of that history, which catches it and "
    "returns it as the run's verdict",
}

_TREE_LINE = re.compile(r"^ {0,4}([│├└─ ]*)([A-Z][A-Za-z]+) +(R\d{3})\b")


def drawn_tree(text: str) -> dict[str, tuple[str | None, str]]:
    """Each error a tree drawing names, with its parent (None at the root) and its code.

    >>> drawing = ["Base  R000  x", "├── Left  R100", "│   └── Deep  R101", "└── Top  R200"]
    >>> tree = drawn_tree("\\n".join("    " + line for line in drawing))
    >>> tree["Deep"], tree["Top"], tree["Base"]
    (('Left', 'R101'), ('Base', 'R200'), (None, 'R000'))
    """
    tree: dict[str, tuple[str | None, str]] = {}
    stack: list[tuple[int, str]] = []
    for line in text.splitlines():
        found = _TREE_LINE.match(line)
        if not found:
            continue
        column, name, code = found.start(2), found.group(2), found.group(3)
        while stack and stack[-1][0] >= column:
            stack.pop()
        tree[name] = (stack[-1][1] if stack else None, code)
        stack.append((column, name))
    return tree


def error_classes() -> list[type[RatchetError]]:
    """RatchetError and every subclass the errors module defines."""
    found: list[type[RatchetError]] = [RatchetError]
    for cls in found:
        found.extend(c for c in cls.__subclasses__() if c.__module__ == errors.__name__)
    return found


def real_tree() -> dict[str, tuple[str | None, str]]:
    return {
        cls.__name__: (None if cls is RatchetError else cls.__bases__[0].__name__, cls.code)
        for cls in error_classes()
    }


def documented() -> dict[str, tuple[str, str, int]]:
    """The table of errors.md: code -> (error, parent, exit status)."""
    rows: dict[str, tuple[str, str, int]] = {}
    for line in ERRORS_MD.read_text(encoding="utf-8").splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split(" | ")]
        if len(cells) == 5 and re.fullmatch(r"R\d{3}", cells[0]):
            assert cells[0] not in rows, f"{cells[0]} is documented twice"
            rows[cells[0]] = (cells[1], cells[2], int(cells[4]))
    return rows


# -- the tree ---------------------------------------------------------------------------------


def test_the_drawing_parser_reads_its_own_example() -> None:
    runner = doctest.DocTestRunner()
    for example in doctest.DocTestFinder().find(drawn_tree, globs={"drawn_tree": drawn_tree}):
        runner.run(example)
    assert (runner.tries, runner.failures) == (3, 0)


def test_the_tree_drawn_in_the_errors_module_is_the_class_tree() -> None:
    assert errors.__doc__ is not None
    assert drawn_tree(errors.__doc__) == real_tree()


def test_the_tree_drawn_in_the_error_reference_is_the_class_tree() -> None:
    assert drawn_tree(ERRORS_MD.read_text(encoding="utf-8")) == real_tree()


def test_every_error_has_its_own_code_in_its_branchs_family() -> None:
    codes = [cls.__dict__.get("code") for cls in error_classes()]
    assert all(isinstance(c, str) and re.fullmatch(r"R\d{3}", c) for c in codes), codes
    assert len(set(codes)) == len(codes)
    for cls in error_classes()[1:]:
        branch = next(c for c in cls.__mro__ if c.__bases__ == (RatchetError,))
        assert cls.code[1] == branch.code[1], f"{cls.__name__} is outside {branch.__name__}"


# -- the reference ----------------------------------------------------------------------------


def test_the_error_reference_documents_every_code_and_no_other() -> None:
    assert set(documented()) == {cls.code for cls in error_classes()}


def test_the_error_reference_names_each_codes_class_and_parent() -> None:
    for code, (name, parent, _) in documented().items():
        cls = next(c for c in error_classes() if c.code == code)
        assert (name, parent) == (cls.__name__, cls.__bases__[0].__name__), code


def test_every_r_code_a_page_mentions_exists() -> None:
    known = {cls.code for cls in error_classes()}
    for page in sorted((ROOT / "docs").rglob("*.md")):
        unknown = set(re.findall(r"\b(R\d{3})\b", page.read_text(encoding="utf-8"))) - known
        assert not unknown, f"{page.relative_to(ROOT)} mentions {sorted(unknown)}"


def _instance(cls: type[RatchetError]) -> RatchetError:
    if cls is SpecError:
        return cls([Diagnostic("spec.yaml", 3, 1, "E101", "a located problem")])
    if cls is BindingInvalid:
        return cls([Diagnostic("ratchet.toml", 4, 1, "B203", "a located problem")])
    if cls is MappingInvalid:
        return cls([Diagnostic("move.yaml", 2, 1, "V201", "a located problem")])
    if issubclass(cls, ExpressionError):
        return cls("E305", "'int(input.x)' cannot be evaluated")
    if cls is GraphvizNotFound:
        return cls()
    if cls is HistoriesInvalid:
        return cls([LineProblem("golden.jsonl", 2, "V402", "not JSON")])
    if cls is StepFailed:
        return cls("run run_1: a step failed; it waits for a person", run=None)
    if cls is InputConflict:
        return cls("run run_1 was started with another input", run=None, field="input/amount")
    return cls(f"{cls.__name__} happened")


@pytest.mark.parametrize("cls", error_classes(), ids=lambda cls: cls.__name__)
def test_the_cli_shows_each_error_with_its_code_and_the_documented_exit_status(
    cls: type[RatchetError], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from ratchet_runner.cli import cli

    error = _instance(cls)

    def explode() -> None:
        raise error

    monkeypatch.setitem(cli.commands, "explode", click.Command("explode", callback=explode))
    code, out, err = run(capsys, "explode")
    assert code == documented()[cls.code][2] == cls.exit_status
    shown = {
        SpecError: "spec.yaml:3:1: E101 a located problem",
        BindingInvalid: "ratchet.toml:4:1: B203 a located problem",
        MappingInvalid: "move.yaml:2:1: V201 a located problem",
        HistoriesInvalid: "golden.jsonl:2: V402 not JSON",
    }.get(cls, f"ratchet: {cls.code} ")
    assert shown in err
    assert "internal error" not in err
    assert "Traceback" not in out + err


# -- no exception class elsewhere -------------------------------------------------------------


def _sources() -> list[Path]:
    return sorted((ROOT / "ratchet_runner").rglob("*.py"))


def _exception_classes(path: Path) -> list[str]:
    names = {cls.__name__ for cls in error_classes()}
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ClassDef):
            continue
        bases = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]
        if any(b in names or b.endswith(("Error", "Exception", "Interrupt")) for b in bases):
            found.append(node.name)
    return found


def test_no_module_but_errors_defines_an_exception_class() -> None:
    outside = {
        (str(path.relative_to(ROOT)), name)
        for path in _sources()
        if path != ROOT / "ratchet_runner" / "errors.py"
        for name in _exception_classes(path)
    }
    assert outside == set(NOT_USER_FACING)


# -- bad input reaches the user as a coded error ----------------------------------------------


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RATCHET_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RATCHET_DB", raising=False)
    monkeypatch.delenv("RATCHET_NOW", raising=False)
    return tmp_path


def _refund_with(tmp_path: Path, old: str, new: str) -> str:
    text = REFUND.read_text(encoding="utf-8")
    assert old in text
    path = tmp_path / "refund.yaml"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    return str(path)


def _refused(err: str, out: str, code: str) -> None:
    assert f"ratchet: {code} " in err
    assert "internal error" not in err
    assert "please report" not in err
    assert "Traceback" not in out + err


def test_a_guard_that_cannot_be_evaluated_refuses_the_decision_with_its_code(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    guard = "guard: \"input.amount <= 100.0 || approval.role == 'team_lead'\""
    spec = _refund_with(home, guard, 'guard: "int(input.ticket) > 3"')
    assert run(capsys, "validate", spec)[0] == 0  # valid: it fails only on this input's values
    assert run(capsys, "run", spec, "--example", "T-90104")[0] == 0
    code, out, err = run(capsys, "approve", "T-90104", "--as", "agent-7", "--role", "agent")
    assert code == 1
    _refused(err, out, "R401")
    assert "'int(input.ticket) > 3' cannot be evaluated" in err
    assert "nothing changed" in err


def test_a_business_key_that_cannot_be_evaluated_is_an_expression_error(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = _refund_with(home, "business_key: input.ticket", 'business_key: "int(input.ticket)"')
    code, out, err = run(capsys, "run", spec, "--example", "T-90104")
    assert code == 1
    _refused(err, out, ExpressionError.code)
    assert "'int(input.ticket)' cannot be evaluated" in err


def test_a_practice_world_fixture_it_cannot_use_is_a_located_spec_error(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An example's world is checked with the spec (E2xx, E302): the run is refused before it
    is created, at the line of the fixture; the practice world's own WorldError stays behind it
    for callers that skip validation (tests/unit/test_what_validates_runs.py)."""
    spec = _refund_with(home, "paid: 34.90", "paid: lots")
    code, out, err = run(capsys, "run", spec, "--example", "T-90104")
    assert code == 1
    assert "internal error" not in err
    assert "Traceback" not in out + err
    assert f"{spec}:89:61: E203 /examples/T-90104/world/orders/0/paid is a string" in err
