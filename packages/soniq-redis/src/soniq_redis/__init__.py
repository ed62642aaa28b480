"""Soniq's Redis backend (``redis://`` and ``rediss://`` URLs), on redis-py's asyncio client.

Written against soniq-core's public API only, the way any third-party backend
would be; ``tests/test_public_api_only.py`` keeps it that way.
"""

from __future__ import annotations

from soniq_redis.backend import RedisBackend
from soniq_redis.connection import DuplicateJobError, StatusRejectedError
from soniq_redis.keys import KeySpace

__version__ = "0.2.0"

__all__ = ["DuplicateJobError", "KeySpace", "RedisBackend", "StatusRejectedError", "__version__"]
