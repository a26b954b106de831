"""An effect an adapter escalates to a person, and a provider's ``Retry-After``, in the engine.

The refund and the booking saga run over the real HTTP adapter against a small provider on a
local socket. A key used with other arguments (422) is not the row's ``refused``: the run waits
in the operator queue with the status and the body as evidence, its operation recorded
``unknown`` (a change may exist), and a compensation looks it up before deciding. A binding the
provider rejects (401) waits there too, its operation still ``pending``: nothing was made. Both
go on with ``ratchet ops`` once the cause is fixed, under the same operation ID.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ratchet_runner.adapters.http import HttpAdapter
from ratchet_runner.clock import FakeClock
from ratchet_runner.engine.compensation import outcome_unresolved
from ratchet_runner.engine.controls import operate
from ratchet_runner.engine.deciding import decide
from ratchet_runner.engine.operator_queue import queue
from ratchet_runner.engine.runner import Runner
from ratchet_runner.spec.model import Adapter as AdapterSpec
from ratchet_runner.store.records import RunRecord
from ratchet_runner.store.store import Store
from tests.conftest import spec_and_text
from tests.integration.local_http import LocalServer, Received, Reply


class Provider:
    """Payments, an airline and a hotel chain behind one local HTTP server. Each change is
    kept under its idempotency key; ``answer`` overrides the reply to the next calls of a
    path prefix (a list, used up in order)."""

    def __init__(self) -> None:
        self.changes: dict[str, dict[str, Any]] = {}  # key -> the change's record
        self.answer: dict[str, list[Reply | Callable[[Received], Reply]]] = {}
        self.ids = itertools.count(1)
        self.server = LocalServer(self.respond)

    def respond(self, received: Received) -> Reply:
        path = received.path
        if path.startswith("/keys/"):  # the lookup endpoint of every service
            change = self.changes.get(path.removeprefix("/keys/"))
            return Reply(200, {"change": change}) if change else Reply(404, {"code": "no_key"})
        for prefix, replies in self.answer.items():
            if path.startswith(prefix) and replies:
                reply = replies.pop(0)
                return reply(received) if callable(reply) else reply
        key = received.headers["idempotency-key"]
        if key not in self.changes:
            field = "refund_id" if path.startswith("/refunds") else "hold_id"
            if path.startswith("/releases"):
                field = "release_id"
            self.changes[key] = {field: f"ch_{next(self.ids)}", "path": path}
        return Reply(201, self.changes[key])

    def paths(self) -> list[str]:
        return [r.path for r in self.server.received]


def binding(url: str, operations: dict[str, str], receipts: dict[str, str]) -> dict[str, Any]:
    return {
        "base_url": url,
        "operations": {
            op: {"path": path, "receipt_field": receipts[op]} for op, path in operations.items()
        },
        "lookups": {
            name: {
                "by": "endpoint",
                "path": "/keys/{operation_id}",
                "receipt": "/change",
                "receipt_field": field,
                "not_found_pointer": "/code",
                "not_found_equals": "no_key",
            }
            for name, field in (("lookup_refund", "refund_id"), ("lookup", "hold_id"))
        },
    }


@pytest.fixture
def provider() -> Iterator[Provider]:
    made = Provider()
    yield made
    made.server.close()


@pytest.fixture
def runner(store: Store, provider: Provider) -> Iterator[Runner]:
    url = provider.server.url
    refunds = binding(url, {"refund": "/refunds/{order}"}, {"refund": "refund_id"})
    travel = binding(
        url,
        {"hold_flight": "/holds/flights", "hold_hotel": "/holds/hotels", "release": "/releases"},
        {"hold_flight": "hold_id", "hold_hotel": "hold_id", "release": "release_id"},
    )
    adapters = {
        "payments": HttpAdapter.from_data(refunds, name="payments"),
        "airline": HttpAdapter.from_data(travel, name="airline"),
        "hotels": HttpAdapter.from_data(travel, name="hotels"),
        # never called (no case reaches the confirmation), but a run is started only when every
        # adapter of its spec can be made
        "agency": HttpAdapter.from_data(travel, name="agency"),
    }
    for name in ("hotels", "airline"):  # a release names its own hold: no path argument
        assert adapters[name].settings.operations["release"].arguments == "json"

    def factory(spec: AdapterSpec) -> HttpAdapter:
        return adapters[spec.name]

    yield Runner(store, factory, FakeClock())
    for adapter in adapters.values():
        adapter.close()


def approved_refund(runner: Runner) -> RunRecord:
    spec, text = spec_and_text("refund")
    run, _ = runner.start(spec, text, spec.examples["T-90104"].input)
    assert decide(runner, run.id, "approve", "agent-7", "agent").changed
    return runner.advance(run.id)


def events(store: Store, run: RunRecord, kind: str) -> list[dict[str, Any]]:
    return [e.data for e in store.history(run.id) if e.kind == kind]


def test_a_key_used_with_other_arguments_goes_to_a_person_not_to_the_refused_row(
    runner: Runner, provider: Provider, store: Store
) -> None:
    provider.answer["/refunds"] = [Reply(422, {"error": "key reused with other parameters"})]
    run = approved_refund(runner)
    assert (run.state, run.status) == ("refunding", "needs_person")  # not the refused row's
    assert provider.paths() == ["/refunds/LK-793996"]  # no retry, no lookup: a person decides
    (op,) = store.operations(run.id)
    assert op.status == "unknown"
    assert outcome_unresolved(op)
    assert "other arguments" in str(op.last_error)
    assert events(store, run, "refused") == []
    (escalated,) = events(store, run, "escalated")
    assert escalated["possibly_applied"] is True
    assert escalated["evidence"]["status"] == 422
    (item,) = queue(runner)
    assert item["run"] == run.id
    assert f"ratchet ops retry {run.id}" in item["operator_action"]
    assert "HTTP 422" in item["operator_action"]
    (shown,) = item["evidence"]["escalated"]
    assert shown["evidence"]["status"] == 422
    assert "key reused with other parameters" in shown["evidence"]["body"]
    assert [f["status"] for f in item["evidence"]["failed"]] == ["unknown"]


def test_an_operator_retry_after_an_escalation_looks_the_key_up_first_and_makes_one_refund(
    runner: Runner, provider: Provider, store: Store
) -> None:
    provider.answer["/refunds"] = [Reply(422, {"error": "key reused"})]
    run = approved_refund(runner)
    done = operate(runner, run.id, "retry", "ops-1", "payments_ops")
    assert (done.run.state, done.run.status) == ("refunded", "done")
    (op,) = store.operations(run.id)
    assert provider.paths() == [
        "/refunds/LK-793996",
        f"/keys/{op.operation_id}",  # reconciled first: not on record
        "/refunds/LK-793996",
    ]
    assert len(provider.changes) == 1
    assert {r.headers["idempotency-key"] for r in provider.server.received[::2]} == {
        op.operation_id
    }


def test_a_binding_the_provider_rejects_waits_for_a_person_with_nothing_made(
    runner: Runner, provider: Provider, store: Store
) -> None:
    provider.answer["/refunds"] = [Reply(401, {"error": "invalid api key"})]
    run = approved_refund(runner)
    assert (run.state, run.status) == ("refunding", "needs_person")
    (op,) = store.operations(run.id)
    assert (op.status, op.attempts) == ("pending", 1)  # a call on record, nothing made
    (escalated,) = events(store, run, "escalated")
    assert escalated["possibly_applied"] is False
    assert "may have been made" not in queue(runner)[0]["operator_action"]
    done = operate(runner, run.id, "retry", "ops-1", "payments_ops")
    assert done.run.state == "refunded"
    assert len(provider.changes) == 1


def test_a_compensation_looks_up_an_escalated_effect_before_undoing_it(
    runner: Runner, provider: Provider, store: Store
) -> None:
    """The hotel hold was made under its key, but the reply said the key was used with other
    arguments: the saga's undo asks the provider, finds it, and releases it, then the flight."""
    spec, text = spec_and_text("booking")
    hotel_made_then_422 = Reply(422, {"error": "key reused"})

    def hold_hotel_then_say_422(received: Received) -> Reply:
        provider.answer.pop("/holds/hotels", None)
        made = provider.respond(received)  # the hold is made under the key...
        assert made.status == 201
        return hotel_made_then_422  # ...and the reply says otherwise

    real = provider.server.respond
    provider.server.respond = lambda r: (
        hold_hotel_then_say_422(r) if r.path == "/holds/hotels" else real(r)
    )
    run, _ = runner.start(spec, text, spec.examples["happy"].input)
    run = runner.advance(run.id)
    assert (run.state, run.status) == ("holding_hotel", "needs_person")
    provider.server.respond = real
    compensated = operate(runner, run.id, "compensate", "ops-1", "travel_ops")
    assert (compensated.run.state, compensated.run.status) == ("released", "done")
    ops = {o.effect: o for o in store.operations(run.id)}
    assert ops["hold_hotel"].status == "done"  # found by the lookup, then undone
    assert "reconcile_found" in [e.kind for e in store.history(run.id)]
    releases = [r.json()["hold_id"] for r in provider.server.received if r.path == "/releases"]
    holds = [
        provider.changes[ops[e].operation_id]["hold_id"] for e in ("hold_hotel", "hold_flight")
    ]
    assert releases == holds  # the hotel, then the flight: newest first


