"""The HTTP adapter against a real local server: the classification table, row by row.

Every case sends a real request over a real socket to :class:`LocalServer` on 127.0.0.1 and
checks the outcome the adapter classifies it as (``docs/reference/adapters.md``, "The HTTP
adapter"): transport failures by their phase, statuses by the table and the binding's remaps,
the one deadline over a whole call, the lookups, and secrets kept out of every outcome.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ratchet_runner.adapters.base import (
    Ambiguous,
    Call,
    Done,
    Escalate,
    Found,
    LookupFailed,
    NotFound,
    Refused,
    Semantics,
    Transient,
)
from ratchet_runner.adapters.http import HttpAdapter
from ratchet_runner.errors import BindingError
from tests.integration.local_http import (
    CLOSE,
    RESET,
    SILENT,
    Drip,
    LocalServer,
    Received,
    Reply,
    Respond,
    Truncated,
    free_port,
    self_signed,
)

SECRET = "sk_live_SENTINEL_7f3a9c"  # the token a leak would show
REFUND_ARGS = {"order": "LK-793996", "amount": 9.95, "currency": "CAD", "reason": "RFD-LATE"}


def settings(url: str, **extra: Any) -> dict[str, Any]:
    """A binding for a payment provider at ``url``: a refund, a lookup endpoint, a listing."""
    return {
        "base_url": url,
        "operations": {
            "refund": {"method": "POST", "path": "/refunds/{order}", "receipt_field": "refund_id"},
            "label": {
                "method": "GET",
                "path": "/labels",
                "receipt": "/data/id",
                "receipt_field": "label_id",
            },
        },
        "lookups": {
            "lookup_refund": {
                "by": "endpoint",
                "path": "/refunds/by-key/{operation_id}",
                "receipt": "/refund",
                "receipt_field": "refund_id",
            },
            "lookup_label": {
                "by": "listing",
                "path": "/labels/recent",
                "items": "/data",
                "reference": "/metadata/reference",
                "receipt_field": "label_id",
                "settle": 30,
            },
        },
        **extra,
    }


def refund(operation_id: str = "op-1", timeout: float = 5.0) -> Call:
    return Call("refund", operation_id, REFUND_ARGS, effect="request_refund", timeout=timeout)


@pytest.fixture
def serve() -> Iterator[Any]:
    """Start servers for a test (``serve(respond)``); all are closed after it."""
    servers: list[LocalServer] = []

    def start(respond: Respond, tls: tuple[Path, Path] | None = None) -> LocalServer:
        server = LocalServer(respond, tls)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


def call_once(serve: Any, behaviour: Any, **extra: Any) -> tuple[Any, LocalServer]:
    """One refund call to a server that behaves as ``behaviour``; the outcome and the server."""
    server = serve(lambda received: behaviour)
    with HttpAdapter.from_data(settings(server.url, **extra)) as adapter:
        return adapter.call(refund()), server


# -- a request as the provider sees it ------------------------------------------------------------


def test_a_call_sends_the_operation_id_in_the_idempotency_header_and_the_args_as_json(
    serve: Any,
) -> None:
    outcome, server = call_once(serve, Reply(201, {"refund_id": "re_1", "amount": 9.95}))
    assert outcome == Done({"refund_id": "re_1", "amount": 9.95})
    (received,) = server.received
    assert (received.method, received.path) == ("POST", "/refunds/LK-793996")
    assert received.headers["idempotency-key"] == "op-1"
    assert received.headers["content-type"] == "application/json"
    assert received.json() == REFUND_ARGS


def test_the_header_name_is_the_bindings_and_query_arguments_go_in_the_query(serve: Any) -> None:
    server = serve(lambda r: Reply(200, {"data": {"id": "lb_9"}}))
    with HttpAdapter.from_data(settings(server.url, idempotency_header="X-Request-Key")) as adapter:
        outcome = adapter.call(Call("label", "op-2", {"order": "LK 1/2", "skus": ["A", "B"]}))
    assert outcome == Done({"label_id": "lb_9"})  # a plain value at the pointer is the field
    (received,) = server.received
    assert received.headers["x-request-key"] == "op-2"
    assert "idempotency-key" not in received.headers
    assert "ratchet-effect" not in received.headers  # no effect header unless the binding asks
    assert (received.method, received.path, received.body) == ("GET", "/labels", b"")
    assert received.query == {"order": "LK 1/2", "skus": "B"}  # repeated: the last one here


def test_the_effect_header_carries_the_effects_name_when_the_binding_names_one(
    serve: Any,
) -> None:
    server = serve(lambda r: Reply(201, {"refund_id": "re_1"}))
    with HttpAdapter.from_data(settings(server.url, effect_header="Ratchet-Effect")) as adapter:
        adapter.call(Call("refund", "op-3", dict(REFUND_ARGS), effect="request_refund"))
    (received,) = server.received
    assert received.headers["ratchet-effect"] == "request_refund"


def test_path_arguments_are_url_encoded(serve: Any) -> None:
    server = serve(lambda r: Reply(200, {"refund_id": "re_1"}))
    with HttpAdapter.from_data(settings(server.url)) as adapter:
        adapter.call(Call("refund", "op-3", {**REFUND_ARGS, "order": "LK/1?x=2"}))
    raw = server.received[0].raw.split(b"\r\n")[0]
    assert raw == b"POST /refunds/LK%2F1%3Fx%3D2 HTTP/1.1"


def test_an_operation_or_argument_the_binding_lacks_or_a_bad_header_is_escalated_unsent(
    serve: Any,
) -> None:
    server = serve(lambda r: Reply(200, {"refund_id": "re_1"}))
    with HttpAdapter.from_data(settings(server.url)) as adapter:
        unknown = adapter.call(Call("charge", "op-4", {}))
        missing = adapter.call(Call("refund", "op-5", {"amount": 1}))
    for outcome in (unknown, missing):
        assert isinstance(outcome, Escalate)
        assert outcome.possibly_applied is False
    assert "'charge'" in unknown.reason
    assert "'order'" in missing.reason
    with HttpAdapter.from_data(settings(server.url, headers={"X-Shop": "café ☕"})) as adapter:
        unsendable = adapter.call(refund())
    assert isinstance(unsendable, Escalate)
    assert unsendable.possibly_applied is False
    assert "UnicodeEncodeError" in unsendable.reason
    assert server.received == []


# -- transport: only the connect phase proves nothing was sent ------------------------------------


def test_connection_refused_is_transient() -> None:
    with HttpAdapter.from_data(settings(f"http://127.0.0.1:{free_port()}")) as adapter:
        outcome = adapter.call(refund())
    assert isinstance(outcome, Transient)
    assert "nothing was sent" in outcome.reason


def test_waiting_for_a_pooled_connection_past_the_deadline_is_transient(serve: Any) -> None:
    server = serve(lambda r: SILENT)
    with HttpAdapter.from_data(settings(server.url, max_connections=1)) as adapter:
        first = threading.Thread(target=adapter.call, args=(refund("op-a", timeout=5),))
        first.start()
        assert server.arrived.wait(5)  # the one connection is taken by the first call
        outcome = adapter.call(refund("op-b", timeout=0.3))
        server.close()  # the silent server lets the first call go
        first.join(10)
    assert isinstance(outcome, Transient)
    assert "PoolTimeout" in outcome.reason
    assert [r.headers["idempotency-key"] for r in server.received] == ["op-a"]


@pytest.mark.parametrize(
    ("behaviour", "error"),
    [
        (RESET, "ReadError"),
        (CLOSE, "RemoteProtocolError"),
        (Truncated(b'{"refund_id": "re_'), "RemoteProtocolError"),
    ],
    ids=["reset after the request was read", "closed without a reply", "truncated body"],
)
def test_a_failure_after_the_request_was_sent_is_ambiguous(
    serve: Any, behaviour: Any, error: str
) -> None:
    outcome, server = call_once(serve, behaviour)
    assert isinstance(outcome, Ambiguous), outcome
    assert error in outcome.reason
    assert len(server.received) == 1  # the request did arrive: it may have been made


def test_a_server_that_never_answers_is_ambiguous_at_the_deadline(serve: Any) -> None:
    server = serve(lambda r: SILENT)
    started = time.monotonic()
    with HttpAdapter.from_data(settings(server.url)) as adapter:
        outcome = adapter.call(refund(timeout=0.5))
    assert isinstance(outcome, Ambiguous)
    assert "ReadTimeout" in outcome.reason
    assert time.monotonic() - started < 3


@pytest.mark.parametrize("headers_too", [False, True], ids=["body", "status line and headers"])
def test_a_reply_dripped_past_the_deadline_is_ambiguous_at_the_deadline(
    serve: Any, headers_too: bool
) -> None:
    """httpx's timeouts are per read: a byte every 50 ms never trips them. The deadline is one
    over the whole call: the 540-byte reply would take 27 s; the call ends at about 0.5 s."""
    server = serve(lambda r: Drip(interval=0.05, headers_too=headers_too))
    started = time.monotonic()
    with HttpAdapter.from_data(settings(server.url)) as adapter:
        outcome = adapter.call(refund(timeout=0.5))
    elapsed = time.monotonic() - started
    assert isinstance(outcome, Ambiguous), outcome
    assert "deadline" in outcome.reason
    assert elapsed < 3, f"the call took {elapsed:.1f} s for a deadline of 0.5 s"


def test_a_tls_certificate_the_client_does_not_trust_is_a_configuration_fault(
    serve: Any, tmp_path: Path
) -> None:
    cert, key = self_signed(tmp_path)
    server = serve(lambda r: Reply(200, {"refund_id": "re_tls"}), tls=(cert, key))
    with HttpAdapter.from_data(settings(server.url)) as adapter:
        untrusted = adapter.call(refund())
    assert isinstance(untrusted, Escalate)
    assert untrusted.possibly_applied is False
    assert "certificate" in untrusted.reason
    assert server.received == []  # nothing was sent
    with HttpAdapter.from_data(settings(server.url, ca_file=str(cert))) as adapter:
        assert adapter.call(refund()) == Done({"refund_id": "re_tls"})
    with HttpAdapter.from_data(settings(server.url, verify_tls=False)) as adapter:
        assert adapter.call(refund()) == Done({"refund_id": "re_tls"})


# -- statuses --------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [429, 503, 408, 425])
def test_statuses_that_say_try_later_are_transient_with_retry_after(
    serve: Any, status: int
) -> None:
    outcome, _ = call_once(serve, Reply(status, {"error": "slow down"}, {"Retry-After": "7"}))
    assert isinstance(outcome, Transient)
    assert outcome.retry_after == 7.0
    assert f"HTTP {status}" in outcome.reason


def test_retry_after_may_be_an_http_date_and_may_be_absent(serve: Any) -> None:
    later = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 120))
    dated, _ = call_once(serve, Reply(503, b"", {"Retry-After": later}))
    assert isinstance(dated, Transient)
    assert dated.retry_after is not None
    assert 100 < dated.retry_after <= 120
    bare, _ = call_once(serve, Reply(429, b""))
    assert isinstance(bare, Transient)
    assert bare.retry_after is None


@pytest.mark.parametrize("status", [500, 502, 504, 409, 507, 302])
def test_statuses_that_do_not_say_whether_it_was_made_are_ambiguous(
    serve: Any, status: int
) -> None:
    outcome, _ = call_once(serve, Reply(status, {"error": "busy"}))
    assert isinstance(outcome, Ambiguous)
    assert f"HTTP {status}" in outcome.reason


@pytest.mark.parametrize(
    "body",
    [b'{"refund_id": "re_1"', b"<html>OK</html>", b"", b"\xff\xfe"],
    ids=["cut JSON", "HTML", "empty", "not UTF-8"],
)
def test_a_success_with_malformed_json_is_ambiguous(serve: Any, body: bytes) -> None:
    outcome, _ = call_once(serve, Reply(200, body))
    assert isinstance(outcome, Ambiguous)
    assert "malformed JSON" in outcome.reason


@pytest.mark.parametrize(
    "body",
    [b'{"refund_id": NaN}', b'{"refund_id": Infinity}', b"[" * 100_000 + b"]" * 100_000],
    ids=["NaN", "Infinity", "nested 100,000 deep"],
)
def test_a_success_that_is_no_json_python_would_accept_is_malformed_and_ambiguous(
    serve: Any, body: bytes
) -> None:
    """Python's JSON reader takes ``NaN`` (which JSON has not) and fails on deep nesting with a
    RecursionError: both replies are malformed, reconciled as any other, not a step that fails
    or an adapter that raised."""
    outcome, _ = call_once(serve, Reply(200, body))
    assert isinstance(outcome, Ambiguous)
    assert "malformed JSON" in outcome.reason


@pytest.mark.parametrize("body", [{"id": "re_1"}, {"refund_id": ""}, ["re_1"], {"refund": None}])
def test_a_success_without_the_receipt_is_ambiguous(serve: Any, body: Any) -> None:
    outcome, _ = call_once(serve, Reply(200, body))
    assert isinstance(outcome, Ambiguous)
    assert "without the receipt" in outcome.reason


def test_a_key_used_with_other_arguments_goes_to_a_person_as_possibly_applied(
    serve: Any,
) -> None:
    body = {"error": "idempotency key reused with different parameters"}
    outcome, _ = call_once(serve, Reply(422, body))
    assert isinstance(outcome, Escalate)
    assert outcome.possibly_applied is True
    assert outcome.evidence["status"] == 422
    assert json.loads(outcome.evidence["body"]) == body
    assert outcome.evidence["request"] == "POST /refunds/LK-793996"


@pytest.mark.parametrize("status", [401, 403, 404])
def test_credentials_or_paths_the_provider_rejects_are_a_configuration_fault(
    serve: Any, status: int
) -> None:
    outcome, _ = call_once(serve, Reply(status, {"error": "nope"}))
    assert isinstance(outcome, Escalate)
    assert outcome.possibly_applied is False
    assert outcome.evidence["status"] == status


@pytest.mark.parametrize("status", [400, 402, 410, 451])
def test_any_other_4xx_is_refused_with_the_status_and_the_body(serve: Any, status: int) -> None:
    outcome, _ = call_once(serve, Reply(status, {"error": "amount exceeds the charge"}))
    assert isinstance(outcome, Refused)
    assert outcome.evidence["status"] == status
    assert "amount exceeds the charge" in outcome.evidence["body"]


def test_refusal_evidence_is_bounded(serve: Any) -> None:
    outcome, _ = call_once(serve, Reply(400, b"x" * 50_000))
    assert isinstance(outcome, Refused)
    assert 2000 <= len(outcome.evidence["body"]) < 2100
    assert "48000 more characters" in outcome.evidence["body"]
    assert len(outcome.reason) < 500


def test_a_remap_classifies_a_providers_own_statuses_first(serve: Any) -> None:
    """Stripe answers a key reused with other parameters with 400 ``idempotency_error``."""
    remap = [
        {
            "status": 400,
            "body_pointer": "/error/type",
            "body_equals": "idempotency_error",
            "outcome": "key_reused",
        },
        {
            "status": 404,
            "body_pointer": "/error/code",
            "body_equals": "no_order",
            "outcome": "refused",
        },
    ]
    reused, _ = call_once(serve, Reply(400, {"error": {"type": "idempotency_error"}}), remap=remap)
    assert isinstance(reused, Escalate)
    assert reused.possibly_applied is True
    invalid, _ = call_once(serve, Reply(400, {"error": {"type": "invalid_request"}}), remap=remap)
    assert isinstance(invalid, Refused)
    no_order, _ = call_once(serve, Reply(404, {"error": {"code": "no_order"}}), remap=remap)
    assert isinstance(no_order, Refused)
    no_path, _ = call_once(serve, Reply(404, b"Not Found"), remap=remap)
    assert isinstance(no_path, Escalate)
    assert no_path.possibly_applied is False


def test_a_reply_too_large_to_read_is_ambiguous(serve: Any) -> None:
    outcome, _ = call_once(serve, Reply(200, b"[" + b"0," * (600 * 1024) + b"0]"))
    assert isinstance(outcome, Ambiguous)
    assert "larger than" in outcome.reason


# -- lookups -------------------------------------------------------------------------------------


def lookup_with(serve: Any, behaviour: Any, name: str = "lookup_refund", **extra: Any) -> Any:
    server = serve(lambda received: behaviour)
    with HttpAdapter.from_data(settings(server.url, **extra)) as adapter:
        return adapter.lookup(name, "op/7", "request_refund"), server


def test_a_lookup_endpoint_finds_the_change_under_the_operation_id(serve: Any) -> None:
    found, server = lookup_with(serve, Reply(200, {"refund": {"refund_id": "re_7"}}))
    assert found == Found({"refund_id": "re_7"})
    (received,) = server.received
    assert (received.method, received.path) == ("GET", "/refunds/by-key/op%2F7")
    assert "idempotency-key" not in received.headers


def test_a_lookup_endpoints_404_is_not_found(serve: Any) -> None:
    result, _ = lookup_with(serve, Reply(404, {"error": "no such key"}))
    assert result == NotFound()


def test_a_lookup_may_require_the_providers_not_found_code_to_tell_it_from_a_wrong_path(
    serve: Any,
) -> None:
    extra = settings("http://x")["lookups"]
    extra["lookup_refund"] |= {"not_found_pointer": "/code", "not_found_equals": "no_such_key"}
    missing, _ = lookup_with(serve, Reply(404, {"code": "no_such_key"}), lookups=extra)
    assert missing == NotFound()
    wrong_path, _ = lookup_with(serve, Reply(404, b"<h1>Not Found</h1>"), lookups=extra)
    assert isinstance(wrong_path, LookupFailed)


@pytest.mark.parametrize(
    "behaviour",
    [Reply(500, {"error": "db down"}), Reply(503, b""), Reply(200, {"refund": {}}), RESET],
    ids=["500", "503", "no receipt", "reset"],
)
def test_a_lookup_that_cannot_tell_fails(serve: Any, behaviour: Any) -> None:
    result, _ = lookup_with(serve, behaviour)
    assert isinstance(result, LookupFailed)


def _every_change() -> dict[str, Any]:
    lookups = settings("http://x")["lookups"]
    lookups["lookup_refund"] |= {
        "path": "/refunds/changes/{operation_id}",
        "receipt": "/changes",
        "every_change": True,
    }
    return lookups


def test_an_endpoint_that_lists_every_change_reports_a_second_one_as_a_duplicate(
    serve: Any,
) -> None:
    twice = Reply(200, {"changes": [{"refund_id": "re_1"}, {"refund_id": "re_2"}]})
    found, server = lookup_with(serve, twice, lookups=_every_change())
    assert found == Found({"refund_id": "re_1"}, ({"refund_id": "re_2"},))
    assert server.received[0].path == "/refunds/changes/op%2F7"
    once, _ = lookup_with(
        serve, Reply(200, {"changes": [{"refund_id": "re_1"}]}), lookups=_every_change()
    )
    assert once == Found({"refund_id": "re_1"})
    none, _ = lookup_with(serve, Reply(200, {"changes": []}), lookups=_every_change())
    assert none == NotFound()


@pytest.mark.parametrize(
    "body",
    [{"changes": {"refund_id": "re_1"}}, {"changes": [{"refund_id": "re_1"}, {"id": 2}]}, {}],
    ids=["no list", "an item without the receipt", "nothing"],
)
def test_an_endpoint_of_every_change_that_cannot_tell_fails(serve: Any, body: Any) -> None:
    result, _ = lookup_with(serve, Reply(200, body), lookups=_every_change())
    assert isinstance(result, LookupFailed)


def test_what_a_lookup_sees_is_declared_for_the_binding_check() -> None:
    every = HttpAdapter.from_data(settings("http://x", lookups=_every_change()))
    plain = HttpAdapter.from_data(settings("http://x"))
    with every, plain:
        assert every.semantics("refund", "lookup_refund") == Semantics(sees_every_change=True)
        assert plain.semantics("refund", "lookup_refund") == Semantics(sees_every_change=False)


def test_a_lookup_the_binding_lacks_fails_without_sending(serve: Any) -> None:
    result, server = lookup_with(serve, Reply(200, {}), name="lookup_charge")
    assert isinstance(result, LookupFailed)
    assert server.received == []


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def listing(items: list[dict[str, Any]]) -> Reply:
    return Reply(200, {"data": items, "has_more": False})


def test_a_listing_finds_the_change_whose_reference_is_the_operation_id(serve: Any) -> None:
    items = [
        {"label_id": "lb_1", "metadata": {"reference": "op-other"}},
        {"label_id": "lb_2", "metadata": {"reference": "op/7"}},
    ]
    found, _ = lookup_with(serve, listing(items), name="lookup_label")
    assert found == Found({"label_id": "lb_2", "metadata": {"reference": "op/7"}})


def test_a_listing_that_does_not_list_it_is_not_found_and_says_how_far_it_may_lag(
    serve: Any,
) -> None:
    """A listing may lag behind a change: the adapter says "none listed" as it is, and says how
    far it may lag (its ``settle``), which the runner waits out from the time of the attempt,
    kept with the run, before it believes it. (The adapter once judged the lag by when it last
    sent the ID itself, and counted an ID it had not sent from its own start, so a command run
    after the settle time, in a process of its own, was never past it.)"""
    server = serve(lambda r: listing([]))
    with HttpAdapter.from_data(settings(server.url)) as adapter:
        assert adapter.lookup("lookup_label", "op-9") == NotFound()
        assert adapter.semantics("label", "lookup_label") == Semantics(
            settle=30, sees_every_change=True
        )
        # an endpoint does not lag, and answers with one change unless it lists every one
        assert adapter.semantics("refund", "lookup_refund") == Semantics(sees_every_change=False)


def orders(url: str, **lookup: Any) -> dict[str, Any]:
    """A warehouse whose listing of labels echoes no operation ID: items are matched on the
    operation's arguments, filtered by order, in pages."""
    return {
        "base_url": url,
        "operations": {"label": {"path": "/labels", "receipt_field": "label_id"}},
        "lookups": {
            "lookup": {
                "by": "listing",
                "path": "/labels",
                "items": "/data",
                "match": {"/order": "order", "/sku": "sku"},
                "filter": {"order_id": "order"},
                "settle": 2,
                **lookup,
            }
        },
    }


