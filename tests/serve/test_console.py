"""The operator console over HTTP (the real application on a local port, the real store): signing
in, what each page shows, who sees which button, and forms that change nothing unless they come
from the console's own page with the session's token.

The same scenarios in a real browser: ``test_console_browser.py``.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from markupsafe import escape
from prometheus_client.parser import text_string_to_metric_families

from ratchet_runner.serve.app import load_specs
from ratchet_runner.serve.operators import load_config
from ratchet_runner.serve.service import Service
from ratchet_runner.session import Session
from tests.conftest import SPECS, postgres_url
from tests.conftest import run_cli as run
from tests.serve.serving import People, serving

REFUND = SPECS / "refund.yaml"


@pytest.fixture
def served(home: Path, people: People) -> Iterator[tuple[str, Service]]:
    with Session() as session:
        service = Service(session, load_config(people.path), load_specs([str(REFUND)]))
        with serving(service) as base:
            yield base, service


class Browsers:
    """Browser-like clients, each signed in through the sign-in form; closed at the end."""

    def __init__(self) -> None:
        self.open: list[httpx.Client] = []

    def __call__(self, base: str, people: People, name: str, then: str = "/queue") -> httpx.Client:
        browser = httpx.Client(base_url=base, timeout=10)
        self.open.append(browser)
        form = browser.get("/login", params={"next": then})
        assert form.status_code == 200
        nonce = _field(form.text, "nonce")
        answer = browser.post(
            "/login", data={"nonce": nonce, "token": people.tokens[name], "next": then}
        )
        assert answer.status_code == 303, answer.text
        assert answer.headers["location"] == then
        return browser

    def anonymous(self, base: str) -> httpx.Client:
        browser = httpx.Client(base_url=base, timeout=10)
        self.open.append(browser)
        return browser


@pytest.fixture
def sign_in() -> Iterator[Browsers]:
    browsers = Browsers()
    yield browsers
    for browser in browsers.open:
        browser.close()


def _field(page: str, name: str) -> str:
    found = re.search(rf'name="{name}" value="([^"]*)"', page)
    assert found is not None, f"no field {name} in the page"
    return html.unescape(found.group(1))


def _forms(page: str) -> dict[str, dict[str, str]]:
    """Each form's action and its hidden fields."""
    forms = {}
    for action, body in re.findall(r'<form[^>]*action="([^"]+)"[^>]*>(.*?)</form>', page, re.S):
        fields = re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', body)
        forms[html.unescape(action)] = {k: html.unescape(v) for k, v in fields}
    return forms


def _status(base: str, people: People, run_id: str) -> str:
    auth = people.auth("vic")
    return str(httpx.get(f"{base}/api/runs/{run_id}", headers=auth).json()["status"])


def test_pages_need_a_sign_in_and_come_back_after_it(
    served: tuple[str, Service], people: People, sign_in: Browsers, waiting: str
) -> None:
    base, _ = served
    for path in ("/queue", "/runs", f"/runs/{waiting}", "/specs"):
        answer = httpx.get(base + path)
        assert answer.status_code == 303
        assert answer.headers["location"].startswith("/login?next=")
    browser = sign_in(base, people, "vic", then=f"/runs/{waiting}")
    page = browser.get(f"/runs/{waiting}")
    assert page.status_code == 200
    assert "signed in as vic (viewer)" in page.text
    cookie = page.request.headers["cookie"]
    assert "ratchet_session=" in cookie
    signed_in = browser.post("/login", data={})  # no nonce: not this service's form
    assert signed_in.status_code == 403
    again = browser.get("/login", params={"next": "/runs"})  # signed in already: on you go
    assert (again.status_code, again.headers["location"]) == (303, "/runs")


