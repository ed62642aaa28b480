"""Dependencies, cancel requests, limits and job changes in the memory store, beyond the contract suite:
its test API, named stores shared across threads, and state that stays bounded."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from soniq.params import (
    ClaimJobsParams,
    CompleteJobsParams,
    EnqueueJobsParams,
    GroupLimit,
    JobResult,
    LimitScope,
    RequestCancelParams,
    WaitForJobChangesParams,
    WatchJobsParams,
)
from soniq.records import CancelOutcome, JobStatus, NewJob
from soniq_memory import MemoryBackend

pytestmark = pytest.mark.asyncio


def _job(**fields: object) -> NewJob:
    values: dict[str, object] = {
        "id": str(uuid.uuid4()),
        "job_name": "example",
        "args": {},
        "queue": "default",
        "priority": 100,
        "scheduled_at": datetime.now(UTC) - timedelta(seconds=1),
        "max_attempts": 3,
    }
    values.update(fields)
    return NewJob(**values)  # type: ignore[arg-type]


def _claim(worker_id: str, *, limit: int = 10, limits: tuple[GroupLimit, ...] = ()) -> ClaimJobsParams:
    return ClaimJobsParams(worker_id=worker_id, queues=None, limit=limit, mark_started=True, limits=limits)


async def test_capabilities_declare_every_role_and_push_job_changes() -> None:
    capabilities = MemoryBackend().capabilities
    assert capabilities.describe_roles() == (
        "QueueStore v1, DeadLetterStore v1, ScheduleStore v1, OperatorReads v1, SchemaAdmin v1, "
        "CancelChannel v1, LimitStore v1, DependencyStore v1, RetentionStore v1, QueuePauseStore v1, "
        "JobStepStore v1, VersionedJobs v1, JobProgressStore v1, JobLogStore v1, UniqueWindows v1, "
        "DebouncedJobs v1, KeyRotationStore v1"
    )
    assert capabilities.push_job_changes is True


async def test_the_jobs_view_shows_the_new_fields() -> None:
    backend = MemoryBackend()
    dep = _job()
    child = _job(depends_on=(dep.id,), limit_key="t1")
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[dep, child]))
    row = backend.jobs[child.id]
    assert (row.depends_on, row.waiting_on, row.limit_key, row.cancel_requested) == ((dep.id,), 1, "t1", False)


async def test_put_job_records_the_edges_of_a_waiting_row() -> None:
    backend = MemoryBackend()
    dep = _job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[dep]))
    (claimed,) = await backend.claim_jobs(_claim("w"))
    template = backend.jobs[dep.id]
    waiting = replace(
        template, id=str(uuid.uuid4()), status=JobStatus.QUEUED, worker_id=None, depends_on=(dep.id,), waiting_on=1
    )
    backend.put_job(waiting)
    assert await backend.claim_jobs(_claim("w2")) == []
    await backend.complete_jobs(CompleteJobsParams(worker_id="w", results=[JobResult(job_id=claimed.id, result=None)]))
    assert backend.jobs[waiting.id].waiting_on == 0
    assert [row.id for row in await backend.claim_jobs(_claim("w2"))] == [waiting.id]


async def test_a_cancel_request_on_one_named_instance_wakes_a_waiter_in_another_thread() -> None:
    name = f"cancel-{uuid.uuid4().hex[:6]}"
    requester, waiter_side = MemoryBackend.from_url(f"memory://{name}"), MemoryBackend.from_url(f"memory://{name}")
    await requester.enqueue_jobs(EnqueueJobsParams(jobs=[_job()]))
    (row,) = await requester.claim_jobs(_claim("w"))
    registered = threading.Event()
    result: list[set[str] | None] = []

    async def wait_in_thread() -> None:
        task = asyncio.create_task(
            waiter_side.wait_for_job_changes(WaitForJobChangesParams(job_ids=[row.id], timeout=60))
        )
        await asyncio.sleep(0)
        registered.set()
        result.append(await task)

    thread = threading.Thread(target=asyncio.run, args=(wait_in_thread(),))
    thread.start()
    assert await asyncio.to_thread(registered.wait, 10)
    started = time.monotonic()
    assert await requester.request_cancel(RequestCancelParams(job_id=row.id)) is CancelOutcome.REQUESTED
    await asyncio.to_thread(thread.join, 10)
    assert result == [{row.id}]
    assert time.monotonic() - started < 5


async def test_waiting_on_an_already_finished_job_returns_at_once() -> None:
    backend = MemoryBackend()
    job = _job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
    await backend.watch_jobs(WatchJobsParams(job_ids=[job.id, "no-such-id"]))
    assert backend._store.watched == {job.id}, "an id without a row is not watched"
    (row,) = await backend.claim_jobs(_claim("w"))
    await backend.complete_jobs(CompleteJobsParams(worker_id="w", results=[JobResult(job_id=row.id, result=1)]))
    assert backend._store.watched == set(), "the finish spent the mark"
    changed = await asyncio.wait_for(
        backend.wait_for_job_changes(WaitForJobChangesParams(job_ids=[job.id], timeout=60)), 5
    )
    assert changed == {job.id}


async def test_rate_windows_keep_one_entry_per_group() -> None:
    backend = MemoryBackend()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[_job(limit_key=f"k{n % 3}") for n in range(9)]))
    limit = GroupLimit(LimitScope.JOB, "example", rate_limit=100, rate_period=0.05, partitioned=True)
    for _ in range(3):
        await backend.claim_jobs(_claim("w", limit=1, limits=(limit,)))
        await asyncio.sleep(0.06)
    assert len(backend._store.rate_windows) == 3


async def test_the_dependency_edges_are_dropped_once_settled() -> None:
    backend = MemoryBackend()
    dep = _job()
    children = [_job(depends_on=(dep.id,)) for _ in range(3)]
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[dep, *children]))
    assert backend._store.dependents == {dep.id: [child.id for child in children]}
    (row,) = await backend.claim_jobs(_claim("w"))
    await backend.complete_jobs(CompleteJobsParams(worker_id="w", results=[JobResult(job_id=row.id, result=None)]))
    assert backend._store.dependents == {}
