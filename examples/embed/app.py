"""A small web application with Ratchet embedded: it starts refund runs, decides them and shows
them, through the same operations the ``ratchet`` command uses.

    POST /refunds                      {"ticket": ..., "order": ..., ...}  start (or find) a run
    POST /refunds/T-90104/approve      {"as": "agent-7", "role": "agent"}  approve, and drive on
    POST /refunds/T-90104/reject       {"as": "agent-7", "reason": "..."}  reject
    GET  /refunds/T-90104                                                  the run and its trace

Run it with ``python examples/embed/app.py`` (port 8080; ``PORT`` to change it) and a worker in
another process (``python examples/embed/worker.py``) for the timers and for runs a crashed
request left behind. Both use the store ``RATCHET_DB`` names (default: the practice store under
``RATCHET_HOME``), so they share the runs. Only the standard library and Ratchet are needed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from wsgiref.simple_server import make_server

import ratchet_runner as ratchet

SPEC_PATH = Path(os.environ.get("REFUND_SPEC", "specs/refund.yaml"))
SPEC = ratchet.load_spec(SPEC_PATH)  # a spec with an error never gets this far: SpecError
TEXT = SPEC_PATH.read_text(encoding="utf-8")

StartResponse = Callable[[str, list[tuple[str, str]]], Any]

#: The HTTP status of each error a request can end in (every one carries a stable code).
STATUS = {
    ratchet.RunNotFound: "404 Not Found",
    ratchet.VersionConflict: "409 Conflict",  # another process moved the run first (or holds it)
    ratchet.RunError: "422 Unprocessable Entity",  # input the spec refuses, a refused decision
    ratchet.RatchetError: "400 Bad Request",  # bad input (the spec's input schema), and the rest
}


def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
    """The WSGI application: one store session per request, closed when the request ends."""
    method, parts = environ["REQUEST_METHOD"], environ["PATH_INFO"].strip("/").split("/")
    try:
        with ratchet.Session(os.environ.get("RATCHET_DB")) as session:
            status, body = route(session, method, parts, _body(environ))
    except ratchet.RatchetError as error:
        status = next(s for cls, s in STATUS.items() if isinstance(error, cls))
        body = {"code": error.code, "error": error.message}
    except (ValueError, KeyError) as error:
        status, body = "400 Bad Request", {"error": f"bad request: {error}"}
    start_response(status, [("Content-Type", "application/json")])
    return [json.dumps(body, indent=2).encode("utf-8")]


def route(
    session: ratchet.Session, method: str, parts: list[str], body: dict[str, Any]
) -> tuple[str, dict[str, Any]]:
    """What one request does, as a status and a JSON body."""
    runner = session.runner()
    if method == "POST" and parts == ["refunds"]:
        # Idempotent by business key: the same ticket twice finds the first run, never a second.
        result, created = ratchet.start_run(runner, SPEC, TEXT, body)
        return ("201 Created" if created else "200 OK"), shown(session, result.run.id)
    if method == "POST" and len(parts) == 3 and parts[0] == "refunds":
        if parts[2] not in ("approve", "reject"):
            return "404 Not Found", {"error": f"no action {parts[2]!r}"}
        result = ratchet.decide_run(
            runner, parts[1], parts[2], body["as"], body.get("role"), body.get("reason")
        )
        return "200 OK", {**shown(session, result.run.id), "then": result.then}
    if method == "GET" and len(parts) == 2 and parts[0] == "refunds":
        return "200 OK", shown(session, parts[1])
    return "404 Not Found", {"error": "no such route"}


def shown(session: ratchet.Session, run_ref: str) -> dict[str, Any]:
    """A run as the application shows it: where it is, and its history in plain language."""
    run = session.store.resolve(run_ref)  # a run ID, or a business key such as T-90104
    return {
        "run": run.id,
        "ticket": run.business_key,
        "state": run.state,
        "status": run.status,
        "trace": ratchet.trace_lines(run, session.store.history(run.id)),
    }


def _body(environ: dict[str, Any]) -> dict[str, Any]:
    length = int(environ.get("CONTENT_LENGTH") or 0)
    data = json.loads(environ["wsgi.input"].read(length) or b"{}") if length else {}
    if not isinstance(data, dict):
        raise ValueError("the body must be a JSON object")
    return data


if __name__ == "__main__":
    with make_server("127.0.0.1", int(os.environ.get("PORT", "8080")), app) as server:
        print(f"refunds on http://127.0.0.1:{server.server_port}/refunds")
        server.serve_forever()
