"""A database that soniq 0.1.0 itself set up and used, upgraded in place by this release."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from soniq import Soniq
from soniq.params import (
    FindStaleJobsParams,
    GetDeadLetterParams,
    GetJobParams,
    ListSchedulesParams,
    ReplayDeadLetterParams,
)
from soniq.schema_state import LegacyWorkersActiveError, SchemaFamily, SchemaStateError

pytestmark = pytest.mark.slow


def soniq_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "soniq", *args], capture_output=True, text=True, timeout=timeout, env=dict(os.environ)
    )


async def rows(url: str, sql: str, *args: Any) -> list[asyncpg.Record]:
    connection = await asyncpg.connect(url)
    try:
        return list(await connection.fetch(sql, *args))
    finally:
        await connection.close()


async def legacy_tables_intact(url: str, ids: dict[str, str]) -> None:
    """0.1.0's own tables, as 0.1.0 left them."""
    versions = await rows(url, "SELECT version FROM soniq_migrations ORDER BY version")
    assert [r["version"] for r in versions] == ["0001", "0002", "0003", "0004", "0005"]
    jobs = await rows(url, "SELECT id::text AS id FROM soniq_jobs")
    assert {r["id"] for r in jobs} == {ids[k] for k in ("done", "queued", "scheduled", "unique", "dedup", "processing")}
    dead = await rows(url, "SELECT id::text AS id FROM soniq_dead_letter_jobs")
    assert [r["id"] for r in dead] == [ids["dead"]]


@pytest.mark.asyncio
async def test_first_use_refuses_a_010_schema_and_changes_nothing(legacy_010_db: tuple[str, dict[str, str]]) -> None:
    url, ids = legacy_010_db
    app = Soniq(url)

    @app.job(name="legacy.send")
    async def send(to: str) -> None: ...

    try:
        with pytest.raises(SchemaStateError, match=r"soniq 0.1.0 database.*soniq setup") as caught:
            await app.enqueue("legacy.send", args={"to": "x"})
        assert caught.value.family is SchemaFamily.LEGACY_010
    finally:
        await app.close()
    await legacy_tables_intact(url, ids)
    worker = soniq_cli("worker", "--run-once", "--allow-no-jobs", "--database-url", url)
    assert worker.returncode == 1
    assert "soniq 0.1.0 database" in worker.stderr
    assert "soniq setup" in worker.stderr
    await legacy_tables_intact(url, ids)


@pytest.mark.asyncio
async def test_dry_run_prints_the_sql_and_changes_nothing(legacy_010_db: tuple[str, dict[str, str]]) -> None:
    url, ids = legacy_010_db
    status = soniq_cli("migrate-status", "--database-url", url)
    assert status.returncode == 0, status.stderr
    assert re.search(r"family:\s+soniq-0.1.0", status.stdout), status.stdout
    assert "upgrade the soniq-0.1.0 schema in place" in status.stdout
    dry = soniq_cli("setup", "--dry-run", "--database-url", url)
    assert dry.returncode == 0, dry.stderr
    assert 'ALTER TABLE IF EXISTS "public".soniq_jobs SET SCHEMA' in dry.stdout
    assert 'INSERT INTO "public".soniq_jobs' in dry.stdout
    await legacy_tables_intact(url, ids)


@pytest.mark.asyncio
async def test_upgrade_keeps_every_row_and_the_queued_jobs_run(legacy_010_db: tuple[str, dict[str, str]]) -> None:
    url, ids = legacy_010_db
    done = soniq_cli("setup", "--database-url", url)
    assert done.returncode == 0, done.stderr
    assert "upgraded the soniq-0.1.0 schema" in done.stdout

    app = Soniq(url, heartbeat_timeout=60.0)
    sent: list[dict[str, Any]] = []

    @app.job(name="legacy.send", queue="mail")
    async def send(**kwargs: Any) -> str:
        sent.append(kwargs)
        return "sent"

    try:
        backend = await app.connected_backend()

        async def job(key: str) -> Any:
            record = await backend.get_job(GetJobParams(job_id=ids[key]))
            assert record is not None, key
            return record

        queued = await job("queued")
        assert (queued.status.value, queued.queue, queued.priority) == ("queued", "mail", 5)
        assert queued.args == {"to": "a@example.com", "n": 1}
        assert queued.max_attempts == 4
        assert queued.attempts == 0
        scheduled = await job("scheduled")
        assert scheduled.status.value == "queued"
        assert scheduled.scheduled_at > datetime.now(UTC) + timedelta(minutes=90)
        finished = await job("done")
        assert finished.status.value == "done"
        assert finished.result == {"doubled": 42}
        processing = await job("processing")
        assert processing.status.value == "processing"
        assert processing.attempts == 1

        dead = await backend.get_dead_letter(GetDeadLetterParams(job_id=ids["dead"]))
        assert dead is not None
        assert dead.job_name == "legacy.bad"
        assert dead.args == {"n": 7}
        assert "boom 7" in (dead.last_error or "")

        schedules = {s.name: s for s in await backend.list_schedules(ListSchedulesParams())}
        assert schedules["legacy.report"].every_seconds == 3600
        assert schedules["legacy.report"].args == {"kind": "hourly"}
        assert (schedules["legacy.report"].queue, schedules["legacy.report"].priority) == ("reports", 7)
        assert schedules["legacy.nightly"].cron == "0 3 * * *"

        # The row a dead 0.1.0 worker left 'processing' goes to stale recovery.
        scan = await backend.find_stale_jobs(FindStaleJobsParams(heartbeat_timeout=60.0))
        assert ids["processing"] in {r.id for r in scan.orphaned}
        await app.recover()
        assert (await job("processing")).status.value == "queued"

        # Unique and dedup keys keep deduplicating: the same enqueue finds the 0.1.0 row.
        again = await app.enqueue("legacy.send", args={"a": 2, "z": 1, "to": "u@example.com"}, unique=True)
        assert again == ids["unique"]
        keyed = await app.enqueue("legacy.send", args={"to": "other@example.com"}, dedup_key="order-9")
        assert keyed == ids["dedup"]

        summary = await app.run_worker(queues=["mail"], run_once=True, install_signal_handlers=False)
        assert summary.processed >= 4
        for key in ("queued", "unique", "dedup", "processing"):
            assert (await job(key)).status.value == "done", key
        assert (await job("scheduled")).status.value == "queued"
        assert {"to": "a@example.com", "n": 1} in sent

        # The dead-letter row replays under this release.
        new_id = await backend.replay_dead_letter(
            ReplayDeadLetterParams(job_id=ids["dead"], new_job_id="replayed-1", scheduled_at=datetime.now(UTC))
        )
        assert new_id is not None
        replayed = await backend.get_job(GetJobParams(job_id=new_id))
        assert replayed is not None
        assert replayed.job_name == "legacy.bad"
        assert replayed.args == {"n": 7}
    finally:
        await app.close()

    again = soniq_cli("migrate-status", "--json", "--database-url", url)
    assert '"family": "soniq"' in again.stdout
    assert '"pending": []' in again.stdout


