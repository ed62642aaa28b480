"""Stale-worker recovery on PostgreSQL: one sweeper at a time, core's rescues stored as given."""

from __future__ import annotations

from collections.abc import Callable

import asyncpg
import pytest

from soniq.params import (
    ClaimJobsParams,
    CompleteJobsParams,
    EnqueueJobsParams,
    FindStaleJobsParams,
    GetDeadLetterParams,
    GetJobParams,
    HeartbeatParams,
    JobResult,
    RegisterWorkerParams,
    Rescue,
    RescueAction,
    RescueJobsParams,
    SetWorkerStatusParams,
)
from soniq.records import JobStatus, NewJob, StaleJobPolicy, WorkerInfo, WorkerStatus
from soniq.rescue import lost_worker_error, sweep_stale_workers
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
    info = WorkerInfo(id=worker_id, hostname="host", pid=1234, queues=("default",), concurrency=2)
    await backend.register_worker(RegisterWorkerParams(worker=info))


async def _claim(backend: PostgresBackend, worker_id: str, limit: int, *, started: bool) -> None:
    await backend.claim_jobs(ClaimJobsParams(worker_id=worker_id, queues=None, limit=limit, mark_started=started))


async def test_find_is_skipped_while_another_sweeper_holds_the_lock(
    backend: PostgresBackend, raw: asyncpg.Connection, namespace: str
) -> None:
    scan_params = FindStaleJobsParams(heartbeat_timeout=60)
    async with raw.transaction():
        await raw.execute("SELECT pg_advisory_xact_lock($1, hashtext($2))", RECOVERY_LOCK, namespace)
        assert (await backend.find_stale_jobs(scan_params)).skipped
    assert not (await backend.find_stale_jobs(scan_params)).skipped


async def test_find_marks_stale_workers_stopped_and_returns_their_rows_untouched(
    backend: PostgresBackend, raw: asyncpg.Connection, namespace: str, make_job: Callable[..., NewJob]
) -> None:
    first, second, live = make_job(), make_job(), make_job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[first, second, live]))
    await _register(backend, "dead")
    await _register(backend, "alive")
    await _claim(backend, "dead", 1, started=False)
    await _claim(backend, "dead", 1, started=True)
    await _claim(backend, "alive", 1, started=True)
    await _age_worker(raw, namespace, "dead", 120)
    before = {job.id: await backend.get_job(GetJobParams(job_id=job.id)) for job in (first, second)}

    scan = await backend.find_stale_jobs(FindStaleJobsParams(heartbeat_timeout=60))

    assert scan.stale_workers == ("dead",)
    assert [row.id for row in scan.orphaned] == [first.id, second.id]  # oldest updated_at first
    assert {row.id: row for row in scan.orphaned} == before  # as read, nothing written to the rows
    workers = {w.id: w.status for w in await backend.list_workers()}
    assert workers == {"dead": WorkerStatus.STOPPED, "alive": WorkerStatus.ACTIVE}
    assert await backend.heartbeat(HeartbeatParams(worker_id="dead")) is False
    assert await backend.heartbeat(HeartbeatParams(worker_id="alive")) is True


