"""The memory backend's queue pauses, steps and checkpoints, job versions and shutdown nacks."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from soniq.backend import (
    ClaimJobsParams,
    DeadLetterJobParams,
    EnqueueJobsParams,
    FindStaleJobsParams,
    GetDeadLetterParams,
    GetJobParams,
    GroupLimit,
    JobRecord,
    JobStatus,
    LimitScope,
    NackJobParams,
    NewJob,
    PauseQueueParams,
    RegisterWorkerParams,
    ReplayDeadLetterParams,
    Rescue,
    RescueAction,
    RescueJobsParams,
    ResumeQueueParams,
    RetryJobParams,
    SaveCheckpointParams,
    SaveStepParams,
    SnoozeJobParams,
    WaitForJobsParams,
    WorkerInfo,
)
from soniq_memory import MemoryBackend

pytestmark = pytest.mark.asyncio


def _job(queue: str = "default", job_name: str = "example", **fields: object) -> NewJob:
    values: dict[str, object] = {
        "id": str(uuid.uuid4()),
        "job_name": job_name,
        "args": {"x": 1},
        "queue": queue,
        "priority": 100,
        "scheduled_at": datetime.now(UTC) - timedelta(seconds=1),
        "max_attempts": 3,
    }
    values.update(fields)
    return NewJob(**values)  # type: ignore[arg-type]


def _claim(worker_id: str = "w1", **fields: object) -> ClaimJobsParams:
    values: dict[str, object] = {"worker_id": worker_id, "queues": None, "limit": 10, "mark_started": True}
    values.update(fields)
    return ClaimJobsParams(**values)  # type: ignore[arg-type]


async def _enqueue(backend: MemoryBackend, *jobs: NewJob) -> list[str]:
    ids = await backend.enqueue_jobs(EnqueueJobsParams(jobs=jobs))
    assert ids is not None
    return ids


async def _row(backend: MemoryBackend, job_id: str) -> JobRecord:
    row = await backend.get_job(GetJobParams(job_id=job_id))
    assert row is not None
    return row


async def test_the_backend_declares_the_three_new_roles() -> None:
    roles = MemoryBackend().capabilities.roles
    assert roles["QueuePauseStore"] == 1
    assert roles["JobStepStore"] == 1
    assert roles["VersionedJobs"] == 1


# -- queue pauses -----------------------------------------------------------------


async def test_pausing_twice_keeps_the_first_paused_at_and_the_last_reason() -> None:
    backend = MemoryBackend()
    assert await backend.pause_queue(PauseQueueParams(queue="mail", reason="deploy"))
    first = await backend.paused_queues()
    assert not await backend.pause_queue(PauseQueueParams(queue="mail", reason="still deploying"))
    assert await backend.pause_queue(PauseQueueParams(queue="billing"))
    paused = await backend.paused_queues()
    assert [(row.queue, row.reason) for row in paused] == [("billing", None), ("mail", "still deploying")]
    assert paused[1].paused_at == first[0].paused_at
    assert await backend.resume_queue(ResumeQueueParams(queue="mail"))
    assert not await backend.resume_queue(ResumeQueueParams(queue="mail"))
    assert [row.queue for row in await backend.paused_queues()] == ["billing"]


async def test_a_pause_is_shared_by_every_backend_on_one_named_store_and_reset_forgets_it() -> None:
    name = f"pauses-{uuid.uuid4()}"
    producer, worker = MemoryBackend.from_url(f"memory://{name}"), MemoryBackend.from_url(f"memory://{name}")
    await producer.pause_queue(PauseQueueParams(queue="mail"))
    assert [row.queue for row in await worker.paused_queues()] == ["mail"]
    worker.reset()
    assert await producer.paused_queues() == []


async def test_a_claim_leaves_rows_of_excluded_queues_queued_and_untouched() -> None:
    backend = MemoryBackend()
    paused_id, open_id = await _enqueue(backend, _job("mail", dedup_key="k"), _job("default"))
    before = backend.jobs[paused_id]
    claimed = await backend.claim_jobs(_claim(excluded_queues=("mail",)))
    assert [row.id for row in claimed] == [open_id]
    assert backend.jobs[paused_id] == before
    claimed = await backend.claim_jobs(_claim(queues=("mail",), excluded_queues=("mail",)))
    assert claimed == []
    assert [row.id for row in await backend.claim_jobs(_claim())] == [paused_id]


async def test_the_claim_with_limits_honours_excluded_queues_too() -> None:
    backend = MemoryBackend()
    paused_id, open_id = await _enqueue(backend, _job("mail"), _job("default"))
    limits = (GroupLimit(LimitScope.QUEUE, "default", max_concurrent=5),)
    claimed = await backend.claim_jobs(_claim(limits=limits, excluded_queues=("mail",)))
    assert [row.id for row in claimed] == [open_id]
    assert backend.jobs[paused_id].status is JobStatus.QUEUED


async def test_resuming_a_queue_wakes_a_worker_waiting_on_it() -> None:
    backend = MemoryBackend()
    await backend.pause_queue(PauseQueueParams(queue="mail"))
    waiting = asyncio.ensure_future(backend.wait_for_jobs(WaitForJobsParams(queues=("mail",), timeout=30)))
    await asyncio.sleep(0)
    assert not waiting.done()
    await backend.resume_queue(ResumeQueueParams(queue="mail"))
    await asyncio.wait_for(waiting, timeout=5)


# -- versions ------------------------------------------------------------------------


async def test_rows_carry_their_version_and_a_claim_skips_rows_newer_than_the_worker() -> None:
    backend = MemoryBackend()
    old, new, other = await _enqueue(
        backend,
        _job(job_name="report", version=2),
        _job(job_name="report", version=3),
        _job(job_name="other", version=7),
    )
    assert (await _row(backend, old)).version == 2
    assert (await _row(backend, new)).version == 3
    before = backend.jobs[new]
    claimed = await backend.claim_jobs(_claim(max_versions={"report": 2}))
    # "other" is not a key: any version of it is claimed.
    assert sorted(row.id for row in claimed) == sorted([old, other])
    assert {row.id: row.version for row in claimed} == {old: 2, other: 7}
    assert backend.jobs[new] == before
    assert [row.id for row in await backend.claim_jobs(_claim("w2", max_versions={"report": 3}))] == [new]


async def test_max_versions_with_distinct_values_compares_each_name_with_its_own() -> None:
    backend = MemoryBackend()
    a1, a2, b1, b2 = await _enqueue(
        backend,
        _job(job_name="a", version=1),
        _job(job_name="a", version=2),
        _job(job_name="b", version=1),
        _job(job_name="b", version=2),
    )
    limits = (GroupLimit(LimitScope.QUEUE, "default", max_concurrent=10),)
    claimed = await backend.claim_jobs(_claim(max_versions={"a": 1, "b": 2}, limits=limits))
    assert sorted(row.id for row in claimed) == sorted([a1, b1, b2])
    assert backend.jobs[a2].status is JobStatus.QUEUED


async def test_a_job_without_a_version_is_version_1_and_a_bad_version_stores_nothing() -> None:
    backend = MemoryBackend()
    (job_id,) = await _enqueue(backend, _job())
    assert (await _row(backend, job_id)).version == 1
    with pytest.raises(ValueError, match="version"):
        await _enqueue(backend, _job(), _job(version=0))
    assert len(backend.jobs) == 1


async def test_a_worker_s_job_versions_are_stored_and_listed() -> None:
    backend = MemoryBackend()
    info = WorkerInfo(id="w1", hostname="h", pid=1, queues=None, concurrency=1, job_names=("a",), job_versions={"a": 3})
    await backend.register_worker(RegisterWorkerParams(worker=info))
    (worker,) = await backend.list_workers()
    assert worker.job_versions == {"a": 3}


# -- steps and checkpoints -------------------------------------------------------------


async def _claimed(backend: MemoryBackend, worker_id: str = "w1") -> str:
    (job_id,) = await _enqueue(backend, _job())
    (row,) = await backend.claim_jobs(_claim(worker_id))
    assert row.steps == {}
    assert row.checkpoint is None
    return job_id


async def test_save_step_sets_one_key_keeps_the_others_and_is_fenced() -> None:
    backend = MemoryBackend()
    job_id = await _claimed(backend)
    assert await backend.save_step(SaveStepParams(job_id=job_id, worker_id="w1", name="fetch", value_json="[1, 2]"))
    assert await backend.save_step(SaveStepParams(job_id=job_id, worker_id="w1", name="parse", value_json='{"n": 2}'))
    assert await backend.save_step(SaveStepParams(job_id=job_id, worker_id="w1", name="fetch", value_json="3"))
    assert not await backend.save_step(SaveStepParams(job_id=job_id, worker_id="w2", name="x", value_json="1"))
    assert not await backend.save_step(SaveStepParams(job_id="missing", worker_id="w1", name="x", value_json="1"))
    assert await backend.save_checkpoint(SaveCheckpointParams(job_id=job_id, worker_id="w1", value_json='"page-4"'))
    assert not await backend.save_checkpoint(SaveCheckpointParams(job_id=job_id, worker_id="w2", value_json="0"))
    row = await _row(backend, job_id)
    assert row.steps == {"fetch": 3, "parse": {"n": 2}}
    assert row.checkpoint == "page-4"


async def test_steps_are_not_written_once_the_row_is_no_longer_processing() -> None:
    backend = MemoryBackend()
    job_id = await _claimed(backend)
    await backend.nack_job(NackJobParams(job_id=job_id, worker_id="w1"))
    assert not await backend.save_step(SaveStepParams(job_id=job_id, worker_id="w1", name="x", value_json="1"))
    assert not await backend.save_checkpoint(SaveCheckpointParams(job_id=job_id, worker_id="w1", value_json="1"))
    assert (await _row(backend, job_id)).steps == {}


async def test_steps_and_checkpoint_survive_nack_retry_snooze_and_rescue() -> None:
    backend = MemoryBackend()
    job_id = await _claimed(backend)
    expected: dict[str, object] = {}

    async def save(worker_id: str, name: str) -> None:
        assert await backend.save_step(
            SaveStepParams(job_id=job_id, worker_id=worker_id, name=name, value_json=json.dumps(name))
        )
        assert await backend.save_checkpoint(
            SaveCheckpointParams(job_id=job_id, worker_id=worker_id, value_json=json.dumps({"at": name}))
        )
        expected[name] = name

    async def reclaim(worker_id: str) -> JobRecord:
        (row,) = await backend.claim_jobs(_claim(worker_id))
        assert row.id == job_id
        return row

    await save("w1", "one")
    await backend.nack_job(NackJobParams(job_id=job_id, worker_id="w1", handler_started=True))
    row = await reclaim("w2")
    assert row.steps == expected
    assert row.checkpoint == {"at": "one"}
    await save("w2", "two")
    now = datetime.now(UTC) - timedelta(seconds=1)
    await backend.retry_job(RetryJobParams(job_id=job_id, worker_id="w2", error="boom", scheduled_at=now))
    row = await reclaim("w3")
    assert row.steps == expected
    assert row.checkpoint == {"at": "two"}
    await save("w3", "three")
    await backend.snooze_job(SnoozeJobParams(job_id=job_id, worker_id="w3", scheduled_at=now))
    row = await reclaim("w4")
    assert row.steps == expected
    await save("w4", "four")
    # w4 never registered: stale recovery finds its row once it is old enough.
    scan = await backend.find_stale_jobs(FindStaleJobsParams(heartbeat_timeout=0.0))
    (orphan,) = scan.orphaned
    rescue = Rescue(
        job_id=job_id,
        action=RescueAction.REQUEUE,
        expected_worker_id="w4",
        expected_updated_at=orphan.updated_at,
        attempts=orphan.attempts + 1,
    )
    assert await backend.rescue_jobs(RescueJobsParams(rescues=(rescue,))) == {job_id}
    row = await _row(backend, job_id)
    assert row.status is JobStatus.QUEUED
    assert row.steps == expected
    assert row.checkpoint == {"at": "four"}
    assert row.shutdown_nacks == 1


async def test_a_dead_lettered_job_replays_without_its_steps() -> None:
    backend = MemoryBackend()
    job_id = await _claimed(backend)
    await backend.save_step(SaveStepParams(job_id=job_id, worker_id="w1", name="x", value_json="1"))
    await backend.dead_letter_job(DeadLetterJobParams(job_id=job_id, worker_id="w1", error="e", reason="max_retries"))
    assert await backend.get_dead_letter(GetDeadLetterParams(job_id=job_id)) is not None
    new_id = str(uuid.uuid4())
    await backend.replay_dead_letter(
        ReplayDeadLetterParams(job_id=job_id, new_job_id=new_id, scheduled_at=datetime.now(UTC))
    )
    row = await _row(backend, new_id)
    assert row.steps == {}
    assert row.checkpoint is None
    assert row.shutdown_nacks == 0


async def test_returned_steps_are_copies() -> None:
    backend = MemoryBackend()
    job_id = await _claimed(backend)
    await backend.save_step(SaveStepParams(job_id=job_id, worker_id="w1", name="x", value_json='{"a": [1]}'))
    row = await _row(backend, job_id)
    row.steps["x"]["a"].append(2)
    assert (await _row(backend, job_id)).steps == {"x": {"a": [1]}}


# -- shutdown nacks ----------------------------------------------------------------------


async def test_only_a_nack_after_the_handler_started_counts_a_shutdown_nack() -> None:
    backend = MemoryBackend()
    (job_id,) = await _enqueue(backend, _job())
    assert (await _row(backend, job_id)).shutdown_nacks == 0
    await backend.claim_jobs(_claim())
    assert await backend.nack_job(NackJobParams(job_id=job_id, worker_id="w1"))
    assert (await _row(backend, job_id)).shutdown_nacks == 0
    for count in (1, 2):
        (row,) = await backend.claim_jobs(_claim())
        assert row.shutdown_nacks == count - 1
        assert await backend.nack_job(NackJobParams(job_id=job_id, worker_id="w1", handler_started=True))
        assert (await _row(backend, job_id)).shutdown_nacks == count
    # A nack of a row the worker no longer owns writes nothing.
    assert not await backend.nack_job(NackJobParams(job_id=job_id, worker_id="w1", handler_started=True))
    row = await _row(backend, job_id)
    assert row.shutdown_nacks == 2
    assert row.attempts == 0
