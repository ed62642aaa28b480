"""Push wake-up over pub/sub: a worker waiting in one backend instance wakes when
another instance (another process, in production) makes a row available."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from redis.asyncio import Redis

from soniq.params import ClaimJobsParams, EnqueueJobsParams, NackJobParams, PrepareWorkerParams, WaitForJobsParams
from soniq_redis import RedisBackend

pytestmark = pytest.mark.asyncio

# Far longer than any test may take: a wait that returns did so because it was woken.
LONG = 120.0
DEADLINE = 10.0


def _listener(backend: RedisBackend) -> Any:
    listener = backend._wakeups
    assert listener is not None, "the backend is not connected"
    return listener


async def test_enqueue_from_another_instance_wakes_a_waiting_worker(
    backend: RedisBackend, peer: RedisBackend, make_job: Any
) -> None:
    await backend.prepare_worker(PrepareWorkerParams(concurrency=1, prefetch=0))
    waiting = asyncio.create_task(backend.wait_for_jobs(WaitForJobsParams(queues=["mail"], timeout=LONG)))
    await asyncio.sleep(0)
    job = make_job(queue="mail")
    await peer.enqueue_jobs(EnqueueJobsParams(jobs=[job]))

    await asyncio.wait_for(waiting, DEADLINE)
    [claimed] = await backend.claim_jobs(ClaimJobsParams(worker_id="w", queues=["mail"], limit=1, mark_started=False))
    assert claimed.id == job.id


async def test_nack_from_another_instance_wakes_a_waiting_worker(
    backend: RedisBackend, peer: RedisBackend, make_job: Any
) -> None:
    job = make_job(queue="q")
    await peer.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
    await peer.claim_jobs(ClaimJobsParams(worker_id="other", queues=["q"], limit=1, mark_started=False))
    await backend.prepare_worker(PrepareWorkerParams(concurrency=1, prefetch=0))
    waiting = asyncio.create_task(backend.wait_for_jobs(WaitForJobsParams(queues=["q"], timeout=LONG)))
    await asyncio.sleep(0)

    assert await peer.nack_job(NackJobParams(job_id=job.id, worker_id="other"))

    await asyncio.wait_for(waiting, DEADLINE)


async def test_a_wake_up_landing_between_claim_and_wait_is_not_lost(
    backend: RedisBackend, peer: RedisBackend, make_job: Any, wait_until: Any
) -> None:
    await backend.prepare_worker(PrepareWorkerParams(concurrency=1, prefetch=0))
    listener = _listener(backend)
    assert await backend.claim_jobs(ClaimJobsParams(worker_id="w", queues=["q"], limit=1, mark_started=False)) == []
    seen = listener.generation

    await peer.enqueue_jobs(EnqueueJobsParams(jobs=[make_job(queue="q")]))

    async def message_arrived() -> bool:
        return bool(listener.generation > seen)

    await wait_until(message_arrived, deadline=DEADLINE, message="the wake-up message never arrived")
    # The message came before this wait started; the wait must not sleep through it.
    await asyncio.wait_for(backend.wait_for_jobs(WaitForJobsParams(queues=["q"], timeout=LONG)), DEADLINE)


async def test_a_waiter_wakes_in_time_for_a_row_scheduled_for_later(
    backend: RedisBackend, peer: RedisBackend, make_job: Any, wait_until: Any
) -> None:
    job = make_job(queue="later", scheduled_at=datetime.now(UTC) + timedelta(seconds=0.3))
    await peer.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
    await backend.prepare_worker(PrepareWorkerParams(concurrency=1, prefetch=0))
    await asyncio.wait_for(backend.wait_for_jobs(WaitForJobsParams(queues=["later"], timeout=LONG)), DEADLINE)

    claimed: list[str] = []

    async def claim() -> bool:
        rows = await backend.claim_jobs(ClaimJobsParams(worker_id="w", queues=["later"], limit=1, mark_started=False))
        claimed.extend(row.id for row in rows)
        return bool(claimed)

    await wait_until(claim, deadline=DEADLINE, message="the scheduled row never became claimable")
    assert claimed == [job.id]


async def test_waiters_of_one_namespace_share_one_subscription(redis_url: str, backend: RedisBackend) -> None:
    channel = backend.keys.wakeup_channel
    admin = Redis.from_url(redis_url, decode_responses=True)
    try:
        await backend.prepare_worker(PrepareWorkerParams(concurrency=4, prefetch=0))
        waits = [
            asyncio.create_task(backend.wait_for_jobs(WaitForJobsParams(queues=None, timeout=0.2))) for _ in range(4)
        ]
        numsub = await admin.pubsub_numsub(channel)
        await asyncio.gather(*waits)
        assert numsub == [(channel, 1)]
    finally:
        await admin.aclose()


async def test_wait_falls_back_to_sleeping_while_pubsub_is_down_then_resubscribes(
    private_server: Any, make_job: Any, wait_until: Any
) -> None:
    backend = RedisBackend.from_url(private_server.url, namespace="pubsub")
    producer = RedisBackend.from_url(private_server.url, namespace="pubsub")
    try:
        await backend.prepare_worker(PrepareWorkerParams(concurrency=1, prefetch=0))
        listener = _listener(backend)
        assert listener.online

        private_server.stop()

        async def offline() -> bool:
            return not listener.online

        await wait_until(offline, deadline=DEADLINE, message="the listener never noticed the server went away")
        # Down: the wait sleeps out its timeout instead of raising.
        await backend.wait_for_jobs(WaitForJobsParams(queues=None, timeout=0.05))

        private_server.start()

        async def online() -> bool:
            return bool(listener.online)

        await wait_until(online, deadline=DEADLINE, message="the listener never resubscribed")
        waiting = asyncio.create_task(backend.wait_for_jobs(WaitForJobsParams(queues=None, timeout=LONG)))
        await asyncio.sleep(0)
        await producer.enqueue_jobs(EnqueueJobsParams(jobs=[make_job()]))
        await asyncio.wait_for(waiting, DEADLINE)
    finally:
        await producer.close()
        await backend.close()
