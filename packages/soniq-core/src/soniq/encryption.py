"""Encrypted arguments, results and progress messages, on `cryptography`'s Fernet.

A job declared ``@app.job(encrypted=True)``, or every job under the setting ``encrypt_all``, is
stored sealed: its arguments and its result become an *envelope*, ``{"__soniq_encrypted__":
TOKEN}``, and its progress message ``"soniq-encrypted:" + TOKEN``, where TOKEN is the Fernet token
of the value's JSON. Stores keep envelopes as any other JSON, so every backend holds only
ciphertext without knowing it. The first of `encryption_keys` seals; every key opens (a
`MultiFernet`), so a new key goes first and old ones stay until ``soniq keys rotate`` has
re-sealed the stored rows with it.

`cryptography` is imported on first use only (the extra ``soniq-core[encryption]``).
"""

from __future__ import annotations

import base64
import binascii
import functools
import importlib.util
import json
from collections.abc import Mapping, Sequence
from typing import Any

from soniq.errors import Permanent, SoniqError

ENVELOPE_KEY = "__soniq_encrypted__"
TEXT_PREFIX = "soniq-encrypted:"
SHOWN = "encrypted"
"""What operator screens (the dashboard, the CLI, `get_job`) show in place of a sealed value."""
INSTALL_HINT = "pip install 'soniq-core[encryption]'"


class UndecryptableError(SoniqError, Permanent):
    """A stored value none of the configured keys opens: the row goes to the dead-letter table with
    reason ``undecryptable``, and runs again once replayed under a key that opens it."""

    dead_letter_reason = "undecryptable"


class EncryptionUnavailableError(SoniqError, RuntimeError):
    """Encryption was asked for, but no key is configured or `cryptography` is not installed."""


def fernet_key_problem(key: object) -> str | None:
    """Why `key` is not a Fernet key (32 bytes in url-safe base64), or None. Never quotes the key."""
    if not isinstance(key, str) or not key.strip():
        return "is not a non-empty string"
    try:
        raw = base64.urlsafe_b64decode(key.strip().encode("ascii"))
    except (binascii.Error, ValueError, UnicodeEncodeError):
        return "is not url-safe base64"
    if len(raw) != 32:
        return f"decodes to {len(raw)} bytes, not the 32 of a Fernet key"
    return None


def check_keys(value: object) -> tuple[str, ...]:
    """The `encryption_keys` setting: a comma-separated string or a list of Fernet keys, newest
    first. Raises `ValueError` naming the position of a bad key (the key itself is never shown)."""
    if value is None:
        return ()
    if isinstance(value, str):
        items: list[object] = [part.strip() for part in value.split(",") if part.strip()]
    elif isinstance(value, Sequence):
        items = list(value)
    else:
        raise ValueError(f"expected Fernet keys, comma-separated or as a list, got a {type(value).__name__}")
    for position, item in enumerate(items, start=1):
        problem = fernet_key_problem(item)
        if problem is not None:
            raise ValueError(f"key {position} of {len(items)} {problem} (make a key with `soniq keys generate`)")
    if len(set(items)) != len(items):
        raise ValueError("the same key is listed twice")
    return tuple(str(item).strip() for item in items)


def available() -> bool:
    """Whether `cryptography` is installed (checked without importing it)."""
    return importlib.util.find_spec("cryptography") is not None


def is_envelope(value: object) -> bool:
    return isinstance(value, Mapping) and len(value) == 1 and isinstance(value.get(ENVELOPE_KEY), str)


def is_sealed_text(value: object) -> bool:
    return isinstance(value, str) and value.startswith(TEXT_PREFIX)


def shown(value: Any) -> Any:
    """`value` as an operator sees it: a sealed value is the word ``"encrypted"``."""
    return SHOWN if is_envelope(value) or is_sealed_text(value) else value


