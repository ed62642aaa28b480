"""The memory store's half of stale recovery: find orphaned rows, store core's rescues.

Core decides each row's fate (`soniq.rescue.decide_rescue`); nothing here
chooses between release, requeue and dead-letter. The caller holds the lock.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from soniq.backend import JobStatus, Rescue, RescueAction, StaleScan, WorkerStatus
from soniq_memory.store import MemoryStore


def _gone(store: MemoryStore, worker_id: str) -> bool:
    """No live worker owns this id: it has no row, or its row says stopped."""
    worker = store.workers.get(worker_id)
    return worker is None or worker.status is WorkerStatus.STOPPED


def find_stale(store: MemoryStore, *, heartbeat_timeout: float) -> StaleScan:
    """Mark silent workers stopped; return them and every row they (or gone worker ids) still hold."""
    cutoff = store.now() - timedelta(seconds=heartbeat_timeout)
    stale = [
        worker.id
        for worker in store.workers.values()
        if worker.status in (WorkerStatus.ACTIVE, WorkerStatus.STOPPING) and worker.last_heartbeat < cutoff
    ]
    for worker_id in stale:
        store.workers[worker_id] = replace(store.workers[worker_id], status=WorkerStatus.STOPPED)
    stale_set = set(stale)
    orphaned = [
        row
        for row in store.jobs.values()
        if row.status is JobStatus.PROCESSING
        and row.worker_id is not None
        and (row.worker_id in stale_set or (_gone(store, row.worker_id) and row.updated_at < cutoff))
    ]
    orphaned.sort(key=lambda row: (row.updated_at, row.id))
    return StaleScan(stale_workers=tuple(stale), orphaned=tuple(store.export_job(row) for row in orphaned))


def apply_rescue(store: MemoryStore, rescue: Rescue) -> bool:
    """Write one rescue exactly as given, only while the row is still as it was read."""
    row = store.jobs.get(rescue.job_id)
    if (
        row is None
        or row.status is not JobStatus.PROCESSING
        or row.worker_id != rescue.expected_worker_id
        or row.updated_at != rescue.expected_updated_at
    ):
        return False
    counted = replace(row, attempts=rescue.attempts)
    if rescue.action is RescueAction.RELEASE:
        store.write_nack(counted)
    elif rescue.action is RescueAction.DEAD_LETTER:
        store.move_to_dead_letter(
            counted, error=rescue.error if rescue.error is not None else row.last_error, reason=rescue.reason or ""
        )
    else:
        now = store.now()
        store.put_job(
            replace(
                counted,
                status=JobStatus.QUEUED,
                worker_id=None,
                started_at=None,
                last_error=rescue.error if rescue.error is not None else row.last_error,
                scheduled_at=now,
                updated_at=now,
            )
        )
        store.wake(row.queue)
    return True
