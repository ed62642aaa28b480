"""The claim path: one statement, no sort of the backlog, order, exclusivity."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from soniq.params import (
    ClaimJobsParams,
    CompleteJobsParams,
    DeadLetterJobParams,
    EnqueueJobsParams,
    GetJobParams,
    JobResult,
    MarkStartedParams,
    NackJobParams,
    RetryJobParams,
    SnoozeJobParams,
)
from soniq.records import JobStatus, NewJob
from soniq_postgres import PostgresBackend
from soniq_postgres.queries import Queries

pytestmark = pytest.mark.asyncio


def _plan_nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _plan_nodes(child)


async def _fill(raw: asyncpg.Connection, namespace: str, count: int, *, analyze: bool = True) -> None:
    await raw.execute(
        f"""INSERT INTO "{namespace}".soniq_jobs (id, job_name, queue, priority, scheduled_at, max_attempts)
            SELECT 'bulk-' || g, 'tests.noop', CASE WHEN g % 10 = 0 THEN 'other' ELSE 'default' END,
                   g % 7, now() - interval '1 minute' + g * interval '1 microsecond', 3
            FROM generate_series(1, $1) AS g""",
        count,
    )
    if analyze:
        await raw.execute(f'ANALYZE "{namespace}".soniq_jobs')


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "ARRAY[" + ", ".join(_literal(v) for v in value) + "]::text[]"
    return "'" + str(value).replace("'", "''") + "'"


@pytest.mark.parametrize(
    ("generic", "analyzed"),
    [(False, True), (True, True), (False, False)],
    ids=["custom-plan", "generic-plan", "never-analyzed"],
)
@pytest.mark.parametrize("by_name", [False, True], ids=["all-names", "by-name"])
@pytest.mark.parametrize(("queue_count", "queue_args"), [(None, ()), (1, ("default",))])
async def test_claim_plan_does_not_sort_the_queue(
    backend: PostgresBackend,
    raw: asyncpg.Connection,
    namespace: str,
    queue_count: int | None,
    queue_args: tuple[str, ...],
    by_name: bool,
    generic: bool,
    analyzed: bool,
) -> None:
    # The generic plan is what asyncpg's prepared statement ends up with after a few claims: there
    # `LIMIT $2` is unknown, and a name filter must not pull in the (job_name, created_at) index.
    # A table never analyzed (a new deployment's first backlog, loaded faster than autovacuum
    # looks) has no statistics: the one-queue claim took the (queue, status) index and sorted
    # the backlog until migration 7 left queued rows out of that index.
    await _fill(raw, namespace, 100_000, analyze=analyzed)
    sql = Queries(namespace).claim(queue_count=queue_count, by_name=by_name)
    args: list[Any] = ["w", 10, True, *queue_args, *([["tests.noop"]] if by_name else [])]
    if generic:
        await raw.execute("SET plan_cache_mode = force_generic_plan")
        await raw.execute(f"PREPARE claim_probe AS {sql}")
        try:
            explained = await raw.fetchval(
                f"EXPLAIN (FORMAT JSON) EXECUTE claim_probe({', '.join(_literal(a) for a in args)})"
            )
        finally:
            await raw.execute("DEALLOCATE claim_probe")
            await raw.execute("RESET plan_cache_mode")
    else:
        explained = await raw.fetchval(f"EXPLAIN (FORMAT JSON) {sql}", *args)
    plan = json.loads(explained)[0]["Plan"]
    nodes = list(_plan_nodes(plan))
    kinds = [node["Node Type"] for node in nodes]
    assert not {"Sort", "Incremental Sort", "Seq Scan", "Hash Join"} & set(kinds), kinds
    scanned = {node.get("Index Name") for node in nodes if node["Node Type"] == "Index Scan"}
    assert scanned & {"soniq_jobs_claim_queue_idx", "soniq_jobs_claim_any_idx"}, kinds


async def test_claim_takes_several_rows_in_priority_then_schedule_order(
    backend: PostgresBackend, make_job: Callable[..., NewJob]
) -> None:
    now = datetime.now(UTC)
    late = make_job(priority=100, scheduled_at=now - timedelta(seconds=1))
    early = make_job(priority=100, scheduled_at=now - timedelta(seconds=5))
    urgent = make_job(priority=1)
    future = make_job(priority=0, scheduled_at=now + timedelta(hours=1))
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[late, early, urgent, future]))

    claimed = await backend.claim_jobs(ClaimJobsParams(worker_id="w1", queues=None, limit=10, mark_started=False))
    assert [job.id for job in claimed] == [urgent.id, early.id, late.id]
    assert all(job.status is JobStatus.PROCESSING and job.worker_id == "w1" for job in claimed)
    assert all(job.started_at is None and job.attempts == 0 for job in claimed)


async def test_claim_filters_by_queue_and_marks_started(
    backend: PostgresBackend, make_job: Callable[..., NewJob]
) -> None:
    mail, sms, other = make_job(queue="mail"), make_job(queue="sms"), make_job(queue="other")
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[mail, sms, other]))

    one = await backend.claim_jobs(ClaimJobsParams(worker_id="w", queues=["sms"], limit=5, mark_started=True))
    assert [job.id for job in one] == [sms.id]
    assert one[0].started_at is not None
    two = await backend.claim_jobs(
        ClaimJobsParams(worker_id="w", queues=["mail", "other"], limit=5, mark_started=False)
    )
    assert {job.id for job in two} == {mail.id, other.id}
    assert (
        await backend.claim_jobs(
            ClaimJobsParams(worker_id="w", queues=["mail", "sms", "other"], limit=5, mark_started=False)
        )
        == []
    )


async def test_concurrent_claimers_in_separate_pools_never_share_a_row(
    make_backend: Callable[..., Awaitable[PostgresBackend]], make_job: Callable[..., NewJob]
) -> None:
    producer = await make_backend()
    jobs = [make_job() for _ in range(400)]
    await producer.enqueue_jobs(EnqueueJobsParams(jobs=jobs))
    claimers = [await make_backend() for _ in range(4)]

    async def drain(backend: PostgresBackend, worker: str) -> list[str]:
        taken: list[str] = []
        while batch := await backend.claim_jobs(
            ClaimJobsParams(worker_id=worker, queues=None, limit=7, mark_started=False)
        ):
            taken.extend(job.id for job in batch)
        return taken

    results = await asyncio.gather(*(drain(b, f"w{i}") for i, b in enumerate(claimers) for _ in range(3)))
    every = [job_id for taken in results for job_id in taken]
    assert len(every) == len(set(every)) == len(jobs)


async def test_fenced_writes_apply_only_for_the_owner(
    backend: PostgresBackend, make_job: Callable[..., NewJob]
) -> None:
    job = make_job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
    await backend.claim_jobs(ClaimJobsParams(worker_id="owner", queues=None, limit=1, mark_started=True))
    later = datetime.now(UTC) + timedelta(minutes=1)

    assert (
        await backend.complete_jobs(CompleteJobsParams(worker_id="intruder", results=[JobResult(job.id, 1)])) == set()
    )
    assert not await backend.retry_job(
        RetryJobParams(job_id=job.id, worker_id="intruder", error="x", scheduled_at=later)
    )
    assert not await backend.snooze_job(SnoozeJobParams(job_id=job.id, worker_id="intruder", scheduled_at=later))
    assert not await backend.nack_job(NackJobParams(job_id=job.id, worker_id="intruder"))
    assert await backend.mark_started(MarkStartedParams(worker_id="intruder", job_ids=[job.id])) == set()
    assert not await backend.dead_letter_job(
        DeadLetterJobParams(job_id=job.id, worker_id="intruder", error="x", reason="zombie")
    )
    record = await backend.get_job(GetJobParams(job_id=job.id))
    assert record is not None
    assert record.status is JobStatus.PROCESSING
    assert record.worker_id == "owner"

    written = await backend.complete_jobs(
        CompleteJobsParams(worker_id="owner", results=[JobResult(job.id, {"n": [1, 2]})])
    )
    assert written == {job.id}
    done = await backend.get_job(GetJobParams(job_id=job.id))
    assert done is not None
    assert done.status is JobStatus.DONE
    assert done.result == {"n": [1, 2]}
    assert done.worker_id is None


async def test_batch_complete_is_fenced_per_row(backend: PostgresBackend, make_job: Callable[..., NewJob]) -> None:
    mine, theirs = make_job(), make_job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[mine, theirs]))
    await backend.claim_jobs(ClaimJobsParams(worker_id="a", queues=None, limit=1, mark_started=True))
    await backend.claim_jobs(ClaimJobsParams(worker_id="b", queues=None, limit=1, mark_started=True))
    first = await backend.get_job(GetJobParams(job_id=mine.id))
    owner_of_mine = first.worker_id if first else None
    assert owner_of_mine in ("a", "b")

    completed = await backend.complete_jobs(
        CompleteJobsParams(worker_id="a", results=[JobResult(mine.id, 1), JobResult(theirs.id, 2)])
    )
    a_row = mine.id if owner_of_mine == "a" else theirs.id
    assert completed == {a_row}


async def test_mark_started_writes_many_rows_each_fenced_on_its_own(
    backend: PostgresBackend, make_job: Callable[..., NewJob]
) -> None:
    jobs = [make_job() for _ in range(3)]
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=jobs))
    mine = await backend.claim_jobs(ClaimJobsParams(worker_id="a", queues=None, limit=2, mark_started=False))
    theirs = await backend.claim_jobs(ClaimJobsParams(worker_id="b", queues=None, limit=1, mark_started=False))
    ids = [row.id for row in mine + theirs]

    assert await backend.mark_started(MarkStartedParams(worker_id="a", job_ids=ids)) == {row.id for row in mine}
    rows = {job_id: await backend.get_job(GetJobParams(job_id=job_id)) for job_id in ids}
    started = {job_id for job_id, row in rows.items() if row is not None and row.started_at is not None}
    assert started == {row.id for row in mine}
    assert await backend.mark_started(MarkStartedParams(worker_id="a", job_ids=[])) == set()
