"""The Lua scripts: loaded once per connection, run by EVALSHA, reloaded after SCRIPT FLUSH.

These run on a private server: they read server-wide command counters and
flush the server's script cache, which would disturb anyone sharing it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from redis.asyncio import Redis

from soniq.params import ClaimJobsParams, CompleteJobsParams, EnqueueJobsParams, JobResult
from soniq.records import JobStatus
from soniq_redis import RedisBackend
from soniq_redis.scripts import SCRIPT_NAMES

pytestmark = pytest.mark.asyncio


@pytest_asyncio.fixture
async def admin(private_server: Any) -> AsyncIterator[Redis]:
    client = Redis.from_url(private_server.url, decode_responses=True)
    try:
        yield client
    finally:
        await client.aclose()


async def command_calls(admin: Redis, command: str) -> int:
    stats = await admin.info("commandstats")
    entry = stats.get(f"cmdstat_{command}")
    return int(entry["calls"]) if entry else 0


async def test_connect_loads_every_script_once_and_operations_reuse_them(
    private_server: Any, admin: Redis, make_job: Any
) -> None:
    backend = RedisBackend.from_url(private_server.url, namespace="scripts")
    await backend.connect()
    try:
        assert await command_calls(admin, "script|load") == len(SCRIPT_NAMES)
        assert _scripts_of(backend).shas.keys() == set(SCRIPT_NAMES)
        assert await admin.script_exists(*_scripts_of(backend).shas.values()) == [True] * len(SCRIPT_NAMES)
        evalsha_before = await command_calls(admin, "evalsha")

        for _ in range(10):
            job = make_job()
            await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
            [claimed] = await backend.claim_jobs(
                ClaimJobsParams(worker_id="w", queues=None, limit=1, mark_started=True)
            )
            assert claimed.id == job.id
            assert await backend.complete_jobs(CompleteJobsParams(worker_id="w", results=[JobResult(job.id, None)]))

        assert await command_calls(admin, "script|load") == len(SCRIPT_NAMES)
        assert await command_calls(admin, "evalsha") - evalsha_before == 30
        assert await command_calls(admin, "eval") == 0
    finally:
        await backend.drop_schema()
        await backend.close()


async def test_scripts_are_reloaded_after_script_flush(private_server: Any, admin: Redis, make_job: Any) -> None:
    backend = RedisBackend.from_url(private_server.url, namespace="flush")
    await backend.connect()
    try:
        job = make_job()
        await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
        await admin.script_flush()
        claim_sha = _scripts_of(backend).shas["claim"]
        assert await admin.script_exists(claim_sha) == [False]

        [claimed] = await backend.claim_jobs(ClaimJobsParams(worker_id="w", queues=None, limit=1, mark_started=False))

        assert claimed.id == job.id
        assert claimed.status is JobStatus.PROCESSING
        assert await admin.script_exists(claim_sha) == [True]
        assert await command_calls(admin, "script|load") == len(SCRIPT_NAMES) + 1
    finally:
        await backend.drop_schema()
        await backend.close()


def _scripts_of(backend: RedisBackend) -> Any:
    scripts = backend._scripts
    assert scripts is not None, "the backend is not connected"
    return scripts
