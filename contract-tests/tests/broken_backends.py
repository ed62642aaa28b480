"""Memory backends with one deliberate contract bug each: the suite must catch every one."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta

from soniq.records import JobRecord, JobStatus, RecoveryResult, StaleJobPolicy
from soniq_memory import MemoryBackend


class NackDoesNothing(MemoryBackend):
    """Claims success but leaves the row as it was."""

    async def nack_job(self, *, job_id: str, worker_id: str) -> bool:
        return self._owned(job_id, worker_id) is not None


class NackCountsAnAttempt(MemoryBackend):
    """Requeues correctly but also spends an attempt, as if the job had failed."""

    async def nack_job(self, *, job_id: str, worker_id: str) -> bool:
        if not await super().nack_job(job_id=job_id, worker_id=worker_id):
            return False
        row = self._store.jobs[job_id]
        self._store.put_job(replace(row, attempts=row.attempts + 1))
        return True


class RecoveryDoesNothing(MemoryBackend):
    async def recover_stale_workers(self, *, heartbeat_timeout: float, policy: StaleJobPolicy) -> RecoveryResult:
        return RecoveryResult()


class RecoveryTakesLiveWorkersRows(MemoryBackend):
    """Recovers every processing row untouched for the timeout, whether or not its worker still beats."""

    async def recover_stale_workers(self, *, heartbeat_timeout: float, policy: StaleJobPolicy) -> RecoveryResult:
        result = await super().recover_stale_workers(heartbeat_timeout=heartbeat_timeout, policy=policy)
        cutoff = self._store.now() - timedelta(seconds=heartbeat_timeout)
        taken = []
        for row in list(self._store.jobs.values()):
            if row.status is JobStatus.PROCESSING and row.updated_at < cutoff:
                self._write_nack(row)
                taken.append(row.id)
        return replace(result, requeued=result.requeued + tuple(taken))


class ClaimHandsRowsOutTwice(MemoryBackend):
    """Reads the due rows, yields to the event loop, then writes: concurrent claimers share rows."""

    async def claim_jobs(
        self, *, worker_id: str, queues: Sequence[str] | None, limit: int, mark_started: bool
    ) -> list[JobRecord]:
        now = self._store.now()
        due = [
            row
            for row in self._store.jobs.values()
            if row.status is JobStatus.QUEUED and row.scheduled_at <= now and (queues is None or row.queue in queues)
        ][:limit]
        await asyncio.sleep(0)
        claimed = []
        for row in due:
            updated = replace(row, status=JobStatus.PROCESSING, worker_id=worker_id, updated_at=now)
            self._store.put_job(updated)
            claimed.append(updated)
        return claimed
