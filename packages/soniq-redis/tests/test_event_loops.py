"""One backend used from several event loops in turn, as ``asyncio.run`` per call does (21.3)."""

from __future__ import annotations

import asyncio
import gc
import uuid
import warnings
from typing import Any

from soniq.params import ClaimJobsParams, EnqueueJobsParams, GetJobParams, WaitForJobsParams
from soniq.records import JobStatus
from soniq_redis import RedisBackend

LOOPS = 3


def test_a_backend_reconnects_transparently_on_each_new_event_loop(redis_url: str, make_job: Any) -> None:
    backend = RedisBackend.from_url(redis_url, namespace=f"soniq_loops_{uuid.uuid4().hex[:10]}")
    queue = f"loops-{uuid.uuid4().hex[:6]}"

    async def one_round(n: int) -> tuple[JobStatus | None, list[str]]:
        job = make_job(queue=queue, args={"n": n})
        await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
        # Starts the wake-up subscription on this loop; the next loop must get its own.
        await backend.wait_for_jobs(WaitForJobsParams(queues=[queue], timeout=0.05))
        claimed = await backend.claim_jobs(
            ClaimJobsParams(worker_id=f"w{n}", queues=[queue], limit=10, mark_started=False)
        )
        row = await backend.get_job(GetJobParams(job_id=job.id))
        return (None if row is None else row.status), [r.id for r in claimed]

    try:
        with warnings.catch_warnings():
            # A loop that ended left its sockets to the collector; that is the expected cost.
            warnings.simplefilter("ignore", ResourceWarning)
            for n in range(LOOPS):
                status, claimed = asyncio.run(one_round(n))
                assert status is JobStatus.PROCESSING
                assert len(claimed) == 1
            gc.collect()
    finally:
        asyncio.run(_drop(backend))


async def _drop(backend: RedisBackend) -> None:
    try:
        await backend.drop_schema()
    finally:
        await backend.close()
