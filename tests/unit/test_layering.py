"""The layering rules of the house (docs/explanation/architecture.md), read from the code's imports.

Every import counts: at module level, inside a function, under ``if TYPE_CHECKING``. A rule names
an importing part and the parts it must not import; a part is a folder of the package
(``ratchet_runner.spec`` and everything under it) or one module. For example, a module of the
spec that imported the store would break the first rule::

    >>> [broken] = forbidden_imports({"ratchet_runner.spec.model": "import ratchet_runner.store"})
    >>> where, rule = broken.split(": ")
    >>> where
    'ratchet_runner.spec.model imports ratchet_runner.store'
    >>> rule
    'spec imports nothing from adapters, engine, store, worker, review, binding, serve, cli'

The service reads through the public API (each name from the module it lives in), the session
and the read models; reaching into the engine breaks its rule::

    >>> [broken] = forbidden_imports({"ratchet_runner.serve.app": "import ratchet_runner.engine"})
    >>> broken.split(": ")[1]
    'serve imports only public names, the session, review.views, review.naive and the ground floor'

Between parts (each folder of the package, and each module at its top, is one part; imports
inside a part are not counted) the imports run one way, and the longest chain of them is the
house's depth. A store that imported the engine would close a circle::

    >>> store_on_engine = {"ratchet_runner.store.records": "from ..engine import runner"}
    >>> cycles(part_graph({**module_sources(), **store_on_engine}))
    [['ratchet_runner.engine', 'ratchet_runner.store']]
"""

from __future__ import annotations

import ast
import doctest
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "ratchet_runner"

#: (the importing part, the parts it must not import, the rule in words)
RULES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    (
        "ratchet_runner.spec",
        (
            "ratchet_runner.adapters",
            "ratchet_runner.engine",
            "ratchet_runner.store",
            "ratchet_runner.worker",
            "ratchet_runner.review",
            "ratchet_runner.binding",
            "ratchet_runner.serve",
            "ratchet_runner.cli",
        ),
        "spec imports nothing from adapters, engine, store, worker, review, binding, serve, cli",
    ),
    (
        "ratchet_runner.store",
        (
            "ratchet_runner.engine",
            "ratchet_runner.spec",
            "ratchet_runner.worker",
            "ratchet_runner.review",
        ),
        "store imports nothing from engine, spec, worker, review",
    ),
    (
        "ratchet_runner.engine",
        (
            "ratchet_runner.worker",
            "ratchet_runner.review",
            "ratchet_runner.serve",
            "ratchet_runner.cli",
        ),
        "engine imports nothing from worker, review, serve, or cli",
    ),
    (
        "ratchet_runner.binding",
        (
            "ratchet_runner.engine",
            "ratchet_runner.worker",
            "ratchet_runner.review",
            "ratchet_runner.session",
            "ratchet_runner.serve",
            "ratchet_runner.cli",
        ),
        "binding stands beside the engine: it imports nothing from engine, worker, review, "
        "session, serve, cli",
    ),
    (
        "ratchet_runner.adapters",
        (PACKAGE,),
        "adapters import nothing of the package but its errors module",
    ),
    (
        "ratchet_runner.session",
        (
            "ratchet_runner.worker",
            "ratchet_runner.review",
            "ratchet_runner.check",
            "ratchet_runner.serve",
            "ratchet_runner.cli",
        ),
        "the session stands beside the worker and the read models: it imports nothing from "
        "worker, review, check, serve, cli (a front end gives it the naive strategy's steps, "
        "and makes a pool over its runner_factory)",
    ),
    (
        "ratchet_runner.evolve",
        (
            "ratchet_runner.session",
            "ratchet_runner.worker",
            "ratchet_runner.review",
            "ratchet_runner.check",
            "ratchet_runner.serve",
            "ratchet_runner.cli",
        ),
        "evolve stands beside the worker and the session: it imports nothing from session, "
        "worker, review, check, serve, cli",
    ),
    (
        "ratchet_runner.evolve.diff",
        (
            "ratchet_runner.store",
            "ratchet_runner.engine",
            "ratchet_runner.adapters",
            "ratchet_runner.binding",
            "ratchet_runner.evolve.basis",
            "ratchet_runner.evolve.runs",
        ),
        "evolve.diff is pure: it compares two specs, importing only the spec and the ground floor",
    ),
    (
        "ratchet_runner.evolve.mapping",
        (
            "ratchet_runner.store",
            "ratchet_runner.engine",
            "ratchet_runner.adapters",
            "ratchet_runner.binding",
            "ratchet_runner.evolve.basis",
            "ratchet_runner.evolve.runs",
        ),
        "evolve.mapping is pure: it reads a mapping file and checks it against two specs",
    ),
    (
        PACKAGE,
        ("ratchet_runner.cli",),
        "nothing in the library imports cli (the command line's modules import each other)",
    ),
    (
        PACKAGE,
        ("ratchet_runner.serve",),
        "nothing in the library but cli imports serve (a front end, as the command line is)",
    ),
)

