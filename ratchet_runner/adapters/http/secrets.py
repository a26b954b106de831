"""The HTTP adapter's secrets: read them, put them on a request, and keep them out of any text.

:class:`Credentials` reads the bearer token, the basic-auth password and the HMAC signing key
that a binding names (:class:`~ratchet_runner.adapters.http.settings.SecretSource`: an
environment variable or a file, never the binding itself), builds the headers that carry them,
and redacts them from every text the adapter keeps: reasons, evidence bodies, receipts,
exception messages. It redacts each secret's value (and, for basic auth, its base64 form)
however a provider's encoder wrote it, character by character: as is, JSON-escaped (``\\/``,
``\\u002B``, hex in either case) or URL-encoded; and the value of every header that carries one
(``Authorization``, the signing header), in the ``name: value`` forms a provider echoing the
request's headers writes them in. Its ``repr`` shows no secret.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
from collections.abc import Mapping
from typing import Any

from ...errors import BindingError
from .settings import HttpSettings, SecretSource

REDACTED = "[redacted]"
#: How much of a provider's reply body evidence keeps, after redaction.
EVIDENCE_CHARS = 2000


def read_secret(source: SecretSource, setting: str, environ: Mapping[str, str], where: str) -> str:
    """The secret at ``source``, stripped of surrounding white space, or :class:`BindingError`
    naming the setting and the variable or file (never the value)."""
    if source.env is not None:
        value = environ.get(source.env, "")
        if not value.strip():
            raise BindingError(
                f"{where}: setting {setting!r} names the environment variable {source.env}, "
                "which is not set (or empty)"
            )
        return value.strip()
    assert source.file is not None
    try:
        value = source.file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BindingError(
            f"{where}: setting {setting!r} names the file {source.file}, which cannot be read "
            f"({type(exc).__name__})"
        ) from None
    if not value.strip():
        raise BindingError(
            f"{where}: setting {setting!r} names the file {source.file}, which is empty"
        )
    return value.strip()


class Credentials:
    """The secrets of one binding, the headers that carry them, and the redactor of both."""

    def __init__(
        self, settings: HttpSettings, environ: Mapping[str, str] | None = None, where: str = ""
    ) -> None:
        env = os.environ if environ is None else environ
        self._headers: dict[str, str] = {}
        self._secrets: list[str] = []
        self._signing: tuple[str, bytes, str, str] | None = None
        auth, signing = settings.auth, settings.signing
        if auth is not None and auth.type == "bearer":
            token = read_secret(auth.secret, "auth.token", env, where)
            self._headers["Authorization"] = f"Bearer {token}"
            self._secrets.append(token)
        elif auth is not None:
            password = read_secret(auth.secret, "auth.password", env, where)
            pair = base64.b64encode(f"{auth.username}:{password}".encode()).decode("ascii")
            self._headers["Authorization"] = f"Basic {pair}"
            self._secrets += [password, pair]
        if signing is not None:
            key = read_secret(signing.key, "signing.key", env, where)
            self._signing = (signing.header, key.encode(), signing.algorithm, signing.prefix)
            self._secrets.append(key)
        self._pattern = _pattern(self._secrets, self.secret_headers())

    def __repr__(self) -> str:
        return f"Credentials({len(self._secrets)} secret(s), redacted)"

    def secret_headers(self) -> tuple[str, ...]:
        """The names of the headers that carry a secret, or a signature made with one."""
        names = ["Authorization"] if "Authorization" in self._headers else []
        return (*names, *([self._signing[0]] if self._signing else []))

    def headers(self, body: bytes) -> dict[str, str]:
        """The headers that authenticate (and sign) a request with this ``body``."""
        headers = dict(self._headers)
        if self._signing is not None:
            name, key, algorithm, prefix = self._signing
            digest = hmac.new(key, body, getattr(hashlib, algorithm)).hexdigest()
            headers[name] = f"{prefix}{digest}"
        return headers

    def redact(self, text: str) -> str:
        """``text`` with every secret, and every secret-carrying header's value, redacted."""
        if self._pattern is None:
            return text
        return self._pattern.sub(_replacement, text)

    def redact_data(self, value: Any) -> Any:
        """Plain JSON data with every string in it redacted (a receipt, say)."""
        if self._pattern is None:
            return value
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, dict):
            return {self.redact(str(k)): self.redact_data(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.redact_data(v) for v in value]
        return value

    def evidence(self, body: bytes, limit: int = EVIDENCE_CHARS) -> str:
        """A reply body as evidence: decoded, redacted, then cut to ``limit`` characters."""
        text = self.redact(body.decode("utf-8", errors="replace"))
        if len(text) <= limit:
            return text
        return f"{text[:limit]}… ({len(text) - limit} more characters)"


#: The short escapes JSON may write a character with ('/' is escaped by some encoders, PHP's).
_SHORT_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "/": "\\/",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
}


def _hex(data: bytes) -> str:
    """A pattern for ``data`` in hex, its letters in either case."""
    return "".join(f"[{c}{c.upper()}]" if c.isalpha() else c for c in data.hex())


def _character(char: str) -> str:
    """A pattern for one character of a secret in every form a provider may echo it in: as is;
    JSON-escaped (short, or ``\\uXXXX`` in either case, as .NET writes '+'; a surrogate pair past
    U+FFFF); URL-encoded (``%XX`` a UTF-8 byte, in either case; a space also as '+')."""
    units = char.encode("utf-16-be")
    forms = [
        re.escape(char),
        "".join(rf"\\u{_hex(units[i : i + 2])}" for i in range(0, len(units), 2)),
        "".join(f"%{_hex(bytes([byte]))}" for byte in char.encode("utf-8")),
    ]
    if char in _SHORT_ESCAPES:
        forms.append(re.escape(_SHORT_ESCAPES[char]))
    if char == " ":
        forms.append(r"\+")
    return f"(?:{'|'.join(forms)})"


def _secret_pattern(secret: str) -> str:
    """A pattern for ``secret`` however it was encoded, character by character, mixed too (a
    JSON encoder that escapes only some characters, a URL encoder that keeps '/')."""
    return "".join(_character(char) for char in secret)


def _pattern(secrets: list[str], headers: tuple[str, ...]) -> re.Pattern[str] | None:
    """One pattern for every secret's forms and every ``header: value`` pair that carries one
    (``Name: value``, ``"name": "value"``, ``'name': 'value'``, ``name=value``)."""
    forms = sorted(set(secrets) - {""}, key=len, reverse=True)
    alternatives = [_secret_pattern(f) for f in forms]
    if headers:
        names = "|".join(re.escape(h) for h in headers)
        alternatives.insert(
            0, rf"(?P<name>(?i:[\"']?(?:{names})[\"']?)\s*[:=]\s*[\"']?)(?P<value>[^\"'\r\n,;}}]*)"
        )
    return re.compile("|".join(alternatives)) if alternatives else None


def _replacement(found: re.Match[str]) -> str:
    name = found.group("name") if "name" in found.re.groupindex else None
    return f"{name}{REDACTED}" if name is not None else REDACTED
