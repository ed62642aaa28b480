"""What each worker and ``soniq scheduler`` runs beside (or instead of) claiming jobs.

The scheduler loop (unless the `scheduler_enabled` setting is off) and the
leader lease with its maintenance. Both stop as soon as `stopping` is set,
which for a worker is its first shutdown signal: they are done before the
worker starts draining, and the lease is released on the way out.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from soniq.scheduling.runner import ScheduleRunner
from soniq.worker.leader import RELEASE_TIMEOUT, LeaderDuties

if TYPE_CHECKING:
    from soniq.app import Soniq

__all__ = ["FleetDuties"]

logger = logging.getLogger("soniq.scheduler")


class FleetDuties:
    """The scheduler loop and the leader duties of one process, started together and stopped together."""

    def __init__(self, app: Soniq, *, holder: str, scheduler: bool | None = None) -> None:
        self.app = app
        self.holder = holder
        self.scheduler_on = app.settings.scheduler_enabled if scheduler is None else scheduler
        self.runner = ScheduleRunner(app, scheduler_id=holder) if self.scheduler_on else None
        self.leader = LeaderDuties(app.backend, app.settings, holder=holder)
        self._task: asyncio.Task[None] | None = None

    def start(
        self,
        stopping: asyncio.Event,
        *,
        supervise: Callable[[str, Callable[[], Awaitable[None]]], Awaitable[None]] | None = None,
    ) -> asyncio.Task[None]:
        """Start the loops; a worker passes `supervise` so that a loop that raises is restarted."""
        self._task = asyncio.create_task(self.run(stopping, supervise=supervise), name="soniq-fleet-duties")
        return self._task

    async def run(
        self,
        stopping: asyncio.Event,
        *,
        supervise: Callable[[str, Callable[[], Awaitable[None]]], Awaitable[None]] | None = None,
    ) -> None:
        await self._declare()
        leader, runner = self.leader, self.runner
        loops: list[Awaitable[None]]
        if supervise is None:
            loops = [leader.run(stopping)]
            if runner is not None:
                loops.append(runner.run(stopping))
        else:
            loops = [supervise("leader", lambda: leader.run(stopping))]
            if runner is not None:
                loops.append(supervise("scheduler", lambda: runner.run(stopping)))
        results = await asyncio.gather(*loops, return_exceptions=True)
        for result in results:
            if isinstance(result, Exception):
                logger.error("%s: a scheduler or leader loop failed: %r", self.holder, result)

    async def finish(self) -> None:
        """Wait (bounded) for the loops to end once `stopping` is set; cancel them if they overrun."""
        task = self._task
        if task is None or task.done():
            return
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout=RELEASE_TIMEOUT + 1.0)
        except TimeoutError:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _declare(self) -> None:
        scheduler = self.app.scheduler
        if not scheduler.declared:
            return
        try:
            names = await scheduler.declare_all()
        except Exception as exc:
            logger.error("%s: could not store the @app.periodic schedules: %s", self.holder, exc)
            return
        logger.info("%s: declared schedules %s", self.holder, ", ".join(names))