class Cipher:
    """Seals with the newest key and opens with any (see the module's text)."""

    def __init__(self, keys: Sequence[str]) -> None:
        if not keys:
            raise EncryptionUnavailableError(
                "encryption needs at least one key: set encryption_keys (SONIQ_ENCRYPTION_KEYS); "
                "make one with `soniq keys generate`"
            )
        try:
            from cryptography.fernet import Fernet, InvalidToken, MultiFernet
        except ImportError:
            raise EncryptionUnavailableError(f"encryption needs the cryptography package: {INSTALL_HINT}") from None
        fernets = [Fernet(key.encode("ascii")) for key in keys]
        self._fernet = MultiFernet(fernets)
        self._newest = fernets[0]
        self._invalid = InvalidToken
        self._count = len(keys)

    def seal(self, value: Any) -> dict[str, str]:
        """`value` (JSON-ready) as an envelope."""
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        return {ENVELOPE_KEY: self._fernet.encrypt(text.encode("utf-8")).decode("ascii")}

    def open(self, envelope: Mapping[str, Any]) -> Any:
        """The value inside an envelope, or `UndecryptableError`."""
        return json.loads(self._open_token(str(envelope[ENVELOPE_KEY])))

    def seal_text(self, text: str) -> str:
        return TEXT_PREFIX + self._fernet.encrypt(text.encode("utf-8")).decode("ascii")

    def open_text(self, sealed: str) -> str:
        return self._open_token(sealed[len(TEXT_PREFIX) :])

    def is_current(self, value: Any) -> bool:
        """Whether a sealed value opens with the newest key (then rotating it would change nothing)."""
        token = value[ENVELOPE_KEY] if is_envelope(value) else str(value)[len(TEXT_PREFIX) :]
        try:
            self._newest.decrypt(token.encode("ascii"))
        except (self._invalid, UnicodeEncodeError, ValueError):
            return False
        return True

    def reseal(self, value: Any) -> Any:
        """An envelope or sealed text re-sealed with the newest key (`MultiFernet.rotate`);
        anything else unchanged. `UndecryptableError` when no key opens it."""
        try:
            if is_envelope(value):
                return {ENVELOPE_KEY: self._fernet.rotate(value[ENVELOPE_KEY].encode("ascii")).decode("ascii")}
            if is_sealed_text(value):
                token = value[len(TEXT_PREFIX) :].encode("ascii")
                return TEXT_PREFIX + self._fernet.rotate(token).decode("ascii")
        except (self._invalid, UnicodeEncodeError, ValueError):
            raise UndecryptableError(self._refusal()) from None
        return value

    def _open_token(self, token: str) -> str:
        try:
            return self._fernet.decrypt(token.encode("ascii")).decode("utf-8")
        except (self._invalid, UnicodeError, ValueError):
            raise UndecryptableError(self._refusal()) from None

    def _refusal(self) -> str:
        return (
            f"the stored value cannot be decrypted with any of the {self._count} configured key(s) "
            "(was it sealed with a key since removed from encryption_keys? put that key back, then replay)"
        )


@functools.lru_cache(maxsize=8)
def cipher_for(keys: tuple[str, ...]) -> Cipher:
    """One `Cipher` per set of keys, made on first use."""
    return Cipher(keys)


def opened(value: Any, keys: tuple[str, ...]) -> Any:
    """`value` opened when it is an envelope (`UndecryptableError` when no key opens it), else as is."""
    return cipher_for(keys).open(value) if is_envelope(value) else value


def generate_key() -> str:
    """A new Fernet key (needs `cryptography`)."""
    try:
        from cryptography.fernet import Fernet
    except ImportError:
        raise EncryptionUnavailableError(f"making a key needs the cryptography package: {INSTALL_HINT}") from None
    return Fernet.generate_key().decode("ascii")


__all__ = [
    "ENVELOPE_KEY",
    "SHOWN",
    "TEXT_PREFIX",
    "Cipher",
    "EncryptionUnavailableError",
    "UndecryptableError",
    "check_keys",
    "cipher_for",
    "fernet_key_problem",
    "generate_key",
    "is_envelope",
    "is_sealed_text",
    "opened",
    "shown",
]
