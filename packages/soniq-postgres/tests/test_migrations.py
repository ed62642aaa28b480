"""Schema creation: versioned, recorded once, safe to race, enforced by the store."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable

import asyncpg
import pytest

from soniq.params import EnqueueJobsParams, GetJobParams, QueueStatsParams
from soniq.records import NewJob
from soniq_postgres import LATEST_VERSION, MIGRATIONS, PostgresBackend

pytestmark = pytest.mark.asyncio

SETUP_SCRIPT = """
import asyncio, sys
from soniq_postgres import PostgresBackend

async def main():
    backend = PostgresBackend.from_url(sys.argv[1], namespace=sys.argv[2])
    await backend.setup()
    await backend.close()

asyncio.run(main())
"""


async def _versions(raw: asyncpg.Connection, namespace: str) -> list[int]:
    rows = await raw.fetch(f'SELECT version FROM "{namespace}".soniq_migrations ORDER BY version')
    return [row["version"] for row in rows]


async def test_connect_creates_the_schema_and_records_each_migration_once(
    make_backend: Callable[..., Awaitable[PostgresBackend]], raw: asyncpg.Connection, namespace: str
) -> None:
    backend = await make_backend()
    await backend.setup()
    await backend.setup()
    again = await make_backend()
    await again.setup()

    assert await _versions(raw, namespace) == [m.version for m in MIGRATIONS]
    assert MIGRATIONS[-1].version == LATEST_VERSION
    tables = await raw.fetch("SELECT table_name FROM information_schema.tables WHERE table_schema = $1", namespace)
    assert {"soniq_jobs", "soniq_dead_letter_jobs", "soniq_workers", "soniq_migrations"} <= {
        row["table_name"] for row in tables
    }


async def test_concurrent_setup_from_several_processes(pg_url: str, raw: asyncpg.Connection, namespace: str) -> None:
    processes = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-c", SETUP_SCRIPT, pg_url, namespace, stderr=asyncio.subprocess.PIPE
        )
        for _ in range(5)
    ]
    try:
        outcomes = [(await p.wait(), (await p.stderr.read()).decode() if p.stderr else "") for p in processes]
        assert [code for code, _ in outcomes] == [0] * 5, [err for _, err in outcomes]
        assert await _versions(raw, namespace) == [m.version for m in MIGRATIONS]
    finally:
        await raw.execute(f'DROP SCHEMA IF EXISTS "{namespace}" CASCADE')


async def test_check_constraint_rejects_an_unknown_status(
    backend: PostgresBackend, raw: asyncpg.Connection, namespace: str
) -> None:
    with pytest.raises(asyncpg.CheckViolationError):
        await raw.execute(f"INSERT INTO \"{namespace}\".soniq_jobs (id, job_name, status) VALUES ('x', 'j', 'failed')")


async def test_check_constraint_rejects_updating_a_row_to_an_unknown_status(
    backend: PostgresBackend, raw: asyncpg.Connection, namespace: str, make_job: Callable[..., NewJob]
) -> None:
    job = make_job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
    with pytest.raises(asyncpg.CheckViolationError):
        await raw.execute(f"UPDATE \"{namespace}\".soniq_jobs SET status = 'failed' WHERE id = $1", job.id)
    record = await backend.get_job(GetJobParams(job_id=job.id))
    assert record is not None
    assert record.status.value == "queued"


async def test_drop_schema_removes_everything_and_setup_restores_it(
    backend: PostgresBackend, raw: asyncpg.Connection, namespace: str, make_job: Callable[..., NewJob]
) -> None:
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[make_job()]))
    await backend.drop_schema()
    assert await raw.fetchval("SELECT count(*) FROM pg_namespace WHERE nspname = $1", namespace) == 0

    await backend.setup()
    assert (await backend.queue_stats(QueueStatsParams())).total == 0
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[make_job()]))
    assert (await backend.queue_stats(QueueStatsParams())).queued == 1
