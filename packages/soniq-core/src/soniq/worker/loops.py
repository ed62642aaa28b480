"""The worker's background duties: its heartbeat and its share of stale-worker sweeps."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime

from soniq.backend import QueueStore
from soniq.batches import BATCH_JOB
from soniq.bus import ObservationBus
from soniq.observers import RecoveryEvent
from soniq.params import ExpireUnknownJobsParams, HeartbeatParams, RegisterWorkerParams
from soniq.records import DeadLetterReason, RecoveryResult, StaleJobPolicy, WorkerInfo, WorkerStatus
from soniq.rescue import sweep_stale_workers

logger = logging.getLogger("soniq.worker")


async def heartbeat_loop(backend: QueueStore, info: Callable[[], WorkerInfo], *, interval: float) -> None:
    """Beat every `interval` seconds; re-register when another process declared this worker stale."""
    worker_id = info().id
    failures = 0
    while True:
        await asyncio.sleep(interval)
        try:
            alive = await backend.heartbeat(HeartbeatParams(worker_id=worker_id))
            failures = 0
        except Exception as exc:
            failures += 1
            if failures == 1 or failures % 10 == 0:
                logger.warning("heartbeat failed (%d in a row): %s", failures, exc)
            continue
        if not alive:
            logger.error(
                "worker %s was declared stale by another process; its rows were recovered. Re-registering.",
                worker_id,
            )
            await backend.register_worker(RegisterWorkerParams(worker=info()))


async def sweep_once(
    backend: QueueStore,
    bus: ObservationBus,
    *,
    heartbeat_timeout: float,
    policy: StaleJobPolicy,
    worker_id: str | None = None,
    log: bool = True,
) -> RecoveryResult:
    """One sweep through core's rescue decision; a sweep that wrote something is published, and logged
    unless `log` is False (``soniq recover`` prints the result itself)."""
    result = await sweep_stale_workers(backend, heartbeat_timeout=heartbeat_timeout, policy=policy)
    if result.requeued or result.dead_lettered:
        if log:
            logger.warning(
                "stale recovery: workers %s; requeued %d rows, dead-lettered %d",
                ", ".join(result.stale_workers) or "-",
                len(result.requeued),
                len(result.dead_lettered),
            )
        bus.recovery(RecoveryEvent(result=result, rescues=result.rescues, at=time.time(), worker_id=worker_id))
    return result


async def expire_unknown_once(
    backend: QueueStore,
    bus: ObservationBus,
    *,
    heartbeat_timeout: float,
    older_than: float,
    worker_id: str | None = None,
) -> set[str]:
    """Dead-letter (reason ``unknown_job``) queued rows of names no live worker registers.

    Only when every live worker reported the names it has: a worker that did
    not (an older release) might have the code, and its rows are left alone.
    """
    now = datetime.now(UTC)
    live = [
        w
        for w in await backend.list_workers()
        if w.status is not WorkerStatus.STOPPED and (now - w.last_heartbeat).total_seconds() < heartbeat_timeout
    ]
    if not live or any(w.job_names is None for w in live):
        return set()
    # Core's own jobs (a batch's finisher) run on every worker that runs any job: always known.
    known = sorted({name for w in live for name in w.job_names or ()} | {BATCH_JOB})
    error = (
        f"no live worker has registered this job's name for {older_than:g}s (setting 'unknown_job_timeout'); "
        f"live workers know: {', '.join(known) or 'none'}. Deploy a worker with its code, then replay the job"
    )
    moved = await backend.expire_unknown_jobs(
        ExpireUnknownJobsParams(known_names=known, older_than=older_than, error=error)
    )
    for job_id in sorted(moved):
        logger.warning(
            "job %s moved to the dead-letter table (%s): %s", job_id, DeadLetterReason.UNKNOWN_JOB.value, error
        )
    if moved:
        bus.recovery(
            RecoveryEvent(
                result=RecoveryResult(dead_lettered=tuple(sorted(moved))),
                rescues=(),
                at=time.time(),
                worker_id=worker_id,
            )
        )
    return set(moved)


async def sweep_loop(
    backend: QueueStore,
    bus: ObservationBus,
    *,
    worker_id: str,
    interval: float,
    heartbeat_timeout: float,
    policy: StaleJobPolicy,
    keep_going: Callable[[], bool],
    unknown_job_timeout: float | None = None,
) -> None:
    expire = unknown_job_timeout is not None
    while keep_going():
        try:
            await sweep_once(backend, bus, heartbeat_timeout=heartbeat_timeout, policy=policy, worker_id=worker_id)
        except Exception as exc:
            logger.warning("stale-worker sweep failed: %s", exc)
        if expire and unknown_job_timeout is not None:
            try:
                await expire_unknown_once(
                    backend,
                    bus,
                    heartbeat_timeout=heartbeat_timeout,
                    older_than=unknown_job_timeout,
                    worker_id=worker_id,
                )
            except (NotImplementedError, AttributeError) as exc:
                logger.warning("this backend cannot expire unknown job names (%s); rows of such names stay", exc)
                expire = False
            except Exception as exc:
                logger.warning("expiring unknown job names failed: %s", exc)
        await asyncio.sleep(interval)
