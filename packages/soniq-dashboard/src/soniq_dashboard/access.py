"""Who may read: the `Host` a request names, the optional read key, and URLs no store could answer.

Three ASGI layers in front of the dashboard's routes, outermost first:

- `HostGuard` answers 400 to a request whose ``Host`` is not one the dashboard was told it is
  reached by (DNS rebinding: a page on ``rebind.attacker.example`` whose name now points at
  127.0.0.1 would otherwise read a dashboard that listens on this machine only);
- `ReadKeyGuard`, when a read key is set, answers 401 (a login form for a browser) to every page
  and JSON endpoint unless the request carries the key, in a header or the cookie the form sets;
  the static files and the favicon stay open;
- `UrlGuard` answers 400 to a path or query value holding a NUL or an unpaired surrogate, or too
  long for any id or filter, before a handler hands it to the store.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from collections.abc import Iterable
from html import escape
from urllib.parse import parse_qsl, unquote

from starlette.types import ASGIApp, Receive, Scope, Send

READ_KEY_HEADER = "x-soniq-read-key"
READ_KEY_COOKIE = "soniq_dashboard_read"
READ_KEY_FIELD = "read_key"
LOGIN_PATH = "/login"
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
MAX_VALUE_CHARS = 2048
"""Longest path or query value a request may carry; no job id, queue or name filter comes near it."""
MAX_LOGIN_BYTES = 8 * 1024
_PLAIN = [(b"content-type", b"text/plain; charset=utf-8"), (b"x-content-type-options", b"nosniff")]
_HTML_HEADERS = [
    (b"content-type", b"text/html; charset=utf-8"),
    (b"x-content-type-options", b"nosniff"),
    (b"cache-control", b"no-store"),
    (b"x-frame-options", b"DENY"),
    (
        b"content-security-policy",
        b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        b"frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    ),
]


async def _answer(send: Send, status: int, body: str, headers: list[tuple[bytes, bytes]]) -> None:
    data = body.encode("utf-8")
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*headers, (b"content-length", str(len(data)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": data})


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


def host_name(value: str) -> str:
    """The name part of a ``Host`` value, lower case, without its port: ``[::1]:6161`` is ``[::1]``."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        return value[: end + 1] if end != -1 else value
    name, sep, port = value.rpartition(":")
    if sep and port.isdigit():
        return name
    return value


def normalize_host(value: str) -> str:
    """An allowed-hosts entry as `host_name` words a request's: an IPv6 address gets its brackets.

    ``::1``, ``[::1]`` and ``[::1]:6161`` are all ``[::1]``; a name loses its port and a trailing dot.
    """
    raw = value.strip().lower()
    for candidate in (raw.strip("[]"), host_name(raw).strip("[]")):
        try:
            address = ipaddress.ip_address(candidate)
        except ValueError:
            continue
        return f"[{address.compressed}]" if address.version == 6 else address.compressed
    return host_name(raw).rstrip(".")


def is_loopback(host: str) -> bool:
    """True when binding `host` keeps the dashboard on this machine."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def allowed_hosts_for(bound: str, extra: Iterable[str]) -> list[str]:
    """The names a dashboard bound to `bound` answers to: loopback names, the bound address, and `extra`."""
    names = [*LOOPBACK_NAMES]
    if bound.strip() not in ("", "0.0.0.0", "::", "[::]"):  # a wildcard address is no name to reach it by
        names.append(bound)
    names.extend(e for e in extra if e.strip())
    seen: list[str] = []
    for name in (normalize_host(n) for n in names):
        if name not in seen:
            seen.append(name)
    return seen


class HostGuard:
    """400 for a request whose ``Host`` is not an allowed name (the port is not compared)."""

    def __init__(self, app: ASGIApp, allowed_hosts: Iterable[str]) -> None:
        self.app = app
        self.allowed = {normalize_host(h) for h in allowed_hosts}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        raw = _header(scope, b"host")
        if raw is not None and normalize_host(raw) in self.allowed:
            await self.app(scope, receive, send)
            return
        shown = "none" if raw is None else repr(raw[:100])
        await _answer(
            send,
            400,
            f"Refused: this dashboard does not answer to the host {shown}. "
            "Start it with --allowed-host NAME (or SONIQ_DASHBOARD_ALLOWED_HOSTS) for each name it is reached by.\n",
            _PLAIN,
        )


def read_cookie_value(key: str) -> str:
    """What the login cookie holds: a digest of the key, not the key itself."""
    return hmac.new(key.encode("utf-8"), b"soniq-dashboard read cookie v1", hashlib.sha256).hexdigest()


def _same(a: str | None, b: str) -> bool:
    return a is not None and hmac.compare_digest(a.encode("utf-8", "replace"), b.encode("utf-8"))


def _cookie(scope: Scope, name: str) -> str | None:
    raw = _header(scope, b"cookie") or ""
    for part in raw.split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return None


def _relative(scope: Scope, prefix: str) -> str:
    """The request's path below the mount point and the dashboard's `prefix`."""
    path = str(scope.get("path", ""))
    root = str(scope.get("root_path", "")).rstrip("/")
    if root and path.startswith(root):
        path = path[len(root) :]
    if prefix and path.startswith(prefix):
        path = path[len(prefix) :]
    return path or "/"


def _base(scope: Scope, prefix: str) -> str:
    return str(scope.get("root_path", "")).rstrip("/") + prefix


LOGIN_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<title>Read key needed · Soniq dashboard</title>
<link rel="icon" href="{base}/static/favicon.svg" type="image/svg+xml">
<link rel="stylesheet" href="{base}/static/dashboard.css">
</head>
<body>
<main id="main">
<h1>This dashboard needs its read key</h1>
{notice}<form method="post" action="{base}/login" class="actions">
  <input type="hidden" name="next" value="{next}">
  <label>Read key <input type="password" name="read_key" autocomplete="current-password" required autofocus></label>
  <button type="submit">Open the dashboard</button>
</form>
</main>
</body>
</html>
"""


