"""Signals from signed webhooks: ``POST /hooks/SENDER`` (see :mod:`.webhooks` for the
signature, and :class:`~ratchet_runner.serve.operators.Sender` for a sender's settings)."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..engine.commands import signal as signal_run
from ..errors import RatchetError, VersionConflict
from ..session import acting_from
from .service import Service, error, status_of
from .webhooks import verify


def _at(data: Any, path: str) -> Any:
    """The value at dotted ``path`` in ``data`` (None where it is missing)."""
    for part in path.split("."):
        if not isinstance(data, dict):
            return None
        data = data.get(part)
    return data


def webhook(request: Request) -> Response:
    """A signal, as a sender's signed webhook (Standard Webhooks). Refused, counted, and nothing
    changed: an unknown sender (404), a missing or bad signature or a timestamp more than 300 s
    away (401), a body that does not say which run and event (400). A message ID seen before
    is what senders do when they retry: 200, a no-op, counted as a duplicate. An event the
    sender's ``events`` map does not list is acknowledged and ignored (200). A signal the run
    cannot take now, or for a run not found, is refused (409, 404) with nothing changed, so
    that the sender retries it later."""
    service: Service = request.app.state.service
    service.check_config()  # a sender added or its mapping changed counts from this message
    sender = service.config.senders.get(request.path_params["sender"])
    if sender is None:
        service.count("refused:unknown_sender")
        return error(404, "R200", "no such sender")
    raw: bytes = request.state.body
    why = verify(sender.keys, request.headers, raw, service.now())
    if why is not None:
        service.count(f"refused:{why}")
        return error(401, "R200", f"webhook refused: {why.replace('_', ' ')}; nothing changed")
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        data = None
    run_ref, given_event, payload = (
        _at(data, sender.run),
        _at(data, sender.event),
        _at(data, sender.data),
    )
    mapped = sender.events
    if isinstance(given_event, str) and mapped is not None and given_event not in mapped:
        service.count("ignored")
        return JSONResponse({"ignored": True, "event": given_event})
    if not isinstance(run_ref, str) or not isinstance(given_event, str) or not run_ref:
        service.count("refused:malformed")
        return error(
            400,
            "R200",
            f"the body must be JSON with the run at {sender.run!r} and the event at "
            f"{sender.event!r}, both strings; nothing changed",
        )
    if payload is not None and not isinstance(payload, dict):
        service.count("refused:malformed")
        return error(400, "R200", f"the signal's data at {sender.data!r} must be an object")
    event = given_event if sender.events is None else sender.events[given_event]
    signal_id = f"{sender.name}:{request.headers['webhook-id']}"
    runner = service.runner()
    try:
        with acting_from("webhook", sender.name):
            for attempt in range(5):  # a duplicate racing this one moved the run first
                try:
                    result = signal_run(runner, run_ref, event, signal_id, payload, drive=False)
                    break
                except VersionConflict:
                    if attempt == 4:
                        raise
    except RatchetError as exc:
        service.count(f"refused:{type(exc).__name__}")
        return error(status_of(exc), exc.code, exc.message)
    service.count("delivered" if result.changed else "duplicate")
    return JSONResponse(
        {
            "run": result.run.id,
            "signal": signal_id,
            "delivered": result.changed,
            "duplicate": not result.changed,
            "message": result.message,
        }
    )
