"""The console's pages and routes (its machinery: :mod:`~ratchet_runner.serve.console`): what
each page shows, read from the store as the API reads it, rendered by the templates beside this
module."""

from __future__ import annotations

from importlib.resources import files
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from ..errors import StoreError
from ..review.views import (
    decision,
    event_line,
    evidence,
    latest_event,
    parse_duration,
    queue,
    table_html,
)
from ..words import RUN_STATUSES, EventKind, RunStatus
from .acting import Refusal
from .console import (
    ACTIONS_BY_STATUS,
    PAGE_SIZE,
    act,
    action,
    approve,
    diagram,
    login,
    login_page,
    logout,
    page,
    reject,
    render,
)
from .service import Service
from .sessions import Session

if TYPE_CHECKING:
    from ..engine.runner import Runner
    from ..spec.model import Spec
    from ..store.records import RunRecord


def stylesheet(_request: Request) -> Response:
    css = files("ratchet_runner.serve").joinpath("static/console.css").read_text("utf-8")
    return Response(css, media_type="text/css", headers={"cache-control": "max-age=300"})


def _offset(request: Request) -> int:
    try:
        offset = int(request.query_params.get("offset", "0"))
    except ValueError:
        raise Refusal(400, "R200", "offset must be a whole number") from None
    if offset < 0:
        raise Refusal(400, "R200", "offset must be 0 or more")
    return offset


def _deciders(roles: tuple[str, ...] | list[str], session: Session) -> list[str]:
    """The roles of the signed-in operator in which they may decide (those ``roles`` allows)."""
    return [role for role in session.operator.roles if role in roles]


def _decision(
    runner: Runner, run: RunRecord, now: float, session: Session
) -> dict[str, Any] | None:
    """The decision ``run`` waits for, as the signed-in operator may take it: the queue's item
    (:func:`~ratchet_runner.review.views.decision`: both expiries, the verdict of
    approving in each of their roles the approval allows, the evidence), with the roles in
    which they may approve (``may``: those the guard lets through) and reject (``may_reject``)."""
    operator = session.operator
    item = decision(runner, run, now, actor=operator.name, holding=operator.roles)
    if item is None:
        return None
    item["may"] = [v["role"] for v in item["verdicts"] if v["may_approve"]]
    item["may_reject"] = _deciders(item["roles"], session)
    return item


def queue_page(request: Request, service: Service, session: Session) -> Response:
    """Decisions waiting (oldest first), with the exact arguments and digest, both expiries,
    the verdict for each of the operator's roles and the declared evidence; then the runs
    waiting for a person, with what to do and the evidence."""
    offset = _offset(request)
    runner = service.runner()
    now = runner.decision_now()
    waiting = runner.store.list_runs(RunStatus.WAITING, PAGE_SIZE + 1, offset=offset, oldest=True)
    decisions = []
    for run in waiting[:PAGE_SIZE]:
        item = _decision(runner, run, now, session)
        if item is not None:
            decisions.append(item)
    people = queue(runner, offset=offset, limit=PAGE_SIZE + 1)
    more = len(waiting) > PAGE_SIZE or len(people) > PAGE_SIZE
    people = people[:PAGE_SIZE]
    ops_roles, actions = {}, {}
    for item in people:
        spec = runner.spec_of(runner.store.resolve(item["run"]))
        ops_roles[item["run"]] = _deciders(spec.operator_roles, session)
        actions[item["run"]] = actions_for(spec, RunStatus.NEEDS_PERSON)
    return render(
        request,
        "queue.html",
        {
            "decisions": decisions,
            "people": people,
            "ops_roles": ops_roles,
            "actions": actions,
            "now": now,
            "offset": offset,
            "next_offset": offset + PAGE_SIZE if more else None,
            "page_size": PAGE_SIZE,
        },
    )


def actions_for(spec: Spec, status: str) -> tuple[str, ...]:
    """The operator actions a run's status allows, but compensate when its spec has no
    compensate state (the button would only be refused)."""
    allowed = ACTIONS_BY_STATUS.get(status, ())
    if not any(state.kind == "compensate" for state in spec.states.values()):
        allowed = tuple(a for a in allowed if a != "compensate")
    return allowed


def _age(text: str) -> float | None:
    """``45s``, ``30m``, ``2h``, ``1d`` as seconds (a spec's durations); None when empty."""
    try:
        return parse_duration(text.strip().lower() or None)
    except ValueError:
        raise Refusal(400, "R200", f"age {text!r}: say how old, as 45s, 30m, 2h or 1d") from None


