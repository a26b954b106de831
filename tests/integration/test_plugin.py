"""An adapter plugin, installed from its own package, runs a workflow without touching Ratchet.

The example plugin (``examples/plugin-mailer``, the distribution ``ratchet-mailer``) is built as a
wheel and installed, with Ratchet's own wheel, into a fresh virtual environment: its entry point
registers the kind ``outbox_mailer`` under ``ratchet.adapters``. From there, through the CLI, on a
store that is not a practice store: ``validate --bindings`` checks the spec against what the
plugin declares (its operations, its lookups and the receipt fields they return); ``run``
without a binding is refused with nothing created; ``run --bindings`` dies by SIGKILL right after
the plugin put the e-mail in its outbox (the reply lost with the process), and ``resume`` in a
new process reconciles through the plugin's lookup, which reads the same outbox: one e-mail, and
the run done, under the binding it recorded.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "examples" / "plugin-mailer"
WELCOME = PLUGIN / "welcome.yaml"
SOURCES = ("ratchet_runner", "pyproject.toml", "README.md")


def _wheel(tree: Path, out: Path, pattern: str) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out), str(tree)],
        check=True,
        capture_output=True,
    )
    [built] = out.glob(pattern)
    return built


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``bin`` folder of a fresh virtual environment holding Ratchet's wheel and the
    plugin's, each built from a copy of its sources (the checkout is left alone)."""
    ratchet_tree, plugin_tree = tmp_path_factory.mktemp("ratchet"), tmp_path_factory.mktemp("p")
    for name in SOURCES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(
                source, ratchet_tree / name, ignore=shutil.ignore_patterns("__pycache__")
            )
        else:
            shutil.copy2(source, ratchet_tree / name)
    shutil.copytree(PLUGIN, plugin_tree, dirs_exist_ok=True)
    out = tmp_path_factory.mktemp("dist")
    wheels = [
        _wheel(ratchet_tree, out, "ratchet_runner-*.whl"),
        _wheel(plugin_tree, out, "ratchet_mailer-*.whl"),
    ]
    env = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=True).create(env)
    subprocess.run(
        [str(env / "bin" / "python"), "-m", "pip", "install", "--quiet", *map(str, wheels)],
        check=True,
        capture_output=True,
    )
    return env / "bin"


def _ratchet(bin_dir: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RATCHET_HOME": str(cwd / "home")}
    for name in ("PYTHONPATH", "RATCHET_DB", "RATCHET_BINDINGS", "RATCHET_NOW"):
        env.pop(name, None)
    return subprocess.run(
        [str(bin_dir / "ratchet"), *args], cwd=cwd, env=env, capture_output=True, text=True
    )


def _binding(tmp_path: Path, outbox: Path, *, opt_in: bool = True) -> Path:
    path = tmp_path / "mailer.toml"
    path.write_text(
        "\n".join(
            [
                'name = "mailer-outbox"',
                "[adapters.mailer]",
                'implementation = "outbox_mailer"',
                *(["replaces_noop = true"] if opt_in else []),
                f'outbox = "{outbox}"',
                'sender = "welcome@example.com"',
                "",
            ]
        ),
        encoding="utf-8",
    )
    return path


def _outbox(path: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(path) as db:
        return list(db.execute("SELECT operation_id, recipient FROM outbox"))


def test_the_installed_plugin_registers_its_kind_and_validate_checks_against_it(
    installed: Path, tmp_path: Path
) -> None:
    binding = _binding(tmp_path, tmp_path / "outbox.db")
    checked = _ratchet(installed, tmp_path, "validate", str(WELCOME), "--bindings", str(binding))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert not (tmp_path / "outbox.db").exists()  # the class declares: nothing was made

    sms = tmp_path / "sms.yaml"
    sms.write_text(WELCOME.read_text(encoding="utf-8").replace("send_email", "send_sms"))
    wrong = _ratchet(installed, tmp_path, "validate", str(sms), "--bindings", str(binding))
    assert wrong.returncode == 1
    assert f"{binding}:2:1: B203 adapter 'mailer' ('outbox_mailer') does not implement" in (
        wrong.stdout
    )
    assert "it implements send_email" in wrong.stdout

    renamed = tmp_path / "renamed.yaml"  # a row expecting a field the plugin does not return
    renamed.write_text(WELCOME.read_text(encoding="utf-8").replace("receipt: id", "receipt: msg"))
    field = _ratchet(installed, tmp_path, "validate", str(renamed), "--bindings", str(binding))
    assert field.returncode == 1
    assert sorted(line.split(" returns ")[0] for line in field.stdout.splitlines()) == [
        f"{binding}:2:1: B205 adapter 'mailer': lookup 'find_email'",
        f"{binding}:2:1: B205 adapter 'mailer': operation 'send_email'",
    ]
    assert "returns receipt field 'id', but effect 'send_welcome'" in field.stdout

    no_opt_in = _binding(tmp_path, tmp_path / "outbox.db", opt_in=False)
    refused = _ratchet(installed, tmp_path, "validate", str(WELCOME), "--bindings", str(no_opt_in))
    assert refused.returncode == 1
    assert f"{no_opt_in}:2:1: B202 adapter 'mailer' is of kind noop" in refused.stdout


def test_a_run_through_the_plugin_survives_a_kill_after_the_send_and_sends_once(
    installed: Path, tmp_path: Path
) -> None:
    outbox = tmp_path / "outbox.db"
    binding = _binding(tmp_path, outbox)
    store = f"sqlite:///{tmp_path / 'real.db'}"  # not a practice store

    unbound = _ratchet(
        installed, tmp_path, "run", str(WELCOME), "--example", "S-1001", "--db", store
    )
    assert unbound.returncode == 1
    assert f"{WELCOME}:" in unbound.stderr
    assert "B201 adapter 'mailer' has no binding" in unbound.stderr
    listed = _ratchet(installed, tmp_path, "runs", "--db", store, "--json")
    assert json.loads(listed.stdout) == []

    killed = _ratchet(
        installed,
        tmp_path,
        "run",
        str(WELCOME),
        "--example",
        "S-1001",
        "--db",
        store,
        "--bindings",
        str(binding),
        "--interrupt",
        "after-write:send_welcome",
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    [(operation_id, recipient)] = _outbox(outbox)  # sent; the reply died with the process
    assert recipient == "ada@example.com"

    resumed = _ratchet(
        installed, tmp_path, "resume", "S-1001", "--db", store, "--bindings", str(binding), "--json"
    )
    assert resumed.returncode == 0, resumed.stderr
    assert (json.loads(resumed.stdout)["state"], json.loads(resumed.stdout)["status"]) == (
        "sent",
        "done",
    )
    assert _outbox(outbox) == [(operation_id, recipient)]  # once

    traced = _ratchet(installed, tmp_path, "trace", "S-1001", "--db", store, "--json")
    trace = json.loads(traced.stdout)
    data = {**tomllib.loads(binding.read_text(encoding="utf-8")), "name": "mailer-outbox"}
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    digest = hashlib.sha256(canonical.encode()).hexdigest()
    assert trace["binding"] == {"name": "mailer-outbox", "digest": digest}
    assert trace["events"][0]["binding"] == trace["binding"]
    kinds = [event["kind"] for event in trace["events"]]
    assert "reconcile_found" in kinds
    assert kinds.count("call") == 1
    text = _ratchet(installed, tmp_path, "trace", "S-1001", "--db", store).stdout
    assert f"under binding 'mailer-outbox' (sha256 {digest[:12]}" in text