#: (the importing part, all it may import besides itself, the rule in words): the service is a
#: front end over the public API (``ratchet_runner``'s names, each imported from the module it
#: lives in, so that the service stands beside the public API, not above it), the session (the
#: composition root), the read models (``review.views``) and the naive strategy's step chooser
#: (``review.naive``: a run started naive stays naive when the service's workers drive it), on
#: the ground floor like everything else.
ONLY: tuple[tuple[str, tuple[str, ...], str], ...] = (
    (
        "ratchet_runner.serve",
        (
            "ratchet_runner.session",
            "ratchet_runner.review.views",
            "ratchet_runner.review.naive",
            "ratchet_runner.errors",
            "ratchet_runner.clock",
            "ratchet_runner.settings",
            "ratchet_runner.words",
        ),
        "serve imports only public names, the session, review.views, review.naive and the "
        "ground floor",
    ),
)

#: The longest chain of imports between parts the house may have (see :func:`longest_chain`):
#: the ground floor; the store, the spec and the adapters; the engine and the binding; the
#: worker, the read models, the session and ``evolve``; ``ratchet check``, the public API and the
#: service; the command line.
MAX_DEPTH = 6

#: The ground floor: one storey, each module importing nothing of the package, so that
#: everything may import it (an adapter or a plugin ``ratchet_runner.errors`` alone).
GROUND = (
    "ratchet_runner.errors",
    "ratchet_runner.words",
    "ratchet_runner.clock",
    "ratchet_runner.settings",
)
GROUND_RULE = "the ground floor (errors, words, clock, settings) imports nothing of the package"

#: Imports a rule allows although the part they name is forbidden to its importer (but to the
#: ground floor, which imports nothing).
ALLOWED = ("ratchet_runner.errors",)

#: (the importer, the part it imports): the importers a rule's part has (the command line's
#: modules), although the rule forbids that part to the rest of the package.
ONLY_IMPORTER = (
    ("ratchet_runner.cli.serving", "ratchet_runner.serve"),
    ("ratchet_runner.cli.runs", "ratchet_runner.serve"),  # ratchet signal --to: a signed webhook
)


#: A module's syntax tree, parsed once for every test that reads it.
_parse = functools.lru_cache(maxsize=None)(ast.parse)


def _within(module: str, part: str) -> bool:
    return module == part or module.startswith(part + ".")


#: The import names that are packages (a folder's ``__init__.py``): a relative import in one is
#: resolved against the package itself, not its parent.
PACKAGES: set[str] = set()


