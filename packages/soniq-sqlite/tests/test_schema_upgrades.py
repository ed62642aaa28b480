"""A file made by an older soniq-sqlite upgrades to the latest schema version, keeping its rows:
from version 1 (through `job_names`, 2) and from version 2, up to the worker state and dashboard indexes (3)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from soniq.params import RegisterWorkerParams, SetWorkerStatusParams
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
    assert SCHEMA_VERSION == 5
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
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 5
        names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        job_columns = {row[1] for row in conn.execute("PRAGMA table_info(soniq_jobs)")}
    assert names >= {*DASHBOARD_INDEXES, "soniq_jobs_dedup"}
    assert job_columns >= {"dedup_key", "producer_id"}