LABEL_ARGS = {"order": "LK-1", "sku": "CAN-5"}


def pages(*pages: list[dict[str, Any]], cursor: bool = False) -> Any:
    """A listing served in ``pages``: each reply points at the next (a cursor, or a link)."""

    def respond(received: Any) -> Reply:
        at = int(received.query.get("cursor" if cursor else "page", "0"))
        body: dict[str, Any] = {"data": pages[at]}
        if at + 1 < len(pages):
            body["next"] = str(at + 1) if cursor else f"/labels?order_id=LK-1&page={at + 1}"
        return Reply(200, body)

    return respond


def test_a_listing_filters_by_the_order_follows_every_page_and_matches_the_arguments(
    serve: Any,
) -> None:
    """A provider that lists by order, pages its results, and echoes no ID: the lookup asks for
    the order's changes, reads every page, and finds the one whose fields are the arguments."""
    other = {"label_id": "lb_1", "order": "LK-1", "sku": "LADDER-3"}
    ours = {"label_id": "lb_2", "order": "LK-1", "sku": "CAN-5"}
    server = serve(pages([other], [], [ours]))
    with HttpAdapter.from_data(orders(server.url, next="/next")) as adapter:
        found = adapter.lookup("lookup", "op-9", "label", args=LABEL_ARGS)
    assert found == Found(ours)
    assert [r.query for r in server.received] == [
        {"order_id": "LK-1"},
        {"order_id": "LK-1", "page": "1"},
        {"order_id": "LK-1", "page": "2"},
    ]


