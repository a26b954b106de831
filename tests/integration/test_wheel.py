"""The distribution as a user meets it: built as a wheel, installed (not editable) into a fresh
virtual environment, and used from outside the checkout.

It installs one import name, ``ratchet_runner``, with the CLI inside it, and nothing under the
generic names the folders carry in the repository (``runner``, ``adapters``, ``cli``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("ratchet_runner", "pyproject.toml", "README.md")


def _expected_modules() -> set[str]:
    """Every file the wheel must carry, by its path inside the wheel."""
    files = {"ratchet_runner/py.typed"}
    for path in (ROOT / "ratchet_runner").rglob("*"):
        if path.suffix in (".py", ".json") and "__pycache__" not in path.parts:
            files.add(f"ratchet_runner/{path.relative_to(ROOT / 'ratchet_runner').as_posix()}")
    return files


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built from a copy of the sources (the checkout's own build/ is left alone)."""
    tree = tmp_path_factory.mktemp("tree")
    for name in SOURCES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, tree / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, tree / name)
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out), str(tree)],
        check=True,
        capture_output=True,
    )
    [built] = out.glob("ratchet_runner-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``bin`` folder of a fresh virtual environment with the wheel installed."""
    env = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=True).create(env)
    subprocess.run(
        [str(env / "bin" / "python"), "-m", "pip", "install", "--quiet", str(wheel)],
        check=True,
        capture_output=True,
    )
    return env / "bin"


def test_the_wheel_holds_one_namespace_with_the_cli_and_every_module(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/", 1)[0] for name in names}
    assert top == {"ratchet_runner", wheel.name.split("-py3")[0] + ".dist-info"}
    missing = _expected_modules() - set(names)
    assert not missing, f"the wheel lacks {sorted(missing)}"
    assert not any(name.startswith(("runner/", "adapters/", "cli.py")) for name in names)
    entry_points = zipfile.ZipFile(wheel).read(
        next(n for n in names if n.endswith("entry_points.txt"))
    )
    assert b"ratchet = ratchet_runner.cli:main" in entry_points


def _ratchet(bin_dir: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RATCHET_HOME": str(cwd / "home")}
    env.pop("PYTHONPATH", None)
    return subprocess.run(
        [str(bin_dir / "ratchet"), *args], cwd=cwd, env=env, capture_output=True, text=True
    )


def test_the_installed_wheel_validates_and_runs_a_refund_with_approval(
    installed: Path, tmp_path: Path
) -> None:
    specs = sorted(str(p) for p in (ROOT / "specs").glob("*.yaml"))
    validated = _ratchet(installed, tmp_path, "validate", *specs)
    assert validated.returncode == 0, validated.stdout + validated.stderr

    started = _ratchet(
        installed, tmp_path, "run", str(ROOT / "specs/refund.yaml"), "--example", "T-90104"
    )
    assert started.returncode == 0, started.stderr
    assert "waiting for a decision on refund_approval" in started.stdout
    approved = _ratchet(
        installed, tmp_path, "approve", "T-90104", "--as", "agent-7", "--role", "agent"
    )
    assert approved.returncode == 0, approved.stderr
    assert "refunded (done)" in approved.stdout


def test_the_installed_package_is_the_one_imported(installed: Path, tmp_path: Path) -> None:
    probe = (
        "import ratchet_runner, ratchet_runner.cli as c; print(ratchet_runner.__file__, c.__file__)"
    )
    shown = subprocess.run(
        [str(installed / "python"), "-P", "-c", probe],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert str(ROOT) not in shown.stdout
    assert "site-packages/ratchet_runner/" in shown.stdout


@pytest.mark.parametrize("name", ["runner", "adapters", "cli"])
def test_no_generic_top_level_name_is_importable_outside_the_checkout(
    installed: Path, tmp_path: Path, name: str
) -> None:
    for python in (installed / "python", Path(sys.executable)):
        tried = subprocess.run(
            [str(python), "-P", "-c", f"import {name}"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
        )
        assert tried.returncode != 0
        assert "ModuleNotFoundError" in tried.stderr
