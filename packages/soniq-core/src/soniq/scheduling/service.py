"""``app.scheduler``: schedules kept in the store, changed from any process at run time.

Every method reads or writes the store directly, so a schedule added, paused
or removed by one process is what every other worker and ``soniq scheduler``
sees on its next poll; nothing is cached here.

Schedules are the backend role `ScheduleStore`. On a backend without it every method that reads
or writes them, and `start`, raises `MissingBackendRoleError` ("schedules") before anything else;
`declare` (what `@app.periodic` does at import) reads nothing, and a worker refuses declared
schedules as it starts.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import socket
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from soniq import features
from soniq.errors import UnknownJobError
from soniq.params import (
    GetScheduleParams,
    ListSchedulesParams,
    RemoveScheduleParams,
    SetSchedulePausedParams,
    UpsertScheduleParams,
)
from soniq.records import ScheduleRecord, WorkerStatus
from soniq.registry import default_job_name
from soniq.scheduling.catchup import CatchUp, check_catch_up
from soniq.scheduling.clock import Clock, SystemClock
from soniq.scheduling.runner import ScheduleRunner
from soniq.scheduling.timing import ScheduleError, Timing
from soniq.settings import HOUR, MIN_POLL_INTERVAL
from soniq.validation import check_priority, check_queue_name, encode_args, lookup_name, storable_text

if TYPE_CHECKING:
    from soniq.app_context import AppContext
    from soniq.backend import ScheduleStore

__all__ = ["PeriodicSpec", "Scheduler", "schedule_dict"]

logger = logging.getLogger("soniq.scheduler")

DEFAULT_MAX_ATTEMPTS = 3
STOP_TIMEOUT = 10.0
"""How long `Scheduler.stop()` waits for the tick under way before it cancels the loop."""


@dataclass(frozen=True, slots=True)
class PeriodicSpec:
    """A schedule as `@app.periodic` declared it, written to the store when a worker or scheduler starts."""

    name: str
    job_name: str
    timing: Timing
    args: Mapping[str, Any] = field(default_factory=dict)
    queue: str | None = None
    priority: int | None = None
    max_attempts: int | None = None
    catch_up: CatchUp = CatchUp.SKIP
    catch_up_limit: int = 1


def schedule_dict(record: ScheduleRecord, *, orphaned: bool = False, registered_here: bool = True) -> dict[str, Any]:
    """A stored schedule as `list()` and `get()` return it.

    ``schedule_type``/``schedule_value`` and ``status`` are 0.1.0's keys;
    `orphaned` is True when neither this process nor any live worker has the job.
    """
    data = record.to_dict()
    data["schedule_type"] = "cron" if record.cron is not None else "interval"
    data["schedule_value"] = record.cron if record.cron is not None else f"{record.every_seconds:g}"
    data["status"] = "paused" if record.paused else "active"
    data["orphaned"] = orphaned
    data["registered_here"] = registered_here
    return data


class Scheduler:
    """The schedules of one app. `clock` is what "now" means to `add()`, `resume()` and the loop."""

    def __init__(self, context: AppContext, *, clock: Clock | None = None) -> None:
        self._context = context
        self.clock: Clock = clock or SystemClock()
        self.declared: dict[str, PeriodicSpec] = {}
        # 0.1.0's in-process loop (`start` / `stop`).
        self._loop_task: asyncio.Task[None] | None = None
        self._stopping: asyncio.Event | None = None
        self._check_interval: float | None = None

    def _require(self) -> None:
        """`MissingBackendRoleError` unless the app's backend fills `ScheduleStore`."""
        features.schedule_store(self._context.backend)

    async def _store(self) -> ScheduleStore:
        """The connected backend (the sync bridge's on its thread) as a `ScheduleStore`."""
        return features.schedule_store(await self._context.connected_backend())

    # -- declaring -------------------------------------------------------------

    def declare(self, spec: PeriodicSpec) -> None:
        """Remember an `@app.periodic` schedule; `declare_all` writes it."""
        self.declared[spec.name] = spec

    async def declare_all(self) -> list[str]:
        """Upsert every declared schedule. An unchanged rhythm keeps its stored `next_run`."""
        self._require()
        names = []
        for spec in self.declared.values():
            names.append(
                await self._upsert(
                    name=spec.name,
                    job_name=spec.job_name,
                    timing=spec.timing,
                    args=spec.args,
                    queue=spec.queue,
                    priority=spec.priority,
                    max_attempts=spec.max_attempts,
                    catch_up=spec.catch_up,
                    catch_up_limit=spec.catch_up_limit,
                )
            )
        return names

    # -- the public surface (0.1.0's names) --------------------------------------

    async def add(
        self,
        target: Callable[..., Any] | str,
        *,
        cron: Any = None,
        every: Any = None,
        args: Mapping[str, Any] | None = None,
        queue: str | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        name: str | None = None,
        timezone: str = "UTC",
        catch_up: str | CatchUp = CatchUp.SKIP,
        catch_up_limit: int = 1,
    ) -> str:
        """Create the schedule, or replace the one of that `name` (default: the job's name); returns the name.

        `target` is a function registered with ``@app.job`` or a job name (which
        may be registered only on other workers). Bad input raises
        `ScheduleError` naming the option, and nothing is stored.
        """
        self._require()
        timing = Timing.parse(cron=cron, every=every, timezone=timezone)
        policy, limit = check_catch_up(catch_up, catch_up_limit)
        job_name = self._job_name(target)
        schedule_name = job_name if name is None else name
        if not isinstance(schedule_name, str) or not schedule_name.strip():
            raise ScheduleError("name", f"expected a non-empty string, got {name!r}")
        if not storable_text(schedule_name):
            raise ScheduleError("name", "contains a NUL character or a lone surrogate, which no store holds")
        return await self._upsert(
            name=schedule_name,
            job_name=job_name,
            timing=timing,
            args=args or {},
            queue=queue,
            priority=priority,
            max_attempts=max_attempts,
            catch_up=policy,
            catch_up_limit=limit,
        )

    async def pause(self, name: str) -> bool:
        """Stop firing; due times while paused never run. False when there is no such schedule
        (also for a name no store can hold: NUL, a lone surrogate)."""
        self._require()
        key = lookup_name(name)
        if key is None:
            return False
        backend = await self._store()
        return await backend.set_schedule_paused(SetSchedulePausedParams(name=key, paused=True))

    async def resume(self, name: str) -> bool:
        """Fire again from the next due time after now. False when there is no such schedule."""
        self._require()
        key = lookup_name(name)
        if key is None:
            return False
        backend = await self._store()
        record = await backend.get_schedule(GetScheduleParams(name=key))
        if record is None:
            return False
        next_run = _timing_of(record).next_after(self.clock.now())
        return await backend.set_schedule_paused(SetSchedulePausedParams(name=key, paused=False, next_run=next_run))

    async def remove(self, name: str) -> bool:
        """Delete the schedule (the jobs it enqueued stay). False when there was none."""
        self._require()
        self.declared.pop(name, None)
        key = lookup_name(name)
        if key is None:
            return False
        backend = await self._store()
        return await backend.remove_schedule(RemoveScheduleParams(name=key))

    async def list(self, status: str | None = None) -> list[dict[str, Any]]:
        """Every schedule in name order; `status` ``active`` or ``paused`` filters."""
        self._require()
        if status not in (None, "active", "paused"):
            raise ScheduleError("status", f"expected 'active', 'paused' or None, got {status!r}")
        backend = await self._store()
        records = await backend.list_schedules(ListSchedulesParams())
        known = await self._fleet_job_names()
        views = [self._view(r, known) for r in records]
        return [v for v in views if status is None or v["status"] == status]

    async def get(self, name: str) -> dict[str, Any] | None:
        """The schedule, or None (also for a name no store can hold: NUL, a lone surrogate)."""
        self._require()
        key = lookup_name(name)
        if key is None:
            return None
        backend = await self._store()
        record = await backend.get_schedule(GetScheduleParams(name=key))
        if record is None:
            return None
        return self._view(record, await self._fleet_job_names())

    # -- 0.1.0's in-process loop: start() / stop() -----------------------------------

    async def start(self, check_interval: float | None = None) -> None:
        """Run the scheduler loop in this process, in the background of the running event loop,
        until `stop()` or ``app.close()``; soniq 0.1.0's ``scheduler.start()``.

        It first stores the ``@app.periodic`` schedules, then fires every due schedule on time,
        as a worker's loop and ``soniq scheduler`` do (each due time is enqueued once however many
        loops run). `check_interval` is the most seconds between looks at the store (default: the
        `scheduler_poll_interval` setting); the loop also wakes at the next due time it knows.
        Calling it while the loop runs changes nothing.
        """
        if self.running:
            return
        self._require()
        interval = self._context.settings.scheduler_poll_interval if check_interval is None else check_interval
        if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not math.isfinite(interval):
            raise ScheduleError("check_interval", f"expected a number of seconds > 0, got {check_interval!r}")
        if not MIN_POLL_INTERVAL <= interval <= HOUR:
            # The bounds of the scheduler_poll_interval setting: 1e-6 would spin a core.
            raise ScheduleError(
                "check_interval",
                f"expected a number of seconds from {MIN_POLL_INTERVAL:g} to {HOUR:g}, got {check_interval!r}",
            )
        await self.declare_all()
        runner = ScheduleRunner(
            self._context,
            scheduler_id=f"scheduler-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}",
            clock=self.clock,
        )
        runner.poll_interval = float(interval)
        self._check_interval = float(interval)
        self._stopping = asyncio.Event()
        self._loop_task = asyncio.create_task(runner.run(self._stopping), name="soniq-scheduler")
        logger.info("%s started: polling every %gs", runner.scheduler_id, interval)

    async def stop(self) -> None:
        """End the loop `start()` began, after the tick under way (waited for at most `STOP_TIMEOUT`
        seconds, then cancelled); nothing happens when no loop runs."""
        task, stopping = self._loop_task, self._stopping
        self._loop_task = self._stopping = None
        if task is None or stopping is None:
            return
        stopping.set()
        if task.done():
            return
        if task.get_loop() is not asyncio.get_running_loop():
            # Started on another event loop: ask that loop to cancel it (a closed loop runs nothing anymore).
            if not task.get_loop().is_closed():
                task.get_loop().call_soon_threadsafe(task.cancel)
            return
        _, pending = await asyncio.wait({task}, timeout=STOP_TIMEOUT)
        if pending:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    @property
    def running(self) -> bool:
        """True while the loop `start()` began runs (0.1.0's name)."""
        return self._loop_task is not None and not self._loop_task.done()

    @property
    def check_interval(self) -> float:
        """The most seconds between the loop's looks at the store: `start()`'s `check_interval`, else the
        `scheduler_poll_interval` setting (0.1.0's name)."""
        if self._check_interval is not None:
            return self._check_interval
        return self._context.settings.scheduler_poll_interval

    # -- helpers --------------------------------------------------------------------

    def _job_name(self, target: Callable[..., Any] | str) -> str:
        if isinstance(target, str):
            if not target.strip():
                raise ScheduleError("target", "expected a job name or a function registered with @app.job, got ''")
            return target
        if not callable(target):
            raise ScheduleError("target", f"expected a job name or a function registered with @app.job, got {target!r}")
        definition = self._context.registry.find_by_function(target)
        if definition is None:
            raise UnknownJobError(
                f"target: {default_job_name(target)} is not registered on this app; decorate it with @app.job "
                "or pass the job's name as a string"
            )
        return definition.name

    async def _upsert(
        self,
        *,
        name: str,
        job_name: str,
        timing: Timing,
        args: Mapping[str, Any],
        queue: str | None,
        priority: int | None,
        max_attempts: int | None,
        catch_up: CatchUp,
        catch_up_limit: int,
    ) -> str:
        definition = self._context.registry.get(job_name)
        if queue is not None:
            check_queue_name(queue)
        if priority is not None:
            check_priority(priority)
        if max_attempts is not None and (
            isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1
        ):
            raise ScheduleError("max_attempts", f"expected a whole number >= 1, got {max_attempts!r}")
        if not isinstance(args, Mapping):
            raise ScheduleError("args", f"expected a dict of keyword arguments, got {args!r}")
        checked, _ = encode_args(job_name, args, max_bytes=self._context.settings.max_args_bytes)
        if definition is None:
            logger.warning(
                "schedule %r: job %r is not registered on this process; it fires for the workers that have it",
                name,
                job_name,
            )
        params = UpsertScheduleParams(
            name=name,
            job_name=job_name,
            next_run=timing.next_after(self.clock.now()),
            cron=timing.cron,
            every_seconds=timing.every_seconds,
            timezone=timing.timezone,
            queue=queue or (definition.queue if definition else "default"),
            priority=priority if priority is not None else (definition.priority if definition else 100),
            max_attempts=max_attempts or (definition.max_attempts if definition else DEFAULT_MAX_ATTEMPTS),
            args=dict(checked),
            catch_up=catch_up.value,
            catch_up_limit=catch_up_limit,
        )
        backend = await self._store()
        await backend.upsert_schedule(params)
        return name

    async def _fleet_job_names(self) -> set[str]:
        """Job names of this process and of every live worker."""
        backend = await self._context.connected_backend()
        names = set(self._context.registry.names())
        now = datetime.now(UTC)
        timeout = self._context.settings.heartbeat_timeout
        for worker in await backend.list_workers():
            fresh = (now - worker.last_heartbeat).total_seconds() < timeout
            if worker.status is not WorkerStatus.STOPPED and fresh:
                names.update(worker.job_names or ())
        return names

    def _view(self, record: ScheduleRecord, known: set[str]) -> dict[str, Any]:
        return schedule_dict(
            record,
            orphaned=record.job_name not in known,
            registered_here=self._context.registry.get(record.job_name) is not None,
        )


def _timing_of(record: ScheduleRecord) -> Timing:
    return Timing(cron=record.cron, every_seconds=record.every_seconds, timezone=record.timezone)