def test_a_listing_paged_by_cursor_sends_the_cursor_back_and_keeps_the_filter(serve: Any) -> None:
    ours = {"label_id": "lb_2", "order": "LK-1", "sku": "CAN-5"}
    server = serve(pages([], [ours], cursor=True))
    with HttpAdapter.from_data(orders(server.url, next="/next", cursor_param="cursor")) as adapter:
        assert adapter.lookup("lookup", "op-9", "label", args=LABEL_ARGS) == Found(ours)
    assert [r.query for r in server.received] == [
        {"order_id": "LK-1"},
        {"order_id": "LK-1", "cursor": "1"},
    ]


def test_a_listing_that_lists_the_change_twice_reports_both_a_duplicate(serve: Any) -> None:
    first = {"label_id": "lb_1", "order": "LK-1", "sku": "CAN-5"}
    second = {"label_id": "lb_2", "order": "LK-1", "sku": "CAN-5"}
    server = serve(pages([first], [second]))
    with HttpAdapter.from_data(orders(server.url, next="/next")) as adapter:
        found = adapter.lookup("lookup", "op-9", "label", args=LABEL_ARGS)
    assert found == Found(first, (second,))


def test_a_listing_with_more_pages_than_it_may_read_cannot_say_not_found(serve: Any) -> None:
    """Not having read it all, a lookup that found nothing cannot say "not made"."""
    server = serve(pages([], [], [], []))
    with HttpAdapter.from_data(orders(server.url, next="/next", max_pages=3)) as adapter:
        result = adapter.lookup("lookup", "op-9", "label", args=LABEL_ARGS)
    assert isinstance(result, LookupFailed)
    assert "max_pages" in result.reason


