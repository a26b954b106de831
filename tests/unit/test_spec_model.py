"""The typed spec model and the checks around it that are not tied to one lint code."""

from __future__ import annotations

from pathlib import Path

from ratchet_runner.spec.model import Retry
from ratchet_runner.spec.validate import validate_text

ROOT = Path(__file__).resolve().parents[2]
REFUND = (ROOT / "specs" / "refund.yaml").read_text(encoding="utf-8")


def test_a_zero_backoff_is_zero_not_the_default() -> None:
    text = REFUND.replace(
        "initial_backoff: 1s, max_backoff: 30s", "initial_backoff: 0ms, max_backoff: 0s"
    )
    report = validate_text(text)
    assert report.spec is not None
    assert report.spec.effects["request_refund"].retry == Retry(3, 0.0, 0.0, 2.0, "full")


def test_an_unknown_method_call_is_found_at_load() -> None:
    text = REFUND.replace("input.amount <= 100.0 ||", "input.reason.fooBar() ||")
    codes = [d.code for d in validate_text(text).diagnostics]
    assert "E307" in codes


def test_key_fields_that_name_undeclared_run_or_input_fields_are_refused() -> None:
    for field in ("run.bogus", "input.undeclared"):
        text = REFUND.replace(
            "idempotency_key: [business_key, effect, args]",
            f"idempotency_key: [business_key, effect, args, {field}]",
        )
        found = [d for d in validate_text(text).diagnostics if d.code == "E306"]
        assert len(found) == 1, field
        assert field in found[0].message
