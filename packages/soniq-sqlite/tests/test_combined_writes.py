"""Concurrent single-row writes share trips and commits, yet each keeps its own outcome."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable

import pytest

import soniq_sqlite.connection
from soniq.records import JobStatus, NewJob
from soniq_sqlite import SQLiteBackend

JobFactory = Callable[..., NewJob]

pytestmark = pytest.mark.asyncio


@pytest.fixture(params=["combined", "one-per-trip"])
def write_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "one-per-trip":
        # What happens on an aiosqlite without the private hooks the combined path uses.
        monkeypatch.setattr(soniq_sqlite.connection, "_raw_runner", lambda conn: None)
    return str(request.param)


async def test_concurrent_fenced_writes_each_report_their_own_result(
    write_path: str, make_job: JobFactory, backend: SQLiteBackend
) -> None:
    jobs = [make_job() for _ in range(60)]
    await backend.enqueue_jobs(jobs=jobs)
    await backend.claim_jobs(worker_id="owner", queues=None, limit=60, mark_started=True)
    calls = [
        backend.complete_job(job_id=job.id, worker_id="owner" if n % 3 else "intruder", result={"n": n})
        for n, job in enumerate(jobs)
    ]
    outcomes = await asyncio.gather(*calls)
    assert outcomes == [n % 3 != 0 for n in range(len(jobs))]
    for n, job in enumerate(jobs):
        row = await backend.get_job(job_id=job.id)
        assert row is not None
        if n % 3:
            assert (row.status, row.result, row.worker_id) == (JobStatus.DONE, {"n": n}, None)
        else:
            assert (row.status, row.worker_id) == (JobStatus.PROCESSING, "owner")


async def test_one_failing_write_does_not_undo_the_others(
    write_path: str, make_job: JobFactory, backend: SQLiteBackend, raw: sqlite3.Connection
) -> None:
    jobs = [make_job() for _ in range(10)]
    await backend.enqueue_jobs(jobs=jobs)
    await backend.claim_jobs(worker_id="w", queues=None, limit=10, mark_started=True)
    trapped = jobs[4].id
    raw.execute(
        "CREATE TRIGGER trap BEFORE UPDATE ON soniq_jobs WHEN NEW.id = "
        f"'{trapped}' AND NEW.status = 'done' BEGIN SELECT RAISE(ABORT, 'trapped row'); END"
    )
    outcomes = await asyncio.gather(
        *(backend.complete_job(job_id=job.id, worker_id="w", result=None) for job in jobs),
        return_exceptions=True,
    )
    assert isinstance(outcomes[4], sqlite3.IntegrityError)
    assert [outcome for n, outcome in enumerate(outcomes) if n != 4] == [True] * 9
    statuses = dict(raw.execute("SELECT id, status FROM soniq_jobs").fetchall())
    assert statuses.pop(trapped) == "processing"
    assert set(statuses.values()) == {"done"}
