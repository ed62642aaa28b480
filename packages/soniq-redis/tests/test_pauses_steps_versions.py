"""Queue pauses, steps and checkpoints, job versions and shutdown nacks, on one Redis and on a
Redis Cluster, including rows written before those fields existed."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import pytest_asyncio
from redis.asyncio import Redis

from soniq.params import (
    ClaimJobsParams,
    CompleteJobsParams,
    DeadLetterJobParams,
    EnqueueJobsParams,
    GetJobParams,
    GroupLimit,
    JobResult,
    LimitScope,
    NackJobParams,
    PauseQueueParams,
    RegisterWorkerParams,
    ReplayDeadLetterParams,
    ResumeQueueParams,
    SaveCheckpointParams,
    SaveStepParams,
)
from soniq.records import JobRecord, JobStatus, NewJob, WorkerInfo
from soniq_redis import RedisBackend

REDIS_URL = os.environ.get("SONIQ_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
CLUSTER_URL = os.environ.get("SONIQ_TEST_REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:7000")

pytestmark = pytest.mark.asyncio

NEW_FIELDS = ("shutdown_nacks", "version", "steps", "checkpoint")


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true, so this fails instead of skipping)")
    pytest.skip(reason)


@pytest_asyncio.fixture(params=["single", "cluster"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[RedisBackend]:
    """A connected backend in a fresh namespace, on the single server and on the cluster."""
    url = REDIS_URL if request.param == "single" else CLUSTER_URL
    backend = RedisBackend.from_url(url, namespace=f"r3_{uuid.uuid4().hex[:10]}")
    try:
        await backend.connect()
    except Exception as exc:
        _unavailable(f"no Redis at {url} ({exc})")
    try:
        yield backend
    finally:
        await backend.drop_schema()
        await backend.close()


def _job(name: str = "tests.job", *, queue: str = "default", version: int = 1, **fields: Any) -> NewJob:
    fields.setdefault("scheduled_at", datetime.now(UTC) - timedelta(seconds=1))
    return NewJob(
        id=str(uuid.uuid4()),
        job_name=name,
        args={"n": 1},
        queue=queue,
        priority=100,
        max_attempts=3,
        version=version,
        **fields,
    )


async def _enqueue(backend: RedisBackend, *jobs: NewJob) -> list[str]:
    ids = await backend.enqueue_jobs(EnqueueJobsParams(jobs=list(jobs)))
    assert ids is not None
    return ids


async def _claim(backend: RedisBackend, worker: str = "w1", limit: int = 100, **extra: Any) -> list[JobRecord]:
    queues = extra.pop("queues", None)
    params = ClaimJobsParams(worker_id=worker, queues=queues, limit=limit, mark_started=True, **extra)
    return await backend.claim_jobs(params)


async def _get(backend: RedisBackend, job_id: str) -> JobRecord:
    row = await backend.get_job(GetJobParams(job_id=job_id))
    assert row is not None
    return row


def _raw(backend: RedisBackend) -> Redis:
    client = backend._client
    assert client is not None
    return client


async def _until_server_time(backend: RedisBackend, moment: datetime) -> None:
    """Wait (bounded) until the server's clock, which the scripts read, has passed `moment`."""
    deadline = asyncio.get_running_loop().time() + 5.0
    while True:
        seconds, micros = await _raw(backend).time()
        if datetime.fromtimestamp(seconds, UTC) + timedelta(microseconds=micros) > moment:
            return
        assert asyncio.get_running_loop().time() < deadline, "the server clock did not reach the moment"
        await asyncio.sleep(0.02)


# Both claim paths: the plain one, and the limited one under a limit that never binds.
ROOMY = (GroupLimit(scope=LimitScope.QUEUE, name="unused-queue", max_concurrent=1000),)


@pytest.mark.parametrize("limits", [(), ROOMY], ids=["plain", "limited"])
async def test_rows_written_before_the_new_fields_read_as_defaults_and_still_run(
    store: RedisBackend, limits: tuple[GroupLimit, ...]
) -> None:
    ids = await _enqueue(store, *(_job() for _ in range(3)))
    for job_id in ids:
        # The shape an older soniq-redis wrote: none of the four fields.
        await _raw(store).hdel(store.keys.job(job_id), *NEW_FIELDS)
        row = await _get(store, job_id)
        assert (row.shutdown_nacks, row.version, dict(row.steps), row.checkpoint) == (0, 1, {}, None)
    claimed = await _claim(store, limits=limits, max_versions={"tests.job": 1}, excluded_queues=["other"])
    assert sorted(row.id for row in claimed) == sorted(ids)
    assert all(row.version == 1 and row.shutdown_nacks == 0 and dict(row.steps) == {} for row in claimed)
    assert await store.save_step(SaveStepParams(job_id=ids[0], worker_id="w1", name="a", value_json="1"))
    assert dict((await _get(store, ids[0])).steps) == {"a": 1}
    done = await store.complete_jobs(CompleteJobsParams(worker_id="w1", results=[JobResult(i, None) for i in ids]))
    assert done == set(ids)
    assert {(await _get(store, job_id)).status for job_id in ids} == {JobStatus.DONE}


