"""soniq-postgres behind PgBouncer: detection, what transaction pooling turns off, wake-ups, refusals.

Real PgBouncers from ``bash scripts/servers start pgbouncer``: transaction mode on
127.0.0.1:6432 (``SONIQ_TEST_PGBOUNCER_URL``) and session mode on 6433
(``SONIQ_TEST_PGBOUNCER_SESSION_URL``), both in front of the test server.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
import pytest_asyncio

from soniq.errors import InvalidURLError, SoniqError
from soniq.params import ClaimJobsParams, EnqueueJobsParams, PrepareWorkerParams, WaitForJobsParams
from soniq.records import NewJob
from soniq_postgres import PostgresBackend
from soniq_postgres.pooling import PoolerModeError

pytestmark = pytest.mark.asyncio

PGBOUNCER_URL = os.environ.get("SONIQ_TEST_PGBOUNCER_URL", "postgresql://postgres@127.0.0.1:6432/test")
SESSION_URL = os.environ.get("SONIQ_TEST_PGBOUNCER_SESSION_URL", "postgresql://postgres@127.0.0.1:6433/test")
START_HINT = "start them with: bash scripts/servers start pgbouncer"


async def _reachable(url: str) -> str | None:
    try:
        connection = await asyncpg.connect(url, timeout=3, statement_cache_size=0)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    await connection.close()
    return None


async def _require(url: str) -> str:
    error = await _reachable(url)
    if error is not None:
        message = f"PgBouncer at {url} is unreachable ({error}); {START_HINT}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return url


@pytest_asyncio.fixture
async def bouncer_url() -> str:
    return await _require(PGBOUNCER_URL)


@pytest_asyncio.fixture
async def session_url() -> str:
    return await _require(SESSION_URL)


Made = Callable[..., Awaitable[PostgresBackend]]


@pytest_asyncio.fixture
async def make(pg_url: str) -> AsyncIterator[Made]:
    """Connected backends on one throwaway schema; any URL (direct or through a pooler)."""
    namespace = f"t_{uuid.uuid4().hex[:12]}"
    made: list[PostgresBackend] = []

    async def build(url: str, **options: object) -> PostgresBackend:
        backend = PostgresBackend.from_url(url, namespace=namespace, **options)
        made.append(backend)
        await backend.connect()
        return backend

    yield build
    cleaner = PostgresBackend.from_url(pg_url, namespace=namespace, pooling="direct")
    await cleaner.connect()
    await cleaner.drop_schema()
    await cleaner.close()
    for backend in made:
        await backend.close()


def _job() -> NewJob:
    return NewJob(
        id=str(uuid.uuid4()),
        job_name="t.job",
        args={},
        queue="default",
        priority=100,
        scheduled_at=datetime.now(UTC) - timedelta(seconds=1),
        max_attempts=3,
    )


# -- options (no server) --------------------------------------------------------


async def test_an_unknown_pooling_mode_is_refused_naming_the_option() -> None:
    with pytest.raises(InvalidURLError, match=r"option 'pooling' expects one of auto, direct, transaction"):
        PostgresBackend.from_url("postgresql://u@h/db?pooling=bouncer")


async def test_options_naming_two_wakeup_modes_are_refused() -> None:
    with pytest.raises(InvalidURLError, match="'listen_url' and 'listen=false' contradict"):
        PostgresBackend.from_url("postgresql://u@h/db", listen=False, listen_url="postgresql://u@h:5432/db")
    with pytest.raises(InvalidURLError, match="'pooling=transaction' and 'listen=true' contradict"):
        PostgresBackend.from_url("postgresql://u@h:6432/db?pooling=transaction&listen=true")


async def test_a_listen_url_that_is_not_postgresql_is_refused() -> None:
    with pytest.raises(InvalidURLError, match="option 'listen_url' expects a postgresql:// URL"):
        PostgresBackend.from_url("postgresql://u@h/db", listen_url="redis://h:6379/0")


async def test_the_listen_url_password_is_masked_in_the_repr() -> None:
    backend = PostgresBackend.from_url("postgresql://u@h:6432/db", listen_url="postgresql://u:hunter2@h:5432/db")
    assert "hunter2" not in repr(backend.options)
    assert backend.options.listen_dsn is not None


# -- detection ------------------------------------------------------------------


async def test_a_direct_server_keeps_the_statement_cache_and_listen(pg_url: str, make: Made) -> None:
    backend = await make(pg_url)
    assert backend.options.transaction_pooled is False
    assert backend.options.statement_cache_size == 100
    assert backend.capabilities.push_wakeup is True
    assert backend.capabilities.push_job_changes is True


async def test_transaction_pooling_is_detected_and_turns_off_what_it_breaks(bouncer_url: str, make: Made) -> None:
    backend = await make(bouncer_url)
    assert backend.options.transaction_pooled is True
    assert backend.options.statement_cache_size == 0
    assert backend.options.listen is False
    assert backend.capabilities.push_wakeup is False
    # No LISTEN behind the pooler: job changes are polled by core too.
    assert backend.capabilities.push_job_changes is False
    job = _job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
    claimed = await backend.claim_jobs(ClaimJobsParams(worker_id="w", queues=None, limit=5, mark_started=True))
    assert [row.id for row in claimed] == [job.id]


async def test_an_explicit_statement_cache_is_kept_behind_the_pooler(bouncer_url: str, make: Made) -> None:
    backend = await make(bouncer_url, pooling="transaction", statement_cache_size=0)
    assert backend.options.statement_cache_size == 0
    assert backend.options.transaction_pooled is True


async def test_listen_true_behind_a_detected_transaction_pooler_is_refused(bouncer_url: str) -> None:
    backend = PostgresBackend.from_url(bouncer_url, namespace="refused", listen=True)
    with pytest.raises(PoolerModeError, match="cannot hold a LISTEN; give listen_url="):
        await backend.connect()
    await backend.close()


@pytest.mark.parametrize("pooling", ["auto", "transaction"])
async def test_pgbouncer_in_session_mode_is_refused_at_start(session_url: str, pooling: str) -> None:
    backend = PostgresBackend.from_url(session_url, namespace="refused", pooling=pooling)
    with pytest.raises(PoolerModeError, match=r"PgBouncer at 127\.0\.0\.1:6433 pools database 'test' in session mode"):
        await backend.connect()
    await backend.close()


async def test_pooling_direct_skips_the_probe_even_in_front_of_a_session_pooler(session_url: str, make: Made) -> None:
    backend = await make(session_url, pooling="direct")
    assert backend.options.transaction_pooled is False


# -- wake-ups and the worker-start line -----------------------------------------


async def test_wakeups_come_from_the_direct_listen_url_through_the_pooler(
    pg_url: str, bouncer_url: str, make: Made
) -> None:
    waiter = await make(bouncer_url, listen_url=pg_url)
    producer = await make(bouncer_url)
    assert waiter.capabilities.push_wakeup is True
    await waiter.prepare_worker(PrepareWorkerParams(concurrency=2, prefetch=0))
    await waiter.wait_for_jobs(WaitForJobsParams(queues=None, timeout=0.01))
    started = time.monotonic()
    task = asyncio.create_task(waiter.wait_for_jobs(WaitForJobsParams(queues=None, timeout=60)))
    await asyncio.sleep(0.05)
    assert not task.done()
    # NOTIFY is sent through PgBouncer with the insert; LISTEN sits on the direct connection.
    await producer.enqueue_jobs(EnqueueJobsParams(jobs=[_job()]))
    await asyncio.wait_for(task, 30)
    assert time.monotonic() - started < 30  # woken by the notification, not the 60 s timeout


async def test_worker_start_says_how_wakeups_arrive_and_the_budget(
    bouncer_url: str, make: Made, caplog: pytest.LogCaptureFixture
) -> None:
    backend = await make(bouncer_url, max_size=6)
    with caplog.at_level(logging.INFO, logger="soniq_postgres"):
        await backend.prepare_worker(PrepareWorkerParams(concurrency=4, prefetch=0))
    line = next(record.getMessage() for record in caplog.records if "connection budget" in record.getMessage())
    assert "through a transaction pooler" in line
    assert "wake-ups by polling (no listen_url given)" in line
    assert "connection budget 6 (pool of 6 for concurrency=4)" in line
    assert backend.connection_budget == 6


async def test_a_budget_the_server_can_never_grant_is_refused_at_worker_start(pg_url: str, make: Made) -> None:
    backend = await make(pg_url, max_size=5000)
    with pytest.raises(SoniqError, match=r"needs up to 5001 connections .* but the server allows \d+"):
        await backend.prepare_worker(PrepareWorkerParams(concurrency=4, prefetch=0))