def test_the_session_cookie_is_http_only_and_strict(
    served: tuple[str, Service], people: People, sign_in: Browsers
) -> None:
    base, _ = served
    browser = sign_in.anonymous(base)
    nonce = _field(browser.get("/login").text, "nonce")
    answer = browser.post("/login", data={"nonce": nonce, "token": people.tokens["ana"]})
    [cookie] = [c for c in answer.headers.get_list("set-cookie") if "ratchet_session=" in c]
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie
    assert "Secure" not in cookie  # plain HTTP here; behind a TLS proxy it is Secure
    browser = sign_in.anonymous(base)  # another browser, through a TLS proxy
    nonce = _field(browser.get("/login").text, "nonce")
    behind_tls = browser.post(
        "/login",
        data={"nonce": nonce, "token": people.tokens["ana"]},
        headers={"x-forwarded-proto": "https"},  # from 127.0.0.1, a trusted proxy
    )
    [cookie] = [c for c in behind_tls.headers.get_list("set-cookie") if "ratchet_session" in c]
    assert "Secure" in cookie


def test_a_wrong_token_or_a_form_made_elsewhere_signs_nobody_in(
    served: tuple[str, Service], people: People, sign_in: Browsers
) -> None:
    base, service = served
    browser = sign_in.anonymous(base)
    nonce = _field(browser.get("/login").text, "nonce")
    wrong = browser.post("/login", data={"nonce": nonce, "token": people.tokens["ana"] + "x"})
    assert wrong.status_code == 401
    assert "ratchet_session" not in wrong.headers.get("set-cookie", "")
    elsewhere = httpx.post(f"{base}/login", data={"nonce": nonce, "token": people.tokens["ana"]})
    assert elsewhere.status_code == 403  # the nonce without its cookie: not our form
    assert "ratchet_session" not in elsewhere.headers.get("set-cookie", "")
    assert service.counts["denied:sign_in"] == 1


@pytest.mark.parametrize(
    "target", ["//evil.example/x", "https://evil.example/", "/\\evil.example", "javascript:x"]
)
def test_after_signing_in_the_console_never_sends_you_to_another_site(
    served: tuple[str, Service], people: People, sign_in: Browsers, target: str
) -> None:
    base, _ = served
    browser = sign_in.anonymous(base)
    nonce = _field(browser.get("/login", params={"next": target}).text, "nonce")
    answer = browser.post(
        "/login", data={"nonce": nonce, "token": people.tokens["ana"], "next": target}
    )
    assert answer.headers["location"] == "/queue"


def test_an_agent_sees_the_exact_arguments_and_digest_and_approves_them(
    served: tuple[str, Service], people: People, sign_in: Browsers, waiting: str
) -> None:
    base, _ = served
    queue_json = httpx.get(f"{base}/api/queue", headers=people.auth("vic")).json()
    [asked] = queue_json["decisions"]
    browser = sign_in(base, people, "ana")
    page = browser.get("/queue").text
    assert asked["digest"] in page
    assert escape(json.dumps(asked["args"], indent=2, sort_keys=True)) in page
    form = _forms(page)[f"/runs/{waiting}/approve"]
    assert form["digest"] == asked["digest"]
    assert form["role"] == "agent"
    answer = browser.post(f"/runs/{waiting}/approve", data=form)
    assert answer.status_code == 303
    assert answer.headers["location"] == "/queue"
    said = browser.get("/queue").text
    assert "ana approved request_refund" in said
    assert "No run is waiting for a decision." in said
    trace = httpx.get(f"{base}/api/runs/{waiting}/trace", headers=people.auth("vic")).json()
    [approved] = [e for e in trace["events"] if e["kind"] == "approved"]
    assert (approved["actor"], approved["role"]) == ("ana", "agent")
    assert (approved["via"], approved["from"]) == ("console", "127.0.0.1")
    assert approved["digest"] == asked["digest"]


