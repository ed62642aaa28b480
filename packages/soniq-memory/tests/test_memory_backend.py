"""What the memory backend adds beyond the contract: URL forms, the status rule, its test API."""

from __future__ import annotations

import asyncio
import threading
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from soniq.backend import Backend
from soniq.discovery import create_backend
from soniq.errors import InvalidURLError
from soniq.params import (
    ClaimJobsParams,
    DeadLetterJobParams,
    EnqueueJobsParams,
    FindStaleJobsParams,
    GetJobParams,
    HeartbeatParams,
    PrepareWorkerParams,
    RegisterWorkerParams,
    Rescue,
    RescueAction,
    RescueJobsParams,
    SetWorkerStatusParams,
    WaitForJobsParams,
)
from soniq.records import JobRecord, JobStatus, NewJob, StaleJobPolicy, WorkerInfo, WorkerStatus
from soniq.rescue import sweep_stale_workers
from soniq_memory import MemoryBackend

pytestmark = pytest.mark.asyncio


def _job(queue: str = "default", **fields: object) -> NewJob:
    values: dict[str, object] = {
        "id": str(uuid.uuid4()),
        "job_name": "example",
        "args": {"x": 1},
        "queue": queue,
        "priority": 100,
        "scheduled_at": datetime.now(UTC) - timedelta(seconds=1),
        "max_attempts": 3,
    }
    values.update(fields)
    return NewJob(**values)  # type: ignore[arg-type]


def _worker(worker_id: str) -> WorkerInfo:
    return WorkerInfo(id=worker_id, hostname="h", pid=1, queues=None, concurrency=1)


async def test_the_memory_scheme_resolves_to_memory_backend_through_entry_points() -> None:
    backend = create_backend("memory://")
    assert isinstance(backend, MemoryBackend)
    assert isinstance(backend, Backend)
    assert backend.capabilities.push_wakeup is True
    assert backend.capabilities.transactional_enqueue is False
    assert backend.capabilities.shared_across_processes is False


async def test_plain_memory_url_gives_a_fresh_store_each_time() -> None:
    first, second = MemoryBackend.from_url("memory://"), MemoryBackend.from_url("memory://")
    job = _job()
    await first.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
    assert await second.get_job(GetJobParams(job_id=job.id)) is None
    assert list(first.jobs) == [job.id]


async def test_named_memory_url_shares_one_store_per_name_and_namespace() -> None:
    name = f"shared-{uuid.uuid4().hex[:6]}"
    app_side, worker_side = MemoryBackend.from_url(f"memory://{name}"), MemoryBackend.from_url(f"memory://{name}")
    other_namespace = MemoryBackend.from_url(f"memory://{name}", namespace="tenant-b")
    other_name = MemoryBackend.from_url(f"memory://{name}-other")
    job = _job()
    await app_side.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
    claimed = await worker_side.claim_jobs(ClaimJobsParams(worker_id="w", queues=None, limit=1, mark_started=True))
    assert [row.id for row in claimed] == [job.id]
    assert (await app_side.get_job(GetJobParams(job_id=job.id))).status is JobStatus.PROCESSING  # type: ignore[union-attr]
    assert await other_namespace.get_job(GetJobParams(job_id=job.id)) is None
    assert await other_name.get_job(GetJobParams(job_id=job.id)) is None


async def test_from_url_rejects_unknown_options_naming_the_accepted_ones() -> None:
    with pytest.raises(TypeError, match=r"pool_size.*accepted: namespace"):
        MemoryBackend.from_url("memory://", pool_size=3)


async def test_from_url_rejects_another_scheme() -> None:
    with pytest.raises(InvalidURLError, match="memory://"):
        MemoryBackend.from_url("sqlite:///x.db")


async def test_the_store_rejects_a_status_outside_the_four() -> None:
    backend = MemoryBackend()
    job = _job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
    row = backend.jobs[job.id]
    for bad in ("failed", "QUEUED", "", None):
        with pytest.raises(ValueError, match="not allowed"):
            backend.put_job(JobRecord(**{**row.to_dict(), "status": bad}))
    assert backend.jobs[job.id] == row
    backend.put_job(JobRecord(**{**row.to_dict(), "status": "done"}))
    assert backend.jobs[job.id].status is JobStatus.DONE