def runs_page(request: Request, service: Service, _session: Session) -> Response:
    """The runs, newest first, by workflow, status, business key and age (older than)."""
    params = request.query_params
    chosen = {key: params.get(key, "").strip() for key in ("workflow", "status", "key", "age")}
    if chosen["status"] and chosen["status"] not in RUN_STATUSES:
        raise Refusal(400, "R200", f"status must be one of {', '.join(RUN_STATUSES)}")
    runner = service.runner()
    older = _age(chosen["age"])
    offset = _offset(request)
    now = runner.clock.now()
    found = runner.store.list_runs(
        chosen["status"] or None,
        PAGE_SIZE + 1,
        offset=offset,
        workflow=chosen["workflow"] or None,
        business_key=chosen["key"] or None,
        created_before=now - older if older is not None else None,
    )
    workflows = sorted({v.name for v in runner.store.spec_versions()} | set(service.specs))
    query = urlencode({k: v for k, v in chosen.items() if v})
    return render(
        request,
        "runs.html",
        {
            "runs": found[:PAGE_SIZE],
            "now": now,
            "chosen": chosen,
            "statuses": RUN_STATUSES,
            "workflows": workflows,
            "offset": offset,
            "next_offset": offset + PAGE_SIZE if len(found) > PAGE_SIZE else None,
            "page_size": PAGE_SIZE,
            "query": query,
        },
    )


def _lookups(history: list[Any]) -> dict[str, int]:
    """Reconcile lookups made, per operation ID."""
    counted: dict[str, int] = {}
    for event in history:
        if event.kind.startswith("reconcile_") and event.kind != EventKind.RECONCILE_IMPOSSIBLE:
            key = str(event.data.get("operation_id", ""))
            counted[key] = counted.get(key, 0) + 1
    return counted


def run_page(request: Request, service: Service, session: Session) -> Response:
    """A run: where it is, what it waits for (and who may decide), what a person is asked to
    do, its effects, its state diagram, and its history as a timeline."""
    runner = service.runner()
    run = runner.store.resolve(request.path_params["run"])
    spec = runner.spec_of(run)
    history = runner.store.history(run.id)
    now = runner.decision_now()
    pending = _decision(runner, run, now, session) if run.status == RunStatus.WAITING else None
    queued = (
        latest_event(history, (EventKind.QUEUED, EventKind.STUCK))
        if run.status == RunStatus.NEEDS_PERSON
        else {}
    )
    timeline = [
        {"version": e.version, "kind": e.kind, "title": title, "text": text, "at": e.at}
        for e in history
        for title, text in [event_line(e)]
    ]
    return render(
        request,
        "run.html",
        {
            "run": run,
            "spec": spec,
            "now": now,
            "pending": pending,
            "operator_action": queued.get("operator_action") or queued.get("reason"),
            "evidence": evidence(runner, run) if run.status == RunStatus.NEEDS_PERSON else None,
            "actions": actions_for(spec, run.status),
            "ops_roles": _deciders(spec.operator_roles, session),
            "operations": runner.store.operations(run.id),
            "lookups": _lookups(history),
            "timeline": timeline,
            "svg": diagram(spec, "states", run.state),  # None: Graphviz is not installed
        },
    )


def specs_page(request: Request, service: Service, _session: Session) -> Response:
    """The spec versions runs were started under, and those the service starts runs of."""
    store = service.runner().store
    versions: dict[str, dict[str, Any]] = {}
    for spec, _text in service.specs.values():
        versions[spec.digest] = {
            "digest": spec.digest,
            "name": spec.name,
            "spec_version": spec.spec_version,
            "policy_version": spec.policy_version,
            "served": True,
            "created_at": None,
        }
    for v in store.spec_versions():
        versions.setdefault(v.digest, {**vars(v), "served": False})["created_at"] = v.created_at
    return render(request, "specs.html", {"versions": list(versions.values())})


def spec_page(request: Request, service: Service, _session: Session) -> Response:
    """A spec version's transition table and its three diagrams."""
    digest = request.path_params["digest"]
    served = {spec.digest: spec for spec, _ in service.specs.values()}
    spec = served.get(digest)
    if spec is None:
        try:
            spec = service.runner().spec_for_digest(digest)
        except StoreError:
            raise Refusal(404, "R200", f"no spec version {digest[:12]} here") from None
    views = {view: diagram(spec, view) for view in ("states", "saga", "crash-windows")}
    return render(request, "spec.html", {"spec": spec, "table": table_html(spec), "views": views})


def routes() -> list[Route]:
    """The console's routes: its pages, signing in and out, and its forms."""
    return [
        Route("/", lambda _request: RedirectResponse("/queue", status_code=303)),
        Route("/login", login_page),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/static/console.css", stylesheet),
        Route("/queue", page(queue_page)),
        Route("/runs", page(runs_page)),
        Route("/runs/{run}", page(run_page)),
        Route("/runs/{run}/approve", action(approve), methods=["POST"]),
        Route("/runs/{run}/reject", action(reject), methods=["POST"]),
        Route("/runs/{run}/ops/{action}", action(act), methods=["POST"]),
        Route("/specs", page(specs_page)),
        Route("/specs/{digest}", page(spec_page)),
    ]