def test_no_approve_button_is_offered_in_a_role_the_guard_refuses_and_the_earlier_refund_shows(
    served: tuple[str, Service], people: People, sign_in: Browsers, double_charge: tuple[str, str]
) -> None:
    base, _ = served
    earlier, waiting = double_charge
    guard = escape("input.amount <= 100.0 || approval.role == 'team_lead'")
    refused = f"may not approve: the guard <code>{guard}</code> refuses agent (input.amount is 145)"
    for path in ("/queue", f"/runs/{waiting}"):
        agent = sign_in(base, people, "ana", then=path).get(path).text
        forms = _forms(agent)
        assert f"/runs/{waiting}/approve" not in forms  # the guard would refuse it
        assert forms[f"/runs/{waiting}/reject"]["role"] == "agent"  # rejecting is theirs
        assert refused in agent
        assert 'class="verdict passes"' not in agent

        lead = sign_in(base, people, "lead", then=path).get(path).text
        forms = _forms(lead)
        assert forms[f"/runs/{waiting}/approve"]["role"] == "team_lead"  # not agent
        assert refused in lead
        assert '<li class="verdict passes" data-role="team_lead">' in lead
        assert "as team_lead</button>" in lead
        for page in (agent, lead):
            row = re.search(rf'<tr data-run="{earlier}">(.*?)</tr>', page, re.S)
            assert row is not None, "the earlier refund of the order is not shown"
            assert ">T-90602</a>" in row.group(1)
            assert "<code>amount=45.95</code>" in row.group(1)
            assert "refund_id=re_" in row.group(1)
            assert 'class="expiry pause-expiry"><time datetime="' in page
            assert "(in 23h 59m) if given now" in page or "(in 24h 0m) if given now" in page


def test_a_viewer_sees_no_button_and_an_approval_they_post_changes_nothing(
    served: tuple[str, Service], people: People, sign_in: Browsers, waiting: str
) -> None:
    base, _ = served
    agent_page = sign_in(base, people, "ana").get("/queue").text
    form = _forms(agent_page)[f"/runs/{waiting}/approve"]
    viewer = sign_in(base, people, "vic")
    for path in ("/queue", f"/runs/{waiting}"):
        page = viewer.get(path).text
        assert f"/runs/{waiting}/approve" not in page
        assert "may not decide this: agent or team_lead may" in page
    csrf = _field(viewer.get("/queue").text, "csrf")
    answer = viewer.post(f"/runs/{waiting}/approve", data={**form, "csrf": csrf, "role": ""})
    assert answer.status_code == 403
    assert "R401" in answer.text
    assert "vic in role(s) viewer may not decide" in answer.text
    assert _status(base, people, waiting) == "waiting"


def test_a_post_without_the_sessions_token_or_from_elsewhere_changes_nothing(
    served: tuple[str, Service], people: People, sign_in: Browsers, waiting: str
) -> None:
    base, service = served
    agent = sign_in(base, people, "ana")
    form = _forms(agent.get("/queue").text)[f"/runs/{waiting}/approve"]
    other = _field(sign_in(base, people, "ana").get("/queue").text, "csrf")
    forged = (
        {k: v for k, v in form.items() if k != "csrf"},  # no token
        {**form, "csrf": other},  # another session's token
        {**form, "csrf": ""},
    )
    for data in forged:
        answer = agent.post(f"/runs/{waiting}/approve", data=data)
        assert answer.status_code == 403, data
        assert "nothing changed" in answer.text
    foreign = agent.post(
        f"/runs/{waiting}/approve", data=form, headers={"origin": "http://evil.example"}
    )
    assert foreign.status_code == 403
    nobody = httpx.post(f"{base}/runs/{waiting}/approve", data=form)  # no session at all
    assert nobody.status_code == 403
    assert _status(base, people, waiting) == "waiting"
    assert (service.counts["denied:csrf"], service.counts["denied:no_session"]) == (4, 1)
    exposition = httpx.get(f"{base}/metrics").text
    samples = {
        s.labels["reason"]: s.value
        for family in text_string_to_metric_families(exposition)
        if family.name == "ratchet_console_refusals"
        for s in family.samples
    }
    assert samples == {"sign_in": 0, "no_session": 1, "csrf": 4}


