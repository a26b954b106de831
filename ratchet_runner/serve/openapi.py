"""The HTTP API's OpenAPI 3.1 description, served at ``GET /openapi.json`` (a test keeps it in
step with the application's routes)."""

from __future__ import annotations

from typing import Any

from ..settings import VERSION

_ERROR = {"$ref": "#/components/responses/Error"}
_RUN = {"name": "run", "in": "path", "required": True, "schema": {"type": "string"}}
_ROLE = {"type": "string", "description": "A role the operator holds (default: the first allowed)."}
_DIGEST = {"type": "string", "description": "The digest shown: refused (409, R404) if it changed."}


def _body(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }
    if required:
        schema["required"] = required
    return {"required": bool(required), "content": {"application/json": {"schema": schema}}}


def _op(summary: str, *, auth: bool = True, **extra: Any) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "summary": summary,
        "responses": {"200": {"description": "OK"}, "default": _ERROR},
    }
    if not auth:
        operation["security"] = []
    operation.update(extra)
    return operation


def describe() -> dict[str, Any]:
    """The description (see ``docs/reference/http-api.md`` for the prose)."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Ratchet",
            "version": VERSION,
            "description": "Runs, the operator queue, decisions and signals of a Ratchet store.",
        },
        "security": [{"bearer": []}],
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "responses": {
                "Error": {
                    "description": "Refused, with the CLI's code; nothing changed.",
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "properties": {
                                    "error": {
                                        "type": "object",
                                        "properties": {
                                            "code": {"type": "string", "pattern": "^R[0-9]{3}$"},
                                            "message": {"type": "string"},
                                        },
                                        "required": ["code", "message"],
                                    }
                                },
                                "required": ["error"],
                            }
                        }
                    },
                }
            },
        },
        "paths": {
            "/healthz": {"get": _op("The process serves.", auth=False)},
            "/readyz": {"get": _op("The store answers.", auth=False)},
            "/metrics": {"get": _op("Prometheus metrics.", auth=False)},
            "/openapi.json": {"get": _op("This description.", auth=False)},
            "/api/whoami": {"get": _op("The authenticated operator.")},
            "/api/runs": {
                "get": _op(
                    "Runs, newest first.",
                    parameters=[
                        {"name": "status", "in": "query", "schema": {"type": "string"}},
                        {
                            "name": "limit",
                            "in": "query",
                            "schema": {"type": "integer", "minimum": 1, "maximum": 1000},
                        },
                    ],
                ),
                "post": _op(
                    "Start a run (idempotent by business key and input): 201 created, 200 found, "
                    "409 R409 the key's run has another input.",
                    requestBody=_body(
                        {"workflow": {"type": "string"}, "input": {"type": "object"}},
                        ["workflow", "input"],
                    ),
                ),
            },
            "/api/queue": {
                "get": _op(
                    "Decisions waiting (with both expiries, whether approving in each of the "
                    "operator's roles would be taken, and the declared evidence), then runs "
                    "waiting for a person."
                )
            },
            "/api/runs/{run}": {"get": _op("A run's summary.", parameters=[_RUN])},
            "/api/runs/{run}/trace": {"get": _op("A run's history.", parameters=[_RUN])},
            "/api/runs/{run}/effects": {"get": _op("A run's operations.", parameters=[_RUN])},
            "/api/runs/{run}/approve": {
                "post": _op(
                    "Approve what the run waits for, as the authenticated operator.",
                    parameters=[_RUN],
                    requestBody=_body({"role": _ROLE, "digest": _DIGEST}),
                )
            },
            "/api/runs/{run}/reject": {
                "post": _op(
                    "Reject it, with a reason.",
                    parameters=[_RUN],
                    requestBody=_body(
                        {"reason": {"type": "string"}, "role": _ROLE, "digest": _DIGEST},
                        ["reason"],
                    ),
                )
            },
            "/api/runs/{run}/ops/{action}": {
                "post": _op(
                    "An operator control, under the run's lease.",
                    parameters=[
                        _RUN,
                        {
                            "name": "action",
                            "in": "path",
                            "required": True,
                            "schema": {
                                "enum": [
                                    "pause",
                                    "resume",
                                    "cancel",
                                    "retry",
                                    "reconcile",
                                    "compensate",
                                ]
                            },
                        },
                    ],
                    requestBody=_body({"note": {"type": "string"}, "role": _ROLE}),
                )
            },
            "/hooks/{sender}": {
                "post": _op(
                    "A signal as a signed webhook (Standard Webhooks headers).",
                    auth=False,
                    parameters=[
                        {"name": "sender", "in": "path", "required": True, "schema": {}},
                        *(
                            {"name": h, "in": "header", "required": True, "schema": {}}
                            for h in ("webhook-id", "webhook-timestamp", "webhook-signature")
                        ),
                    ],
                )
            },
        },
    }
