"""Diagrams: the spec drawn as its states, its crash windows and its saga, in DOT and Mermaid.

The DOT and Mermaid texts are compared with golden files in tests/golden/ (text, not SVG bytes:
an SVG depends on the Graphviz version and the fonts). After an intended change, regenerate them
with ``RATCHET_UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/test_diagram.py`` and review the diff.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import subprocess
from pathlib import Path

import graphviz
import pytest

from ratchet_runner.errors import GraphvizNotFound
from ratchet_runner.review.diagram import draw as diagram
from ratchet_runner.review.diagram import saga as saga_view
from ratchet_runner.review.diagram.dot import RED
from ratchet_runner.settings import mermaid_label as mermaid_escape
from ratchet_runner.spec.model import Compensation, Effect, Retry, Row, Spec, State
from ratchet_runner.spec.paths import MAX_HISTORIES, histories_before
from ratchet_runner.spec.validate import validate_path, validate_text
from tests.conftest import run_cli as run

ROOT = Path(__file__).resolve().parents[2]
SPECS = ROOT / "specs"
GOLDEN = ROOT / "tests" / "golden"
SHIPPED = ("refund", "returns", "booking")
UPDATE = os.environ.get("RATCHET_UPDATE_GOLDEN") == "1"
REGENERATE = "RATCHET_UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/test_diagram.py"
needs_dot = pytest.mark.usefixtures("dot")  # skipped outside CI without Graphviz (conftest)


def shipped(name: str) -> Spec:
    report = validate_path(SPECS / f"{name}.yaml", f"specs/{name}.yaml")
    assert report.spec is not None
    assert report.ok()
    return report.spec


def refund_variant(tmp_path: Path, old: str, new: str) -> Path:
    text = (SPECS / "refund.yaml").read_text(encoding="utf-8")
    assert old in text
    path = tmp_path / "refund.yaml"
    path.write_text(text.replace(old, new), encoding="utf-8")
    return path


# -- golden files ----------------------------------------------------------------------------------


def check_golden(name: str, actual: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.write_text(actual, encoding="utf-8")
        return
    if not path.exists():
        pytest.fail(f"no golden file {path.relative_to(ROOT)}; write it with: {REGENERATE}")
    expected = path.read_text(encoding="utf-8")
    if actual != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(keepends=True),
                actual.splitlines(keepends=True),
                f"tests/golden/{name} (expected)",
                f"tests/golden/{name} (drawn now)",
            )
        )
        pytest.fail(
            f"{name} differs from its golden file:\n{diff}\n"
            f"If the change is intended, regenerate the golden files with:\n  {REGENERATE}",
            pytrace=False,
        )


CASES = [(spec, view) for spec in SHIPPED for view in diagram.VIEWS]


@pytest.mark.parametrize(("name", "view"), CASES, ids=[f"{s}-{v}" for s, v in CASES])
def test_the_dot_text_of_each_view_of_each_shipped_spec_matches_its_golden_file(
    name: str, view: str
) -> None:
    check_golden(f"{name}-{view}.dot", diagram.text(diagram.build(shipped(name), view), "dot"))


@pytest.mark.parametrize(("name", "view"), CASES, ids=[f"{s}-{v}" for s, v in CASES])
def test_the_mermaid_text_of_each_view_of_each_shipped_spec_matches_its_golden_file(
    name: str, view: str
) -> None:
    graph = diagram.build(shipped(name), view)
    check_golden(f"{name}-{view}.mmd", diagram.text(graph, "mermaid"))


def test_drawing_a_spec_twice_gives_byte_identical_dot_and_mermaid() -> None:
    for name, view in CASES:
        first, second = diagram.build(shipped(name), view), diagram.build(shipped(name), view)
        assert diagram.text(first, "dot") == diagram.text(second, "dot")
        assert diagram.text(first, "mermaid") == diagram.text(second, "mermaid")


def test_node_ids_are_generated_never_a_users_name() -> None:
    for name, view in CASES:
        source = diagram.text(diagram.build(shipped(name), view), "dot")
        declared = re.findall(r"^\t+(\S+) \[", source, re.M)
        assert declared
        assert all(re.fullmatch(r"n\d+|graph|node|edge", d) for d in declared)
        edges = re.findall(r"^\t+(\S+) -> (\S+)", source, re.M)
        assert all(re.fullmatch(r"n\d+", end) for edge in edges for end in edge)


# -- escaping --------------------------------------------------------------------------------------

HOSTILE = 'a"b<c> & d\\ {e} [f] |g| #quot; %% ;`h` --> end subgraph style:#fff; classDef x'


def hostile_spec() -> Spec:
    """A spec built by hand, past the loader's name rules, with every name and text hostile."""
    pause, step, queue, undo = (f"{HOSTILE} {i}" for i in ("pause", "step", "queue", "undo"))
    done, gone = f"{HOSTILE} done", "<b>bold</b>\nnew line"
    effect = Effect(
        name=f"{HOSTILE} effect",
        adapter='pay"ments',
        operation="<op>",
        args={'x"y': "input.a", "<z>": "input.b"},
        reconcile=None,
        approval=None,
        retry=Retry(),
        timeout=10.0,
        cost=None,
    )
    states = {
        pause: State(
            pause,
            "pause",
            resumes_on=(HOSTILE,),
            expires_after=60.0,
            approval=HOSTILE,
            description=HOSTILE,
        ),
        step: State(step, "step"),
        undo: State(undo, "compensate"),
        done: State(done, "success"),
        gone: State(gone, "compensated"),
        queue: State(queue, "operator_queue", operator_action=HOSTILE),
    }
    rows = (
        Row(0, pause, HOSTILE, step, guard='input.a < 3 && input.b == "x\'y" || input.c > 1'),
        Row(1, pause, "expired", gone),
        Row(
            2,
            step,
            "ok",
            done,
            external_effect=effect.name,
            idempotency_key=("args",),
            receipt='r"id',
            compensation=Compensation("none", None, HOSTILE),
        ),
        Row(3, step, "refused", undo, operator_action=HOSTILE),
        Row(4, undo, "ok", gone),
        Row(5, undo, "refused", queue, operator_action=HOSTILE),
    )
    return Spec(
        name=HOSTILE,
        spec_version=1,
        policy_version=1,
        business_key="input.a",
        start=pause,
        input_schema={},
        states=states,
        transitions=rows,
        effects={effect.name: effect},
        title=HOSTILE,
    )


