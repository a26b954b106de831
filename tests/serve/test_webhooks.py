"""Signals from signed webhooks (Standard Webhooks): the signature checked against the reference
library and the specification's test vector, and ``POST /hooks/SENDER`` on a served application
delivering a carrier's webhook to a parcel return waiting for it, exactly once."""

from __future__ import annotations

import base64
import json
import os
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import standardwebhooks
from hypothesis import given, settings
from hypothesis import strategies as st

from ratchet_runner.serve import webhooks
from ratchet_runner.serve.app import MAX_BODY
from ratchet_runner.serve.operators import load_config
from ratchet_runner.serve.service import Service
from ratchet_runner.session import Session
from tests.conftest import ROOT
from tests.conftest import run_cli as run
from tests.serve.serving import serving

PARCEL = ROOT / "tests" / "fixtures" / "parcel.yaml"

# The Standard Webhooks specification's test vector.
VECTOR_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
VECTOR_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
VECTOR_TIMESTAMP = 1614265330
VECTOR_BODY = b'{"test": 2432232314}'
VECTOR_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

OLD_SECRET = "whsec_" + base64.b64encode(b"an old secret of 32 bytes, ok!!!").decode()
NEW_SECRET = "whsec_" + base64.b64encode(b"the new secret, also 32 bytes!!!").decode()


def test_the_specifications_vector_signs_and_verifies() -> None:
    key = webhooks.secret_key(VECTOR_SECRET)
    assert webhooks.sign(key, VECTOR_ID, VECTOR_TIMESTAMP, VECTOR_BODY) == VECTOR_SIGNATURE
    given_headers = {
        "webhook-id": VECTOR_ID,
        "webhook-timestamp": str(VECTOR_TIMESTAMP),
        "webhook-signature": VECTOR_SIGNATURE,
    }
    assert webhooks.verify([key], given_headers, VECTOR_BODY, now=VECTOR_TIMESTAMP + 10) is None
    assert webhooks.verify([key], given_headers, VECTOR_BODY + b" ", VECTOR_TIMESTAMP) == (
        webhooks.BAD_SIGNATURE
    )


@settings(max_examples=200, deadline=None)
@given(
    key=st.binary(min_size=16, max_size=64),
    message_id=st.text(
        alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=40
    ),
    offset=st.integers(min_value=-290, max_value=290),
    body=st.text(max_size=300).map(lambda text: text.encode("utf-8")),
)
def test_signatures_agree_with_the_reference_library(
    key: bytes, message_id: str, offset: int, body: bytes
) -> None:
    """What we sign the reference library verifies, and what it signs we verify."""
    timestamp = int(time.time()) + offset
    reference = standardwebhooks.Webhook(key)
    ours = webhooks.sign(key, message_id, timestamp, body)
    when = datetime.fromtimestamp(timestamp, tz=UTC)
    assert ours == reference.sign(message_id, when, body.decode("utf-8"))
    sent = webhooks.headers([key], message_id, timestamp, body)
    reference.verify(body, sent, json_parse=False)  # raises if it does not verify
    assert webhooks.verify([key], sent, body, time.time()) is None
    tampered = {**sent, "webhook-id": message_id + "x"}
    assert webhooks.verify([key], tampered, body, time.time()) == webhooks.BAD_SIGNATURE