def test_a_listing_never_follows_a_next_page_on_another_host(serve: Any) -> None:
    server = serve(lambda r: Reply(200, {"data": [], "next": "https://elsewhere.example/x"}))
    with HttpAdapter.from_data(orders(server.url, next="/next")) as adapter:
        result = adapter.lookup("lookup", "op-9", "label", args=LABEL_ARGS)
    assert isinstance(result, LookupFailed)
    assert "another origin" in result.reason
    assert len(server.received) == 1


def test_a_listing_matched_on_arguments_needs_them(serve: Any) -> None:
    server = serve(pages([]))
    with HttpAdapter.from_data(orders(server.url)) as adapter:
        assert isinstance(adapter.lookup("lookup", "op-9", "label"), LookupFailed)
    assert server.received == []


def test_a_listing_must_say_how_its_items_name_the_operation() -> None:
    data = orders("http://x")
    del data["lookups"]["lookup"]["match"]
    with pytest.raises(BindingError, match=r"reference.*match"):
        HttpAdapter.from_data(data)


def travel(url: str, receipt: str = "", **lookup: Any) -> dict[str, Any]:
    """A binding whose one lookup (``lookups.lookup``: an endpoint, or with ``lookup`` given a
    listing) reconciles two operations with different receipt fields, and names none itself."""
    endpoint = {"by": "endpoint", "path": "/ops/{operation_id}", "receipt": receipt}
    return {
        "base_url": url,
        "operations": {
            "hold_flight": {"path": "/holds", "receipt_field": "hold_id"},
            "release": {"path": "/releases", "receipt_field": "release_id"},
        },
        "lookups": {"lookup": lookup or endpoint},
    }


