"""One way to keep passwords out of messages, reprs and logs.

Every error message, `repr()` and log line that may contain a database URL
goes through here: those strings end up in tracebacks, error trackers and
terminals, where a password must never appear.
"""

from __future__ import annotations

import re

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
