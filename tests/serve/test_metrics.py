"""``GET /metrics``: parsed with the Prometheus client's own parser, and every series moved by
something that makes it move (a run waiting for a decision, an ambiguous outcome until it is
reconciled, a refused undo, a lease that expires, calls made in the process, webhooks)."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ratchet_runner.serve.operators import Config
from ratchet_runner.serve.service import Service
from ratchet_runner.session import Session
from tests.conftest import RATCHET, SPECS
from tests.conftest import run_cli as run
from tests.integration.test_late_commits import LateCourier, drive_with_workers
from tests.serve.serving import serving

REFUND, BOOKING = SPECS / "refund.yaml", SPECS / "booking.yaml"


@pytest.fixture
def scrape(home: Path) -> Iterator[Any]:
    """Scrape the served application's /metrics: {(name, labels...): value} of every sample."""
    with Session() as session:
        service = Service(session, Config())
        with serving(service) as base, httpx.Client(base_url=base, timeout=10) as http:

            def samples() -> dict[tuple[str, ...], float]:
                response = http.get("/metrics")
                assert response.status_code == 200
                assert response.headers["content-type"].startswith("text/plain")
                found: dict[tuple[str, ...], float] = {}
                for family in text_string_to_metric_families(response.text):
                    for sample in family.samples:
                        key = (sample.name, *(f"{k}={v}" for k, v in sorted(sample.labels.items())))
                        found[key] = sample.value
                return found

            samples.service = service  # type: ignore[attr-defined]
            yield samples


def test_a_refund_moves_the_runs_decisions_calls_and_reconcile_backlog(
    capsys: pytest.CaptureFixture[str], scrape: Any
) -> None:
    first = scrape()
    assert first[("ratchet_store_up",)] == 1
    assert not any(k[0] == "ratchet_runs" for k in first)
    code, _, err = run(
        capsys, "run", str(REFUND), "--example", "T-90104", "--fault", "request_refund:lookup_fails"
    )
    assert code == 0, err
    time.sleep(0.2)
    waiting = scrape()
    assert waiting[("ratchet_runs", "status=waiting", "workflow=refund")] == 1
    approval = ("approval=refund_approval", "workflow=refund")
    assert waiting[("ratchet_decisions_waiting", *approval)] == 1
    assert waiting[("ratchet_decision_wait_max_seconds", *approval)] >= 0.2
    assert waiting[("ratchet_run_age_seconds_count", "workflow=refund")] == 1
    assert waiting[("ratchet_run_age_seconds_bucket", "le=60.0", "workflow=refund")] == 1
    assert waiting[("ratchet_runs_in_state", "state=proposed", "workflow=refund")] == 1
    assert waiting[("ratchet_state_age_max_seconds", "state=proposed", "workflow=refund")] >= 0.2
    # Approved here (this process makes the call): the reply is lost and the lookup fails.
    code, _, err = run(capsys, "approve", "T-90104", "--as", "ana", "--role", "agent")
    assert code == 0, err
    unknown = scrape()
    effect = ("effect=request_refund", "workflow=refund")
    assert unknown[("ratchet_reconcile_backlog", *effect)] == 1
    assert unknown[("ratchet_runs", "status=needs_person", "workflow=refund")] == 1
    assert ("ratchet_decisions_waiting", *approval) not in unknown
    assert unknown[("ratchet_effect_attempts_total", *effect[:1], "role=forward", effect[1])] == 1
    assert unknown[("ratchet_effect_retries_total", *effect[:1], "role=forward", effect[1])] == 0
    call = ("effect=request_refund", "outcome=ambiguous", "workflow=refund")
    assert unknown[("ratchet_effect_call_seconds_count", *call)] == 1
    # An operator reconciles: the lookup finds the refund; the backlog is gone, the run done.
    code, _, err = run(
        capsys, "ops", "reconcile", "T-90104", "--as", "olu", "--role", "payments_ops"
    )
    assert code == 0, err
    done = scrape()
    assert ("ratchet_reconcile_backlog", *effect) not in done
    assert done[("ratchet_runs", "status=done", "workflow=refund")] == 1
    assert ("ratchet_run_age_seconds_count", "workflow=refund") not in done  # ended: no age


def test_a_refused_undo_counts_as_a_compensation_failure(
    capsys: pytest.CaptureFixture[str], scrape: Any
) -> None:
    assert not any(k[0] == "ratchet_compensation_failures" for k in scrape())
    code, _, err = run(
        capsys,
        "run",
        str(BOOKING),
        "--example",
        "hotel_refused",
        "--fault",
        "release_flight:refuse",
    )
    assert code == 0, err
    after = scrape()
    assert (
        after[("ratchet_compensation_failures", "effect=release_flight", "workflow=booking")] == 1
    )
    assert after[("ratchet_runs", "status=needs_person", "workflow=booking")] == 1


