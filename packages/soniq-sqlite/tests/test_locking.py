"""Waiting for, and giving up on, another connection's write lock; cancellation safety."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from soniq.errors import BackendUnavailableError
from soniq.params import ClaimJobsParams, DeadLetterJobParams, EnqueueJobsParams, GetJobParams, QueueStatsParams
from soniq.records import NewJob
from soniq_sqlite import SQLiteBackend

JobFactory = Callable[..., NewJob]

pytestmark = pytest.mark.asyncio


async def test_a_write_waits_for_another_process_lock_instead_of_failing(
    make_job: JobFactory, backend: SQLiteBackend, raw: sqlite3.Connection
) -> None:
    job = make_job()
    raw.execute("BEGIN IMMEDIATE")
    try:
        enqueue = asyncio.ensure_future(backend.enqueue_jobs(EnqueueJobsParams(jobs=[job])))
        done, _ = await asyncio.wait({enqueue}, timeout=0.3)
        assert done == set(), "the insert finished while another connection held the write lock"
    finally:
        raw.execute("COMMIT")
    await asyncio.wait_for(enqueue, timeout=10)
    assert raw.execute("SELECT status FROM soniq_jobs WHERE id = ?", (job.id,)).fetchone() == ("queued",)


async def test_a_claim_waits_for_the_lock_and_then_claims(
    make_job: JobFactory, backend: SQLiteBackend, raw: sqlite3.Connection
) -> None:
    job = make_job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
    raw.execute("BEGIN IMMEDIATE")
    try:
        claim = asyncio.ensure_future(
            backend.claim_jobs(ClaimJobsParams(worker_id="w", queues=None, limit=1, mark_started=False))
        )
        done, _ = await asyncio.wait({claim}, timeout=0.3)
        assert done == set()
    finally:
        raw.execute("COMMIT")
    claimed = await asyncio.wait_for(claim, timeout=10)
    assert [row.id for row in claimed] == [job.id]


async def test_a_lock_held_beyond_busy_timeout_raises_unavailable_naming_the_file(
    make_job: JobFactory, db_path: Path, raw: sqlite3.Connection
) -> None:
    backend = SQLiteBackend.from_url(f"sqlite:///{db_path}", busy_timeout=0.02)
    await backend.connect()
    raw.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(BackendUnavailableError, match="locked") as caught:
            await backend.enqueue_jobs(EnqueueJobsParams(jobs=[make_job()]))
        assert str(db_path) in str(caught.value)
        assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
    finally:
        raw.execute("ROLLBACK")
    # The backend is fine once the lock is gone.
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[make_job()]))
    assert (await backend.queue_stats(QueueStatsParams())).queued == 1
    await backend.close()


async def test_readers_are_not_blocked_by_a_writer(
    make_job: JobFactory, backend: SQLiteBackend, raw: sqlite3.Connection
) -> None:
    job = make_job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
    raw.execute("BEGIN IMMEDIATE")
    try:
        raw.execute("UPDATE soniq_jobs SET priority = 1 WHERE id = ?", (job.id,))
        stored = await asyncio.wait_for(backend.get_job(GetJobParams(job_id=job.id)), timeout=10)
        assert stored is not None
        assert stored.priority == 100  # WAL: the reader sees the last committed state
    finally:
        raw.execute("ROLLBACK")


async def test_cancelling_callers_never_leaves_a_transaction_open(
    make_job: JobFactory, backend: SQLiteBackend, raw: sqlite3.Connection
) -> None:
    """A write the caller stopped waiting for still commits (or rolls back) whole."""
    jobs = [make_job() for _ in range(50)]
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=jobs))
    claimed = await backend.claim_jobs(ClaimJobsParams(worker_id="w", queues=None, limit=50, mark_started=True))
    raw.execute("BEGIN IMMEDIATE")
    tasks = [
        asyncio.ensure_future(
            backend.dead_letter_job(DeadLetterJobParams(job_id=row.id, worker_id="w", error="e", reason="max_attempts"))
        )
        for row in claimed
    ]
    await asyncio.wait(tasks, timeout=0.05)
    for task in tasks:
        task.cancel()
    raw.execute("COMMIT")
    await asyncio.gather(*tasks, return_exceptions=True)
    # If a cancelled caller had left BEGIN open on the backend's connection, this
    # outside write would hit "database is locked" after its 5 s timeout.
    raw.execute("UPDATE soniq_workers SET pid = 0")

    deadline = asyncio.get_running_loop().time() + 10
    while raw.execute("SELECT COUNT(*) FROM soniq_jobs").fetchone()[0] != 0:
        assert asyncio.get_running_loop().time() < deadline, "cancelled dead-letter moves never finished"
        await asyncio.sleep(0.01)
    assert raw.execute("SELECT COUNT(*) FROM soniq_dead_letter_jobs").fetchone()[0] == 50
