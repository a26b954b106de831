"""``ratchet serve``: the HTTP API over the library, one ASGI application (Starlette), and the
operator console's routes (:mod:`~ratchet_runner.serve.console`).

Every API route but ``/healthz``, ``/readyz``, ``/metrics``, ``/openapi.json`` and the webhooks
(``/hooks/SENDER``, signed instead: :mod:`~ratchet_runner.serve.hooks`) needs an operator's
bearer token (:mod:`~ratchet_runner.serve.operators`). Reads go to the store; decisions and
operator actions go through the same commands the CLI uses (:mod:`ratchet_runner.engine.commands`),
as the authenticated operator, in a role they hold and the spec allows
(:mod:`~ratchet_runner.serve.acting`), and record where the request came from
(:mod:`ratchet_runner.engine.audit`). A decision is recorded and the run left to the workers (the
service's own, ``--workers N``, or any other), whom the commit wakes; an operator action is
carried out under the run's lease, as ``ratchet ops`` does, and the run then left to them too.
Errors are JSON with the CLI's codes: ``{"error": {"code": "R302", "message": "..."}}``.

Handlers are plain functions: Starlette runs them in its thread pool, and each thread gets one
runner of its own over the service's one store.

Over 400 lines: one concern, the API's routes, each a short handler over the commands and the
read models.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..engine.commands import start
from ..errors import RatchetError, UsageError
from ..review.views import command_summary, queue, run_json, run_summary, trace_json
from ..review.views import decisions as waiting_decisions
from ..session import acting_from
from ..spec.validate import load_spec
from ..words import RUN_STATUSES
from ..worker.pool import Pool
from .acting import Refusal, decide, text
from .acting import operate as carry_out
from .console_pages import routes as console_routes
from .hooks import webhook
from .metrics import CONTENT_TYPE, Metrics
from .openapi import describe
from .operators import Operator
from .service import INTERNAL, Service, error, log_bug, status_of

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from ..spec.model import Spec

#: The largest request body accepted, in bytes.
MAX_BODY = 64 * 1024

#: Headers on every response: a JSON API that no page may frame, sniff or cache.
SECURITY_HEADERS = {
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "content-security-policy": "default-src 'none'; frame-ancestors 'none'",
    "cache-control": "no-store",
}


Handler = Callable[[Request, Service, Operator], Any]


def authenticated(handler: Handler) -> Callable[[Request], Response]:
    """A route that needs an operator: 401 without a valid token, the library's errors as JSON,
    every decision and action recorded with the request's client address."""

    def route(request: Request) -> Response:
        service: Service = request.app.state.service
        service.check_config()  # in the thread pool: an operator added or removed counts now
        config = service.config
        operator = config.authenticate(request.headers.get("authorization"))
        if operator is None:
            response = error(401, "R200", "a valid operator token is needed (Bearer)")
            response.headers["www-authenticate"] = 'Bearer realm="ratchet"'
            return response
        peer = request.client.host if request.client else None
        address = config.client(peer, request.headers.get("x-forwarded-for"))
        try:
            with acting_from("http", address):
                result = handler(request, service, operator)
        except Refusal as refused:
            return error(refused.status, refused.code, refused.message)
        except RatchetError as exc:
            return error(status_of(exc), exc.code, exc.message)
        return result if isinstance(result, Response) else JSONResponse(result)

    return route


def body(request: Request, fields: Iterable[str]) -> dict[str, Any]:
    """The request's JSON object (empty when there is no body), with only ``fields``."""
    raw = request.state.body if hasattr(request.state, "body") else b""
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise Refusal(400, "R200", "the request body is not JSON") from None
    if not isinstance(data, dict):
        raise Refusal(400, "R200", "the request body must be a JSON object")
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise Refusal(
            400,
            "R200",
            f"unknown field(s) {', '.join(unknown)} (this route takes: "
            f"{', '.join(fields) or 'none'}); who acts is the authenticated operator, always",
        )
    return data


# -- the routes -------------------------------------------------------------------------------


def healthz(_request: Request) -> Response:
    return JSONResponse({"ok": True})


def readyz(request: Request) -> Response:
    service: Service = request.app.state.service
    try:
        service.session.store.list_runs(None, 1)
    except RatchetError as exc:
        return error(503, exc.code, f"the store does not answer: {exc.message}")
    return JSONResponse({"ok": True, "workers": service.workers})


def whoami(_request: Request, _service: Service, operator: Operator) -> Any:
    return {"name": operator.name, "roles": list(operator.roles)}