def test_a_lease_that_expires_makes_a_stuck_run(
    capsys: pytest.CaptureFixture[str], scrape: Any
) -> None:
    code, out, err = run(
        capsys, "run", str(BOOKING), "--example", "happy", "--leave-to-workers", "--json"
    )
    assert code == 0, err
    run_id = json.loads(out)["run"]
    store = scrape.service.session.store
    assert not any(k[0] == "ratchet_stuck_runs" for k in scrape())
    [claimed] = store.claim("frozen-worker", 0.3, time.time())
    assert claimed.id == run_id
    time.sleep(0.6)  # the worker froze; its lease runs out
    stuck = scrape()
    assert stuck[("ratchet_stuck_runs", "reason=lease_expired", "workflow=booking")] == 1
    # Runnable, unleased and unmoved for longer than the threshold: stuck too.
    store.release(run_id, str(claimed.lease_token))
    later = store.stats(time.time() + 400)
    assert later.stuck == {("booking", "unmoved"): 1}
    assert store.stats(time.time()).stuck == {}


def test_webhook_outcomes_are_counted_by_reason(scrape: Any) -> None:
    service = scrape.service
    service.count("delivered")
    service.count("refused:bad_signature")
    service.count("refused:bad_signature")
    found = scrape()
    assert found[("ratchet_webhooks_total", "outcome=delivered", "reason=")] == 1
    assert found[("ratchet_webhooks_total", "outcome=refused", "reason=bad_signature")] == 2
    assert found[("ratchet_webhooks_total", "outcome=duplicate", "reason=")] == 0


def test_a_store_that_does_not_answer_says_so_and_nothing_else(home: Path, tmp_path: Path) -> None:
    with Session(f"sqlite:///{tmp_path / 'ratchet.db'}") as session:
        service = Service(session, Config())
        with serving(service) as base, httpx.Client(base_url=base, timeout=10) as http:
            assert "ratchet_store_up 1.0" in http.get("/metrics").text
            session.store.close()  # a closed store refuses every read
            text = http.get("/metrics").text
    assert "ratchet_store_up 0.0" in text
    assert "ratchet_runs{" not in text


def test_a_worker_serves_its_metrics_on_a_port(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "run", str(REFUND), "--example", "T-90104")
    assert code == 0, err
    worker = subprocess.Popen(
        [RATCHET, "worker", "--metrics-port", "0", "--poll", "0.1"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stderr is not None
        url = ""
        deadline = time.monotonic() + 20
        while not url:
            assert time.monotonic() < deadline
            line = worker.stderr.readline()
            if "metrics on " in line:
                url = line.rsplit("metrics on ", 1)[1].strip()
        text = httpx.get(url, timeout=10).text
    finally:
        worker.terminate()
        worker.communicate(timeout=30)
    families = {f.name for f in text_string_to_metric_families(text)}
    assert {"ratchet_runs", "ratchet_decisions_waiting", "ratchet_effect_call_seconds"} <= families
    assert 'ratchet_decisions_waiting{approval="refund_approval",workflow="refund"} 1.0' in text


def test_a_transient_failure_counts_a_retry(
    capsys: pytest.CaptureFixture[str], scrape: Any
) -> None:
    parcel = SPECS.parent / "tests" / "fixtures" / "parcel.yaml"
    code, _, err = run(
        capsys, "run", str(parcel), "--example", "P-1", "--fault", "create_label:unavailable"
    )
    assert code == 0, err
    found = scrape()
    label = ("effect=create_label", "role=forward", "workflow=parcel")
    assert found[("ratchet_effect_attempts_total", *label)] == 2
    assert found[("ratchet_effect_retries_total", *label)] == 1
    calls = ("effect=create_label", "outcome=transient", "workflow=parcel")
    assert found[("ratchet_effect_call_seconds_count", *calls)] == 1


def test_a_reply_without_its_receipt_is_timed_as_ambiguous_not_done(
    capsys: pytest.CaptureFixture[str], scrape: Any
) -> None:
    """A malformed reply is an unknown outcome: the call latency says so, as the run does."""
    parcel = SPECS.parent / "tests" / "fixtures" / "parcel.yaml"
    code, _, err = run(
        capsys, "run", str(parcel), "--example", "P-1", "--fault", "create_label:malformed"
    )
    assert code == 0, err
    found = scrape()
    ambiguous = ("effect=create_label", "outcome=ambiguous", "workflow=parcel")
    done = ("effect=create_label", "outcome=done", "workflow=parcel")
    assert found[("ratchet_effect_call_seconds_count", *ambiguous)] == 1
    assert ("ratchet_effect_call_seconds_count", *done) not in found  # reconciled, not called


def test_a_change_found_made_twice_is_counted_as_a_duplicate(scrape: Any) -> None:
    """A provider that committed later than its commits_within made a booking twice; the
    verification of the retry found both: one duplicate, by workflow and effect."""
    assert not any(k[0] == "ratchet_duplicates_detected_total" for k in scrape())
    courier = LateCourier(hold=3.0, commits_within=1.0)
    with Session() as session:
        try:
            run_ = drive_with_workers(session.store, courier, lease=2.5)
        finally:
            courier.close()
    assert run_.status == "needs_person"
    after = scrape()
    found = ("ratchet_duplicates_detected_total", "effect=book_courier", "workflow=courier")
    assert after[found] == 1