async def test_enqueue_rejects_a_transactional_connection() -> None:
    backend = MemoryBackend()
    with pytest.raises(Exception, match="no transactional enqueue"):
        await backend.enqueue_jobs(EnqueueJobsParams(jobs=[_job()], connection=object()))
    assert backend.jobs == {}


async def test_enqueue_rejects_args_that_are_not_json_and_stores_none_of_the_batch() -> None:
    backend = MemoryBackend()
    good, bad = _job(), _job(args={"when": object()})
    with pytest.raises(TypeError, match="JSON"):
        await backend.enqueue_jobs(EnqueueJobsParams(jobs=[good, bad]))
    assert backend.jobs == {}


async def test_rows_handed_out_are_copies() -> None:
    backend = MemoryBackend()
    job = _job(args={"items": [1, 2]})
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
    row = await backend.get_job(GetJobParams(job_id=job.id))
    assert row is not None
    row.args["items"].append(3)
    assert backend.jobs[job.id].args == {"items": [1, 2]}


async def test_age_worker_makes_a_worker_stale_without_waiting() -> None:
    backend = MemoryBackend()
    await backend.register_worker(RegisterWorkerParams(worker=_worker("old")))
    await backend.register_worker(RegisterWorkerParams(worker=_worker("young")))
    job = _job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
    await backend.claim_jobs(ClaimJobsParams(worker_id="old", queues=None, limit=1, mark_started=False))
    backend.age_worker("old", 120)
    result = await sweep_stale_workers(backend, heartbeat_timeout=60, policy=StaleJobPolicy.REQUEUE)
    assert result.stale_workers == ("old",)
    assert result.requeued == (job.id,)
    assert backend.workers["old"].status is WorkerStatus.STOPPED
    assert backend.workers["young"].status is WorkerStatus.ACTIVE
    with pytest.raises(KeyError):
        backend.age_worker("nobody", 1)


async def test_reset_forgets_everything() -> None:
    backend = MemoryBackend()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[_job(), _job()]))
    await backend.register_worker(RegisterWorkerParams(worker=_worker("w")))
    (claimed,) = await backend.claim_jobs(ClaimJobsParams(worker_id="w", queues=None, limit=1, mark_started=True))
    await backend.dead_letter_job(
        DeadLetterJobParams(job_id=claimed.id, worker_id="w", error="e", reason="max_attempts")
    )
    assert (len(backend.jobs), len(backend.dead_letters), len(backend.workers)) == (1, 1, 1)
    backend.reset()
    assert (len(backend.jobs), len(backend.dead_letters), len(backend.workers)) == (0, 0, 0)


async def test_inspection_views_are_read_only() -> None:
    backend = MemoryBackend()
    with pytest.raises(TypeError):
        backend.jobs["x"] = None  # type: ignore[index]


async def test_an_enqueue_wakes_a_waiter_on_another_backend_of_the_same_named_store() -> None:
    name = f"wake-{uuid.uuid4().hex[:6]}"
    waiter_side, producer = MemoryBackend.from_url(f"memory://{name}"), MemoryBackend.from_url(f"memory://{name}")
    waiting = asyncio.create_task(waiter_side.wait_for_jobs(WaitForJobsParams(queues=["mail"], timeout=60)))
    await asyncio.sleep(0)
    await producer.enqueue_jobs(EnqueueJobsParams(jobs=[_job("other")]))
    await asyncio.sleep(0.05)
    assert not waiting.done(), "an enqueue on another queue woke a waiter filtered to 'mail'"
    await producer.enqueue_jobs(EnqueueJobsParams(jobs=[_job("mail")]))
    await asyncio.wait_for(waiting, 10)


