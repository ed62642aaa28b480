"""One rule for every long-lived task a worker starts: no loop dies silently.

A loop that raises is logged with its traceback and started again after a pause that
grows from `FIRST_PAUSE_SECONDS` to `MAX_PAUSE_SECONDS`. A loop that keeps failing
(no run of `HEALTHY_AFTER_SECONDS` between failures) for longer than the
`loop_failure_limit` setting makes the worker stop: one ERROR line names the loop, the
worker drains as on a signal, and ``soniq worker`` exits with status 1. A loop that
returns is done; cancelling the task cancels the loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

__all__ = ["FIRST_PAUSE_SECONDS", "HEALTHY_AFTER_SECONDS", "MAX_PAUSE_SECONDS", "LoopSupervisor"]

logger = logging.getLogger("soniq.worker")

FIRST_PAUSE_SECONDS = 0.1
"""The pause before a failed loop's first restart; it doubles with each failure in a row."""
MAX_PAUSE_SECONDS = 5.0
"""The longest pause between restarts."""
HEALTHY_AFTER_SECONDS = 10.0
"""A restarted loop that runs this long without failing ends the failure streak."""


class LoopSupervisor:
    """Runs a worker's loops under the restart rule; `failed_loop` names the loop that gave up, if any."""

    def __init__(self, worker_id: str, *, failure_limit: float, on_give_up: Callable[[str], None]) -> None:
        self.worker_id = worker_id
        self.failure_limit = failure_limit
        self._on_give_up = on_give_up
        self.failed_loop: str | None = None
        self.restarts = 0

    async def run(self, name: str, loop: Callable[[], Awaitable[None]], *, wake: asyncio.Event | None = None) -> None:
        """Run `loop()` until it returns; restart it when it raises, or give up after the limit.

        `wake` set cuts a pause short (the claim loop's stop signal: it then returns at once, so the
        drain never waits out a pause)."""
        clock = asyncio.get_running_loop().time
        failing_since: float | None = None
        pause = FIRST_PAUSE_SECONDS
        while True:
            began = clock()
            try:
                await loop()
                return
            except asyncio.CancelledError:
                raise
            except Exception:
                now = clock()
                if failing_since is None or now - began >= HEALTHY_AFTER_SECONDS:
                    failing_since, pause = now, FIRST_PAUSE_SECONDS
                failing_for = now - failing_since
                if failing_for >= self.failure_limit:
                    logger.exception(
                        "worker %s: internal loop %s kept failing for %.1fs (loop_failure_limit=%gs); "
                        "stopping the worker",
                        self.worker_id,
                        name,
                        failing_for,
                        self.failure_limit,
                    )
                    if self.failed_loop is None:
                        self.failed_loop = name
                    self._on_give_up(name)
                    return
                logger.exception(
                    "worker %s: internal loop %s failed; restarting it in %.1fs", self.worker_id, name, pause
                )
                self.restarts += 1
            if wake is None:
                await asyncio.sleep(pause)
            else:
                try:
                    await asyncio.wait_for(wake.wait(), pause)
                except TimeoutError:
                    pass
            pause = min(pause * 2, MAX_PAUSE_SECONDS)
