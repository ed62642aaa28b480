"""What the SQLite file itself guarantees, checked from outside Soniq with plain sqlite3."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from soniq.errors import BackendUnavailableError, SoniqError
from soniq.params import ClaimJobsParams, EnqueueJobsParams, GetJobParams, QueueStatsParams
from soniq.records import NewJob
from soniq_sqlite import SQLiteBackend
from soniq_sqlite.schema import SCHEMA_VERSION

JobFactory = Callable[..., NewJob]

pytestmark = pytest.mark.asyncio


def _tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


async def test_connect_puts_the_file_in_wal_mode(backend: SQLiteBackend, raw: sqlite3.Connection) -> None:
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_connect_creates_the_schema_and_records_its_version(backend: SQLiteBackend, db_path: Path) -> None:
    assert {"soniq_jobs", "soniq_dead_letter_jobs", "soniq_workers"} <= _tables(db_path)
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


async def test_the_store_rejects_a_job_status_outside_the_four(
    make_job: JobFactory, backend: SQLiteBackend, raw: sqlite3.Connection
) -> None:
    job = make_job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        raw.execute("UPDATE soniq_jobs SET status = 'failed' WHERE id = ?", (job.id,))
    for allowed in ("processing", "done", "cancelled", "queued"):
        raw.execute("UPDATE soniq_jobs SET status = ? WHERE id = ?", (allowed, job.id))
    stored = await backend.get_job(GetJobParams(job_id=job.id))
    assert stored is not None
    assert stored.status.value == "queued"


async def test_the_store_rejects_an_unknown_worker_status(backend: SQLiteBackend, raw: sqlite3.Connection) -> None:
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        raw.execute(
            "INSERT INTO soniq_workers (id, hostname, pid, queues, concurrency, status, last_heartbeat, started_at) "
            "VALUES ('w', 'h', 1, NULL, 1, 'sleeping', 0, 0)"
        )


async def test_setup_twice_keeps_the_rows(make_job: JobFactory, backend: SQLiteBackend) -> None:
    job = make_job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
    await backend.setup()
    await backend.setup()
    assert await backend.get_job(GetJobParams(job_id=job.id)) is not None


async def test_a_file_from_a_newer_schema_is_refused(db_path: Path) -> None:
    with sqlite3.connect(db_path) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    backend = SQLiteBackend.from_url(f"sqlite:///{db_path}")
    with pytest.raises(SoniqError, match="newer"):
        await backend.connect()
    await backend.close()


async def test_drop_schema_removes_the_tables_and_setup_restores_them(
    make_job: JobFactory, backend: SQLiteBackend, db_path: Path
) -> None:
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[make_job()]))
    await backend.drop_schema()
    assert not _tables(db_path) & {"soniq_jobs", "soniq_dead_letter_jobs", "soniq_workers"}
    await backend.setup()
    stats = await backend.queue_stats(QueueStatsParams())
    assert stats.total == 0


async def test_namespaces_are_separate_sibling_files(make_job: JobFactory, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/soniq.db"
    first = SQLiteBackend.from_url(url, namespace="a")
    second = SQLiteBackend.from_url(url, namespace="b")
    try:
        job = make_job()
        await first.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
        await second.connect()
        assert await second.get_job(GetJobParams(job_id=job.id)) is None
        assert (await first.get_job(GetJobParams(job_id=job.id))) is not None
        assert (tmp_path / "soniq.a.db").is_file()
        assert (tmp_path / "soniq.b.db").is_file()
        assert not (tmp_path / "soniq.db").exists()
    finally:
        await first.close()
        await second.close()


async def test_missing_directory_names_the_file(tmp_path: Path) -> None:
    target = tmp_path / "no-such-dir" / "jobs.db"
    backend = SQLiteBackend.from_url(f"sqlite:///{target}")
    with pytest.raises(BackendUnavailableError, match=str(target)):
        await backend.connect()


async def test_a_directory_in_place_of_the_file_names_it(make_job: JobFactory, tmp_path: Path) -> None:
    target = tmp_path / "jobs.db"
    target.mkdir()
    backend = SQLiteBackend.from_url(f"sqlite:///{target}")
    with pytest.raises(BackendUnavailableError, match=str(target)):
        await backend.enqueue_jobs(EnqueueJobsParams(jobs=[make_job()]))


async def test_a_file_that_is_not_a_database_names_it(tmp_path: Path) -> None:
    target = tmp_path / "notes.db"
    target.write_bytes(b"this is not a database, just some text " * 100)
    backend = SQLiteBackend.from_url(f"sqlite:///{target}")
    with pytest.raises(BackendUnavailableError, match=str(target)) as caught:
        await backend.connect()
    assert isinstance(caught.value.__cause__, sqlite3.DatabaseError)
    await backend.close()


async def test_memory_database_works_within_one_instance(
    make_job: JobFactory,
) -> None:
    backend = SQLiteBackend.from_url("sqlite:///:memory:")
    try:
        job = make_job()
        await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
        claimed = await backend.claim_jobs(ClaimJobsParams(worker_id="w", queues=None, limit=5, mark_started=True))
        assert [row.id for row in claimed] == [job.id]
    finally:
        await backend.close()


async def test_closed_backend_reopens_on_next_use(make_job: JobFactory, backend: SQLiteBackend) -> None:
    job = make_job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
    await backend.close()
    await backend.close()
    assert await backend.get_job(GetJobParams(job_id=job.id)) is not None