def module_sources() -> dict[str, str]:
    """The source of every module the distribution installs, by its import name."""
    sources: dict[str, str] = {}
    for path in sorted((ROOT / "ratchet_runner").rglob("*.py")):
        parts = list(path.relative_to(ROOT / "ratchet_runner").with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
            PACKAGES.add(".".join([PACKAGE, *parts]))
        sources[".".join([PACKAGE, *parts])] = path.read_text(encoding="utf-8")
    return sources


def imported_modules(module: str, source: str) -> set[str]:
    """Every module ``source`` imports, relative imports resolved against ``module``."""
    package = module if module in PACKAGES else module.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(_parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {name for name in found if _within(name, PACKAGE)}


def forbidden_imports(sources: dict[str, str]) -> list[str]:
    """One line per import that breaks a rule, naming the importer, the import and the rule."""
    broken: list[str] = []
    for module, source in sorted(sources.items()):
        for target in sorted(imported_modules(module, source)):
            if module in GROUND and part_of(target) != module:
                broken.append(f"{module} imports {target}: {GROUND_RULE}")
                continue
            if any(_within(target, allowed) for allowed in ALLOWED):
                continue
            for part, banned, words in RULES:
                hit = next((b for b in banned if _within(target, b)), None)
                if hit is None or not _within(module, part):
                    continue
                if part != PACKAGE and _within(target, part):
                    continue  # within its own part
                if hit != PACKAGE and _within(module, hit):
                    continue  # a module of the banned part itself
                if (module, hit) in ONLY_IMPORTER:
                    continue  # the one module the part serves
                broken.append(f"{module} imports {target}: {words}")
                break
        broken.extend(_outside_only(module, source))
    return sorted(set(broken))


def _outside_only(module: str, source: str) -> list[str]:
    """One line per import of ``module`` that an :data:`ONLY` rule does not allow: an import
    from a module its rule does not list is allowed only when every name it takes is a public
    name, in the module it lives in (``from ..engine.commands import decide``), or the package's
    own (``from .. import Spec``)."""
    rules = [(allowed, words) for part, allowed, words in ONLY if _within(module, part)]
    if not rules:
        return []
    [(allowed, words)] = rules
    part = part_of(module) if not module.startswith(f"{PACKAGE}.") else _part_folder(module)
    broken: list[str] = []
    for base, names in _imports(module, source):
        if not _within(base, PACKAGE) or _within(base, part):
            continue
        if any(_within(base, a) for a in allowed):
            continue
        taken = [f"{base}.{name}" for name in names] or [base]
        if names and all(_public(name) for name in taken):
            continue
        broken.extend(f"{module} imports {name}: {words}" for name in taken if not _public(name))
    return broken


def _part_folder(module: str) -> str:
    """The rule's part a module of it is in (``ratchet_runner.serve`` for its modules)."""
    return next((part for part, _a, _w in ONLY if _within(module, part)), part_of(module))


def _imports(module: str, source: str) -> list[tuple[str, list[str]]]:
    """Each import of ``source``: the module it names (relative imports resolved against
    ``module``) and the names taken from it (none for ``import x``)."""
    package = module if module in PACKAGES else module.rsplit(".", 1)[0]
    found: list[tuple[str, list[str]]] = []
    for node in ast.walk(_parse(source)):
        if isinstance(node, ast.Import):
            found.extend((alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            found.append((base, [alias.name for alias in node.names]))
    return found


def _public(name: str) -> bool:
    """Whether ``name`` is the package itself, one of its public names
    (``ratchet_runner.Spec``, ``ratchet_runner.__version__``), or a public name in the module it
    lives in (``ratchet_runner.engine.commands.decide``, public as ``decide_run``); not a module
    below it."""
    import ratchet_runner

    public = {*ratchet_runner.__all__, "__version__"}
    return name == PACKAGE or name.removeprefix(PACKAGE + ".") in public or name in _public_homes()


@functools.cache
def _public_homes() -> frozenset[str]:
    """Each public name as the module it lives in and its name there
    (``ratchet_runner.engine.commands.decide`` for ``decide_run``), read from the imports the
    package's ``__init__`` declares for type checkers."""
    source = (ROOT / "ratchet_runner" / "__init__.py").read_text(encoding="utf-8")
    found: set[str] = set()
    for node in ast.walk(_parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 1:
            found.update(f"{PACKAGE}.{node.module}.{alias.name}" for alias in node.names)
    return frozenset(found)


def part_of(module: str) -> str:
    """The part a module belongs to: the folder of the package it is in, or itself when it sits
    at the package's top (``ratchet_runner.session``, the package's own ``__init__``)."""
    rest = module.removeprefix(PACKAGE).lstrip(".")
    return f"{PACKAGE}.{rest.split('.')[0]}" if rest else PACKAGE


def _homes(sources: dict[str, str]) -> dict[str, str]:
    """Each public name of the package's ``__init__`` and the module it lives in."""
    homes: dict[str, str] = {}
    for node in ast.walk(ast.parse(sources.get(PACKAGE, ""))):
        if isinstance(node, ast.ImportFrom) and node.module:
            base = node.module if not node.level else f"{PACKAGE}.{node.module}"
            homes.update({alias.asname or alias.name: base for alias in node.names})
    return homes


def part_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """Which parts each part imports. ``from x import y`` counts as an import of the module
    ``x.y`` when there is one, else of ``x``; a public name imported from the package counts as
    an import of the module it lives in (the package's ``__init__`` names it, lazily)."""
    PACKAGES.update(m for m in sources if f"{m}.__init__" in sources)
    homes = _homes(sources)
    graph: dict[str, set[str]] = {part_of(m): set() for m in sources}
    for module, source in sources.items():
        package = module if module in PACKAGES else module.rsplit(".", 1)[0]
        for node in ast.walk(_parse(source)):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in sources else base
                    for a in node.names
                ]
                if base == PACKAGE:
                    targets = [homes.get(a.name, PACKAGE) for a in node.names]
            else:
                continue
            for target in targets:
                if _within(target, PACKAGE) and part_of(target) != part_of(module):
                    graph[part_of(module)].add(part_of(target))
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each set of parts that import each other round a circle (sorted), by Tarjan's method."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(part: str) -> None:
        index[part] = low[part] = len(index)
        stack.append(part)
        for other in sorted(graph.get(part, ())):
            if other not in index:
                visit(other)
                low[part] = min(low[part], low[other])
            elif other in stack:
                low[part] = min(low[part], index[other])
        if low[part] == index[part]:
            circle = []
            while (top := stack.pop()) != part:
                circle.append(top)
            if circle:
                found.append(sorted([*circle, part]))

    for part in sorted(graph):
        if part not in index:
            visit(part)
    return sorted(found)


def longest_chain(graph: dict[str, set[str]]) -> list[str]:
    """The longest chain of imports between parts, from the part at its top down to the ground
    floor (the graph has no circle)."""
    chains: dict[str, list[str]] = {}

    def chain(part: str) -> list[str]:
        if part not in chains:
            below = [chain(other) for other in sorted(graph.get(part, ()))]
            chains[part] = [part, *max(below, key=len, default=[])]
        return chains[part]

    return max((chain(part) for part in sorted(graph)), key=len)


def test_the_house_keeps_its_layering_rules() -> None:
    assert forbidden_imports(module_sources()) == []


def test_no_parts_import_each_other_round_a_circle() -> None:
    assert cycles(part_graph(module_sources())) == []


def test_the_house_is_no_deeper_than_its_pin() -> None:
    chain = longest_chain(part_graph(module_sources()))
    assert len(chain) <= MAX_DEPTH, " -> ".join(chain)


@pytest.mark.parametrize(
    ("module", "source", "circle"),
    [
        ("ratchet_runner.store.records", "from ..engine.runner import Runner", "engine store"),
        ("ratchet_runner.session", "from .serve import run", "serve session"),
        ("ratchet_runner.engine.runner", "from ..session import Session", "engine session"),
        ("ratchet_runner.errors", "from .store.home import home_folder", "errors store"),
    ],
)
def test_an_import_that_closes_a_circle_is_caught(module: str, source: str, circle: str) -> None:
    graph = part_graph({**module_sources(), module: source})
    parts = [f"{PACKAGE}.{name}" for name in circle.split()]
    assert any(set(parts) <= set(found) for found in cycles(graph)), cycles(graph)


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("ratchet_runner.settings", "from .clock import Clock"),  # the ground floor one higher
        ("ratchet_runner.spec.model", "from ..store.records import RunRecord"),  # spec on store
    ],
)
def test_a_deeper_house_fails_its_pin(module: str, source: str) -> None:
    chain = longest_chain(part_graph({**module_sources(), module: source}))
    assert len(chain) > MAX_DEPTH, " -> ".join(chain)


def test_an_import_within_a_part_is_not_counted() -> None:
    sources = module_sources()
    within = sources["ratchet_runner.cli.main"] + "\nfrom ratchet_runner.cli import runs\n"
    assert part_graph({**sources, "ratchet_runner.cli.main": within}) == part_graph(sources)


def test_a_public_name_counts_as_the_module_it_lives_in() -> None:
    graph = part_graph({**module_sources(), "ratchet_runner.serve.x": "from .. import Spec"})
    assert "ratchet_runner.spec" in graph["ratchet_runner.serve"]
    assert PACKAGE not in graph["ratchet_runner.serve"]


def test_every_installed_module_is_read() -> None:
    """The rules are only as good as the list of modules they read: it names every folder."""
    modules = module_sources()
    for part in (
        "spec",
        "spec.lint",
        "engine",
        "store",
        "worker",
        "review",
        "review.diagram",
        "check",
        "serve",
        "evolve",
        "adapters.http",
        "adapters.practice",
    ):
        assert f"{PACKAGE}.{part}" in modules
    assert {
        f"{PACKAGE}.cli",
        f"{PACKAGE}.cli.main",
        f"{PACKAGE}.cli.options",
        f"{PACKAGE}.errors",
        f"{PACKAGE}.adapters.base",
    } <= modules.keys()


@pytest.mark.parametrize(
    ("module", "source", "rule"),
    [
        (
            "ratchet_runner.spec.model",
            "from ratchet_runner.store.store import Store",
            "spec imports",
        ),
        ("ratchet_runner.spec.lint.graph", "import ratchet_runner.engine.runner", "spec imports"),
        (
            "ratchet_runner.spec.lint.references",
            "from ratchet_runner.adapters.practice.services import operation_names",
            "spec imports nothing from adapters",
        ),
        ("ratchet_runner.store.store", "from ratchet_runner.spec import model", "store imports"),
        ("ratchet_runner.engine.runner", "from ratchet_runner.worker.pool import Pool", "engine"),
        ("ratchet_runner.engine.lifecycle", "from ratchet_runner import cli", "engine"),
        ("ratchet_runner.adapters.practice", "from ratchet_runner.clock import Clock", "adapters"),
        ("ratchet_runner.errors", "from ratchet_runner.settings import home", "ground floor"),
        ("ratchet_runner.clock", "from .errors import UsageError", "ground floor"),
        ("ratchet_runner.settings", "from .words import RunStatus", "ground floor"),
        ("ratchet_runner.words", "from ratchet_runner import errors", "ground floor"),
        ("ratchet_runner.binding.resolve", "from ..engine.resolution import Resolution", "beside"),
        ("ratchet_runner.binding.check", "from ..session import Session", "binding stands"),
        ("ratchet_runner.check.cases", "from ratchet_runner.cli import main", "imports cli"),
        ("ratchet_runner.review.views", "from ratchet_runner.cli.options import How", "cli"),
        ("ratchet_runner.session", "from .cli import options", "serve, cli"),
        ("ratchet_runner.engine.drive", "from ..cli.options import say", "imports"),
        ("ratchet_runner.engine.drive", "from ..serve import app", "engine imports"),
        ("ratchet_runner.store.records", "from ..engine import runner", "store imports"),
        ("ratchet_runner.engine.commands", "from ..serve.app import Service", "engine imports"),
        ("ratchet_runner.session", "from .serve import operators", "serve, cli"),
        ("ratchet_runner.serve.app", "from ..engine import commands", "serve imports only"),
        ("ratchet_runner.serve.console", "from ..review.trace import when", "serve imports only"),
        ("ratchet_runner.serve.metrics", "from ..store.stats import Stats", "serve imports only"),
        ("ratchet_runner.serve.service", "from ..worker.pool import PoolReport", "serve imports"),
        ("ratchet_runner.serve.app", "from ..engine.commands import start, _ask", "serve imports"),
        ("ratchet_runner.session", "from .worker.pool import Pool", "session stands beside"),
        ("ratchet_runner.session", "from .review.naive import step_for", "session stands"),
        ("ratchet_runner.serve.app", "from ratchet_runner.spec import model", "serve imports"),
        ("ratchet_runner.evolve.hazards", "from ..session import Session", "evolve stands"),
        ("ratchet_runner.evolve.render", "from ..review import table", "evolve stands beside"),
        ("ratchet_runner.evolve.diff", "from ..store.records import RunRecord", "is pure"),
        ("ratchet_runner.evolve.diff", "from ..engine.machine import machine_for", "is pure"),
        ("ratchet_runner.evolve.mapping", "from .runs import LiveRun", "evolve.mapping is pure"),
    ],
)
def test_a_forbidden_import_is_caught(module: str, source: str, rule: str) -> None:
    """Each rule fails when its import is added: the checker is not one that cannot fail."""
    sources = {**module_sources(), module: source}
    broken = forbidden_imports(sources)
    assert any(line.startswith(f"{module} imports") and rule in line for line in broken), broken


def test_what_the_rules_allow_is_not_reported() -> None:
    allowed = {
        "ratchet_runner.adapters.practice": "from ratchet_runner.errors import RatchetError",
        "ratchet_runner.store.store": "from ratchet_runner.clock import Clock",
        "ratchet_runner.worker.pool": "from ratchet_runner.engine.runner import Runner",
        "ratchet_runner.spec.lint": "from .graph import check_graph",
        "ratchet_runner.cli.runs": "from .options import How",
        "ratchet_runner.cli.serving": "from ..serve.run import serve",
        "ratchet_runner.serve.app": "from .. import Spec, start_run",
        "ratchet_runner.serve.acting": "from ..engine.commands import decide, CommandResult",
        "ratchet_runner.serve.service": "from ..worker.pool import Pool",
        "ratchet_runner.serve.metrics": "from ..review.naive import step_for",
        "ratchet_runner.serve.hooks": "from ..review.views import pending_request",
        "ratchet_runner.serve.run": "from ..session import Session",
        "ratchet_runner.serve.openapi": "from ..settings import VERSION",
        "ratchet_runner.serve.console": "from ..words import RunStatus",
        "ratchet_runner.binding.resolve": "from ..spec.model import Adapter",
        "ratchet_runner.store.home": "from ..clock import ENV_NOW",
        "ratchet_runner.evolve.hazards": "from ..engine.machine import machine_for",
        "ratchet_runner.evolve.runs": "from ..store.store import Store",
        "ratchet_runner.evolve.diff": "from ..spec.model import Spec",
        "ratchet_runner.cli.diffing": "from ..evolve.hazards import hazards",
    }
    assert forbidden_imports(allowed) == []


def test_the_docstring_example_holds() -> None:
    import sys

    failures, tried = doctest.testmod(sys.modules[__name__], verbose=False)
    assert (failures, tried) == (0, 8)


def test_the_architecture_page_links_every_module() -> None:
    """docs/explanation/architecture.md stays true to the house: it links every file the
    distribution installs (a new or moved module that the page does not show fails here)."""
    page = (ROOT / "docs" / "explanation" / "architecture.md").read_text(encoding="utf-8")
    files = list((ROOT / "ratchet_runner").rglob("*.py"))
    unlinked = [
        path.relative_to(ROOT).as_posix()
        for path in files
        if path.name != "__init__.py" or path.parent.name in ("ratchet_runner", "lint", "adapters")
        if f"(../../{path.relative_to(ROOT).as_posix()})" not in page
    ]
    assert unlinked == []


def test_no_module_is_over_400_lines_without_a_reason() -> None:
    """A module owns one concept; one that grows past about 400 lines says why in its docstring (a
    sentence naming its length, e.g. "over 400 lines: one concern, the ...")."""
    long = [
        module
        for module, source in module_sources().items()
        if source.count("\n") > 400
        and not re.search(r"[Oo]ver [4-9]00 lines", ast.get_docstring(_parse(source)) or "")
    ]
    assert long == []


def test_the_engine_knows_nothing_of_the_naive_strategy() -> None:
    """The naive strategy (a hand-rolled retry loop, kept as a warning) is a step of its own in
    ``review/naive.py``, given to a runner by its composition root: no engine module names it."""
    engine = ROOT / "ratchet_runner" / "engine"
    naming = [
        p.name for p in engine.glob("*.py") if "naive" in p.read_text(encoding="utf-8").lower()
    ]
    assert naming == []