class ReadKeyGuard:
    """401 for every page and JSON endpoint without the read key; ``POST <prefix>/login`` sets its cookie.

    The key is accepted in the ``X-Soniq-Read-Key`` header, as ``Authorization: Bearer <key>``
    (what a Prometheus scrape sends), or in the ``HttpOnly``, ``SameSite=Strict`` cookie the login
    form sets, which holds a digest of the key, not the key.
    """

    def __init__(self, app: ASGIApp, read_key: str, prefix: str) -> None:
        if not read_key:
            raise ValueError("read_key must not be empty")
        self.app = app
        self.key = read_key
        self.cookie = read_cookie_value(read_key)
        self.prefix = prefix

    def _carries_key(self, scope: Scope) -> bool:
        if _same(_header(scope, READ_KEY_HEADER.encode()), self.key):
            return True
        auth = _header(scope, b"authorization") or ""
        if auth[:7].lower() == "bearer " and _same(auth[7:].strip(), self.key):
            return True
        return _same(_cookie(scope, READ_KEY_COOKIE), self.cookie)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        path = _relative(scope, self.prefix)
        if path.startswith("/static/") or path == "/favicon.ico" or self._carries_key(scope):
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":
            await send({"type": "websocket.close", "code": 1008})
            return
        if path == LOGIN_PATH and scope.get("method") == "POST":
            await self._login(scope, receive, send)
            return
        await self._login_page(scope, send, next_path=self._here(scope), notice="")

    def _here(self, scope: Scope) -> str:
        query = bytes(scope.get("query_string", b"")).decode("latin-1")
        path = _base(scope, self.prefix) + _relative(scope, self.prefix)
        return path + ("?" + query if query else "")

    def _safe_next(self, scope: Scope, value: str) -> str:
        """Where to go after logging in: a path of this dashboard, never another site."""
        base = _base(scope, self.prefix)
        if (
            value.startswith(base + "/")
            and not value.startswith("//")
            and "\\" not in value
            and value != base + LOGIN_PATH
        ):
            return value
        return base + "/"

    async def _login_page(self, scope: Scope, send: Send, *, next_path: str, notice: str) -> None:
        base = _base(scope, self.prefix)
        page = LOGIN_PAGE.format(
            base=escape(base),
            next=escape(self._safe_next(scope, next_path)),
            notice=f'<p class="notice" id="login-refused">{escape(notice)}</p>\n' if notice else "",
        )
        await _answer(send, 401, page, _HTML_HEADERS)

    async def _login(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = b""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > MAX_LOGIN_BYTES:
                await _answer(send, 413, "Refused: the login form is too large.\n", _PLAIN)
                return
            if not message.get("more_body", False):
                break
        form = dict(parse_qsl(body.decode("utf-8", errors="replace"), keep_blank_values=True))
        target = self._safe_next(scope, form.get("next", ""))
        if not _same(form.get(READ_KEY_FIELD), self.key):
            await self._login_page(scope, send, next_path=target, notice="That is not this dashboard's read key.")
            return
        secure = "; Secure" if scope.get("scheme") == "https" else ""
        path = _base(scope, self.prefix) or "/"
        cookie = f"{READ_KEY_COOKIE}={self.cookie}; Path={path}; HttpOnly; SameSite=Strict{secure}"
        await send(
            {
                "type": "http.response.start",
                "status": 303,
                "headers": [
                    (b"location", target.encode("utf-8")),
                    (b"set-cookie", cookie.encode("latin-1")),
                    (b"cache-control", b"no-store"),
                    (b"content-length", b"0"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": b""})


def clean_text(value: str, *, limit: int = MAX_VALUE_CHARS) -> bool:
    """True when `value` can be an id or a filter: no NUL, no unpaired surrogate, at most `limit` characters."""
    if len(value) > limit or "\x00" in value:
        return False
    return not any("\ud800" <= ch <= "\udfff" for ch in value)


class UrlGuard:
    """400 for a request whose path or query holds what no job id or filter can: NUL, a lone surrogate, a giant."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        raw_path = scope.get("raw_path")
        # Decoded as a surrogate escape too, so a server that leaves bad UTF-8 in is caught the same way.
        path = unquote(bytes(raw_path).decode("latin-1"), errors="surrogateescape") if raw_path else scope["path"]
        query = bytes(scope.get("query_string", b"")).decode("latin-1")
        pairs = parse_qsl(query, keep_blank_values=True, errors="surrogateescape")
        values = [str(scope.get("path", "")), path, *(k for k, _ in pairs), *(v for _, v in pairs)]
        if all(clean_text(v, limit=4 * MAX_VALUE_CHARS if i < 2 else MAX_VALUE_CHARS) for i, v in enumerate(values)):
            await self.app(scope, receive, send)
            return
        await _answer(
            send,
            400,
            "Refused: the URL holds a NUL, an invalid character or a value too long for any job id or filter.\n",
            _PLAIN,
        )


__all__ = [
    "LOOPBACK_NAMES",
    "READ_KEY_COOKIE",
    "READ_KEY_FIELD",
    "READ_KEY_HEADER",
    "HostGuard",
    "ReadKeyGuard",
    "UrlGuard",
    "allowed_hosts_for",
    "clean_text",
    "host_name",
    "is_loopback",
    "normalize_host",
]
