"""A database that soniq 0.1.0 itself set up and used, upgraded in place by this release.

The scenario is `soniq_contract_tests.upgrade_scenario`, shared with SQLite. Here: how it reaches
below the API on PostgreSQL, and the checks only PostgreSQL has (0.1.0's recorded migrations and
recurring schedules, this release's migration record, newer and foreign schemas refused)."""

from __future__ import annotations

import asyncpg
import pytest

from soniq import Soniq
from soniq.backend import Backend
from soniq.params import ListSchedulesParams
from soniq_contract_tests.upgrade_scenario import Upgrade010Scenario, UpgradeStore, soniq_cli
from soniq_postgres.migrations import LATEST_VERSION

pytestmark = pytest.mark.slow


async def fetch(url: str, sql: str, *args: object) -> list[asyncpg.Record]:
    connection = await asyncpg.connect(url)
    try:
        return list(await connection.fetch(sql, *args))
    finally:
        await connection.close()


async def execute(url: str, sql: str, *args: object) -> None:
    connection = await asyncpg.connect(url)
    try:
        await connection.execute(sql, *args)
    finally:
        await connection.close()


class PostgresUpgradeStore(UpgradeStore):
    """A database of its own; 0.1.0 and this release both use its ``public`` schema."""

    description = "soniq 0.1.0 database"
    dry_run_shows = ('ALTER TABLE IF EXISTS "public".soniq_jobs SET SCHEMA', 'INSERT INTO "public".soniq_jobs')
    latest_schema_version = LATEST_VERSION
    concurrent_setups = 4

    async def column(self, sql: str) -> list[str]:
        return [str(row[0]) for row in await fetch(self.url, sql)]

    async def snapshot(self) -> object:
        """Which schemas there are, and every row of every table in ``public`` (as text)."""
        schemas = await self.column("SELECT nspname FROM pg_namespace ORDER BY nspname")
        tables = await self.column("SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename")
        rows = {table: sorted(await self.column(f'SELECT t::text FROM public."{table}" t')) for table in tables}
        return schemas, rows

    async def leave_dead_010_worker(self, job_id: str) -> None:
        connection = await asyncpg.connect(self.url)
        try:
            worker_id = await connection.fetchval(
                "INSERT INTO soniq_workers (id, hostname, pid, queues, concurrency, status, last_heartbeat, started_at)"
                " VALUES (gen_random_uuid(), 'old-host', 4242, '{mail}', 1, 'active', now() - interval '10 minutes',"
                " now() - interval '1 hour') RETURNING id"
            )
            await connection.execute(
                "UPDATE soniq_jobs SET status = 'processing', worker_id = $1, attempts = 1,"
                " updated_at = now() - interval '10 minutes' WHERE id = $2::uuid",
                worker_id,
                job_id,
            )
        finally:
            await connection.close()

    async def refresh_010_heartbeats(self) -> None:
        await execute(self.url, "UPDATE soniq_workers SET last_heartbeat = now()")

    async def break_one_010_row(self) -> str:
        # A schedule value 0.1.0 accepted into its table but that cannot be read as seconds:
        # the copy fails after our tables were created and rows were copied.
        await execute(
            self.url,
            "INSERT INTO soniq_recurring_jobs (id, job_name, schedule_type, schedule_value) "
            "VALUES (gen_random_uuid(), 'legacy.broken', 'interval', 'every hour')",
        )
        return "soniq_schedules"

    async def upgrade_leftovers(self) -> list[str]:
        return await self.column("SELECT nspname FROM pg_namespace WHERE nspname LIKE '%soniq010%'")

    async def schema_version(self) -> int:
        return max(int(version) for version in await self.column("SELECT version FROM soniq_migrations"))


class TestUpgradeFrom010(Upgrade010Scenario):
    @pytest.fixture
    def upgrade_store(self, legacy_db: str) -> PostgresUpgradeStore:
        return PostgresUpgradeStore(legacy_db)

    async def check_010_rows(self, store: UpgradeStore, ids: dict[str, str]) -> None:
        await super().check_010_rows(store, ids)
        versions = await store.column("SELECT version FROM soniq_migrations ORDER BY version")
        assert versions == ["0001", "0002", "0003", "0004", "0005"]

    async def check_upgraded(self, store: UpgradeStore, backend: Backend, ids: dict[str, str]) -> None:
        await super().check_upgraded(store, backend, ids)
        # 0.1.0's recurring schedules are this release's schedules.
        schedules = {s.name: s for s in await backend.list_schedules(ListSchedulesParams())}
        assert schedules["legacy.report"].every_seconds == 3600
        assert schedules["legacy.report"].args == {"kind": "hourly"}
        assert (schedules["legacy.report"].queue, schedules["legacy.report"].priority) == ("reports", 7)
        assert schedules["legacy.nightly"].cron == "0 3 * * *"
        # Every migration recorded once, all by the one transaction that upgraded.
        recorded = await fetch(store.url, "SELECT version, applied_at FROM soniq_migrations ORDER BY version")
        assert [r["version"] for r in recorded] == list(range(1, len(recorded) + 1))
        assert len({r["applied_at"] for r in recorded}) == 1

    @pytest.mark.asyncio
    async def test_newer_and_foreign_schemas_are_refused(self, legacy_db: str) -> None:
        url = legacy_db
        app = Soniq(url)
        try:
            await app.setup()
        finally:
            await app.close()
        await execute(url, "INSERT INTO soniq_migrations (version, name) VALUES (999, 'from the future')")
        newer = soniq_cli("setup", "--database-url", url)
        assert newer.returncode == 1
        assert "newer than this release knows" in newer.stderr
        assert "999" in newer.stderr
        await execute(url, "DROP TABLE soniq_migrations")
        foreign = soniq_cli("setup", "--database-url", url)
        assert foreign.returncode == 1
        assert "does not recognise" in foreign.stderr
        tables = await fetch(url, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        assert "soniq_migrations" not in {r["tablename"] for r in tables}  # nothing was created behind the error
