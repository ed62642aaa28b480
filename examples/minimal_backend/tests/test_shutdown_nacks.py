"""The minimal backend counts the shutdowns that cut a running handler off (`JobRecord.shutdown_nacks`)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

from soniq_minimal import MinimalBackend

from soniq.backend import (
    ClaimJobsParams,
    EnqueueJobsParams,
    GetJobParams,
    JobRecord,
    NackJobParams,
    NewJob,
)


async def _row(backend: MinimalBackend, job_id: str) -> JobRecord:
    row = await backend.get_job(GetJobParams(job_id=job_id))
    assert row is not None
    return row


def test_only_a_nack_after_the_handler_started_adds_a_shutdown_nack() -> None:
    async def main() -> None:
        backend = MinimalBackend()
        job = NewJob(
            id=str(uuid.uuid4()),
            job_name="example",
            args={},
            queue="default",
            priority=100,
            scheduled_at=datetime.now(UTC) - timedelta(seconds=1),
            max_attempts=3,
        )
        await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
        assert (await _row(backend, job.id)).shutdown_nacks == 0
        claim = ClaimJobsParams(worker_id="w1", queues=None, limit=1, mark_started=True)

        (claimed,) = await backend.claim_jobs(claim)
        assert claimed.shutdown_nacks == 0
        assert await backend.nack_job(NackJobParams(job_id=job.id, worker_id="w1"))
        assert (await _row(backend, job.id)).shutdown_nacks == 0

        (claimed,) = await backend.claim_jobs(claim)
        assert await backend.nack_job(NackJobParams(job_id=job.id, worker_id="w1", handler_started=True))
        # A second nack finds the row no longer owned: nothing is written, nothing counted twice.
        assert not await backend.nack_job(NackJobParams(job_id=job.id, worker_id="w1", handler_started=True))
        (claimed,) = await backend.claim_jobs(claim)
        assert claimed.shutdown_nacks == 1
        assert claimed.attempts == 0

    asyncio.run(main())
