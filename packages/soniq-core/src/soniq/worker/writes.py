"""Store writes that ride out a store outage (outcome writes, the completion batcher, handler-start marks)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from soniq.errors import BackendUnavailableError

logger = logging.getLogger("soniq.worker")

T = TypeVar("T")

WRITE_RETRY_DELAYS = (0.05, 0.2, 0.5, 1.0, 2.0, 4.0)


async def write_with_retry(what: str, operation: Callable[[], Awaitable[T]], *, give_up_at: float | None) -> T | None:
    """Run a store write, retrying while the store is unreachable.

    Returns the write's result, or None when it could not be made before
    `give_up_at` (loop time); the row then stays `processing` under this
    worker and stale recovery settles it once the worker is gone.
    """
    loop = asyncio.get_running_loop()
    for delay in (*WRITE_RETRY_DELAYS, None):
        try:
            return await operation()
        except BackendUnavailableError as exc:
            if delay is None or (give_up_at is not None and loop.time() + delay > give_up_at):
                logger.error("could not write %s: %s; stale recovery will settle the row", what, exc)
                return None
            logger.warning("store unreachable while writing %s (%s); retrying in %.2fs", what, exc, delay)
            await asyncio.sleep(delay)
    return None
