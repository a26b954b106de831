"""`ratchet check --bindings` over HTTP: every crash window through the real HTTP adapter and a real
socket, against the case's practice world served on 127.0.0.1 by the check itself, with the same
invariants and the same outcome of every case as in process. A lost reply is a reset connection,
a failed lookup a closed one, and a `--kill` child calls the parent's server; a binding whose
adapter is a python factory is refused before any case.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ratchet_runner.adapters.base import Ambiguous, Call
from ratchet_runner.adapters.http import HttpAdapter
from ratchet_runner.adapters.http.settings import parse_settings
from ratchet_runner.adapters.practice import http as practice_http
from ratchet_runner.check import cases as check
from ratchet_runner.check.cases import Case, run_case
from ratchet_runner.errors import BindingError
from tests.conftest import ROOT, spec_and_text
from tests.conftest import run_cli as run
from tests.integration.local_http import SILENT, LocalServer, Reply

REFUND = str(ROOT / "specs" / "refund.yaml")
HTTP_TOML = str(ROOT / "specs" / "http.toml")


@pytest.fixture(autouse=True)
def _no_binding_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RATCHET_BINDINGS", "RATCHET_NOW", "RATCHET_DB"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How many calls this process's HTTP adapters made, and how many POSTs the practice
    servers of this process received (from this process or a child)."""
    counts = {"adapter_calls": 0, "posts": 0}
    call, post = HttpAdapter.call, practice_http._Handler.do_POST

    def counting_call(self: HttpAdapter, request: Call) -> Any:
        counts["adapter_calls"] += 1
        return call(self, request)

    def counting_post(self: Any) -> None:
        counts["posts"] += 1
        post(self)

    monkeypatch.setattr(HttpAdapter, "call", counting_call)
    monkeypatch.setattr(practice_http._Handler, "do_POST", counting_post)
    return counts


def _check_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    code, out, err = run(capsys, "check", *args, "--json")
    assert out, err
    return code, json.loads(out)


def _outcome(result: dict[str, Any]) -> tuple[Any, ...]:
    return (
        result["final"]["state"],
        result["final"]["status"],
        result["changes"],
        result["amount"],
        result["calls"],
        result["violation_kinds"],
    )


def test_the_refund_check_over_http_keeps_every_invariant_and_ends_each_case_as_in_process(
    capsys: pytest.CaptureFixture[str], counted: dict[str, int]
) -> None:
    code, document = _check_json(capsys, REFUND, "--bindings", HTTP_TOML)
    assert code == 0
    assert document["over_http"] == {
        "binding": "practice-http",
        "file": HTTP_TOML,
        "http": ["payments"],
        "in_process": [],
    }
    assert (document["cases"], document["violations"]) == (100, 0)  # both examples
    # every call the provider logged came over the wire, but the in-flight ones (the request
    # reached the provider, then the process died before the reply)
    in_flight = sum(1 for r in document["results"] if r["window"] == "in-flight" and r["crashed"])
    calibration = 2  # before any case, each example's clean run over HTTP: one refund each
    assert counted["adapter_calls"] == counted["posts"]
    assert (
        counted["posts"] - calibration == sum(r["calls"] for r in document["results"]) - in_flight
    )
    assert counted["posts"] > 100

    spec, text = spec_and_text("refund")
    for result in document["results"]:
        in_process = run_case(spec, text, Case(*result["case"].split(":")))  # type: ignore[arg-type]
        expected = in_process.to_json()
        assert _outcome(result) == _outcome(expected), result["case"]
        assert result["crashed"] == expected["crashed"], result["case"]


