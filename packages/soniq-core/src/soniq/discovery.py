"""Backends and observers found through entry points, loaded lazily.

Nothing is imported at ``import soniq``; a scheme is resolved the first time an
app needs it. `register_backend` adds a class in-process (tests, embedding)
without packaging an entry point.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from soniq.errors import BackendLoadError, BackendNotFoundError, InvalidURLError
from soniq.redaction import redact_text, redact_url

BACKENDS_GROUP = "soniq.backends"
OBSERVERS_GROUP = "soniq.observers"

# Where our own schemes live, for the "install X" hint.
KNOWN_DISTRIBUTIONS: dict[str, str] = {
    "postgresql": "soniq-postgres",
    "postgres": "soniq-postgres",
    "sqlite": "soniq-sqlite",
    "memory": "soniq-memory",
    "redis": "soniq-redis",
    "rediss": "soniq-redis",
}

_registered_backends: dict[str, Any] = {}


@dataclass(frozen=True, slots=True)
class Plugin:
    """One discovered entry point."""

    group: str
    name: str
    value: str
    distribution: str | None
    version: str | None


def url_scheme(url: str) -> str:
    """The backend scheme of a URL: ``postgresql+asyncpg://`` gives ``postgresql``."""
    if not isinstance(url, str) or not url.strip():
        raise InvalidURLError(f"invalid database URL {url!r}: expected e.g. sqlite:///soniq.db")
    shown = redact_url(url)
    try:
        scheme = urlsplit(url).scheme
    except ValueError as exc:
        raise InvalidURLError(f"invalid database URL {shown!r}: {redact_text(str(exc))}") from None
    if not scheme:
        raise InvalidURLError(f"invalid database URL {shown!r}: it has no scheme (expected e.g. sqlite:///soniq.db)")
    return scheme.split("+", 1)[0].lower()


def _entry_points(group: str) -> list[importlib.metadata.EntryPoint]:
    return list(importlib.metadata.entry_points(group=group))


def plugins(group: str) -> list[Plugin]:
    found = []
    for ep in _entry_points(group):
        dist = getattr(ep, "dist", None)
        found.append(
            Plugin(
                group=group,
                name=ep.name,
                value=ep.value,
                distribution=dist.metadata["Name"] if dist is not None else None,
                version=dist.version if dist is not None else None,
            )
        )
    return sorted(found, key=lambda p: p.name)


def installed_schemes() -> list[str]:
    return sorted({ep.name for ep in _entry_points(BACKENDS_GROUP)} | set(_registered_backends))


def register_backend(scheme: str, backend_class: Any) -> None:
    """Serve `scheme` with `backend_class` in this process, ahead of entry points."""
    _registered_backends[scheme.lower()] = backend_class


def unregister_backend(scheme: str) -> None:
    _registered_backends.pop(scheme.lower(), None)


def backend_class_for(url: str) -> Any:
    scheme = url_scheme(url)
    if scheme in _registered_backends:
        return _registered_backends[scheme]
    for ep in _entry_points(BACKENDS_GROUP):
        if ep.name == scheme:
            try:
                return ep.load()
            except (ImportError, AttributeError) as exc:
                raise BackendLoadError(
                    f"the backend for scheme '{scheme}' ({ep.value}) failed to import: {exc}"
                ) from exc
    installed = installed_schemes()
    hint = KNOWN_DISTRIBUTIONS.get(scheme)
    install = f"install {hint} (pip install {hint})" if hint else "install a distribution that registers it"
    raise BackendNotFoundError(
        f"no Soniq backend is installed for the URL scheme '{scheme}' "
        f"(entry-point group {BACKENDS_GROUP}); installed schemes: "
        f"{', '.join(installed) if installed else 'none'}; to use '{scheme}', {install}"
    )


def create_backend(url: str, **options: Any) -> Any:
    """Build the backend that serves `url`'s scheme via its ``from_url``."""
    return backend_class_for(url).from_url(url, **options)


def load_observer_factories(selected: tuple[str, ...] | None) -> list[tuple[str, Callable[..., Any]]]:
    """Observer factories: all installed when `selected` is None, else exactly those named.

    A named observer that is not installed, or fails to import, fails loudly.
    """
    eps = {ep.name: ep for ep in _entry_points(OBSERVERS_GROUP)}
    names = sorted(eps) if selected is None else list(selected)
    loaded = []
    for name in names:
        ep = eps.get(name)
        if ep is None:
            raise BackendNotFoundError(
                f"observer '{name}' named in SONIQ_OBSERVERS is not installed "
                f"(entry-point group {OBSERVERS_GROUP}); installed: {', '.join(sorted(eps)) or 'none'}"
            )
        try:
            loaded.append((name, ep.load()))
        except (ImportError, AttributeError) as exc:
            raise BackendLoadError(f"observer '{name}' ({ep.value}) failed to import: {exc}") from exc
    return loaded
