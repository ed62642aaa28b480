"""Stale recovery in Redis: find_stale.lua finds, core decides, rescue.lua stores.

What the contract suite cannot see from outside: the sweep lock that spans a
find and its rescue, index entries left by a job hash that is gone, and that a
stopped owner's rows are judged by their own `updated_at`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import pytest_asyncio
from redis.asyncio import Redis

import soniq_redis.backend
from soniq.params import (
    ClaimJobsParams,
    CompleteJobsParams,
    EnqueueJobsParams,
    FindStaleJobsParams,
    GetDeadLetterParams,
    GetJobParams,
    JobResult,
    MarkStartedParams,
    QueueStatsParams,
    RegisterWorkerParams,
    Rescue,
    RescueAction,
    RescueJobsParams,
    SetWorkerStatusParams,
)
from soniq.records import JobRecord, JobStatus, StaleJobPolicy, WorkerInfo, WorkerStatus
from soniq.rescue import decide_rescue, lost_worker_error, sweep_stale_workers
from soniq_redis import RedisBackend

pytestmark = pytest.mark.asyncio

DEADLINE = 10.0


@pytest_asyncio.fixture
async def admin(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url, decode_responses=True)
    try:
        yield client
    finally:
        await client.aclose()


async def claimed_by(backend: RedisBackend, make_job: Any, worker_id: str, *, count: int = 1) -> list[JobRecord]:
    """Register `worker_id` and let it claim `count` fresh started rows."""
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[make_job() for _ in range(count)]))
    worker = WorkerInfo(id=worker_id, hostname="h", pid=1, queues=None, concurrency=count)
    await backend.register_worker(RegisterWorkerParams(worker=worker))
    return await backend.claim_jobs(ClaimJobsParams(worker_id=worker_id, queues=None, limit=count, mark_started=True))


async def server_now(admin: Redis) -> datetime:
    seconds, micros = await admin.time()
    return datetime.fromtimestamp(0, UTC) + timedelta(seconds=int(seconds), microseconds=int(micros))


async def test_a_second_sweeper_is_skipped_between_the_first_ones_find_and_rescue(
    backend: RedisBackend, peer: RedisBackend, make_job: Any
) -> None:
    [row] = await claimed_by(backend, make_job, "gone")

    scan = await backend.find_stale_jobs(FindStaleJobsParams(heartbeat_timeout=0.0))
    assert (scan.skipped, scan.stale_workers, [r.id for r in scan.orphaned]) == (False, ("gone",), [row.id])
    assert await peer.find_stale_jobs(FindStaleJobsParams(heartbeat_timeout=0.0)) == type(scan)(skipped=True)

    rescue = decide_rescue(scan.orphaned[0], policy=StaleJobPolicy.REQUEUE, heartbeat_timeout=0.0)
    assert await backend.rescue_jobs(RescueJobsParams(rescues=[rescue])) == {row.id}

    # The rescue released the lock: the next sweeper runs, and finds nothing left.
    after = await peer.find_stale_jobs(FindStaleJobsParams(heartbeat_timeout=0.0))
    assert (after.skipped, after.orphaned) == (False, ())


async def test_a_sweeper_that_died_after_its_find_blocks_others_only_until_the_lock_expires(
    backend: RedisBackend, peer: RedisBackend, make_job: Any, wait_until: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(soniq_redis.backend, "SWEEP_LOCK_MS", 200)
    [row] = await claimed_by(backend, make_job, "gone")
    assert (await backend.find_stale_jobs(FindStaleJobsParams(heartbeat_timeout=0.0))).orphaned
    # `backend` never rescues, as if its process died here.

    async def peer_recovers() -> bool:
        result = await sweep_stale_workers(peer, heartbeat_timeout=0.0, policy=StaleJobPolicy.REQUEUE)
        return row.id in result.requeued

    await wait_until(peer_recovers, deadline=DEADLINE, message="the expired sweep lock never let another sweeper in")
    requeued = await peer.get_job(GetJobParams(job_id=row.id))
    assert requeued is not None
    assert (requeued.status, requeued.attempts) == (JobStatus.QUEUED, 1)


async def test_a_job_hash_that_is_gone_while_its_id_is_indexed_does_not_break_the_sweep(
    backend: RedisBackend, admin: Redis, make_job: Any
) -> None:
    vanished, kept = await claimed_by(backend, make_job, "gone", count=2)
    await admin.delete(backend.keys.job(vanished.id))
    assert (await backend.queue_stats(QueueStatsParams())).processing == 2

    result = await sweep_stale_workers(backend, heartbeat_timeout=0.0, policy=StaleJobPolicy.REQUEUE)

    assert result.requeued == (kept.id,)
    stats = await backend.queue_stats(QueueStatsParams())
    assert (stats.processing, stats.queued, stats.total) == (0, 1, 1)
    assert await admin.zscore(f"{backend.keys.prefix}st:processing", vanished.id) is None
    assert await admin.zscore(f"{backend.keys.prefix}all", vanished.id) is None


async def test_a_stopped_owners_rows_are_judged_by_their_updated_at_not_its_heartbeat(
    backend: RedisBackend, admin: Redis, make_job: Any, wait_until: Any
) -> None:
    timeout = 0.3
    [row] = await claimed_by(backend, make_job, "quitter")

    async def row_is_older_than_the_timeout() -> bool:
        return await server_now(admin) - row.updated_at > timedelta(seconds=timeout * 2)

    await wait_until(row_is_older_than_the_timeout, deadline=DEADLINE, message="the server clock did not advance")
    # Marking itself stopped refreshes the worker's heartbeat; it runs nothing all the same.
    assert await backend.set_worker_status(SetWorkerStatusParams(worker_id="quitter", status=WorkerStatus.STOPPED))

    scan = await backend.find_stale_jobs(FindStaleJobsParams(heartbeat_timeout=timeout))

    assert scan.stale_workers == ()
    assert [r.id for r in scan.orphaned] == [row.id]


async def test_a_stopped_owners_recently_updated_rows_are_left_alone(backend: RedisBackend, make_job: Any) -> None:
    [row] = await claimed_by(backend, make_job, "quitter")
    assert await backend.set_worker_status(SetWorkerStatusParams(worker_id="quitter", status=WorkerStatus.STOPPED))

    scan = await backend.find_stale_jobs(FindStaleJobsParams(heartbeat_timeout=60.0))

    assert (scan.stale_workers, scan.orphaned) == ((), ())
    assert (await backend.get_job(GetJobParams(job_id=row.id))) == row


async def test_a_row_whose_start_was_marked_between_find_and_rescue_is_not_released(
    backend: RedisBackend, make_job: Any
) -> None:
    """Seen on the Redis Cluster chaos run: a prefetched row was read unstarted by a sweep, so core decided
    to release it with its attempts kept; its worker's start mark landed before the rescue, the handler
    ran, and the release went through, so that run's failure was never counted. The mark moves
    updated_at, which the rescue is fenced on, as on every other backend."""
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[make_job()]))
    worker = WorkerInfo(id="prefetching", hostname="h", pid=1, queues=None, concurrency=1)
    await backend.register_worker(RegisterWorkerParams(worker=worker))
    [row] = await backend.claim_jobs(ClaimJobsParams(worker_id="prefetching", queues=None, limit=1, mark_started=False))
    scan = await backend.find_stale_jobs(FindStaleJobsParams(heartbeat_timeout=0.0))
    [read] = scan.orphaned
    assert read.started_at is None
    assert await backend.mark_started(MarkStartedParams(worker_id="prefetching", job_ids=[row.id])) == {row.id}

    rescue = decide_rescue(read, policy=StaleJobPolicy.REQUEUE, heartbeat_timeout=0.0)
    assert rescue.action is RescueAction.RELEASE
    assert await backend.rescue_jobs(RescueJobsParams(rescues=[rescue])) == set()

    started = await backend.get_job(GetJobParams(job_id=row.id))
    assert started is not None
    assert (started.status, started.worker_id, started.attempts) == (JobStatus.PROCESSING, "prefetching", 0)
    assert started.started_at is not None
    assert started.updated_at > read.updated_at


async def test_a_row_the_old_owner_finished_between_find_and_rescue_is_left_alone(
    backend: RedisBackend, make_job: Any
) -> None:
    [row] = await claimed_by(backend, make_job, "slow")
    scan = await backend.find_stale_jobs(FindStaleJobsParams(heartbeat_timeout=0.0))
    [read] = scan.orphaned
    done = CompleteJobsParams(worker_id="slow", results=[JobResult(row.id, "late")])
    assert await backend.complete_jobs(done) == {row.id}

    rescue = decide_rescue(read, policy=StaleJobPolicy.DEAD_LETTER, heartbeat_timeout=0.0)
    assert await backend.rescue_jobs(RescueJobsParams(rescues=[rescue])) == set()

    finished = await backend.get_job(GetJobParams(job_id=row.id))
    assert finished is not None
    assert (finished.status, finished.result, finished.attempts) == (JobStatus.DONE, "late", 0)
    assert await backend.get_dead_letter(GetDeadLetterParams(job_id=row.id)) is None


async def test_rescues_are_stored_exactly_as_given(backend: RedisBackend, make_job: Any) -> None:
    requeue, release, dead = await claimed_by(backend, make_job, "gone", count=3)
    scan = await backend.find_stale_jobs(FindStaleJobsParams(heartbeat_timeout=0.0))
    read = {r.id: r for r in scan.orphaned}

    def fence(job_id: str) -> dict[str, Any]:
        row = read[job_id]
        return {"job_id": job_id, "expected_worker_id": row.worker_id or "", "expected_updated_at": row.updated_at}

    # Values no backend would pick by itself: the backend must not recompute them.
    rescues = [
        Rescue(**fence(requeue.id), action=RescueAction.REQUEUE, attempts=7, error="core said so"),
        Rescue(**fence(release.id), action=RescueAction.RELEASE, attempts=0),
        Rescue(**fence(dead.id), action=RescueAction.DEAD_LETTER, attempts=9, error="gone", reason="zombie"),
    ]
    assert await backend.rescue_jobs(RescueJobsParams(rescues=rescues)) == {requeue.id, release.id, dead.id}

    requeued = await backend.get_job(GetJobParams(job_id=requeue.id))
    released = await backend.get_job(GetJobParams(job_id=release.id))
    assert requeued is not None
    assert released is not None
    assert (requeued.status, requeued.attempts, requeued.last_error, requeued.worker_id, requeued.started_at) == (
        JobStatus.QUEUED,
        7,
        "core said so",
        None,
        None,
    )
    assert (released.status, released.attempts, released.last_error, released.worker_id) == (
        JobStatus.QUEUED,
        0,
        None,
        None,
    )
    dead_row = await backend.get_dead_letter(GetDeadLetterParams(job_id=dead.id))
    assert dead_row is not None
    assert (dead_row.attempts, dead_row.last_error, dead_row.dead_letter_reason) == (9, "gone", "zombie")


async def test_the_lost_run_carries_cores_one_error_text(backend: RedisBackend, make_job: Any) -> None:
    [row] = await claimed_by(backend, make_job, "gone")

    await sweep_stale_workers(backend, heartbeat_timeout=0.0, policy=StaleJobPolicy.REQUEUE)

    requeued = await backend.get_job(GetJobParams(job_id=row.id))
    assert requeued is not None
    assert requeued.last_error == lost_worker_error("gone", 0.0)


async def test_a_dead_letter_rescue_without_a_reason_is_refused_before_anything_is_written(
    backend: RedisBackend, make_job: Any
) -> None:
    [row] = await claimed_by(backend, make_job, "gone")
    [read] = (await backend.find_stale_jobs(FindStaleJobsParams(heartbeat_timeout=0.0))).orphaned
    good = decide_rescue(read, policy=StaleJobPolicy.REQUEUE, heartbeat_timeout=0.0)
    bad = Rescue(
        job_id=row.id,
        expected_worker_id="gone",
        expected_updated_at=read.updated_at,
        action=RescueAction.DEAD_LETTER,
        attempts=1,
    )

    with pytest.raises(ValueError, match="reason"):
        await backend.rescue_jobs(RescueJobsParams(rescues=[good, bad]))

    assert await backend.get_job(GetJobParams(job_id=row.id)) == read
