"""Stale-worker recovery on PostgreSQL: one sweeper at a time, rows settled by the rules."""

from __future__ import annotations

from collections.abc import Callable

import asyncpg
import pytest

from soniq.records import JobStatus, NewJob, StaleJobPolicy, WorkerInfo, WorkerStatus
from soniq_postgres import PostgresBackend
from soniq_postgres.migrations import RECOVERY_LOCK

pytestmark = pytest.mark.asyncio


async def _age_worker(raw: asyncpg.Connection, namespace: str, worker_id: str, seconds: int) -> None:
    await raw.execute(
        f'UPDATE "{namespace}".soniq_workers SET last_heartbeat = now() - make_interval(secs => $2) WHERE id = $1',
        worker_id,
        seconds,
    )


async def _register(backend: PostgresBackend, worker_id: str) -> None:
    await backend.register_worker(
        worker=WorkerInfo(id=worker_id, hostname="host", pid=1234, queues=("default",), concurrency=2)
    )


async def test_sweep_is_skipped_while_another_holds_the_lock(
    backend: PostgresBackend, raw: asyncpg.Connection, namespace: str
) -> None:
    async with raw.transaction():
        await raw.execute("SELECT pg_advisory_xact_lock($1, hashtext($2))", RECOVERY_LOCK, namespace)
        result = await backend.recover_stale_workers(heartbeat_timeout=60, policy=StaleJobPolicy.REQUEUE)
    assert result.skipped
    assert not (await backend.recover_stale_workers(heartbeat_timeout=60, policy=StaleJobPolicy.REQUEUE)).skipped


async def test_stale_rows_are_settled_by_whether_the_handler_started(
    backend: PostgresBackend, raw: asyncpg.Connection, namespace: str, make_job: Callable[..., NewJob]
) -> None:
    never, started, last_try, live = make_job(), make_job(), make_job(max_attempts=1), make_job()
    await backend.enqueue_jobs(jobs=[never, started, last_try, live])
    await _register(backend, "dead")
    await _register(backend, "alive")
    await backend.claim_jobs(worker_id="dead", queues=None, limit=1, mark_started=False)
    await backend.claim_jobs(worker_id="dead", queues=None, limit=2, mark_started=True)
    await backend.claim_jobs(worker_id="alive", queues=None, limit=1, mark_started=True)
    await _age_worker(raw, namespace, "dead", 120)

    result = await backend.recover_stale_workers(heartbeat_timeout=60, policy=StaleJobPolicy.REQUEUE)
    assert result.stale_workers == ("dead",)
    assert set(result.requeued) == {never.id, started.id}
    assert result.dead_lettered == (last_try.id,)

    never_row, started_row, live_row = (
        await backend.get_job(job_id=never.id),
        await backend.get_job(job_id=started.id),
        await backend.get_job(job_id=live.id),
    )
    assert never_row is not None
    assert never_row.status is JobStatus.QUEUED
    assert never_row.attempts == 0
    assert started_row is not None
    assert started_row.status is JobStatus.QUEUED
    assert started_row.attempts == 1
    assert started_row.last_error is not None
    assert "dead" in started_row.last_error
    assert live_row is not None
    assert live_row.status is JobStatus.PROCESSING
    assert live_row.worker_id == "alive"
    dead_row = await backend.get_dead_letter(job_id=last_try.id)
    assert dead_row is not None
    assert dead_row.dead_letter_reason == "worker_lost"
    assert dead_row.attempts == 1
    workers = {w.id: w.status for w in await backend.list_workers()}
    assert workers == {"dead": WorkerStatus.STOPPED, "alive": WorkerStatus.ACTIVE}
    assert await backend.heartbeat(worker_id="dead") is False
    assert await backend.heartbeat(worker_id="alive") is True


async def test_zombie_policy_dead_letters_only_started_rows(
    backend: PostgresBackend, raw: asyncpg.Connection, namespace: str, make_job: Callable[..., NewJob]
) -> None:
    never, started = make_job(), make_job()
    await backend.enqueue_jobs(jobs=[never, started])
    await _register(backend, "dead")
    await backend.claim_jobs(worker_id="dead", queues=None, limit=1, mark_started=False)
    await backend.claim_jobs(worker_id="dead", queues=None, limit=1, mark_started=True)
    await _age_worker(raw, namespace, "dead", 120)

    result = await backend.recover_stale_workers(heartbeat_timeout=60, policy=StaleJobPolicy.DEAD_LETTER)
    assert result.requeued == (never.id,)
    assert result.dead_lettered == (started.id,)
    zombie = await backend.get_dead_letter(job_id=started.id)
    assert zombie is not None
    assert zombie.dead_letter_reason == "zombie"
    assert await backend.get_job(job_id=started.id) is None


async def test_rows_of_an_unregistered_worker_are_recovered_once_old(
    backend: PostgresBackend, raw: asyncpg.Connection, namespace: str, make_job: Callable[..., NewJob]
) -> None:
    job = make_job()
    await backend.enqueue_jobs(jobs=[job])
    await backend.claim_jobs(worker_id="ghost", queues=None, limit=1, mark_started=False)
    fresh = await backend.recover_stale_workers(heartbeat_timeout=60, policy=StaleJobPolicy.REQUEUE)
    assert fresh.requeued == ()
    await raw.execute(
        f"UPDATE \"{namespace}\".soniq_jobs SET updated_at = now() - interval '2 minutes' WHERE id = $1", job.id
    )
    old = await backend.recover_stale_workers(heartbeat_timeout=60, policy=StaleJobPolicy.REQUEUE)
    assert old.requeued == (job.id,)
