"""Golden histories: every shipped example's run, exported, written, read back and replayed clean
against its own spec, on SQLite and on PostgreSQL; and a spec changed in each way that matters
caught at the first event the change touches, with its code, at the new version's row.

The runs are :mod:`tests.integration.replay_runs`' scenarios: each example as its world says
(a reply lost after the write, a request lost before it, a refusal), and the ways a run ends
that an example alone does not show (a pause that lapses, an operator's retry, cancel and
compensate, a rejection, a signal and a wait timer)."""

from __future__ import annotations

import copy
import json
import random
import re
from pathlib import Path
from typing import Any

import pytest

from ratchet_runner.adapters.practice import PracticeWorld
from ratchet_runner.clock import FakeClock
from ratchet_runner.engine.deciding import decide
from ratchet_runner.engine.runner import Runner
from ratchet_runner.errors import UsageError
from ratchet_runner.evolve.history import (
    History,
    LineProblem,
    export_runs,
    history_from_json,
    history_json,
    parse_line,
    read_histories,
    write_histories,
)
from ratchet_runner.evolve.replay import replay, replay_histories
from ratchet_runner.evolve.results import CODES, ReplayResult
from ratchet_runner.review.naive import step_for
from ratchet_runner.spec.model import Spec
from ratchet_runner.spec.validate import load_spec, load_spec_text
from ratchet_runner.store.records import Change
from ratchet_runner.store.store import Store
from tests.conftest import ROOT, SPECS, MakeRunner
from tests.integration.replay_runs import PARCEL, SCENARIOS, drive_all

WORKFLOWS = ("refund", "returns", "booking", "parcel")
GOLDEN_DIR = ROOT / "tests" / "fixtures" / "histories"


def spec_path(workflow: str) -> Path:
    return PARCEL if workflow == "parcel" else SPECS / f"{workflow}.yaml"


def export_to(store: Store, folder: Path) -> dict[str, Path]:
    """Each workflow's histories written to ``FOLDER/WORKFLOW.jsonl``."""
    files = {}
    for workflow in WORKFLOWS:
        path = folder / f"{workflow}.jsonl"
        with path.open("w", encoding="utf-8") as stream:
            write_histories(export_runs(store, workflow=workflow), stream)
        files[workflow] = path
    return files


def test_every_example_exported_read_back_and_replayed_against_its_own_spec_replays_clean(
    make_runner: MakeRunner,
    world: PracticeWorld,
    clock: FakeClock,
    store: Store,
    tmp_path: Path,
) -> None:
    made = drive_all(make_runner(), world, clock)
    files = export_to(store, tmp_path)
    replayed: list[ReplayResult] = []
    for workflow, path in files.items():
        exported = export_runs(store, workflow=workflow)
        read = read_histories(path)
        # the round trip loses nothing: what was read is what the store holds
        assert [history_json(h) for h in read] == [history_json(h) for h in exported]
        assert [h.source for h in read] == [f"{path}:{n}" for n in range(1, len(read) + 1)]
        results = replay(load_spec(spec_path(workflow)), read)
        assert [r.lines() for r in results if not r.clean] == []
        replayed += results
    wanted = {made[name] for name, *_ in SCENARIOS}
    assert {r.run_id for r in replayed} == wanted
    assert all(r.clean for r in replayed)
    # the histories hold what the scenarios say: lapsed, compensated, operator-handled, signalled
    kinds = {name: [e.kind for e in store.history(made[name])] for name, *_ in SCENARIOS}
    assert "timer" in kinds["refund T-90603: lapsed"]
    assert "compensated" in kinds["booking TRIP-1004: approval lapsed, compensated"]
    assert "operator" in kinds["refund T-90105: unavailable, retried by an operator"]
    assert (
        kinds["booking TRIP-1005: release failing, compensated by an operator"].count("compensated")
        == 1
    )
    assert {"signal", "timer"} <= set(kinds["parcel P-1: a signal, then a wait timer"])
    assert "timeout" in kinds["refund T-90104: reply lost after the write"]