@pytest.mark.asyncio
async def test_fresh_010_heartbeats_refuse_the_upgrade_unless_forced(
    legacy_010_db: tuple[str, dict[str, str]],
) -> None:
    url, ids = legacy_010_db
    connection = await asyncpg.connect(url)
    try:
        await connection.execute("UPDATE soniq_workers SET last_heartbeat = now()")
    finally:
        await connection.close()
    app = Soniq(url)
    try:
        with pytest.raises(LegacyWorkersActiveError, match=r"1 soniq 0.1.0 worker.*--force"):
            await app.setup()
    finally:
        await app.close()
    await legacy_tables_intact(url, ids)
    refused = soniq_cli("setup", "--database-url", url)
    assert refused.returncode == 1
    assert "soniq setup --force" in refused.stderr
    forced = soniq_cli("setup", "--force", "--database-url", url)
    assert forced.returncode == 0, forced.stderr
    jobs = await rows(url, "SELECT id FROM soniq_jobs")
    assert len(jobs) == 6


@pytest.mark.asyncio
async def test_a_failed_upgrade_rolls_back_and_leaves_010_working(
    legacy_010_db: tuple[str, dict[str, str]],
) -> None:
    url, ids = legacy_010_db
    # A schedule value 0.1.0 accepted into its table but that cannot be read as seconds:
    # the copy fails after our tables were created and rows were copied.
    connection = await asyncpg.connect(url)
    try:
        await connection.execute(
            "INSERT INTO soniq_recurring_jobs (id, job_name, schedule_type, schedule_value) "
            "VALUES (gen_random_uuid(), 'legacy.broken', 'interval', 'every hour')"
        )
    finally:
        await connection.close()
    failed = soniq_cli("setup", "--database-url", url)
    assert failed.returncode == 1
    assert "rolled back" in failed.stderr
    assert "soniq_schedules" in failed.stderr
    await legacy_tables_intact(url, ids)
    schemas = await rows(url, "SELECT nspname FROM pg_namespace WHERE nspname LIKE '%soniq010%'")
    assert schemas == []
    status = soniq_cli("migrate-status", "--database-url", url)
    assert re.search(r"family:\s+soniq-0.1.0", status.stdout), status.stdout


def test_concurrent_setups_upgrade_once(legacy_010_db: tuple[str, dict[str, str]]) -> None:
    url, ids = legacy_010_db
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "soniq", "setup", "--database-url", url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    outputs = [proc.communicate(timeout=120) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0, 0, 0], [err for _, err in outputs]
    upgraded = [out for out, _ in outputs if "upgraded the soniq-0.1.0 schema" in out]
    assert len(upgraded) == 1
    recorded = asyncio.run(rows(url, "SELECT version, applied_at FROM soniq_migrations ORDER BY version"))
    assert [r["version"] for r in recorded] == list(range(1, len(recorded) + 1))
    assert len({r["applied_at"] for r in recorded}) == 1  # one transaction
    jobs = asyncio.run(rows(url, "SELECT id FROM soniq_jobs"))
    assert sorted(r["id"] for r in jobs) == sorted(
        ids[k] for k in ("done", "queued", "scheduled", "unique", "dedup", "processing")
    )


@pytest.mark.asyncio
async def test_newer_and_foreign_schemas_are_refused(legacy_db: str) -> None:
    url = legacy_db
    app = Soniq(url)
    try:
        await app.setup()
    finally:
        await app.close()
    connection = await asyncpg.connect(url)
    try:
        await connection.execute("INSERT INTO soniq_migrations (version, name) VALUES (999, 'from the future')")
    finally:
        await connection.close()
    newer = soniq_cli("setup", "--database-url", url)
    assert newer.returncode == 1
    assert "newer than this release knows" in newer.stderr
    assert "999" in newer.stderr
    connection = await asyncpg.connect(url)
    try:
        await connection.execute("DROP TABLE soniq_migrations")
    finally:
        await connection.close()
    foreign = soniq_cli("setup", "--database-url", url)
    assert foreign.returncode == 1
    assert "does not recognise" in foreign.stderr
    tables = await rows(url, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
    assert "soniq_migrations" not in {r["tablename"] for r in tables}  # nothing was created behind the error
