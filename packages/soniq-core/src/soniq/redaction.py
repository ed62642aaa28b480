"""One way to keep passwords out of messages, reprs and logs.

Every error message, `repr()` and log line that may contain a database URL
goes through here: those strings end up in tracebacks, error trackers and
terminals, where a password must never appear.
"""

from __future__ import annotations

import re
from typing import Any

from soniq.encryption import SHOWN, is_envelope, is_sealed_text

MASK = "***"

# scheme://user:password@host  (the password may contain anything but '@', '/' and whitespace)
_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@]*:)(?P<secret>[^\s@/]*)(?P<tail>@)")
# scheme://:password@host  (Redis style, no user name)
_QUERY_SECRET = re.compile(
    r"(?P<head>[?&;](?:password|passwd|pwd|secret|token|sslpassword)=)(?P<secret>[^&#\s]*)", re.IGNORECASE
)
# key=value DSNs: password=... or password='...'
_DSN_SECRET = re.compile(r"(?P<head>\b(?:password|passwd|pwd)\s*=\s*)(?P<secret>'[^']*'|\"[^\"]*\"|\S+)", re.IGNORECASE)


def redact_text(text: str) -> str:
    """`text` with every password-looking part of a URL or DSN replaced by ``***``.

    Works on whole messages, not only on clean URLs: a URL that failed to
    parse (``postgresql://app:S3cret@[::1/db``) is masked as well.
    """
    if not text:
        return text
    masked = _USERINFO.sub(lambda m: m["head"] + (MASK if m["secret"] else "") + m["tail"], text)
    masked = _QUERY_SECRET.sub(lambda m: m["head"] + MASK, masked)
    return _DSN_SECRET.sub(lambda m: m["head"] + MASK, masked)


def redact_url(url: str | None) -> str:
    """A URL safe to print: the password (in the user part or a query parameter) masked."""
    if url is None:
        return ""
    return redact_text(str(url))


# Names of mapping keys whose values are secrets: matched on the key's words (``api_key``, ``apiKey``,
# ``card-number`` and ``CARD`` each split into words), so ``monkey`` or ``keyboard`` is left alone.
SECRET_KEY_WORDS = frozenset(
    {
        "password",
        "passwd",
        "pwd",
        "passphrase",
        "secret",
        "token",
        "key",
        "apikey",
        "card",
        "creditcard",
        "cardnumber",
        "cvv",
        "cvc",
        "pan",
        "credential",
        "credentials",
        "authorization",
        "cookie",
    }
)
# Words that are secrets even inside a longer one: ``db_password``, ``dbpassword``, ``accesstoken``.
_SECRET_INSIDE = re.compile(r"password|passwd|passphrase|secret|token|apikey|api_key|credential", re.IGNORECASE)
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_MAX_DEPTH = 64


def is_secret_key(name: object) -> bool:
    """True when a mapping key is named like a secret: password, secret, token, key, api_key, card, ..."""
    if not isinstance(name, str):
        return False
    if _SECRET_INSIDE.search(name):
        return True
    words = [w.lower() for w in _WORDS.findall(name)]
    if any(w in SECRET_KEY_WORDS or w.rstrip("s") in SECRET_KEY_WORDS for w in words):
        return True
    # ``card_number`` and ``api_key`` as one word, whatever separates them.
    return "".join(words) in SECRET_KEY_WORDS


def redact_data(value: Any, *, _depth: int = 0) -> Any:
    """A copy of `value` (JSON-like: mappings, lists, strings) safe to show.

    The value under a key named like a secret (`is_secret_key`) becomes ``***``, whatever it is;
    every string, at any depth, goes through `redact_text` (a URL's password, ``password=...``).
    Other values are returned as they are. Nesting deeper than 64 levels is masked whole.
    """
    if _depth > _MAX_DEPTH:
        return MASK
    if is_envelope(value) or is_sealed_text(value):
        return SHOWN  # an encrypted job's value: only the word, never the ciphertext
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {
            key: MASK if is_secret_key(key) else redact_data(item, _depth=_depth + 1) for key, item in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [redact_data(item, _depth=_depth + 1) for item in value]
    return value
