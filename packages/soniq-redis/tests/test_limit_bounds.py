"""The Redis claim refuses exactly the limit values core refuses, and enforces the bounds.

Core checks every limit at decoration (`soniq.limits`); this store's own check is the same
function, so a limit core accepts is claimed with, and one past a bound is refused the same way
rather than leaving its rows queued forever.
"""

from __future__ import annotations

from typing import Any

import pytest

from soniq.errors import InvalidLimitError
from soniq.limits import MAX_LIMIT_COUNT, MAX_RATE_PERIOD, MIN_RATE_PERIOD, parse_rate_limit
from soniq.params import ClaimJobsParams, EnqueueJobsParams, GroupLimit, LimitScope
from soniq.records import JobRecord
from soniq_redis import RedisBackend

pytestmark = pytest.mark.asyncio


async def _claim(backend: RedisBackend, limit: GroupLimit) -> list[JobRecord]:
    params = ClaimJobsParams(worker_id="w", queues=["default"], limit=10, mark_started=True, limits=[limit])
    return await backend.claim_jobs(params)


@pytest.mark.parametrize(
    ("count", "period"),
    [(1, MIN_RATE_PERIOD), (MAX_LIMIT_COUNT, MAX_RATE_PERIOD), (1, MAX_RATE_PERIOD), (3, 0.25)],
)
async def test_a_rate_limit_at_the_bounds_is_claimed_with(
    backend: RedisBackend, make_job: Any, count: int, period: float
) -> None:
    assert parse_rate_limit((count, period)) == (count, period)  # core accepts it
    job = make_job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
    limit = GroupLimit(
        LimitScope.JOB, job.job_name, max_concurrent=MAX_LIMIT_COUNT, rate_limit=count, rate_period=period
    )
    assert [row.id for row in await _claim(backend, limit)] == [job.id]


@pytest.mark.parametrize(
    ("values", "fragment"),
    [
        ({"rate_limit": 1000, "rate_period": 1e-9}, "period from 0.001 s"),
        ({"rate_limit": 1000, "rate_period": 1e-300}, "period from 0.001 s"),
        ({"rate_limit": 1, "rate_period": 1e300}, "period from 0.001 s"),
        ({"rate_limit": 1, "rate_period": 99999999999999999999 * 3600.0}, "period from 0.001 s"),
        ({"rate_limit": 1, "rate_period": 0.0015}, "whole milliseconds"),
        ({"rate_limit": MAX_LIMIT_COUNT + 1, "rate_period": 1.0}, "at most 1,000,000,000"),
        ({"max_concurrent": 2**53}, "at most 1,000,000,000"),
    ],
)
async def test_a_limit_past_the_bounds_is_refused_as_core_refuses_it(
    backend: RedisBackend, make_job: Any, values: dict[str, Any], fragment: str
) -> None:
    job = make_job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
    limit = GroupLimit(LimitScope.JOB, job.job_name, **values)
    with pytest.raises(InvalidLimitError, match=fragment):
        await _claim(backend, limit)
    if "rate_limit" in values:
        with pytest.raises(InvalidLimitError, match=fragment):
            parse_rate_limit((values["rate_limit"], values["rate_period"]))
    # Nothing was claimed: the row waits for a claim with limits this store can enforce.
    assert [row.id for row in await _claim(backend, GroupLimit(LimitScope.JOB, job.job_name, max_concurrent=1))] == [
        job.id
    ]
