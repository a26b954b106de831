"""The public API: ``ratchet_runner.__all__``, imported lazily, and its reference page.

* The names ``ratchet_runner/__init__.py`` declares for mypy and editors (its ``TYPE_CHECKING``
  block) are the names in ``__all__``, and each resolves, lazily, to the object its module defines.
* ``docs/reference/python-api.md`` documents exactly the names in ``__all__``, and its embedding
  example runs and prints what its comments say.
* ``import ratchet_runner`` imports nothing heavy: no SQLAlchemy, no jsonschema, no CEL, none of
  the package's own modules; validating a spec through the API loads no store and no engine.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from importlib import import_module
from pathlib import Path

import pytest

import ratchet_runner
from tests.conftest import ROOT

API_MD = ROOT / "docs" / "reference" / "python-api.md"
INIT = ROOT / "ratchet_runner" / "__init__.py"
EXAMPLE = re.compile(r"<!-- ratchet-api: example -->\s*```python\n(.*?)```", re.S)


def _python(code: str, cwd: Path = ROOT) -> str:
    """Run ``code`` in a fresh interpreter (the installed package, not the checkout's folders)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RATCHET_")}
    done = subprocess.run(
        [sys.executable, "-P", "-c", code],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def documented_names() -> list[str]:
    """The first-column names of the page's tables headed ``| name |``."""
    names: list[str] = []
    in_table = False
    for line in API_MD.read_text(encoding="utf-8").splitlines():
        if line.startswith("| name |"):
            in_table = True
        elif not line.startswith("|"):
            in_table = False
        elif in_table and not line.startswith("| ---"):
            names.append(line.split("|")[1].strip().strip("`"))
    return names


def _absolute(node: ast.ImportFrom) -> str:
    """The module an import in the package's ``__init__`` names (``.store.store``: relative)."""
    return f"ratchet_runner.{node.module}" if node.level else node.module or ""


def declared() -> dict[str, tuple[str, str]]:
    """What ``ratchet_runner/__init__.py`` imports for type checkers: name -> (module, its name
    there)."""
    tree = ast.parse(INIT.read_text(encoding="utf-8"))
    block = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    )
    return {
        alias.asname or alias.name: (_absolute(node), alias.name)
        for node in ast.walk(block)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


def test_the_names_declared_for_type_checkers_are_the_names_in_all() -> None:
    assert sorted(declared()) == sorted(ratchet_runner.__all__)


def test_every_name_in_all_resolves_lazily_to_what_its_declared_module_defines() -> None:
    for name, (module, attribute) in declared().items():
        assert getattr(ratchet_runner, name) is getattr(import_module(module), attribute), name


def test_dir_lists_the_public_names_and_an_unknown_name_is_an_attribute_error() -> None:
    assert set(ratchet_runner.__all__) <= set(dir(ratchet_runner))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        ratchet_runner.nope  # noqa: B018


def test_the_api_page_documents_exactly_the_names_in_all() -> None:
    names = documented_names()
    assert len(names) == len(set(names)), "a name is documented twice"
    assert set(names) == set(ratchet_runner.__all__)


def test_importing_the_package_imports_nothing_heavy() -> None:
    heavy = ["sqlalchemy", "jsonschema", "celpy", "transitions", "graphviz", "click"]
    out = _python(
        "import ratchet_runner, sys\n"
        f"print(sorted(m for m in {heavy!r} if m in sys.modules))\n"
        "print(sorted(m for m in sys.modules if m.startswith('ratchet_runner.')))\n"
    )
    assert out.splitlines() == ["[]", "[]"]


def test_validating_through_the_api_loads_no_store_no_engine_and_no_database_driver() -> None:
    out = _python(
        "import ratchet_runner, sys\n"
        "assert ratchet_runner.validate_path('specs/refund.yaml').ok()\n"
        "print('sqlalchemy' in sys.modules, 'psycopg' in sys.modules)\n"
        "print(sorted(m for m in sys.modules if m.startswith(('ratchet_runner.store', "
        "'ratchet_runner.engine', 'ratchet_runner.worker'))))\n"
    )
    assert out.splitlines() == ["False False", "[]"]


def test_the_embedding_example_on_the_api_page_runs_as_its_comments_say() -> None:
    found = EXAMPLE.search(API_MD.read_text(encoding="utf-8"))
    assert found is not None, "the page has no marked example"
    code = found.group(1)
    expected = re.findall(r"print\(.*\)  # (.+?)(?: \.\.\.|:.*)?$", code, re.M)
    printed = _python(code).splitlines()
    assert len(printed) == len(expected) == 4
    for line, comment in zip(printed, expected, strict=True):
        assert line.startswith(comment), (line, comment)
