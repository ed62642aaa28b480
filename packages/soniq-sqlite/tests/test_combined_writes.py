"""Concurrent single-row writes share trips and commits, yet each keeps its own outcome; batches fence per row."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

import soniq_sqlite.connection
from soniq.params import (
    ClaimJobsParams,
    CompleteJobsParams,
    EnqueueJobsParams,
    GetJobParams,
    JobResult,
    RetryJobParams,
    SnoozeJobParams,
)
from soniq.records import JobStatus, NewJob
from soniq_sqlite import SQLiteBackend

JobFactory = Callable[..., NewJob]

pytestmark = pytest.mark.asyncio


@pytest.fixture(params=["combined", "one-per-trip"])
def write_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "one-per-trip":
        # What happens on an aiosqlite without the private hooks the combined path uses.
        monkeypatch.setattr(soniq_sqlite.connection, "_raw_runner", lambda conn: None)
    return str(request.param)


async def test_concurrent_fenced_writes_each_report_their_own_result(
    write_path: str, make_job: JobFactory, backend: SQLiteBackend
) -> None:
    jobs = [make_job() for _ in range(60)]
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=jobs))
    await backend.claim_jobs(ClaimJobsParams(worker_id="owner", queues=None, limit=60, mark_started=True))
    later = datetime.now(UTC) + timedelta(hours=1)
    calls = [
        backend.retry_job(
            RetryJobParams(
                job_id=job.id, worker_id="owner" if n % 3 else "intruder", error=f"run {n}", scheduled_at=later
            )
        )
        for n, job in enumerate(jobs)
    ]
    outcomes = await asyncio.gather(*calls)
    assert outcomes == [n % 3 != 0 for n in range(len(jobs))]
    for n, job in enumerate(jobs):
        row = await backend.get_job(GetJobParams(job_id=job.id))
        assert row is not None
        if n % 3:
            assert (row.status, row.last_error, row.attempts, row.worker_id) == (JobStatus.QUEUED, f"run {n}", 1, None)
        else:
            assert (row.status, row.worker_id) == (JobStatus.PROCESSING, "owner")


async def test_one_failing_write_does_not_undo_the_others(
    write_path: str, make_job: JobFactory, backend: SQLiteBackend, raw: sqlite3.Connection
) -> None:
    jobs = [make_job() for _ in range(10)]
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=jobs))
    await backend.claim_jobs(ClaimJobsParams(worker_id="w", queues=None, limit=10, mark_started=True))
    trapped = jobs[4].id
    raw.execute(
        "CREATE TRIGGER trap BEFORE UPDATE ON soniq_jobs WHEN NEW.id = "
        f"'{trapped}' AND NEW.status = 'queued' BEGIN SELECT RAISE(ABORT, 'trapped row'); END"
    )
    later = datetime.now(UTC) + timedelta(hours=1)
    outcomes = await asyncio.gather(
        *(backend.snooze_job(SnoozeJobParams(job_id=job.id, worker_id="w", scheduled_at=later)) for job in jobs),
        return_exceptions=True,
    )
    assert isinstance(outcomes[4], sqlite3.IntegrityError)
    assert [outcome for n, outcome in enumerate(outcomes) if n != 4] == [True] * 9
    statuses = dict(raw.execute("SELECT id, status FROM soniq_jobs").fetchall())
    assert statuses.pop(trapped) == "processing"
    assert set(statuses.values()) == {"queued"}


async def test_a_completion_batch_skips_only_the_rows_the_worker_lost(
    make_job: JobFactory, backend: SQLiteBackend, raw: sqlite3.Connection
) -> None:
    jobs = [make_job() for _ in range(6)]
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=jobs))
    await backend.claim_jobs(ClaimJobsParams(worker_id="w", queues=None, limit=6, mark_started=True))
    lost = {jobs[1].id, jobs[4].id}
    raw.execute(
        f"UPDATE soniq_jobs SET worker_id = 'someone else' WHERE id IN ({', '.join('?' for _ in lost)})", tuple(lost)
    )
    results = [JobResult(job.id, {"n": n}) for n, job in enumerate(jobs)]
    written = await backend.complete_jobs(CompleteJobsParams(worker_id="w", results=results))

    assert written == {job.id for job in jobs} - lost
    for n, job in enumerate(jobs):
        row = await backend.get_job(GetJobParams(job_id=job.id))
        assert row is not None
        if job.id in lost:
            assert (row.status, row.worker_id, row.result) == (JobStatus.PROCESSING, "someone else", None)
        else:
            assert (row.status, row.worker_id, row.result) == (JobStatus.DONE, None, {"n": n})