def test_each_refusal_has_its_reason_and_no_header_breaks_the_check() -> None:
    key = webhooks.secret_key(NEW_SECRET)
    old = webhooks.secret_key(OLD_SECRET)
    now = 1_800_000_000
    body = b"{}"
    good = webhooks.headers([key], "msg_1", now, body)

    def why(**changed: str) -> str | None:
        return webhooks.verify([key], {**good, **changed}, body, now)

    assert why() is None
    assert why(**{"webhook-id": ""}) == webhooks.MISSING_HEADERS
    assert webhooks.verify([key], {}, body, now) == webhooks.MISSING_HEADERS
    for stamp in ("soon", "-5", "1.5", "\uff11\uff12\uff13", "9" * 40):
        assert why(**{"webhook-timestamp": stamp}) == webhooks.BAD_TIMESTAMP, stamp
    for age in (301, -301):
        stale = webhooks.headers([key], "msg_1", now - age, body)
        assert webhooks.verify([key], stale, body, now) == webhooks.STALE_TIMESTAMP
    for age in (299, -299):
        fresh = webhooks.headers([key], "msg_1", now - age, body)
        assert webhooks.verify([key], fresh, body, now) is None
    for signature in ("v1,", "v1,!!!", "garbage", "v2," + good["webhook-signature"][3:], ","):
        assert why(**{"webhook-signature": signature}) == webhooks.BAD_SIGNATURE, signature
    # Several signatures at once: one made with any of the receiver's keys is enough.
    both = webhooks.headers([old, key], "msg_1", now, body)
    assert webhooks.verify([key], both, body, now) is None
    assert webhooks.verify([old], both, body, now) is None
    assert webhooks.verify([webhooks.secret_key(VECTOR_SECRET)], both, body, now) == (
        webhooks.BAD_SIGNATURE
    )
    with pytest.raises(ValueError, match="base64"):
        webhooks.secret_key("whsec_not base64!")
    with pytest.raises(ValueError, match="16 bytes"):
        webhooks.secret_key("whsec_" + base64.b64encode(b"short").decode())


# -- the route, on a served application ------------------------------------------------------

CONFIG = """\
[[senders]]
name = "carrier"
secret_env = "CARRIER_SECRETS"
run = "data.reference"
event = "type"
data = "data"

[senders.events]
"parcel.scanned" = "parcel_received"
"parcel.kept" = "customer_kept_it"
"""