def test_a_retry_waits_at_least_what_the_provider_asked_within_the_retry_policy(
    runner: Runner, provider: Provider, store: Store
) -> None:
    provider.answer["/refunds"] = [
        Reply(503, {"error": "later"}, {"Retry-After": "4"}),
        Reply(429, {"error": "later"}, {"Retry-After": "3600"}),
    ]
    run = approved_refund(runner)
    backoffs = [e["seconds"] for e in events(store, run, "backoff")]
    assert backoffs[0] >= 4  # the refund's first back-off is at most 1 s by itself
    assert backoffs[1:] == [30]  # an hour asked; the policy's max_backoff is 30 s
    assert run.state == "refunding"  # 30 s is too long to wait inline: a timer takes it on
    assert events(store, run, "retry_scheduled")


def test_no_secret_reaches_the_store_even_when_the_provider_echoes_the_request(
    store: Store, provider: Provider
) -> None:
    secret = "sk_live_SENTINEL_store_4b1d"
    data = binding(provider.server.url, {"refund": "/refunds/{order}"}, {"refund": "refund_id"})
    data["auth"] = {"type": "bearer", "token_env": "PAY_TOKEN"}
    echo = {"error": "key reused", "headers": "", "raw": ""}

    def echoing(received: Received) -> Reply:
        raw = received.raw.decode("latin-1")
        return Reply(422, {**echo, "headers": received.headers, "raw": raw})

    provider.answer["/refunds"] = [echoing]
    with HttpAdapter.from_data(data, name="payments", environ={"PAY_TOKEN": secret}) as adapter:
        runner = Runner(store, lambda spec: adapter, FakeClock())
        run = approved_refund(runner)
        assert run.status == "needs_person"
        stored = json.dumps(
            [
                [vars(e) for e in store.history(run.id)],
                [vars(o) for o in store.operations(run.id)],
                vars(store.get_run(run.id)),
                queue(runner),
            ],
            default=str,
        )
    assert provider.server.received[0].headers["authorization"] == f"Bearer {secret}"
    assert "[redacted]" in stored
    assert "SENTINEL" not in stored