def lookup_shared(serve: Any, behaviour: Any, data: Any = travel) -> Any:
    server = serve(lambda received: behaviour)
    with HttpAdapter.from_data(data(server.url)) as adapter:
        return adapter.lookup("lookup", "op-3", "release_flight")


@pytest.mark.parametrize(
    "body",
    [{"hold_id": "ho_1", "flight": "AC123"}, {"release_id": "rl_1", "hold_id": "ho_1"}],
    ids=["a hold", "a release"],
)
def test_a_lookup_without_a_receipt_field_finds_a_receipt_holding_an_operations_field(
    serve: Any, body: Any
) -> None:
    assert lookup_shared(serve, Reply(200, body)) == Found(body)


@pytest.mark.parametrize("body", [{"id": "x_1"}, {"hold_id": "", "release_id": None}, {}, ["rl_1"]])
def test_a_lookup_without_a_receipt_field_fails_on_a_reply_holding_no_operations_field(
    serve: Any, body: Any
) -> None:
    result = lookup_shared(serve, Reply(200, body))
    assert isinstance(result, LookupFailed)
    assert "'hold_id' or 'release_id'" in result.reason


def test_a_lookup_without_a_receipt_field_takes_a_plain_value_only_for_one_field(
    serve: Any,
) -> None:
    """A plain value cannot say which operation's field it is, unless there is only one."""
    result = lookup_shared(serve, Reply(200, {"id": "rl_1"}), lambda url: travel(url, "/id"))
    assert isinstance(result, LookupFailed)
    assert "give the lookup a receipt_field" in result.reason

    def one_field(url: str) -> dict[str, Any]:
        data = travel(url, "/id")
        del data["operations"]["release"]
        return data

    assert lookup_shared(serve, Reply(200, {"id": "ho_1"}), one_field) == Found({"hold_id": "ho_1"})