def test_a_stale_digest_is_refused_and_a_rejection_needs_its_reason(
    served: tuple[str, Service], people: People, sign_in: Browsers, waiting: str
) -> None:
    base, _ = served
    agent = sign_in(base, people, "ana")
    forms = _forms(agent.get(f"/runs/{waiting}").text)
    stale = agent.post(
        f"/runs/{waiting}/approve", data={**forms[f"/runs/{waiting}/approve"], "digest": "0" * 64}
    )
    assert stale.status_code == 409
    assert "R404" in stale.text
    reject = forms[f"/runs/{waiting}/reject"]
    assert agent.post(f"/runs/{waiting}/reject", data=reject).status_code == 400
    assert _status(base, people, waiting) == "waiting"
    done = agent.post(f"/runs/{waiting}/reject", data={**reject, "reason": "duplicate ticket"})
    assert done.status_code == 303
    assert done.headers["location"] == f"/runs/{waiting}"
    assert _status(base, people, waiting) == "done"


def test_operator_actions_show_for_the_specs_operator_roles_only(
    capsys: pytest.CaptureFixture[str],
    served: tuple[str, Service],
    people: People,
    sign_in: Browsers,
    waiting: str,
) -> None:
    base, _ = served
    agent_page = sign_in(base, people, "ana").get(f"/runs/{waiting}").text
    assert "/ops/pause" not in agent_page
    assert "need one of the spec" in agent_page
    ops = sign_in(base, people, "olu")
    page = ops.get(f"/runs/{waiting}").text
    assert 'formaction="/runs/' + waiting + '/ops/pause"' in page
    assert "/ops/resume" not in page  # a waiting run cannot be resumed
    csrf = _field(page, "csrf")
    data = {"csrf": csrf, "role": "payments_ops", "note": "checking", "back": f"/runs/{waiting}"}
    answer = ops.post(f"/runs/{waiting}/ops/pause", data=data)
    assert answer.status_code == 303
    paused = ops.get(f"/runs/{waiting}").text
    assert 'id="run-status">paused<' in paused
    assert 'formaction="/runs/' + waiting + '/ops/resume"' in paused
    trace = httpx.get(f"{base}/api/runs/{waiting}/trace", headers=people.auth("vic")).json()
    [action] = [e for e in trace["events"] if e["kind"] == "operator"]
    assert (action["actor"], action["via"], action["note"]) == ("olu", "console", "checking")
    code, out, _ = run(capsys, "trace", waiting)
    assert code == 0
    assert "olu" in out


def test_the_runs_list_filters_by_workflow_status_key_and_age(
    capsys: pytest.CaptureFixture[str],
    served: tuple[str, Service],
    people: People,
    sign_in: Browsers,
    waiting: str,
) -> None:
    base, _ = served
    code, _, err = run(capsys, "run", str(SPECS / "booking.yaml"), "--example", "happy")
    assert code == 0, err
    browser = sign_in(base, people, "vic")

    def keys(**params: str) -> set[str]:
        page = browser.get("/runs", params=params)
        assert page.status_code == 200, page.text
        return set(re.findall(r'<td><a href="/runs/run_\w+">([^<]+)</a></td>', page.text))

    assert keys() == {"T-90104", "TRIP-1001"}
    assert keys(workflow="refund") == {"T-90104"}
    assert keys(status="waiting", workflow="refund") == {"T-90104"}
    assert keys(status="done") == set()
    assert keys(key="TRIP-1001") == {"TRIP-1001"}
    assert keys(age="1h") == set()  # none is an hour old
    assert keys(age="0s") == {"T-90104", "TRIP-1001"}
    bad = browser.get("/runs", params={"age": "soon"})
    assert bad.status_code == 400
    assert "say how old, as 45s, 30m, 2h or 1d" in bad.text
    assert browser.get("/runs", params={"status": "lost"}).status_code == 400