async def test_enqueue_writes_the_new_fields_and_the_roles_are_declared(store: RedisBackend) -> None:
    (job_id,) = await _enqueue(store, _job(version=3))
    fields = await _raw(store).hgetall(store.keys.job(job_id))
    assert (fields["shutdown_nacks"], fields["version"], fields["steps"]) == ("0", "3", "{}")
    assert "checkpoint" not in fields
    roles = store.capabilities.roles
    assert (roles["QueuePauseStore"], roles["JobStepStore"], roles["VersionedJobs"]) == (1, 1, 1)


async def test_pause_resume_and_the_pause_hash(store: RedisBackend) -> None:
    assert await store.pause_queue(PauseQueueParams(queue="b", reason="deploy"))
    assert await store.pause_queue(PauseQueueParams(queue="a"))
    first = {p.queue: p for p in await store.paused_queues()}
    assert not await store.pause_queue(PauseQueueParams(queue="b", reason="still deploying"))
    paused = await store.paused_queues()
    assert [p.queue for p in paused] == ["a", "b"]
    assert paused[0].reason is None
    assert paused[1].reason == "still deploying"
    assert paused[1].paused_at == first["b"].paused_at
    assert abs(paused[1].paused_at - datetime.now(UTC)) < timedelta(minutes=1)
    stored = json.loads(await _raw(store).hget(store.keys.paused_queues, "b"))  # type: ignore[arg-type]
    assert set(stored) == {"reason", "paused_at"}
    assert await store.resume_queue(ResumeQueueParams(queue="b"))
    assert not await store.resume_queue(ResumeQueueParams(queue="b"))
    assert [p.queue for p in await store.paused_queues()] == ["a"]


@pytest.mark.parametrize("limits", [(), ROOMY], ids=["plain", "limited"])
@pytest.mark.parametrize("named", [False, True], ids=["every-queue", "named-queues"])
async def test_a_claim_neither_takes_nor_touches_rows_of_excluded_queues(
    store: RedisBackend, limits: tuple[GroupLimit, ...], named: bool
) -> None:
    later = datetime.now(UTC) + timedelta(milliseconds=200)
    paused_ids = await _enqueue(store, _job(queue="paused"), _job(queue="paused", scheduled_at=later))
    (open_id,) = await _enqueue(store, _job(queue="open"))
    before = {job_id: await _raw(store).hgetall(store.keys.job(job_id)) for job_id in paused_ids}
    await _until_server_time(store, later)  # the second paused row is now due, still unpromoted
    queues = ["paused", "open"] if named else None
    claimed = await _claim(store, queues=queues, limits=limits, excluded_queues=["paused"])
    assert [row.id for row in claimed] == [open_id]
    for job_id in paused_ids:
        assert await _raw(store).hgetall(store.keys.job(job_id)) == before[job_id]
    claimed = await _claim(store, worker="w2", queues=queues, limits=limits)
    assert sorted(row.id for row in claimed) == sorted(paused_ids)


@pytest.mark.parametrize("limits", [(), ROOMY], ids=["plain", "limited"])
@pytest.mark.parametrize(
    "max_versions",
    [{"a": 2, "b": 2}, {"a": 2, "b": 4}],
    ids=["one-maximum", "distinct-maxima"],
)
async def test_a_claim_passes_over_rows_newer_than_its_code(
    store: RedisBackend, limits: tuple[GroupLimit, ...], max_versions: dict[str, int]
) -> None:
    jobs = [_job("a", version=v) for v in (1, 2, 3)] + [_job("b", version=v) for v in (2, 3)] + [_job("c", version=9)]
    await _enqueue(store, *jobs)
    claimed = await _claim(store, limits=limits, max_versions=max_versions)
    got = sorted((row.job_name, row.version) for row in claimed)
    expected = sorted(
        (job.job_name, job.version) for job in jobs if job.version <= max_versions.get(job.job_name, job.version)
    )
    assert got == expected
    left = [job for job in jobs if (job.job_name, job.version) not in got]
    for job in left:
        row = await _get(store, job.id)
        assert (row.status, row.worker_id) == (JobStatus.QUEUED, None)
    claimed = await _claim(store, worker="w2", limits=limits)
    assert sorted(row.id for row in claimed) == sorted(job.id for job in left)