HOSTILE_YAML = r"""
name: hostile-names
title: 'Refunds <b>& "friends"</b> \ {x} [y] |z| #quot; %% ; `t` --> end'
spec_version: 1
policy_version: 1
business_key: input.ticket
start: proposed
input:
  type: object
  required: [ticket, amount]
  properties:
    ticket: {type: string}
    note: {type: string}
    amount: {type: number}
adapters:
  payments: {kind: payments}
effects:
  request_refund:
    adapter: payments
    operation: refund
    args: {ticket: input.ticket, amount: input.amount}
    reconcile: lookup_refund
    retry: {max_attempts: 3}
states:
  proposed: {kind: pause, resumes_on: [approve], expires_after: 1h,
             description: 'waits for "someone" <with> & without ; # % `care`'}
  refunding: {kind: step}
  refunded: {kind: success}
  lapsed: {kind: cancelled}
  needs_person: {kind: operator_queue}
transitions:
  - {state: proposed, event: approve, next_state: refunding,
     guard: "input.note == \"<a href='x'>&amp;</a>\" && input.amount < 10.0 || input.note != '\"'"}
  - {state: proposed, event: expired, next_state: lapsed}
  - {state: refunding, event: ok, next_state: refunded, durable_write: [pending, receipt],
     external_effect: request_refund, idempotency_key: [business_key, effect, args],
     receipt: refund_id, retry_owner: runner,
     compensation: 'impossible: money "gone" <forever> & ever; # `sigh`'}
  - {state: refunding, event: refused, next_state: needs_person,
     operator_action: 'Call "them" <now> & then `ratchet ops retry`; #1 priority'}
  - {state: refunding, event: exhausted, next_state: needs_person,
     operator_action: "Wait\\ and <retry>"}
"""


def hostile_graphs() -> list[diagram.Graph]:
    by_hand = hostile_spec()
    report = validate_text(HOSTILE_YAML, "hostile.yaml")
    assert report.ok(), [d.format() for d in report.diagnostics]
    assert report.spec is not None
    return [
        *(diagram.build(by_hand, view, diagnostics=[]) for view in diagram.VIEWS),
        *(diagram.build(report.spec, view) for view in diagram.VIEWS),
    ]


@needs_dot
def test_hostile_names_guards_and_texts_yield_dot_that_the_real_dot_accepts() -> None:
    drawn = b""
    for graph in hostile_graphs():
        done = subprocess.run(
            ["dot", "-Tsvg"], input=diagram.text(graph, "dot").encode(), capture_output=True
        )
        assert done.returncode == 0, done.stderr.decode()
        assert done.stderr == b"", done.stderr.decode()  # not even a warning
        drawn += done.stdout
    # The text is drawn as it was written, not taken for markup.
    for shown in (
        b"a&quot;b&lt;c&gt; &amp; d\\",
        b"&lt;a",
        b"&lt;forever&gt;",
        b"&lt;now&gt;",
    ):
        assert shown in drawn, shown


def test_hostile_text_never_reaches_the_dot_unescaped() -> None:
    sources = "".join(diagram.text(graph, "dot") for graph in hostile_graphs())
    for raw in ("<c>", "<op>", "<a ", "<forever>", "<now>", "<b>bold"):
        assert raw not in sources
    for escaped in ("&lt;c&gt;", "&lt;op&gt;", "&amp;&amp;", "&quot;", "&#x27;"):
        assert escaped in sources


