"""LISTEN/NOTIFY wake-up, its reconnection, and the poll fallback."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import asyncpg
import pytest

from soniq.params import ClaimJobsParams, EnqueueJobsParams, PrepareWorkerParams, WaitForJobsParams
from soniq.records import NewJob
from soniq_postgres import PostgresBackend

pytestmark = pytest.mark.asyncio

LONG = 60.0


async def _settle(backend: PostgresBackend) -> None:
    """Absorb a pending early return (e.g. the one a reconnect produces)."""
    await backend.wait_for_jobs(WaitForJobsParams(queues=None, timeout=0.01))


async def _assert_waiting(task: asyncio.Task[None]) -> None:
    for _ in range(20):
        await asyncio.sleep(0.005)
        assert not task.done(), "wait_for_jobs returned before anything was enqueued"


async def _listen_pids(raw: asyncpg.Connection, backend: PostgresBackend) -> list[int]:
    rows = await raw.fetch(
        "SELECT pid FROM pg_stat_activity WHERE application_name = $1",
        backend.options.listen_application_name,
    )
    return [row["pid"] for row in rows]


async def test_enqueue_from_another_instance_wakes_the_waiter(
    make_backend: Callable[..., Awaitable[PostgresBackend]], make_job: Callable[..., NewJob]
) -> None:
    worker = await make_backend()
    producer = await make_backend()
    await worker.prepare_worker(PrepareWorkerParams(concurrency=2, prefetch=0))
    await _settle(worker)

    waiter = asyncio.create_task(worker.wait_for_jobs(WaitForJobsParams(queues=["mail"], timeout=LONG)))
    await _assert_waiting(waiter)
    await producer.enqueue_jobs(EnqueueJobsParams(jobs=[make_job(queue="mail")]))
    await asyncio.wait_for(waiter, 10)


async def test_one_listen_connection_serves_every_waiter(
    make_backend: Callable[..., Awaitable[PostgresBackend]],
    raw: asyncpg.Connection,
    make_job: Callable[..., NewJob],
) -> None:
    worker = await make_backend()
    await worker.prepare_worker(PrepareWorkerParams(concurrency=4, prefetch=0))
    waiters = [
        asyncio.create_task(worker.wait_for_jobs(WaitForJobsParams(queues=None, timeout=LONG))) for _ in range(4)
    ]
    await asyncio.sleep(0)
    assert len(await _listen_pids(raw, worker)) == 1
    producer = await make_backend()
    await producer.enqueue_jobs(EnqueueJobsParams(jobs=[make_job()]))
    await asyncio.wait_for(asyncio.gather(*waiters), 10)


async def test_a_notification_between_claim_and_wait_is_not_lost(
    make_backend: Callable[..., Awaitable[PostgresBackend]],
    make_job: Callable[..., NewJob],
    wait_until: Callable[..., Awaitable[None]],
) -> None:
    worker = await make_backend()
    producer = await make_backend()
    await worker.prepare_worker(PrepareWorkerParams(concurrency=1, prefetch=0))
    await _settle(worker)
    assert await worker.claim_jobs(ClaimJobsParams(worker_id="w", queues=None, limit=1, mark_started=False)) == []

    listener = worker._listener
    assert listener is not None
    before = listener.sequence_for(None)
    await producer.enqueue_jobs(EnqueueJobsParams(jobs=[make_job()]))

    async def delivered() -> bool:
        return listener.sequence_for(None) > before

    # The waiter starts only after the notification was delivered ...
    await wait_until(delivered, what="the notification reached the listener")
    # ... and still returns at once instead of sleeping out its timeout.
    await asyncio.wait_for(worker.wait_for_jobs(WaitForJobsParams(queues=None, timeout=LONG)), 10)


async def test_listen_connection_recovers_after_being_terminated(
    make_backend: Callable[..., Awaitable[PostgresBackend]],
    raw: asyncpg.Connection,
    make_job: Callable[..., NewJob],
    wait_until: Callable[..., Awaitable[None]],
) -> None:
    worker = await make_backend()
    producer = await make_backend()
    await worker.prepare_worker(PrepareWorkerParams(concurrency=1, prefetch=0))
    [old_pid] = await _listen_pids(raw, worker)
    assert await raw.fetchval("SELECT pg_terminate_backend($1)", old_pid)

    async def reconnected() -> bool:
        pids = await _listen_pids(raw, worker)
        return len(pids) == 1 and pids[0] != old_pid and worker._listener is not None and worker._listener.connected

    await wait_until(reconnected, within=15, what="the LISTEN connection came back")
    await _settle(worker)
    waiter = asyncio.create_task(worker.wait_for_jobs(WaitForJobsParams(queues=None, timeout=LONG)))
    await _assert_waiting(waiter)
    await producer.enqueue_jobs(EnqueueJobsParams(jobs=[make_job()]))
    await asyncio.wait_for(waiter, 10)


async def test_listen_false_polls_and_reports_no_push_wakeup(
    make_backend: Callable[..., Awaitable[PostgresBackend]],
    raw: asyncpg.Connection,
    pg_url: str,
) -> None:
    backend = await make_backend(listen=False)
    assert backend.capabilities.push_wakeup is False
    assert PostgresBackend.from_url(pg_url + "?listen=false").capabilities.push_wakeup is False
    await backend.prepare_worker(PrepareWorkerParams(concurrency=1, prefetch=0))
    await backend.wait_for_jobs(WaitForJobsParams(queues=None, timeout=0.01))
    assert await _listen_pids(raw, backend) == []


async def test_channel_is_namespaced(pg_url: str) -> None:
    assert PostgresBackend.from_url(pg_url).channel == "soniq_new_job"
    assert PostgresBackend.from_url(pg_url, namespace="tenant_a").channel == "soniq_new_job_tenant_a"
    long_name = "n" * 63
    channel = PostgresBackend.from_url(pg_url, namespace=long_name).channel
    assert channel.startswith("soniq_new_job_")
    assert len(channel) <= 63