def test_a_listing_without_a_receipt_field_finds_the_item_holding_an_operations_field(
    serve: Any,
) -> None:
    def recent(url: str) -> dict[str, Any]:
        return travel(url, by="listing", path="/ops", items="/data", reference="/ref", settle=0)

    items = [{"hold_id": "ho_1", "ref": "op-2"}, {"release_id": "rl_1", "ref": "op-3"}]
    assert lookup_shared(serve, listing(items), recent) == Found(items[1])
    result = lookup_shared(serve, listing([{"id": "rl_1", "ref": "op-3"}]), recent)
    assert isinstance(result, LookupFailed)
    assert "'hold_id' or 'release_id'" in result.reason


def test_a_lookups_own_receipt_field_is_the_only_one_it_takes(serve: Any) -> None:
    def named(url: str) -> dict[str, Any]:
        data = travel(url)
        data["lookups"]["lookup"]["receipt_field"] = "release_id"
        return data

    body = {"release_id": "rl_1"}
    assert lookup_shared(serve, Reply(200, body), named) == Found(body)
    result = lookup_shared(serve, Reply(200, {"hold_id": "ho_1"}), named)
    assert isinstance(result, LookupFailed)
    assert "'release_id'" in result.reason
    assert "'hold_id' or" not in result.reason


