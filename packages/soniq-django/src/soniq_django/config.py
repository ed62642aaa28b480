"""Where a Soniq backend's settings come from: ``TASKS[alias]`` and ``DATABASES``.

The Soniq URL is always built from the Django database the backend writes to
(``OPTIONS["DATABASE"]``, default ``"default"``), so a task enqueued inside
``transaction.atomic()`` and the worker that runs it use the same tables.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connections

BACKEND_PATH = "soniq_django.SoniqBackend"
_OPTIONS = ("DATABASE", "MAX_RETRIES", "TASK_MODULES", "SETTINGS")


@dataclass(frozen=True, slots=True)
class BackendConfig:
    """The parsed ``OPTIONS`` of one ``TASKS`` entry whose BACKEND is Soniq's."""

    alias: str
    database: str = "default"
    max_retries: int = 0
    """Django's tasks framework has no retries of its own, so a failing task fails at once unless this is raised."""
    task_modules: tuple[str, ...] = ()
    soniq_settings: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_options(cls, alias: str, options: Mapping[str, Any]) -> BackendConfig:
        unknown = sorted(set(options) - set(_OPTIONS))
        if unknown:
            raise ImproperlyConfigured(
                f"TASKS[{alias!r}]['OPTIONS'] has unknown key(s) {', '.join(unknown)}; known: {', '.join(_OPTIONS)}"
            )
        database = options.get("DATABASE", "default")
        if database not in settings.DATABASES:
            raise ImproperlyConfigured(f"TASKS[{alias!r}]['OPTIONS']['DATABASE'] = {database!r} is not in DATABASES")
        retries = options.get("MAX_RETRIES", 0)
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ImproperlyConfigured(f"TASKS[{alias!r}]['OPTIONS']['MAX_RETRIES'] must be a whole number >= 0")
        modules = options.get("TASK_MODULES", ())
        if isinstance(modules, str) or not all(isinstance(m, str) for m in modules):
            raise ImproperlyConfigured(f"TASKS[{alias!r}]['OPTIONS']['TASK_MODULES'] must be a list of module names")
        soniq_settings = options.get("SETTINGS", {})
        if not isinstance(soniq_settings, Mapping):
            raise ImproperlyConfigured(f"TASKS[{alias!r}]['OPTIONS']['SETTINGS'] must be a dict of Soniq settings")
        if "database_url" in soniq_settings:
            raise ImproperlyConfigured(
                f"TASKS[{alias!r}]['OPTIONS']['SETTINGS'] must not set database_url: Soniq uses DATABASES[{database!r}]"
            )
        return cls(alias, database, retries, tuple(modules), dict(soniq_settings))

    @property
    def max_attempts(self) -> int:
        return self.max_retries + 1


def backend_config(alias: str) -> BackendConfig:
    tasks = getattr(settings, "TASKS", {})
    if alias not in tasks:
        raise ImproperlyConfigured(f"TASKS has no backend {alias!r}")
    params = tasks[alias]
    if params.get("BACKEND") != BACKEND_PATH:
        raise ImproperlyConfigured(f"TASKS[{alias!r}] does not use {BACKEND_PATH}")
    return BackendConfig.from_options(alias, params.get("OPTIONS", {}))


def soniq_aliases() -> list[str]:
    """Every ``TASKS`` alias served by Soniq, in settings order."""
    return [alias for alias, params in getattr(settings, "TASKS", {}).items() if params.get("BACKEND") == BACKEND_PATH]


def default_alias() -> str:
    aliases = soniq_aliases()
    if not aliases:
        raise ImproperlyConfigured(f'no TASKS entry uses "BACKEND": "{BACKEND_PATH}"')
    return "default" if "default" in aliases else aliases[0]


def database_url(database: str = "default") -> str:
    """The Soniq URL of a Django database (its live settings, so a test database is honoured)."""
    return url_for_settings(connections[database].settings_dict, vendor=connections[database].vendor)


def url_for_settings(settings_dict: Mapping[str, Any], *, vendor: str) -> str:
    if vendor == "postgresql":
        user = quote(str(settings_dict.get("USER") or ""), safe="")
        password = quote(str(settings_dict.get("PASSWORD") or ""), safe="")
        host = str(settings_dict.get("HOST") or "")
        port = str(settings_dict.get("PORT") or "")
        name = quote(str(settings_dict.get("NAME") or ""), safe="")
        credentials = f"{user}:{password}@" if password else (f"{user}@" if user else "")
        query: dict[str, str] = {}
        if host.startswith("/"):  # a Unix socket directory travels as a parameter
            query["host"] = host
            host = ""
        netloc = f"{credentials}{host or ('' if query else 'localhost')}{':' + port if port else ''}"
        sslmode = (settings_dict.get("OPTIONS") or {}).get("sslmode")
        if sslmode:
            query["sslmode"] = str(sslmode)
        suffix = f"?{urlencode(query)}" if query else ""
        return f"postgresql://{netloc}/{name}{suffix}"
    if vendor == "sqlite":
        name = str(settings_dict.get("NAME") or "")
        if not name or name == ":memory:" or name.startswith("file:"):
            raise ImproperlyConfigured(
                f"soniq-django needs a SQLite database file the worker process can open, not {name!r}"
            )
        return f"sqlite:///{os.path.abspath(name)}"
    raise ImproperlyConfigured(
        f"soniq-django supports PostgreSQL and SQLite databases; {settings_dict.get('ENGINE')!r} ({vendor}) is neither"
    )
