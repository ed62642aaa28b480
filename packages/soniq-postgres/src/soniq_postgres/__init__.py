"""PostgreSQL backend for Soniq on asyncpg.

Registered for the URL schemes ``postgresql`` and ``postgres`` in the
``soniq.backends`` entry-point group::

    Soniq(database_url="postgresql://app@db.internal:5432/app?pool_max_size=20")
"""

from __future__ import annotations

from soniq_postgres.backend import PostgresBackend, required_pool_size
from soniq_postgres.migrations import LATEST_VERSION, MIGRATIONS

__version__ = "0.2.0"

__all__ = ["LATEST_VERSION", "MIGRATIONS", "PostgresBackend", "__version__", "required_pool_size"]
