"""The chaos suite on PostgreSQL: real workers, SIGTERM/SIGKILL and restart, `pg_terminate_backend`.

Short by default (``SONIQ_CHAOS_JOBS`` / ``SONIQ_CHAOS_SECONDS`` make it long).
The database server itself is not restarted: this machine's PostgreSQL is
shared with other test runs (see docs/reliability.md).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import asyncpg
import pytest

from soniq_contract_tests.chaos import ChaosConfig, PoisonConfig, run_chaos, run_poisoned
from soniq_postgres import PostgresBackend

pytestmark = [pytest.mark.asyncio, pytest.mark.chaos]


async def test_every_job_ends_once_done_or_dead_lettered_under_faults(pg_url: str, tmp_path: Path) -> None:
    namespace = f"chaos_{uuid.uuid4().hex[:10]}"
    names = [f"soniq/{namespace}", f"soniq-listen/{namespace}"]
    killer = await asyncpg.connect(pg_url, server_settings={"application_name": "soniq-chaos-killer"})

    async def kill_connections() -> int:
        killed = await killer.fetch(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = ANY($1::text[])",
            names,
        )
        return len(killed)

    config = ChaosConfig(
        url=pg_url, namespace=namespace, directory=tmp_path, kill_connections=kill_connections, label="postgres"
    )
    try:
        report = await run_chaos(config)
    finally:
        await killer.close()
        backend = PostgresBackend.from_url(pg_url, namespace=namespace)
        await backend.connect()
        await backend.drop_schema()
        await backend.close()
    print(report.text())
    assert report.faults["connection_kill"] > 0
    assert report.faults["sigkill"] > 0
    assert report.faults["sigterm"] + report.faults["sigterm_twice"] > 0
    assert report.violations == []


async def test_poisoned_jobs_end_in_the_dead_letter_table_and_hold_nothing_else_up(pg_url: str, tmp_path: Path) -> None:
    namespace = f"poison_{uuid.uuid4().hex[:10]}"
    config = PoisonConfig(url=pg_url, namespace=namespace, directory=tmp_path, label="postgres")
    try:
        report = await run_poisoned(config)
    finally:
        backend = PostgresBackend.from_url(pg_url, namespace=namespace)
        await backend.connect()
        await backend.drop_schema()
        await backend.close()
    print(report.text())
    assert report.violations == []
    assert report.verdict.ends == {"done": config.jobs}
