"""No secret of an HTTP binding leaves the process: a refund run over the ``ratchet`` commands
against a local provider that fails it, with a bearer token and an HMAC signing key read from the
environment, and the provider echoing the request's headers (``Authorization``, the signature)
back in its error bodies.

After the run has failed into the operator queue, the sentinel in both secrets (and every
``Authorization`` value and signature sent) appears nowhere: not on the stdout or stderr of any
command (``run``, ``approve``, ``ops retry``, ``trace``, ``runs``, ``queue``, ``status``, with
``--json`` and without), not in any row of any table of the store or of the practice world, not in
any byte of any file the commands wrote, and not in the log.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import SPECS
from tests.conftest import run_cli as run
from tests.integration.local_http import LocalServer, Received, Reply

MARK = "SENTINEL"
TOKEN = f"sk_live_{MARK}+cli/7f3a9c=="  # as base64 tokens are: '+', '/' and '='
SIGNING_KEY = f"whsec_{MARK}_cli_4b1d"
REFUND = str(SPECS / "refund.yaml")

BINDING = """\
name = "leak-test"

[adapters.payments]
implementation = "http"
base_url = "{url}"
dedupe = true

[adapters.payments.auth]
type = "bearer"
token_env = "LEAK_TEST_TOKEN"

[adapters.payments.signing]
header = "X-Signature"
key_env = "LEAK_TEST_SIGNING_KEY"
prefix = "sha256="

[adapters.payments.operations.refund]
path = "/refunds/{{order}}"
receipt_field = "refund_id"

[adapters.payments.lookups.lookup_refund]
by = "endpoint"
path = "/refunds/by-key/{{operation_id}}"
receipt_field = "refund_id"
"""


def _as_json(status: int) -> Callable[[Received], Reply]:
    """An error whose JSON body echoes the request: its headers as an object, and it all raw."""

    def respond(received: Received) -> Reply:
        raw = received.raw.decode("latin-1")
        return Reply(status, {"error": "upstream", "headers": received.headers, "raw": raw})

    return respond


def _as_text(status: int) -> Callable[[Received], Reply]:
    """An error whose plain-text body echoes the request's headers, one ``Name: value`` a line."""

    def respond(received: Received) -> Reply:
        lines = [f"{name}: {value}" for name, value in received.headers.items()]
        return Reply(status, ("you sent:\n" + "\n".join(lines)).encode())

    return respond


def _token_named(status: int) -> Callable[[Received], Reply]:
    """An error naming the token by its value alone, under no header's name, in JSON as some
    encoders write it: '/' as ``\\/`` (PHP's), '+' as ``\\u002B`` (.NET's)."""

    def respond(received: Received) -> Reply:
        token = received.headers.get("authorization", "").removeprefix("Bearer ")
        text = json.dumps({"error": f"the token {token} is not valid for this account"})
        return Reply(status, text.replace("/", "\\/").replace("+", "\\u002B").encode())

    return respond


#: How the provider fails the refund (its reply to the call) and every lookup of it.
PROVIDERS = {
    "a 500, then a lookup that fails": (_as_json(500), _as_text(500)),
    "a 422 (the key reused)": (_as_json(422), _as_json(503)),
    "a 400 refusal in plain text": (_as_text(400), _as_json(500)),
    "a 401 naming the token, escaped": (_token_named(401), _token_named(403)),
}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RATCHET_HOME", str(tmp_path / "home"))
    for name in ("RATCHET_DB", "RATCHET_BINDINGS", "RATCHET_NOW", "RATCHET_DEBUG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LEAK_TEST_TOKEN", TOKEN)
    monkeypatch.setenv("LEAK_TEST_SIGNING_KEY", SIGNING_KEY)
    monkeypatch.chdir(tmp_path)
    return tmp_path / "home"


@pytest.fixture(params=list(PROVIDERS))
def provider(request: pytest.FixtureRequest) -> Iterator[LocalServer]:
    call, lookup = PROVIDERS[request.param]

    def respond(received: Received) -> Reply:
        return lookup(received) if received.method == "GET" else call(received)

    with LocalServer(respond) as server:
        yield server


def _rows(database: Path) -> str:
    """Every row of every table of a SQLite file, as text."""
    connection = sqlite3.connect(database)
    try:
        tables = [
            name
            for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")
        ]
        assert tables, f"{database} holds no table"
        dumped = []
        for table in tables:
            rows = connection.execute(f'SELECT * FROM "{table}"').fetchall()
            dumped += [f"{table}: {row!r}" for row in rows]
        return "\n".join(dumped)
    finally:
        connection.close()


def test_no_secret_of_an_http_binding_appears_anywhere_after_a_failing_run(
    home: Path,
    provider: LocalServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)  # httpx's and httpcore's logs too
    binding = tmp_path / "leak.toml"
    binding.write_text(BINDING.format(url=provider.url), encoding="utf-8")
    database = tmp_path / "store.db"
    db = ("--db", f"sqlite:///{database}")
    bound = (*db, "--bindings", str(binding))
    shown: list[str] = []

    def ratchet(*args: str) -> tuple[int, str, str]:
        code, out, err = run(capsys, *args)
        shown.append(f"$ ratchet {' '.join(args)} -> {code}\n{out}\n{err}")
        return code, out, err

    code, out, err = ratchet("run", REFUND, "--example", "T-90104", "--json", *bound)
    assert code == 0, err
    assert json.loads(out)["status"] == "waiting"
    code, out, err = ratchet(
        "approve", "T-90104", "--as", "agent-7", "--role", "agent", "--json", *bound
    )
    assert code == 0, err
    assert json.loads(out)["status"] == "needs_person"  # the run failed into the operator queue
    operator = ("--as", "ops-1", "--role", "payments_ops", "--json", *bound)
    ratchet("ops", "retry", "T-90104", *operator)  # looks the operation up first: fails again
    for command in ("trace T-90104", "runs", "queue", "status"):
        for form in (("--json",), ()):
            code, _, err = ratchet(*command.split(), *db, *form)
            assert code == 0, err
    assert ratchet("queue", *db, "--json")[1].count('"run"') == 1

    sent = [r for r in provider.received if r.method == "POST"]
    assert sent
    assert all(r.headers["authorization"] == f"Bearer {TOKEN}" for r in sent)
    signatures = [r.headers["x-signature"].removeprefix("sha256=") for r in sent]
    for received, signature in zip(sent, signatures, strict=True):
        expected = hmac.new(SIGNING_KEY.encode(), received.body, hashlib.sha256).hexdigest()
        assert signature == expected  # both secrets were used, and echoed back
    secrets = [MARK, TOKEN, SIGNING_KEY, *signatures]

    output = "\n".join(shown)
    stored = _rows(database)
    world = _rows(home / "practice.db")
    files = {
        path: path.read_bytes()
        for path in tmp_path.rglob("*")
        if path.is_file() and path != binding  # the binding names the variables, not the values
    }
    for secret in secrets:
        assert secret not in output, output
        assert secret not in stored, stored
        assert secret not in world
        assert secret not in caplog.text, caplog.text
        assert [p for p, data in files.items() if secret.encode() in data] == []
    assert "[redacted]" in stored  # the echoes were kept, redacted
