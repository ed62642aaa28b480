"""Soniq's embedded default backend: the queue in a SQLite file, on aiosqlite.

``Soniq()`` with no URL uses ``sqlite:///soniq.db``. See `SQLiteBackend`.
"""

from __future__ import annotations

from soniq_sqlite.backend import SQLiteBackend

__version__ = "0.2.0"

__all__ = ["SQLiteBackend", "__version__"]
