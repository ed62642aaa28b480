"""Soniq's embedded default backend: the queue in a SQLite file, on aiosqlite.

``Soniq()`` with no URL uses ``sqlite:///soniq.db``. See `SQLiteBackend`.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from soniq_sqlite.backend import SQLiteBackend

try:
    __version__ = version("soniq-sqlite")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

__all__ = ["SQLiteBackend", "__version__"]
