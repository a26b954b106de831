"""The HTTP adapter's settings: plain data in, typed settings out, or R203 naming the setting.

Secrets are named by the settings (an environment variable, a file) and read when the adapter
is made; a secret that cannot be read is R203 too, naming the variable or the file, never a
value. Nothing here sends a request.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from ratchet_runner.adapters.http import HttpAdapter
from ratchet_runner.adapters.http.settings import (
    EndpointLookup,
    ListingLookup,
    SecretSource,
    parse_settings,
)
from ratchet_runner.errors import BindingError, UsageError

MINIMAL = {
    "base_url": "https://api.provider.test/v1/",
    "operations": {"refund": {"path": "/refunds/{order}", "receipt_field": "refund_id"}},
}


def with_(change: dict[str, Any], base: dict[str, Any] = MINIMAL) -> dict[str, Any]:
    """``base`` with ``change`` merged in (tables merged one level down)."""
    data = copy.deepcopy(base)
    for key, value in change.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return data


def test_the_defaults_of_a_minimal_binding() -> None:
    settings = parse_settings(MINIMAL)
    assert settings.base_url == "https://api.provider.test/v1"
    assert settings.idempotency_header == "Idempotency-Key"
    assert settings.verify_tls is True
    assert (settings.timeout, settings.lookup_timeout, settings.keepalive_expiry) == (30, 10, 5)
    assert settings.key_retention is None
    assert settings.auth is None
    assert settings.remaps == ()
    refund = settings.operations["refund"]
    assert (refund.method, refund.arguments, refund.receipt) == ("POST", "json", "")
    get = parse_settings(
        with_({"operations": {"find": {"method": "GET", "path": "/x", "receipt_field": "id"}}})
    )
    assert get.operations["find"].arguments == "query"


def test_a_full_binding() -> None:
    data = with_(
        {
            "idempotency_header": "X-Request-Id",
            "key_retention": 86400,
            "keepalive_expiry": 4,
            "provider_idle_timeout": 5,
            "auth": {"type": "basic", "username": "shop", "password_file": "secrets/pay"},
            "signing": {"header": "X-Signature", "key_env": "PAY_HMAC", "algorithm": "sha512"},
            "headers": {"Stripe-Version": "2024-06-20"},
            "lookups": {
                "lookup_refund": {
                    "by": "endpoint",
                    "path": "/refunds/by-key/{operation_id}",
                    "receipt_field": "refund_id",
                },
                "lookup_label": {
                    "by": "listing",
                    "path": "/labels?limit=100",
                    "items": "/data",
                    "reference": "/client_reference",
                    "receipt_field": "label_id",
                    "settle": 60,
                },
            },
            "remap": [
                {
                    "status": 400,
                    "outcome": "key_reused",
                    "body_pointer": "/error/type",
                    "body_equals": "idempotency_error",
                }
            ],
        }
    )
    settings = parse_settings(data, name="payments", base_dir=Path("/etc/ratchet"))
    assert settings.auth is not None
    assert settings.auth.secret == SecretSource(file=Path("/etc/ratchet/secrets/pay"))
    assert settings.signing is not None
    assert settings.signing.key == SecretSource(env="PAY_HMAC")
    assert isinstance(settings.lookups["lookup_refund"], EndpointLookup)
    listing = settings.lookups["lookup_label"]
    assert isinstance(listing, ListingLookup)
    assert listing.settle == 60.0
    assert settings.remaps[0].outcome == "key_reused"


#: Two operations with different receipt fields, reconciled by one lookup of each kind.
SHARED = {
    "base_url": "https://travel.test",
    "operations": {
        "hold": {"path": "/holds", "receipt_field": "hold_id"},
        "release": {"path": "/releases", "receipt_field": "release_id"},
        "rehold": {"path": "/holds/again", "receipt_field": "hold_id"},
    },
    "lookups": {
        "by_key": {"by": "endpoint", "path": "/ops/{operation_id}"},
        "recent": {"by": "listing", "path": "/ops", "reference": "/ref", "settle": 5},
    },
}


def test_a_lookup_without_a_receipt_field_takes_the_receipt_field_of_its_operations() -> None:
    settings = parse_settings(SHARED)
    for name in ("by_key", "recent"):
        lookup = settings.lookups[name]
        assert lookup.receipt_field is None
        assert settings.lookup_fields(lookup) == ("hold_id", "release_id")  # each once, in order


def test_a_lookups_own_receipt_field_is_the_only_one_it_takes() -> None:
    data = copy.deepcopy(SHARED)
    data["lookups"]["by_key"]["receipt_field"] = "release_id"
    data["lookups"]["recent"]["receipt_field"] = "id"
    settings = parse_settings(data)
    assert settings.lookup_fields(settings.lookups["by_key"]) == ("release_id",)
    assert settings.lookup_fields(settings.lookups["recent"]) == ("id",)


def test_a_lookups_receipt_field_if_given_is_a_string() -> None:
    data = copy.deepcopy(SHARED)
    data["lookups"]["by_key"]["receipt_field"] = 7
    with pytest.raises(BindingError, match=r"'lookups\.by_key\.receipt_field' must be a string"):
        parse_settings(data)


@pytest.mark.parametrize(
    ("change", "setting", "words"),
    [
        ({"base_url": None}, "base_url", "is required"),
        ({"base_url": "ftp://x"}, "base_url", "http:// or https://"),
        ({"base_url": 7}, "base_url", "must be a string"),
        ({"operation": {}}, "operation", "is unknown"),
        ({"operations": None}, "operations", "at least one operation"),
        ({"operations": []}, "operations", "must be a table"),
        (
            {"operations": {"refund": {"path": "/r", "receipt_field": "x", "verb": "POST"}}},
            "operations.refund.verb",
            "is unknown",
        ),
        (
            {"operations": {"refund": {"method": "FETCH", "path": "/r", "receipt_field": "x"}}},
            "operations.refund.method",
            "one of GET, POST",
        ),
        (
            {"operations": {"refund": {"path": "refunds", "receipt_field": "x"}}},
            "operations.refund.path",
            "must start with '/'",
        ),
        (
            {"operations": {"refund": {"path": "/r/{order!r}", "receipt_field": "x"}}},
            "operations.refund.path",
            "no plain name",
        ),
        (
            {"operations": {"refund": {"path": "/r/{order", "receipt_field": "x"}}},
            "operations.refund.path",
            "no path template",
        ),
        (
            {"operations": {"refund": {"path": "/r"}}},
            "operations.refund.receipt_field",
            "is required",
        ),
        (
            {"operations": {"refund": {"path": "/r", "receipt_field": "x", "receipt": "data"}}},
            "operations.refund.receipt",
            "JSON pointer",
        ),
        (
            {"operations": {"refund": {"path": "/r", "receipt_field": "x", "arguments": "form"}}},
            "operations.refund.arguments",
            "one of json, query",
        ),
        ({"timeout": 0}, "timeout", "more than zero"),
        ({"timeout": -1}, "timeout", "more than zero"),
        ({"timeout": True}, "timeout", "number of seconds"),
        ({"timeout": "30s"}, "timeout", "number of seconds"),
        (
            {"keepalive_expiry": 30, "provider_idle_timeout": 30},
            "keepalive_expiry",
            "below provider_idle_timeout",
        ),
        ({"max_connections": 0}, "max_connections", "from 1 to 1000"),
        ({"verify_tls": "no"}, "verify_tls", "true or false"),
        ({"idempotency_header": "Idempotency Key"}, "idempotency_header", "no header name"),
        (
            {"headers": {"Authorization": "Bearer x"}},
            "headers.Authorization",
            "carries credentials",
        ),
        ({"auth": {"type": "bearer"}}, "auth.token_env", "set exactly one"),
        (
            {"auth": {"type": "bearer", "token_env": "A", "token_file": "b"}},
            "auth.token_env",
            "set exactly one",
        ),
        ({"auth": {"type": "bearer", "token": "sk_live_x"}}, "auth.token", "is unknown"),
        ({"auth": {"type": "oauth"}}, "auth.type", "one of bearer, basic"),
        ({"auth": {"type": "basic", "password_env": "P"}}, "auth.username", "is required"),
        ({"signing": {"key_env": "K"}}, "signing.header", "is required"),
        (
            {"lookups": {"l": {"path": "/k/{operation_id}", "receipt_field": "x"}}},
            "lookups.l.by",
            "is required",
        ),
        (
            {"lookups": {"l": {"by": "endpoint", "path": "/k", "receipt_field": "x"}}},
            "lookups.l.path",
            "must hold {operation_id}",
        ),
        (
            {"lookups": {"l": {"by": "endpoint", "path": "/k/{order}", "receipt_field": "x"}}},
            "lookups.l.path",
            "only {operation_id}",
        ),
        (
            {
                "lookups": {
                    "l": {
                        "by": "endpoint",
                        "path": "/k/{operation_id}",
                        "receipt_field": "x",
                        "not_found_pointer": "/code",
                    }
                }
            },
            "lookups.l.not_found_equals",
            "set both or neither",
        ),
        (
            {
                "lookups": {
                    "l": {
                        "by": "endpoint",
                        "path": "/k/{operation_id}",
                        "receipt_field": "x",
                        "not_found_status": 500,
                    }
                }
            },
            "lookups.l.not_found_status",
            "from 400 to 499",
        ),
        (
            {
                "lookups": {
                    "l": {"by": "listing", "path": "/k", "reference": "/ref", "receipt_field": "x"}
                }
            },
            "lookups.l.settle",
            "is required",
        ),
        (
            {"lookups": {"l": {"by": "listing", "path": "/k", "receipt_field": "x", "settle": 5}}},
            "lookups.l.reference",
            "or 'match': set exactly one",
        ),
        (
            {
                "lookups": {
                    "l": {
                        "by": "listing",
                        "path": "/k",
                        "reference": "/r",
                        "match": {"/order": "order"},
                        "settle": 5,
                    }
                }
            },
            "lookups.l.reference",
            "or 'match': set exactly one",
        ),
        (
            {
                "lookups": {
                    "l": {"by": "listing", "path": "/k", "match": {"order": "order"}, "settle": 5}
                }
            },
            "lookups.l.match.order",
            "must be a JSON pointer",
        ),
        (
            {
                "lookups": {
                    "l": {
                        "by": "listing",
                        "path": "/k",
                        "reference": "/r",
                        "filter": {"order_id": "the order"},
                        "settle": 5,
                    }
                }
            },
            "lookups.l.filter.order_id",
            "must name an argument",
        ),
        (
            {
                "lookups": {
                    "l": {
                        "by": "listing",
                        "path": "/k",
                        "reference": "/r",
                        "settle": -5,
                        "receipt_field": "x",
                    }
                }
            },
            "lookups.l.settle",
            "zero or more",
        ),
        ({"remap": {"status": 400}}, "remap", "array of tables"),
        ({"remap": [{"outcome": "refused"}]}, "remap[0].status", "is required"),
        ({"remap": [{"status": 600, "outcome": "refused"}]}, "remap[0].status", "100 to 599"),
        ({"remap": [{"status": 400, "outcome": "done"}]}, "remap[0].outcome", "one of transient"),
        (
            {"remap": [{"status": 400, "outcome": "refused", "body_equals": "x"}]},
            "remap[0].body_pointer",
            "set both or neither",
        ),
    ],
)
def test_a_wrong_setting_is_r203_naming_the_setting(
    change: dict[str, Any], setting: str, words: str
) -> None:
    data = {k: v for k, v in with_(change).items() if v is not None}
    with pytest.raises(BindingError) as raised:
        parse_settings(data, name="payments")
    message = str(raised.value)
    assert raised.value.code == "R203"
    assert message.startswith(f"binding 'payments': setting {setting!r}"), message
    assert words in message


def test_a_binding_error_is_a_usage_error() -> None:
    assert issubclass(BindingError, UsageError)
    with pytest.raises(UsageError):
        parse_settings([])


def test_a_secret_that_cannot_be_read_is_r203_naming_where_and_never_a_value(
    tmp_path: Path,
) -> None:
    bearer = with_({"auth": {"type": "bearer", "token_env": "PAY_TOKEN"}})
    with pytest.raises(BindingError, match="environment variable PAY_TOKEN, which is not set"):
        HttpAdapter.from_data(bearer, environ={})
    with pytest.raises(BindingError, match="PAY_TOKEN"):
        HttpAdapter.from_data(bearer, environ={"PAY_TOKEN": "  "})
    in_file = with_({"signing": {"header": "X-Sig", "key_file": "missing.key"}})
    with pytest.raises(BindingError, match=r"'signing.key' names the file .*missing.key"):
        HttpAdapter.from_data(in_file, base_dir=tmp_path)
    (tmp_path / "empty.key").write_text("\n")
    empty = with_({"signing": {"header": "X-Sig", "key_file": str(tmp_path / "empty.key")}})
    with pytest.raises(BindingError, match="which is empty"):
        HttpAdapter.from_data(empty)


def test_an_unusable_ca_file_is_r203(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("not a certificate")
    with pytest.raises(BindingError, match="'ca_file'"):
        HttpAdapter.from_data(with_({"ca_file": "ca.pem"}), base_dir=tmp_path)


def test_the_settings_and_the_adapter_hold_no_secret_in_their_repr() -> None:
    secret = "sk_live_SENTINEL"
    data = with_({"auth": {"type": "bearer", "token_env": "PAY_TOKEN"}})
    with HttpAdapter.from_data(data, environ={"PAY_TOKEN": secret}) as adapter:
        assert secret not in repr(adapter) + repr(adapter.settings) + str(vars(adapter.settings))
    assert "PAY_TOKEN" in repr(adapter.settings.auth)  # the variable's name, not its value
