"""The practice world over HTTP, driven with httpx over a real socket on 127.0.0.1: every route,
every fault as the connection shows it, the Idempotency-Key rules (the first result again, 422,
409 while the first request is held in processing, 400 without a key), and each change landing in
the practice database exactly once. One test runs the server as `ratchet practice serve`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from ratchet_runner.adapters.practice import (
    COMMITS_LATE_SECONDS,
    SLOW_COMMIT_SECONDS,
    SLOW_REPLY_SECONDS,
    PracticeWorld,
)
from ratchet_runner.adapters.practice.http import PracticeServer
from ratchet_runner.errors import UsageError
from tests.conftest import RATCHET, ROOT

ORDER = {"order": "LK-793996", "item": "watering can", "paid": 34.90, "currency": "CAD"}
REFUND = {"order": "LK-793996", "amount": 9.95, "currency": "CAD", "reason": "RFD-LATE"}
#: Each service with one operation and arguments it accepts (noop and the generic service take
#: any operation).
CALLS = {
    "payments": ("refund", REFUND),
    "warehouse": ("create_label", {"order": "LK-793996", "sku": "CAN-5", "reason": "damaged"}),
    "travel": ("hold_flight", {"trip": "TRIP-1", "traveller": "PAX-1", "flight": "AC123"}),
    "service": ("change_plan", {"account": "ACC-1", "plan": "basic"}),
    "noop": ("touch", {"n": 1}),
}


@dataclass
class Gate:
    """The world's ``sleep`` for the server: it notes each wait and holds the request there until
    the test opens the gate, so a request can be kept "in processing" without timers."""

    waited: list[float] = field(default_factory=list)
    reached: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))
    opened: threading.Event = field(default_factory=threading.Event)

    def __call__(self, seconds: float) -> None:
        self.waited.append(seconds)
        self.reached.release()
        assert self.opened.wait(10), "the test never opened the gate"

    def wait_reached(self) -> None:
        assert self.reached.acquire(timeout=10), "no request reached the gate"


@dataclass
class Served:
    world: PracticeWorld
    url: str
    gate: Gate

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=10)

    def post(self, path: str, args: Any, key: str | None, **headers: str) -> httpx.Response:
        if key is not None:
            headers["Idempotency-Key"] = key
        with self.client() as client:
            return client.post(path, json=args, headers=headers)

    def get(self, path: str, **headers: str) -> httpx.Response:
        with self.client() as client:
            return client.get(path, headers=headers)

    def changes(self) -> list[tuple[str, str, str]]:
        return [(c.service, c.operation, c.operation_id) for c in self.world.changes()]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    world = PracticeWorld(tmp_path / "practice.db")
    world.seed({"orders": [ORDER], "stock": {"CAN-5": 3}})
    gate = Gate()
    world.sleep = gate
    server = PracticeServer(world, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield Served(world, server.url, gate)
    finally:
        gate.opened.set()
        server.shutdown()
        server.server_close()
        thread.join(10)


def error(response: httpx.Response) -> str:
    assert response.headers["content-type"] == "application/json"
    return str(response.json()["error"]["code"])


# -- routes ----------------------------------------------------------------------------------------


def test_the_index_lists_every_service_and_its_operations(served: Served) -> None:
    index = served.get("/").json()
    assert index["services"]["payments"] == ["refund", "charge"]
    assert index["services"]["warehouse"] == ["create_label", "reship"]
    assert index["services"]["travel"] == ["hold_flight", "hold_hotel", "confirm", "release"]
    assert set(index["services"]) == {"payments", "warehouse", "travel", "service", "noop"}


@pytest.mark.parametrize("service", list(CALLS))
def test_a_post_makes_the_change_and_the_lookup_finds_it_by_operation_id(
    served: Served, service: str
) -> None:
    operation, args = CALLS[service]
    made = served.post(f"/{service}/{operation}", args, key=f"op-{service}")
    assert made.status_code == 200, made.text
    assert "Idempotent-Replayed" not in made.headers
    found = served.get(f"/{service}/operations/op-{service}")
    assert (found.status_code, found.json()) == (200, made.json())
    assert served.changes() == [(service, operation, f"op-{service}")]
    assert served.world.calls()[0]["effect"] == operation  # no Ratchet-Effect: the operation


def test_the_receipts_are_the_practice_worlds(served: Served) -> None:
    charge = served.post("/payments/charge", {**REFUND, "amount": 5}, key="op-charge").json()
    assert charge == {"charge_id": "ch_op-charge", "amount": 5.0, "currency": "CAD"}
    plan = served.post("/service/change_plan", CALLS["service"][1], key="op-plan").json()
    assert plan == {"change_plan_id": "change_plan_op-plan", "operation": "change_plan"}
    assert served.post("/noop/anything", {}, key="op-noop").json() == {"id": "op-noop"}


def test_a_lookup_of_an_unknown_operation_id_is_404(served: Served) -> None:
    missing = served.get("/payments/operations/op-none")
    assert (missing.status_code, error(missing)) == (404, "not_found")


@pytest.mark.parametrize(
    ("method", "path", "status", "code"),
    [
        ("GET", "/payments", 404, "no_such_route"),
        ("GET", "/bank/operations/op-1", 404, "no_such_route"),
        ("POST", "/bank/refund", 404, "no_such_route"),
        ("POST", "/payments/refund/now", 404, "no_such_route"),
        ("POST", "/payments/chargeback", 404, "no_such_operation"),
        ("POST", "/payments/refund?dedupe=false", 400, "bad_request"),
        ("POST", "/service/change_plan?dedupe=maybe", 400, "bad_request"),
        ("PUT", "/payments/refund", 405, "method_not_allowed"),
        ("DELETE", "/payments/operations/op-1", 405, "method_not_allowed"),
    ],
)
def test_a_request_off_the_routes_is_answered_with_a_json_error_and_changes_nothing(
    served: Served, method: str, path: str, status: int, code: str
) -> None:
    with served.client() as client:
        response = client.request(method, path, json=REFUND, headers={"Idempotency-Key": "k"})
    assert (response.status_code, error(response)) == (status, code)
    assert served.world.calls() == []


@pytest.mark.parametrize(
    ("body", "message"),
    [(b"{not json", "the body is not JSON"), (b"[1, 2]", "the body is a JSON object")],
)
def test_a_body_that_is_not_a_json_object_is_400(served: Served, body: bytes, message: str) -> None:
    with served.client() as client:
        response = client.post("/payments/refund", content=body, headers={"Idempotency-Key": "k"})
    assert (response.status_code, error(response)) == (400, "bad_request")
    assert message in response.json()["error"]["message"]


def test_a_refusal_of_the_provider_is_400_with_its_reason_and_evidence(served: Served) -> None:
    served.post("/payments/refund", {**REFUND, "amount": 30}, key="op-1")
    over = served.post("/payments/refund", {**REFUND, "amount": 30}, key="op-2")
    assert (over.status_code, error(over)) == (400, "refused")
    assert over.json()["error"]["evidence"] == {"paid": 34.9, "charged": 0.0, "refunded": 30.0}
    assert len(served.changes()) == 1


def test_the_connection_is_kept_alive_between_requests(served: Served) -> None:
    with served.client() as client:
        first = client.post("/noop/a", json={}, headers={"Idempotency-Key": "k1"})
        second = client.post("/noop/a", json={}, headers={"Idempotency-Key": "k2"})
    assert first.extensions["network_stream"] is second.extensions["network_stream"]


# -- the Idempotency-Key rules ---------------------------------------------------------------------


def test_a_post_without_an_idempotency_key_is_400_and_changes_nothing(served: Served) -> None:
    response = served.post("/payments/refund", REFUND, key=None)
    assert (response.status_code, error(response)) == (400, "idempotency_key_missing")
    assert served.post("/payments/refund", REFUND, key='""').status_code == 400
    assert served.world.calls() == []


def test_a_quoted_key_is_the_same_key(served: Served) -> None:
    served.post("/payments/refund", REFUND, key="op-1")
    again = served.post("/payments/refund", REFUND, key='"op-1"')
    assert again.headers["Idempotent-Replayed"] == "true"


def test_the_same_key_returns_the_first_result_and_makes_no_second_change(served: Served) -> None:
    first = served.post("/payments/refund", REFUND, key="op-1")
    again = served.post("/payments/refund", {**REFUND, "amount": 9.950}, key="op-1")
    assert (again.status_code, again.json()) == (200, first.json())
    assert again.headers["Idempotent-Replayed"] == "true"
    assert served.changes() == [("payments", "refund", "op-1")]


def test_the_same_key_with_other_arguments_is_422_and_makes_no_change(served: Served) -> None:
    served.post("/payments/refund", REFUND, key="op-1")
    other = served.post("/payments/refund", {**REFUND, "amount": 5}, key="op-1")
    assert (other.status_code, error(other)) == (422, "idempotency_key_reused")
    assert other.json()["error"]["evidence"] == {"operation_id": "op-1"}
    assert served.changes() == [("payments", "refund", "op-1")]


def test_the_same_key_while_the_first_request_is_processed_is_409_then_the_first_result(
    served: Served,
) -> None:
    served.world.add_fault("refund", "slow_reply")
    with ThreadPoolExecutor(1) as pool:
        first: Future[httpx.Response] = pool.submit(served.post, "/payments/refund", REFUND, "op-1")
        served.gate.wait_reached()  # the refund is made; its reply is held
        busy = served.post("/payments/refund", REFUND, key="op-1")
        other = served.post("/payments/refund", {**REFUND, "amount": 1}, key="op-1")
        served.gate.opened.set()
        answered = first.result(timeout=10)
    assert (busy.status_code, error(busy)) == (409, "request_in_progress")
    assert (other.status_code, error(other)) == (409, "request_in_progress")
    assert answered.status_code == 200
    assert served.gate.waited == [SLOW_REPLY_SECONDS]
    replay = served.post("/payments/refund", REFUND, key="op-1")
    assert (replay.json(), replay.headers["Idempotent-Replayed"]) == (answered.json(), "true")
    assert served.changes() == [("payments", "refund", "op-1")]


@pytest.mark.parametrize(("service", "query"), [("warehouse", ""), ("service", "?dedupe=false")])
def test_a_provider_that_does_not_deduplicate_makes_a_second_change_for_the_same_key(
    served: Served, service: str, query: str
) -> None:
    operation, args = CALLS[service]
    first = served.post(f"/{service}/{operation}{query}", args, key="op-1").json()
    second = served.post(f"/{service}/{operation}{query}", args, key="op-1").json()
    assert first != second
    assert served.changes() == [(service, operation, "op-1")] * 2
    assert served.get(f"/{service}/operations/op-1").json() == first


def test_the_generic_service_deduplicates_unless_told_otherwise(served: Served) -> None:
    args = CALLS["service"][1]
    served.post("/service/change_plan", args, key="op-1")
    again = served.post("/service/change_plan?dedupe=true", args, key="op-1")
    other = served.post("/service/change_plan", {**args, "plan": "pro"}, key="op-1")
    assert again.headers["Idempotent-Replayed"] == "true"
    assert other.status_code == 422
    assert len(served.changes()) == 1


# -- the faults over the wire ----------------------------------------------------------------------


def test_timeout_before_write_closes_the_connection_without_a_reply_and_commits_nothing(
    served: Served,
) -> None:
    served.world.add_fault("request_refund", "timeout_before_write")
    with pytest.raises(httpx.RemoteProtocolError, match="without sending a response"):
        served.post("/payments/refund", REFUND, "op-1", **{"Ratchet-Effect": "request_refund"})
    assert served.changes() == []
    assert served.get("/payments/operations/op-1").status_code == 404
    assert [c["outcome"] for c in served.world.calls("request_refund")] == ["timeout_before_write"]
    retried = served.post("/payments/refund", REFUND, "op-1")
    assert retried.status_code == 200
    assert served.changes() == [("payments", "refund", "op-1")]


def test_timeout_after_write_commits_then_resets_the_connection(served: Served) -> None:
    served.world.add_fault("request_refund", "timeout_after_write")
    with pytest.raises(httpx.ReadError):
        served.post("/payments/refund", REFUND, "op-1", **{"Ratchet-Effect": "request_refund"})
    assert served.changes() == [("payments", "refund", "op-1")]
    found = served.get("/payments/operations/op-1", **{"Ratchet-Effect": "request_refund"})
    assert found.json()["refund_id"] == "re_op-1"
    assert served.post("/payments/refund", REFUND, "op-1").headers["Idempotent-Replayed"]
    assert len(served.changes()) == 1


def test_commits_late_closes_at_once_answers_409_meanwhile_and_commits_once_later(
    served: Served,
) -> None:
    now = [1_000_000.0]
    served.world.now = lambda: now[0]
    served.world.add_fault("refund", "commits_late")
    with pytest.raises(httpx.RemoteProtocolError):
        served.post("/payments/refund", REFUND, "op-1")
    served.gate.wait_reached()  # the server waits to commit it
    assert served.get("/payments/operations/op-1").status_code == 404
    busy = served.post("/payments/refund", REFUND, "op-1")
    assert (busy.status_code, error(busy)) == (409, "request_in_progress")
    assert served.changes() == []
    now[0] += COMMITS_LATE_SECONDS
    served.gate.opened.set()
    assert served.gate.waited == [COMMITS_LATE_SECONDS]
    found = served.get("/payments/operations/op-1")
    assert (found.status_code, found.json()["refund_id"]) == (200, "re_op-1")
    assert served.post("/payments/refund", REFUND, "op-1").json() == found.json()
    assert served.changes() == [("payments", "refund", "op-1")]


def test_unavailable_is_503_with_retry_after_and_commits_nothing(served: Served) -> None:
    served.world.add_fault("refund", "unavailable")
    response = served.post("/payments/refund", REFUND, "op-1")
    assert (response.status_code, error(response)) == (503, "unavailable")
    assert response.headers["Retry-After"] == "1"
    assert served.changes() == []


def test_refuse_is_a_4xx_with_a_json_error_and_commits_nothing(served: Served) -> None:
    served.world.add_fault("refund", "refuse")
    response = served.post("/payments/refund", REFUND, "op-1")
    assert (response.status_code, error(response)) == (400, "refused")
    assert response.json()["error"]["message"] == "refused by the provider (injected)"
    assert served.changes() == []


def test_malformed_is_a_2xx_whose_body_is_not_the_receipt_and_the_change_is_made(
    served: Served,
) -> None:
    served.world.add_fault("refund", "malformed")
    response = served.post("/payments/refund", REFUND, "op-1")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/html"
    with pytest.raises(json.JSONDecodeError):
        response.json()
    assert served.changes() == [("payments", "refund", "op-1")]


def test_slow_commit_holds_the_request_before_it_commits_and_answers(served: Served) -> None:
    served.world.add_fault("refund", "slow_commit")
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(served.post, "/payments/refund", REFUND, "op-1")
        served.gate.wait_reached()
        assert served.get("/payments/operations/op-1").status_code == 404
        assert served.post("/payments/refund", REFUND, "op-1").status_code == 409
        served.gate.opened.set()
        assert first.result(timeout=10).status_code == 200
    assert served.gate.waited == [SLOW_COMMIT_SECONDS]
    assert served.changes() == [("payments", "refund", "op-1")]


def test_a_lookup_that_fails_closes_the_connection_without_a_reply(served: Served) -> None:
    served.post("/payments/refund", REFUND, "op-1", **{"Ratchet-Effect": "request_refund"})
    served.world.add_fault("request_refund", "lookup_fails")
    with pytest.raises(httpx.RemoteProtocolError):
        served.get("/payments/operations/op-1", **{"Ratchet-Effect": "request_refund"})
    assert served.get("/payments/operations/op-1").status_code == 200


def test_a_fault_reaches_only_the_effect_the_ratchet_effect_header_names(served: Served) -> None:
    served.world.add_fault("request_refund", "refuse", times=5)
    assert served.post("/payments/refund", REFUND, "op-1").status_code == 200
    refused = served.post(
        "/payments/refund", REFUND, "op-2", **{"Ratchet-Effect": "request_refund"}
    )
    assert refused.status_code == 400
    assert served.changes() == [("payments", "refund", "op-1")]


def test_a_port_in_use_is_a_usage_error(served: Served) -> None:
    port = int(served.url.rsplit(":", 1)[1])
    with pytest.raises(UsageError, match=f"cannot serve the practice world on 127.0.0.1:{port}"):
        PracticeServer(served.world, "127.0.0.1", port)


# -- as a command ----------------------------------------------------------------------------------


def test_ratchet_practice_serve_serves_the_commands_practice_world_until_sigterm(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "RATCHET_HOME": str(tmp_path / "home")}
    env.pop("RATCHET_DB", None)

    def ratchet(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [RATCHET, *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=60
        )

    server = subprocess.Popen(
        [RATCHET, "practice", "serve", "--port", "0", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=ROOT,
        text=True,
    )
    try:
        assert server.stdout is not None
        ready = json.loads(server.stdout.readline())
        assert ready["practice_world"] == str(tmp_path / "home" / "practice.db")
        world = PracticeWorld(ready["practice_world"])
        world.seed(
            {"orders": [ORDER], "faults": [{"effect": "refund", "kind": "timeout_after_write"}]}
        )
        with httpx.Client(base_url=ready["url"], timeout=10) as client:
            with pytest.raises(httpx.ReadError):
                client.post("/payments/refund", json=REFUND, headers={"Idempotency-Key": "op-1"})
            found = client.get("/payments/operations/op-1")
        assert found.json()["refund_id"] == "re_op-1"
        shown = json.loads(ratchet("effects", "--json").stdout)
        assert [(c["operation"], c["operation_id"]) for c in shown["changes"]] == [
            ("refund", "op-1")
        ]
        server.send_signal(signal.SIGTERM)
        _, err = server.communicate(timeout=10)
        assert server.returncode == 0, err
        assert err.splitlines()[-1] == "stopped"
        assert "Traceback" not in err
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
