"""Stale recovery, decided in core: what happens to a row whose worker went silent.

A backend finds stale workers and the rows they orphaned (`find_stale_jobs`)
and stores what core decides (`rescue_jobs`); it never decides itself, so every
backend words, counts and routes a lost row the same way.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from soniq.params import FindStaleJobsParams, Rescue, RescueAction, RescueJobsParams, SetWorkerStatusParams
from soniq.records import DeadLetterReason, JobRecord, RecoveryResult, StaleJobPolicy, WorkerStatus

if TYPE_CHECKING:
    from soniq.backend import QueueStore

logger = logging.getLogger("soniq.worker")


def lost_worker_error(worker_id: str | None, heartbeat_timeout: float) -> str:
    """The one `last_error` text of a run lost with its worker."""
    return f"worker {worker_id} was lost (no heartbeat for {heartbeat_timeout:g}s) while running it"


def decide_rescue(row: JobRecord, *, policy: StaleJobPolicy, heartbeat_timeout: float) -> Rescue:
    """The fate of one orphaned `processing` row, as an explicit write.

    A row whose handler never started ran no user code: it is released with
    its attempts intact and is never dead-lettered. A started row counts the
    lost run as an attempt; under `dead_letter` policy it goes to review as a
    `zombie`, under `requeue` it runs again unless that spent its budget.
    """
    fenced = functools.partial(
        Rescue, job_id=row.id, expected_worker_id=row.worker_id or "", expected_updated_at=row.updated_at
    )
    if row.started_at is None:
        return fenced(action=RescueAction.RELEASE, attempts=row.attempts)
    attempts = row.attempts + 1
    error = lost_worker_error(row.worker_id, heartbeat_timeout)
    if policy is StaleJobPolicy.DEAD_LETTER:
        return fenced(
            action=RescueAction.DEAD_LETTER, attempts=attempts, error=error, reason=DeadLetterReason.ZOMBIE.value
        )
    if attempts >= row.max_attempts:
        return fenced(
            action=RescueAction.DEAD_LETTER, attempts=attempts, error=error, reason=DeadLetterReason.WORKER_LOST.value
        )
    return fenced(action=RescueAction.REQUEUE, attempts=attempts, error=error)


async def sweep_stale_workers(
    backend: QueueStore, *, heartbeat_timeout: float, policy: StaleJobPolicy
) -> RecoveryResult:
    """One stale-worker sweep: find, decide per row, store; report what was written."""
    scan = await backend.find_stale_jobs(FindStaleJobsParams(heartbeat_timeout=heartbeat_timeout))
    if scan.skipped:
        return RecoveryResult(skipped=True)
    rescues = [decide_rescue(row, policy=policy, heartbeat_timeout=heartbeat_timeout) for row in scan.orphaned]
    written = await backend.rescue_jobs(RescueJobsParams(rescues=rescues)) if rescues else set()
    applied = tuple(r for r in rescues if r.job_id in written)
    requeued = tuple(r.job_id for r in applied if r.action is not RescueAction.DEAD_LETTER)
    dead = tuple(r.job_id for r in applied if r.action is RescueAction.DEAD_LETTER)
    if scan.stale_workers:
        await record_lost_workers(backend, scan.stale_workers, applied, heartbeat_timeout=heartbeat_timeout)
    return RecoveryResult(stale_workers=scan.stale_workers, requeued=requeued, dead_lettered=dead, rescues=applied)


def lost_record(
    rescues: Sequence[Rescue], *, last_heartbeat: datetime | None, heartbeat_timeout: float
) -> dict[str, Any]:
    """What stale recovery adds to the `last_shutdown` of a worker it stopped: when, and the rows it took.

    ``recovered`` is never in the summary a worker writes at its own STOPPED, so operators' tools (the
    dashboard) can tell the two apart and list the rescued rows with what became of each.
    """
    return {
        "recovered": True,
        "recovered_at": datetime.now(UTC).isoformat(),
        "heartbeat_timeout": heartbeat_timeout,
        "last_heartbeat": None if last_heartbeat is None else last_heartbeat.isoformat(),
        "rescued": [
            {"job_id": r.job_id, "action": r.action.value, **({"reason": r.reason} if r.reason else {})}
            for r in rescues
        ],
    }


async def record_lost_workers(
    backend: QueueStore, worker_ids: Sequence[str], rescues: Sequence[Rescue], *, heartbeat_timeout: float
) -> None:
    """On each worker row the sweep marked `stopped`, record in `last_shutdown` that recovery stopped it
    and which of its rows it rescued.

    The rows are already written; a failure here only leaves the worker row without that record, so it
    is logged, never raised. `set_worker_status` stamps the heartbeat, so the last real one is kept in
    the record (read before the write).
    """
    try:
        rows = {w.id: w for w in await backend.list_workers() if w.id in worker_ids}
        for worker_id in worker_ids:
            row = rows.get(worker_id)
            record = lost_record(
                [r for r in rescues if r.expected_worker_id == worker_id],
                last_heartbeat=None if row is None else row.last_heartbeat,
                heartbeat_timeout=heartbeat_timeout,
            )
            # A worker that reached STOPPED but left rows to recovery keeps its own summary beside this.
            own = dict(row.last_shutdown) if row is not None and row.last_shutdown else {}
            await backend.set_worker_status(
                SetWorkerStatusParams(worker_id=worker_id, status=WorkerStatus.STOPPED, last_shutdown=own | record)
            )
    except Exception as exc:
        logger.warning("stale recovery: could not record lost workers %s: %s", ", ".join(worker_ids), exc)
