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

Deadline = float | None | Callable[[], float | None]
"""When a write gives up (loop time). A float: then. None: after the retry delays run out. A callable
(the worker's): asked before each retry, never giving up while it answers None (the worker runs),
and its first time then holds (the budget of a worker that is stopping)."""


async def write_with_retry(
    what: str,
    operation: Callable[[], Awaitable[T]],
    *,
    give_up_at: Deadline,
    landed: Callable[[], Awaitable[T | None]] | None = None,
) -> T | None:
    """Run a store write, retrying while the store is unreachable.

    A running worker (a callable deadline answering None) never gives up: a row whose outcome it
    could not write would otherwise stay `processing` under a live owner, which stale recovery
    rightly never touches (a Redis Cluster failover on a loaded machine outlasts any fixed number
    of retries). Returns None only when the
    write could not be made before the deadline; the row then stays `processing` under this worker
    and stale recovery settles it once the worker is gone.

    A try whose connection was lost may still have been applied. For a write that would apply twice
    (a retry counts an attempt, and the same worker may claim the requeued row again before the
    next try), `landed` is asked before each later try: None means the row is as this run left it,
    so the write goes again; anything else is the write's answer (True: the lost try landed;
    False: the row moved on without it).
    """
    loop = asyncio.get_running_loop()
    deadline = give_up_at() if callable(give_up_at) else give_up_at
    attempt = 0
    while True:
        try:
            if attempt and landed is not None:
                answer = await landed()
                if answer is not None:
                    logger.warning("%s: a try lost with the connection was settled already (%s)", what, answer)
                    return answer
            return await operation()
        except BackendUnavailableError as exc:
            if deadline is None and callable(give_up_at):
                deadline = give_up_at()
            out_of_delays = attempt >= len(WRITE_RETRY_DELAYS) and not callable(give_up_at)
            delay = WRITE_RETRY_DELAYS[min(attempt, len(WRITE_RETRY_DELAYS) - 1)]
            attempt += 1
            if out_of_delays or (deadline is not None and loop.time() + delay > deadline):
                logger.error("could not write %s: %s; stale recovery will settle the row", what, exc)
                return None
            logger.warning("store unreachable while writing %s (%s); retrying in %.2fs", what, exc, delay)
            await asyncio.sleep(delay)
