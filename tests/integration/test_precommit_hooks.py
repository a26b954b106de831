"""The repository's pre-commit hooks (``.pre-commit-hooks.yaml``) run as pre-commit runs them:
each entry with the changed spec files as its arguments, from the top of a git checkout, with
the hook's environment's ``ratchet`` on ``PATH``."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import RATCHET, ROOT

HOOKS = {h["id"]: h for h in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())}


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
        cwd=repo,
        check=True,
        capture_output=True,
    )


def _hook(repo: Path, hook: str, *files: str) -> subprocess.CompletedProcess[str]:
    """Run hook ``hook`` on ``files`` as pre-commit does (its entry, then the file names)."""
    env = {**os.environ, "PATH": f"{Path(RATCHET).parent}{os.pathsep}{os.environ['PATH']}"}
    env = {k: v for k, v in env.items() if not k.startswith("RATCHET_")}
    return subprocess.run(
        [*shlex.split(HOOKS[hook]["entry"]), *files],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    if shutil.which("git") is None:
        pytest.skip("needs git (apt install git)")
    (tmp_path / "specs").mkdir()
    shutil.copy(ROOT / "specs" / "refund.yaml", tmp_path / "specs" / "refund.yaml")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "refund")
    return tmp_path


def test_the_hooks_are_the_two_documented_and_match_spec_files() -> None:
    assert set(HOOKS) == {"ratchet-validate", "ratchet-diff"}
    for hook in HOOKS.values():
        assert hook["language"] == "python"
        assert "specs/refund.yaml" in [
            p
            for p in ("specs/refund.yaml", "README.md")
            if __import__("re").search(hook["files"], p)
        ]


def test_validate_passes_a_valid_spec_and_fails_an_invalid_one(repo: Path) -> None:
    assert _hook(repo, "ratchet-validate", "specs/refund.yaml").returncode == 0
    broken = repo / "specs" / "broken.yaml"
    broken.write_text("workflow: [\n", encoding="utf-8")
    done = _hook(repo, "ratchet-validate", "specs/refund.yaml", "specs/broken.yaml")
    assert done.returncode == 1
    assert "specs/broken.yaml:" in done.stdout + done.stderr


def test_diff_fails_a_change_that_endangers_runs_in_flight_and_passes_a_harmless_one(
    repo: Path,
) -> None:
    spec = repo / "specs" / "refund.yaml"
    text = spec.read_text()
    said = "description: The order to refund}"
    assert said in text
    spec.write_text(text.replace(said, "description: The order to refund, as sold}"), "utf-8")
    harmless = _hook(repo, "ratchet-diff", "specs/refund.yaml")
    assert harmless.returncode == 0, harmless.stderr
    shutil.copy(ROOT / "tests" / "fixtures" / "refund-v2.yaml", spec)
    risky = _hook(repo, "ratchet-diff", "specs/refund.yaml")
    assert risky.returncode == 1
    assert "V104" in risky.stdout
    (repo / "specs" / "new.yaml").write_text(spec.read_text(), encoding="utf-8")
    assert _hook(repo, "ratchet-diff", "specs/new.yaml").returncode == 0  # nothing to compare
