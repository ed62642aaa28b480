"""The memory backend's job progress and job logs (`JobProgressStore`, `JobLogStore`)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from soniq.backend import (
    ClaimJobsParams,
    DeadLetterJobParams,
    DeleteJobParams,
    EnqueueJobsParams,
    GetJobLogsParams,
    GetJobParams,
    JobRecord,
    NackJobParams,
    NewJob,
    PurgeDeadLetterParams,
    ReplayDeadLetterParams,
    Rescue,
    RescueAction,
    RescueJobsParams,
    RetryJobParams,
    SaveJobLogsParams,
    SaveProgressParams,
)
from soniq_memory import MemoryBackend

pytestmark = pytest.mark.asyncio

PROGRESS = {"done": 3, "total": 10, "message": "rows", "updated_at": "2026-01-01T00:00:00+00:00"}
LOGS = json.dumps([{"level": "INFO", "message": "started"}])


def _job() -> NewJob:
    return NewJob(
        id=str(uuid.uuid4()),
        job_name="example",
        args={},
        queue="default",
        priority=100,
        scheduled_at=datetime.now(UTC) - timedelta(seconds=1),
        max_attempts=5,
    )


def _claim(worker_id: str = "w1") -> ClaimJobsParams:
    return ClaimJobsParams(worker_id=worker_id, queues=None, limit=10, mark_started=True)


async def _running(backend: MemoryBackend, worker_id: str = "w1") -> str:
    job = _job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
    (row,) = await backend.claim_jobs(_claim(worker_id))
    assert (row.id, row.progress) == (job.id, None)
    return job.id


async def _row(backend: MemoryBackend, job_id: str) -> JobRecord:
    row = await backend.get_job(GetJobParams(job_id=job_id))
    assert row is not None
    return row


async def _logs(backend: MemoryBackend, job_id: str) -> str | None:
    return await backend.get_job_logs(GetJobLogsParams(job_id=job_id))


async def test_the_backend_declares_both_roles() -> None:
    roles = MemoryBackend().capabilities.roles
    assert (roles["JobProgressStore"], roles["JobLogStore"]) == (1, 1)


async def test_only_the_owner_writes_progress_and_logs() -> None:
    backend = MemoryBackend()
    job_id = await _running(backend, "owner")
    text = json.dumps(PROGRESS)
    assert not await backend.save_progress(SaveProgressParams(job_id, "intruder", text))
    assert not await backend.save_job_logs(SaveJobLogsParams(job_id, "intruder", LOGS))
    assert not await backend.save_progress(SaveProgressParams("missing", "owner", text))
    assert not await backend.save_job_logs(SaveJobLogsParams("missing", "owner", LOGS))
    assert (await _row(backend, job_id)).progress is None
    assert await _logs(backend, job_id) is None

    assert await backend.save_progress(SaveProgressParams(job_id, "owner", text))
    assert await backend.save_job_logs(SaveJobLogsParams(job_id, "owner", LOGS))
    assert (await _row(backend, job_id)).progress == PROGRESS
    assert await _logs(backend, job_id) == LOGS
    # Once handed back, the row is nobody's: even the last owner writes nothing.
    assert await backend.nack_job(NackJobParams(job_id=job_id, worker_id="owner"))
    assert not await backend.save_progress(SaveProgressParams(job_id, "owner", "{}"))
    assert not await backend.save_job_logs(SaveJobLogsParams(job_id, "owner", "[]"))
    assert (await _row(backend, job_id)).progress == PROGRESS
    assert await _logs(backend, job_id) == LOGS


async def test_progress_comes_back_from_the_claim_after_a_nack_and_stays_behind_a_dead_letter() -> None:
    backend = MemoryBackend()
    job_id = await _running(backend)
    assert await backend.save_progress(SaveProgressParams(job_id, "w1", json.dumps(PROGRESS)))
    assert await backend.nack_job(NackJobParams(job_id=job_id, worker_id="w1"))
    (again,) = await backend.claim_jobs(_claim("w2"))
    assert again.progress == PROGRESS
    # A stored text that is not an object reads as no progress.
    assert await backend.save_progress(SaveProgressParams(job_id, "w2", "[1, 2]"))
    assert (await _row(backend, job_id)).progress is None
    assert await backend.save_progress(SaveProgressParams(job_id, "w2", json.dumps(PROGRESS)))
    assert await backend.dead_letter_job(
        DeadLetterJobParams(job_id=job_id, worker_id="w2", error="boom", reason="max_retries")
    )
    replayed = await backend.replay_dead_letter(
        ReplayDeadLetterParams(job_id=job_id, new_job_id="replayed", scheduled_at=datetime.now(UTC))
    )
    assert replayed == "replayed"
    assert (await _row(backend, "replayed")).progress is None


async def test_logs_survive_a_retry_and_a_dead_letter_move_and_leave_with_the_row() -> None:
    backend = MemoryBackend()
    job_id = await _running(backend)
    assert await backend.save_job_logs(SaveJobLogsParams(job_id, "w1", LOGS))
    retry = RetryJobParams(job_id=job_id, worker_id="w1", error="e", scheduled_at=datetime.now(UTC))
    assert await backend.retry_job(retry)
    assert await _logs(backend, job_id) == LOGS
    await backend.claim_jobs(_claim("w2"))
    assert await backend.dead_letter_job(
        DeadLetterJobParams(job_id=job_id, worker_id="w2", error="boom", reason="max_retries")
    )
    assert await _logs(backend, job_id) == LOGS
    await backend.replay_dead_letter(
        ReplayDeadLetterParams(job_id=job_id, new_job_id="replayed", scheduled_at=datetime.now(UTC))
    )
    assert await _logs(backend, "replayed") is None
    assert await backend.purge_dead_letter(PurgeDeadLetterParams(job_id=job_id))
    assert await _logs(backend, job_id) is None

    fresh = MemoryBackend()
    deleted = await _running(fresh)
    assert await fresh.save_job_logs(SaveJobLogsParams(deleted, "w1", LOGS))
    assert await fresh.delete_job(DeleteJobParams(job_id=deleted))
    assert await _logs(fresh, deleted) is None


async def test_a_dead_letter_rescue_carries_the_logs() -> None:
    backend = MemoryBackend()
    job_id = await _running(backend)
    assert await backend.save_job_logs(SaveJobLogsParams(job_id, "w1", LOGS))
    row = await _row(backend, job_id)
    rescue = Rescue(
        job_id=job_id,
        action=RescueAction.DEAD_LETTER,
        expected_worker_id="w1",
        expected_updated_at=row.updated_at,
        attempts=row.attempts + 1,
        error="lost",
        reason="stale",
    )
    assert await backend.rescue_jobs(RescueJobsParams(rescues=[rescue])) == {job_id}
    assert job_id in backend.dead_letters
    assert await _logs(backend, job_id) == LOGS