def list_runs(request: Request, service: Service, _operator: Operator) -> Any:
    status = request.query_params.get("status") or None
    if status is not None and status not in RUN_STATUSES:
        raise Refusal(400, "R200", f"status must be one of {', '.join(RUN_STATUSES)}")
    try:
        limit = int(request.query_params.get("limit", "50"))
    except ValueError:
        raise Refusal(400, "R200", "limit must be a whole number") from None
    if not 1 <= limit <= 1000:
        raise Refusal(400, "R200", "limit must be between 1 and 1000")
    return [run_json(r) for r in service.session.store.list_runs(status, limit)]


def read_run(request: Request, service: Service, _operator: Operator) -> Any:
    runner = service.runner()
    return run_summary(runner, runner.store.resolve(request.path_params["run"]))


def run_trace(request: Request, service: Service, _operator: Operator) -> Any:
    store = service.session.store
    run = store.resolve(request.path_params["run"])
    return trace_json(run, store.history(run.id))


def run_effects(request: Request, service: Service, _operator: Operator) -> Any:
    store = service.session.store
    run = store.resolve(request.path_params["run"])
    return [{k: v for k, v in vars(op).items() if k != "run_id"} for op in store.operations(run.id)]


def _page(request: Request, default: int = 50) -> tuple[int, int]:
    """The page a list asks for: ``offset`` (from 0) and ``limit`` (1 to 1000)."""
    try:
        offset = int(request.query_params.get("offset", "0"))
        limit = int(request.query_params.get("limit", str(default)))
    except ValueError:
        raise Refusal(400, "R200", "offset and limit must be whole numbers") from None
    if offset < 0 or not 1 <= limit <= 1000:
        raise Refusal(400, "R200", "offset must be 0 or more, limit between 1 and 1000")
    return offset, limit


def operator_queue(request: Request, service: Service, operator: Operator) -> Any:
    """A page of the runs waiting for a decision (with the exact arguments and digest asked
    for, both expiries, whether approving in each of the operator's roles would be taken, and
    the declared evidence), oldest first, then of the runs waiting for a person (what to do,
    and the evidence); ``next_offset`` when either list has more."""
    offset, limit = _page(request)
    runner = service.runner()
    decisions, read = waiting_decisions(
        runner, offset=offset, limit=limit, actor=operator.name, holding=operator.roles
    )
    people = queue(runner, offset=offset, limit=limit)
    more = read == limit or len(people) == limit
    return {
        "decisions": decisions,
        "needs_person": people,
        "next_offset": offset + limit if more else None,
    }


def _decide(request: Request, service: Service, operator: Operator, decision: str) -> Any:
    data = body(
        request, ("role", "digest", "reason") if decision == "reject" else ("role", "digest")
    )
    result = decide(
        service,
        operator,
        request.path_params["run"],
        decision,
        role=text(data, "role"),
        digest=text(data, "digest"),
        reason=text(data, "reason", required=decision == "reject"),
    )
    return command_summary(service.runner(), result, "decision")


def approve(request: Request, service: Service, operator: Operator) -> Any:
    return _decide(request, service, operator, "approve")


def reject(request: Request, service: Service, operator: Operator) -> Any:
    return _decide(request, service, operator, "reject")


def operate(request: Request, service: Service, operator: Operator) -> Any:
    data = body(request, ("role", "note"))
    action = request.path_params["action"]
    reference = request.path_params["run"]
    role, note = text(data, "role"), text(data, "note")
    result = carry_out(service, operator, reference, action, role=role, note=note)
    return command_summary(service.runner(), result, "operator")


def start_run(request: Request, service: Service, _operator: Operator) -> Any:
    """Start a run of a served workflow (or find the one with the same business key), and
    leave it to the workers: 201 when created, 200 when it already existed with the same input
    (409 R409 with another: :class:`~ratchet_runner.errors.InputConflict` is a run error)."""
    data = body(request, ("workflow", "input"))
    workflow = text(data, "workflow", required=True)
    given = data.get("input")
    if not isinstance(given, dict):
        raise Refusal(400, "R200", "'input' must be a JSON object")
    if workflow not in service.specs:
        served = ", ".join(sorted(service.specs)) or "none: start the service with --spec FILE"
        raise Refusal(404, "R200", f"no workflow {workflow!r} is served (served: {served})")
    spec, source = service.specs[str(workflow)]
    runner = service.runner()
    result, created = start(runner, spec, source, given, drive=False)
    return JSONResponse(
        command_summary(runner, result, "run_command"), status_code=201 if created else 200
    )


