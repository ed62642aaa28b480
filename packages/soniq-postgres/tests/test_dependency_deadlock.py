"""An enqueue with dependencies and a terminal write resolving the same chain can deadlock in
PostgreSQL; the backend retries the loser, so the producer never sees the driver's deadlock."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import asyncpg
import pytest

from soniq.params import EnqueueJobsParams, GetJobParams
from soniq.records import NewJob
from soniq_postgres import PostgresBackend

pytestmark = pytest.mark.asyncio


async def test_an_enqueue_chosen_as_a_deadlock_victim_is_run_again_and_stored(
    backend: PostgresBackend,
    raw: asyncpg.Connection,
    pg_url: str,
    namespace: str,
    make_job: Callable[..., NewJob],
    wait_until: Callable[..., Awaitable[None]],
) -> None:
    # The enqueue locks its dependencies in id order: the child ("a") before the parent ("b").
    parent = make_job(id=f"{namespace}-b-parent")
    child = make_job(id=f"{namespace}-a-child", depends_on=(parent.id,))
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[parent, child]))
    table = f'"{namespace}".soniq_jobs'
    watcher = await asyncpg.connect(pg_url)
    try:
        # The other side stands for a completion of the parent that then resolves the child: it holds
        # the parent's row, and waits for the child's only once the enqueue waits for the parent's.
        # Its own deadlock check comes late, so PostgreSQL picks the enqueue as the victim.
        await raw.execute("SET deadlock_timeout = '20s'")
        transaction = raw.transaction()
        await transaction.start()
        await raw.execute(f"UPDATE {table} SET updated_at = now() WHERE id = $1", parent.id)
        grandchild = make_job(depends_on=(child.id, parent.id))
        enqueue = asyncio.create_task(backend.enqueue_jobs(EnqueueJobsParams(jobs=[grandchild])))

        async def enqueue_waits_for_a_row_lock() -> bool:
            waiting = await watcher.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND pid <> $1 "
                "AND query LIKE '%has_dependents = true%'",
                raw.get_server_pid(),
            )
            return bool(waiting)

        await wait_until(enqueue_waits_for_a_row_lock, within=10, what="the enqueue waits for the parent's row lock")
        await raw.execute(f"UPDATE {table} SET updated_at = now() WHERE id = $1", child.id)
        await transaction.commit()

        stored_ids = await asyncio.wait_for(enqueue, timeout=30)
    finally:
        await watcher.close()

    assert stored_ids is None or stored_ids == [grandchild.id]
    row = await backend.get_job(GetJobParams(job_id=grandchild.id))
    assert row is not None
    assert (row.status.value, row.waiting_on) == ("queued", 2)