async def test_an_enqueue_wakes_a_waiter_on_another_thread_s_event_loop() -> None:
    name = f"thread-{uuid.uuid4().hex[:6]}"
    producer = MemoryBackend.from_url(f"memory://{name}")
    waiter_side = MemoryBackend.from_url(f"memory://{name}")
    registered, returned = threading.Event(), threading.Event()

    async def wait_in_thread() -> None:
        task = asyncio.create_task(waiter_side.wait_for_jobs(WaitForJobsParams(queues=None, timeout=60)))
        await asyncio.sleep(0)
        registered.set()
        await task
        returned.set()

    thread = threading.Thread(target=asyncio.run, args=(wait_in_thread(),))
    thread.start()
    assert await asyncio.to_thread(registered.wait, 10)
    await producer.enqueue_jobs(EnqueueJobsParams(jobs=[_job()]))
    assert await asyncio.to_thread(returned.wait, 10)
    thread.join(10)


async def test_wait_for_jobs_returns_at_once_when_a_due_job_is_already_there() -> None:
    backend = MemoryBackend()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[_job()]))
    await asyncio.wait_for(backend.wait_for_jobs(WaitForJobsParams(queues=None, timeout=60)), 10)


async def test_prepare_worker_rejects_impossible_sizes() -> None:
    backend = MemoryBackend()
    await backend.prepare_worker(PrepareWorkerParams(concurrency=4, prefetch=2))
    with pytest.raises(Exception, match="concurrency"):
        await backend.prepare_worker(PrepareWorkerParams(concurrency=0, prefetch=0))


async def test_rescue_jobs_writes_core_s_decision_as_given_and_skips_a_row_that_changed() -> None:
    backend = MemoryBackend()
    await backend.register_worker(RegisterWorkerParams(worker=_worker("gone")))
    first, second = _job(), _job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[first, second]))
    await backend.claim_jobs(ClaimJobsParams(worker_id="gone", queues=None, limit=2, mark_started=True))
    backend.age_worker("gone", 120)
    scan = await backend.find_stale_jobs(FindStaleJobsParams(heartbeat_timeout=60))
    assert scan.stale_workers == ("gone",)
    assert {row.id for row in scan.orphaned} == {first.id, second.id}
    assert all(row.status is JobStatus.PROCESSING for row in backend.jobs.values()), "find wrote to a job row"
    read = {row.id: row for row in scan.orphaned}
    # The second row finishes between the read and the write: its rescue must not land.
    backend.put_job(replace(backend.jobs[second.id], updated_at=datetime.now(UTC) + timedelta(seconds=1)))
    rescues = [
        Rescue(
            job_id=job_id,
            expected_worker_id="gone",
            expected_updated_at=read[job_id].updated_at,
            action=RescueAction.DEAD_LETTER,
            attempts=7,
            error="decided by core",
            reason="zombie",
        )
        for job_id in (first.id, second.id)
    ]
    assert await backend.rescue_jobs(RescueJobsParams(rescues=rescues)) == {first.id}
    dead = backend.dead_letters[first.id]
    assert (dead.attempts, dead.last_error, dead.dead_letter_reason) == (7, "decided by core", "zombie")
    assert backend.jobs[second.id].status is JobStatus.PROCESSING


async def test_set_worker_status_says_what_it_writes_and_heartbeat_keeps_the_status() -> None:
    backend = MemoryBackend()
    await backend.register_worker(RegisterWorkerParams(worker=_worker("w")))
    assert await backend.set_worker_status(SetWorkerStatusParams(worker_id="w", status=WorkerStatus.STOPPING))
    assert await backend.heartbeat(HeartbeatParams(worker_id="w"))
    assert backend.workers["w"].status is WorkerStatus.STOPPING
    assert await backend.set_worker_status(SetWorkerStatusParams(worker_id="w", status=WorkerStatus.STOPPED))
    assert not await backend.heartbeat(HeartbeatParams(worker_id="w"))
    assert not await backend.set_worker_status(SetWorkerStatusParams(worker_id="nobody", status=WorkerStatus.STOPPED))