def test_an_export_reads_a_run_again_when_it_moves_while_being_read(
    make_runner: MakeRunner, world: PracticeWorld, store: Store
) -> None:
    """Each history is the run as of one version: the events, operations and approvals read
    while another process commits are read again with the run."""
    spec = load_spec(SPECS / "refund.yaml")
    runner = make_runner()
    run, _ = runner.start(spec, (SPECS / "refund.yaml").read_text(), spec.examples["T-90603"].input)
    moved = {"done": False}
    reading = store.history

    def history_while_a_worker_commits(run_id: str) -> list[object]:
        found = reading(run_id)
        if not moved["done"]:
            moved["done"] = True
            latest = store.get_run(run_id)
            store.commit(Change(run_id, latest.version, latest.updated_at).event("leased"))
        return found  # type: ignore[return-value]

    store.history = history_while_a_worker_commits  # type: ignore[method-assign]
    (exported,) = export_runs(store, [run.id])
    assert exported.run.version == 2
    assert [e.kind for e in exported.events] == ["created", "paused", "leased"]


def test_an_export_names_runs_by_id_or_business_key_and_refuses_an_unknown_workflow(
    make_runner: MakeRunner, store: Store
) -> None:
    spec = load_spec(SPECS / "refund.yaml")
    runner = make_runner()
    text = (SPECS / "refund.yaml").read_text()
    first, _ = runner.start(spec, text, spec.examples["T-90104"].input)
    second, _ = runner.start(spec, text, spec.examples["T-90603"].input)
    named = export_runs(store, ["T-90603", first.id, second.id])
    assert [h.run.id for h in named] == [second.id, first.id]
    assert [h.specs[0].digest for h in named] == [spec.digest, spec.digest]
    with pytest.raises(UsageError, match=r"no workflow 'refnd' in the store \(workflows: refund\)"):
        export_runs(store, workflow="refnd")
    assert export_runs(store, workflow="refund", since=first.created_at + 1) == []


# -- a changed spec, caught at the first event it changes ------------------------------------


@pytest.fixture(scope="module")
def golden(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Path], dict[str, str]]:
    """Every scenario's run, on a SQLite store, exported: the file of each workflow, and each
    scenario's run ID."""
    folder = tmp_path_factory.mktemp("golden")
    store = Store(f"sqlite:///{folder / 'ratchet.db'}")
    world, clock = PracticeWorld(folder / "practice.db"), FakeClock()
    runner = Runner(store, lambda adapter: world.adapter(adapter.kind), clock, steps=step_for)
    try:
        made = drive_all(runner, world, clock)
        return export_to(store, folder), made
    finally:
        store.close()


def mutated(workflow: str, *changes: tuple[str, str]) -> tuple[Spec, str]:
    """The workflow's spec with each ``(old, new)`` text replaced (each must be there once)."""
    text = spec_path(workflow).read_text(encoding="utf-8")
    for old, new in changes:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return load_spec_text(text, f"{workflow}-changed.yaml"), text


