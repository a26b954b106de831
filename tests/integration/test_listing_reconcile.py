"""A warehouse that reconciles by listing: its listing filtered by order, paged, with items that
echo no operation ID (or, as before, that do), and a request lost before the warehouse saw it.

Before: the run's first lookup failed and it went to a person; `ops reconcile` then said there was
no record and that `ops retry` makes it; but every `ops retry` (and `ops compensate`), even minutes
later, answered "not listed yet, within the 2 s" and sent the run back to the person, since the
adapter, made anew in each command's process, counted the operation as sent when it was made.
Now the listing's settle time is measured from the attempt, which the run keeps: minutes later,
`ops retry` looks it up, finds nothing, and makes the one label. Through the real commands and a
real socket, with the store's clock moved by ``RATCHET_NOW``.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.conftest import run_cli as run
from tests.integration.local_http import CLOSE, LocalServer, Received, Reply

RETURNS = str(ROOT / "specs" / "returns.yaml")
T0 = 1_900_000_000.0
OPS = ("--as", "wren", "--role", "warehouse_ops")


class Warehouse:
    """Labels a label per request (a second request, a second label: no key register), listed
    by order one item a page; the first label request is lost before it is seen, and the first
    listing fails. ``echo``: whether each item echoes the operation ID it was made under."""

    def __init__(self, echo: bool) -> None:
        self.echo = echo
        self.labels: list[dict[str, Any]] = []
        self.posts = 0
        self.listings = 0
        self._lock = threading.Lock()

    def __call__(self, received: Received) -> Any:
        with self._lock:
            if received.method == "POST":
                self.posts += 1
                if self.posts == 1:
                    return CLOSE  # lost on the way: never seen, nothing made
                args = received.json()
                label = {"label_id": f"lbl_{len(self.labels) + 1}", **args}
                if self.echo:
                    label["client_reference"] = received.headers["idempotency-key"]
                self.labels.append(label)
                return Reply(200, {"label_id": label["label_id"]})
            self.listings += 1
            if self.listings == 1:
                return Reply(500, {"error": "the listing is down"})
            mine = [x for x in self.labels if x["order"] == received.query.get("order_id")]
            at = int(received.query.get("cursor", "0"))
            page: dict[str, Any] = {"data": mine[at : at + 1]}
            if at + 1 < len(mine):
                page["next"] = str(at + 1)
            return Reply(200, page)


def _binding(url: str, echo: bool) -> str:
    names = (
        'reference = "/client_reference"'
        if echo
        else 'match = { "/order" = "order", "/sku" = "sku", "/reason" = "reason" }\n'
        'filter = { order_id = "order" }\nnext = "/next"\ncursor_param = "cursor"'
    )
    return f"""\
name = "listing"

[adapters.warehouse]
implementation = "http"
dedupe = false
commits_within = 5
base_url = "{url}"

[adapters.warehouse.operations.create_label]
path = "/labels"
receipt_field = "label_id"

[adapters.warehouse.operations.reship]
path = "/reships"
receipt_field = "reship_id"

[adapters.warehouse.lookups.lookup]
by = "listing"
path = "/labels"
items = "/data"
settle = 2
{names}
"""


@pytest.mark.parametrize("echo", [False, True], ids=["items echo no ID", "items echo the ID"])
def test_a_listing_reconcile_settles_and_ops_retry_minutes_later_makes_the_one_label(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    echo: bool,
) -> None:
    monkeypatch.setenv("RATCHET_HOME", str(tmp_path / "home"))
    for name in ("RATCHET_DB", "RATCHET_BINDINGS"):
        monkeypatch.delenv(name, raising=False)
    warehouse = Warehouse(echo)
    with LocalServer(warehouse) as server:
        binding = tmp_path / "listing.toml"
        binding.write_text(_binding(server.url, echo), encoding="utf-8")
        where = ("--bindings", str(binding))

        monkeypatch.setenv("RATCHET_NOW", str(T0))
        code, out, err = run(capsys, "run", RETURNS, "--example", "T-90604", *where)
        assert code == 0, err
        assert "needs_person" in out  # the request was lost, and the listing failed

        monkeypatch.setenv("RATCHET_NOW", str(T0 + 600))
        code, out, err = run(capsys, "ops", "reconcile", "T-90604/return_label", *OPS, *where)
        assert "no record" in out + err
        assert "'ratchet ops retry' makes it" in out + err

        monkeypatch.setenv("RATCHET_NOW", str(T0 + 900))
        code, out, err = run(capsys, "ops", "retry", "T-90604/return_label", *OPS, *where)
        assert code == 0, err
        assert "labelled (done)" in out

        code, trace, _ = run(capsys, "trace", "T-90604/return_label", "--json")
    events = [e["kind"] for e in json.loads(trace)["events"]]
    assert "reconcile_unsettled" not in events[events.index("operator") :]  # settled by then
    assert [x["label_id"] for x in warehouse.labels] == ["lbl_1"]  # one label, made by the retry
    assert warehouse.posts == 2  # the lost request, then the one that made it
