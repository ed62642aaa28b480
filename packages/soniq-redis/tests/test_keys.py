"""Keys: every key under the namespace's prefix, removed by drop_schema, and
awkward strings (quotes, NUL bytes, non-ASCII, glob characters) as queue
names, job names and args."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from redis.asyncio import Redis

from soniq.params import (
    ClaimJobsParams,
    CompleteJobsParams,
    DeadLetterJobParams,
    DeadLetterPageParams,
    EnqueueJobsParams,
    GetJobParams,
    JobPageParams,
    JobResult,
    NackJobParams,
    QueueStatsParams,
    RegisterWorkerParams,
    ReplayDeadLetterParams,
)
from soniq.records import DeadLetterReason, JobStatus, StaleJobPolicy, WorkerInfo
from soniq.rescue import sweep_stale_workers
from soniq_redis import KeySpace, RedisBackend

pytestmark = pytest.mark.asyncio

AWKWARD = [
    "quote \" and ' apostrophe",
    "nul \x00 byte",
    "ünïcödé ✓ 漢字 🎉",
    "glob * ? [a-z] \\ colon : braces {x}",
    "lone surrogate \ud800",
]


@pytest_asyncio.fixture
async def admin(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url, decode_responses=True, encoding_errors="surrogatepass")
    try:
        yield client
    finally:
        await client.aclose()


async def keys_under(admin: Redis, keys: KeySpace) -> list[str]:
    return sorted([key async for key in admin.scan_iter(match=keys.scan_pattern) if keys.owns(key)])


async def fill(backend: RedisBackend, make_job: Any, queue: str = "default") -> None:
    """Leave a row in every kind of key: queued, scheduled, processing, done, dead-lettered, a worker."""
    jobs = [make_job(queue=queue) for _ in range(4)]
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=jobs))
    await backend.register_worker(
        RegisterWorkerParams(worker=WorkerInfo(id="w", hostname="h", pid=1, queues=None, concurrency=2))
    )
    claimed = await backend.claim_jobs(ClaimJobsParams(worker_id="w", queues=[queue], limit=3, mark_started=True))
    await backend.complete_jobs(CompleteJobsParams(worker_id="w", results=[JobResult(claimed[0].id, {"ok": True})]))
    await backend.dead_letter_job(
        DeadLetterJobParams(job_id=claimed[1].id, worker_id="w", error="boom", reason="max_attempts")
    )


async def test_keys_use_the_namespace_prefix() -> None:
    assert KeySpace.for_namespace(None).prefix == "soniq:"
    assert KeySpace.for_namespace("tenant_1").prefix == "soniq:{tenant_1}:"


async def test_drop_schema_deletes_every_key_of_the_namespace_and_nothing_else(
    redis_url: str, backend: RedisBackend, admin: Redis, make_job: Any
) -> None:
    neighbour = RedisBackend.from_url(redis_url, namespace=f"{backend.keys.namespace}_neighbour")
    await neighbour.connect()
    try:
        await fill(backend, make_job)
        await fill(neighbour, make_job)
        assert len(await keys_under(admin, backend.keys)) > 10
        neighbour_keys = await keys_under(admin, neighbour.keys)

        await backend.drop_schema()

        assert await keys_under(admin, backend.keys) == []
        assert await keys_under(admin, neighbour.keys) == neighbour_keys
        assert (await neighbour.queue_stats(QueueStatsParams())).total == 4
    finally:
        await neighbour.drop_schema()
        await neighbour.close()


async def test_the_backend_works_again_after_drop_schema_and_setup(backend: RedisBackend, make_job: Any) -> None:
    await fill(backend, make_job)
    await backend.drop_schema()
    assert (await backend.queue_stats(QueueStatsParams())).total == 0
    assert await backend.list_workers() == []
    await backend.setup()
    job = make_job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
    [claimed] = await backend.claim_jobs(ClaimJobsParams(worker_id="w", queues=None, limit=1, mark_started=False))
    assert claimed.id == job.id


async def test_dropping_the_default_namespace_keeps_named_ones(private_server: Any, make_job: Any) -> None:
    default = RedisBackend.from_url(private_server.url)
    named = RedisBackend.from_url(private_server.url, namespace="job")
    admin = Redis.from_url(private_server.url, decode_responses=True)
    try:
        await fill(default, make_job)
        await fill(named, make_job)
        named_keys = await keys_under(admin, named.keys)

        await default.drop_schema()

        assert sorted(await admin.keys("*")) == named_keys
        assert (await named.queue_stats(QueueStatsParams())).total == 4
    finally:
        await default.close()
        await named.close()
        await admin.aclose()


@pytest.mark.parametrize("text", AWKWARD)
async def test_awkward_strings_round_trip(backend: RedisBackend, make_job: Any, text: str) -> None:
    args = {text: [text, {"nested": text}], "plain": 1}
    job = make_job(queue=text, job_name=text, args=args, trace_context={text: text})
    other = make_job(queue=text + "-other")
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job, other]))

    row = await backend.get_job(GetJobParams(job_id=job.id))
    assert row is not None
    assert (row.queue, row.job_name, dict(row.args)) == (text, text, args)
    assert row.trace_context == {text: text}
    assert [r.id for r in (await backend.job_page(JobPageParams(queues=[text]))).rows] == [job.id]
    assert (await backend.queue_stats(QueueStatsParams(queue=text))).queued == 1

    [claimed] = await backend.claim_jobs(ClaimJobsParams(worker_id=text, queues=[text], limit=5, mark_started=True))
    assert (claimed.id, claimed.worker_id, dict(claimed.args)) == (job.id, text, args)
    assert await backend.dead_letter_job(
        DeadLetterJobParams(job_id=job.id, worker_id=text, error=text, reason=DeadLetterReason.MAX_ATTEMPTS.value)
    )
    [dead] = (await backend.dead_letter_page(DeadLetterPageParams(queues=[text]))).rows
    assert (dead.id, dead.queue, dead.job_name, dict(dead.args), dead.last_error) == (job.id, text, text, args, text)

    replay_id = text + "-replayed"
    new_id = await backend.replay_dead_letter(
        ReplayDeadLetterParams(job_id=job.id, new_job_id=replay_id, scheduled_at=job.scheduled_at)
    )
    assert new_id == replay_id
    replayed = await backend.get_job(GetJobParams(job_id=new_id))
    assert replayed is not None
    assert (replayed.queue, replayed.job_name, dict(replayed.args), replayed.status) == (
        text,
        text,
        args,
        JobStatus.QUEUED,
    )


async def test_result_round_trips_any_json_value(backend: RedisBackend, make_job: Any) -> None:
    for result in [None, 0, "x\x00y", [1, "ü"], {"a": {"b": None}}]:
        job = make_job()
        await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
        await backend.claim_jobs(ClaimJobsParams(worker_id="w", queues=None, limit=1, mark_started=True))
        assert await backend.complete_jobs(CompleteJobsParams(worker_id="w", results=[JobResult(job.id, result)]))
        row = await backend.get_job(GetJobParams(job_id=job.id))
        assert row is not None
        assert (row.status, row.result) == (JobStatus.DONE, result)


async def test_recovery_reports_stale_workers_and_cleans_their_processing_set(
    backend: RedisBackend, admin: Redis, make_job: Any
) -> None:
    job = make_job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
    await backend.register_worker(
        RegisterWorkerParams(worker=WorkerInfo(id="gone", hostname="h", pid=1, queues=None, concurrency=1))
    )
    await backend.claim_jobs(ClaimJobsParams(worker_id="gone", queues=None, limit=1, mark_started=False))
    processing_set = f"{backend.keys.prefix}wproc:gone"
    assert await admin.smembers(processing_set) == {job.id}

    result = await sweep_stale_workers(backend, heartbeat_timeout=0.0, policy=StaleJobPolicy.REQUEUE)

    assert (result.stale_workers, result.requeued, result.dead_lettered) == (("gone",), (job.id,), ())
    assert await admin.smembers(processing_set) == set()


async def test_complete_jobs_writes_only_the_rows_the_worker_still_owns(backend: RedisBackend, make_job: Any) -> None:
    mine, lost, other = make_job(), make_job(), make_job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[mine, lost, other]))
    await backend.claim_jobs(ClaimJobsParams(worker_id="w", queues=None, limit=2, mark_started=True))
    await backend.claim_jobs(ClaimJobsParams(worker_id="x", queues=None, limit=1, mark_started=True))
    processing = await backend.job_page(JobPageParams(statuses=[JobStatus.PROCESSING]))
    claimed_by_w = {row.id for row in processing.rows if row.worker_id == "w"}
    first, second = sorted(claimed_by_w)
    assert await backend.nack_job(NackJobParams(job_id=second, worker_id="w"))
    not_w = ({mine.id, lost.id, other.id} - claimed_by_w).pop()

    written = await backend.complete_jobs(
        CompleteJobsParams(
            worker_id="w", results=[JobResult(first, {"n": 1}), JobResult(second, 2), JobResult(not_w, 3)]
        )
    )

    assert written == {first}
    rows = {job_id: await backend.get_job(GetJobParams(job_id=job_id)) for job_id in (first, second, not_w)}
    assert {job_id: (row.status, row.result) for job_id, row in rows.items() if row} == {
        first: (JobStatus.DONE, {"n": 1}),
        second: (JobStatus.QUEUED, None),
        not_w: (JobStatus.PROCESSING, None),
    }
    assert await backend.complete_jobs(CompleteJobsParams(worker_id="w", results=[])) == set()
