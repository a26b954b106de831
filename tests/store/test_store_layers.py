"""The store's modules sit in layers, with no import going back up (so no circle).

At the bottom, ``context``, ``tables`` and ``home`` import no other module of the store,
``dialects`` only ``home``, and ``records`` only ``context``; above them the writers
(``writer``, then ``sqlite`` and ``postgres``, which extend it); on top, ``store``. Outside the
store they may import only the package's ground floor: its errors, clock, settings and words.
"""

from __future__ import annotations

import ast

import pytest

from tests.conftest import ROOT

STORE = ROOT / "ratchet_runner" / "store"
PACKAGE = "ratchet_runner"

#: Each module of the store, and the modules of the store it may import.
LAYERS: dict[str, set[str]] = {
    "context": set(),
    "records": {"context"},
    "tables": set(),
    "home": set(),
    "dialects": {"home"},
    "tallies": {"records", "compiled"},
    "compiled": set(),
    "compact": {"tables"},
    "prune": {"context", "records", "tables", "tallies", "compact"},
    "writer": {
        "records",
        "tables",
        "home",
        "dialects",
        "context",
        "prune",
        "restores",
        "tallies",
        "compiled",
        "compact",
    },
    "restores": {"tables", "compiled"},
    "backup": {"restores"},
    "sqlite": {
        "records",
        "tables",
        "home",
        "dialects",
        "writer",
        "context",
        "restores",
        "tallies",
        "compiled",
        "compact",
    },
    "postgres": {
        "records",
        "tables",
        "home",
        "dialects",
        "writer",
        "context",
        "restores",
        "tallies",
        "compiled",
        "compact",
    },
    "bell": {"records"},
    "watch": {"bell"},
    "stats": {"tables", "tallies"},
    "schema": {"tables", "dialects", "restores", "migrations.versions"},
    "store": {
        "context",
        "records",
        "tables",
        "home",
        "dialects",
        "writer",
        "sqlite",
        "postgres",
        "bell",
        "stats",
        "schema",
        "restores",
        "backup",
        "compact",
    },
}
OUTSIDE = {f"{PACKAGE}.errors", f"{PACKAGE}.clock", f"{PACKAGE}.settings", f"{PACKAGE}.words"}


def _absolute(node: ast.ImportFrom) -> str:
    """The module a ``from`` import in a module of the store names (``..clock``, ``.records``)."""
    if not node.level:
        return node.module or ""
    anchor = f"{PACKAGE}.store".split(".")[: 3 - node.level]
    return ".".join([*anchor, *([node.module] if node.module else [])])


def imported(source: str) -> set[str]:
    """The modules of the package that ``source`` imports (``from x import y``: ``x.y`` when
    ``y`` is a module of the store, else ``x``), relative imports resolved."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(node)
            if module == f"{PACKAGE}.store":
                found |= {f"{module}.{alias.name}" for alias in node.names}
            else:
                found.add(module)
    return {name for name in found if name.split(".")[0] == PACKAGE}


def broken(module: str, source: str) -> list[str]:
    """The imports of ``module`` (a module of the store) that break the layers."""
    allowed = {f"{PACKAGE}.store.{name}" for name in LAYERS[module]} | OUTSIDE
    return sorted(imported(source) - allowed)


def test_every_module_of_the_store_has_its_layer() -> None:
    modules = {path.stem for path in STORE.glob("*.py")} - {"__init__"}
    assert modules == set(LAYERS)


@pytest.mark.parametrize("module", sorted(LAYERS))
def test_no_module_of_the_store_imports_above_its_layer(module: str) -> None:
    assert broken(module, (STORE / f"{module}.py").read_text(encoding="utf-8")) == []


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("records", "from ratchet_runner.store.store import Store"),
        ("tables", "from ratchet_runner.store import records"),
        ("writer", "from ratchet_runner.store.postgres import PostgresWriter"),
        ("postgres", "from ratchet_runner.store.sqlite import SQLiteWriter"),
        ("store", "from ratchet_runner.engine.runner import Runner"),
        ("dialects", "import ratchet_runner.spec.model"),
        ("records", "from .store import Store"),
        ("tables", "from . import writer"),
        ("store", "from ..engine.runner import Runner"),
    ],
)
def test_an_import_against_the_layers_is_caught(module: str, source: str) -> None:
    """The check can fail: each of these imports breaks it."""
    assert broken(module, source) != []