async def test_a_sweep_stores_cores_decision_for_each_row(
    backend: PostgresBackend, raw: asyncpg.Connection, namespace: str, make_job: Callable[..., NewJob]
) -> None:
    never, started, last_try, live = make_job(), make_job(), make_job(max_attempts=1), make_job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[never, started, last_try, live]))
    await _register(backend, "dead")
    await _register(backend, "alive")
    await _claim(backend, "dead", 1, started=False)
    await _claim(backend, "dead", 2, started=True)
    await _claim(backend, "alive", 1, started=True)
    await _age_worker(raw, namespace, "dead", 120)

    result = await sweep_stale_workers(backend, heartbeat_timeout=60, policy=StaleJobPolicy.REQUEUE)
    assert result.stale_workers == ("dead",)
    assert set(result.requeued) == {never.id, started.id}
    assert result.dead_lettered == (last_try.id,)

    never_row = await backend.get_job(GetJobParams(job_id=never.id))
    assert never_row is not None
    assert (never_row.status, never_row.attempts, never_row.last_error) == (JobStatus.QUEUED, 0, None)
    started_row = await backend.get_job(GetJobParams(job_id=started.id))
    assert started_row is not None
    assert (started_row.status, started_row.attempts, started_row.worker_id) == (JobStatus.QUEUED, 1, None)
    assert started_row.last_error == lost_worker_error("dead", 60)
    live_row = await backend.get_job(GetJobParams(job_id=live.id))
    assert live_row is not None
    assert (live_row.status, live_row.worker_id) == (JobStatus.PROCESSING, "alive")
    dead_row = await backend.get_dead_letter(GetDeadLetterParams(job_id=last_try.id))
    assert dead_row is not None
    assert (dead_row.dead_letter_reason, dead_row.attempts) == ("worker_lost", 1)
    assert dead_row.last_error == lost_worker_error("dead", 60)


async def test_zombie_policy_dead_letters_only_started_rows(
    backend: PostgresBackend, raw: asyncpg.Connection, namespace: str, make_job: Callable[..., NewJob]
) -> None:
    never, started = make_job(), make_job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[never, started]))
    await _register(backend, "dead")
    await _claim(backend, "dead", 1, started=False)
    await _claim(backend, "dead", 1, started=True)
    await _age_worker(raw, namespace, "dead", 120)

    result = await sweep_stale_workers(backend, heartbeat_timeout=60, policy=StaleJobPolicy.DEAD_LETTER)
    assert result.requeued == (never.id,)
    assert result.dead_lettered == (started.id,)
    zombie = await backend.get_dead_letter(GetDeadLetterParams(job_id=started.id))
    assert zombie is not None
    assert zombie.dead_letter_reason == "zombie"
    assert await backend.get_job(GetJobParams(job_id=started.id)) is None


async def test_a_rescue_skips_rows_that_changed_since_they_were_read(
    backend: PostgresBackend, raw: asyncpg.Connection, namespace: str, make_job: Callable[..., NewJob]
) -> None:
    finished, touched, untouched = make_job(), make_job(), make_job(max_attempts=5)
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[finished, touched, untouched]))
    await _register(backend, "dead")
    await _claim(backend, "dead", 3, started=True)
    await _age_worker(raw, namespace, "dead", 120)
    scan = await backend.find_stale_jobs(FindStaleJobsParams(heartbeat_timeout=60))
    assert {row.id for row in scan.orphaned} == {finished.id, touched.id, untouched.id}

    # Between find and rescue the old owner completes one row; another row is written by someone else.
    done = await backend.complete_jobs(CompleteJobsParams(worker_id="dead", results=[JobResult(finished.id, "ok")]))
    assert done == {finished.id}
    await raw.execute(f'UPDATE "{namespace}".soniq_jobs SET updated_at = now() WHERE id = $1', touched.id)
    rescues = [
        Rescue(
            job_id=row.id,
            expected_worker_id="dead",
            expected_updated_at=row.updated_at,
            action=RescueAction.DEAD_LETTER if row.id == finished.id else RescueAction.REQUEUE,
            attempts=7,
            error="decided in core",
            reason="zombie",
        )
        for row in scan.orphaned
    ]

    assert await backend.rescue_jobs(RescueJobsParams(rescues=rescues)) == {untouched.id}
    finished_row = await backend.get_job(GetJobParams(job_id=finished.id))
    assert finished_row is not None
    assert (finished_row.status, finished_row.result) == (JobStatus.DONE, "ok")
    assert await backend.get_dead_letter(GetDeadLetterParams(job_id=finished.id)) is None
    touched_row = await backend.get_job(GetJobParams(job_id=touched.id))
    assert touched_row is not None
    assert (touched_row.status, touched_row.worker_id) == (JobStatus.PROCESSING, "dead")
    # The one row still as read took exactly the attempts and error it was handed.
    rescued = await backend.get_job(GetJobParams(job_id=untouched.id))
    assert rescued is not None
    assert (rescued.status, rescued.attempts, rescued.last_error) == (JobStatus.QUEUED, 7, "decided in core")
    assert (rescued.worker_id, rescued.started_at) == (None, None)
    # Replaying the same rescues writes nothing: the rescued row no longer matches what was read.
    assert await backend.rescue_jobs(RescueJobsParams(rescues=rescues)) == set()


