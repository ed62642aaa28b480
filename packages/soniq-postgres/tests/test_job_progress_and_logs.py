"""Progress and job logs on PostgreSQL: fenced writes, progress in every read of the row, logs
carried by each statement that moves a row to the dead letters, and deleted with the row."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import asyncpg
import pytest

from soniq.params import (
    ClaimJobsParams,
    DeadLetterJobParams,
    DeleteJobParams,
    EnqueueJobsParams,
    ExpireUnknownJobsParams,
    GetJobLogsParams,
    GetJobParams,
    JobPageParams,
    NackJobParams,
    PurgeDeadLetterParams,
    Rescue,
    RescueAction,
    RescueJobsParams,
    RetryJobParams,
    SaveJobLogsParams,
    SaveProgressParams,
)
from soniq.records import NewJob
from soniq_postgres import PostgresBackend

pytestmark = pytest.mark.asyncio

PROGRESS = '{"done":3,"total":10,"message":"rows","updated_at":"2026-01-01T00:00:00+00:00"}'
LOGS = '[{"at":"2026-01-01T00:00:00+00:00","level":"INFO","message":"ü \\u0000 fetched"}]'


async def _running(backend: PostgresBackend, make_job: Callable[..., NewJob], **fields: object) -> str:
    job = make_job(**fields)
    await backend.enqueue_jobs(EnqueueJobsParams([job]))
    (claimed,) = await backend.claim_jobs(ClaimJobsParams("w", None, 1, mark_started=True))
    assert claimed.id == job.id
    assert claimed.progress is None
    return job.id


async def _logs(backend: PostgresBackend, job_id: str) -> str | None:
    return await backend.get_job_logs(GetJobLogsParams(job_id))


async def test_writes_are_fenced_and_progress_comes_back_from_every_read(
    backend: PostgresBackend, make_job: Callable[..., NewJob]
) -> None:
    assert backend.capabilities.roles.keys() >= {"JobProgressStore", "JobLogStore"}
    job_id = await _running(backend, make_job)
    before = await backend.get_job(GetJobParams(job_id))
    assert await backend.save_progress(SaveProgressParams(job_id, "other", PROGRESS)) is False
    assert await backend.save_job_logs(SaveJobLogsParams(job_id, "other", LOGS)) is False
    assert await backend.save_progress(SaveProgressParams("missing", "w", PROGRESS)) is False
    assert await backend.get_job(GetJobParams(job_id)) == before
    assert await _logs(backend, job_id) is None

    assert await backend.save_progress(SaveProgressParams(job_id, "w", PROGRESS))
    assert await backend.save_job_logs(SaveJobLogsParams(job_id, "w", LOGS))
    stored = await backend.get_job(GetJobParams(job_id))
    assert stored is not None
    assert before is not None
    assert stored.progress == {"done": 3, "total": 10, "message": "rows", "updated_at": "2026-01-01T00:00:00+00:00"}
    # Neither write moves updated_at: stale recovery's fence on it still holds.
    assert stored.updated_at == before.updated_at
    assert await _logs(backend, job_id) == LOGS

    # A nack keeps both; the claim (and a page) return the progress.
    assert await backend.nack_job(NackJobParams(job_id, "w"))
    (again,) = await backend.claim_jobs(ClaimJobsParams("w2", None, 1, mark_started=True))
    assert again.progress == stored.progress
    (listed,) = (await backend.job_page(JobPageParams())).rows
    assert listed.progress == stored.progress
    assert await _logs(backend, job_id) == LOGS


async def test_unreadable_progress_reads_as_none(
    backend: PostgresBackend, make_job: Callable[..., NewJob], raw: asyncpg.Connection, namespace: str
) -> None:
    job_id = await _running(backend, make_job)
    for stored in ("[1, 2]", '"text"'):
        await raw.execute(f'UPDATE "{namespace}".soniq_jobs SET progress = $2::json WHERE id = $1', job_id, stored)
        record = await backend.get_job(GetJobParams(job_id))
        assert record is not None
        assert (record.progress, record.decode_error) == (None, None)


async def test_logs_survive_a_retry_and_move_with_the_row_to_the_dead_letters(
    backend: PostgresBackend, make_job: Callable[..., NewJob]
) -> None:
    job_id = await _running(backend, make_job)
    assert await backend.save_job_logs(SaveJobLogsParams(job_id, "w", LOGS))
    assert await backend.save_progress(SaveProgressParams(job_id, "w", PROGRESS))
    assert await backend.retry_job(RetryJobParams(job_id, "w", "boom", datetime.now(UTC)))
    assert await _logs(backend, job_id) == LOGS
    await backend.claim_jobs(ClaimJobsParams("w", None, 1, mark_started=True))
    longer = LOGS[:-1] + ',{"at":"2026-01-01T00:00:01+00:00","level":"ERROR","message":"again"}]'
    assert await backend.save_job_logs(SaveJobLogsParams(job_id, "w", longer))

    assert await backend.dead_letter_job(DeadLetterJobParams(job_id, "w", "boom", "max_attempts"))
    assert await backend.get_job(GetJobParams(job_id)) is None
    assert await _logs(backend, job_id) == longer
    assert await backend.purge_dead_letter(PurgeDeadLetterParams(job_id))
    assert await _logs(backend, job_id) is None


async def test_rescues_and_expiry_carry_logs_and_a_delete_removes_them(
    backend: PostgresBackend, make_job: Callable[..., NewJob]
) -> None:
    rescued = await _running(backend, make_job)
    assert await backend.save_job_logs(SaveJobLogsParams(rescued, "w", LOGS))
    row = await backend.get_job(GetJobParams(rescued))
    assert row is not None
    rescue = Rescue(rescued, "w", row.updated_at, RescueAction.DEAD_LETTER, 1, "lost", "worker_lost")
    assert await backend.rescue_jobs(RescueJobsParams([rescue])) == {rescued}
    assert await _logs(backend, rescued) == LOGS

    # A nacked row is queued with its logs; expiring its unknown name carries them along.
    expired = await _running(backend, make_job, job_name="tests.gone")
    assert await backend.save_job_logs(SaveJobLogsParams(expired, "w", "[]"))
    assert await backend.nack_job(NackJobParams(expired, "w"))
    assert await backend.expire_unknown_jobs(ExpireUnknownJobsParams(("tests.noop",), 0.0, "unknown")) == {expired}
    assert await _logs(backend, expired) == "[]"

    deleted = await _running(backend, make_job)
    assert await backend.save_job_logs(SaveJobLogsParams(deleted, "w", LOGS))
    assert await backend.delete_job(DeleteJobParams(deleted))
    assert await _logs(backend, deleted) is None
