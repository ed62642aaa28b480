"""Pruning on PostgreSQL: the delete walks the partial index on `expires_at`, skips rows a worker
holds locked, and never touches an unfinished row whatever its `expires_at` says."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from soniq.params import GetJobParams, PruneJobsParams
from soniq_postgres import PostgresBackend

pytestmark = pytest.mark.asyncio

ROWS = 20_000


async def _fill(raw: asyncpg.Connection, namespace: str, *, expired: int, unexpired: int) -> None:
    """Finished rows, `expired` of them past `expires_at`, plus queued rows without it (the claim backlog)."""
    await raw.execute(
        f"""
INSERT INTO "{namespace}".soniq_jobs (id, job_name, status, queue, expires_at, updated_at)
SELECT 'done-' || g, 'app.job', 'done', 'default',
       CASE WHEN g <= $1::int THEN now() - interval '1 hour' ELSE now() + interval '1 day' END, now()
FROM generate_series(1, $1::int + $2::int) AS g""",
        expired,
        unexpired,
    )
    await raw.execute(
        f"""
INSERT INTO "{namespace}".soniq_jobs (id, job_name, status, queue)
SELECT 'queued-' || g, 'app.job', 'queued', 'default' FROM generate_series(1, $1::int) AS g""",
        unexpired,
    )
    await raw.execute(f'ANALYZE "{namespace}".soniq_jobs')


async def test_the_prune_delete_uses_the_partial_expires_index(
    backend: PostgresBackend, raw: asyncpg.Connection, namespace: str
) -> None:
    await backend.setup()
    await _fill(raw, namespace, expired=200, unexpired=ROWS)
    sql = backend._schedule_sql.prune_jobs  # the statement prune_jobs runs
    plan = await raw.fetchval(f"EXPLAIN (FORMAT JSON) {sql}", datetime.now(UTC), 100)
    text = json.dumps(json.loads(plan) if isinstance(plan, str) else plan)
    assert "soniq_jobs_expires_idx" in text, f"the prune plan does not use the partial index: {text}"
    assert '"Seq Scan"' not in text, f"the prune plan scans the table: {text}"
    assert await backend.prune_jobs(PruneJobsParams(limit=150)) == 150
    assert await backend.prune_jobs(PruneJobsParams(limit=150)) == 50


async def test_unfinished_rows_with_a_past_expires_at_are_never_pruned(
    backend: PostgresBackend, raw: asyncpg.Connection, namespace: str
) -> None:
    await backend.setup()
    past = datetime.now(UTC) - timedelta(hours=1)
    for job_id, status, worker in (("q1", "queued", None), ("p1", "processing", "w1"), ("d1", "done", None)):
        await raw.execute(
            f'INSERT INTO "{namespace}".soniq_jobs (id, job_name, status, queue, worker_id, expires_at) '
            "VALUES ($1, 'app.job', $2, 'default', $3, $4)",
            job_id,
            status,
            worker,
            past,
        )
    assert await backend.prune_jobs(PruneJobsParams(limit=100)) == 1
    assert await backend.get_job(GetJobParams("d1")) is None
    for job_id in ("q1", "p1"):
        row = await backend.get_job(GetJobParams(job_id))
        assert row is not None
        assert row.expires_at == past


async def test_prune_skips_a_row_locked_by_another_transaction_instead_of_waiting(
    backend: PostgresBackend, raw: asyncpg.Connection, pg_url: str, namespace: str
) -> None:
    await backend.setup()
    await _fill(raw, namespace, expired=3, unexpired=0)
    holder = await asyncpg.connect(pg_url)
    try:
        async with holder.transaction():
            await holder.execute(f"SELECT 1 FROM \"{namespace}\".soniq_jobs WHERE id = 'done-1' FOR UPDATE")
            deleted = await asyncio.wait_for(backend.prune_jobs(PruneJobsParams(limit=10)), timeout=5)
            assert deleted == 2
        assert await backend.prune_jobs(PruneJobsParams(limit=10)) == 1
    finally:
        await holder.close()
