"""A schema made by an older soniq-postgres upgrades to the latest migration, keeping its rows:
from version 1 (through `job_names`, 2), from version 2 (worker state and dashboard indexes, 3) and from version 3,
up to schedules, the leader lease and `expires_at` (4), dedup keys with producer ids (5), and from
version 5 to dependencies, limits, cancel requests and watched rows (6), from version 6 to
the claim-only indexing of queued rows (7), from version 7 to queue pauses, job steps and
checkpoints, job versions and shutdown nacks (8), from version 8 to job progress and job logs (9), and
from version 9 to unique windows and debounced jobs (10)."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from soniq.params import (
    ClaimJobsParams,
    CompleteJobsParams,
    DeadLetterJobParams,
    EnqueueJobsParams,
    GetJobLogsParams,
    GetJobParams,
    JobResult,
    NackJobParams,
    PauseQueueParams,
    PruneJobsParams,
    RegisterWorkerParams,
    ReplayDeadLetterParams,
    SaveCheckpointParams,
    SaveJobLogsParams,
    SaveProgressParams,
    SaveStepParams,
    SetWorkerStatusParams,
)
from soniq.records import JobStatus, NewJob, UniqueWindow, WorkerInfo, WorkerStatus
from soniq_postgres import LATEST_VERSION, MIGRATIONS, PostgresBackend

pytestmark = pytest.mark.asyncio

DASHBOARD_INDEXES = {"soniq_jobs_done_at_idx", "soniq_jobs_name_created_idx", "soniq_dead_letter_queue_idx"}


async def _schema_at(raw: asyncpg.Connection, namespace: str, version: int) -> str:
    """Build the schema as the release that stopped at `version` did, with one worker row of that time."""
    quoted = f'"{namespace}"'
    await raw.execute(f"CREATE SCHEMA {quoted}")
    await raw.execute(
        f"CREATE TABLE {quoted}.soniq_migrations (version integer PRIMARY KEY, name text NOT NULL, "
        "applied_at timestamptz NOT NULL DEFAULT now())"
    )
    for migration in MIGRATIONS[:version]:
        await raw.execute(migration.sql.format(schema=quoted))
        await raw.execute(
            f"INSERT INTO {quoted}.soniq_migrations (version, name) VALUES ($1, $2)", migration.version, migration.name
        )
    await raw.execute(f"INSERT INTO {quoted}.soniq_workers (id, hostname, pid, concurrency) VALUES ('old', 'h', 1, 1)")
    if version >= 2:
        await raw.execute(f"""UPDATE {quoted}.soniq_workers SET job_names = '["app.old"]' WHERE id = 'old'""")
    return quoted


@pytest.mark.parametrize("start", [1, 2, 3, 4, 5, 6, 7, 8, 9])
async def test_an_older_schema_upgrades_to_the_latest_and_keeps_its_workers(
    start: int, make_backend: Callable[..., Awaitable[PostgresBackend]], raw: asyncpg.Connection, namespace: str
) -> None:
    assert LATEST_VERSION == 10
    quoted = await _schema_at(raw, namespace, start)

    backend = await make_backend()

    versions = await raw.fetch(f"SELECT version FROM {quoted}.soniq_migrations ORDER BY version")
    assert [row["version"] for row in versions] == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    (old,) = await backend.list_workers()
    assert old.id == "old"
    assert old.job_names == (None if start == 1 else ("app.old",))
    assert (old.state, old.state_changed_at, old.last_shutdown) == (None, None, None)
    indexes = await raw.fetch("SELECT indexname FROM pg_indexes WHERE schemaname = $1", namespace)
    names = {row["indexname"] for row in indexes}
    assert names >= {*DASHBOARD_INDEXES, "soniq_jobs_dedup_idx", "soniq_jobs_waiting_idx"}
    # Migration 7: queued rows are in the claim indexes only, not in (queue, status).
    definition = await raw.fetchval(
        "SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND indexname = 'soniq_jobs_queue_status_idx'", namespace
    )
    assert "WHERE (status <> 'queued'::text)" in definition

    # Both columns of the newer steps are written and read back on the upgraded schema.
    info = WorkerInfo("w-new", "h", 2, ("q",), 1, job_names=("app.a",))
    await backend.register_worker(RegisterWorkerParams(info))
    summary = {"drained": True, "nacked": []}
    assert await backend.set_worker_status(
        SetWorkerStatusParams("w-new", WorkerStatus.STOPPED, state="STOPPED", last_shutdown=summary)
    )
    new = {w.id: w for w in await backend.list_workers()}["w-new"]
    assert new.job_names == ("app.a",)
    assert new.state == "STOPPED"
    assert new.state_changed_at is not None
    assert new.last_shutdown == summary


async def test_rows_written_at_version_7_still_work_after_step_8(
    make_backend: Callable[..., Awaitable[PostgresBackend]], raw: asyncpg.Connection, namespace: str
) -> None:
    """Step 8 adds its columns and table to a populated schema in place: the old rows read as
    version 1, with no steps, no checkpoint and no shutdown nacks, and are claimed and settled."""
    quoted = await _schema_at(raw, namespace, 7)
    await raw.execute(
        f"INSERT INTO {quoted}.soniq_jobs (id, job_name, queue, status, worker_id, attempts) VALUES "
        "('old-1', 'app.old', 'default', 'queued', NULL, 0), ('old-2', 'app.old', 'default', 'queued', NULL, 0), "
        "('old-running', 'app.old', 'default', 'processing', 'old', 0)"
    )
    await raw.execute(
        f"INSERT INTO {quoted}.soniq_dead_letter_jobs (id, job_name, queue, dead_letter_reason) "
        "VALUES ('old-dead', 'app.old', 'default', 'max_retries')"
    )

    backend = await make_backend()

    status = await backend.schema_status()
    assert status.up_to_date
    assert status.current_version == LATEST_VERSION
    for job_id in ("old-1", "old-running"):
        old = await backend.get_job(GetJobParams(job_id))
        assert old is not None
        assert (old.version, dict(old.steps), old.checkpoint, old.shutdown_nacks) == (1, {}, None, 0)

    # A version-bounded claim that skips a paused queue still takes the old rows.
    assert await backend.pause_queue(PauseQueueParams("paused", reason="deploy"))
    claimed = await backend.claim_jobs(
        ClaimJobsParams(
            worker_id="w",
            queues=None,
            limit=1,
            mark_started=True,
            job_names=("app.old",),
            excluded_queues=("paused",),
            max_versions={"app.old": 1},
        )
    )
    assert [job.id for job in claimed] == ["old-1"]
    assert (claimed[0].version, dict(claimed[0].steps), claimed[0].shutdown_nacks) == (1, {}, 0)
    assert await backend.save_step(SaveStepParams("old-1", "w", "fetch", '{"n": 1}'))
    assert await backend.save_checkpoint(SaveCheckpointParams("old-1", "w", "[1, 2]"))
    assert await backend.nack_job(NackJobParams("old-1", "w", handler_started=True))
    # The nack put the row behind old-2; both come back, the nacked one with what it stored.
    both = await backend.claim_jobs(
        ClaimJobsParams(
            worker_id="w", queues=None, limit=2, mark_started=True, job_names=("app.old",), max_versions={"app.old": 1}
        )
    )
    assert [job.id for job in both] == ["old-2", "old-1"]
    again = both[1]
    assert (dict(again.steps), again.checkpoint, again.shutdown_nacks) == ({"fetch": {"n": 1}}, [1, 2], 1)
    assert await backend.complete_jobs(CompleteJobsParams("w", (JobResult("old-1", "ok"), JobResult("old-2", 2)))) == {
        "old-1",
        "old-2",
    }
    done = await backend.get_job(GetJobParams("old-1"))
    assert done is not None
    assert done.status is JobStatus.DONE

    # The old dead letter replays as a version-1 row.
    replay = ReplayDeadLetterParams("old-dead", "revived", datetime.now(UTC))
    assert await backend.replay_dead_letter(replay) == "revived"
    revived = await backend.get_job(GetJobParams("revived"))
    assert revived is not None
    assert revived.version == 1


async def test_rows_written_at_version_8_read_without_progress_or_logs_after_step_9(
    make_backend: Callable[..., Awaitable[PostgresBackend]], raw: asyncpg.Connection, namespace: str
) -> None:
    """Step 9 adds nullable columns to a populated schema in place: old job and dead-letter rows
    have no progress and no logs, and an old row takes both and carries its logs to the dead letters."""
    quoted = await _schema_at(raw, namespace, 8)
    await raw.execute(
        f"INSERT INTO {quoted}.soniq_jobs (id, job_name, queue, status, worker_id, attempts, checkpoint) VALUES "
        "('old-1', 'app.old', 'default', 'queued', NULL, 0, '[1]'), "
        "('old-running', 'app.old', 'default', 'processing', 'old', 0, NULL)"
    )
    await raw.execute(
        f"INSERT INTO {quoted}.soniq_dead_letter_jobs (id, job_name, queue, dead_letter_reason) "
        "VALUES ('old-dead', 'app.old', 'default', 'max_retries')"
    )

    backend = await make_backend()

    status = await backend.schema_status()
    assert status.up_to_date
    assert status.current_version == LATEST_VERSION
    assert {step.version: step.name for step in status.applied}[9] == "job progress and job logs"
    for job_id in ("old-1", "old-running", "old-dead"):
        assert await backend.get_job_logs(GetJobLogsParams(job_id)) is None
    running = await backend.get_job(GetJobParams("old-running"))
    assert running is not None
    assert running.progress is None

    (claimed,) = await backend.claim_jobs(ClaimJobsParams(worker_id="w", queues=None, limit=1, mark_started=True))
    assert (claimed.id, claimed.progress, claimed.checkpoint) == ("old-1", None, [1])
    assert await backend.save_progress(SaveProgressParams("old-1", "w", '{"done": 1, "total": 2}'))
    assert await backend.save_job_logs(SaveJobLogsParams("old-1", "w", "[]"))
    stored = await backend.get_job(GetJobParams("old-1"))
    assert stored is not None
    assert stored.progress == {"done": 1, "total": 2}
    assert await backend.dead_letter_job(DeadLetterJobParams("old-1", "w", "boom", "max_attempts"))
    assert await backend.get_job_logs(GetJobLogsParams("old-1")) == "[]"


async def test_rows_written_at_version_9_keep_working_with_windows_and_debounce_after_step_10(
    make_backend: Callable[..., Awaitable[PostgresBackend]], raw: asyncpg.Connection, namespace: str
) -> None:
    """Step 10 adds a nullable column and a table to a populated schema in place: an old keyed row
    reads as not debounced, so a debounced repeat of its key leaves it as it is; new window and
    debounced jobs work beside the old rows, and the prune deletes old rows and expired windows."""
    quoted = await _schema_at(raw, namespace, 9)
    past = datetime.now(UTC) - timedelta(hours=1)
    await raw.execute(
        f"INSERT INTO {quoted}.soniq_jobs (id, job_name, queue, status, args, dedup_key, scheduled_at) VALUES "
        """('old-keyed', 'app.old', 'default', 'queued', '{"v": 1}', 'report', $1)""",
        past,
    )
    await raw.execute(
        f"INSERT INTO {quoted}.soniq_jobs (id, job_name, queue, status, expires_at) "
        "VALUES ('old-done', 'app.old', 'default', 'done', $1)",
        past,
    )

    backend = await make_backend()

    status = await backend.schema_status()
    assert status.up_to_date
    assert (status.current_version, status.applied[-1].name) == (10, "unique windows and debounced jobs")
    assert await raw.fetchval(f"SELECT debounce_deadline FROM {quoted}.soniq_jobs WHERE id = 'old-keyed'") is None

    now = datetime.now(UTC)

    def job(job_id: str, **fields: Any) -> NewJob:
        return NewJob(job_id, "app.new", {"v": 2}, "default", 100, now, 1, **fields)

    # The old row holds its key as a plain keyed row: a debounced repeat returns it, unmoved.
    repeat = job("repeat", dedup_key="report", debounce_deadline=now + timedelta(minutes=1))
    assert await backend.enqueue_jobs(EnqueueJobsParams([repeat])) == ["old-keyed"]
    old = await backend.get_job(GetJobParams("old-keyed"))
    assert old is not None
    assert (old.args, old.scheduled_at) == ({"v": 1}, past)

    # New window and debounced jobs on the upgraded schema.
    window = UniqueWindow("nightly", past, now - timedelta(minutes=1))
    expired = job("expired", unique_window=window)
    assert await backend.enqueue_jobs(EnqueueJobsParams([expired])) == ["expired"]
    live = job("live", unique_window=UniqueWindow("nightly", now, now + timedelta(hours=1)))
    again = job("again", unique_window=UniqueWindow("nightly", now + timedelta(seconds=1), now + timedelta(hours=1)))
    assert await backend.enqueue_jobs(EnqueueJobsParams([live])) == ["live"]
    assert await backend.enqueue_jobs(EnqueueJobsParams([again])) == ["live"]
    first = job("debounced", dedup_key="digest", debounce_deadline=now + timedelta(minutes=5))
    moved = dataclasses.replace(
        job("debounced-again", dedup_key="digest", debounce_deadline=now + timedelta(minutes=5)),
        args={"v": 3},
        scheduled_at=now + timedelta(minutes=1),
    )
    assert await backend.enqueue_jobs(EnqueueJobsParams([first])) == ["debounced"]
    assert await backend.enqueue_jobs(EnqueueJobsParams([moved])) == ["debounced"]
    debounced = await backend.get_job(GetJobParams("debounced"))
    assert debounced is not None
    assert (debounced.args, debounced.scheduled_at) == ({"v": 3}, now + timedelta(minutes=1))

    # A window that has ended, on a key nobody enqueued again: the prune takes it after the old row.
    stale = job("stale", unique_window=UniqueWindow("weekly", past, now - timedelta(minutes=1)))
    assert await backend.enqueue_jobs(EnqueueJobsParams([stale])) == ["stale"]
    assert await backend.prune_jobs(PruneJobsParams(limit=10)) == 1  # the old row; the window is no job row
    assert await backend.get_job(GetJobParams("old-done")) is None
    windows = await raw.fetch(f"SELECT key, job_id FROM {quoted}.soniq_unique_windows")
    assert {row["key"]: row["job_id"] for row in windows} == {"nightly": "live"}
