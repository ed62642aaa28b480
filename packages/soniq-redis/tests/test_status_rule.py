"""The status rule in Redis: the scripts are the store's write path, and they
refuse a status outside the four before writing anything."""

from __future__ import annotations

from typing import Any

import pytest

from soniq.params import (
    ClaimJobsParams,
    EnqueueJobsParams,
    GetJobParams,
    JobPageParams,
    QueueStatsParams,
    RegisterWorkerParams,
)
from soniq.records import JobStatus, WorkerInfo, WorkerStatus
from soniq_redis import RedisBackend, StatusRejectedError
from soniq_redis.connection import translated_errors

pytestmark = pytest.mark.asyncio


def _scripts_of(backend: RedisBackend) -> Any:
    scripts = backend._scripts
    assert scripts is not None, "the backend is not connected"
    return scripts


async def _run(backend: RedisBackend, name: str, *args: Any) -> Any:
    # The same error translation the backend's own calls go through.
    with translated_errors(backend._target):
        return await _scripts_of(backend).run(name, *args)


async def test_completing_with_a_fifth_status_is_refused_and_writes_nothing(
    backend: RedisBackend, make_job: Any
) -> None:
    job = make_job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
    [claimed] = await backend.claim_jobs(ClaimJobsParams(worker_id="w", queues=None, limit=1, mark_started=True))

    with pytest.raises(StatusRejectedError, match=r'"failed".*queued, processing, done and cancelled'):
        await _run(backend, "complete", "failed", "w", job.id, "null")

    assert await backend.get_job(GetJobParams(job_id=job.id)) == claimed
    assert (await backend.queue_stats(QueueStatsParams())).processing == 1
    processing = await backend.job_page(JobPageParams(statuses=[JobStatus.PROCESSING]))
    assert [row.id for row in processing.rows] == [job.id]


@pytest.mark.parametrize("bad", ["failed", "", "QUEUED", "queued "])
async def test_inserting_with_a_status_outside_the_four_is_refused(
    backend: RedisBackend, make_job: Any, bad: str
) -> None:
    job = make_job()
    fields = [job.id, job.job_name, "{}", job.queue, job.priority, 0, job.max_attempts, ""]
    with pytest.raises(StatusRejectedError):
        await _run(backend, "enqueue", bad, 1, *fields)
    assert await backend.get_job(GetJobParams(job_id=job.id)) is None
    assert (await backend.queue_stats(QueueStatsParams())).total == 0


async def test_claiming_into_a_fifth_status_is_refused(backend: RedisBackend, make_job: Any) -> None:
    job = make_job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
    with pytest.raises(StatusRejectedError):
        await _run(backend, "claim", "running", "w", 1, "0", "1")
    row = await backend.get_job(GetJobParams(job_id=job.id))
    assert row is not None
    assert row.status is JobStatus.QUEUED
    assert row.worker_id is None


async def test_a_worker_status_outside_the_three_is_refused(backend: RedisBackend) -> None:
    await backend.register_worker(
        RegisterWorkerParams(worker=WorkerInfo(id="w", hostname="h", pid=1, queues=None, concurrency=1))
    )
    with pytest.raises(StatusRejectedError, match="zombie"):
        await _run(backend, "set_worker_status", "w", "zombie")
    [worker] = await backend.list_workers()
    assert worker.status is WorkerStatus.ACTIVE
