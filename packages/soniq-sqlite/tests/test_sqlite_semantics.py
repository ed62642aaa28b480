"""SQLite-specific details of the stored rows: clocks, wake-ups, orphan recovery."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone

import pytest

from soniq.params import (
    ClaimJobsParams,
    CompleteJobsParams,
    DeadLetterPageParams,
    EnqueueJobsParams,
    FindStaleJobsParams,
    GetJobParams,
    JobResult,
    NackJobParams,
    QueueStatsParams,
    RegisterWorkerParams,
    RescueJobsParams,
    WaitForJobsParams,
)
from soniq.records import JobStatus, NewJob, StaleJobPolicy, WorkerInfo
from soniq.rescue import decide_rescue, lost_worker_error, sweep_stale_workers
from soniq_sqlite import SQLiteBackend

JobFactory = Callable[..., NewJob]

pytestmark = pytest.mark.asyncio


async def test_timestamps_round_trip_to_the_microsecond_as_aware_utc(
    make_job: JobFactory, backend: SQLiteBackend
) -> None:
    when = datetime(2031, 5, 6, 7, 8, 9, 123457, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    job = make_job(scheduled_at=when)
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
    stored = await backend.get_job(GetJobParams(job_id=job.id))
    assert stored is not None
    assert stored.scheduled_at == when
    assert stored.scheduled_at.tzinfo == UTC
    assert stored.created_at.tzinfo == UTC
    assert stored.updated_at.tzinfo == UTC


async def test_a_batch_is_claimed_in_the_order_it_was_given(make_job: JobFactory, backend: SQLiteBackend) -> None:
    scheduled = datetime.now(UTC) - timedelta(seconds=1)
    jobs = [make_job(scheduled_at=scheduled) for _ in range(20)]
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=jobs))
    claimed = await backend.claim_jobs(ClaimJobsParams(worker_id="w", queues=None, limit=20, mark_started=False))
    assert [row.id for row in claimed] == [job.id for job in jobs]


async def test_a_failed_batch_inserts_nothing(make_job: JobFactory, backend: SQLiteBackend) -> None:
    first = make_job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[first]))
    fresh = make_job()
    with pytest.raises(sqlite3.IntegrityError):
        await backend.enqueue_jobs(EnqueueJobsParams(jobs=[fresh, first]))
    assert await backend.get_job(GetJobParams(job_id=fresh.id)) is None
    assert (await backend.queue_stats(QueueStatsParams())).total == 1


async def test_an_insert_through_this_instance_wakes_its_waiters(make_job: JobFactory, backend: SQLiteBackend) -> None:
    waiter = asyncio.ensure_future(backend.wait_for_jobs(WaitForJobsParams(queues=["emails"], timeout=60)))
    other = asyncio.ensure_future(backend.wait_for_jobs(WaitForJobsParams(queues=["reports"], timeout=60)))
    await asyncio.sleep(0)
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[make_job(queue="emails")]))
    await asyncio.wait_for(waiter, timeout=10)
    assert not other.done()
    other.cancel()


async def test_a_nack_wakes_waiters_of_that_queue(make_job: JobFactory, backend: SQLiteBackend) -> None:
    job = make_job(queue="q")
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
    await backend.claim_jobs(ClaimJobsParams(worker_id="w", queues=["q"], limit=1, mark_started=False))
    waiter = asyncio.ensure_future(backend.wait_for_jobs(WaitForJobsParams(queues=None, timeout=60)))
    await asyncio.sleep(0)
    assert await backend.nack_job(NackJobParams(job_id=job.id, worker_id="w"))
    await asyncio.wait_for(waiter, timeout=10)


async def test_orphan_rows_are_recovered_once_silent_for_the_timeout(
    make_job: JobFactory, backend: SQLiteBackend, raw: sqlite3.Connection
) -> None:
    live, orphan_fresh, orphan_old = make_job(), make_job(), make_job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[live, orphan_fresh, orphan_old]))
    await backend.register_worker(
        RegisterWorkerParams(worker=WorkerInfo(id="alive", hostname="h", pid=1, queues=None, concurrency=1))
    )
    for job, owner in ((live, "alive"), (orphan_fresh, "ghost-1"), (orphan_old, "ghost-2")):
        raw.execute(
            "UPDATE soniq_jobs SET status = 'processing', worker_id = ?, started_at = updated_at WHERE id = ?",
            (owner, job.id),
        )
    hour_ago = int((datetime.now(UTC) - timedelta(hours=1)).timestamp() * 1_000_000)
    raw.execute("UPDATE soniq_jobs SET updated_at = ? WHERE id IN (?, ?)", (hour_ago, live.id, orphan_old.id))

    result = await sweep_stale_workers(backend, heartbeat_timeout=60, policy=StaleJobPolicy.REQUEUE)

    assert result.stale_workers == ()
    assert result.requeued == (orphan_old.id,)
    recovered = await backend.get_job(GetJobParams(job_id=orphan_old.id))
    assert recovered is not None
    assert recovered.status is JobStatus.QUEUED
    assert recovered.attempts == 1
    assert recovered.worker_id is None
    assert recovered.last_error == lost_worker_error("ghost-2", 60)
    for untouched in (live, orphan_fresh):
        row = await backend.get_job(GetJobParams(job_id=untouched.id))
        assert row is not None
        assert row.status is JobStatus.PROCESSING


async def test_a_rescue_batch_is_one_transaction(
    make_job: JobFactory, backend: SQLiteBackend, raw: sqlite3.Connection
) -> None:
    jobs = [make_job() for _ in range(3)]
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=jobs))
    await backend.register_worker(
        RegisterWorkerParams(worker=WorkerInfo(id="old", hostname="h", pid=1, queues=None, concurrency=3))
    )
    await backend.claim_jobs(ClaimJobsParams(worker_id="old", queues=None, limit=3, mark_started=True))
    raw.execute("UPDATE soniq_workers SET last_heartbeat = 0")
    scan = await backend.find_stale_jobs(FindStaleJobsParams(heartbeat_timeout=5))
    assert scan.stale_workers == ("old",)
    rescues = [decide_rescue(row, policy=StaleJobPolicy.DEAD_LETTER, heartbeat_timeout=5) for row in scan.orphaned]
    # A failing statement inside the batch must roll every earlier rescue back.
    raw.execute(
        "CREATE TRIGGER refuse_dead_letter BEFORE INSERT ON soniq_dead_letter_jobs "
        f"WHEN NEW.id = '{scan.orphaned[-1].id}' BEGIN SELECT RAISE(ABORT, 'no dead letters today'); END"
    )
    with pytest.raises(sqlite3.IntegrityError, match="no dead letters"):
        await backend.rescue_jobs(RescueJobsParams(rescues=rescues))
    assert raw.execute("SELECT COUNT(*) FROM soniq_jobs WHERE status = 'processing'").fetchone() == (3,)
    assert raw.execute("SELECT COUNT(*) FROM soniq_dead_letter_jobs").fetchone() == (0,)
    raw.execute("DROP TRIGGER refuse_dead_letter")
    assert await backend.rescue_jobs(RescueJobsParams(rescues=rescues)) == {job.id for job in jobs}
    dead = (await backend.dead_letter_page(DeadLetterPageParams())).rows
    assert {(row.dead_letter_reason, row.attempts, row.last_error) for row in dead} == {
        ("zombie", 1, lost_worker_error("old", 5))
    }


async def test_a_rescue_skips_rows_that_changed_since_they_were_read(
    make_job: JobFactory, backend: SQLiteBackend, raw: sqlite3.Connection
) -> None:
    finished, untouched = make_job(), make_job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[finished, untouched]))
    await backend.register_worker(
        RegisterWorkerParams(worker=WorkerInfo(id="old", hostname="h", pid=1, queues=None, concurrency=2))
    )
    await backend.claim_jobs(ClaimJobsParams(worker_id="old", queues=None, limit=2, mark_started=True))
    raw.execute("UPDATE soniq_workers SET last_heartbeat = 0")
    scan = await backend.find_stale_jobs(FindStaleJobsParams(heartbeat_timeout=5))
    assert {row.id for row in scan.orphaned} == {finished.id, untouched.id}
    # The old owner's completion lands between the sweep's read and its write.
    done = await backend.complete_jobs(CompleteJobsParams(worker_id="old", results=[JobResult(finished.id, 42)]))
    assert done == {finished.id}
    rescues = [decide_rescue(row, policy=StaleJobPolicy.REQUEUE, heartbeat_timeout=5) for row in scan.orphaned]

    assert await backend.rescue_jobs(RescueJobsParams(rescues=rescues)) == {untouched.id}
    kept = await backend.get_job(GetJobParams(job_id=finished.id))
    assert kept is not None
    assert (kept.status, kept.result, kept.attempts) == (JobStatus.DONE, 42, 0)
    rescued = await backend.get_job(GetJobParams(job_id=untouched.id))
    assert rescued is not None
    assert (rescued.status, rescued.attempts, rescued.worker_id) == (JobStatus.QUEUED, 1, None)
    assert await backend.rescue_jobs(RescueJobsParams(rescues=rescues)) == set()
