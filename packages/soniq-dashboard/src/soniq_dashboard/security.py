"""Who may write, and proof that a form post came from the dashboard's own page."""

from __future__ import annotations

import hmac
import inspect
import secrets
from collections.abc import Awaitable, Callable, Sequence
from urllib.parse import urlsplit

from starlette.requests import Request

CSRF_COOKIE = "soniq_dashboard_csrf"
CSRF_FIELD = "csrf_token"
API_KEY_HEADER = "x-soniq-api-key"
API_KEY_FIELD = "api_key"

Authorize = Callable[[Request], bool | Awaitable[bool]]


class WriteRefusedError(Exception):
    """A write request that must be answered with 403; the message says why."""


def new_csrf_token() -> str:
    return secrets.token_urlsafe(32)


def csrf_token_of(request: Request) -> str | None:
    token = request.cookies.get(CSRF_COOKIE)
    return token if token and len(token) >= 32 else None


def _same(a: str | None, b: str | None) -> bool:
    return bool(a) and bool(b) and hmac.compare_digest(str(a).encode(), str(b).encode())


def _origin_of(value: str) -> str:
    parts = urlsplit(value)
    return f"{parts.scheme}://{parts.netloc}".lower()


class WriteGuard:
    """Decides every POST: writes on, an API key or the host app's `authorize`, and a same-origin form."""

    def __init__(
        self,
        *,
        writes: bool,
        api_key: str | None,
        authorize: Authorize | None,
        trusted_origins: Sequence[str] = (),
    ) -> None:
        if writes and not api_key and authorize is None:
            raise ValueError(
                "create_dashboard_app(writes=True) needs api_key=... or authorize=...: "
                "a dashboard that can replay and purge must not be open to anyone who can reach it"
            )
        self.writes = writes
        self.api_key = api_key
        self.authorize = authorize
        self.trusted_origins = {_origin_of(o) for o in trusted_origins}

    @property
    def needs_key_field(self) -> bool:
        """Forms ask for the key only when it is the sole way in."""
        return bool(self.api_key) and self.authorize is None

    def _check_origin(self, request: Request) -> None:
        own = f"{request.url.scheme}://{request.headers.get('host', '')}".lower()
        allowed = self.trusted_origins | {own}
        origin = request.headers.get("origin")
        if origin is not None:
            if origin == "null" or _origin_of(origin) not in allowed:
                raise WriteRefusedError(f"cross-site request refused (Origin {origin!r})")
            return
        referer = request.headers.get("referer")
        if referer and _origin_of(referer) not in allowed:
            raise WriteRefusedError("cross-site request refused (Referer from another site)")

    async def check(self, request: Request, form: dict[str, str]) -> None:
        if not self.writes:
            raise WriteRefusedError("this dashboard is read-only (start it with writes switched on to change rows)")
        self._check_origin(request)
        header_key = request.headers.get(API_KEY_HEADER)
        if self.api_key and _same(header_key, self.api_key):
            # A custom header cannot be sent cross-site without CORS, so it needs no CSRF token.
            return
        if not _same(form.get(CSRF_FIELD), csrf_token_of(request)):
            raise WriteRefusedError("the form's CSRF token is missing or stale: reload the page and try again")
        if self.api_key and _same(form.get(API_KEY_FIELD), self.api_key):
            return
        if self.authorize is not None:
            verdict = self.authorize(request)
            if inspect.isawaitable(verdict):
                verdict = await verdict
            if verdict:
                return
        raise WriteRefusedError("writing needs the dashboard's API key" if self.api_key else "not authorised to write")