@pytest.mark.parametrize(
    "case", ["T-90104:request_refund:response-lost:none", "T-90104:request_refund:none:malformed"]
)
def test_the_naive_strategy_refunds_twice_over_http_too(
    capsys: pytest.CaptureFixture[str], case: str
) -> None:
    code, out, err = run(
        capsys, "check", REFUND, "--bindings", HTTP_TOML, "--case", case, "--compare", "naive"
    )
    assert code == 0, err  # the naive strategy's duplicate is the comparison's point
    lines = out.splitlines()
    assert lines[0] == f"adapters: payments over HTTP (binding practice-http, {HTTP_TOML})"
    (row,) = (line for line in lines if line.startswith("T-90104"))
    assert "1 change(s) 9.95 · 1 call(s) · ok" in row
    assert row.endswith("2 change(s) 19.90 · 2 call(s) · DUPLICATE")
    assert "crashes in-process, calls over HTTP: 0 with violations" in lines[-1]
    assert "1 under the naive strategy" in lines[-1]


def test_a_lookup_failing_on_the_wire_leaves_the_unconfirmed_refund_to_a_person(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # the request is lost (the connection closed), and the lookup_fails fault reaches the lookup
    # by its Ratchet-Effect header: the runner cannot tell whether the refund was made, so it
    # neither retries blind nor calls it done (a lookup that answered would find nothing, and
    # the retry would refund)
    case = "T-90104:request_refund:none:timeout_before_write+lookup_fails"
    code, document = _check_json(capsys, REFUND, "--bindings", HTTP_TOML, "--case", case)
    assert code == 0
    (result,) = document["results"]
    spec, text = spec_and_text("refund")
    in_process = run_case(spec, text, Case(*case.split(":"))).to_json()  # type: ignore[arg-type]
    assert _outcome(result) == _outcome(in_process)
    assert (result["changes"], result["final"]["status"]) == (0, "needs_person")


def test_a_case_killed_with_sigkill_calls_the_same_server_from_its_child(
    capsys: pytest.CaptureFixture[str], counted: dict[str, int]
) -> None:
    case = "T-90104:request_refund:response-lost:timeout_after_write"
    code, document = _check_json(capsys, REFUND, "--bindings", HTTP_TOML, "--case", case, "--kill")
    assert code == 0
    (result,) = document["results"]
    assert result["crashed"] is True
    assert (result["changes"], result["amount"], result["violations"]) == (1, 9.95, [])
    assert result["final"] == {"state": "refunded", "status": "done"}
    # the clean run that proves the binding first (one refund, from this process); then the
    # child's one request (its reply lost by a reset) reached this process's server, and the
    # resume here found the refund by the lookup and sent nothing
    assert (counted["posts"], counted["adapter_calls"]) == (1 + 1, 1 + 0)


def test_a_violation_over_http_is_reproduced_with_its_binding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, text = spec_and_text("refund")
    unsafe = text.replace("idempotency_key: [business_key, effect, args],", "", 1)
    assert unsafe != text
    spec = tmp_path / "refund-no-key.yaml"
    spec.write_text(unsafe, encoding="utf-8")
    case = "T-90104:request_refund:response-lost:none"
    code, out, err = run(capsys, "check", str(spec), "--bindings", HTTP_TOML, "--case", case)
    assert code == 1
    assert "2 change(s) 19.90 · 2 call(s) · DUPLICATE" in out
    assert f"reproduce: ratchet check {spec} --case {case} --bindings {HTTP_TOML}" in err


FACTORY = """
from ratchet_runner.adapters.base import Done, NotFound


class Payments:
    operations = ("refund",)
    lookups = ("lookup_refund",)

    def __init__(self, settings):
        pass

    def call(self, request):
        return Done({"refund_id": "re_1"})

    def lookup(self, operation, operation_id, effect=""):
        return NotFound()
"""


def test_a_binding_with_a_python_factory_is_refused_before_any_case(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "check_http_payments.py").write_text(FACTORY, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    binding = tmp_path / "own.toml"
    binding.write_text(
        'name = "own"\n\n[adapters.payments]\nimplementation = "python"\n'
        'factory = "check_http_payments:Payments"\ndedupe = true\n',
        encoding="utf-8",
    )
    assert run(capsys, "validate", REFUND, "--bindings", str(binding))[0] == 0  # it covers it

    def no_case(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("a case ran")

    monkeypatch.setattr(check, "run_case", no_case)
    monkeypatch.setattr(check, "reached_effects", no_case)
    code, out, err = run(capsys, "check", REFUND, "--bindings", str(binding))
    assert code == 2  # as check's other usage errors
    assert out == ""
    said = " ".join(err.split())
    assert f"{binding}:3: adapter 'payments' is bound to implementation 'python'" in said
    assert "which ratchet check cannot run" in said


# -- the HTTP adapter's part: the effect header on lookups, and timeout_scale ---------------------


def test_a_binding_that_misses_the_practice_servers_routes_is_refused_before_any_case(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    binding = tmp_path / "wrong.toml"
    text = Path(HTTP_TOML).read_text(encoding="utf-8")
    assert 'path = "/refund"\n' in text
    binding.write_text(text.replace('path = "/refund"\n', 'path = "/refunds"\n', 1), "utf-8")
    assert run(capsys, "validate", REFUND, "--bindings", str(binding))[0] == 0  # it covers it
    ran: list[str] = []
    real = check.run_case

    def counting(spec: Any, text: str, case: Any, **kwargs: Any) -> Any:
        ran.append(case.name)
        return real(spec, text, case, **kwargs)

    monkeypatch.setattr(check, "run_case", counting)
    code, out, err = run(
        capsys, "check", REFUND, "--bindings", str(binding), "--example", "T-90104"
    )
    assert code == 2
    assert out == ""
    said = " ".join(err.split())
    assert (
        "the clean run of example 'T-90104' ends in refunding (needs_person) with 0 change(s); "
        "in-process it ends in refunded (done) with 1"
    ) in said
    assert "the binding does not reach the practice server's operations" in said
    assert ran == ["T-90104::none:none", "T-90104::none:none"]  # the two clean runs, no case


BASE = {
    "operations": {"refund": {"path": "/refund", "receipt_field": "refund_id"}},
    "lookups": {"lookup_refund": {"by": "endpoint", "path": "/operations/{operation_id}"}},
}


@pytest.fixture
def serve() -> Iterator[Callable[[Any], LocalServer]]:
    servers: list[LocalServer] = []

    def start(respond: Any) -> LocalServer:
        servers.append(LocalServer(respond))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def test_a_lookup_names_its_effect_in_the_effect_header(
    serve: Callable[[Any], LocalServer],
) -> None:
    server = serve(lambda r: Reply(404, {"error": {"code": "not_found"}}))
    data = {**BASE, "base_url": server.url, "effect_header": "Ratchet-Effect"}
    with HttpAdapter.from_data(data) as adapter:
        adapter.lookup("lookup_refund", "op-1", "request_refund")
        adapter.lookup("lookup_refund", "op-2")  # no effect given: no header
    first, second = server.received
    assert first.headers["ratchet-effect"] == "request_refund"
    assert "ratchet-effect" not in second.headers


def test_timeout_scale_shortens_every_calls_deadline(serve: Callable[[Any], LocalServer]) -> None:
    server = serve(lambda r: SILENT)
    data = {**BASE, "base_url": server.url, "timeout_scale": 0.05}
    started = time.monotonic()
    with HttpAdapter.from_data(data) as adapter:
        outcome = adapter.call(Call("refund", "op-1", {"amount": 1}, timeout=10.0))
    assert isinstance(outcome, Ambiguous)  # after 0.5 s, not the effect's 10 s
    assert time.monotonic() - started < 5
    assert parse_settings({**BASE, "base_url": "http://x"}).timeout_scale == 1.0


@pytest.mark.parametrize("scale", [0, -0.5, 1.5, True, "0.5", float("nan")])
def test_timeout_scale_is_a_factor_above_0_and_at_most_1(scale: Any) -> None:
    with pytest.raises(BindingError, match="setting 'timeout_scale' must be a number above 0"):
        parse_settings({**BASE, "base_url": "http://x", "timeout_scale": scale})
