"""What each worker and ``soniq scheduler`` runs beside (or instead of) claiming jobs.

The scheduler loop (unless the `scheduler_enabled` setting is off) and the
leader lease with its maintenance. Both stop as soon as `stopping` is set,
which for a worker is its first shutdown signal: they are done before the
worker starts draining, and the lease is released on the way out.

Both need the backend role `ScheduleStore` (the schedules and the lease). A worker on a backend
without it runs neither: there is no leader, and it logs once, at INFO, which duties it skips
and why (stale recovery is every worker's own and runs as usual). ``soniq scheduler`` asks for
the scheduler explicitly, so there it is `MissingBackendRoleError` instead. Without
`RetentionStore` the leader holds the lease but prunes nothing (also logged once).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from soniq import features
from soniq.backend import RetentionStore, ScheduleStore, has_role
from soniq.scheduling.runner import ScheduleRunner
from soniq.worker.leader import RELEASE_TIMEOUT, LeaderDuties

if TYPE_CHECKING:
    from soniq.app_context import AppContext

__all__ = ["FleetDuties"]

logger = logging.getLogger("soniq.scheduler")


class FleetDuties:
    """The scheduler loop and the leader duties of one process, started together and stopped together.

    `scheduler=True` (``soniq scheduler``) on a backend without `ScheduleStore` is
    `MissingBackendRoleError`; otherwise (a worker) the duties that need a missing role are skipped
    and `skipped` says which, in the INFO line `start` logs once."""

    def __init__(self, context: AppContext, *, holder: str, scheduler: bool | None = None) -> None:
        self.context = context
        self.holder = holder
        backend = context.backend
        if scheduler:
            features.schedule_store(backend)
        leases = has_role(backend, ScheduleStore)
        settings = context.settings
        self.scheduler_on = (settings.scheduler_enabled if scheduler is None else scheduler) and leases
        self.runner = ScheduleRunner(context, scheduler_id=holder) if self.scheduler_on else None
        self.leader = LeaderDuties(backend, settings, holder=holder) if leases else None
        self.skipped = skipped_duties(backend, scheduler_enabled=settings.scheduler_enabled)
        self._task: asyncio.Task[None] | None = None

    def start(
        self,
        stopping: asyncio.Event,
        *,
        supervise: Callable[[str, Callable[[], Awaitable[None]]], Awaitable[None]] | None = None,
    ) -> asyncio.Task[None]:
        """Start the loops; a worker passes `supervise` so that a loop that raises is restarted."""
        if self.skipped:
            logger.info("%s: skipping %s", self.holder, "; ".join(self.skipped))
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
        loops: list[Awaitable[None]] = []
        if supervise is None:
            if leader is not None:
                loops.append(leader.run(stopping))
            if runner is not None:
                loops.append(runner.run(stopping))
        else:
            if leader is not None:
                loops.append(supervise("leader", lambda: leader.run(stopping)))
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
        scheduler = self.context.scheduler
        if not scheduler.declared or not has_role(self.context.backend, ScheduleStore):
            return  # a worker refuses declared schedules on such a backend before it starts
        try:
            names = await scheduler.declare_all()
        except Exception as exc:
            logger.error("%s: could not store the @app.periodic schedules: %s", self.holder, exc)
            return
        logger.info("%s: declared schedules %s", self.holder, ", ".join(names))


def skipped_duties(backend: object, *, scheduler_enabled: bool) -> list[str]:
    """What a process on `backend` does not run for want of a role, and why, one phrase each."""
    name = type(backend).__name__
    if not has_role(backend, ScheduleStore):
        skipped = [
            f"the leader lease and the leader's pruning of finished rows ({name} has no ScheduleStore role, so "
            "there is no leader; stale recovery still runs on every worker)"
        ]
        if scheduler_enabled:
            skipped.append(f"the scheduler loop ({name} has no ScheduleStore role, so it keeps no schedules)")
        return skipped
    if not has_role(backend, RetentionStore):
        return [f"pruning finished rows (the leader's duty; {name} has no RetentionStore role)"]
    return []
