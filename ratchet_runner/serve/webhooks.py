"""Signed webhooks, as the Standard Webhooks specification defines them.

A sender signs each message with a shared secret (``whsec_`` and the key in base64): the
signature is HMAC-SHA256 over ``ID.TIMESTAMP.BODY`` (the raw body bytes), in base64, sent as
``v1,SIGNATURE`` in the ``webhook-signature`` header beside ``webhook-id`` and
``webhook-timestamp`` (Unix seconds). The header may carry several signatures separated by
spaces, so a sender can sign with an old and a new secret while a key is rotated; a receiver
accepts a message when one of them is made with one of its secrets, and when the timestamp is
within :data:`TOLERANCE` seconds of its clock (a replay of an old message is refused).

Everything here works on bytes and never raises on a malformed header: :func:`verify` answers
why a message is refused, or None. The tests check :func:`sign` and :func:`verify` against the
``standardwebhooks`` reference library.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping, Sequence

#: How far a message's timestamp may be from the receiver's clock, either way, in seconds.
TOLERANCE = 300
SECRET_PREFIX = "whsec_"

#: Why a message is refused (each is counted under its name).
MISSING_HEADERS = "missing_headers"
BAD_TIMESTAMP = "bad_timestamp"
STALE_TIMESTAMP = "stale_timestamp"
BAD_SIGNATURE = "bad_signature"


def secret_key(secret: str) -> bytes:
    """The key of a secret ``whsec_BASE64`` (the prefix optional); ValueError when it is not
    one."""
    text = secret.strip().removeprefix(SECRET_PREFIX)
    try:
        key = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("a webhook secret is whsec_ followed by its key in base64") from None
    if len(key) < 16:
        raise ValueError("a webhook secret's key must be at least 16 bytes (24 in base64)")
    return key


def signature(key: bytes, message_id: str, timestamp: int, body: bytes) -> bytes:
    signed = f"{message_id}.{timestamp}.".encode() + body
    return hmac.new(key, signed, hashlib.sha256).digest()


def sign(key: bytes, message_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value for one key: ``v1,BASE64``."""
    return "v1," + base64.b64encode(signature(key, message_id, timestamp, body)).decode()


def headers(keys: Sequence[bytes], message_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three headers a sender sends, signed with each of ``keys``."""
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": " ".join(sign(k, message_id, timestamp, body) for k in keys),
    }


def verify(
    keys: Sequence[bytes],
    given: Mapping[str, str],
    body: bytes,
    now: float,
    tolerance: float = TOLERANCE,
) -> str | None:
    """Why the message is refused (one of the reasons above), or None when one of its
    signatures is made with one of ``keys`` and its timestamp is within ``tolerance`` of
    ``now``. ``given``: its headers, names in lower case."""
    message_id = given.get("webhook-id", "")
    stamp = given.get("webhook-timestamp", "")
    signatures = given.get("webhook-signature", "")
    if not (message_id and stamp and signatures):
        return MISSING_HEADERS
    if not stamp.isascii() or not stamp.isdigit() or len(stamp) > 12:
        return BAD_TIMESTAMP
    timestamp = int(stamp)
    if abs(now - timestamp) > tolerance:
        return STALE_TIMESTAMP
    expected = [signature(key, message_id, timestamp, body) for key in keys]
    for entry in signatures.split(" "):
        version, _, encoded = entry.partition(",")
        if version != "v1":
            continue
        try:
            offered = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            continue
        if any(hmac.compare_digest(offered, e) for e in expected):
            return None
    return BAD_SIGNATURE


def deliver(
    url: str,
    keys: Sequence[bytes],
    message_id: str,
    body: bytes,
    *,
    now: float,
    timeout: float = 10.0,
) -> tuple[int, dict[str, object]]:
    """Send ``body`` to ``url`` as a signed webhook (what ``ratchet signal --to`` does): the
    answer's status and its JSON object (empty when it sent none). Raises
    ``httpx.HTTPError`` when the service cannot be reached."""

    import httpx

    sent = headers(keys, message_id, int(now), body)
    sent["content-type"] = "application/json"
    response = httpx.post(url, content=body, headers=sent, timeout=timeout)
    try:
        answer = response.json()
    except ValueError:
        answer = {}
    return response.status_code, answer if isinstance(answer, dict) else {}
