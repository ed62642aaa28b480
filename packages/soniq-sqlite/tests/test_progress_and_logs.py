"""Job progress and job logs on SQLite (`JobProgressStore`, `JobLogStore`, schema version 8)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from soniq.backend import (
    ClaimJobsParams,
    DeadLetterJobParams,
    DeleteJobParams,
    EnqueueJobsParams,
    ExpireUnknownJobsParams,
    GetJobLogsParams,
    GetJobParams,
    GroupLimit,
    JobPageParams,
    JobRecord,
    LimitScope,
    NackJobParams,
    ReplayDeadLetterParams,
    RetryJobParams,
    SaveJobLogsParams,
    SaveProgressParams,
)
from soniq.records import NewJob
from soniq_sqlite import SQLiteBackend

JobFactory = Callable[..., NewJob]

pytestmark = pytest.mark.asyncio

PROGRESS = {"done": 3, "total": 10, "message": "rows", "updated_at": "2026-01-01T00:00:00+00:00"}
LOGS = json.dumps([{"level": "INFO", "message": "started"}])


def _claim(worker_id: str = "w1", *, limited: bool = False) -> ClaimJobsParams:
    limits = (GroupLimit(LimitScope.QUEUE, "default", max_concurrent=10),) if limited else ()
    return ClaimJobsParams(worker_id=worker_id, queues=None, limit=10, mark_started=True, limits=limits)


async def _running(backend: SQLiteBackend, make_job: JobFactory, worker_id: str = "w1") -> str:
    job = make_job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
    (row,) = await backend.claim_jobs(_claim(worker_id))
    assert (row.id, row.progress) == (job.id, None)
    return str(job.id)


async def _row(backend: SQLiteBackend, job_id: str) -> JobRecord:
    row = await backend.get_job(GetJobParams(job_id=job_id))
    assert row is not None
    return row


async def _logs(backend: SQLiteBackend, job_id: str) -> str | None:
    return await backend.get_job_logs(GetJobLogsParams(job_id=job_id))


async def test_the_backend_declares_both_roles(backend: SQLiteBackend) -> None:
    roles = backend.capabilities.roles
    assert (roles["JobProgressStore"], roles["JobLogStore"]) == (1, 1)


async def test_only_the_owner_writes_progress_and_logs(backend: SQLiteBackend, make_job: JobFactory) -> None:
    job_id = await _running(backend, make_job, "owner")
    text = json.dumps(PROGRESS)
    assert not await backend.save_progress(SaveProgressParams(job_id, "intruder", text))
    assert not await backend.save_job_logs(SaveJobLogsParams(job_id, "intruder", LOGS))
    assert not await backend.save_progress(SaveProgressParams("missing", "owner", text))
    assert not await backend.save_job_logs(SaveJobLogsParams("missing", "owner", LOGS))
    assert (await _row(backend, job_id)).progress is None
    assert await _logs(backend, job_id) is None

    assert await backend.save_progress(SaveProgressParams(job_id, "owner", text))
    assert await backend.save_job_logs(SaveJobLogsParams(job_id, "owner", LOGS))
    assert await backend.nack_job(NackJobParams(job_id=job_id, worker_id="owner"))
    # Once handed back, the row is nobody's: even the last owner writes nothing.
    assert not await backend.save_progress(SaveProgressParams(job_id, "owner", "{}"))
    assert not await backend.save_job_logs(SaveJobLogsParams(job_id, "owner", "[]"))
    assert (await _row(backend, job_id)).progress == PROGRESS
    assert await _logs(backend, job_id) == LOGS


@pytest.mark.parametrize("limited", [False, True], ids=["plain-claim", "limited-claim"])
async def test_progress_comes_back_from_every_read_and_stays_behind_a_dead_letter(
    backend: SQLiteBackend, raw: sqlite3.Connection, make_job: JobFactory, limited: bool
) -> None:
    job_id = await _running(backend, make_job)
    assert await backend.save_progress(SaveProgressParams(job_id, "w1", json.dumps(PROGRESS)))
    assert await backend.nack_job(NackJobParams(job_id=job_id, worker_id="w1"))
    (again,) = await backend.claim_jobs(_claim("w2", limited=limited))
    assert again.progress == PROGRESS
    (listed,) = (await backend.job_page(JobPageParams(limit=10))).rows
    assert listed.progress == PROGRESS

    # Text another writer left that is not JSON, or not an object, reads as no progress.
    for stored in ("{not json", "[1, 2]"):
        raw.execute("UPDATE soniq_jobs SET progress = ? WHERE id = ?", (stored, job_id))
        assert (await _row(backend, job_id)).progress is None

    assert await backend.dead_letter_job(DeadLetterJobParams(job_id, "w2", error="boom", reason="max_retries"))
    replay = ReplayDeadLetterParams(job_id=job_id, new_job_id="replayed", scheduled_at=datetime.now(UTC))
    assert await backend.replay_dead_letter(replay) == "replayed"
    assert (await _row(backend, "replayed")).progress is None


async def test_logs_survive_a_retry_and_a_dead_letter_move_and_leave_with_the_row(
    backend: SQLiteBackend, make_job: JobFactory
) -> None:
    job_id = await _running(backend, make_job)
    assert await backend.save_job_logs(SaveJobLogsParams(job_id, "w1", LOGS))
    retry = RetryJobParams(job_id=job_id, worker_id="w1", error="e", scheduled_at=datetime.now(UTC))
    assert await backend.retry_job(retry)
    assert await _logs(backend, job_id) == LOGS
    # A queued row no worker knows moves to the dead-letter table with its logs.
    expire = ExpireUnknownJobsParams(known_names=[], older_than=0, error="unknown")
    assert await backend.expire_unknown_jobs(expire) == {job_id}
    assert await _logs(backend, job_id) == LOGS
    replay = ReplayDeadLetterParams(job_id=job_id, new_job_id="replayed", scheduled_at=datetime.now(UTC))
    assert await backend.replay_dead_letter(replay) == "replayed"
    assert await _logs(backend, "replayed") is None

    (claimed,) = await backend.claim_jobs(_claim("w2"))
    assert await backend.save_job_logs(SaveJobLogsParams(claimed.id, "w2", "[]"))
    assert await backend.dead_letter_job(DeadLetterJobParams(claimed.id, "w2", error="boom", reason="max_retries"))
    assert await _logs(backend, claimed.id) == "[]"

    deleted = await _running(backend, make_job, "w3")
    assert await backend.save_job_logs(SaveJobLogsParams(deleted, "w3", LOGS))
    assert await backend.delete_job(DeleteJobParams(job_id=deleted))
    assert await _logs(backend, deleted) is None
