"""One bad value never strands others; only a closed connection is "unavailable"; the file is
private, never created through a dangling link, and created only when allowed."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import stat
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from soniq import Soniq
from soniq.errors import BackendUnavailableError, InvalidURLError, JobArgumentsError
from soniq.params import (
    ClaimJobsParams,
    CompleteJobsParams,
    EnqueueJobsParams,
    GetJobParams,
    JobResult,
    QueueStatsParams,
    RetryJobParams,
)
from soniq.records import JobStatus, NewJob
from soniq_sqlite import SQLiteBackend

JobFactory = Callable[..., NewJob]

LONE_SURROGATE = "bad-\udcff-name"


async def _claimed(backend: SQLiteBackend, jobs: list[NewJob]) -> None:
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=jobs))
    got = await backend.claim_jobs(ClaimJobsParams(worker_id="w1", queues=None, limit=len(jobs), mark_started=True))
    assert len(got) == len(jobs)


@pytest.mark.asyncio
async def test_an_unencodable_result_does_not_hold_its_batch_hostage(
    make_job: JobFactory, backend: SQLiteBackend
) -> None:
    jobs = [make_job() for _ in range(40)]
    await _claimed(backend, jobs)
    results = [JobResult(job.id, {"i": i}) for i, job in enumerate(jobs)]
    results[7] = JobResult(jobs[7].id, {"file": LONE_SURROGATE})
    results[8] = JobResult(jobs[8].id, _nested(3000))

    written = await backend.complete_jobs(CompleteJobsParams(worker_id="w1", results=results))

    assert written == {job.id for job in jobs} - {jobs[7].id, jobs[8].id}
    stats = await backend.queue_stats(QueueStatsParams())
    assert (stats.done, stats.processing) == (38, 2)


@pytest.mark.asyncio
async def test_a_batch_the_store_refuses_falls_back_to_one_row_at_a_time(
    make_job: JobFactory, backend: SQLiteBackend, raw: sqlite3.Connection
) -> None:
    jobs = [make_job() for _ in range(10)]
    await _claimed(backend, jobs)
    # Another program's rule refuses one row: the batched statement fails as a whole.
    raw.execute(
        "CREATE TRIGGER refuse_one BEFORE UPDATE OF status ON soniq_jobs "
        f"WHEN NEW.id = '{jobs[3].id}' AND NEW.status = 'done' BEGIN SELECT RAISE(ABORT, 'refused'); END"
    )

    written = await backend.complete_jobs(
        CompleteJobsParams(worker_id="w1", results=[JobResult(job.id, None) for job in jobs])
    )

    assert written == {job.id for job in jobs} - {jobs[3].id}
    stuck = await backend.get_job(GetJobParams(job_id=jobs[3].id))
    assert stuck is not None
    assert stuck.status is JobStatus.PROCESSING


@pytest.mark.asyncio
async def test_encoding_and_constraint_errors_surface_as_what_they_are(
    make_job: JobFactory, backend: SQLiteBackend
) -> None:
    with pytest.raises(JobArgumentsError, match="JSON"):
        await backend.enqueue_jobs(EnqueueJobsParams(jobs=[replace(make_job(), args={"f": LONE_SURROGATE})]))
    with pytest.raises(UnicodeEncodeError):
        await backend.enqueue_jobs(EnqueueJobsParams(jobs=[replace(make_job(), job_name=LONE_SURROGATE)]))
    job = make_job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
    with pytest.raises(sqlite3.IntegrityError):
        await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
    # The backend is still perfectly usable.
    assert (await backend.queue_stats(QueueStatsParams())).queued == 1


@pytest.mark.asyncio
async def test_a_bad_value_in_a_combined_write_fails_only_that_write(
    make_job: JobFactory, backend: SQLiteBackend
) -> None:
    jobs = [make_job() for _ in range(3)]
    await _claimed(backend, jobs)
    later = datetime.now(UTC)

    outcomes = await asyncio.gather(
        *(
            backend.retry_job(RetryJobParams(job.id, "w1", LONE_SURROGATE if i == 1 else "boom", later))
            for i, job in enumerate(jobs)
        ),
        return_exceptions=True,
    )

    assert outcomes[0] is True
    assert outcomes[2] is True
    assert isinstance(outcomes[1], UnicodeEncodeError)


@pytest.mark.asyncio
async def test_only_a_closed_connection_is_unavailable(backend: SQLiteBackend) -> None:
    conn = backend._db._conn
    assert conn is not None
    await conn.close()  # closed under the backend's feet, as a crash of its thread would
    with pytest.raises(BackendUnavailableError):
        await backend.queue_stats(QueueStatsParams())


@pytest.mark.asyncio
async def test_the_file_and_its_wal_and_shm_are_private(tmp_path: Path, make_job: JobFactory) -> None:
    old = os.umask(0o022)
    try:
        backend = SQLiteBackend.from_url(f"sqlite:///{tmp_path}/private.db")
        await backend.enqueue_jobs(EnqueueJobsParams(jobs=[make_job()]))
        for name in ("private.db", "private.db-wal", "private.db-shm"):
            mode = stat.S_IMODE((tmp_path / name).stat().st_mode)
            assert mode & 0o077 == 0, f"{name} is {oct(mode)}"
        await backend.close()
    finally:
        os.umask(old)


@pytest.mark.asyncio
async def test_a_dangling_symlink_is_refused_and_its_target_not_created(tmp_path: Path) -> None:
    link = tmp_path / "queue.db"
    link.symlink_to(tmp_path / "elsewhere" / "target.db")
    (tmp_path / "elsewhere").mkdir()
    backend = SQLiteBackend.from_url(f"sqlite:///{link}")
    with pytest.raises(BackendUnavailableError, match="symbolic link"):
        await backend.connect()
    assert not (tmp_path / "elsewhere" / "target.db").exists()


@pytest.mark.asyncio
@pytest.mark.parametrize("how", ["keyword", "url"])
async def test_create_if_missing_false_refuses_a_missing_file(tmp_path: Path, how: str) -> None:
    path = tmp_path / "absent.db"
    if how == "keyword":
        backend = SQLiteBackend.from_url(f"sqlite:///{path}", create_if_missing=False)
    else:
        backend = SQLiteBackend.from_url(f"sqlite:///{path}?create_if_missing=false")
    with pytest.raises(BackendUnavailableError, match="does not exist"):
        await backend.queue_stats(QueueStatsParams())
    assert not path.exists()

    creator = SQLiteBackend.from_url(f"sqlite:///{path}")
    await creator.setup()
    await creator.close()
    assert (await backend.queue_stats(QueueStatsParams())).total == 0
    await backend.close()


def test_url_options_and_keywords(tmp_path: Path) -> None:
    backend = SQLiteBackend.from_url(f"sqlite:///{tmp_path}/jobs.db?namespace=tenant_a&busy_timeout=2")
    assert backend.location.path == tmp_path / "jobs.tenant_a.db"
    assert backend._db.busy_timeout == 2.0
    keyword_wins = SQLiteBackend.from_url(f"sqlite:///{tmp_path}/jobs.db?namespace=a", namespace="b")
    assert keyword_wins.location.path == tmp_path / "jobs.b.db"
    with pytest.raises(InvalidURLError, match=r"poolsize.*accepted options: namespace, busy_timeout"):
        SQLiteBackend.from_url(f"sqlite:///{tmp_path}/jobs.db?poolsize=3")
    with pytest.raises(InvalidURLError, match="create_if_missing expects true or false"):
        SQLiteBackend.from_url(f"sqlite:///{tmp_path}/jobs.db?create_if_missing=maybe")


def test_the_app_reaches_a_namespace_through_backend_options_or_the_url(tmp_path: Path) -> None:
    by_options = Soniq(f"sqlite:///{tmp_path}/jobs.db", backend_options={"namespace": "tenant_a"})
    by_url = Soniq(f"sqlite:///{tmp_path}/jobs.db?namespace=tenant_a")
    for app in (by_options, by_url):
        assert isinstance(app.backend, SQLiteBackend)
        assert app.backend.location.path == tmp_path / "jobs.tenant_a.db"


def _nested(depth: int) -> object:
    value: object = []
    for _ in range(depth):
        value = [value]
    return value