def _mermaid_labels(text: str) -> list[str]:
    """Every label of a Mermaid text, checking that each line that quotes has one of the forms
    the renderer writes, with no quote inside the label."""
    forms = [
        r'\s*state "([^"]*)" as n\d+',
        r'\s*subgraph c\d+\["([^"]*)"\]',
        r'\s*n\d+(?:\(\("|\[/"|\(\["|>"|\[")([^"]*)(?:"\)\)|"/\]|"\]\)|"\])',
        r'\s*n\d+ (?:-->|-\.->|-\.-) *\|"([^"]*)"\| n\d+',
    ]
    labels = []
    for line in text.splitlines():
        if '"' in line:
            match = next((m for f in forms if (m := re.fullmatch(f, line))), None)
            assert match is not None, f"a quote breaks this line: {line}"
            labels.append(match.group(1))
        elif re.match(r"\s*(n\d+|\[\*\]) --> n\d+ : |\s*n\d+ : ", line):
            labels.append(line.split(" : ", 1)[1])
    return labels


def test_mermaid_labels_contain_no_unescaped_quotes_or_markup() -> None:
    texts = [diagram.text(g, "mermaid") for g in hostile_graphs()]
    texts += [diagram.text(diagram.build(shipped(n), v), "mermaid") for n, v in CASES]
    for text in texts:
        for label in _mermaid_labels(text):
            bare = re.sub(r"</?(b|i)>|<br/>|#\w+;", "", label)
            assert not set(bare) & set('"<>;#%`[]{}|\\'), label


def test_mermaid_escaping_uses_entity_codes() -> None:
    assert mermaid_escape('say "hi" <b> & #1; 50%') == (
        "say #quot;hi#quot; #lt;b#gt; #amp; #35;1#59; 50#37;"
    )
    assert "style" not in mermaid_escape("lifestyle: #fff;")


def test_mermaid_uses_state_diagrams_for_states_and_flowcharts_for_the_rest() -> None:
    spec = shipped("booking")
    assert diagram.text(diagram.build(spec, "states"), "mermaid").startswith("stateDiagram-v2\n")
    for view in ("crash-windows", "saga"):
        assert diagram.text(diagram.build(spec, view), "mermaid").startswith("flowchart TD\n")


# -- what each view shows --------------------------------------------------------------------------


def test_the_states_view_shows_what_resumes_a_pause_its_expiry_and_the_operator_actions() -> None:
    source = diagram.text(diagram.build(shipped("refund"), "states"), "dot")
    assert "resumes on approve / reject" in source
    assert "expires after 72h → expired" in source
    assert "asks for refund_approval" in source
    assert "for the operation ID, then `ratchet ops" in source
    assert "to do #3" in source
    assert "input.amount &lt;= 100.0 ||" in source  # the guard, escaped
    assert "does request_refund" in source


def test_the_states_view_shapes_terminal_kinds_apart_from_the_others() -> None:
    graph = diagram.build(shipped("booking"), "states")
    roles = {node.lines[0].text: node.role for node in graph.nodes if node.lines}
    assert roles == {
        "holding_flight": "step",
        "holding_hotel": "step",
        "approving": "pause",
        "confirming": "step",
        "releasing": "compensate",
        "confirmed": "success",
        "no_flight": "cancelled",
        "released": "compensated",
        "needs_operator": "operator_queue",
    }
    assert {e.text for e in graph.legend if e.what == "node"} >= {"success (end)"}


def test_the_crash_windows_show_the_four_steps_and_the_four_windows_with_their_recoveries() -> None:
    source = diagram.text(diagram.build(shipped("refund"), "crash-windows"), "dot")
    for text in (
        "1 · write ahead",
        "2 · call sent",
        "3 · provider commits",
        "4 · receipt + move committed",
        "W1 · crash before the request",
        "W2 · request in flight",
        "W3 · provider committed, reply lost",
        "W4 · receipt stored, checkpoint missing",
        "not found → same-ID retry",
        "found → done, no new call",
        "skip, continue",
        "approval refund_approval consumed",
    ):
        assert text in source, text
    assert RED not in source


def test_crash_windows_draw_one_cluster_per_effect_row_or_only_the_effect_asked_for() -> None:
    spec = shipped("booking")
    every = diagram.build(spec, "crash-windows")
    assert [c.lines[0].text for c in every.clusters][:3] == [
        "hold_flight",
        "hold_hotel",
        "confirm_itinerary",
    ]
    one = diagram.build(spec, "crash-windows", effect="hold_hotel")
    assert [c.lines[0].text for c in one.clusters] == ["hold_hotel"]
    assert len(one.nodes) == len(every.nodes) // len(every.clusters)


# -- crash windows of a compensating effect -------------------------------------------------------


