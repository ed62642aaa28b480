"""Progress and job logs (`JobProgressStore`, `JobLogStore`) on one Redis and on a Redis Cluster:
fenced writes, what reads return, and the logs' way through retries, dead-letter moves and deletes."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import pytest_asyncio
from redis.asyncio import Redis

import soniq_redis.backend
from soniq.params import (
    ClaimJobsParams,
    DeadLetterJobParams,
    DeleteJobParams,
    EnqueueJobsParams,
    ExpireUnknownJobsParams,
    FindStaleJobsParams,
    GetJobLogsParams,
    GetJobParams,
    NackJobParams,
    PurgeDeadLetterParams,
    ReplayDeadLetterParams,
    RescueJobsParams,
    RetryJobParams,
    SaveJobLogsParams,
    SaveProgressParams,
)
from soniq.records import JobRecord, NewJob, Rescue, RescueAction
from soniq_redis import RedisBackend, rows

REDIS_URL = os.environ.get("SONIQ_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
CLUSTER_URL = os.environ.get("SONIQ_TEST_REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:7000")

pytestmark = pytest.mark.asyncio

PROGRESS = {"done": 3, "total": 10, "message": "rows", "updated_at": "2026-01-01T00:00:00+00:00"}
LOGS = json.dumps([{"level": "INFO", "message": "hello \u00e9\u0000"}])


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true, so this fails instead of skipping)")
    pytest.skip(reason)


@pytest_asyncio.fixture(params=["single", "cluster"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[RedisBackend]:
    url = REDIS_URL if request.param == "single" else CLUSTER_URL
    backend = RedisBackend.from_url(url, namespace=f"pl_{uuid.uuid4().hex[:10]}")
    try:
        await backend.connect()
    except Exception as exc:
        _unavailable(f"no Redis at {url} ({exc})")
    try:
        yield backend
    finally:
        await backend.drop_schema()
        await backend.close()


async def _claimed(backend: RedisBackend, worker: str = "w1") -> JobRecord:
    """Enqueue one due job and claim it as `worker`."""
    job = NewJob(
        id=str(uuid.uuid4()),
        job_name="tests.job",
        args={},
        queue="default",
        priority=100,
        scheduled_at=datetime.now(UTC) - timedelta(seconds=1),
        max_attempts=3,
    )
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
    [row] = await backend.claim_jobs(ClaimJobsParams(worker_id=worker, queues=None, limit=1, mark_started=True))
    assert row.id == job.id
    return row


async def _logs(backend: RedisBackend, job_id: str) -> str | None:
    return await backend.get_job_logs(GetJobLogsParams(job_id=job_id))


async def _progress(backend: RedisBackend, job_id: str) -> dict[str, Any] | None:
    row = await backend.get_job(GetJobParams(job_id=job_id))
    assert row is not None
    return None if row.progress is None else dict(row.progress)


async def _saved(backend: RedisBackend, job_id: str, worker: str = "w1") -> None:
    assert await backend.save_progress(SaveProgressParams(job_id, worker, json.dumps(PROGRESS)))
    assert await backend.save_job_logs(SaveJobLogsParams(job_id, worker, LOGS))


def _raw(backend: RedisBackend) -> Redis:
    client = backend._client
    assert client is not None
    return client


async def test_writes_are_fenced_and_every_read_decodes_progress(
    store: RedisBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    roles = store.capabilities.roles
    assert (roles["JobProgressStore"], roles["JobLogStore"]) == (1, 1)
    row = await _claimed(store)
    assert row.progress is None
    assert await _logs(store, row.id) is None
    assert not await store.save_progress(SaveProgressParams(row.id, "w2", json.dumps(PROGRESS)))
    assert not await store.save_job_logs(SaveJobLogsParams(row.id, "w2", LOGS))
    assert not await store.save_progress(SaveProgressParams("no-such-id", "w1", "{}"))
    fields = await _raw(store).hgetall(store.keys.job(row.id))
    assert not {"progress", "logs"} & set(fields)
    await _saved(store, row.id)
    assert await _progress(store, row.id) == PROGRESS
    assert await _logs(store, row.id) == LOGS
    # The stale scan decodes progress too, and neither it nor a claim ships the logs.
    shipped: list[dict[str, str]] = []

    def recorded(flat: Sequence[Any]) -> dict[str, str]:
        shipped.append(rows.pairs(flat))
        return shipped[-1]

    monkeypatch.setattr(soniq_redis.backend, "pairs", recorded)
    [stale] = (await store.find_stale_jobs(FindStaleJobsParams(heartbeat_timeout=0.0))).orphaned
    assert dict(stale.progress or {}) == PROGRESS
    assert await store.nack_job(NackJobParams(row.id, "w1"))
    assert not await store.save_progress(SaveProgressParams(row.id, "w1", "{}"))  # queued: no owner
    [again] = await store.claim_jobs(ClaimJobsParams(worker_id="w2", queues=None, limit=1, mark_started=True))
    assert dict(again.progress or {}) == PROGRESS
    assert await _logs(store, row.id) == LOGS
    assert len(shipped) == 2
    assert not any("logs" in fields for fields in shipped)
    # A value another program broke, or one that is not an object, reads as none.
    for broken in ("{not json", "[1, 2]"):
        await _raw(store).hset(store.keys.job(row.id), "progress", broken)
        assert await _progress(store, row.id) is None


@pytest.mark.parametrize("path", ["dead_letter_job", "rescue", "expire_unknown"])
async def test_logs_survive_a_retry_and_move_with_every_dead_letter_path(store: RedisBackend, path: str) -> None:
    row = await _claimed(store)
    await _saved(store, row.id)
    now = datetime.now(UTC)
    assert await store.retry_job(RetryJobParams(row.id, "w1", "boom", scheduled_at=now - timedelta(seconds=1)))
    assert await _logs(store, row.id) == LOGS
    if path == "expire_unknown":
        moved = await store.expire_unknown_jobs(ExpireUnknownJobsParams(known_names=[], older_than=0.0, error="gone"))
        assert moved == {row.id}
    else:
        [claimed] = await store.claim_jobs(ClaimJobsParams(worker_id="w1", queues=None, limit=1, mark_started=True))
        if path == "dead_letter_job":
            assert await store.dead_letter_job(DeadLetterJobParams(row.id, "w1", "boom", "max_retries"))
        else:
            rescue = Rescue(
                job_id=row.id,
                expected_worker_id="w1",
                expected_updated_at=claimed.updated_at,
                action=RescueAction.DEAD_LETTER,
                attempts=2,
                reason="stale",
            )
            assert await store.rescue_jobs(RescueJobsParams(rescues=[rescue])) == {row.id}
    assert await store.get_job(GetJobParams(job_id=row.id)) is None
    assert await _logs(store, row.id) == LOGS
    dead = await _raw(store).hgetall(store.keys.dead(row.id))
    assert (dead.get("progress"), dead.get("logs")) == (None, LOGS)
    # A replay starts with neither; purging the dead-letter row takes its logs along.
    new_id = str(uuid.uuid4())
    assert await store.replay_dead_letter(ReplayDeadLetterParams(row.id, new_id, scheduled_at=now)) == new_id
    assert await _progress(store, new_id) is None
    assert await _logs(store, new_id) is None
    assert await store.purge_dead_letter(PurgeDeadLetterParams(job_id=row.id))
    assert await _logs(store, row.id) is None


async def test_deleting_a_row_deletes_its_logs(store: RedisBackend) -> None:
    row = await _claimed(store)
    await _saved(store, row.id)
    assert await store.delete_job(DeleteJobParams(job_id=row.id))
    assert await _logs(store, row.id) is None
