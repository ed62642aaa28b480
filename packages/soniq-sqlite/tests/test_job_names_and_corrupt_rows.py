"""Job names on SQLite: claim by name, worker names, expiring unknown names,
listings without results, and rows whose stored JSON cannot be decoded."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

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
    RegisterWorkerParams,
)
from soniq.records import JobStatus, NewJob, WorkerInfo
from soniq_sqlite import SQLiteBackend

JobFactory = Callable[..., NewJob]

pytestmark = pytest.mark.asyncio

DEEP = "[" * 5000 + "]" * 5000
CORRUPT = {
    "invalid JSON": ('{"a": ', "invalid JSON"),
    "too deep": ('{"a": ' + DEEP + "}", "nested deeper"),
    "an array": ("[1, 2]", "array, not an object"),
    "a string": ('"text"', "string, not an object"),
}


def _claim(names: list[str] | None = None, limit: int = 10) -> ClaimJobsParams:
    return ClaimJobsParams(worker_id="w1", queues=None, limit=limit, mark_started=True, job_names=names)


async def test_claim_by_names_leaves_other_names_untouched(
    make_job: JobFactory, backend: SQLiteBackend, raw: sqlite3.Connection
) -> None:
    known = [replace(make_job(), job_name="app.known") for _ in range(3)]
    unknown = [replace(make_job(), job_name="app.new") for _ in range(3)]
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[*unknown, *known]))
    before = raw.execute("SELECT id, updated_at FROM soniq_jobs WHERE job_name = 'app.new'").fetchall()

    claimed = await backend.claim_jobs(_claim(["app.known"]))

    assert sorted(r.id for r in claimed) == sorted(j.id for j in known)
    rows = raw.execute("SELECT id, updated_at, status, attempts FROM soniq_jobs WHERE job_name = 'app.new'").fetchall()
    assert sorted((r[0], r[1]) for r in rows) == sorted(before)
    assert {(r[2], r[3]) for r in rows} == {("queued", 0)}
    assert await backend.claim_jobs(_claim([])) == []


async def test_claim_by_a_long_list_of_names(make_job: JobFactory, backend: SQLiteBackend) -> None:
    names = [f"app.job_{i}" for i in range(2000)]
    wanted = replace(make_job(), job_name="app.job_1999")
    other = replace(make_job(), job_name="app.other")
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[other, wanted]))

    assert [r.id for r in await backend.claim_jobs(_claim(names))] == [wanted.id]


async def test_worker_job_names_round_trip_and_none_when_not_reported(backend: SQLiteBackend) -> None:
    reporting = WorkerInfo(id="w-a", hostname="h", pid=1, queues=None, concurrency=2, job_names=("a.x", "a.y"))
    silent = WorkerInfo(id="w-b", hostname="h", pid=2, queues=("q",), concurrency=1)
    await backend.register_worker(RegisterWorkerParams(worker=reporting))
    await backend.register_worker(RegisterWorkerParams(worker=silent))

    workers = {w.id: w for w in await backend.list_workers()}
    assert workers["w-a"].job_names == ("a.x", "a.y")
    assert workers["w-b"].job_names is None


async def test_a_version_1_file_gains_the_column_with_null_for_old_workers(db_path: Path) -> None:
    from soniq_sqlite.schema import MIGRATIONS

    with sqlite3.connect(db_path, isolation_level=None) as conn:
        for statement in MIGRATIONS[1]:
            conn.execute(statement)
        conn.execute("PRAGMA user_version = 1")
        conn.execute(
            "INSERT INTO soniq_workers (id, hostname, pid, queues, concurrency, status, last_heartbeat, started_at) "
            "VALUES ('old', 'h', 1, NULL, 1, 'active', 0, 0)"
        )
    backend = SQLiteBackend.from_url(f"sqlite:///{db_path}")
    try:
        (old,) = await backend.list_workers()
        assert old.id == "old"
        assert old.job_names is None
    finally:
        await backend.close()


async def test_expire_unknown_jobs_moves_only_old_queued_rows_of_unknown_names(
    make_job: JobFactory, backend: SQLiteBackend, raw: sqlite3.Connection
) -> None:
    stale_unknown = replace(make_job(), job_name="gone.job")
    young_unknown = replace(make_job(), job_name="gone.job")
    stale_known = replace(make_job(), job_name="app.known")
    running_unknown = replace(make_job(), job_name="gone.running")
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[stale_unknown, stale_known, running_unknown]))
    # Age three rows by an hour and give one of them a history of attempts.
    raw.execute("UPDATE soniq_jobs SET created_at = created_at - 3600000000")
    raw.execute("UPDATE soniq_jobs SET attempts = 2 WHERE id = ?", (stale_unknown.id,))
    await backend.claim_jobs(_claim(["gone.running"]))
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[young_unknown]))

    moved = await backend.expire_unknown_jobs(
        ExpireUnknownJobsParams(known_names=["app.known"], older_than=60.0, error="no worker registers gone.job")
    )

    assert moved == {stale_unknown.id}
    dead = await backend.get_dead_letter(GetDeadLetterParams(job_id=stale_unknown.id))
    assert dead is not None
    assert (dead.dead_letter_reason, dead.attempts, dead.last_error) == (
        "unknown_job",
        2,
        "no worker registers gone.job",
    )
    assert dead.args == {"n": 1}
    for kept in (young_unknown, stale_known, running_unknown):
        assert await backend.get_job(GetJobParams(job_id=kept.id)) is not None
    assert await backend.get_job(GetJobParams(job_id=stale_unknown.id)) is None


async def test_listings_leave_results_out_unless_asked(
    make_job: JobFactory, backend: SQLiteBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = make_job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
    await backend.claim_jobs(_claim())
    await backend.complete_jobs(CompleteJobsParams(worker_id="w1", results=[JobResult(job.id, {"big": "x" * 1000})]))

    statements: list[str] = []
    fetchall = backend._db.fetchall

    async def recording(sql: str, parameters: object = ()) -> list[sqlite3.Row]:
        statements.append(sql)
        return await fetchall(sql, parameters)  # type: ignore[arg-type]

    monkeypatch.setattr(backend._db, "fetchall", recording)
    (plain,) = (await backend.job_page(JobPageParams())).rows
    (full,) = (await backend.job_page(JobPageParams(include_results=True))).rows

    assert plain.result is None
    assert full.result == {"big": "x" * 1000}
    assert " result," not in statements[0]
    assert " result," in statements[1]


async def _corrupt(raw: sqlite3.Connection, table: str, job_id: str, text: str) -> None:
    raw.execute(f"UPDATE {table} SET args = ? WHERE id = ?", (text, job_id))


@pytest.mark.parametrize("kind", list(CORRUPT))
async def test_a_corrupt_row_never_fails_the_claim_or_the_listings(
    kind: str, make_job: JobFactory, backend: SQLiteBackend, raw: sqlite3.Connection
) -> None:
    text, complaint = CORRUPT[kind]
    good, bad = make_job(), make_job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[good, bad]))
    await _corrupt(raw, "soniq_jobs", bad.id, text)

    listed = {r.id: r for r in (await backend.job_page(JobPageParams())).rows}
    assert listed[good.id].decode_error is None
    assert listed[bad.id].args == {}
    assert complaint in (listed[bad.id].decode_error or "")
    fetched = await backend.get_job(GetJobParams(job_id=bad.id))
    assert fetched is not None
    assert complaint in (fetched.decode_error or "")

    claimed = {r.id: r for r in await backend.claim_jobs(_claim())}
    assert set(claimed) == {good.id, bad.id}
    assert claimed[good.id].args == {"n": 1}
    assert complaint in (claimed[bad.id].decode_error or "")

    await backend.dead_letter_job(DeadLetterJobParams(bad.id, "w1", "corrupt", "corrupt_row"))
    (dead,) = (await backend.dead_letter_page(DeadLetterPageParams())).rows
    assert dead.id == bad.id
    assert dead.args == {}
    assert complaint in (dead.decode_error or "")
    single = await backend.get_dead_letter(GetDeadLetterParams(job_id=bad.id))
    assert single is not None
    assert complaint in (single.decode_error or "")


async def test_a_corrupt_result_is_reported_not_raised(
    make_job: JobFactory, backend: SQLiteBackend, raw: sqlite3.Connection
) -> None:
    job = make_job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
    raw.execute("UPDATE soniq_jobs SET status = 'done', result = '{oops' WHERE id = ?", (job.id,))

    (listed,) = (await backend.job_page(JobPageParams(include_results=True))).rows
    assert listed.status is JobStatus.DONE
    assert listed.result is None
    assert "result: invalid JSON" in (listed.decode_error or "")
    assert json.loads(raw.execute("SELECT args FROM soniq_jobs").fetchone()[0]) == {"n": 1}
