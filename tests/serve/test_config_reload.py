"""The service reads its configuration file again when it changes: a token revoked or rotated
in its entry, or an operator added, counts without a restart, a console session of an operator
removed or given other roles ends, and a file that no longer reads (a second entry for one
operator too) leaves the configuration before it in place."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ratchet_runner.cli.logs import configure
from ratchet_runner.serve.app import load_specs
from ratchet_runner.serve.operators import config_entry, load_config, new_token
from ratchet_runner.serve.service import Service
from ratchet_runner.session import Session
from tests.conftest import SPECS
from tests.serve.serving import People, serving


@pytest.fixture
def served(home: Path, people: People) -> Iterator[tuple[str, Service]]:
    """The service, its log sent to stderr as ``ratchet serve`` sends it (whatever ran in this
    process before)."""
    configure()
    with Session() as session:
        service = Service(
            session,
            load_config(people.path),
            load_specs([str(SPECS / "refund.yaml")]),
            config_interval=0.0,
        )
        with serving(service) as base:
            yield base, service


def _rewrite(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` and make sure its change time moves on."""
    before = path.stat().st_mtime_ns
    path.write_text(text, encoding="utf-8")
    if path.stat().st_mtime_ns == before:
        os.utime(path, ns=(before + 1_000_000, before + 1_000_000))


def _whoami(base: str, people: People, name: str) -> int:
    return httpx.get(f"{base}/api/whoami", headers=people.auth(name)).status_code


def test_a_token_removed_from_the_file_is_refused_and_one_added_is_taken(
    served: tuple[str, Service], people: People, capsys: pytest.CaptureFixture[str]
) -> None:
    base, _ = served
    assert _whoami(base, people, "vic") == 200
    text = people.path.read_text(encoding="utf-8")
    blocks = text.split("[[operators]]")
    without_vic = "[[operators]]".join(b for b in blocks if not b.startswith('\nname = "vic"'))
    assert "vic" not in without_vic
    token, digest = new_token()
    _rewrite(people.path, without_vic + "\n" + config_entry("zoe", ["agent"], digest))
    assert _whoami(base, people, "vic") == 401  # revoked, no restart
    assert _whoami(base, people, "ana") == 200
    zoe = httpx.get(f"{base}/api/whoami", headers={"authorization": f"Bearer {token}"})
    assert zoe.json() == {"name": "zoe", "roles": ["agent"]}
    assert "read again: 4 operator(s)" in capsys.readouterr().err


def test_a_console_session_of_an_operator_given_other_roles_ends(
    served: tuple[str, Service], people: People
) -> None:
    base, service = served
    with httpx.Client(base_url=base) as browser:
        nonce = re.search(r'name="nonce" value="([^"]+)"', browser.get("/login").text)
        assert nonce is not None
        data = {"nonce": nonce.group(1), "token": people.tokens["ana"]}
        assert browser.post("/login", data=data).status_code == 303
        assert browser.get("/queue").status_code == 200
        text = people.path.read_text(encoding="utf-8")
        _rewrite(people.path, text.replace('roles = ["agent"]', 'roles = ["agent", "team_lead"]'))
        assert browser.get("/queue").status_code == 303  # to sign in again, in the new roles
    assert service.config.authenticate(f"Bearer {people.tokens['ana']}") is not None


def test_a_file_that_no_longer_reads_leaves_the_configuration_before_it(
    served: tuple[str, Service], people: People, capsys: pytest.CaptureFixture[str]
) -> None:
    base, _ = served
    text = people.path.read_text(encoding="utf-8")
    _rewrite(people.path, text + "\n[[operators]]\nname = 'broken'\n")
    assert _whoami(base, people, "vic") == 200  # the previous configuration stays
    logged = capsys.readouterr().err
    assert "changed but was not taken" in logged
    assert "the configuration before it stays" in logged
    _rewrite(people.path, text)  # fixed: taken again
    assert _whoami(base, people, "vic") == 200


def _rotated(text: str, name: str, digest: str) -> str:
    """``text`` with ``digest`` in place of the token digest of ``name``'s entry."""
    changed = re.sub(
        rf'(name = "{name}"\nroles = \[[^\]]*\]\ntoken_sha256 = )"[0-9a-f]{{64}}"',
        rf'\g<1>"{digest}"',
        text,
    )
    assert changed != text
    return changed


def test_a_token_rotated_in_its_entry_is_refused_and_its_successor_taken_without_a_restart(
    served: tuple[str, Service], people: People, capsys: pytest.CaptureFixture[str]
) -> None:
    base, _ = served
    text = people.path.read_text(encoding="utf-8")
    token, digest = new_token()
    successor = {"authorization": f"Bearer {token}"}
    # A second entry for ana beside the first is a file the service does not take.
    _rewrite(people.path, text + "\n" + config_entry("ana", ["agent"], digest))
    assert _whoami(base, people, "ana") == 200
    assert httpx.get(f"{base}/api/whoami", headers=successor).status_code == 401
    assert "operator 'ana' is listed twice" in capsys.readouterr().err
    # The new digest in place of the old one, as the docs say: the old token is refused.
    _rewrite(people.path, _rotated(text, "ana", digest))
    assert _whoami(base, people, "ana") == 401
    ana = httpx.get(f"{base}/api/whoami", headers=successor)
    assert ana.json() == {"name": "ana", "roles": ["agent"]}


def test_a_console_session_signed_in_with_a_token_rotated_away_ends(
    served: tuple[str, Service], people: People
) -> None:
    base, _ = served
    with httpx.Client(base_url=base) as browser:
        nonce = re.search(r'name="nonce" value="([^"]+)"', browser.get("/login").text)
        assert nonce is not None
        data = {"nonce": nonce.group(1), "token": people.tokens["ana"]}
        assert browser.post("/login", data=data).status_code == 303
        assert browser.get("/queue").status_code == 200
        text = people.path.read_text(encoding="utf-8")
        _rewrite(people.path, _rotated(text, "ana", new_token()[1]))
        assert browser.get("/queue").status_code == 303  # to sign in again


def test_a_token_revoked_by_an_edit_of_the_same_size_and_time_is_refused(
    served: tuple[str, Service], people: People
) -> None:
    """A file copied in with its time kept (``cp -p``, ``rsync -t``) whose edit keeps its size
    changes neither: the change is seen by its content."""
    base, _ = served
    assert _whoami(base, people, "vic") == 200
    before = people.path.stat()
    text = people.path.read_text(encoding="utf-8")
    digest = re.search(r'name = "vic"\n(?:.*\n)*?token_sha256 = "([0-9a-f]{64})"', text)
    assert digest is not None
    other = ("0" if digest.group(1)[0] != "0" else "1") + digest.group(1)[1:]
    people.path.write_text(text.replace(digest.group(1), other), encoding="utf-8")
    os.utime(people.path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = people.path.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert _whoami(base, people, "vic") == 401  # revoked, no restart
    assert _whoami(base, people, "ana") == 200
