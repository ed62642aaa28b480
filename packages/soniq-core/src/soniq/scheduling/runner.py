"""The scheduler loop every worker (and ``soniq scheduler``) runs: poll due schedules, fire them.

Exactly-once is the store's: each firing is one `fire_schedule` fenced on the
`next_run` this loop read, so when several loops see the same due time one
of them enqueues it and the others' writes do nothing. The loop only decides
what to enqueue (`plan_firing`) and says what it did (a log line and
``app.bus.schedule_fired``).

Schedules are the backend role `ScheduleStore`: building a runner for a backend without it is
`MissingBackendRoleError` ("schedules").
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime
from typing import TYPE_CHECKING

from soniq import features
from soniq.observers import ScheduleFiredEvent
from soniq.params import DueSchedulesParams, FireScheduleParams
from soniq.records import NewJob, ScheduleRecord
from soniq.scheduling.catchup import CatchUp, grace_for, plan_firing
from soniq.scheduling.clock import Clock
from soniq.scheduling.timing import ScheduleError, Timing
from soniq.serialization import new_job_ids
from soniq.validation import encode_args

if TYPE_CHECKING:
    from soniq.app_context import AppContext

__all__ = ["ScheduleRunner"]

logger = logging.getLogger("soniq.scheduler")

DUE_BATCH = 100
MIN_SLEEP = 0.01


class ScheduleRunner:
    """One process's scheduler loop; `scheduler_id` names it in logs and events."""

    def __init__(self, context: AppContext, *, scheduler_id: str, clock: Clock | None = None) -> None:
        features.schedule_store(context.backend)
        self.context = context
        self.scheduler_id = scheduler_id
        self.clock = clock or context.scheduler.clock
        self.poll_interval = context.settings.scheduler_poll_interval
        self._warned: set[str] = set()
        self.fired = 0

    async def run(self, stopping: asyncio.Event) -> None:
        """Tick until `stopping` is set; a failing tick is logged and retried on the next poll."""
        failures = 0
        while not stopping.is_set():
            wait = self.poll_interval
            try:
                soonest = await self.tick()
                failures = 0
                if soonest is not None:
                    wait = min(wait, max(MIN_SLEEP, (soonest - self.clock.now()).total_seconds()))
            except Exception as exc:
                failures += 1
                if failures == 1 or failures % 10 == 0:
                    logger.warning("scheduler %s: tick failed (%d in a row): %s", self.scheduler_id, failures, exc)
            try:
                await asyncio.wait_for(stopping.wait(), timeout=wait)
            except TimeoutError:
                pass
        logger.info("scheduler %s stopped after firing %d due times", self.scheduler_id, self.fired)

    async def tick(self) -> datetime | None:
        """Fire every schedule due now; returns the soonest `next_run` written, if any."""
        backend = features.schedule_store(await self.context.connected_backend())
        now = self.clock.now()
        soonest: datetime | None = None
        for record in await backend.due_schedules(DueSchedulesParams(now=now, limit=DUE_BATCH)):
            try:
                next_run = await self._fire(record, now)
            except ScheduleError as exc:
                self._warn_once(record.name, f"schedule {record.name!r} cannot be fired: {exc}")
                continue
            if next_run is not None and (soonest is None or next_run < soonest):
                soonest = next_run
        return soonest

    async def _fire(self, record: ScheduleRecord, now: datetime) -> datetime | None:
        timing = Timing.parse(
            cron=record.cron,
            every=record.every_seconds if record.cron is None else None,
            timezone=record.timezone,
        )
        try:
            policy = CatchUp(record.catch_up)
        except ValueError:
            raise ScheduleError("catch_up", f"unknown policy {record.catch_up!r}") from None
        plan = plan_firing(
            timing,
            next_run=record.next_run,
            now=now,
            policy=policy,
            limit=record.catch_up_limit,
            poll_interval=self.poll_interval,
        )
        if plan is None:
            return None
        if plan.run and self.context.registry.get(record.job_name) is None:
            self._warn_once(
                record.name,
                f"schedule {record.name!r}: job {record.job_name!r} is not registered on this process; "
                "enqueueing it for the workers that have it (soniq inspect lists it as orphaned if none has)",
            )
        jobs = self._jobs(record, plan.run)
        ids = await features.schedule_store(await self.context.connected_backend()).fire_schedule(
            FireScheduleParams(
                name=record.name,
                expected_next_run=record.next_run,
                new_next_run=plan.next_run,
                jobs=jobs,
                fired_at=now,
            )
        )
        if ids is None:
            return None  # another scheduler fired this due time first
        if plan.skipped:
            logger.info(
                "schedule %r: %d missed due time(s) not run (catch_up=%s)", record.name, plan.skipped, policy.value
            )
        grace = grace_for(timing, record.next_run, self.poll_interval)
        for job, due in zip(jobs, plan.run, strict=True):
            self.fired += 1
            late = (now - due).total_seconds()
            logger.info(
                "schedule %r fired: job %s (%s) for %s, %.3fs late",
                record.name,
                job.id,
                record.job_name,
                due.isoformat(),
                late,
            )
            self.context.bus.schedule_fired(
                ScheduleFiredEvent(
                    schedule_name=record.name,
                    job_name=record.job_name,
                    queue=record.queue,
                    due_at=due,
                    job_id=job.id,
                    at=time.time(),
                    late_seconds=late,
                    catch_up=(now - due) > grace,
                    scheduler_id=self.scheduler_id,
                )
            )
        return plan.next_run

    def _jobs(self, record: ScheduleRecord, due_times: list[datetime]) -> list[NewJob]:
        if not due_times:
            return []
        checked, encoded = encode_args(record.job_name, record.args, max_bytes=self.context.settings.max_args_bytes)
        return [
            NewJob(
                id=job_id,
                job_name=record.job_name,
                args=checked,
                args_json=encoded,
                queue=record.queue,
                priority=record.priority,
                scheduled_at=due,
                max_attempts=record.max_attempts,
            )
            for job_id, due in zip(new_job_ids(len(due_times)), due_times, strict=True)
        ]

    def _warn_once(self, name: str, text: str) -> None:
        if name not in self._warned:
            self._warned.add(name)
            logger.warning("%s", text)
