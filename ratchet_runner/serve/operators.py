"""Who may use the service: operators, their roles and their tokens, and the proxies it trusts.

The service's configuration is a TOML file (``ratchet serve --config FILE``, else
``$RATCHET_SERVE_CONFIG``, else ``ratchet-serve.toml`` in the working directory)::

    trusted_proxies = ["127.0.0.1"]   # whose X-Forwarded-For is believed (default: none)

    [[operators]]
    name = "ana"
    roles = ["support_lead"]
    token_sha256 = "9f86d0…"          # ratchet token ana --role support_lead prints it

    [[senders]]                       # a provider whose signed webhooks deliver signals
    name = "payments"
    secret_env = "RATCHET_HOOK_PAYMENTS"  # its whsec_ secret(s), space-separated to rotate
    run = "data.metadata.ticket"      # where in the body: the run (its ID or business key),
    event = "type"                    # the event,
    data = "data"                     # and the signal's data (defaults: run, event, data)
    [senders.events]                  # the sender's event names → the spec's (optional;
    "refund.settled" = "settled"      # without it, the event is taken as it is)

An operator authenticates with ``Authorization: Bearer TOKEN``. Only a token's SHA-256 is kept:
a token is 32 random bytes (:func:`new_token`), so a fast hash is enough, as for API keys, and a
leaked file lets nobody in. Tokens are compared in constant time. The actor and role of every
decision and operator action are the authenticated operator's, never the request's.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import os
import re
import secrets
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError
from .webhooks import secret_key

#: Where the configuration is looked for when no file is named.
ENV_CONFIG = "RATCHET_SERVE_CONFIG"
DEFAULT_CONFIG = "ratchet-serve.toml"
#: The prefix of every token, so that a leaked one is recognisable (and greppable).
TOKEN_PREFIX = "rt_"


@dataclass(frozen=True)
class Operator:
    """An authenticated person: a name (the actor recorded) and the roles they hold."""

    name: str
    roles: tuple[str, ...]


@dataclass(frozen=True)
class Sender:
    """A sender of signed webhooks: its keys (every one valid, to rotate), where a message's
    body says which run, which event and what data, and how its event names map onto the
    spec's (None: taken as they are)."""

    name: str
    keys: tuple[bytes, ...]
    run: str = "run"
    event: str = "event"
    data: str = "data"
    events: Mapping[str, str] | None = None