async def test_steps_are_spliced_exactly_fenced_and_kept_across_a_shutdown_nack(store: RedisBackend) -> None:
    (job_id,) = await _enqueue(store, _job())
    assert not await store.save_step(SaveStepParams(job_id=job_id, worker_id="w1", name="x", value_json="1"))
    (row,) = await _claim(store)
    awkward = 'a "quoted": {name}, [x]\\'
    steps = {
        "big": "123456789012345678901234567890",
        "float": "0.30000000000000004",
        awkward: '{"nested":[1,{"}":"]"}],"s":"\\"{"}',
        "plain": '"text"',
    }
    for name, value in steps.items():
        assert await store.save_step(SaveStepParams(job_id=job_id, worker_id="w1", name=name, value_json=value))
    assert await store.save_step(SaveStepParams(job_id=job_id, worker_id="w1", name="plain", value_json="null"))
    assert not await store.save_step(SaveStepParams(job_id=job_id, worker_id="w9", name="plain", value_json="7"))
    assert await store.save_checkpoint(SaveCheckpointParams(job_id=job_id, worker_id="w1", value_json='{"page":3}'))
    assert not await store.save_checkpoint(SaveCheckpointParams(job_id=job_id, worker_id="w9", value_json="0"))
    expected = {name: json.loads(value) for name, value in steps.items()} | {"plain": None}
    row = await _get(store, job_id)
    assert dict(row.steps) == expected
    assert row.steps["big"] == 123456789012345678901234567890
    assert row.checkpoint == {"page": 3}
    assert await store.nack_job(NackJobParams(job_id=job_id, worker_id="w1", handler_started=True))
    (again,) = await _claim(store, worker="w2")
    assert (again.shutdown_nacks, dict(again.steps), again.checkpoint) == (1, expected, {"page": 3})
    assert await store.nack_job(NackJobParams(job_id=job_id, worker_id="w2"))
    assert (await _get(store, job_id)).shutdown_nacks == 1


async def test_a_dead_letter_drops_steps_and_a_replay_keeps_the_version(store: RedisBackend) -> None:
    (job_id,) = await _enqueue(store, _job(version=4))
    await _claim(store)
    assert await store.save_step(SaveStepParams(job_id=job_id, worker_id="w1", name="s", value_json="1"))
    assert await store.dead_letter_job(
        DeadLetterJobParams(job_id=job_id, worker_id="w1", error="boom", reason="max_retries")
    )
    new_id = await store.replay_dead_letter(
        ReplayDeadLetterParams(job_id=job_id, new_job_id=str(uuid.uuid4()), scheduled_at=datetime.now(UTC))
    )
    assert new_id is not None
    row = await _get(store, new_id)
    assert (row.version, dict(row.steps), row.checkpoint, row.shutdown_nacks) == (4, {}, None, 0)


async def test_workers_report_their_job_versions(store: RedisBackend) -> None:
    info = WorkerInfo(id="w1", hostname="h", pid=1, queues=None, concurrency=2, job_names=("a",), job_versions={"a": 3})
    await store.register_worker(RegisterWorkerParams(worker=info))
    plain = WorkerInfo(id="w2", hostname="h", pid=2, queues=None, concurrency=1)
    await store.register_worker(RegisterWorkerParams(worker=plain))
    workers = {w.id: w for w in await store.list_workers()}
    assert workers["w1"].job_versions == {"a": 3}
    assert workers["w2"].job_versions is None


async def test_the_pause_hash_and_step_writes_stay_in_the_namespace_slot(store: RedisBackend) -> None:
    await store.pause_queue(PauseQueueParams(queue="q"))
    (job_id,) = await _enqueue(store, _job())
    await _claim(store, excluded_queues=["q"], max_versions={"tests.job": 1, "x": 2})
    assert await store.save_step(SaveStepParams(job_id=job_id, worker_id="w1", name="s", value_json="1"))
    client = _raw(store)
    keys = [key async for key in client.scan_iter(match=store.keys.scan_pattern)]
    assert store.keys.paused_queues in keys
    if hasattr(client, "cluster_keyslot"):
        slots = {await client.cluster_keyslot(key) for key in keys}
        assert len(slots) == 1