def metrics(request: Request) -> Response:
    """The Prometheus exposition (:mod:`~ratchet_runner.serve.metrics`): no token, like the
    health routes; it says how many runs are where, never which."""
    service: Service = request.app.state.service
    assert service.metrics is not None
    return Response(service.metrics.exposition(), media_type=CONTENT_TYPE)


def openapi(_request: Request) -> Response:
    """The API's OpenAPI description (no token)."""
    return JSONResponse(describe())


def routes() -> list[Route]:
    """Every route: the console's pages (:mod:`~ratchet_runner.serve.console`) and the API."""
    return [*console_routes(), *api_routes()]


def api_routes() -> list[Route]:
    """The routes of the JSON API, the webhooks, health and metrics (what ``/openapi.json``
    describes)."""
    return [
        Route("/healthz", healthz),
        Route("/metrics", metrics),
        Route("/openapi.json", openapi),
        Route("/readyz", readyz),
        Route("/api/whoami", authenticated(whoami)),
        Route("/api/runs", authenticated(list_runs)),
        Route("/api/runs", authenticated(start_run), methods=["POST"]),
        Route("/api/queue", authenticated(operator_queue)),
        Route("/api/runs/{run}", authenticated(read_run)),
        Route("/api/runs/{run}/trace", authenticated(run_trace)),
        Route("/api/runs/{run}/effects", authenticated(run_effects)),
        Route("/api/runs/{run}/approve", authenticated(approve), methods=["POST"]),
        Route("/api/runs/{run}/reject", authenticated(reject), methods=["POST"]),
        Route("/api/runs/{run}/ops/{action}", authenticated(operate), methods=["POST"]),
        Route("/hooks/{sender}", webhook, methods=["POST"]),
    ]


class Guard:
    """ASGI middleware: security headers on every response, and a request body of at most
    :data:`MAX_BODY` bytes (413 otherwise, before a handler sees it), read whole into
    ``request.state.body``."""

    def __init__(self, app: ASGIApp, max_body: int = MAX_BODY) -> None:
        self.app, self.max_body = app, max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        began = time.perf_counter()
        started = False
        service = getattr(getattr(scope.get("app"), "state", None), "service", None)

        async def send_with_headers(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                for name, value in SECURITY_HEADERS.items():
                    if name.encode() not in present:
                        headers.append((name.encode(), value.encode()))
                took = (time.perf_counter() - began) * 1000  # what the service spent on it
                headers.append((b"server-timing", f"app;dur={took:.2f}".encode()))
                message = {**message, "headers": headers}
            await send(message)

        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                if service is not None and str(scope.get("path", "")).startswith("/hooks/"):
                    service.count("refused:too_large")
                await error(413, "R200", f"the request body is larger than {self.max_body} bytes")(
                    scope, receive, send_with_headers
                )
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        raw = b"".join(chunks)
        scope.setdefault("state", {})["body"] = raw
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": raw, "more_body": False}
            return await receive()

        try:
            await self.app(scope, replay, send_with_headers)
        except Exception as exc:  # a bug: one line in the log, one JSON error, no traceback
            log_bug(exc)
            if not started:
                await error(500, "R000", INTERNAL)(scope, receive, send_with_headers)


def create_app(service: Service) -> Starlette:
    """The application; with ``service.workers``, it runs that many workers while it serves."""

    service.metrics = Metrics(service.runner, lambda: dict(service.counts))

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        thread = None
        if service.workers > 0:
            made = service.session.runner_factory()
            service.pool = Pool(made, concurrency=service.workers)
            thread = threading.Thread(target=service.pool.run, name="ratchet-serve-workers")
            thread.start()
        try:
            yield
        finally:
            if service.pool is not None and thread is not None:
                service.pool.stop.set()
                thread.join()
            if service.metrics is not None:
                service.metrics.close()

    async def internal_error(_request: Request, exc: Exception) -> Response:
        """A bug in the middleware itself (the routes' are the Guard's): one JSON line to the
        client, one line to the log."""
        log_bug(exc)
        return error(500, "R000", INTERNAL)

    app = Starlette(
        routes=routes(), lifespan=lifespan, exception_handlers={Exception: internal_error}
    )
    app.state.service = service
    app.add_middleware(Guard)
    return app


def load_specs(paths: Iterable[str]) -> dict[str, tuple[Spec, str]]:
    """The specs named, by workflow name (a spec that does not validate is refused)."""
    specs: dict[str, tuple[Spec, str]] = {}
    for path in paths:
        spec = load_spec(path)
        if spec.name in specs:
            raise UsageError(f"two specs serve workflow {spec.name!r}")
        specs[spec.name] = (spec, Path(path).read_text(encoding="utf-8"))
    return specs