#: (what changed, the workflow, its changes, the scenario it touches, the event number and kind
#: where it is caught, the code, a word of the line the new version's location points at)
MUTATIONS = [
    (
        "a guard tightened so that the recorded approval no longer passes",
        "refund",
        [("input.amount <= 100.0 ||", "input.amount <= 5.0 ||")],
        "refund T-90104: reply lost after the write",
        (4, "approved"),
        "V304",
        "guard:",
    ),
    (
        "a state removed (its rows sent elsewhere)",
        "refund",
        [
            ("  lapsed:       {kind: cancelled, description: Nobody decided in time}\n", ""),
            ("event: expired, next_state: lapsed,", "event: expired, next_state: rejected,"),
            ("event: expired,   next_state: lapsed,", "event: expired,   next_state: rejected,"),
        ],
        "refund T-90603: lapsed",
        (3, "timer"),
        "V302",
        "event: expired",
    ),
    (
        "an event renamed",
        "refund",
        [
            ("resumes_on: [approve, reject]", "resumes_on: [accept, reject]"),
            ("event: approve,", "event: accept,"),
        ],
        "refund T-90104: reply lost after the write",
        (4, "approved"),
        "V303",
        "proposed:",
    ),
    (
        "an effect moved to another row",
        "refund",
        [
            (
                "  refunding:    {kind: step, description: The refund is being made (or "
                "reconciled)}\n",
                "  refunding:    {kind: step}\n  paying:       {kind: step}\n",
            ),
            (
                "  - {state: refunding, event: ok,      next_state: refunded,",
                "  - {state: refunding, event: next, next_state: paying, durable_write: approval}"
                "\n  - {state: paying, event: ok,      next_state: refunded,",
            ),
            ("  - {state: refunding, event: refused", "  - {state: paying, event: refused"),
            ("  - {state: refunding, event: exhausted", "  - {state: paying, event: exhausted"),
            ("  - {state: refunding, event: expired", "  - {state: paying, event: expired"),
            ("  - {state: refunding, event: unknown", "  - {state: paying, event: unknown"),
        ],
        "refund T-90104: reply lost after the write",
        (6, "pending"),
        "V308",
        "state: paying, event: ok",
    ),
    (
        "the key recipe changed (idempotency_key)",
        "refund",
        [
            (
                "idempotency_key: [business_key, effect, args],\n     receipt: refund_id",
                "idempotency_key: [business_key, effect, args.order, args.amount, "
                "args.currency, args.reason],\n     receipt: refund_id",
            )
        ],
        "refund T-90104: reply lost after the write",
        (6, "pending"),
        "V305",
        "idempotency_key:",
    ),
    (
        "the business key's recipe changed",
        "returns",
        [
            (
                "business_key: \"input.ticket + '/' + input.action\"",
                "business_key: \"input.ticket + ':' + input.action\"",
            )
        ],
        "returns T-90604: request lost before the write",
        (1, "created"),
        "V314",
        "business_key:",
    ),
    (
        "an effect's arguments changed, so that the approval binds others",
        "booking",
        [
            (
                "      trip: input.trip\n      flight_hold:",
                "      trip: input.traveller\n      flight_hold:",
            )
        ],
        "booking happy",
        (14, "approved"),
        "V306",
        "binds: all",
    ),
    (
        "an undo taken away",
        "booking",
        [
            (
                "retry_owner: runner, compensation: release_flight}",
                'retry_owner: runner, compensation: "none: the airline lets holds lapse"}',
            )
        ],
        "booking hotel_refused: compensated",
        (2, "pending"),
        "V307",
        "compensation:",
    ),
    (
        "a pause's expiry shortened",
        "refund",
        [("expires_after: 72h}", "expires_after: 48h}")],
        "refund T-90603: lapsed",
        (3, "timer"),
        "V310",
        "expires_after: 48h",
    ),
    (
        "a signal's guard tightened",
        "parcel",
        [("signal.weight_kg > 0.0", "signal.weight_kg > 5.0")],
        "parcel P-1: a signal, then a wait timer",
        (8, "signal"),
        "V304",
        "guard:",
    ),
    (
        "an operator role renamed",
        "refund",
        [("roles: [payments_ops]", "roles: [payments_lead]")],
        "refund T-90105: unavailable, retried by an operator",
        (20, "operator"),
        "V313",
        "payments_lead",
    ),
    (
        "an approver role taken away",
        "refund",
        [("roles: [agent, team_lead]", "roles: [team_lead]")],
        "refund T-90104: reply lost after the write",
        (4, "approved"),
        "V312",
        "roles: [team_lead]",
    ),
]


