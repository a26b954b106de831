"""The HTTP API of ``ratchet serve``: who may do what, and what each route answers.

Against the application in-process (Starlette's test client over the real store), with the refund
example T-90104 waiting for an approval; a last test starts the real ``ratchet serve`` command
and drives the approval through it with a worker thread of its own.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ratchet_runner.serve.app import MAX_BODY, load_specs
from ratchet_runner.serve.operators import (
    config_entry,
    find_config,
    load_config,
    new_token,
)
from ratchet_runner.serve.service import Service
from ratchet_runner.session import Session
from tests.conftest import ROOT, SPECS
from tests.conftest import run_cli as run
from tests.serve.serving import People, serve_command, serving

REFUND = SPECS / "refund.yaml"


@pytest.fixture
def client(home: Path, people: People) -> Iterator[httpx.Client]:
    """A client of the application served on a free local port; every request comes through a
    trusted proxy (127.0.0.1) for the client 203.0.113.9."""
    with Session() as session:
        service = Service(session, load_config(people.path), load_specs([str(REFUND)]))
        with serving(service) as base:
            headers = {"x-forwarded-for": "203.0.113.9"}
            with httpx.Client(base_url=base, headers=headers, timeout=10) as http:
                yield http


def test_every_route_but_health_needs_a_valid_token(client: httpx.Client, waiting: str) -> None:
    assert client.get("/healthz").json() == {"ok": True}
    assert client.get("/readyz").status_code == 200
    for method, path in (
        ("GET", "/api/runs"),
        ("GET", f"/api/runs/{waiting}"),
        ("GET", f"/api/runs/{waiting}/trace"),
        ("GET", "/api/queue"),
        ("POST", f"/api/runs/{waiting}/approve"),
        ("POST", f"/api/runs/{waiting}/ops/cancel"),
    ):
        for headers in ({}, {"authorization": "Bearer rt_not-a-token"}, {"authorization": "x"}):
            response = client.request(method, path, headers=headers)
            assert response.status_code == 401, (method, path, headers)
            assert response.json()["error"]["code"] == "R200"
            assert response.headers["www-authenticate"].startswith("Bearer")
    trace = client.get(f"/api/runs/{waiting}/trace", headers={}).status_code
    assert trace == 401


def test_the_queue_shows_the_exact_arguments_and_digest_and_an_agent_approves_them(
    client: httpx.Client, people: People, waiting: str
) -> None:
    queue = client.get("/api/queue", headers=people.auth("vic")).json()
    [asked] = queue["decisions"]
    assert asked["run"] == waiting
    assert asked["business_key"] == "T-90104"
    assert asked["args"]["amount"] == 9.95
    assert len(asked["digest"]) == 64
    response = client.post(
        f"/api/runs/{waiting}/approve", headers=people.auth("ana"), json={"digest": asked["digest"]}
    )
    assert response.status_code == 200, response.text
    assert response.json()["decision"]["changed"] is True
    events = client.get(f"/api/runs/{waiting}/trace", headers=people.auth("vic")).json()["events"]
    [approved] = [e for e in events if e["kind"] == "approved"]
    # Who and in what role come from the token; where from, from the connection.
    assert (approved["actor"], approved["role"]) == ("ana", "agent")
    assert (approved["via"], approved["from"]) == ("http", "203.0.113.9")
    assert client.get("/api/queue", headers=people.auth("vic")).json()["decisions"] == []


def test_the_queue_weighs_each_of_the_operators_roles_and_shows_the_earlier_refund_of_the_order(
    client: httpx.Client, people: People, double_charge: tuple[str, str]
) -> None:
    earlier, waiting = double_charge

    def asked(name: str) -> dict[str, Any]:
        [decision] = client.get("/api/queue", headers=people.auth(name)).json()["decisions"]
        assert decision["run"] == waiting
        return dict(decision)

    refusal = (
        "the guard `input.amount <= 100.0 || approval.role == 'team_lead'` refuses agent "
        "(input.amount is 145)"
    )
    lead = asked("lead")
    assert lead["verdicts"] == [
        {"role": "agent", "may_approve": False, "reason": refusal},
        {"role": "team_lead", "may_approve": True, "reason": None},
    ]
    assert asked("ana")["verdicts"] == [{"role": "agent", "may_approve": False, "reason": refusal}]
    assert asked("vic")["verdicts"] == []  # holds no role that may decide
    assert lead["pause_expires_at"] - lead["approval_expires_at"] == pytest.approx(48 * 3600, abs=5)
    related = lead["evidence"]["related_runs"]
    assert (related["by"], related["value"]) == ("input.order", "LK-512877")
    [other] = related["runs"]
    assert (other["run"], other["business_key"], other["state"]) == (earlier, "T-90602", "refunded")
    [made] = other["effects"]
    assert (made["effect"], made["status"], made["args"]["amount"]) == (
        "request_refund",
        "done",
        45.95,
    )
    assert made["receipt"]["refund_id"].startswith("re_")

    # As the verdicts say: refused for the agent, taken for the team lead.
    refused = client.post(f"/api/runs/{waiting}/approve", headers=people.auth("ana"), json={})
    assert refused.status_code == 409, refused.text
    assert "does not hold for role 'agent'" in refused.json()["error"]["message"]
    taken = client.post(
        f"/api/runs/{waiting}/approve", headers=people.auth("lead"), json={"role": "team_lead"}
    )
    assert taken.status_code == 200, taken.text


def test_a_role_the_spec_does_not_allow_changes_nothing_and_says_why(
    client: httpx.Client, people: People, waiting: str
) -> None:
    before = client.get(f"/api/runs/{waiting}", headers=people.auth("vic")).json()
    for name, body in (("vic", {}), ("olu", {}), ("vic", {"role": "agent"})):
        response = client.post(f"/api/runs/{waiting}/approve", headers=people.auth(name), json=body)
        assert response.status_code == 403, response.text
        message = response.json()["error"]["message"]
        assert name in message
        assert "agent" in message or "does not hold" in message
    response = client.post(
        f"/api/runs/{waiting}/approve", headers=people.auth("vic"), json={"role": "viewer"}
    )
    assert response.status_code == 403
    assert "may not decide 'refund_approval'" in response.json()["error"]["message"]
    # The actor is never the request's: naming another person is refused, and changes nothing.
    response = client.post(
        f"/api/runs/{waiting}/approve", headers=people.auth("vic"), json={"actor": "ana"}
    )
    assert response.status_code == 400
    assert "authenticated operator" in response.json()["error"]["message"]
    after = client.get(f"/api/runs/{waiting}", headers=people.auth("vic")).json()
    assert after == before


def test_an_approval_of_arguments_other_than_the_ones_waiting_is_refused(
    client: httpx.Client, people: People, waiting: str
) -> None:
    response = client.post(
        f"/api/runs/{waiting}/approve", headers=people.auth("ana"), json={"digest": "0" * 64}
    )
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "R404"
    run = client.get(f"/api/runs/{waiting}", headers=people.auth("ana")).json()
    assert run["status"] == "waiting"


def test_a_rejection_needs_a_reason_and_is_recorded_with_it(
    client: httpx.Client, people: People, waiting: str
) -> None:
    response = client.post(f"/api/runs/{waiting}/reject", headers=people.auth("ana"), json={})
    assert response.status_code == 400
    response = client.post(
        f"/api/runs/{waiting}/reject", headers=people.auth("ana"), json={"reason": "not ours"}
    )
    assert response.status_code == 200, response.text
    events = client.get(f"/api/runs/{waiting}/trace", headers=people.auth("ana")).json()["events"]
    [rejected] = [e for e in events if e["kind"] == "rejected"]
    assert (rejected["actor"], rejected["reason"], rejected["from"]) == (
        "ana",
        "not ours",
        "203.0.113.9",
    )


def test_operator_actions_are_authorised_by_the_specs_operator_roles(
    client: httpx.Client, people: People, waiting: str
) -> None:
    response = client.post(f"/api/runs/{waiting}/ops/pause", headers=people.auth("ana"))
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "R405"
    response = client.post(
        f"/api/runs/{waiting}/ops/pause", headers=people.auth("olu"), json={"note": "checking"}
    )
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "paused"
    events = client.get(f"/api/runs/{waiting}/trace", headers=people.auth("olu")).json()["events"]
    [action] = [e for e in events if e["kind"] == "operator"]
    assert (action["actor"], action["role"], action["note"], action["via"]) == (
        "olu",
        "payments_ops",
        "checking",
        "http",
    )
    assert client.post(f"/api/runs/{waiting}/ops/explode", headers=people.auth("olu")).status_code
    assert (
        client.post(f"/api/runs/{waiting}/ops/explode", headers=people.auth("olu")).status_code
        == 404
    )


def test_reads_answer_with_the_clis_codes(
    client: httpx.Client, people: People, waiting: str
) -> None:
    auth = people.auth("vic")
    runs = client.get("/api/runs", headers=auth).json()
    assert [r["run"] for r in runs] == [waiting]
    assert client.get("/api/runs?status=done", headers=auth).json() == []
    assert client.get("/api/runs?status=nonsense", headers=auth).status_code == 400
    assert client.get("/api/runs?limit=0", headers=auth).status_code == 400
    by_key = client.get("/api/runs/T-90104", headers=auth).json()  # a business key names it too
    assert by_key["run"] == waiting
    missing = client.get("/api/runs/run_nothing", headers=auth)
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "R302"
    assert client.get(f"/api/runs/{waiting}/effects", headers=auth).json() == []


def test_starting_a_run_is_idempotent_by_business_key(client: httpx.Client, people: People) -> None:
    auth = people.auth("ana")
    data = {
        "workflow": "refund",
        "input": {
            "ticket": "T-1",
            "order": "LK-1",
            "amount": 5,
            "currency": "CAD",
            "reason": "RFD-LATE",
        },
    }
    first = client.post("/api/runs", headers=auth, json=data)
    assert first.status_code == 201, first.text
    again = client.post("/api/runs", headers=auth, json=data)
    assert again.status_code == 200
    assert again.json()["run"] == first.json()["run"]
    unknown = client.post("/api/runs", headers=auth, json={**data, "workflow": "nope"})
    assert unknown.status_code == 404
    assert "refund" in unknown.json()["error"]["message"]
    bad = client.post("/api/runs", headers=auth, json={**data, "input": {"ticket": "T-2"}})
    assert bad.status_code == 409, bad.text
    assert bad.json()["error"]["code"] == "R400"
    assert "does not fit the spec" in bad.json()["error"]["message"]
    assert len(client.get("/api/runs", headers=auth).json()) == 1


def test_starting_a_run_with_another_input_for_its_business_key_is_a_conflict(
    client: httpx.Client, people: People
) -> None:
    """The same business key with other input is refused (409, R409), as a reused idempotency
    key with other parameters is; the run keeps its input, and the same input still finds it."""
    auth = people.auth("ana")
    given = {"ticket": "T-1", "order": "LK-1", "amount": 5, "currency": "CAD", "reason": "RFD-LATE"}
    first = client.post("/api/runs", headers=auth, json={"workflow": "refund", "input": given})
    assert first.status_code == 201, first.text
    other = {**given, "amount": 50}
    refused = client.post("/api/runs", headers=auth, json={"workflow": "refund", "input": other})
    assert refused.status_code == 409, refused.text
    error = refused.json()["error"]
    assert error["code"] == "R409"
    assert f"run {first.json()['run']} (business key 'T-1')" in error["message"]
    assert "input/amount is 5 there, 50 here" in error["message"]
    assert "nothing was written" in error["message"]
    same = {**given, "amount": 5.0}
    again = client.post("/api/runs", headers=auth, json={"workflow": "refund", "input": same})
    assert (again.status_code, again.json()["run"]) == (200, first.json()["run"])
    [listed] = client.get("/api/runs", headers=auth).json()
    assert (listed["run"], listed["version"]) == (first.json()["run"], 1)


def test_bad_bodies_are_refused_and_change_nothing(
    client: httpx.Client, people: People, waiting: str
) -> None:
    auth = people.auth("ana")
    path = f"/api/runs/{waiting}/approve"
    for content in (b"{not json", b"[1, 2]", "\u00ff".encode("latin-1")):
        response = client.post(path, headers=auth, content=content)
        assert response.status_code == 400, content
    huge = client.post(path, headers=auth, content=b"{" + b" " * MAX_BODY + b"}")
    assert huge.status_code == 413
    assert client.get(f"/api/runs/{waiting}", headers=auth).json()["status"] == "waiting"


def test_every_response_carries_the_security_headers(client: httpx.Client, people: People) -> None:
    for response in (
        client.get("/healthz"),
        client.get("/api/runs"),
        client.get("/api/runs", headers=people.auth("vic")),
    ):
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["x-frame-options"] == "DENY"
        assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
        assert response.headers["cache-control"] == "no-store"


def test_the_client_address_comes_from_forwarded_headers_of_trusted_proxies_only(
    people: People,
) -> None:
    config = load_config(people.path)  # trusts 127.0.0.1
    assert config.client("203.0.113.9", "198.51.100.1") == "203.0.113.9"  # not a proxy: ignored
    assert config.client("127.0.0.1", "198.51.100.1") == "198.51.100.1"
    assert config.client("127.0.0.1", "198.51.100.1, 127.0.0.1") == "198.51.100.1"
    assert config.client("127.0.0.1", "evil, 198.51.100.1") == "198.51.100.1"  # the last hop
    assert config.client("127.0.0.1", None) == "127.0.0.1"


def test_the_configuration_keeps_digests_and_refuses_what_is_wrong(tmp_path: Path) -> None:
    token, digest = new_token()
    good = tmp_path / "good.toml"
    good.write_text(config_entry('o"brien', ["agent"], digest))
    config = load_config(good)
    operator = config.authenticate(f"Bearer {token}")
    assert operator is not None
    assert (operator.name, operator.roles) == ('o"brien', ("agent",))
    assert token not in good.read_text()
    for text, says in (
        (f'[[operators]]\nname = "a"\nroles = ["r"]\ntoken_sha256 = "{token}"\n', "never the"),
        ('[[operators]]\nname = "a"\nroles = []\ntoken_sha256 = "' + "a" * 64 + '"\n', "roles"),
        ("surprise = 1\n", "unknown setting"),
        ("[[operators\n", "cannot read"),
        ('trusted_proxies = ["not an address"]\n', "not an address"),
        (config_entry("a", ["r"], digest) + config_entry("b", ["r"], digest), "share one token"),
        # int(x, 16) would take these, and no token's digest could ever match them
        (config_entry("a", ["r"], "0x" + digest[2:]), "never the token itself"),
        (config_entry("a", ["r"], digest[:10] + "_" + digest[11:]), "never the token itself"),
        (config_entry("a", ["r"], "-" + digest[1:]), "never the token itself"),
    ):
        bad = tmp_path / "bad.toml"
        bad.write_text(text)
        with pytest.raises(Exception, match=says):
            load_config(bad)
    with pytest.raises(Exception, match="ratchet token"):
        find_config(None, environ={})


def test_ratchet_serve_with_a_worker_approves_and_the_run_ends_done(
    capsys: pytest.CaptureFixture[str], home: Path, people: People, waiting: str, tmp_path: Path
) -> None:
    """The real command: bearer token in, approval recorded, the service's own worker carries
    the run on (the refund's reply is lost, so it reconciles once), and the run ends done with
    one refund made."""
    args = ("--workers", "1", "--spec", str(REFUND))
    with (
        serve_command(home, people.path, tmp_path, *args) as base,
        httpx.Client(base_url=base, headers=people.auth("ana"), timeout=10) as http,
    ):
        assert http.get("/readyz").json()["workers"] == 1
        approved = http.post(f"/api/runs/{waiting}/approve", json={})
        assert approved.status_code == 200, approved.text
        deadline = time.monotonic() + 30
        while http.get(f"/api/runs/{waiting}").json()["status"] != "done":
            assert time.monotonic() < deadline, http.get(f"/api/runs/{waiting}/trace").text
            time.sleep(0.1)
        effects = http.get(f"/api/runs/{waiting}/effects").json()
    assert [e["effect"] for e in effects] == ["request_refund"]
    assert effects[0]["status"] == "done"
    code, out, err = run(capsys, "effects", "--json")
    assert code == 0, err
    assert len(json.loads(out)["changes"]) == 1  # one refund, whatever was lost on the way
    assert ROOT.exists()


def test_ratchet_token_prints_an_entry_that_authenticates_only_the_token_it_shows(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = run(capsys, "token", "ana", "--role", "agent", "--role", "team_lead")
    assert code == 0, err
    token = err.strip().rsplit(" ", 1)[-1]
    assert token.startswith("rt_")
    assert token not in out
    path = tmp_path / "ratchet-serve.toml"
    path.write_text(out)
    config = load_config(path)
    operator = config.authenticate(f"Bearer {token}")
    assert operator is not None
    assert (operator.name, operator.roles) == ("ana", ("agent", "team_lead"))
    assert config.authenticate(f"Bearer {token}x") is None
    # Into a file only its owner reads; never over an existing one; not in the JSON then.
    saved = tmp_path / "olu.token"
    code, out, err = run(
        capsys, "token", "olu", "--role", "ops", "--token-file", str(saved), "--json"
    )
    assert code == 0, err
    made = json.loads(out)
    assert made["token"] is None
    assert oct(saved.stat().st_mode & 0o777) == "0o600"
    assert saved.read_text().strip().startswith("rt_")
    before = saved.read_text()
    code, _, err = run(capsys, "token", "olu", "--role", "ops", "--token-file", str(saved))
    assert code == 1
    assert "R200 cannot write the token" in err
    assert saved.read_text() == before
    code, _, err = run(capsys, "token", "", "--role", "ops")
    assert code == 2


def test_the_openapi_description_names_every_route_and_no_other(client: httpx.Client) -> None:
    from starlette.routing import Route

    from ratchet_runner.serve.app import api_routes

    described = client.get("/openapi.json").json()
    assert described["openapi"] == "3.1.0"
    served: dict[str, set[str]] = {}
    for route in api_routes():
        assert isinstance(route, Route)
        served.setdefault(route.path, set()).update(
            m.lower() for m in (route.methods or ()) if m != "HEAD"
        )
    assert {path: set(ops) for path, ops in described["paths"].items()} == served
    for path, ops in described["paths"].items():
        for method, operation in ops.items():
            open_route = operation.get("security") == []
            answer = client.request(method.upper(), path.replace("{run}", "x"))
            # what needs a token says so (401); what does not, never does
            assert (answer.status_code == 401) != open_route, (method, path, answer.status_code)


def test_the_queue_comes_a_page_at_a_time_oldest_first(
    capsys: pytest.CaptureFixture[str], client: httpx.Client, people: People, waiting: str
) -> None:
    for ticket in ("T-2", "T-3"):
        data = {"ticket": ticket, "order": "LK-1", "amount": 5, "currency": "CAD"}
        path = Path.cwd() / f"{ticket}.json"
        path.write_text(json.dumps({**data, "reason": "RFD-LATE"}))
        code, _, err = run(capsys, "run", str(REFUND), "--input", str(path))
        assert code == 0, err
    auth = people.auth("vic")
    pages = []
    offset: int | None = 0
    while offset is not None:
        page = client.get(f"/api/queue?limit=2&offset={offset}", headers=auth).json()
        pages.append([d["business_key"] for d in page["decisions"]])
        offset = page["next_offset"]
    assert pages == [["T-90104", "T-2"], ["T-3"]]
    for bad in ("limit=0", "limit=1001", "offset=-1", "limit=many"):
        assert client.get(f"/api/queue?{bad}", headers=auth).status_code == 400, bad
    timing = client.get("/api/queue", headers=auth).headers["server-timing"]
    assert timing.startswith("app;dur=")
    assert float(timing.removeprefix("app;dur=")) > 0


def test_the_services_connections_send_small_replies_without_waiting(
    client: httpx.Client,
) -> None:
    """A reply is two writes (headers, body): on a connection with Nagle's algorithm on, the
    body waits for the client's delayed ACK. The service's socket names its protocol, so that
    the connections asyncio accepts from it have TCP_NODELAY (before: 40 ms a request)."""
    from ratchet_runner.serve.run import listening_socket

    sock = listening_socket("127.0.0.1", 0)
    try:
        assert sock.proto == socket.IPPROTO_TCP
        with socket.create_connection(sock.getsockname()) as _client:
            accepted, _ = sock.accept()
            with accepted:
                import asyncio.base_events as base_events

                base_events._set_nodelay(accepted)  # what asyncio does with each connection
                assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        sock.close()


def test_a_bug_answers_one_json_line_and_no_traceback(
    client: httpx.Client,
    people: People,
    waiting: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Nor in the service's log: one line there, as the command line prints one."""

    def broken(*_: object) -> None:
        raise ZeroDivisionError("a bug")

    monkeypatch.delenv("RATCHET_DEBUG", raising=False)
    monkeypatch.setattr("ratchet_runner.serve.app.run_summary", broken)  # where the route reads it
    capsys.readouterr()
    response = client.get("/api/runs/T-90104", headers=people.auth("vic"))
    assert response.status_code == 500
    assert response.json()["error"]["code"] == "R000"
    assert "Traceback" not in response.text
    assert client.get("/healthz").status_code == 200  # and it serves on
    logged = capsys.readouterr().err
    assert "Traceback" not in logged
    assert logged.count("ratchet serve: internal error: ZeroDivisionError: a bug") == 1