async def test_a_dead_letter_rescue_moves_the_row_with_what_core_decided(
    backend: PostgresBackend, make_job: Callable[..., NewJob]
) -> None:
    job = make_job(max_attempts=9)
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
    [row] = await backend.claim_jobs(ClaimJobsParams(worker_id="gone", queues=None, limit=1, mark_started=True))
    rescue = Rescue(
        job_id=job.id,
        expected_worker_id="gone",
        expected_updated_at=row.updated_at,
        action=RescueAction.DEAD_LETTER,
        attempts=4,
        error="core's words",
        reason="worker_lost",
    )
    assert await backend.rescue_jobs(RescueJobsParams(rescues=[rescue])) == {job.id}
    assert await backend.get_job(GetJobParams(job_id=job.id)) is None
    dead = await backend.get_dead_letter(GetDeadLetterParams(job_id=job.id))
    assert dead is not None
    assert (dead.attempts, dead.last_error, dead.dead_letter_reason, dead.max_attempts) == (
        4,
        "core's words",
        "worker_lost",
        9,
    )


async def test_rows_of_an_unregistered_or_stopped_worker_are_found_once_the_row_is_old(
    backend: PostgresBackend, raw: asyncpg.Connection, namespace: str, make_job: Callable[..., NewJob]
) -> None:
    ghost_job, stopped_job = make_job(), make_job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[ghost_job]))
    await _claim(backend, "ghost", 1, started=False)
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[stopped_job]))
    await _register(backend, "quitter")
    await _claim(backend, "quitter", 1, started=True)
    assert await backend.set_worker_status(SetWorkerStatusParams(worker_id="quitter", status=WorkerStatus.STOPPED))
    params = FindStaleJobsParams(heartbeat_timeout=60)
    assert (await backend.find_stale_jobs(params)).orphaned == ()

    await raw.execute(
        f"UPDATE \"{namespace}\".soniq_jobs SET updated_at = now() - interval '2 minutes' WHERE id = $1", ghost_job.id
    )
    assert [row.id for row in (await backend.find_stale_jobs(params)).orphaned] == [ghost_job.id]
    # A stopped owner is judged by the row's age, never by the worker's heartbeat.
    await raw.execute(
        f"UPDATE \"{namespace}\".soniq_jobs SET updated_at = now() - interval '1 minute 30 seconds' WHERE id = $1",
        stopped_job.id,
    )
    scan = await backend.find_stale_jobs(params)
    assert [row.id for row in scan.orphaned] == [ghost_job.id, stopped_job.id]
    assert scan.stale_workers == ()


async def test_worker_status_writes(backend: PostgresBackend) -> None:
    await _register(backend, "w")
    assert await backend.set_worker_status(SetWorkerStatusParams(worker_id="w", status=WorkerStatus.STOPPING))
    assert [w.status for w in await backend.list_workers()] == [WorkerStatus.STOPPING]
    assert await backend.heartbeat(HeartbeatParams(worker_id="w")) is True
    assert await backend.set_worker_status(SetWorkerStatusParams(worker_id="w", status=WorkerStatus.STOPPED))
    assert await backend.heartbeat(HeartbeatParams(worker_id="w")) is False
    assert not await backend.set_worker_status(SetWorkerStatusParams(worker_id="w", status=WorkerStatus.STOPPING))
    assert [w.status for w in await backend.list_workers()] == [WorkerStatus.STOPPED]
    assert not await backend.set_worker_status(SetWorkerStatusParams(worker_id="nobody", status=WorkerStatus.STOPPED))