@pytest.mark.parametrize(
    ("workflow", "changes", "scenario", "at", "code", "shown"),
    [pytest.param(*rest, id=what) for what, *rest in MUTATIONS],
)
def test_a_changed_spec_is_caught_at_the_first_event_it_changes(
    golden: tuple[dict[str, Path], dict[str, str]],
    workflow: str,
    changes: list[tuple[str, str]],
    scenario: str,
    at: tuple[int, str],
    code: str,
    shown: str,
) -> None:
    files, made = golden
    spec, text = mutated(workflow, *changes)
    results = {r.run_id: r for r in replay_histories(spec, files[workflow])}
    found = results[made[scenario]].divergence
    assert found is not None, results[made[scenario]].lines()
    assert (found.event, found.kind, found.code) == (*at, code), found.where.format()
    assert found.title == CODES[code]
    # located at the new version's row, state or field the change is about
    assert found.where.file == f"{workflow}-changed.yaml"
    assert shown in text.splitlines()[found.where.line - 1], found.where.format()
    # the history's events before it are the same under the new version: they replay as before
    history = next(h for h in read_histories(files[workflow]) if h.run.id == made[scenario])
    assert history.events[found.event - 1].kind == found.kind


def test_a_harmless_change_replays_every_history_clean(
    golden: tuple[dict[str, Path], dict[str, str]],
) -> None:
    """Descriptions and wording, and a new state nothing reaches yet, change no recorded step."""
    files, _ = golden
    spec, _ = mutated(
        "refund",
        ("Read the provider's refusal; refund by hand", "Read the refusal; refund by hand"),
        ("description: Nobody decided in time", "description: Nobody decided within 72 hours"),
        (
            "  needs_person: {kind: operator_queue}\n",
            "  needs_person: {kind: operator_queue}\n  escalated:    {kind: operator_queue}\n",
        ),
    )
    results = replay_histories(spec, files["refund"])
    assert [r.lines() for r in results if not r.clean] == []
    assert len(results) == 4


def test_a_new_spec_version_compares_what_approvals_bind_and_says_they_would_be_asked_again(
    golden: tuple[dict[str, Path], dict[str, str]], tmp_path: Path
) -> None:
    """A digest binds the spec and policy versions: replay compares what it binds, and says of
    a run that could still be moved that its decisions would be asked again."""
    files, _ = golden
    spec, _ = mutated("refund", ("spec_version: 1", "spec_version: 2"))
    ended = replay_histories(spec, files["refund"])
    assert [r.lines() for r in ended if not r.clean] == []
    assert [n for r in ended for n in r.notes] == []
    store = Store(f"sqlite:///{tmp_path / 'ratchet.db'}")
    world, clock = PracticeWorld(tmp_path / "practice.db"), FakeClock()
    runner = Runner(store, lambda adapter: world.adapter(adapter.kind), clock)
    original = load_spec(SPECS / "refund.yaml")
    example = original.examples["T-90104"]
    world.seed({"orders": example.world["orders"]})
    world.add_fault("request_refund", "unavailable", times=3)
    run, _ = runner.start(original, (SPECS / "refund.yaml").read_text(), example.input)
    decide(runner, run.id, "approve", "agent-7", "agent")
    assert runner.advance(run.id).status == "needs_person"
    (waiting,) = replay(spec, export_runs(store))
    store.close()
    assert waiting.clean
    assert any("would be asked again" in note for note in waiting.notes)


