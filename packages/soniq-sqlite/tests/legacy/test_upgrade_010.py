"""A SQLite file that soniq 0.1.0 itself set up and used, upgraded in place by this release.

The scenario is `soniq_contract_tests.upgrade_scenario`, shared with PostgreSQL. Here: how it
reaches below the API in a SQLite file (where "changes nothing" means the same bytes), and what
only SQLite has (a file with only part of 0.1.0's tables)."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from soniq_contract_tests.upgrade_scenario import Upgrade010Scenario, UpgradeStore, soniq_cli
from soniq_sqlite.schema import SCHEMA_VERSION

pytestmark = pytest.mark.slow

DEAD_010_WORKER = "0b1d0000-0000-4000-8000-000000000001"


class SQLiteUpgradeStore(UpgradeStore):
    """A file of its own under the test's temp dir."""

    description = "soniq 0.1.0 SQLite database"
    dry_run_shows = (
        "ALTER TABLE soniq_jobs RENAME TO soniq010_upgrade_soniq_jobs",
        "INSERT INTO soniq_jobs",
        "DROP TABLE soniq010_upgrade_soniq_jobs",
    )
    latest_schema_version = SCHEMA_VERSION
    concurrent_setups = 3

    def __init__(self, path: Path) -> None:
        super().__init__(f"sqlite:///{path}")
        self.path = path

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        conn = sqlite3.connect(self.path)
        try:
            return list(conn.execute(sql))
        finally:
            conn.close()

    def write(self, sql: str, *args: object) -> None:
        conn = sqlite3.connect(self.path)
        try:
            with conn:
                conn.execute(sql, args)
        finally:
            conn.close()

    async def column(self, sql: str) -> list[str]:
        return [str(row[0]) for row in self.query(sql)]

    async def snapshot(self) -> object:
        return self.path.read_bytes()

    async def leave_dead_010_worker(self, job_id: str) -> None:
        ten_minutes_ago = (datetime.now(UTC) - timedelta(minutes=10)).isoformat()
        self.write(
            "INSERT INTO soniq_workers (id, hostname, pid, queues, concurrency, status, last_heartbeat, started_at)"
            " VALUES (?, 'old-host', 4242, '[\"mail\"]', 1, 'active', ?, ?)",
            DEAD_010_WORKER,
            ten_minutes_ago,
            ten_minutes_ago,
        )
        self.write(
            "UPDATE soniq_jobs SET status = 'processing', worker_id = ?, attempts = 1, updated_at = ? WHERE id = ?",
            DEAD_010_WORKER,
            ten_minutes_ago,
            job_id,
        )

    async def refresh_010_heartbeats(self) -> None:
        self.write("UPDATE soniq_workers SET last_heartbeat = ?", datetime.now(UTC).isoformat())

    async def break_one_010_row(self) -> str:
        # A time 0.1.0 stored as text but that is no ISO-8601 time: the copy fails after our
        # tables were created.
        self.write(
            "INSERT INTO soniq_jobs (id, job_name, args, status, scheduled_at, created_at) "
            "VALUES ('broken-1', 'legacy.send', '{}', 'queued', 'next tuesday', '2026-01-01T00:00:00+00:00')"
        )
        return "INSERT INTO soniq_jobs"

    async def upgrade_leftovers(self) -> list[str]:
        return await self.column("SELECT name FROM sqlite_master WHERE name LIKE 'soniq010%'")

    async def schema_version(self) -> int:
        [(version,)] = self.query("PRAGMA user_version")
        return int(version)


class TestUpgradeFrom010(Upgrade010Scenario):
    @pytest.fixture
    def upgrade_store(self, tmp_path: Path) -> SQLiteUpgradeStore:
        return SQLiteUpgradeStore(tmp_path / "legacy.db")

    def test_a_partial_010_file_is_refused_and_untouched(self, legacy_010: tuple[UpgradeStore, dict[str, str]]) -> None:
        store, _ = legacy_010
        assert isinstance(store, SQLiteUpgradeStore)
        store.write("DROP TABLE soniq_dead_letter_jobs")
        before = store.path.read_bytes()
        for args in (("setup",), ("setup", "--dry-run")):
            refused = soniq_cli(*args, "--database-url", store.url)
            assert refused.returncode == 1
            assert "only part of a 0.1.0 database" in refused.stderr
            assert "soniq_dead_letter_jobs" in refused.stderr
        assert store.path.read_bytes() == before
