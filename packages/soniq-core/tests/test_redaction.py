"""`soniq.redaction` on job data: keys named like secrets, and URLs anywhere inside."""

from __future__ import annotations

import pytest

from soniq.redaction import MASK, is_secret_key, redact_data


@pytest.mark.parametrize(
    "name",
    [
        "password",
        "db_password",
        "Password",
        "passwd",
        "pwd",
        "secret",
        "client_secret",
        "token",
        "accessToken",
        "refresh-token",
        "key",
        "api_key",
        "apiKey",
        "API_KEY",
        "private_key",
        "card",
        "card_number",
        "creditCard",
        "cvv",
        "credentials",
        "Authorization",
    ],
)
def test_redact_keys_named_like_secrets(name: str) -> None:
    assert is_secret_key(name)
    assert redact_data({name: "4111 1111 1111 1111"}) == {name: MASK}


@pytest.mark.parametrize("name", ["customer_id", "amount", "monkey", "keyboard", "panel", "queue", "email", ""])
def test_redact_leaves_other_keys_alone(name: str) -> None:
    assert not is_secret_key(name)
    assert redact_data({name: 42}) == {name: 42}


def test_redact_data_masks_at_any_depth_and_keeps_the_shape() -> None:
    args = {
        "order": {"id": 7, "payment": {"card": {"number": "4111111111111111", "exp": "12/30"}}},
        "targets": [{"url": "https://bot:hunter2@hooks.example/x"}, "redis://:s3cret@cache:6379/0"],
        "note": "connect with password=swordfish please",
        "count": 3,
        "flag": None,
    }
    masked = redact_data(args)
    assert masked == {
        "order": {"id": 7, "payment": {"card": MASK}},
        "targets": [{"url": "https://bot:***@hooks.example/x"}, "redis://:***@cache:6379/0"],
        "note": "connect with password=*** please",
        "count": 3,
        "flag": None,
    }
    assert args["note"] == "connect with password=swordfish please"  # the original is not changed


def test_redact_data_masks_the_secret_value_whatever_its_type() -> None:
    assert redact_data({"token": {"a": 1}, "key": [1, 2], "secret": 5}) == {"token": MASK, "key": MASK, "secret": MASK}
    assert redact_data(["plain", 1, 2.5, True]) == ["plain", 1, 2.5, True]


def test_redact_data_stops_at_absurd_nesting() -> None:
    deep: object = "postgresql://u:pw@h/db"
    for _ in range(200):
        deep = [deep]
    text = repr(redact_data(deep))
    assert "pw@" not in text
    assert MASK in text