def test_an_unfinished_run_is_shown_where_it_would_continue(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'ratchet.db'}")
    world, clock = PracticeWorld(tmp_path / "practice.db"), FakeClock()
    runner = Runner(store, lambda adapter: world.adapter(adapter.kind), clock)
    spec = load_spec(SPECS / "refund.yaml")
    runner.start(spec, (SPECS / "refund.yaml").read_text(), spec.examples["T-90603"].input)
    histories = export_runs(store)
    store.close()
    changed, _ = mutated("refund", ("expires_after: 72h}", "expires_after: 48h}"))
    (result,) = replay(changed, histories)
    assert result.clean
    going = result.continuation
    assert going is not None
    assert (going.state, going.kind, going.status) == ("proposed", "pause", "waiting")
    assert [(w.event, w.next_state) for w in going.ways] == [
        ("approve", "refunding"),
        ("reject", "rejected"),
        ("expired", "lapsed"),
    ]
    assert going.ways[0].guard == "input.amount <= 100.0 || approval.role == 'team_lead'"
    assert re.fullmatch(r"refund-changed\.yaml:\d+:\d+", going.ways[0].where)
    assert any(n.startswith("waits for a decision on refund_approval") for n in going.notes)
    timer = next(n for n in going.notes if "'expired' timer" in n)
    assert "as armed; this version would arm it for" in timer
    removed, _ = mutated(
        "refund",
        ("  proposed:     {kind: pause", "  asking:       {kind: pause"),
        ("start: proposed", "start: asking"),
        ("{state: proposed,  event: approve", "{state: asking,  event: approve"),
        ("{state: proposed,  event: reject", "{state: asking,  event: reject"),
        ("{state: proposed,  event: expired", "{state: asking,  event: expired"),
    )
    (gone,) = replay(removed, histories)
    assert gone.divergence is not None
    assert gone.divergence.code == "V316"
    assert gone.continuation is not None
    assert gone.continuation.kind is None
    assert "cannot continue: this version has no state 'proposed'" in "\n".join(gone.lines())


def test_histories_of_another_workflow_are_refused_not_replayed(
    golden: tuple[dict[str, Path], dict[str, str]],
) -> None:
    files, _ = golden
    with pytest.raises(UsageError, match=r"returns\.jsonl:1: run run_\w+ is a run of 'returns'"):
        replay_histories(SPECS / "refund.yaml", files["returns"])


# -- sealed values -------------------------------------------------------------------------


def sealed_copy(path: Path, target: Path) -> list[History]:
    """The refund histories with the amount sealed wherever it is kept (input, arguments)."""
    envelope = {"ciphertext": "bm90IHJlYWxseSBlbmNyeXB0ZWQ=", "key_id": "kms/refunds/1"}
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        data = json.loads(line)
        data["run"]["input"]["amount"] = envelope
        for op in data["operations"]:
            if "amount" in op["args"]:
                op["args"]["amount"] = envelope
        lines.append(json.dumps(data))
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return read_histories(target)


def test_a_sealed_value_is_read_and_treated_as_opaque_never_failed(
    golden: tuple[dict[str, Path], dict[str, str]], tmp_path: Path
) -> None:
    files, made = golden
    histories = sealed_copy(files["refund"], tmp_path / "sealed.jsonl")
    results = {r.run_id: r for r in replay(load_spec(SPECS / "refund.yaml"), histories)}
    approved = results[made["refund T-90104: reply lost after the write"]]
    assert approved.clean
    said = " ".join(approved.notes)
    assert "input/amount is sealed" in said
    assert "was not checked" in said
    # what does not read the sealed value is still checked: a changed key recipe is caught
    spec, _ = mutated("refund", ("business_key: input.ticket", "business_key: input.order"))
    changed = {r.run_id: r for r in replay(spec, histories)}
    found = changed[made["refund T-90104: reply lost after the write"]].divergence
    assert found is not None
    assert found.code == "V314"


def _nodes(value: Any) -> list[tuple[Any, Any]]:
    """Every (container, key) of a JSON value, depth first."""
    found: list[tuple[Any, Any]] = []
    keys = value.keys() if isinstance(value, dict) else range(len(value))
    for key in keys:
        found.append((value, key))
        if isinstance(value[key], dict | list):
            found += _nodes(value[key])
    return found