def test_a_compensating_effect_draws_its_own_crash_windows_with_effect_undo(
    capsys: pytest.CaptureFixture[str],
) -> None:
    booking = str(SPECS / "booking.yaml")
    args = ("diagram", booking, "--view", "crash-windows", "--effect", "release_flight")
    code, source, err = run(capsys, *args)
    assert (code, err) == (0, "")
    graph = diagram.build(shipped("booking"), "crash-windows", effect="release_flight")
    (cluster,) = graph.clusters
    assert cluster.lines[0].text == "release_flight"
    assert "undoes hold_flight (registered by transitions[0]), run in releasing" in [
        line.text for line in cluster.lines
    ]
    for text in (
        "in releasing",
        "1 · write ahead",
        "the registered undo: pending record, attempt counted",
        "operation ID = sha256(hold_flight&#x27;s operation",
        "2 · call sent",
        "airline.release(hold_id)",
        "idempotency key = the operation ID",
        "3 · provider commits",
        "4 · receipt + undo committed",
        "receipt release_id stored, operation done",
        "hold_flight recorded undone; the run stays in",
        "W1 · crash before the request",
        "W2 · request in flight",
        "W3 · provider committed, reply lost",
        "W4 · receipt stored, checkpoint missing",
        "not found → same-ID retry",
        "found → done, no new call",
        "skip the call, go on to the next undo",
        "the next undo, newest first",
    ):
        assert text in source, text
    assert RED not in source
    assert len(graph.nodes) == len(diagram.build(shipped("refund"), "crash-windows").nodes)


