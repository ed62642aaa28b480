"""The worker's background duties: its heartbeat and its share of stale-worker sweeps."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from soniq.backend import Backend
from soniq.bus import ObservationBus
from soniq.observers import RecoveryEvent
from soniq.params import HeartbeatParams, RegisterWorkerParams
from soniq.records import RecoveryResult, StaleJobPolicy, WorkerInfo
from soniq.rescue import sweep_stale_workers

logger = logging.getLogger("soniq.worker")


async def heartbeat_loop(backend: Backend, info: Callable[[], WorkerInfo], *, interval: float) -> None:
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
    backend: Backend,
    bus: ObservationBus,
    *,
    heartbeat_timeout: float,
    policy: StaleJobPolicy,
    worker_id: str | None = None,
) -> RecoveryResult:
    """One sweep through core's rescue decision; a sweep that wrote something is logged and published."""
    result = await sweep_stale_workers(backend, heartbeat_timeout=heartbeat_timeout, policy=policy)
    if result.requeued or result.dead_lettered:
        logger.warning(
            "stale recovery: workers %s; requeued %d rows, dead-lettered %d",
            ", ".join(result.stale_workers) or "-",
            len(result.requeued),
            len(result.dead_lettered),
        )
        bus.recovery(RecoveryEvent(result=result, rescues=result.rescues, at=time.time(), worker_id=worker_id))
    return result


async def sweep_loop(
    backend: Backend,
    bus: ObservationBus,
    *,
    worker_id: str,
    interval: float,
    heartbeat_timeout: float,
    policy: StaleJobPolicy,
    keep_going: Callable[[], bool],
) -> None:
    while keep_going():
        try:
            await sweep_once(backend, bus, heartbeat_timeout=heartbeat_timeout, policy=policy, worker_id=worker_id)
        except Exception as exc:
            logger.warning("stale-worker sweep failed: %s", exc)
        await asyncio.sleep(interval)
