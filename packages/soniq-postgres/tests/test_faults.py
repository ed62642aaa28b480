"""Faults a user sees: unreachable servers, dropped connections, undersized pools, bad options."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable

import asyncpg
import pytest

from soniq.errors import BackendUnavailableError, InvalidURLError, SoniqError
from soniq.params import CancelJobParams, EnqueueJobsParams, GetJobParams, PrepareWorkerParams, QueueStatsParams
from soniq.records import NewJob
from soniq_postgres import PostgresBackend, required_pool_size

pytestmark = pytest.mark.asyncio


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_unreachable_server_names_host_and_port() -> None:
    port = _free_port()
    backend = PostgresBackend.from_url(f"postgresql://postgres@127.0.0.1:{port}/test", connect_timeout=3)
    with pytest.raises(BackendUnavailableError, match=rf"127\.0\.0\.1:{port}") as caught:
        await backend.connect()
    assert "\n" not in str(caught.value)
    assert isinstance(caught.value.__cause__, OSError)
    # The hint fits any platform; the Debian command is one example among others.
    message = str(caught.value)
    assert "is the server running" in message
    assert "systemctl start postgresql" in message
    assert "brew services start postgresql" in message
    assert "Debian/Ubuntu pg_ctlcluster" in message


async def test_missing_database_is_one_clear_line(pg_url: str) -> None:
    url = pg_url.rsplit("/", 1)[0] + "/soniq_no_such_database"
    with pytest.raises(BackendUnavailableError) as caught:
        await PostgresBackend.from_url(url).connect()
    message = str(caught.value)
    assert "database 'soniq_no_such_database' does not exist" in message
    assert "\n" not in message


async def test_connection_killed_mid_operation_then_next_call_works(
    backend: PostgresBackend,
    raw: asyncpg.Connection,
    make_job: Callable[..., NewJob],
    wait_until: Callable[..., Awaitable[None]],
    namespace: str,
) -> None:
    job = make_job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
    blocker = await asyncpg.connect(backend.options.dsn)
    try:
        lock = blocker.transaction()
        await lock.start()
        await blocker.execute(f'SELECT 1 FROM "{namespace}".soniq_jobs WHERE id = $1 FOR UPDATE', job.id)
        # The backend's UPDATE now waits on the row lock: kill its connection there.
        cancelling = asyncio.create_task(backend.cancel_job(CancelJobParams(job_id=job.id)))
        victims: list[int] = []

        async def blocked() -> bool:
            victims[:] = [
                row["pid"]
                for row in await raw.fetch(
                    "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'",
                    backend.options.application_name,
                )
            ]
            return len(victims) == 1

        await wait_until(blocked, what="the backend's statement waits on the lock")
        await raw.fetchval("SELECT pg_terminate_backend($1)", victims[0])
        with pytest.raises(BackendUnavailableError, match=r"127\.0\.0\.1:5432|localhost:5432") as caught:
            await asyncio.wait_for(cancelling, 10)
        assert caught.value.__cause__ is not None
        await lock.rollback()
    finally:
        await blocker.close()

    assert await backend.cancel_job(CancelJobParams(job_id=job.id)) is True
    record = await backend.get_job(GetJobParams(job_id=job.id))
    assert record is not None
    assert record.status.value == "cancelled"


async def test_every_pool_connection_killed_the_pool_recovers(
    backend: PostgresBackend, raw: asyncpg.Connection, make_job: Callable[..., NewJob]
) -> None:
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[make_job()]))
    await raw.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
        backend.options.application_name,
    )
    stats = None
    for _ in range(3):  # at most one failure per pooled connection that was idle when killed
        try:
            stats = await backend.queue_stats(QueueStatsParams())
            break
        except BackendUnavailableError:
            continue
    assert stats is not None
    assert stats.queued == 1


async def test_pool_too_small_for_the_worker_says_what_to_raise(
    make_backend: Callable[..., Awaitable[PostgresBackend]],
) -> None:
    backend = await make_backend(max_size=4)
    with pytest.raises(SoniqError) as caught:
        await backend.prepare_worker(PrepareWorkerParams(concurrency=8, prefetch=10))
    needed = required_pool_size(8)
    assert needed == 10
    message = str(caught.value)
    assert f"?pool_max_size={needed}" in message
    assert "concurrency=8" in message
    await backend.prepare_worker(PrepareWorkerParams(concurrency=2, prefetch=10))


async def test_default_pool_grows_to_fit_the_worker(
    make_backend: Callable[..., Awaitable[PostgresBackend]], make_job: Callable[..., NewJob]
) -> None:
    backend = await make_backend()
    await backend.prepare_worker(PrepareWorkerParams(concurrency=30, prefetch=0))
    jobs = [make_job() for _ in range(40)]
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=jobs))
    results = await asyncio.gather(*(backend.get_job(GetJobParams(job_id=job.id)) for job in jobs))
    assert all(result is not None for result in results)


async def test_url_parameters_and_keywords(pg_url: str) -> None:
    backend = PostgresBackend.from_url(pg_url + "?pool_max_size=7&pool_min_size=2&namespace=ns_x")
    assert (backend.options.max_size, backend.options.min_size, backend.options.schema) == (7, 2, "ns_x")
    assert "pool_max_size" not in backend.options.dsn
    assert PostgresBackend.from_url(pg_url + "?pool_max_size=7", max_size=3).options.max_size == 3
    assert PostgresBackend.from_url(pg_url.replace("postgresql://", "postgres://")).options.port == 5432


async def test_unknown_and_bad_options(pg_url: str) -> None:
    with pytest.raises(TypeError, match=r"pool_size.*accepted options: namespace"):
        PostgresBackend.from_url(pg_url, pool_size=3)
    with pytest.raises(InvalidURLError, match="max_size"):
        PostgresBackend.from_url(pg_url + "?pool_max_size=lots")
    with pytest.raises(InvalidURLError, match="namespace"):
        PostgresBackend.from_url(pg_url, namespace="bad-name; drop")