@pytest.fixture
def awaiting(capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: Any) -> str:
    """A parcel return (P-1) waiting for the carrier's scan."""
    monkeypatch.setenv("RATCHET_HOME", str(tmp_path / "home"))
    for name in ("RATCHET_DB", "RATCHET_BINDINGS", "RATCHET_NOW"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "run", str(PARCEL), "--example", "P-1", "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert (summary["state"], summary["status"]) == ("awaiting", "waiting")
    return str(summary["run"])


@pytest.fixture
def service(tmp_path: Path, awaiting: str) -> Iterator[Service]:
    path = tmp_path / "ratchet-serve.toml"
    path.write_text(CONFIG)
    config = load_config(path, environ={"CARRIER_SECRETS": f"{OLD_SECRET} {NEW_SECRET}"})
    with Session() as session:
        yield Service(session, config)


class Carrier:
    """A carrier sending signed webhooks to the service."""

    def __init__(self, base: str, secret: str = NEW_SECRET) -> None:
        self.http = httpx.Client(base_url=base, timeout=10)
        self.key = webhooks.secret_key(secret)

    def __enter__(self) -> Carrier:
        return self

    def __exit__(self, *_: object) -> None:
        self.http.close()

    def send(
        self, message_id: str, body: dict[str, Any] | bytes, *, age: int = 0, **extra: str
    ) -> httpx.Response:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        sent = webhooks.headers([self.key], message_id, int(time.time()) - age, raw)
        return self.http.post("/hooks/carrier", content=raw, headers={**sent, **extra})


SCANNED = {"type": "parcel.scanned", "data": {"reference": "P-1", "weight_kg": 1.2}}


def _run(service: Service, run_id: str) -> tuple[str, int]:
    run = service.session.store.get_run(run_id)
    return run.state, run.version


def test_a_signed_webhook_delivers_the_signal_once_and_a_retry_is_a_no_op(
    service: Service, awaiting: str
) -> None:
    with serving(service) as base, Carrier(base) as carrier:
        first = carrier.send("msg_scan_1", SCANNED)
        assert first.status_code == 200, first.text
        assert first.json()["delivered"] is True
        assert first.json()["signal"] == "carrier:msg_scan_1"
        after = _run(service, awaiting)
        assert after[0] == "inspecting"
        # The carrier retries: same ID, fresh timestamp and signature. 2xx, nothing moves.
        again = carrier.send("msg_scan_1", SCANNED)
        assert again.status_code == 200
        assert again.json()["duplicate"] is True
        assert _run(service, awaiting) == after
    assert service.counts["delivered"] == 1
    assert service.counts["duplicate"] == 1
    [received] = [e for e in service.session.store.history(awaiting) if e.kind == "signal"]
    assert received.data["signal_id"] == "carrier:msg_scan_1"
    assert (received.data["via"], received.data["from"]) == ("webhook", "carrier")
    assert received.data["data"] == {"reference": "P-1", "weight_kg": 1.2}


def test_refused_webhooks_change_nothing_and_are_counted_by_reason(
    service: Service, awaiting: str
) -> None:
    before = _run(service, awaiting)
    with (
        serving(service) as base,
        Carrier(base) as carrier,
        Carrier(base, secret=VECTOR_SECRET) as forger,
    ):
        cases = [
            (forger.send("msg_a", SCANNED), 401, "refused:bad_signature"),
            (carrier.send("msg_b", SCANNED, age=301), 401, "refused:stale_timestamp"),
            (carrier.send("msg_c", SCANNED, age=-301), 401, "refused:stale_timestamp"),
            (
                carrier.http.post("/hooks/carrier", content=json.dumps(SCANNED)),
                401,
                "refused:missing_headers",
            ),
            (carrier.send("msg_d", b"{" + b" " * MAX_BODY + b"}"), 413, "refused:too_large"),
            (carrier.send("msg_e", b"not json"), 400, "refused:malformed"),
            (carrier.send("msg_f", {"type": "parcel.scanned"}), 400, "refused:malformed"),
            (carrier.send("msg_g", {**SCANNED, "type": ["x"]}), 400, "refused:malformed"),
            (carrier.send("msg_h", {**SCANNED, "data": [1]}), 400, "refused:malformed"),
            (
                carrier.http.post("/hooks/nobody", content=b"{}", headers={"webhook-id": "x"}),
                404,
                "refused:unknown_sender",
            ),
        ]
        for response, status, counted in cases:
            assert response.status_code == status, (counted, response.text)
            assert service.counts[counted] >= 1, counted
        # A body signed for one ID and sent under another is a forgery too.
        raw = json.dumps(SCANNED).encode()
        signed = webhooks.headers([carrier.key], "msg_real", int(time.time()), raw)
        swapped = carrier.http.post(
            "/hooks/carrier", content=raw, headers={**signed, "webhook-id": "msg_other"}
        )
        assert swapped.status_code == 401
    assert _run(service, awaiting) == before
    assert service.counts["delivered"] == 0
    assert service.counts["refused:stale_timestamp"] == 2


def test_either_secret_verifies_while_a_key_is_rotated(service: Service, awaiting: str) -> None:
    with serving(service) as base, Carrier(base, secret=OLD_SECRET) as carrier:
        response = carrier.send("msg_old_key", SCANNED)
        assert response.status_code == 200, response.text
    assert _run(service, awaiting)[0] == "inspecting"


def test_an_event_the_sender_maps_to_nothing_is_acknowledged_and_ignored(
    service: Service, awaiting: str
) -> None:
    before = _run(service, awaiting)
    with serving(service) as base, Carrier(base) as carrier:
        response = carrier.send("msg_x", {"type": "parcel.label_printed", "data": {}})
        assert response.status_code == 200
        assert response.json() == {"ignored": True, "event": "parcel.label_printed"}
    assert _run(service, awaiting) == before
    assert service.counts["ignored"] == 1


def test_a_signal_the_run_does_not_take_now_is_refused_for_the_sender_to_retry(
    service: Service, awaiting: str
) -> None:
    with serving(service) as base, Carrier(base) as carrier:
        light = {"type": "parcel.scanned", "data": {"reference": "P-1", "weight_kg": 0}}
        refused = carrier.send("msg_light", light)  # the row's guard wants a weight
        assert refused.status_code == 409
        assert refused.json()["error"]["code"] == "R402"
        unknown = carrier.send("msg_who", {**SCANNED, "data": {"reference": "P-404"}})
        assert unknown.status_code == 404
        assert unknown.json()["error"]["code"] == "R302"
        # Refused, so not recorded: the same ID, once the run takes it, is delivered.
        assert carrier.send("msg_light", SCANNED).json()["delivered"] is True


def test_concurrent_identical_webhooks_move_the_run_exactly_once(
    service: Service, awaiting: str
) -> None:
    before = _run(service, awaiting)
    with serving(service) as base, Carrier(base) as carrier:
        raw = json.dumps(SCANNED).encode()
        sent = webhooks.headers([carrier.key], "msg_twice", int(time.time()), raw)
        start = threading.Barrier(6)
        answers: list[httpx.Response] = []

        def deliver() -> None:
            with httpx.Client(base_url=base, timeout=10) as http:
                start.wait()
                answers.append(http.post("/hooks/carrier", content=raw, headers=sent))

        threads = [threading.Thread(target=deliver) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert [a.status_code for a in answers] == [200] * 6, [a.text for a in answers]
    assert sorted(a.json()["delivered"] for a in answers) == [False] * 5 + [True]
    assert _run(service, awaiting) == ("inspecting", before[1] + 1)
    assert (service.counts["delivered"], service.counts["duplicate"]) == (1, 5)
    signals = [e for e in service.session.store.history(awaiting) if e.kind == "signal"]
    assert len(signals) == 1


def test_a_sender_without_its_secret_stops_the_service_from_starting(tmp_path: Path) -> None:
    path = tmp_path / "ratchet-serve.toml"
    path.write_text(CONFIG)
    with pytest.raises(Exception, match="CARRIER_SECRETS is not set"):
        load_config(path, environ={})
    with pytest.raises(Exception, match="base64"):
        load_config(path, environ={"CARRIER_SECRETS": "whsec_!!"})
    assert os.environ.get("CARRIER_SECRETS") is None


def test_ratchet_signal_to_a_service_signs_as_a_sender_does(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    awaiting: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = tmp_path / "scripts.toml"
    path.write_text('[[senders]]\nname = "script"\nsecret_env = "SCRIPT_SECRET"\n')
    config = load_config(path, environ={"SCRIPT_SECRET": NEW_SECRET})
    with Session() as session, serving(Service(session, config)) as base:
        url = f"{base}/hooks/script"
        signal = ("signal", "P-1", "parcel_received", "--id", "scan-1", "--to", url)
        code, _, err = run(capsys, *signal, "--data", '{"weight_kg": 2}')
        assert code == 1  # no secret to sign with: refused, nothing sent
        assert "R200 --to needs the sender's secret: RATCHET_WEBHOOK_SECRET is not set" in err
        monkeypatch.setenv("RATCHET_WEBHOOK_SECRET", OLD_SECRET)  # not the sender's
        code, _, err = run(capsys, *signal, "--data", '{"weight_kg": 2}')
        assert code == 1
        assert "R200" in err
        assert "bad signature" in err
        monkeypatch.setenv("SCRIPT_SECRET", NEW_SECRET)
        refused = ("--secret-env", "SCRIPT_SECRET", "--data", '{"weight_kg": 0}')
        code, _, err = run(capsys, *signal, *refused)
        assert code == 1
        assert "R402" in err  # the row's guard: the service's refusal, with its code
        code, out, err = run(capsys, *signal, "--secret-env", "SCRIPT_SECRET", "--json")
        assert code == 1  # {} carries no weight either
        code, out, err = run(
            capsys, *signal, "--secret-env", "SCRIPT_SECRET", "--data", '{"weight_kg": 2}'
        )
        assert code == 0, err
        assert "parcel_received moved the run to inspecting" in out
        assert session.store.get_run(awaiting).state == "inspecting"
        code, out, err = run(
            capsys,
            *signal,
            "--secret-env",
            "SCRIPT_SECRET",
            "--data",
            '{"weight_kg": 2}',
            "--json",
        )
        assert code == 0, err
        assert json.loads(out)["duplicate"] is True