@dataclass(frozen=True)
class Config:
    """The service's configuration: operators by token digest, the trusted proxies, and the
    senders of webhooks by name."""

    operators: Mapping[str, Operator] = field(default_factory=dict)  # by token SHA-256
    trusted_proxies: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    path: Path | None = None
    senders: Mapping[str, Sender] = field(default_factory=dict)

    def authenticate(self, authorization: str | None) -> Operator | None:
        """The operator whose bearer token ``authorization`` carries, or None."""
        if not authorization or not authorization.startswith("Bearer "):
            return None
        digest = token_digest(authorization[len("Bearer ") :].strip())
        for known, operator in self.operators.items():
            if hmac.compare_digest(known, digest):
                return operator
        return None

    def client(self, peer: str | None, forwarded_for: str | None) -> str:
        """Where a request comes from: its peer's address, or, when the peer is a trusted
        proxy, the last address in ``X-Forwarded-For`` that is not one (the client as the
        outermost trusted proxy saw it)."""
        address = peer or "unknown"
        if not forwarded_for or not self.trusts(address):
            return address
        for hop in reversed([h.strip() for h in forwarded_for.split(",") if h.strip()]):
            if not self.trusts(hop):
                return hop
            address = hop
        return address

    def trusts(self, address: str) -> bool:
        """Whether ``address`` is a trusted proxy's."""
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(ip in network for network in self.trusted_proxies)


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> tuple[str, str]:
    """A new token and its SHA-256 (the only part the configuration keeps)."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    return token, token_digest(token)


def save_token(path: str | Path, token: str) -> None:
    """Write ``token`` to a new file at ``path`` that only its owner can read (a usage error if
    the file exists: a token is never overwritten by another)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise UsageError(f"cannot write the token to {path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(token + "\n")


def config_entry(name: str, roles: Sequence[str], digest: str) -> str:
    """The TOML lines that add an operator to the configuration."""
    quoted = ", ".join(_toml_string(r) for r in roles)
    return (
        f"[[operators]]\nname = {_toml_string(name)}\nroles = [{quoted}]\n"
        f'token_sha256 = "{digest}"\n'
    )


def _toml_string(text: str) -> str:
    """``text`` as a TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(text, ensure_ascii=False)


def find_config(given: str | Path | None, environ: Mapping[str, str] | None = None) -> Path:
    """The configuration file: the one given, else ``$RATCHET_SERVE_CONFIG``, else
    ``ratchet-serve.toml`` in the working directory; a usage error when there is none."""
    env = os.environ if environ is None else environ
    path = Path(given or env.get(ENV_CONFIG) or DEFAULT_CONFIG)
    if not path.is_file():
        how = "named" if given or env.get(ENV_CONFIG) else "found in the working directory"
        raise UsageError(
            f"no service configuration {how} ({path}): the service needs its operators. "
            f"Create one with 'ratchet token NAME --role ROLE >> {DEFAULT_CONFIG}'"
        )
    return path


def load_config(path: Path, environ: Mapping[str, str] | None = None) -> Config:
    """Read and check the configuration at ``path`` (a usage error naming what is wrong); each
    sender's secrets are read from ``environ`` (default: the process's)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"cannot read the service configuration {path}: {exc}") from None
    unknown = sorted(set(data) - {"operators", "trusted_proxies", "senders"})
    if unknown:
        raise UsageError(f"{path}: unknown setting(s) {', '.join(unknown)}")
    operators: dict[str, Operator] = {}
    names: set[str] = set()
    for i, entry in enumerate(_list(path, data, "operators")):
        where = f"{path}: operators[{i}]"
        if not isinstance(entry, dict) or set(entry) - {"name", "roles", "token_sha256"}:
            raise UsageError(f"{where}: an operator has name, roles and token_sha256")
        name, roles, digest = entry.get("name"), entry.get("roles"), entry.get("token_sha256")
        if not isinstance(name, str) or not name.strip():
            raise UsageError(f"{where}: name must be a non-empty string")
        if name in names:
            raise UsageError(f"{where}: operator {name!r} is listed twice")
        if not isinstance(roles, list) or not roles or not all(isinstance(r, str) for r in roles):
            raise UsageError(f"{where}: roles must be a non-empty list of strings")
        if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-fA-F]{64}", digest):
            raise UsageError(
                f"{where}: token_sha256 must be a token's SHA-256 in hex (64 characters; "
                "'ratchet token' prints it), never the token itself"
            )
        if digest.lower() in operators:
            raise UsageError(f"{where}: two operators share one token")
        names.add(name)
        operators[digest.lower()] = Operator(name, tuple(roles))
    proxies = []
    for hop in _list(path, data, "trusted_proxies"):
        try:
            proxies.append(ipaddress.ip_network(str(hop), strict=False))
        except ValueError:
            raise UsageError(f"{path}: trusted_proxies: {hop!r} is not an address") from None
    senders: dict[str, Sender] = {}
    for i, entry in enumerate(_list(path, data, "senders")):
        sender = _sender(f"{path}: senders[{i}]", entry, os.environ if environ is None else environ)
        if sender.name in senders:
            raise UsageError(f"{path}: senders[{i}]: sender {sender.name!r} is listed twice")
        senders[sender.name] = sender
    return Config(operators, tuple(proxies), path, senders)


SENDER_KEYS = {"name", "secret_env", "run", "event", "data", "events"}


def _sender(where: str, entry: Any, environ: Mapping[str, str]) -> Sender:
    if not isinstance(entry, dict) or set(entry) - SENDER_KEYS:
        raise UsageError(f"{where}: a sender has {', '.join(sorted(SENDER_KEYS))}")
    name, env = entry.get("name"), entry.get("secret_env")
    if not isinstance(name, str) or not name or not all(c.isalnum() or c in "-_" for c in name):
        raise UsageError(f"{where}: name must be letters, digits, - and _ (it is in the URL)")
    if not isinstance(env, str) or not env:
        raise UsageError(f"{where}: secret_env must name the variable holding its secret(s)")
    secrets_given = environ.get(env, "").split()
    if not secrets_given:
        raise UsageError(f"{where}: sender {name!r} has no secret: {env} is not set")
    try:
        keys = tuple(secret_key(secret) for secret in secrets_given)
    except ValueError as exc:
        raise UsageError(f"{where}: {env}: {exc}") from None
    paths = {}
    for key in ("run", "event", "data"):
        value = entry.get(key, key)
        if not isinstance(value, str) or not value or "" in value.split("."):
            raise UsageError(f"{where}: {key} must be a dotted path into the body (a.b.c)")
        paths[key] = value
    events = entry.get("events")
    if events is not None and (
        not isinstance(events, dict)
        or not all(isinstance(k, str) and isinstance(v, str) and v for k, v in events.items())
    ):
        raise UsageError(f"{where}: events maps the sender's event names to the spec's")
    return Sender(name, keys, paths["run"], paths["event"], paths["data"], events)


def _list(path: Path, data: Mapping[str, Any], key: str) -> list[Any]:
    value = data.get(key, [])
    if not isinstance(value, list):
        raise UsageError(f"{path}: {key} must be a list")
    return value
