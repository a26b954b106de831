"""Tests use a private name of the package (``_x``) only when they test the module that owns it.

A test file is about the modules its topic names: ``tests/store/test_store_meta.py`` has the
topic ``store`` (the first word after ``test_``) and may use the private names of any module
whose dotted path has a part ``store`` (``ratchet_runner.store.store``,
``ratchet_runner.store.tables``). Any other use of a private name is listed in
:data:`ALLOWED` with the reason no public name serves, or it fails here. For example, a test of
the docs that reached into the lint's private helper would fail::

    >>> uses = private_uses("from ratchet_runner.spec.lint.references import _scopes")
    >>> uses
    ['ratchet_runner.spec.lint.references._scopes']
    >>> about("tests/unit/test_docs.py", uses[0]), about("tests/unit/test_lint.py", uses[0])
    (False, True)

Four ways of reaching a name count: importing it (``from M import _x``), reading it off an
imported name (``m._x``, ``Runner._x``), patching it (``monkeypatch.setattr(m, "_x", ...)``), and
naming it in a dotted string (``"ratchet_runner.m._x"``).
"""

from __future__ import annotations

import ast
import doctest
import sys
from pathlib import Path

from tests.conftest import ROOT

PACKAGE = "ratchet_runner"

#: (test file, private name) -> why the test may use it.
ALLOWED = {
    (
        "tests/integration/test_check.py",
        "ratchet_runner.engine.runner.Runner._compensate",
    ): "breaks the runner's compensation on purpose, to show that `ratchet check`'s invariant "
    "catches a saga released with a hold in place; no public seam may offer that",
    (
        "tests/integration/test_check_http.py",
        "ratchet_runner.adapters.practice.http._Handler",
    ): "counts the POSTs the practice server receives, from this process or a check's killed "
    "child, to prove every call of a case went over the wire; the server's request handler is "
    "the one place that sees them all",
    (
        "tests/integration/test_check_migration.py",
        "ratchet_runner.evolve.migrate._write",
    ): "breaks the migration's write on purpose (no compare-and-set; two commits), to show that "
    "`ratchet check --migrate-to` catches each; no public seam may offer a migration without "
    "its compare-and-set",
}


def _private(dotted: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in dotted.split("."))


def _resolve(node: ast.expr, bound: dict[str, str]) -> str | None:
    """The package's dotted path ``node`` (a name, or attributes of one) stands for, if any."""
    attributes: list[str] = []
    while isinstance(node, ast.Attribute):
        attributes.insert(0, node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id in bound:
        return ".".join([bound[node.id], *attributes])
    return None


def private_uses(source: str) -> list[str]:
    """The private names of the package that ``source`` reaches, as dotted paths."""
    tree = ast.parse(source)
    bound: dict[str, str] = {}  # a local name -> the package's dotted path it stands for
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PACKAGE):
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PACKAGE):
                    local = alias.asname or alias.name.split(".")[0]
                    bound[local] = alias.name if alias.asname else PACKAGE
    uses = [path for path in bound.values() if _private(path)]
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            uses.append(_resolve(node, bound) or "")
        elif isinstance(node, ast.Call) and len(node.args) >= 2:
            owner, name = _resolve(node.args[0], bound), node.args[1]
            if owner and isinstance(name, ast.Constant) and isinstance(name.value, str):
                uses.append(f"{owner}.{name.value}" if _private(name.value) else "")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            if text.startswith(f"{PACKAGE}.") and " " not in text and _private(text):
                uses.append(text)
    return sorted({use for use in uses if use})


def about(test_file: str, dotted: str) -> bool:
    """Whether ``test_file`` is about the module that owns ``dotted``: its topic (the first word
    after ``test_``) is a part of the path."""
    stem = Path(test_file).stem
    if not stem.startswith("test_"):
        return False
    topic = stem.removeprefix("test_").split("_")[0]
    return topic in dotted.split(".")[1:]


def test_the_scan_reads_its_own_examples() -> None:
    runner = doctest.DocTestRunner()
    module = sys.modules[__name__]
    for example in doctest.DocTestFinder().find(module, globs=vars(module).copy()):
        runner.run(example)
    assert runner.failures == 0
    assert runner.tries >= 3


def test_the_scan_finds_each_way_of_reaching_a_private_name() -> None:
    source = """
import ratchet_runner.engine.commands as commands
from ratchet_runner.engine.runner import Runner
from ratchet_runner.store import store as store_module

commands._heartbeat
monkeypatch.setattr(Runner, "_compensate", broken)
monkeypatch.setattr("ratchet_runner.store.store._dialect_for", fake)
store_module.IDLE_PING_SECONDS
"""
    assert private_uses(source) == [
        "ratchet_runner.engine.commands._heartbeat",
        "ratchet_runner.engine.runner.Runner._compensate",
        "ratchet_runner.store.store._dialect_for",
    ]


def test_tests_use_private_names_only_of_the_module_they_test() -> None:
    found: set[tuple[str, str]] = set()
    for path in sorted((ROOT / "tests").rglob("*.py")):
        if path.is_relative_to(ROOT / "tests" / "corpus"):
            continue
        relative = str(path.relative_to(ROOT))
        for dotted in private_uses(path.read_text(encoding="utf-8")):
            if path != Path(__file__) and not about(relative, dotted):
                found.add((relative, dotted))
    unexplained = sorted(found - set(ALLOWED))
    assert not unexplained, "make the name public, test through the public API, or explain it"
    assert not set(ALLOWED) - found, "an allowed use is gone: drop it from ALLOWED"
