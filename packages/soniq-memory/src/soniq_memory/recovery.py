"""One stale-worker sweep over a memory store (the caller holds the store's lock)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from soniq.records import DeadLetterReason, JobStatus, RecoveryResult, StaleJobPolicy, WorkerStatus
from soniq_memory.store import MemoryStore


def _gone(store: MemoryStore, worker_id: str | None) -> bool:
    """No live worker owns this id: it has no row, or its row says stopped."""
    worker = store.workers.get(worker_id) if worker_id is not None else None
    return worker is None or worker.status is WorkerStatus.STOPPED


def sweep_stale_workers(store: MemoryStore, *, heartbeat_timeout: float, policy: StaleJobPolicy) -> RecoveryResult:
    """Mark silent workers stopped and settle each row they (or gone worker ids) still hold."""
    now = store.now()
    cutoff = now - timedelta(seconds=heartbeat_timeout)
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
    requeued: list[str] = []
    dead_lettered: list[str] = []
    for row in sorted(orphaned, key=lambda row: (row.updated_at, row.id)):
        if row.started_at is None:
            # The handler never ran user code: hand it back without spending an attempt.
            store.write_nack(row)
            requeued.append(row.id)
            continue
        lost = f"worker {row.worker_id} was lost (no heartbeat for {heartbeat_timeout:g}s) while running it"
        counted = replace(row, attempts=row.attempts + 1)
        if policy is StaleJobPolicy.DEAD_LETTER:
            store.move_to_dead_letter(counted, error=lost, reason=DeadLetterReason.ZOMBIE.value)
            dead_lettered.append(row.id)
        elif counted.attempts >= counted.max_attempts:
            store.move_to_dead_letter(counted, error=lost, reason=DeadLetterReason.WORKER_LOST.value)
            dead_lettered.append(row.id)
        else:
            store.put_job(
                replace(
                    counted,
                    status=JobStatus.QUEUED,
                    worker_id=None,
                    started_at=None,
                    last_error=lost,
                    scheduled_at=now,
                    updated_at=now,
                )
            )
            store.wake(row.queue)
            requeued.append(row.id)
    return RecoveryResult(stale_workers=tuple(stale), requeued=tuple(requeued), dead_lettered=tuple(dead_lettered))