def test_hostile_text_from_one_operator_is_text_on_every_page(
    served: tuple[str, Service], people: People, sign_in: Browsers, waiting: str
) -> None:
    base, _ = served
    hostile = '<script>alert(1)</script>"><img src=x onerror=alert(2)>'
    agent = sign_in(base, people, "ana")
    reject = _forms(agent.get(f"/runs/{waiting}").text)[f"/runs/{waiting}/reject"]
    answer = agent.post(f"/runs/{waiting}/reject", data={**reject, "reason": hostile})
    assert answer.status_code == 303
    viewer = sign_in(base, people, "vic")
    for path in ("/queue", f"/runs/{waiting}"):
        page = viewer.get(path)
        policy = page.headers["content-security-policy"]
        assert "default-src 'none'" in policy
        assert "script-src" not in policy  # no script runs on any page
        assert "<script>" not in page.text
        assert "<img src=x" not in page.text
    assert escape(hostile) in viewer.get(f"/runs/{waiting}").text


@pytest.mark.usefixtures("dot")  # the page draws the spec with Graphviz
def test_the_run_page_shows_effects_the_diagram_and_the_timeline(
    served: tuple[str, Service], people: People, sign_in: Browsers, waiting: str
) -> None:
    base, _ = served
    page = sign_in(base, people, "vic").get(f"/runs/{waiting}").text
    assert "<svg" in page
    assert "this run is here" in page  # the current state, emphasised
    assert page.count('<li class="k-') == len(
        httpx.get(f"{base}/api/runs/{waiting}/trace", headers=people.auth("vic")).json()["events"]
    )
    assert "No effect yet." in page


@pytest.mark.usefixtures("dot")  # the page draws the spec with Graphviz
def test_each_spec_has_its_table_and_three_diagrams(
    served: tuple[str, Service], people: People, sign_in: Browsers, waiting: str
) -> None:
    base, _ = served
    browser = sign_in(base, people, "vic")
    listing = browser.get("/specs").text
    [digest] = set(re.findall(r'href="/specs/([0-9a-f]{64})"', listing))
    page = browser.get(f"/specs/{digest}").text
    assert page.count("<svg") == 3
    assert "<th>idempotency_key</th>" in page
    assert browser.get("/specs/" + "0" * 64).status_code == 404


def test_signing_out_ends_the_session(
    served: tuple[str, Service], people: People, sign_in: Browsers, waiting: str
) -> None:
    base, _ = served
    browser = sign_in(base, people, "ana")
    csrf = _field(browser.get("/queue").text, "csrf")
    assert browser.post("/logout", data={"csrf": csrf}).status_code == 303
    assert browser.get("/queue").status_code == 303  # to sign in again


