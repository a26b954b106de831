"""``ratchet signal --to URL``: a signal sent to a service as a signed webhook, as a script or a
provider sends it."""

from __future__ import annotations

import json
import os
import time
from typing import Any

import click
import httpx

from ..errors import RatchetError, UsageError
from .webhooks import deliver, secret_key


def send_signed(
    url: str, secret_env: str, run: str, event: str, signal_id: str, data: Any, as_json: bool
) -> None:
    """Sign ``{"run", "event", "data"}`` with the secret(s) in ``$secret_env``, send it, and say
    what the service answered; a refusal raises its code and message."""
    secrets_given = os.environ.get(secret_env, "").split()
    if not secrets_given:
        raise UsageError(f"--to needs the sender's secret: {secret_env} is not set")
    try:
        keys = [secret_key(secret) for secret in secrets_given]
    except ValueError as exc:
        raise UsageError(f"{secret_env}: {exc}") from None
    if not url.startswith(("http://", "https://")):
        raise UsageError(f"--to takes an http:// or https:// URL, not {url!r}")
    body = json.dumps({"run": run, "event": event, "data": data}).encode()

    try:
        status, answer = deliver(url, keys, signal_id, body, now=time.time())
    except httpx.HTTPError as exc:
        raise UsageError(f"cannot reach {url}: {exc}") from None
    if as_json:
        click.echo(json.dumps({"status": status, **answer}, ensure_ascii=False))
    if status // 100 == 2:
        if not as_json:
            click.echo(answer.get("message") or json.dumps(answer))
        return
    given = answer.get("error")
    failure: dict[str, Any] = given if isinstance(given, dict) else {}
    why = failure.get("message") or "no reason given"
    refused = RatchetError(f"{url} answered {status}: {why}")
    refused.code = str(failure.get("code") or "R000")
    raise refused