def test_a_retry_later_than_the_provider_keeps_keys_is_not_sent(serve: Any) -> None:
    server = serve(lambda r: Reply(503, b""))
    clock = Clock()
    parsed = HttpAdapter.from_data(settings(server.url, key_retention=86400))
    parsed.close()
    with HttpAdapter(parsed.settings, now=clock) as adapter:
        assert isinstance(adapter.call(refund()), Transient)
        clock.now += 86000
        assert isinstance(adapter.call(refund()), Transient)
        clock.now += 500
        late = adapter.call(refund())
    assert isinstance(late, Escalate)
    assert late.possibly_applied is True
    assert "keeps idempotency keys for 86400 s" in late.reason
    assert len(server.received) == 2


# -- secrets -------------------------------------------------------------------------------------


def echo_headers(status: int) -> Respond:
    """A provider that echoes the request's headers in its error body, as some do."""

    def respond(received: Received) -> Reply:
        raw = received.raw.decode("latin-1")
        return Reply(status, {"error": "bad request", "headers": received.headers, "raw": raw})

    return respond


def everything_kept(outcome: Any, adapter: HttpAdapter) -> str:
    return " ".join([repr(outcome), str(outcome), repr(adapter), repr(adapter.settings)])


@pytest.mark.parametrize("status", [400, 401, 422, 500, 503])
def test_a_bearer_token_never_appears_in_an_outcome_even_when_the_provider_echoes_it(
    serve: Any, status: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # httpx's and httpcore's logs too
    server = serve(echo_headers(status))
    auth = {"type": "bearer", "token_env": "PAY_TOKEN"}
    with HttpAdapter.from_data(
        settings(server.url, auth=auth), environ={"PAY_TOKEN": SECRET}
    ) as adapter:
        outcome = adapter.call(refund())
        kept = everything_kept(outcome, adapter)
    assert server.received[0].headers["authorization"] == f"Bearer {SECRET}"  # it was sent
    assert SECRET not in kept
    assert "SENTINEL" not in kept
    assert "[redacted]" in kept
    assert "HTTP Request: POST" in caplog.text
    assert "SENTINEL" not in caplog.text


def test_basic_auth_and_a_signing_key_from_a_file_never_appear_either(
    serve: Any, tmp_path: Path
) -> None:
    (tmp_path / "signing.key").write_text(SECRET + "-hmac\n")
    server = serve(echo_headers(422))
    extra = {
        "auth": {"type": "basic", "username": "shop", "password_env": "PAY_PASSWORD"},
        "signing": {"header": "X-Signature", "key_file": "signing.key", "prefix": "sha256="},
    }
    data = settings(server.url, **extra)
    with HttpAdapter.from_data(
        data, base_dir=tmp_path, environ={"PAY_PASSWORD": SECRET}
    ) as adapter:
        outcome = adapter.call(refund())
        kept = everything_kept(outcome, adapter)
    (received,) = server.received
    expected = hmac.new(f"{SECRET}-hmac".encode(), received.body, hashlib.sha256).hexdigest()
    assert received.headers["x-signature"] == f"sha256={expected}"
    assert received.headers["authorization"].startswith("Basic ")
    assert "SENTINEL" not in kept
    assert received.headers["authorization"].split()[1] not in kept
    assert expected not in kept


def test_a_secret_in_a_receipt_or_a_transport_error_is_redacted(serve: Any) -> None:
    server = serve(lambda r: Reply(200, {"refund_id": "re_1", "note": f"token {SECRET}"}))
    auth = {"type": "bearer", "token_env": "PAY_TOKEN"}
    with HttpAdapter.from_data(
        settings(server.url, auth=auth), environ={"PAY_TOKEN": SECRET}
    ) as adapter:
        done = adapter.call(refund())
    assert done == Done({"refund_id": "re_1", "note": "token [redacted]"})
    url = f"http://127.0.0.1:{free_port()}"
    with HttpAdapter.from_data(
        settings(url, auth=auth, headers={"X-Trace": "abc"}), environ={"PAY_TOKEN": SECRET}
    ) as adapter:
        assert SECRET not in repr(adapter.call(refund()))
        assert SECRET not in repr(adapter.lookup("lookup_refund", "op-1"))


def test_a_call_whose_deadline_has_passed_is_not_sent(serve: Any) -> None:
    """The runner fixes a call's deadline before it commits the attempt: a process paused past it
    must not send the request, which could then reach the provider after the run's next holder
    looked it up and found nothing."""
    server = serve(lambda received: Reply(200, {"refund_id": "re_1"}))
    late = Call("refund", "op-1", REFUND_ARGS, timeout=5.0, deadline=time.monotonic() - 0.01)
    with HttpAdapter.from_data(settings(server.url)) as adapter:
        outcome = adapter.call(late)
    assert isinstance(outcome, Transient)
    assert "nothing was sent" in outcome.reason
    assert server.received == []


def test_a_call_takes_no_longer_than_its_deadline_even_when_its_timeout_is_longer(
    serve: Any,
) -> None:
    server = serve(lambda received: SILENT)
    soon = Call("refund", "op-1", REFUND_ARGS, timeout=30.0, deadline=time.monotonic() + 0.3)
    began = time.monotonic()
    with HttpAdapter.from_data(settings(server.url)) as adapter:
        outcome = adapter.call(soon)
    assert isinstance(outcome, Ambiguous)  # sent, and no reply came by the deadline
    assert time.monotonic() - began < 5


def test_a_key_older_than_the_provider_keeps_is_not_sent_even_by_a_new_process(
    serve: Any,
) -> None:
    """The key's age comes with the call (the runner knows when the operation's first attempt
    was recorded), so an adapter made in a new process, which never sent the ID itself, does
    not send a key the provider has forgotten either."""
    server = serve(lambda r: Reply(200, {"refund_id": "re_1"}))
    with HttpAdapter.from_data(settings(server.url, key_retention=86400)) as adapter:
        old = dataclasses.replace(refund(), key_age=86401.0)
        refused = adapter.call(old)
        fresh = adapter.call(dataclasses.replace(refund("op-2"), key_age=5.0))
    assert isinstance(refused, Escalate)
    assert refused.possibly_applied is True
    assert isinstance(fresh, Done)
    assert len(server.received) == 1