def test_a_run_waiting_for_a_person_is_reconciled_from_the_console_by_its_operator_role(
    capsys: pytest.CaptureFixture[str],
    served: tuple[str, Service],
    people: People,
    sign_in: Browsers,
    home: Path,
) -> None:
    base, _ = served
    code, _, err = run(
        capsys, "run", str(REFUND), "--example", "T-90104", "--fault", "request_refund:lookup_fails"
    )
    assert code == 0, err
    code, _, err = run(capsys, "approve", "T-90104", "--as", "ana", "--role", "agent")
    assert code == 0, err  # the reply is lost and the lookup fails: a person must look
    run_id = httpx.get(f"{base}/api/runs/T-90104", headers=people.auth("vic")).json()["run"]
    agent = sign_in(base, people, "ana")
    queue = agent.get("/queue").text
    assert f'id="person-{run_id}"' in queue
    assert "<dt>Failed</dt>" in queue
    assert "request_refund</code> unknown" in queue
    assert "/ops/reconcile" not in queue  # the agent holds no operator role
    ops = sign_in(base, people, "olu")
    page = ops.get(f"/runs/{run_id}").text
    assert "Waiting for a person" in page
    assert "<dt>Failed</dt>" in page  # the evidence, on the run's page too
    for action in ("retry", "reconcile", "cancel"):
        assert f'formaction="/runs/{run_id}/ops/{action}"' in page
    assert "/ops/pause" not in page
    assert "/ops/compensate" not in page  # the refund has no compensate state
    csrf = _field(page, "csrf")
    answer = ops.post(
        f"/runs/{run_id}/ops/reconcile",
        data={"csrf": csrf, "role": "payments_ops", "note": "found it", "back": "/queue"},
    )
    assert answer.status_code == 303
    assert answer.headers["location"] == "/queue"
    assert "olu" in ops.get("/queue").text
    # The lookup found the refund; the run is left to the workers, the request waited for none.
    assert _status(base, people, run_id) == "running"
    code, _, err = run(capsys, "worker", "--once")
    assert code == 0, err
    assert _status(base, people, run_id) == "done"
    done = ops.get(f"/runs/{run_id}").text
    code, out, err = run(capsys, "effects", "--json")
    assert code == 0, err
    calls = [c["outcome"] for c in json.loads(out)["calls"]]
    assert calls.count("timeout_after_write") == 1  # one call for the refund, ever
    looked = sum(1 for outcome in calls if outcome.startswith("lookup"))
    assert looked >= 2  # the one that failed, the operator's
    assert '<td class="op-calls">1</td>' in done
    assert f'<td class="op-lookups">{looked}</td>' in done  # every lookup made, counted


