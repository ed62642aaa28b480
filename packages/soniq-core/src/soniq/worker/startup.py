"""What a worker checks and says before it claims: the no-jobs refusal, the backend roles its
configuration needs, its signal handlers and the shutdown budget it logs, so the platform's stop
timeout can be set to fit."""

from __future__ import annotations

import asyncio
import functools
import logging
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING

from soniq import features
from soniq.errors import NoJobsRegisteredError
from soniq.worker.executor import CANCEL_UNWIND_SECONDS
from soniq.worker.shutdown import NACK_WRITE_SECONDS

if TYPE_CHECKING:
    from soniq.backend import QueueStore
    from soniq.params import GroupLimit
    from soniq.registry import JobRegistry
    from soniq.settings import Settings

logger = logging.getLogger("soniq.worker")


def refuse_without_jobs(registry: JobRegistry, settings: Settings) -> None:
    if not registry.names() and not settings.allow_no_jobs:
        raise NoJobsRegisteredError(
            "this worker has no job registered, so it could run nothing; import your jobs modules "
            "(--jobs-modules / SONIQ_JOBS_MODULES), or pass allow_no_jobs=True (--allow-no-jobs) "
            "to start one anyway"
        )


def refuse_missing_roles(backend: QueueStore, *, limits: tuple[GroupLimit, ...], schedules: int) -> None:
    """`MissingBackendRoleError` before the worker registers or claims, for what the app configured
    and the backend cannot honour: limits (`queue_limits`, `@app.job` limits) without `LimitStore`,
    which would otherwise run unlimited, and `schedules` `@app.periodic` schedules without
    `ScheduleStore`, which would otherwise never fire."""
    if limits:
        features.require_limits(backend)
    if schedules:
        features.schedule_store(backend)


def install_signal_handlers(stop: Callable[[str], None]) -> list[Callable[[], bool]]:
    """SIGTERM and SIGINT call `stop(signal name)`; returns the calls that remove the handlers again."""
    loop = asyncio.get_running_loop()
    removers: list[Callable[[], bool]] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop, sig.name)
        except (NotImplementedError, RuntimeError, ValueError):
            continue
        removers.append(functools.partial(loop.remove_signal_handler, sig))
    return removers


def log_budget(worker_id: str, settings: Settings, registry: JobRegistry) -> None:
    """Say at start how long a shutdown may take, and warn about jobs that have no deadline at all."""
    async_bound = (
        max(settings.shutdown_timeout, settings.prefetch_release_timeout) + CANCEL_UNWIND_SECONDS + NACK_WRITE_SECONDS
    )
    grace = settings.effective_sync_grace
    definitions = [d for d in (registry.get(n) for n in registry.names()) if d is not None]
    has_sync = any(not d.is_async for d in definitions)
    logger.info(
        "worker %s: shutdown budget %gs with async jobs (max(shutdown_timeout %gs, prefetch_release_timeout %gs) "
        "+ %gs unwind + %gs nacks); sync jobs add %gs (sync_handler_grace_seconds), then unbounded. Set the "
        "stop timeout (docker, terminationGracePeriodSeconds, TimeoutStopSec) above %gs: docs/deployment.md",
        worker_id,
        async_bound,
        settings.shutdown_timeout,
        settings.prefetch_release_timeout,
        CANCEL_UNWIND_SECONDS,
        NACK_WRITE_SECONDS,
        grace,
        async_bound + (grace if has_sync else 0.0),
    )
    if settings.job_timeout is None:
        untimed = [d.name for d in definitions if d.timeout is None]
        if untimed:
            logger.warning(
                "worker %s: job_timeout is not set, so %d job(s) (%s) have no deadline: a handler that "
                "never returns holds its slot for good and is handed back intact at every shutdown. "
                "Set job_timeout (SONIQ_JOB_TIMEOUT) or timeout= on the job",
                worker_id,
                len(untimed),
                ", ".join(untimed[:10]) + (", ..." if len(untimed) > 10 else ""),
            )