TAMPERED_VALUES: list[Any] = [
    None,
    True,
    0,
    -1,
    1e308,
    "",
    "x" * 300,
    "proposed",
    "ok",
    "approve",
    "unknown",
    [],
    [1, [2]],
    {},
    {"a": {"b": 1}},
    {"ciphertext": "AAEC", "key_id": "kms/1"},
]


def test_a_history_tampered_with_within_the_schema_never_breaks_replay() -> None:
    """A line with a value changed where the schema leaves values free (the input, the context,
    events' data, arguments) that still fits the schema is replayed to a verdict (clean, or a
    divergence): never an exception, whatever the value."""
    rng = random.Random(26)
    lines = {w: (GOLDEN_DIR / f"{w}.jsonl").read_text().splitlines() for w in WORKFLOWS}
    specs = {w: load_spec(spec_path(w)) for w in WORKFLOWS}
    replayed, diverged = 0, 0
    for _ in range(250):
        workflow = rng.choice(WORKFLOWS)
        data = json.loads(rng.choice(lines[workflow]))
        free = [data["run"]["input"], data["run"]["context"], *(e["data"] for e in data["events"])]
        free += [op["args"] for op in data["operations"]]
        container, key = rng.choice([n for part in free for n in _nodes(part)] or _nodes(data))
        container[key] = copy.deepcopy(rng.choice(TAMPERED_VALUES))
        checked = parse_line(json.dumps(data).encode(), "tampered.jsonl", 1)
        if isinstance(checked, LineProblem) or data["run"]["workflow"] != workflow:
            continue
        (result,) = replay(specs[workflow], [history_from_json(checked)])
        replayed += 1
        diverged += not result.clean
    assert replayed > 150  # the others no longer fit the schema, and are refused
    assert diverged > 20


def test_a_row_for_unknown_where_the_history_followed_exhausted_is_caught_if_it_leads_elsewhere(
    tmp_path: Path,
) -> None:
    """A lookup that failed leaves the outcome unknown; with no ``unknown`` row the run followed
    its ``exhausted`` row. A new ``unknown`` row to the same state changes nothing recorded; one
    to another state is a row changed, at that row."""
    store = Store(f"sqlite:///{tmp_path / 'ratchet.db'}")
    world, clock = PracticeWorld(tmp_path / "practice.db"), FakeClock()
    runner = Runner(store, lambda adapter: world.adapter(adapter.kind), clock)
    spec = load_spec(SPECS / "returns.yaml")
    example = spec.examples["T-90604"]
    world.seed({"orders": example.world["orders"]})
    world.add_fault("create_label", "timeout_after_write", calls=[1])
    world.add_fault("create_label", "lookup_fails", calls=[1])
    run, _ = runner.start(spec, (SPECS / "returns.yaml").read_text(), example.input)
    assert runner.advance(run.id).state == "needs_person"
    (history,) = export_runs(store)
    store.close()
    moved = [e for e in history.events if e.kind == "moved"][-1]
    assert moved.data == {
        "from": "labelling",
        "event": "exhausted",
        "to": "needs_person",
        "instead_of": "unknown",
    }
    row = "  - {state: labelling, event: refused,"
    same, _ = mutated(
        "returns", (row, "  - {state: labelling, event: unknown, next_state: needs_person}\n" + row)
    )
    assert replay(same, [history])[0].clean
    elsewhere, text = mutated(
        "returns",
        (
            "  needs_person: {kind: operator_queue}",
            "  needs_person: {kind: operator_queue}\n  checking:     {kind: operator_queue}",
        ),
        (row, "  - {state: labelling, event: unknown, next_state: checking}\n" + row),
    )
    (result,) = replay(elsewhere, [history])
    found = result.divergence
    assert found is not None
    assert (found.code, found.kind) == ("V301", "moved")
    assert "event: unknown, next_state: checking" in text.splitlines()[found.where.line - 1]
