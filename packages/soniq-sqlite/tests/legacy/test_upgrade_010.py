"""A SQLite file that soniq 0.1.0 itself set up and used, upgraded in place by this release."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from soniq import Soniq
from soniq.params import (
    EnqueueJobsParams,
    FindStaleJobsParams,
    GetDeadLetterParams,
    GetJobParams,
    ReplayDeadLetterParams,
    RequestCancelParams,
)
from soniq.records import CancelOutcome, JobStatus, NewJob
from soniq.schema_state import LegacyWorkersActiveError, SchemaFamily, SchemaStateError

pytestmark = pytest.mark.slow

JOB_KEYS = ("done", "queued", "scheduled", "unique", "dedup", "processing")


def soniq_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "soniq", *args], capture_output=True, text=True, timeout=timeout)


def url_of(path: Path) -> str:
    return f"sqlite:///{path}"


def query(path: Path, sql: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path)
    try:
        return list(conn.execute(sql))
    finally:
        conn.close()


@pytest.mark.asyncio
async def test_first_use_refuses_a_010_file_and_changes_nothing(legacy_010_file: tuple[Path, dict[str, str]]) -> None:
    path, _ = legacy_010_file
    before = path.read_bytes()
    app = Soniq(url_of(path))

    @app.job(name="legacy.send")
    async def send(to: str) -> None: ...

    try:
        with pytest.raises(SchemaStateError, match=r"soniq 0.1.0 SQLite database.*soniq setup") as caught:
            await app.enqueue("legacy.send", args={"to": "x"})
        assert caught.value.family is SchemaFamily.LEGACY_010
    finally:
        await app.close()
    worker = soniq_cli("worker", "--run-once", "--allow-no-jobs", "--database-url", url_of(path))
    assert worker.returncode == 1
    assert "soniq setup" in worker.stderr
    assert path.read_bytes() == before


def test_dry_run_prints_the_sql_and_changes_nothing(legacy_010_file: tuple[Path, dict[str, str]]) -> None:
    path, _ = legacy_010_file
    before = path.read_bytes()
    dry = soniq_cli("setup", "--dry-run", "--database-url", url_of(path))
    assert dry.returncode == 0, dry.stderr
    assert "ALTER TABLE soniq_jobs RENAME TO soniq010_upgrade_soniq_jobs" in dry.stdout
    assert "INSERT INTO soniq_jobs" in dry.stdout
    assert "DROP TABLE soniq010_upgrade_soniq_jobs" in dry.stdout
    assert path.read_bytes() == before


@pytest.mark.asyncio
async def test_upgrade_keeps_every_row_and_the_queued_jobs_run(legacy_010_file: tuple[Path, dict[str, str]]) -> None:
    path, ids = legacy_010_file
    done = soniq_cli("setup", "--database-url", url_of(path))
    assert done.returncode == 0, done.stderr
    assert "upgraded the soniq-0.1.0 schema" in done.stdout
    assert query(path, "SELECT name FROM sqlite_master WHERE name LIKE 'soniq010%'") == []

    app = Soniq(url_of(path), heartbeat_timeout=60.0)
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
        assert (queued.attempts, queued.max_attempts) == (0, 4)
        scheduled = await job("scheduled")
        assert scheduled.status.value == "queued"
        assert scheduled.scheduled_at > datetime.now(UTC) + timedelta(minutes=90)
        finished = await job("done")
        assert finished.status.value == "done"
        assert finished.result == {"doubled": 42}
        processing = await job("processing")
        assert (processing.status.value, processing.attempts) == ("processing", 1)

        dead = await backend.get_dead_letter(GetDeadLetterParams(job_id=ids["dead"]))
        assert dead is not None
        assert (dead.job_name, dead.args) == ("legacy.bad", {"n": 7})
        assert "boom 7" in (dead.last_error or "")

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

        new_id = await backend.replay_dead_letter(
            ReplayDeadLetterParams(job_id=ids["dead"], new_job_id="replayed-1", scheduled_at=datetime.now(UTC))
        )
        assert new_id is not None
        replayed = await backend.get_job(GetJobParams(job_id=new_id))
        assert replayed is not None
        assert (replayed.job_name, replayed.args) == ("legacy.bad", {"n": 7})

        # Protocol 4 works on the upgraded file: 0.1.0's rows can be depended on, and a cancel
        # of one fails its dependents (edge table, trigger and columns exist after the upgrade).
        def dependent(job_id: str, *on: str) -> NewJob:
            now = datetime.now(UTC)
            return NewJob(job_id, "legacy.send", {}, "mail", 5, now, 3, depends_on=on, limit_key="k")

        await backend.enqueue_jobs(
            EnqueueJobsParams(jobs=[dependent("after-done", ids["done"]), dependent("after-later", ids["scheduled"])])
        )

        async def stored(job_id: str) -> Any:
            record = await backend.get_job(GetJobParams(job_id=job_id))
            assert record is not None, job_id
            return record

        assert (await stored("after-done")).waiting_on == 0
        assert (await stored("after-later")).waiting_on == 1
        assert await backend.request_cancel(RequestCancelParams(job_id=ids["scheduled"])) is CancelOutcome.CANCELLED
        cancelled = await stored("after-later")
        assert (cancelled.status, cancelled.last_error) == (
            JobStatus.CANCELLED,
            f"dependency {ids['scheduled']} was cancelled",
        )
    finally:
        await app.close()

    status = soniq_cli("migrate-status", "--json", "--database-url", url_of(path))
    assert '"family": "soniq"' in status.stdout, status.stdout
    assert '"pending": []' in status.stdout


@pytest.mark.asyncio
async def test_fresh_010_heartbeats_refuse_the_upgrade_unless_forced(
    legacy_010_file: tuple[Path, dict[str, str]],
) -> None:
    path, ids = legacy_010_file
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE soniq_workers SET last_heartbeat = ?", (datetime.now(UTC).isoformat(),))
    conn.close()
    before = path.read_bytes()
    app = Soniq(url_of(path))
    try:
        with pytest.raises(LegacyWorkersActiveError, match=r"1 soniq 0.1.0 worker.*--force"):
            await app.setup()
    finally:
        await app.close()
    assert path.read_bytes() == before
    refused = soniq_cli("setup", "--database-url", url_of(path))
    assert refused.returncode == 1
    assert "soniq setup --force" in refused.stderr
    assert soniq_cli("setup", "--dry-run", "--database-url", url_of(path)).returncode == 1
    assert path.read_bytes() == before
    forced = soniq_cli("setup", "--force", "--database-url", url_of(path))
    assert forced.returncode == 0, forced.stderr
    assert sorted(row[0] for row in query(path, "SELECT id FROM soniq_jobs")) == sorted(ids[k] for k in JOB_KEYS)


def test_a_failed_upgrade_rolls_back_and_leaves_the_file_as_it_was(
    legacy_010_file: tuple[Path, dict[str, str]],
) -> None:
    path, _ = legacy_010_file
    # A time 0.1.0 stored as text but that is no ISO-8601 time: the copy fails after our
    # tables were created.
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(
            "INSERT INTO soniq_jobs (id, job_name, args, status, scheduled_at, created_at) "
            "VALUES ('broken-1', 'legacy.send', '{}', 'queued', 'next tuesday', '2026-01-01T00:00:00+00:00')"
        )
    conn.close()
    before = path.read_bytes()
    failed = soniq_cli("setup", "--database-url", url_of(path))
    assert failed.returncode == 1
    assert "rolled back" in failed.stderr
    assert "INSERT INTO soniq_jobs" in failed.stderr
    assert path.read_bytes() == before
    status = soniq_cli("migrate-status", "--database-url", url_of(path))
    assert "soniq-0.1.0" in status.stdout, status.stdout


def test_concurrent_setups_upgrade_once(legacy_010_file: tuple[Path, dict[str, str]]) -> None:
    path, ids = legacy_010_file
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "soniq", "setup", "--database-url", url_of(path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    outputs = [proc.communicate(timeout=120) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0, 0], [err for _, err in outputs]
    assert len([out for out, _ in outputs if "upgraded the soniq-0.1.0 schema" in out]) == 1
    assert sorted(row[0] for row in query(path, "SELECT id FROM soniq_jobs")) == sorted(ids[k] for k in JOB_KEYS)


def test_a_partial_010_file_is_refused_and_untouched(legacy_010_file: tuple[Path, dict[str, str]]) -> None:
    path, _ = legacy_010_file
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("DROP TABLE soniq_dead_letter_jobs")
    conn.close()
    before = path.read_bytes()
    for args in (("setup",), ("setup", "--dry-run")):
        refused = soniq_cli(*args, "--database-url", url_of(path))
        assert refused.returncode == 1
        assert "only part of a 0.1.0 database" in refused.stderr
        assert "soniq_dead_letter_jobs" in refused.stderr
    assert path.read_bytes() == before
