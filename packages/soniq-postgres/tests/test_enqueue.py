"""Producers: transactional enqueue on the caller's connection, bulk by COPY with one NOTIFY."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import asyncpg
import pytest

from soniq.params import ClaimJobsParams, EnqueueJobsParams, GetJobParams, QueueStatsParams
from soniq.records import JobStatus, NewJob
from soniq_postgres import PostgresBackend

pytestmark = pytest.mark.asyncio


async def test_capabilities(backend: PostgresBackend) -> None:
    assert backend.capabilities.transactional_enqueue
    assert backend.capabilities.push_wakeup
    assert backend.capabilities.shared_across_processes


async def test_transactional_enqueue_commits_with_the_callers_transaction(
    backend: PostgresBackend, raw: asyncpg.Connection, make_job: Callable[..., NewJob]
) -> None:
    job = make_job(args={"order": 42})
    async with raw.transaction():
        await raw.execute("CREATE TEMP TABLE orders (id int)")
        await raw.execute("INSERT INTO orders VALUES (42)")
        await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job], connection=raw))
        # Not visible to the backend's own pool until the caller commits.
        assert await backend.get_job(GetJobParams(job_id=job.id)) is None
    record = await backend.get_job(GetJobParams(job_id=job.id))
    assert record is not None
    assert record.status is JobStatus.QUEUED
    assert record.args == {"order": 42}
    assert record.attempts == 0


async def test_transactional_enqueue_rollback_means_the_job_never_existed(
    backend: PostgresBackend, raw: asyncpg.Connection, make_job: Callable[..., NewJob]
) -> None:
    job = make_job()

    class AbortError(Exception):
        pass

    async def place_order_then_fail() -> None:
        async with raw.transaction():
            await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job], connection=raw))
            raise AbortError

    with pytest.raises(AbortError):
        await place_order_then_fail()
    assert await backend.get_job(GetJobParams(job_id=job.id)) is None
    assert (await backend.queue_stats(QueueStatsParams())).total == 0


async def test_bulk_enqueue_is_one_copy_and_one_notify(
    backend: PostgresBackend, raw: asyncpg.Connection, make_job: Callable[..., NewJob]
) -> None:
    jobs = [make_job(args={"i": i}, queue="bulk" if i % 2 else "default") for i in range(5_000)]
    # The first statement on a connection also makes asyncpg look up column
    # types once; warm that cache so only the enqueue itself is counted.
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[make_job(queue="warm-up")], connection=raw))
    statements: list[str] = []
    raw.add_query_logger(lambda record: statements.append(record.query))
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=jobs, connection=raw))
    await asyncio.sleep(0)  # asyncpg hands query records to loggers in a task of their own
    # COPY is not a logged query: the rows go in one COPY, and the batch sends exactly one NOTIFY.
    assert len(statements) == 1
    assert "pg_notify" in statements[0]
    assert "INSERT" not in statements[0]

    stats = await backend.queue_stats(QueueStatsParams())
    assert stats.queued == 5_001
    assert (await backend.queue_stats(QueueStatsParams(queue="bulk"))).queued == 2_500
    first = await backend.claim_jobs(ClaimJobsParams(worker_id="w", queues=["default"], limit=2, mark_started=False))
    assert [job.args for job in first] == [{"i": 0}, {"i": 2}]


async def test_a_batch_with_one_schedule_is_claimed_in_list_order(
    backend: PostgresBackend, make_job: Callable[..., NewJob]
) -> None:
    first = make_job()
    jobs = [first] + [make_job(scheduled_at=first.scheduled_at) for _ in range(20)]
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=jobs))
    claimed = await backend.claim_jobs(ClaimJobsParams(worker_id="w", queues=None, limit=50, mark_started=False))
    assert [job.id for job in claimed] == [job.id for job in jobs]


async def test_bulk_enqueue_is_all_or_none(backend: PostgresBackend, make_job: Callable[..., NewJob]) -> None:
    existing = make_job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[existing]))
    batch = [make_job() for _ in range(50)] + [make_job(id=existing.id)]
    with pytest.raises(asyncpg.UniqueViolationError):
        await backend.enqueue_jobs(EnqueueJobsParams(jobs=batch))
    assert (await backend.queue_stats(QueueStatsParams())).total == 1


async def test_job_fields_round_trip(backend: PostgresBackend, make_job: Callable[..., NewJob]) -> None:
    job = make_job(
        job_name="mail.send",
        args={"to": "ü@example.org", "n": [1, 2.5, None]},
        queue="mail",
        priority=5,
        max_attempts=4,
        trace_context={"traceparent": "00-abc-def-01"},
    )
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
    record = await backend.get_job(GetJobParams(job_id=job.id))
    assert record is not None
    assert (record.job_name, record.args, record.queue, record.priority, record.max_attempts) == (
        "mail.send",
        {"to": "ü@example.org", "n": [1, 2.5, None]},
        "mail",
        5,
        4,
    )
    assert record.trace_context == {"traceparent": "00-abc-def-01"}
    assert record.scheduled_at == job.scheduled_at
    assert record.created_at.tzinfo is not None
    assert record.result is None
