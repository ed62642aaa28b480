"""A schema made by an older soniq-postgres upgrades to the latest migration, keeping its rows:
from version 1 (through `job_names`, 2), from version 2 (worker state and dashboard indexes, 3) and from version 3,
up to schedules, the leader lease and `expires_at` (4), dedup keys with producer ids (5), and from
version 5 to dependencies, limits, cancel requests and watched rows (6), and from version 6 to
the claim-only indexing of queued rows (7)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import asyncpg
import pytest

from soniq.params import RegisterWorkerParams, SetWorkerStatusParams
from soniq.records import WorkerInfo, WorkerStatus
from soniq_postgres import LATEST_VERSION, MIGRATIONS, PostgresBackend

pytestmark = pytest.mark.asyncio

DASHBOARD_INDEXES = {"soniq_jobs_done_at_idx", "soniq_jobs_name_created_idx", "soniq_dead_letter_queue_idx"}


async def _schema_at(raw: asyncpg.Connection, namespace: str, version: int) -> str:
    """Build the schema as the release that stopped at `version` did, with one worker row of that time."""
    quoted = f'"{namespace}"'
    await raw.execute(f"CREATE SCHEMA {quoted}")
    await raw.execute(
        f"CREATE TABLE {quoted}.soniq_migrations (version integer PRIMARY KEY, name text NOT NULL, "
        "applied_at timestamptz NOT NULL DEFAULT now())"
    )
    for migration in MIGRATIONS[:version]:
        await raw.execute(migration.sql.format(schema=quoted))
        await raw.execute(
            f"INSERT INTO {quoted}.soniq_migrations (version, name) VALUES ($1, $2)", migration.version, migration.name
        )
    await raw.execute(f"INSERT INTO {quoted}.soniq_workers (id, hostname, pid, concurrency) VALUES ('old', 'h', 1, 1)")
    if version >= 2:
        await raw.execute(f"""UPDATE {quoted}.soniq_workers SET job_names = '["app.old"]' WHERE id = 'old'""")
    return quoted


@pytest.mark.parametrize("start", [1, 2, 3, 4, 5, 6])
async def test_an_older_schema_upgrades_to_the_latest_and_keeps_its_workers(
    start: int, make_backend: Callable[..., Awaitable[PostgresBackend]], raw: asyncpg.Connection, namespace: str
) -> None:
    assert LATEST_VERSION == 7
    quoted = await _schema_at(raw, namespace, start)

    backend = await make_backend()

    versions = await raw.fetch(f"SELECT version FROM {quoted}.soniq_migrations ORDER BY version")
    assert [row["version"] for row in versions] == [1, 2, 3, 4, 5, 6, 7]
    (old,) = await backend.list_workers()
    assert old.id == "old"
    assert old.job_names == (None if start == 1 else ("app.old",))
    assert (old.state, old.state_changed_at, old.last_shutdown) == (None, None, None)
    indexes = await raw.fetch("SELECT indexname FROM pg_indexes WHERE schemaname = $1", namespace)
    names = {row["indexname"] for row in indexes}
    assert names >= {*DASHBOARD_INDEXES, "soniq_jobs_dedup_idx", "soniq_jobs_waiting_idx"}
    # Migration 7: queued rows are in the claim indexes only, not in (queue, status).
    definition = await raw.fetchval(
        "SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND indexname = 'soniq_jobs_queue_status_idx'", namespace
    )
    assert "WHERE (status <> 'queued'::text)" in definition

    # Both columns of the newer steps are written and read back on the upgraded schema.
    info = WorkerInfo("w-new", "h", 2, ("q",), 1, job_names=("app.a",))
    await backend.register_worker(RegisterWorkerParams(info))
    summary = {"drained": True, "nacked": []}
    assert await backend.set_worker_status(
        SetWorkerStatusParams("w-new", WorkerStatus.STOPPED, state="STOPPED", last_shutdown=summary)
    )
    new = {w.id: w for w in await backend.list_workers()}["w-new"]
    assert new.job_names == ("app.a",)
    assert new.state == "STOPPED"
    assert new.state_changed_at is not None
    assert new.last_shutdown == summary