def test_a_compensating_effect_without_a_lookup_is_drawn_unsafe_with_E504(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    text = (SPECS / "booking.yaml").read_text(encoding="utf-8")
    release = "args: {hold_id: receipts.hold_flight.hold_id}\n    receipt: release_id\n"
    assert f"{release}    reconcile: lookup\n" in text
    path = tmp_path / "booking.yaml"
    path.write_text(text.replace(f"{release}    reconcile: lookup\n", release), encoding="utf-8")
    args = ("diagram", str(path), "--view", "crash-windows", "--effect", "release_flight")
    code, source, err = run(capsys, *args)
    assert code == 1
    assert " E504 effect 'release_flight' has no reconcile lookup" in err
    assert RED in source
    assert "recovery: retry and hope: may duplicate" in source


def test_every_effect_that_check_crashes_is_drawn_and_may_be_named(
    capsys: pytest.CaptureFixture[str],
) -> None:
    graph = diagram.build(shipped("booking"), "crash-windows")
    assert [c.lines[0].text for c in graph.clusters] == [
        "hold_flight",
        "hold_hotel",
        "confirm_itinerary",
        "release_flight",
        "release_hotel",
    ]
    booking = str(SPECS / "booking.yaml")
    code, _, err = run(capsys, "diagram", booking, "--view", "crash-windows", "--effect", "nope")
    assert code == 2
    assert "release_flight, release_hotel" in err


def test_the_saga_view_lists_the_forward_effects_then_undoes_them_newest_first() -> None:
    graph = diagram.build(shipped("booking"), "saga")
    titles = [node.lines[0].text for node in graph.nodes if node.lines]
    forward = [node.lines[0].text for node in graph.nodes if node.role == "forward"]
    assert forward == ["1 · hold_flight", "2 · hold_hotel", "3 · confirm_itinerary"]
    (undo_path,) = graph.clusters
    assert undo_path.lines[0].text == "releasing"
    undo = {graph.node(n).lines[0].text: n for n in undo_path.nodes}
    newest_first = {
        (graph.node(e.tail).lines[0].text, graph.node(e.head).lines[0].text)
        for e in graph.edges
        if e.role == "undo" and e.tail in undo.values() and e.head in undo.values()
    }
    assert newest_first == {
        ("3 · confirm_itinerary may have been made", "undo 2 · release_hotel"),
        ("undo 2 · release_hotel", "undo 1 · release_flight"),
        ("undo 2 · release_hotel, if hold_hotel was made", "undo 1 · release_flight"),
    }
    assert {"released", "needs_operator"} <= set(titles)
    kept = graph.node(undo["3 · confirm_itinerary may have been made"])
    assert kept.role == "kept_none_maybe"
    assert "the last step; nothing after it can fail" in [line.text for line in kept.lines]


def test_the_saga_view_marks_an_effect_that_cannot_be_undone() -> None:
    source = diagram.text(diagram.build(shipped("returns"), "saga"), "dot")
    assert "CANNOT BE UNDONE (impossible)" in source
    assert "a parcel that has left cannot be called back" in source
    assert "no compensate state: nothing is undone" in source


# -- the saga: what each way into the undo path can have made -------------------------------------

FIXTURES = ROOT / "tests" / "fixtures"
#: The downgrade with its e-mail declared impossible to undo: the e-mail is the last step, so no
#: way into the undo path can have sent it.
EMAIL_IMPOSSIBLE = (
    '"none: an e-mail sent cannot be unsent"',
    '"impossible: an e-mail sent cannot be unsent"',
)


def downgrade(old: str | None = None, new: str = "") -> Spec:
    text = (FIXTURES / "downgrade.yaml").read_text(encoding="utf-8")
    if old is not None:
        assert old in text
        text = text.replace(old, new)
    report = validate_text(text, "downgrade.yaml")
    assert report.spec is not None
    assert report.ok(), [d.format() for d in report.diagnostics]
    return report.spec


def ways(spec: Spec) -> dict[tuple[str, str], tuple[tuple[str, str], ...]]:
    """(state, event) of each row into a compensate state → what that way can have made."""
    return {(way.row.state, way.row.event): way.effects for way in saga_view.ways_in(spec)}


def titled(graph: diagram.Graph, title: str) -> str:
    return next(n.id for n in graph.nodes if n.lines and n.lines[0].text == title)


def entries(graph: diagram.Graph, tail: str) -> dict[str, str]:
    """The events of each way into the undo path out of node ``tail`` → the title of the node
    where that way enters it."""
    return {
        edge.lines[0].text: graph.node(edge.head).lines[0].text
        for edge in graph.edges
        if edge.tail == tail and edge.role == "fail"
    }


def test_each_way_into_the_undo_path_counts_only_what_can_have_been_made_on_it() -> None:
    made, maybe = "made", "maybe"
    assert ways(downgrade(*EMAIL_IMPOSSIBLE)) == {
        ("changing_plan", "refused"): (("refund_prorated", made),),
        ("changing_plan", "exhausted"): (("change_plan", maybe), ("refund_prorated", made)),
    }
    both = (("hold_hotel", made), ("hold_flight", made))
    assert ways(shipped("booking")) == {
        ("holding_hotel", "refused"): (("hold_flight", made),),
        ("holding_hotel", "exhausted"): (("hold_hotel", maybe), ("hold_flight", made)),
        ("approving", "reject"): both,
        ("approving", "expired"): both,
        ("confirming", "refused"): both,
        # the approval lapsed before a call that had to be sent again: the first may have landed
        ("confirming", "expired"): (("confirm_itinerary", maybe), *both),
    }


def test_an_undo_path_reached_only_before_the_email_never_draws_the_email() -> None:
    graph = diagram.build(downgrade(*EMAIL_IMPOSSIBLE), "saga")
    source = diagram.text(graph, "dot")
    assert source.count("CANNOT BE UNDONE") == 1  # the forward e-mail says so, nothing else
    (undo_path,) = graph.clusters
    drawn = [graph.node(n) for n in undo_path.nodes]
    assert not any("send_email" in line.text for node in drawn for line in node.lines)
    assert {node.role for node in drawn} == {"undo", "kept_none_maybe"}
    # a refused plan change was not made: that way enters straight at the charge-back
    assert entries(graph, titled(graph, "2 · change_plan")) == {
        "refused": "undo 1 · charge_back",
        "exhausted": "2 · change_plan may have been made",
    }
    assert any("may have been made" in entry.text for entry in graph.legend)


def test_a_refused_confirm_is_not_drawn_kept_on_the_booking_undo_path() -> None:
    graph = diagram.build(shipped("booking"), "saga")
    titles = [node.lines[0].text for node in graph.nodes if node.lines]
    assert "3 · confirm_itinerary is kept" not in titles
    assert entries(graph, titled(graph, "3 · confirm_itinerary")) == {
        "refused": "undo 2 · release_hotel",
        "expired": "3 · confirm_itinerary may have been made",
    }
    assert entries(graph, titled(graph, "2 · hold_hotel")) == {
        "refused": "undo 1 · release_flight",
        "exhausted": "undo 2 · release_hotel, if hold_hotel was made",
    }
    assert entries(graph, titled(graph, "approving")) == {
        "reject / expired": "undo 2 · release_hotel"
    }
    maybe = graph.node(titled(graph, "undo 2 · release_hotel, if hold_hotel was made"))
    assert maybe.role == "undo_maybe"
    assert "looked up first: found → undone · not found → skipped" in [
        line.text for line in maybe.lines
    ]
    # each release is drawn once per suffix of the undo path; they all end in release_flight
    assert titles.count("undo 1 · release_flight") == 1


def test_a_way_in_that_made_nothing_has_nothing_to_undo() -> None:
    spec = downgrade("next_state: not_refunded", "next_state: charging_back")
    assert ways(spec)[("refunding", "refused")] == ()
    graph = diagram.build(spec, "saga")
    assert entries(graph, titled(graph, "1 · refund_prorated"))["refused"] == "nothing to undo"


def test_leaving_an_undo_path_undoes_what_it_undid_but_keeps_the_rest() -> None:
    by_hand = saga_view.after_row
    spec = shipped("booking")
    ok = next(r for r in spec.transitions if r.state == "releasing" and r.event == "ok")
    before = {"holding_flight": "made", "holding_hotel": "maybe", "confirming": "made"}
    assert by_hand(spec, ok, before) == {"confirming": "made"}  # confirm's undo is none: kept


# -- the saga of a branching spec: the order the runtime undoes in --------------------------------

#: Paid by card or by invoice (a guard decides; the invoice way checks credit first), then a
#: courier and the shop's confirmation: each example enters the undo path by one row, having
#: paid one way.
CHECKOUT = FIXTURES / "checkout.yaml"
CHECKOUT_UNDOS = ("card_refused", "invoice_refused", "card_no_courier", "invoice_no_courier")


def checkout() -> Spec:
    report = validate_path(CHECKOUT, "checkout.yaml")
    assert report.spec is not None
    assert report.ok(), [d.format() for d in report.diagnostics]
    return report.spec


def runtime_undo(
    capsys: pytest.CaptureFixture[str], spec: Spec, example: str
) -> tuple[tuple[str, str], tuple[str, ...]]:
    """Run ``example`` on a practice store: the row its run took into the undo path (state,
    event), and the forward effects the runtime then undid or kept, in the order it did."""
    code, out, err = run(capsys, "run", str(CHECKOUT), "--example", example, "--json")
    assert code == 0, err
    code, out, err = run(capsys, "trace", json.loads(out)["run"], "--json")
    assert code == 0, err
    events = json.loads(out)["events"]
    undoes = {
        row.compensation.effect: row.external_effect
        for row in spec.transitions
        if row.compensation is not None and row.compensation.effect is not None
    }
    (way,) = [
        (e["from"], e["event"]) for e in events if e["kind"] == "moved" and e["to"] == "undoing"
    ]
    order = tuple(
        undoes[e["effect"]] if e["kind"] == "done" else e["effect"]
        for e in events
        if (e["kind"] == "done" and e["role"] == "compensation")
        or e["kind"] == "compensation_skipped"
    )
    return way, order


def handled(node: diagram.Node) -> str:
    """The forward effect an undo-path node undoes, looks up or keeps."""
    title = node.lines[0].text
    found = re.fullmatch(r"undo (?:\d+ · )?\w+, if (\w+) was made", title) or re.fullmatch(
        r"(?:\d+ · )?(\w+) (?:is kept|may have been made)", title
    )
    if found:
        return found[1]
    (undoes,) = [
        line.text.removeprefix("undoes ") for line in node.lines if line.text.startswith("undoes ")
    ]
    return undoes


def drawn_undo(graph: diagram.Graph, state: str, event: str) -> set[tuple[str, ...]]:
    """Each order in which the diagram undoes (or keeps) the forward effects on a way into the
    undo path by the row (``state``, ``event``): from where the way enters, along the undo
    edges, to the end of the path."""
    (undo_path,) = graph.clusters
    (tail,) = [
        n.id
        for n in graph.nodes
        if n.role == "forward" and any(line.text.startswith(f"in {state}:") for line in n.lines)
    ]
    orders = set()
    for entry in graph.edges:
        if (
            entry.tail != tail
            or entry.role != "fail"
            or event not in entry.lines[0].text.split(" / ")
        ):
            continue
        order, node = [], entry.head
        while node in undo_path.nodes:
            order.append(handled(graph.node(node)))
            node = next(
                (e.head for e in graph.edges if e.tail == node and e.head in undo_path.nodes), ""
            )
        orders.add(tuple(order))
    return orders


def test_the_saga_of_a_branching_spec_undoes_each_way_in_the_order_the_runtime_does(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RATCHET_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RATCHET_DB", raising=False)
    spec = checkout()
    runtime: dict[tuple[str, str], set[tuple[str, ...]]] = {}
    for example in CHECKOUT_UNDOS:
        way, order = runtime_undo(capsys, spec, example)
        runtime.setdefault(way, set()).add(order)
    assert runtime == {  # newest first, only what that run's way made
        ("confirming", "refused"): {
            ("book_courier", "charge_card"),
            ("book_courier", "issue_invoice", "check_credit"),
        },
        ("booking_courier", "refused"): {("charge_card",), ("issue_invoice", "check_credit")},
    }
    graph = diagram.build(spec, "saga")
    for (state, event), orders in runtime.items():
        assert drawn_undo(graph, state, event) == orders, (state, event)


def test_the_saga_of_a_branching_spec_numbers_alternatives_alike_and_tells_the_ways_apart() -> None:
    graph = diagram.build(checkout(), "saga")
    forward = [node.lines[0].text for node in graph.nodes if node.role == "forward"]
    assert forward == [
        "1 · charge_card",
        "1 · check_credit",
        "3 · book_courier",
        "2 · issue_invoice",
        "4 · confirm_order",
    ]
    ways_out = {
        tuple(line.text for line in edge.lines)
        for edge in graph.edges
        if edge.role == "fail" and edge.tail == titled(graph, "4 · confirm_order")
    }
    assert ways_out == {
        ("refused", "the way that made charge_card"),
        ("refused", "the way that made check_credit, issue_invoice"),
    }
    lost = [w.effects for w in saga_view.ways_in(checkout()) if w.row.event == "exhausted"]
    assert lost == [  # the courier's outcome unknown: one way in per way it can have come
        (("book_courier", "maybe"), ("charge_card", "made")),
        (("book_courier", "maybe"), ("issue_invoice", "made"), ("check_credit", "made")),
    ]
    legend = [entry.text for entry in graph.legend]
    assert (
        "a forward effect, numbered by its place on its way (the same number: alternatives)"
        in legend
    )


@pytest.mark.parametrize("fmt", ["dot", "mmd"])
def test_the_saga_of_the_branching_checkout_fixture_matches_its_golden_file(fmt: str) -> None:
    graph = diagram.build(checkout(), "saga")
    check_golden(f"checkout-saga.{fmt}", diagram.text(graph, "dot" if fmt == "dot" else "mermaid"))


def choices(count: int) -> Spec:
    """A spec built by hand: ``count`` choices in a row, each between two effects that a
    charge-back undoes, then a step that fails into the undo path: 2 ** count ways reach it."""

    def effect(name: str) -> Effect:
        return Effect(name, "payments", "charge", {}, None, None, Retry(), 10.0, None)

    states = {
        name: State(name, "step") for i in range(count) for name in (f"c{i}", f"a{i}", f"b{i}")
    }
    states |= {
        "last": State("last", "step"),
        "undoing": State("undoing", "compensate"),
        "undone": State("undone", "compensated"),
        "done": State("done", "success"),
    }
    effects, rows = {"back": effect("back"), "final": effect("final")}, []
    for i in range(count):
        after = f"c{i + 1}" if i + 1 < count else "last"
        rows += [
            Row(len(rows), f"c{i}", "next", f"a{i}", guard=f"input.c{i} == 1"),
            Row(len(rows) + 1, f"c{i}", "next", f"b{i}", guard=f"input.c{i} == 2"),
        ]
        for way in ("a", "b"):
            effects[f"{way}{i}"] = effect(f"{way}{i}")
            rows.append(
                Row(
                    len(rows),
                    f"{way}{i}",
                    "ok",
                    after,
                    external_effect=f"{way}{i}",
                    compensation=Compensation("effect", "back"),
                )
            )
    rows += [
        Row(len(rows), "last", "ok", "done", external_effect="final"),
        Row(len(rows) + 1, "last", "refused", "undoing"),
        Row(len(rows) + 2, "undoing", "ok", "undone"),
    ]
    return Spec(
        name="choices",
        spec_version=1,
        policy_version=1,
        business_key="input.k",
        start="c0",
        input_schema={},
        states=states,
        transitions=tuple(rows),
        effects=effects,
    )


def test_a_saga_with_more_ways_than_can_be_drawn_apart_draws_them_joined_and_says_so() -> None:
    assert len(saga_view.ways_in(choices(MAX_HISTORIES.bit_length() - 1))) == MAX_HISTORIES
    many = choices(MAX_HISTORIES.bit_length())  # twice as many ways as are followed apart
    assert histories_before(many) is None
    (way,) = saga_view.ways_in(many)  # one way in: everything any way can have made
    assert len(way.states) == 2 * MAX_HISTORIES.bit_length()
    graph = diagram.build(many, "saga", diagnostics=[])
    notes = [" ".join(line.text for line in n.lines) for n in graph.nodes if n.role == "note"]
    assert any(f"more than {MAX_HISTORIES} ways reach one state" in note for note in notes)


# -- unsafe rows -----------------------------------------------------------------------------------


def test_a_refund_without_a_reconcile_lookup_is_drawn_unsafe_with_E504(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = refund_variant(tmp_path, "reconcile: lookup_refund", "reconcile: none")
    out = tmp_path / "crash.dot"
    code, _, err = run(capsys, "diagram", str(path), "--view", "crash-windows", "-o", str(out))
    assert code == 1
    assert " E504 " in err
    source = out.read_text(encoding="utf-8")
    assert RED in source
    assert "E504 no reconcile lookup" in source
    assert "recovery: retry and hope: may duplicate" in source
    assert "found → done" not in source


def test_a_refund_without_an_idempotency_key_is_drawn_unsafe_with_E501(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = refund_variant(tmp_path, " idempotency_key: [business_key, effect, args],", "")
    code, out, err = run(capsys, "diagram", str(path), "--view", "crash-windows")
    assert code == 1
    assert " E501 " in err
    assert RED in out
    assert "E501 no idempotency key: every attempt is a new change" in out
    assert "retry and hope" in out


def test_a_warning_on_an_effect_row_is_drawn_unsafe_but_the_command_succeeds(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = refund_variant(
        tmp_path, "idempotency_key: [business_key, effect, args]", "idempotency_key: [effect, args]"
    )
    code, out, err = run(capsys, "diagram", str(path), "--view", "crash-windows")
    assert code == 0
    assert " W517 " in err
    assert "W517 the key does not name the business key" in out


def test_only_the_crash_windows_view_draws_an_unsafe_spec(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = refund_variant(tmp_path, "reconcile: lookup_refund", "reconcile: none")
    for view in ("states", "saga"):
        code, out, err = run(capsys, "diagram", str(path), "--view", view)
        assert (code, out) == (1, "")
        assert " E504 " in err


# -- the command -----------------------------------------------------------------------------------


def test_an_invalid_spec_prints_its_diagnostics_and_exits_one(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = refund_variant(tmp_path, "next_state: refunded,", "next_state: refundd,")
    for view in diagram.VIEWS:
        code, out, err = run(capsys, "diagram", str(path), "--view", view)
        assert (code, out) == (1, "")
        assert re.search(r"refund\.yaml:\d+:\d+: E301 unknown state 'refundd'", err)
        assert "Traceback" not in err


def test_an_unknown_effect_is_a_usage_error_that_lists_the_effects(
    capsys: pytest.CaptureFixture[str],
) -> None:
    booking = str(SPECS / "booking.yaml")
    code, out, err = run(capsys, "diagram", booking, "--view", "crash-windows", "--effect", "nope")
    assert (code, out) == (2, "")
    assert "hold_flight, hold_hotel, confirm_itinerary" in err


def test_effect_with_another_view_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "diagram", str(SPECS / "booking.yaml"), "--effect", "hold_hotel")
    assert code == 2
    assert "--view crash-windows" in err


def test_dot_and_mermaid_print_text_on_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    refund = str(SPECS / "refund.yaml")
    code, out, _ = run(capsys, "diagram", refund, "--format", "dot")
    assert code == 0
    assert out.startswith("digraph ratchet {")
    code, out, _ = run(capsys, "diagram", refund, "--view", "saga", "--format", "mermaid")
    assert code == 0
    assert out.startswith("flowchart TD")


def test_an_image_format_needs_an_output_file(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "diagram", str(SPECS / "refund.yaml"), "--format", "png")
    assert (code, out) == (2, "")
    assert "-o FILE" in err


def test_the_format_follows_the_output_files_suffix_when_not_given(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "refund.mmd"
    code, _, err = run(capsys, "diagram", str(SPECS / "refund.yaml"), "-o", str(out))
    assert code == 0
    assert f"wrote {out}" in err
    assert out.read_text(encoding="utf-8").startswith("stateDiagram-v2")


@needs_dot
def test_svg_png_and_pdf_are_drawn_by_the_real_dot(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    magic = {"svg": b"<?xml", "png": b"\x89PNG\r\n\x1a\n", "pdf": b"%PDF"}
    for fmt, head in magic.items():
        out = tmp_path / f"booking.{fmt}"
        args = ["diagram", str(SPECS / "booking.yaml"), "--view", "saga", "--format", fmt]
        code, _, _ = run(capsys, *args, "-o", str(out))
        assert code == 0
        data = out.read_bytes()
        assert len(data) > 1000
        assert data.startswith(head)
    assert b"</svg>" in (tmp_path / "booking.svg").read_bytes()


MISSING_DOT = (
    "Graphviz's `dot` program was not found",
    "apt-get install graphviz",
    "brew install graphviz",
)


def test_without_dot_an_image_says_how_to_install_graphviz_and_exits_one(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    out = tmp_path / "refund.svg"
    code, stdout, err = run(capsys, "diagram", str(SPECS / "refund.yaml"), "-o", str(out))
    assert (code, stdout) == (1, "")
    assert all(text in err for text in MISSING_DOT)
    assert "Traceback" not in err
    assert not out.exists()


def test_without_dot_the_dot_and_mermaid_formats_still_work(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_dot(cmd: list[str], **_: object) -> None:
        raise graphviz.ExecutableNotFound(cmd)

    monkeypatch.setattr("graphviz.backend.execute.run_check", no_dot)
    refund = str(SPECS / "refund.yaml")
    for fmt in ("dot", "mermaid"):
        code, out, _ = run(capsys, "diagram", refund, "--view", "crash-windows", "--format", fmt)
        assert code == 0
        assert out
    with pytest.raises(GraphvizNotFound, match="apt-get install graphviz"):
        diagram.image(diagram.build(shipped("refund"), "states"), "png")


def test_the_states_view_can_emphasise_where_a_run_is() -> None:
    """The console's run page: the current state outlined and saying so; no other node is."""
    from ratchet_runner.review.diagram.dot import HIGHLIGHT, dot_source
    from ratchet_runner.review.diagram.states import states_graph

    spec = shipped("refund")
    plain = dot_source(states_graph(spec))
    graph = states_graph(spec, "refunding")
    text = dot_source(graph)
    assert HIGHLIGHT not in plain
    assert "this run is here" not in plain
    assert text.count(HIGHLIGHT) == 1
    assert text.count("this run is here") == 1
    emphasised = graph.node(graph.highlight or "")
    assert emphasised.lines[0].text == "refunding"
    assert states_graph(spec, "no_such_state").highlight is None
