"""A file made by an older soniq-sqlite upgrades to the latest schema version, keeping its rows:
from version 1 (through `job_names`, 2), from version 2 (worker state and dashboard indexes, 3) and from version 3,
up to schedules, the leader lease and `soniq_jobs.expires_at` (4), on to 6
(test_dependencies_cancels_and_limits.py) and 7 (test_pauses_steps_and_versions.py), and from a populated
version-7 file to 8 (job progress and job logs); from a populated version-8 file to 9 (unique windows
and debounced jobs) in test_unique_windows_and_debounce.py."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from soniq.params import (
    ClaimJobsParams,
    DeadLetterJobParams,
    GetDeadLetterParams,
    GetJobLogsParams,
    GetJobParams,
    PruneJobsParams,
    RegisterWorkerParams,
    SaveJobLogsParams,
    SaveProgressParams,
    SetWorkerStatusParams,
)
from soniq.records import WorkerInfo, WorkerStatus
from soniq_sqlite import SQLiteBackend
from soniq_sqlite.schema import MIGRATIONS, SCHEMA_VERSION

pytestmark = pytest.mark.asyncio

DASHBOARD_INDEXES = {
    "soniq_jobs_counts",
    "soniq_jobs_page",
    "soniq_jobs_page_by_name",
    "soniq_jobs_done_at",
    "soniq_dead_letter_jobs_by_queue",
}


def _file_at(path: Path, version: int) -> None:
    """Write the file as the release that stopped at `version` did, with one worker row of that time."""
    with sqlite3.connect(path, isolation_level=None) as conn:
        for step in range(1, version + 1):
            for statement in MIGRATIONS[step]:
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {version}")
        conn.execute(
            "INSERT INTO soniq_workers (id, hostname, pid, queues, concurrency, status, last_heartbeat, started_at) "
            "VALUES ('old', 'h', 1, NULL, 1, 'active', 0, 0)"
        )
        if version >= 2:
            conn.execute("""UPDATE soniq_workers SET job_names = '["app.old"]' WHERE id = 'old'""")


@pytest.mark.parametrize("start", [1, 2, 3])
async def test_an_older_file_upgrades_to_the_latest_and_keeps_its_workers(start: int, db_path: Path) -> None:
    assert SCHEMA_VERSION == 9
    _file_at(db_path, start)

    backend = SQLiteBackend.from_url(f"sqlite:///{db_path}")
    try:
        (old,) = await backend.list_workers()
        assert old.id == "old"
        assert old.job_names == (None if start == 1 else ("app.old",))
        assert (old.state, old.state_changed_at, old.last_shutdown) == (None, None, None)

        # Both columns of the newer steps are written and read back in the upgraded file.
        info = WorkerInfo(id="w-new", hostname="h", pid=2, queues=("q",), concurrency=1, job_names=("app.a",))
        await backend.register_worker(RegisterWorkerParams(worker=info))
        summary = {"drained": True, "nacked": []}
        assert await backend.set_worker_status(
            SetWorkerStatusParams(
                worker_id="w-new", status=WorkerStatus.STOPPED, state="STOPPED", last_shutdown=summary
            )
        )
        new = {w.id: w for w in await backend.list_workers()}["w-new"]
        assert new.job_names == ("app.a",)
        assert new.state == "STOPPED"
        assert new.state_changed_at is not None
        assert new.last_shutdown == summary
    finally:
        await backend.close()

    with sqlite3.connect(db_path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        job_columns = {row[1] for row in conn.execute("PRAGMA table_info(soniq_jobs)")}
    assert names >= DASHBOARD_INDEXES | {"soniq_jobs_expires", "soniq_schedules_due", "soniq_jobs_dedup"}
    assert tables >= {"soniq_schedules", "soniq_leader"}
    assert job_columns >= {"dedup_key", "producer_id", "expires_at"}


async def test_jobs_of_a_version_3_file_survive_the_upgrade_without_an_expiry(db_path: Path) -> None:
    _file_at(db_path, 3)
    with sqlite3.connect(db_path, isolation_level=None) as conn:
        conn.execute(
            "INSERT INTO soniq_jobs (id, job_name, status, max_attempts, queue, priority, scheduled_at, "
            "created_at, updated_at) VALUES ('old-done', 'app.job', 'done', 1, 'default', 100, 0, 0, 0)"
        )
    backend = SQLiteBackend.from_url(f"sqlite:///{db_path}")
    try:
        row = await backend.get_job(GetJobParams(job_id="old-done"))
        assert row is not None
        assert row.expires_at is None
        assert row.dedup_key is None
        assert await backend.prune_jobs(PruneJobsParams(limit=10)) == 0
    finally:
        await backend.close()


def _file_at_version_7(path: Path) -> None:
    """A file as soniq-sqlite left it at schema version 7: queued, running and done rows and a dead letter."""
    with sqlite3.connect(path, isolation_level=None) as conn:
        for step in range(1, 8):
            for statement in MIGRATIONS[step]:
                conn.execute(statement)
        conn.execute("PRAGMA user_version = 7")
        conn.executemany(
            "INSERT INTO soniq_jobs (id, job_name, args, status, max_attempts, queue, priority, scheduled_at, "
            "created_at, updated_at, worker_id, checkpoint) "
            "VALUES (?, 'app.job', '{}', ?, 3, 'default', 100, 0, ?, 0, ?, ?)",
            [
                ("queued", "queued", 1, None, None),
                ("running", "processing", 2, "w0", '{"page": 4}'),
                ("done", "done", 3, None, None),
            ],
        )
        conn.execute(
            "INSERT INTO soniq_dead_letter_jobs (id, job_name, args, queue, attempts, max_attempts, priority, "
            "last_error, dead_letter_reason, moved_to_dead_letter_at) "
            "VALUES ('dead', 'app.job', '{}', 'default', 3, 3, 100, 'boom', 'max_retries', 5)"
        )


async def test_a_populated_version_7_file_reads_back_without_progress_or_logs_and_then_stores_them(
    db_path: Path,
) -> None:
    _file_at_version_7(db_path)
    backend = SQLiteBackend.from_url(f"sqlite:///{db_path}")
    try:
        status = await backend.schema_status()
        assert [(step.version, step.name) for step in status.pending] == [
            (8, "job progress and job logs"),
            (9, "unique windows and debounced jobs"),
        ]
        for job_id in ("queued", "running", "done"):
            row = await backend.get_job(GetJobParams(job_id=job_id))
            assert row is not None
            assert row.progress is None
            assert await backend.get_job_logs(GetJobLogsParams(job_id=job_id)) is None
        running = await backend.get_job(GetJobParams(job_id="running"))
        assert running is not None
        assert running.checkpoint == {"page": 4}
        assert await backend.get_dead_letter(GetDeadLetterParams(job_id="dead")) is not None
        assert await backend.get_job_logs(GetJobLogsParams(job_id="dead")) is None

        # The old rows take both columns once upgraded, and a dead-letter move carries the logs.
        (claimed,) = await backend.claim_jobs(ClaimJobsParams(worker_id="w1", queues=None, limit=5, mark_started=True))
        assert (claimed.id, claimed.progress) == ("queued", None)
        assert await backend.save_progress(SaveProgressParams("queued", "w1", '{"done": 1, "total": 2}'))
        assert await backend.save_job_logs(SaveJobLogsParams("running", "w0", "[]"))
        row = await backend.get_job(GetJobParams(job_id="queued"))
        assert row is not None
        assert row.progress == {"done": 1, "total": 2}
        moved = DeadLetterJobParams(job_id="running", worker_id="w0", error="x", reason="max_retries")
        assert await backend.dead_letter_job(moved)
        assert await backend.get_job_logs(GetJobLogsParams(job_id="running")) == "[]"
    finally:
        await backend.close()

    with sqlite3.connect(db_path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        job_columns = {row[1] for row in conn.execute("PRAGMA table_info(soniq_jobs)")}
        dead_columns = {row[1] for row in conn.execute("PRAGMA table_info(soniq_dead_letter_jobs)")}
    assert job_columns >= {"progress", "logs"}
    assert "logs" in dead_columns
