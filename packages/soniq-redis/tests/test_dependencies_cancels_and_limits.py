"""Dependencies, limits, cancel requests and job changes in Redis: what the contract suite cannot see from outside.

Edge sets leave no keys behind once resolved, a cascade of any depth runs in one
script, only limited claims run the limited script, rate windows expire, and a
job change that lands between two waits is not lost.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.asyncio import Redis

from soniq.errors import UnknownDependencyError
from soniq.params import (
    ClaimJobsParams,
    CompleteJobsParams,
    EnqueueJobsParams,
    FinishCancelParams,
    GetJobParams,
    GroupLimit,
    JobPageParams,
    JobResult,
    LimitScope,
    RequestCancelParams,
    WaitForJobChangesParams,
    WatchJobsParams,
)
from soniq.records import CancelOutcome, DependencyPolicy, JobRecord, JobStatus
from soniq_redis import RedisBackend

pytestmark = pytest.mark.asyncio

DEADLINE = 10.0


async def _raw(backend: RedisBackend) -> Redis:
    client = backend._client
    assert client is not None, "the backend is not connected"
    return client


async def _claim(backend: RedisBackend, worker: str = "w", **extra: Any) -> list[JobRecord]:
    return await backend.claim_jobs(
        ClaimJobsParams(worker_id=worker, queues=["default"], limit=extra.pop("limit", 10), mark_started=True, **extra)
    )


async def _complete(backend: RedisBackend, row: JobRecord, worker: str = "w") -> None:
    written = await backend.complete_jobs(
        CompleteJobsParams(worker_id=worker, results=[JobResult(job_id=row.id, result=None)])
    )
    assert written == {row.id}


async def _status(backend: RedisBackend, job_id: str) -> tuple[JobStatus, int, str | None]:
    row = await backend.get_job(GetJobParams(job_id=job_id))
    assert row is not None
    return row.status, row.waiting_on, row.last_error


async def test_resolving_a_dependency_removes_its_edge_set(backend: RedisBackend, make_job: Any) -> None:
    first = make_job()
    second = make_job(depends_on=(first.id,))
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[first, second]))
    client = await _raw(backend)
    edges = backend.keys.key(f"dependents:{first.id}")
    assert await client.smembers(edges) == {second.id}

    [row] = await _claim(backend)
    assert row.id == first.id
    await _complete(backend, row)

    assert await client.exists(edges) == 0
    assert await _status(backend, second.id) == (JobStatus.QUEUED, 0, None)
    [row] = await _claim(backend)
    assert row.id == second.id


async def test_a_long_chain_is_cancelled_in_one_script(backend: RedisBackend, make_job: Any) -> None:
    jobs = [make_job()]
    for _ in range(999):
        jobs.append(make_job(depends_on=(jobs[-1].id,)))
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=jobs))

    assert await backend.request_cancel(RequestCancelParams(job_id=jobs[0].id)) is CancelOutcome.CANCELLED

    last = await _status(backend, jobs[-1].id)
    assert last == (JobStatus.CANCELLED, 0, f"dependency {jobs[-2].id} was cancelled")
    assert await _claim(backend) == []


async def test_an_unknown_dependency_writes_no_key(backend: RedisBackend, make_job: Any) -> None:
    client = await _raw(backend)
    before = {key async for key in client.scan_iter(match=backend.keys.scan_pattern)}
    good = make_job()
    bad = make_job(depends_on=(good.id, "nope-1", "nope-2"))
    with pytest.raises(UnknownDependencyError) as caught:
        await backend.enqueue_jobs(EnqueueJobsParams(jobs=[good, bad]))
    assert caught.value.missing == ("nope-1", "nope-2")
    after = {key async for key in client.scan_iter(match=backend.keys.scan_pattern)}
    assert after == before


async def test_a_job_cancelled_at_enqueue_takes_no_dedup_key(backend: RedisBackend, make_job: Any) -> None:
    dep = make_job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[dep]))
    assert await backend.request_cancel(RequestCancelParams(job_id=dep.id)) is CancelOutcome.CANCELLED
    dependent = make_job(depends_on=(dep.id,), dedup_key="k", dependency_policy=DependencyPolicy.CANCEL)
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[dependent]))
    assert (await _status(backend, dependent.id))[0] is JobStatus.CANCELLED

    again = make_job(dedup_key="k")
    assert await backend.enqueue_jobs(EnqueueJobsParams(jobs=[again])) == [again.id]


async def test_only_a_claim_with_limits_runs_the_limited_script(
    backend: RedisBackend, make_job: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[make_job(), make_job()]))
    scripts = backend._scripts
    assert scripts is not None
    ran: list[str] = []
    original = scripts.run

    async def spy(name: str, *args: str | int) -> Any:
        ran.append(name)
        return await original(name, *args)

    monkeypatch.setattr(scripts, "run", spy)
    await _claim(backend, limit=1)
    await _claim(backend, limit=1, limits=[GroupLimit(LimitScope.QUEUE, "default", max_concurrent=5)])
    assert ran == ["claim", "claim_limited"]


async def test_a_rate_window_key_expires_after_its_window(backend: RedisBackend, make_job: Any) -> None:
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[make_job()]))
    limit = GroupLimit(LimitScope.JOB, "tests.job", rate_limit=5, rate_period=3.0)
    assert len(await _claim(backend, limits=[limit])) == 1
    client = await _raw(backend)
    keys = [key async for key in client.scan_iter(match=backend.keys.scan_pattern + "lrate:*")]
    assert len(keys) == 1
    assert await client.get(keys[0]) == "1"
    # The rest of the 3 s window plus the one-second margin, never more.
    assert 0 < await client.pttl(keys[0]) <= 4_000


async def test_a_change_landing_between_two_waits_is_not_lost(
    backend: RedisBackend, peer: RedisBackend, make_job: Any, wait_until: Any
) -> None:
    job = make_job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
    [row] = await _claim(peer, worker="runner")
    await backend.watch_jobs(WatchJobsParams(job_ids=[row.id]))

    # Nobody waits while the cancel is requested and then finished: both are kept for the next wait.
    assert await peer.request_cancel(RequestCancelParams(job_id=row.id)) is CancelOutcome.REQUESTED
    assert await peer.finish_cancel(FinishCancelParams(job_id=row.id, worker_id="runner", message="stopped"))

    listener = backend._wakeups
    assert listener is not None

    async def heard() -> bool:
        return row.id in listener._unseen_changes

    await wait_until(heard, deadline=DEADLINE, message="the listener never heard the change")
    # Returned at once, from what was heard while nobody waited: a short timeout cannot pass otherwise.
    seen = await backend.wait_for_job_changes(WaitForJobChangesParams(job_ids=[row.id], timeout=0.01))
    assert seen == {row.id}
    assert (await _status(backend, row.id))[0] is JobStatus.CANCELLED


async def test_watching_an_unknown_id_creates_no_row(backend: RedisBackend) -> None:
    await backend.watch_jobs(WatchJobsParams(job_ids=["missing"]))
    client = await _raw(backend)
    assert await client.exists(backend.keys.job("missing")) == 0


async def test_rows_claimed_without_limits_after_a_job_limit_was_registered_count(
    backend: RedisBackend, make_job: Any
) -> None:
    limit = GroupLimit(LimitScope.JOB, "tests.job", max_concurrent=2)
    # The first limited claim registers the name (rebuilding its set from the processing rows).
    assert await _claim(backend, limits=[limit]) == []
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[make_job() for _ in range(4)]))
    # From then on every claim, limited or not, adds the name's rows to its set.
    assert len(await _claim(backend, worker="plain", limit=2)) == 2
    client = await _raw(backend)
    assert await client.scard(backend.keys.key("pj:tests.job")) == 2

    assert await _claim(backend, limits=[limit]) == []
    done, running = (await backend.job_page(JobPageParams(statuses=[JobStatus.PROCESSING]))).rows
    await _complete(backend, done, worker="plain")
    [taken] = await _claim(backend, limits=[limit])
    # The finished row left the set when the limited claim read it; the new one joined.
    assert await client.smembers(backend.keys.key("pj:tests.job")) == {running.id, taken.id}


async def test_a_change_handed_to_a_wait_cancelled_before_it_ran_is_kept(
    backend: RedisBackend, wait_until: Any
) -> None:
    await backend.watch_jobs(WatchJobsParams(job_ids=["x"]))  # starts the subscription
    listener = backend._wakeups
    assert listener is not None
    waiting = asyncio.create_task(listener.wait_changes(["x"], DEADLINE))

    async def registered() -> bool:
        return "x" in listener._change_waiters

    await wait_until(registered, deadline=DEADLINE, message="the wait never registered")
    listener._note_change("x")  # handed over; the task has not run since
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert await listener.wait_changes(["x"], 0.01) == {"x"}
