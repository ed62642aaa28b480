"""Dependencies, limits, cancel requests and job changes on PostgreSQL: migration 6 on an existing
database, the claim index that leaves blocked rows out, the dependency race with a terminal write,
and job changes only for watched rows."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import pytest

from soniq.errors import UnknownDependencyError
from soniq.params import (
    ClaimJobsParams,
    CompleteJobsParams,
    EnqueueJobsParams,
    GetJobParams,
    JobResult,
    RequestCancelParams,
    WaitForJobChangesParams,
    WatchJobsParams,
)
from soniq.records import CancelOutcome, JobStatus, NewJob
from soniq_postgres import LATEST_VERSION, MIGRATIONS, PostgresBackend
from soniq_postgres.queries import Queries

pytestmark = pytest.mark.asyncio

Make = Callable[..., Awaitable[PostgresBackend]]


async def _claim(backend: PostgresBackend, worker: str = "w", limit: int = 10) -> list[str]:
    rows = await backend.claim_jobs(ClaimJobsParams(worker_id=worker, queues=None, limit=limit, mark_started=True))
    return [row.id for row in rows]


async def test_migration_6_upgrades_a_version_5_database_keeping_its_rows(
    make_backend: Make, raw: asyncpg.Connection, namespace: str
) -> None:
    quoted = f'"{namespace}"'
    await raw.execute(f"CREATE SCHEMA {quoted}")
    await raw.execute(
        f"CREATE TABLE {quoted}.soniq_migrations (version integer PRIMARY KEY, name text NOT NULL, "
        "applied_at timestamptz NOT NULL DEFAULT now())"
    )
    for migration in MIGRATIONS[:5]:
        await raw.execute(migration.sql.format(schema=quoted))
        await raw.execute(
            f"INSERT INTO {quoted}.soniq_migrations (version, name) VALUES ($1, $2)", migration.version, migration.name
        )
    await raw.execute(
        f"INSERT INTO {quoted}.soniq_jobs (id, job_name, queue, status, worker_id) "
        "VALUES ('old-queued', 'app.old', 'default', 'queued', NULL), ('old-running', 'app.old', 'default', "
        "'processing', 'w-old')"
    )

    backend = await make_backend()

    status = await backend.schema_status()
    assert status.up_to_date
    assert status.current_version == LATEST_VERSION
    old = await backend.get_job(GetJobParams("old-queued"))
    assert old is not None
    assert (old.depends_on, old.waiting_on, old.dependency_policy.value, old.limit_key, old.cancel_requested) == (
        (),
        0,
        "cancel",
        None,
        False,
    )
    assert await _claim(backend) == ["old-queued"]
    assert await backend.request_cancel(RequestCancelParams("old-running")) is CancelOutcome.REQUESTED
    indexes = {
        row["indexname"]: row["indexdef"]
        for row in await raw.fetch("SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = $1", namespace)
    }
    for name in ("soniq_jobs_claim_queue_idx", "soniq_jobs_claim_any_idx"):
        assert "waiting_on = 0" in indexes[name], indexes[name]
    assert {"soniq_jobs_running_queue_idx", "soniq_jobs_running_name_idx"} <= set(indexes)
    tables = {
        row["table_name"]
        for row in await raw.fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = $1", namespace
        )
    }
    assert {"soniq_job_dependencies", "soniq_rate_windows"} <= tables
    with pytest.raises(asyncpg.CheckViolationError):
        await raw.execute(f"UPDATE {quoted}.soniq_jobs SET dependency_policy = 'maybe' WHERE id = 'old-queued'")


async def test_the_claim_reads_only_claimable_rows_past_a_blocked_backlog(
    backend: PostgresBackend, raw: asyncpg.Connection, namespace: str
) -> None:
    # 50,000 blocked rows come first in claim order, 50,000 claimable ones after them.
    await raw.execute(
        f"""INSERT INTO "{namespace}".soniq_jobs (id, job_name, queue, priority, scheduled_at, max_attempts,
                                                 waiting_on)
            SELECT 'bulk-' || g, 'tests.noop', 'default', CASE WHEN g <= 50000 THEN 1 ELSE 2 END,
                   now() - interval '1 minute', 3, CASE WHEN g <= 50000 THEN 1 ELSE 0 END
            FROM generate_series(1, 100000) AS g"""
    )
    await raw.execute(f'ANALYZE "{namespace}".soniq_jobs')
    sql = Queries(namespace).claim(queue_count=None)
    transaction = raw.transaction()
    await transaction.start()
    try:  # ANALYZE runs the claim: roll it back
        explained = await raw.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", "w", 10, True)
    finally:
        await transaction.rollback()
    plan = json.loads(explained)[0]["Plan"]
    scans = [node for node in _nodes(plan) if node.get("Index Name") == "soniq_jobs_claim_any_idx"]
    assert len(scans) == 1, plan
    # The index holds no blocked row: the scan reads the ten rows it returns, not 50,000 first.
    assert scans[0]["Actual Rows"] == 10
    assert scans[0].get("Rows Removed by Filter", 0) == 0
    assert not {"Sort", "Seq Scan"} & {node["Node Type"] for node in _nodes(plan)}


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    found = [plan]
    for child in plan.get("Plans", []):
        found += _nodes(child)
    return found


async def test_a_dependency_completed_while_an_enqueue_holds_it_still_resolves(
    make_backend: Make, pg_url: str, namespace: str, make_job: Callable[..., NewJob]
) -> None:
    """The enqueue flags the running dependency inside a transaction that stays open; the
    completion waits for it, then finds the flag and resolves the dependent it committed."""
    backend = await make_backend()
    dependency = make_job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[dependency]))
    assert await _claim(backend, "w1") == [dependency.id]
    dependent = make_job(depends_on=(dependency.id,))

    caller = await asyncpg.connect(pg_url)
    try:
        transaction = caller.transaction()
        await transaction.start()
        await backend.enqueue_jobs(EnqueueJobsParams(jobs=[dependent], connection=caller))
        completing = asyncio.create_task(
            backend.complete_jobs(CompleteJobsParams(worker_id="w1", results=[JobResult(dependency.id, 1)]))
        )
        await asyncio.sleep(0.3)
        assert not completing.done(), "the completion should wait for the enqueue's lock on the dependency"
        await transaction.commit()
        assert await asyncio.wait_for(completing, 10) == {dependency.id}
    finally:
        await caller.close()

    row = await backend.get_job(GetJobParams(dependent.id))
    assert row is not None
    assert (row.status, row.waiting_on) == (JobStatus.QUEUED, 0)
    assert await _claim(backend, "w2") == [dependent.id]


async def test_an_unknown_dependency_inside_the_callers_transaction_leaves_it_usable(
    backend: PostgresBackend, pg_url: str, make_job: Callable[..., NewJob]
) -> None:
    caller = await asyncpg.connect(pg_url)
    try:
        async with caller.transaction():
            with pytest.raises(UnknownDependencyError) as raised:
                await backend.enqueue_jobs(EnqueueJobsParams(jobs=[make_job(depends_on=("nope",))], connection=caller))
            assert raised.value.missing == ("nope",)
            assert await caller.fetchval("SELECT 41 + 1") == 42
    finally:
        await caller.close()
    assert await backend.get_job(GetJobParams("nope")) is None


async def test_job_changes_are_published_for_watched_rows_and_cancel_requests_only(
    backend: PostgresBackend, raw: asyncpg.Connection, make_job: Callable[..., NewJob]
) -> None:
    heard: list[str] = []
    channel = backend.options.changes_channel
    marker = asyncio.Event()

    def on_change(_connection: Any, _pid: int, _channel: str, payload: str) -> None:
        if payload == "--marker--":
            marker.set()
        else:
            heard.append(payload)

    await raw.add_listener(channel, on_change)
    watched, unwatched, running = make_job(), make_job(), make_job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[watched, unwatched, running]))
    await backend.watch_jobs(WatchJobsParams([watched.id]))
    assert sorted(await _claim(backend, "w1")) == sorted([watched.id, unwatched.id, running.id])
    results = [JobResult(watched.id, None), JobResult(unwatched.id, None)]
    assert await backend.complete_jobs(CompleteJobsParams(worker_id="w1", results=results)) == {
        watched.id,
        unwatched.id,
    }
    assert await backend.request_cancel(RequestCancelParams(running.id)) is CancelOutcome.REQUESTED
    # Notifications arrive in commit order: once the marker is heard, every earlier one was.
    await raw.execute("SELECT pg_notify($1, '--marker--')", channel)
    await asyncio.wait_for(marker.wait(), 10)
    assert heard == [watched.id, running.id]


async def test_a_change_published_before_the_wait_is_not_lost(
    make_backend: Make, make_job: Callable[..., NewJob]
) -> None:
    waiter, worker = await make_backend(), await make_backend()
    job = make_job()
    await worker.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
    # Start the listener, then finish the watched job while nobody waits for it.
    assert await waiter.wait_for_job_changes(WaitForJobChangesParams([job.id], timeout=0.05)) == set()
    await waiter.watch_jobs(WatchJobsParams([job.id]))
    assert await _claim(worker) == [job.id]
    await worker.complete_jobs(CompleteJobsParams(worker_id="w", results=[JobResult(job.id, None)]))
    loop = asyncio.get_running_loop()
    started = loop.time()
    changed = None
    while loop.time() - started < 10 and not changed:
        changed = await waiter.wait_for_job_changes(WaitForJobChangesParams([job.id], timeout=10))
    assert changed == {job.id}


async def test_without_listen_there_is_no_push_and_watching_writes_nothing(
    make_backend: Make, raw: asyncpg.Connection, namespace: str, make_job: Callable[..., NewJob]
) -> None:
    backend = await make_backend(listen=False)
    assert backend.capabilities.push_job_changes is False
    job = make_job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
    await backend.watch_jobs(WatchJobsParams([job.id]))
    assert await raw.fetchval(f'SELECT watched FROM "{namespace}".soniq_jobs WHERE id = $1', job.id) is False
    assert await backend.wait_for_job_changes(WaitForJobChangesParams([job.id], timeout=0.05)) is None
