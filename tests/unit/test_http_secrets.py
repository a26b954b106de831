"""The HTTP adapter's redaction: a secret is kept out of any text however a provider encoded it."""

from __future__ import annotations

import json
import re
from urllib.parse import quote

import pytest

from ratchet_runner.adapters.http.secrets import Credentials
from ratchet_runner.adapters.http.settings import parse_settings

#: base64's '+', '/' and '='; a space; characters beyond ASCII and beyond the BMP.
TOKEN = "sk_live_SENTINEL+7f/3a== é😀 x"


def _json(value: str, escape: dict[str, str] | None = None, **options: bool) -> str:
    """``value`` as a JSON encoder writes it inside a string (``escape``: its own escapes)."""
    return json.dumps(value, **options)[1:-1].translate(str.maketrans(escape or {}))


def _upper_hex(text: str) -> str:
    return re.sub(r"(\\u|%)([0-9a-f]{2,4})", lambda m: m.group(1) + m.group(2).upper(), text)


def _lower_hex(text: str) -> str:
    return re.sub(r"%([0-9A-F]{2})", lambda m: "%" + m.group(1).lower(), text)


FORMS = {
    "as is": TOKEN,
    "JSON, ASCII only": _json(TOKEN),
    "JSON, as UTF-8": _json(TOKEN, ensure_ascii=False),
    "JSON, '/' escaped (PHP)": _json(TOKEN, {"/": "\\/"}),
    "JSON, '+' as \\u002B (.NET)": _json(TOKEN, {"+": "\\u002B", "/": "\\/"}),
    "JSON, hex in capitals": _upper_hex(_json(TOKEN)),
    "URL-encoded": quote(TOKEN, safe=""),
    "URL-encoded, '/' kept": quote(TOKEN),
    "URL-encoded, lower-case hex": _lower_hex(quote(TOKEN, safe="")),
    "a form's '+' for a space": quote(TOKEN, safe="").replace("%20", "+"),
}


@pytest.fixture
def credentials() -> Credentials:
    settings = parse_settings(
        {
            "base_url": "http://127.0.0.1:1",
            "operations": {"refund": {"path": "/refunds", "receipt_field": "refund_id"}},
            "auth": {"type": "bearer", "token_env": "PAY_TOKEN"},
        }
    )
    return Credentials(settings, {"PAY_TOKEN": TOKEN})


@pytest.mark.parametrize("form", list(FORMS))
def test_a_secret_is_redacted_however_a_provider_encoded_it(
    credentials: Credentials, form: str
) -> None:
    text = f'{{"error": "the token {FORMS[form]} is revoked"}}'
    assert credentials.redact(text) == '{"error": "the token [redacted] is revoked"}'


def test_text_that_only_resembles_the_secret_is_kept(credentials: Credentials) -> None:
    text = "sk_live_SENTINEL-7f/3a== é😀 x, sk_live_SENTINEL+7f"
    assert credentials.redact(text) == text
