"""One memory backend used from several event loops in turn, as ``asyncio.run`` per call does (21.3)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

from soniq.params import ClaimJobsParams, EnqueueJobsParams, WaitForJobsParams
from soniq.records import JobStatus, NewJob
from soniq_memory import MemoryBackend


def _job(n: int) -> NewJob:
    return NewJob(
        id=str(uuid.uuid4()),
        job_name="loops.job",
        args={"n": n},
        queue="loops",
        priority=100,
        scheduled_at=datetime.now(UTC) - timedelta(seconds=1),
        max_attempts=3,
    )


def test_a_memory_backend_serves_each_new_event_loop() -> None:
    backend = MemoryBackend.from_url(f"memory://loops-{uuid.uuid4().hex[:8]}")

    async def one_round(n: int) -> list[str]:
        await backend.connect()
        # A waiter parked on this loop must not break the next loop's enqueue.
        waiting = asyncio.create_task(backend.wait_for_jobs(WaitForJobsParams(queues=["other"], timeout=5.0)))
        await asyncio.sleep(0)
        await backend.enqueue_jobs(EnqueueJobsParams(jobs=[_job(n)]))
        claimed = await backend.claim_jobs(
            ClaimJobsParams(worker_id=f"w{n}", queues=None, limit=10, mark_started=False)
        )
        waiting.cancel()
        return [row.id for row in claimed]

    for n in range(3):
        assert len(asyncio.run(one_round(n))) == 1
    assert [row.status for row in backend.jobs.values()] == [JobStatus.PROCESSING] * 3
