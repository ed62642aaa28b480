"""`Soniq(backend="memory" | "sqlite" | "postgres" | "redis")`: a backend chosen by name.

The name picks the kind of store; the URL still comes from the settings
(``database_url=`` or ``SONIQ_DATABASE_URL``). A URL given as a keyword must be of that
kind; one from the environment of another kind is ignored by the two backends that need
no server (``memory`` and ``sqlite``, which then use their defaults), so a test app
running where ``SONIQ_DATABASE_URL`` points at production never touches it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from soniq.errors import BackendNameError as BackendNameError
from soniq.settings import DEFAULT_DATABASE_URL, Settings

BACKEND_SCHEMES: dict[str, tuple[str, ...]] = {
    "memory": ("memory",),
    "sqlite": ("sqlite",),
    "postgres": ("postgresql", "postgres"),
    "redis": ("redis", "rediss"),
}
_ALIASES = {"postgresql": "postgres"}
_DEFAULT_URLS = {"memory": "memory://", "sqlite": DEFAULT_DATABASE_URL}


def backend_kind(name: str) -> str:
    kind = _ALIASES.get(name.strip().lower(), name.strip().lower())
    if kind not in BACKEND_SCHEMES:
        raise BackendNameError(
            f"backend={name!r} is not a backend name; use one of {', '.join(BACKEND_SCHEMES)}, or pass a backend object"
        )
    return kind


def _scheme(url: str) -> str:
    return url.split("://", 1)[0].split("+", 1)[0].lower() if "://" in url else ""


def url_for_backend_name(name: str, database_url: str | None, settings: Mapping[str, Any]) -> str:
    """The URL `Soniq(backend=name)` connects to, given the constructor's URL and settings keywords."""
    kind = backend_kind(name)
    explicit = database_url if database_url is not None else settings.get("database_url")
    if explicit is not None:
        text = str(explicit)
        if kind == "sqlite" and "://" not in text:
            return f"sqlite:///{text}"  # 0.1.0 took a file path here
        if _scheme(text) not in BACKEND_SCHEMES[kind]:
            raise BackendNameError(
                f"backend={name!r} but database_url is {_scheme(text) or text!r}; pass a "
                f"{BACKEND_SCHEMES[kind][0]}:// URL, or leave backend= out to go by the URL"
            )
        return text
    from_env = Settings.load({}).database_url
    if from_env is not None and _scheme(from_env) in BACKEND_SCHEMES[kind]:
        return from_env
    if kind in _DEFAULT_URLS:
        return _DEFAULT_URLS[kind]
    raise BackendNameError(
        f"backend={name!r} needs a {BACKEND_SCHEMES[kind][0]}:// URL: pass database_url= or set SONIQ_DATABASE_URL",
        suggestion=f"e.g. Soniq(backend={name!r}, database_url='{BACKEND_SCHEMES[kind][0]}://localhost/...')",
    )


def pool_options(settings: Settings, backend_options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The backend options, with `pool_min_size` / `pool_max_size` as a PostgreSQL pool's bounds."""
    options = dict(backend_options or {})
    if _scheme(settings.resolved_database_url) in BACKEND_SCHEMES["postgres"]:
        if settings.pool_min_size is not None:
            options.setdefault("min_size", settings.pool_min_size)
        if settings.pool_max_size is not None:
            options.setdefault("max_size", settings.pool_max_size)
    return options