def test_the_console_works_on_postgresql(
    capsys: pytest.CaptureFixture[str],
    people: People,
    sign_in: Browsers,
    home: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RATCHET_DB", postgres_url())
    monkeypatch.setenv("RATCHET_BINDINGS", str(SPECS / "practice.toml"))
    code, out, err = run(capsys, "run", str(REFUND), "--example", "T-90104", "--json")
    assert code == 0, err
    run_id = json.loads(out)["run"]
    with Session() as session:
        assert session.store.engine.dialect.name == "postgresql"
        service = Service(session, load_config(people.path), load_specs([str(REFUND)]))
        with serving(service) as base:
            agent = sign_in(base, people, "ana")
            form = _forms(agent.get("/queue").text)[f"/runs/{run_id}/approve"]
            assert agent.post(f"/runs/{run_id}/approve", data=form).status_code == 303
            code, _, err = run(capsys, "worker", "--once")
            assert code == 0, err
            page = agent.get(f"/runs/{run_id}").text
            assert 'id="run-status">done<' in page
            assert '<td class="op-calls">1</td>' in page
            assert '<td class="op-lookups">1</td>' in page
            listed = agent.get("/runs", params={"workflow": "refund", "key": "T-90104"}).text
            assert f'href="/runs/{run_id}"' in listed
            specs = agent.get("/specs").text
            assert specs.count('href="/specs/') == 1


def test_compensate_is_offered_only_where_the_spec_has_a_compensate_state() -> None:
    from ratchet_runner.serve.console_pages import actions_for
    from ratchet_runner.spec.validate import load_spec

    booking, refund = load_spec(SPECS / "booking.yaml"), load_spec(REFUND)
    assert actions_for(booking, "needs_person") == ("retry", "reconcile", "compensate", "cancel")
    assert actions_for(refund, "needs_person") == ("retry", "reconcile", "cancel")
    assert actions_for(refund, "paused") == ("resume", "cancel")
    assert actions_for(refund, "done") == ()


def test_a_bug_in_a_page_is_an_error_page_and_one_line_in_the_log(
    served: tuple[str, Service],
    people: People,
    sign_in: Browsers,
    waiting: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    base, _ = served
    browser = sign_in(base, people, "vic")

    def broken(*_: object, **__: object) -> None:
        raise ZeroDivisionError("a bug")

    monkeypatch.delenv("RATCHET_DEBUG", raising=False)
    monkeypatch.setattr("ratchet_runner.engine.operator_queue.queue", broken)
    capsys.readouterr()
    page = browser.get("/queue")
    assert page.status_code == 500
    assert page.headers["content-type"].startswith("text/html")
    assert "R000" in page.text
    assert "Traceback" not in page.text
    logged = capsys.readouterr().err
    assert "Traceback" not in logged
    assert logged.count("ratchet serve: internal error: ZeroDivisionError: a bug") == 1


def test_the_runs_list_pages_keep_their_filters_and_the_queue_offers_no_empty_page(
    served: tuple[str, Service],
    people: People,
    sign_in: Browsers,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Three decisions waiting, two to a page: "Older" leads to the third, keeping the filters
    (a business key with '&', '#' and '+' included), and the last page offers no further one."""
    import html as markup

    from ratchet_runner.serve import console_pages
    from ratchet_runner.store.store import Store

    base, _ = served
    monkeypatch.setattr(console_pages, "PAGE_SIZE", 2)
    listed = Store.list_runs

    def any_key(self: Store, *args: Any, business_key: str | None = None, **rest: Any) -> Any:
        return listed(self, *args, **rest)  # the key filter kept in links, not applied

    monkeypatch.setattr(Store, "list_runs", any_key)
    for number in (1, 2, 3):
        given = {"ticket": f"T-{number}", "order": "LK-1", "amount": 5.0, "currency": "CAD"}
        made = httpx.post(
            f"{base}/api/runs",
            headers=people.auth("ana"),
            json={"workflow": "refund", "input": {**given, "reason": "RFD-LATE"}},
        )
        assert made.status_code == 201, made.text
    browser = sign_in(base, people, "vic")
    key = "A&B #1+x"
    first = browser.get("/runs", params={"workflow": "refund", "key": key}).text
    older = re.search(r'<a href="(/runs\?[^"]+)">Older', first)
    assert older is not None
    second = browser.get(markup.unescape(older.group(1)))
    assert second.url.params["key"] == key
    assert second.url.params["workflow"] == "refund"
    assert second.url.params["offset"] == "2"
    assert second.text.count('<td><a href="/runs/run_') == 1
    assert "Older →" not in second.text
    queue = browser.get("/queue").text
    onward = re.search(r'<a href="(/queue\?offset=\d+)">Older', queue)
    assert onward is not None
    last = browser.get(markup.unescape(onward.group(1))).text
    assert last.count('class="card" id="decide-') == 1
    assert "Older →" not in last


def test_signing_out_needs_the_sessions_token(
    served: tuple[str, Service], people: People, sign_in: Browsers
) -> None:
    """A form on another site cannot sign an operator out."""
    base, _ = served
    browser = sign_in(base, people, "ana")
    refused = browser.post("/logout", data={})
    assert refused.status_code == 403
    assert "ratchet_session" not in refused.headers.get("set-cookie", "")
    assert browser.get("/queue").status_code == 200  # still signed in


def test_without_graphviz_the_run_page_still_serves_its_decision(
    served: tuple[str, Service],
    people: People,
    sign_in: Browsers,
    waiting: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import graphviz

    from ratchet_runner.serve import console

    def no_dot(*_: object, **__: object) -> bytes:
        raise graphviz.ExecutableNotFound(["dot"])

    monkeypatch.setattr(graphviz.Digraph, "pipe", no_dot)  # as where dot is not installed
    monkeypatch.setattr(console, "_drawn", {})
    page = sign_in(served[0], people, "ana").get(f"/runs/{waiting}")
    assert page.status_code == 200, page.text
    assert "needs Graphviz" in page.text
    assert f"/runs/{waiting}/approve" in page.text
