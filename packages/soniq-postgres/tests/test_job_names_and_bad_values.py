"""Job names on PostgreSQL (claim by name, the workers' names, expiring names nobody registers), listings
without results, and values, rows or URLs that must not hold others hostage or leak a password."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace

import asyncpg
import pytest

from soniq.errors import InvalidURLError, JobArgumentsError
from soniq.params import (
    ClaimJobsParams,
    CompleteJobsParams,
    DeadLetterJobParams,
    DeadLetterPageParams,
    EnqueueJobsParams,
    ExpireUnknownJobsParams,
    GetDeadLetterParams,
    GetJobParams,
    JobPageParams,
    JobResult,
    QueueStatsParams,
    RegisterWorkerParams,
)
from soniq.records import JobStatus, NewJob, WorkerInfo
from soniq_postgres import PostgresBackend
from soniq_postgres.queries import JOB_COLUMNS_NO_RESULT

JobFactory = Callable[..., NewJob]
DEEP = "[" * 5000 + "]" * 5000
CORRUPT = {
    "an array": ("[1, 2]", "array, not an object"),
    "a string": ('"text"', "string, not an object"),
    "too deep": ('{"a": ' + DEEP + "}", "nested deeper"),
}


def _claim(names: list[str] | None = None, queues: list[str] | None = None) -> ClaimJobsParams:
    return ClaimJobsParams(worker_id="w1", queues=queues, limit=50, mark_started=True, job_names=names)


@pytest.mark.asyncio
@pytest.mark.parametrize("queues", [None, ["default"], ["default", "other"]])
async def test_claim_by_names_leaves_other_names_untouched(
    queues: list[str] | None,
    backend: PostgresBackend,
    raw: asyncpg.Connection,
    namespace: str,
    make_job: JobFactory,
) -> None:
    known = [replace(make_job(), job_name="app.known") for _ in range(3)]
    unknown = [replace(make_job(), job_name="app.new") for _ in range(3)]
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[*unknown, *known]))
    table = f'"{namespace}".soniq_jobs'
    before = await raw.fetch(f"SELECT id, updated_at, status, attempts FROM {table} WHERE job_name = 'app.new'")

    claimed = await backend.claim_jobs(_claim(["app.known", "app.other"], queues))

    assert sorted(r.id for r in claimed) == sorted(j.id for j in known)
    after = await raw.fetch(f"SELECT id, updated_at, status, attempts FROM {table} WHERE job_name = 'app.new'")
    assert sorted(map(tuple, after)) == sorted(map(tuple, before))
    assert await backend.claim_jobs(_claim([])) == []


@pytest.mark.asyncio
async def test_worker_job_names_round_trip_and_none_when_not_reported(backend: PostgresBackend) -> None:
    await backend.register_worker(RegisterWorkerParams(WorkerInfo("w-a", "h", 1, None, 2, job_names=("a.x", "a.y"))))
    await backend.register_worker(RegisterWorkerParams(WorkerInfo("w-b", "h", 2, ("q",), 1)))

    workers = {w.id: w for w in await backend.list_workers()}
    assert workers["w-a"].job_names == ("a.x", "a.y")
    assert workers["w-b"].job_names is None


@pytest.mark.asyncio
async def test_a_schema_at_version_1_gains_the_column_with_null_for_old_workers(
    make_backend: Callable[..., Awaitable[PostgresBackend]], raw: asyncpg.Connection, namespace: str
) -> None:
    from soniq_postgres.migrations import MIGRATIONS

    quoted = f'"{namespace}"'
    await raw.execute(f"CREATE SCHEMA {quoted}")
    await raw.execute(MIGRATIONS[0].sql.format(schema=quoted))
    await raw.execute(
        f"CREATE TABLE {quoted}.soniq_migrations (version integer PRIMARY KEY, name text NOT NULL, "
        "applied_at timestamptz NOT NULL DEFAULT now())"
    )
    await raw.execute(f"INSERT INTO {quoted}.soniq_migrations (version, name) VALUES (1, 'initial')")
    await raw.execute(f"INSERT INTO {quoted}.soniq_workers (id, hostname, pid, concurrency) VALUES ('old', 'h', 1, 1)")

    backend = await make_backend()
    (old,) = await backend.list_workers()
    assert old.id == "old"
    assert old.job_names is None
    versions = await raw.fetch(f"SELECT version FROM {quoted}.soniq_migrations ORDER BY version")
    assert [row["version"] for row in versions] == [m.version for m in MIGRATIONS]


@pytest.mark.asyncio
async def test_expire_unknown_jobs_moves_only_old_queued_rows_of_unknown_names(
    backend: PostgresBackend, raw: asyncpg.Connection, namespace: str, make_job: JobFactory
) -> None:
    stale_unknown = replace(make_job(), job_name="gone.job")
    stale_known = replace(make_job(), job_name="app.known")
    running_unknown = replace(make_job(), job_name="gone.running")
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[stale_unknown, stale_known, running_unknown]))
    table = f'"{namespace}".soniq_jobs'
    await raw.execute(f"UPDATE {table} SET created_at = created_at - interval '1 hour'")
    await raw.execute(f"UPDATE {table} SET attempts = 2 WHERE id = $1", stale_unknown.id)
    await backend.claim_jobs(_claim(["gone.running"]))
    young_unknown = replace(make_job(), job_name="gone.job")
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[young_unknown]))

    moved = await backend.expire_unknown_jobs(
        ExpireUnknownJobsParams(known_names=["app.known"], older_than=60.0, error="nobody registers gone.job")
    )

    assert moved == {stale_unknown.id}
    dead = await backend.get_dead_letter(GetDeadLetterParams(job_id=stale_unknown.id))
    assert dead is not None
    assert (dead.dead_letter_reason, dead.attempts, dead.last_error) == ("unknown_job", 2, "nobody registers gone.job")
    for kept in (young_unknown, stale_known, running_unknown):
        assert await backend.get_job(GetJobParams(job_id=kept.id)) is not None


@pytest.mark.asyncio
async def test_listings_leave_results_out_unless_asked(backend: PostgresBackend, make_job: JobFactory) -> None:
    job = make_job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
    await backend.claim_jobs(_claim())
    await backend.complete_jobs(CompleteJobsParams("w1", [JobResult(job.id, {"big": "x" * 1000})]))

    (plain,) = (await backend.job_page(JobPageParams())).rows
    (full,) = (await backend.job_page(JobPageParams(include_results=True))).rows
    assert plain.result is None
    assert full.result == {"big": "x" * 1000}
    assert "result::text" not in JOB_COLUMNS_NO_RESULT  # the columns job_page reads without results


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", list(CORRUPT))
async def test_a_corrupt_row_never_fails_the_claim_or_the_listings(
    kind: str, backend: PostgresBackend, raw: asyncpg.Connection, namespace: str, make_job: JobFactory
) -> None:
    text, complaint = CORRUPT[kind]
    good, bad = make_job(), make_job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[good, bad]))
    await raw.execute(f'UPDATE "{namespace}".soniq_jobs SET args = $1::json WHERE id = $2', text, bad.id)

    listed = {r.id: r for r in (await backend.job_page(JobPageParams())).rows}
    assert listed[good.id].decode_error is None
    assert listed[bad.id].args == {}
    assert complaint in (listed[bad.id].decode_error or "")

    claimed = {r.id: r for r in await backend.claim_jobs(_claim())}
    assert set(claimed) == {good.id, bad.id}
    assert complaint in (claimed[bad.id].decode_error or "")

    await backend.dead_letter_job(DeadLetterJobParams(bad.id, "w1", "corrupt", "corrupt_row"))
    (dead,) = (await backend.dead_letter_page(DeadLetterPageParams())).rows
    assert dead.args == {}
    assert complaint in (dead.decode_error or "")


@pytest.mark.asyncio
async def test_one_bad_result_or_refused_row_never_fails_its_batch(
    backend: PostgresBackend, raw: asyncpg.Connection, namespace: str, make_job: JobFactory
) -> None:
    jobs = [make_job() for _ in range(40)]
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=jobs))
    await backend.claim_jobs(ClaimJobsParams(worker_id="w1", queues=None, limit=40, mark_started=True))
    # Another program's rule refuses one row, so the batched statement fails as a whole.
    await raw.execute(
        f"""CREATE FUNCTION "{namespace}".refuse() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN IF NEW.id = '{jobs[5].id}' THEN RAISE EXCEPTION 'refused'; END IF; RETURN NEW; END $$;
        CREATE TRIGGER refuse BEFORE UPDATE ON "{namespace}".soniq_jobs
        FOR EACH ROW WHEN (NEW.status = 'done') EXECUTE FUNCTION "{namespace}".refuse();"""
    )
    results = [JobResult(job.id, {"i": i}) for i, job in enumerate(jobs)]
    results[7] = JobResult(jobs[7].id, {"file": "bad-\udcff"})

    written = await backend.complete_jobs(CompleteJobsParams("w1", results))

    assert written == {job.id for job in jobs} - {jobs[5].id, jobs[7].id}
    stats = await backend.queue_stats(QueueStatsParams())
    assert (stats.done, stats.processing) == (38, 2)


@pytest.mark.asyncio
async def test_a_refused_enqueue_does_not_quote_the_arguments(backend: PostgresBackend, make_job: JobFactory) -> None:
    for job in (
        replace(make_job(), args={"secret": "tok-12345-\udcff"}),
        replace(make_job(), args={"secret": "tok-12345"}, queue="bad\x00queue"),
    ):
        with pytest.raises(JobArgumentsError) as caught:
            await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
        assert "tok-12345" not in str(caught.value)
        assert caught.value.__suppress_context__
    assert (await backend.queue_stats(QueueStatsParams())).total == 0


def test_passwords_never_reach_reprs_or_url_errors() -> None:
    options = PostgresBackend.from_url("postgresql://app:S3cret@db:5432/app").options
    assert "S3cret" not in repr(options)
    assert "S3cret" not in repr(PostgresBackend.from_url("postgresql://db/app?password=S3cret"))
    assert "S3cret" not in repr(PostgresBackend.from_url("postgresql://db/app?password=S3cret").options)
    for url in (
        "postgresql://app:S3cret@[::1/db",
        "postgresql://app:S3cret@db:notaport/app",
        "postgresql://db/app?password=S3cret&poolsize=3",
        "postgresql://app:S3cret@db/app?pool_max_size=zero",
        "mysql://app:S3cret@db/app",
    ):
        with pytest.raises(InvalidURLError) as caught:
            PostgresBackend.from_url(url)
        assert "S3cret" not in str(caught.value), url


def test_an_unknown_url_parameter_lists_the_options_and_known_ones_pass() -> None:
    with pytest.raises(InvalidURLError, match=r"poolsize.*pool_max_size") as caught:
        PostgresBackend.from_url("postgresql://db/app?poolsize=3")
    assert "namespace" in str(caught.value)
    options = PostgresBackend.from_url("postgresql://db/app?sslmode=disable&pool_max_size=3").options
    assert "sslmode=disable" in options.dsn
    assert options.max_size == 3


def test_one_backend_serves_one_event_loop_after_another(pg_url: str, namespace: str, make_job: JobFactory) -> None:
    backend = PostgresBackend.from_url(pg_url, namespace=namespace, max_size=2)
    jobs = [make_job() for _ in range(3)]

    async def enqueue(job: NewJob) -> JobStatus:
        await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
        record = await backend.get_job(GetJobParams(job_id=job.id))
        assert record is not None
        return record.status

    async def tidy() -> int:
        try:
            return (await backend.queue_stats(QueueStatsParams())).queued
        finally:
            await backend.drop_schema()
            await backend.close()

    try:
        assert [asyncio.run(asyncio.wait_for(enqueue(job), 20)) for job in jobs] == [JobStatus.QUEUED] * 3
    finally:
        queued = asyncio.run(tidy())
    assert queued == 3
