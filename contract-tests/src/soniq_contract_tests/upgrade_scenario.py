"""The soniq 0.1.0 upgrade scenario, written once for every backend that upgrades a 0.1.0 store in place.

Real 0.1.0 code (from `legacy_venv`) sets a fresh store up and leaves one row of every kind in
it; then this release refuses it, shows the upgrade, refuses while 0.1.0 workers heartbeat,
rolls a failed upgrade back, upgrades it once under concurrent `soniq setup`s, and keeps every
row. A backend's tests subclass `Upgrade010Scenario` and override one fixture::

    # conftest.py: the session fixture that builds (once) a virtualenv with soniq 0.1.0
    from soniq_contract_tests.legacy_venv import legacy_python

    # test_upgrade_010.py
    class TestUpgradeFrom010(Upgrade010Scenario):
        @pytest.fixture
        def upgrade_store(self, tmp_path: Path) -> UpgradeStore:
            return MineUpgradeStore(...)  # a fresh, empty store, removed after the test

`UpgradeStore` is the per-backend part: the few steps and reads that must go below the API
(a 0.1.0 worker that died mid-job, fresh 0.1.0 heartbeats, a row the copy cannot convert, the
schema version, a snapshot to prove nothing changed). What only one backend keeps, its subclass
checks by extending `check_010_rows` and `check_upgraded`. The tests are ``async def``s, run by
this package's pytest plugin (no pytest-asyncio needed); the fixtures are plain functions.

This module is not collected on its own (its name is no ``test_*.py``); only subclasses run.
"""

from __future__ import annotations

import abc
import asyncio
import json
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar, cast

import pytest

from soniq import Soniq
from soniq.backend import (
    Backend,
    CancelOutcome,
    EnqueueJobsParams,
    FindStaleJobsParams,
    GetDeadLetterParams,
    GetJobParams,
    JobRecord,
    JobStatus,
    NewJob,
    ReplayDeadLetterParams,
    RequestCancelParams,
    SchemaFamily,
)
from soniq.errors import LegacyWorkersActiveError, SchemaStateError

JOB_KEYS = ("done", "queued", "scheduled", "unique", "dedup", "processing")
"""The ids `POPULATE_010` returns for rows left in the jobs table (``dead`` is the dead letter's)."""

POPULATE_010 = """
import asyncio, json, os, sys
from datetime import UTC, datetime, timedelta

# Rows for jobs this process does not register ('legacy.send'), as a producer would enqueue them.
os.environ["SONIQ_ENQUEUE_VALIDATION"] = "none"
from soniq import Soniq

app = Soniq(database_url=sys.argv[1])


@app.job(name="legacy.ok", queue="work", retries=0)
async def ok(n: int) -> dict:
    return {"doubled": n * 2}


@app.job(name="legacy.bad", queue="work", retries=0)
async def bad(n: int) -> None:
    raise RuntimeError(f"boom {n}")


async def main() -> None:
    await app.setup()
    ids = {}
    # Rows the 0.1.0 worker finishes: one done with a result, one dead-lettered.
    ids["done"] = await app.enqueue("legacy.ok", args={"n": 21})
    ids["dead_source"] = await app.enqueue("legacy.bad", args={"n": 7})
    await app.run_worker(concurrency=1, run_once=True, queues=["work"])
    # Rows left for the new release.
    ids["queued"] = await app.enqueue("legacy.send", args={"to": "a@example.com", "n": 1}, queue="mail", priority=5)
    ids["scheduled"] = await app.enqueue(
        "legacy.send", args={"to": "later@example.com"}, queue="mail",
        scheduled_at=datetime.now(UTC) + timedelta(hours=2),
    )
    ids["unique"] = await app.enqueue(
        "legacy.send", args={"to": "u@example.com", "z": 1, "a": 2}, queue="mail", unique=True
    )
    ids["dedup"] = await app.enqueue("legacy.send", args={"to": "d@example.com"}, queue="mail", dedup_key="order-9")
    ids["processing"] = await app.enqueue("legacy.send", args={"to": "p@example.com"}, queue="mail")
    # 0.1.0 stores schedules only on PostgreSQL; elsewhere it keeps them in this process.
    await app.scheduler.add("legacy.report", every=3600, args={"kind": "hourly"}, queue="reports", priority=7)
    await app.scheduler.add("legacy.nightly", cron="0 3 * * *", args={}, queue="reports")
    await app.close()
    print(json.dumps(ids))


asyncio.run(main())
"""
"""Run by soniq 0.1.0's own interpreter with the store's URL: it sets its schema up with 0.1.0's
`setup`, finishes two jobs with 0.1.0's worker, enqueues the rest and prints their ids as JSON."""


class UpgradeStore(abc.ABC):
    """One fresh, empty store of a backend, and how to reach below the API for the upgrade scenario."""

    description: ClassVar[str]
    """How this release names a 0.1.0 store of this backend in its errors ("soniq 0.1.0 database")."""
    dry_run_shows: ClassVar[tuple[str, ...]]
    """Statements `soniq setup --dry-run` prints for this backend's upgrade."""
    latest_schema_version: ClassVar[int]
    """The schema version this release's migrations reach."""
    concurrent_setups: ClassVar[int] = 3
    """How many `soniq setup` processes race to upgrade the same store."""

    def __init__(self, url: str) -> None:
        self.url = url

    @abc.abstractmethod
    async def column(self, sql: str) -> list[str]:
        """The first column of every row `sql` selects, as text (ids as 0.1.0 returned them)."""

    @abc.abstractmethod
    async def snapshot(self) -> object:
        """Everything the store holds, comparable with ``==``: equal before and after means nothing changed."""

    @abc.abstractmethod
    async def leave_dead_010_worker(self, job_id: str) -> None:
        """A 0.1.0 worker that died mid-job ten minutes ago: its row, and `job_id` 'processing' under it."""

    @abc.abstractmethod
    async def refresh_010_heartbeats(self) -> None:
        """Every 0.1.0 worker row heartbeats now, as if those workers still ran."""

    @abc.abstractmethod
    async def break_one_010_row(self) -> str:
        """Add a row 0.1.0 accepted but the upgrade's copy cannot convert; returns what the error names."""

    @abc.abstractmethod
    async def upgrade_leftovers(self) -> list[str]:
        """The names of the upgrade's scratch tables or schemas still in the store."""

    @abc.abstractmethod
    async def schema_version(self) -> int:
        """The schema version the store records for this release's migrations."""


def soniq_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """This release's ``soniq`` command, run with this interpreter."""
    return subprocess.run([sys.executable, "-m", "soniq", *args], capture_output=True, text=True, timeout=timeout)


def concurrent_setups(url: str, count: int) -> list[tuple[int, str, str]]:
    """`count` ``soniq setup`` processes started together; each one's exit code, stdout and stderr."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "soniq", "setup", "--database-url", url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(count)
    ]
    outputs = [proc.communicate(timeout=120) for proc in procs]
    return [(proc.returncode, out, err) for proc, (out, err) in zip(procs, outputs, strict=True)]


def populate_with_010(legacy_python: Path, store: UpgradeStore) -> dict[str, str]:
    """Let soniq 0.1.0 set `store` up and use it; the ids of the rows it left, by `JOB_KEYS` and ``dead``."""
    done = subprocess.run(
        [str(legacy_python), "-I", "-c", POPULATE_010, store.url],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    ids: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])

    async def below_the_api() -> None:
        await store.leave_dead_010_worker(ids["processing"])
        [ids["dead"]] = await store.column("SELECT id FROM soniq_dead_letter_jobs")

    asyncio.run(below_the_api())
    return ids


async def stored(backend: Backend, job_id: str) -> JobRecord:
    record = await backend.get_job(GetJobParams(job_id=job_id))
    assert record is not None, job_id
    return record


class Upgrade010Scenario:
    """A store soniq 0.1.0 itself set up and used, upgraded in place by this release.

    Needs the fixtures ``legacy_python`` (`soniq_contract_tests.legacy_venv`) and ``upgrade_store``
    (a fresh `UpgradeStore`, emptied or removed after the test)."""

    @pytest.fixture
    def upgrade_store(self) -> UpgradeStore:
        """A fresh, empty store of the backend under test: a subclass overrides this fixture."""
        pytest.fail(f"{type(self).__name__} must override the fixture upgrade_store (a fresh UpgradeStore)")

    @pytest.fixture
    def legacy_010(self, legacy_python: Path, upgrade_store: UpgradeStore) -> tuple[UpgradeStore, dict[str, str]]:
        """The store after soniq 0.1.0 set it up and used it, with the ids of the rows it left."""
        return upgrade_store, populate_with_010(legacy_python, upgrade_store)

    async def check_010_rows(self, store: UpgradeStore, ids: dict[str, str]) -> None:
        """Below the API, the rows 0.1.0 left are there as it left them. A subclass adds what only it stores."""
        assert sorted(await store.column("SELECT id FROM soniq_jobs")) == sorted(ids[key] for key in JOB_KEYS)
        assert await store.column("SELECT id FROM soniq_dead_letter_jobs") == [ids["dead"]]

    async def check_upgraded(self, store: UpgradeStore, backend: Backend, ids: dict[str, str]) -> None:
        """After an upgrade: the schema is this release's, with no scratch left. A subclass adds its own checks."""
        assert await store.schema_version() == store.latest_schema_version
        assert await store.upgrade_leftovers() == []

    async def check_upgraded_through_the_api(self, store: UpgradeStore, ids: dict[str, str]) -> None:
        app = Soniq(store.url)
        try:
            backend = cast(Backend, await app.connected_backend())
            await self.check_upgraded(store, backend, ids)
        finally:
            await app.close()

    async def check_untouched(self, store: UpgradeStore, ids: dict[str, str], before: object) -> None:
        assert await store.snapshot() == before
        await self.check_010_rows(store, ids)

    async def test_first_use_refuses_a_010_database_and_changes_nothing(
        self, legacy_010: tuple[UpgradeStore, dict[str, str]]
    ) -> None:
        store, ids = legacy_010
        await self.check_010_rows(store, ids)
        before = await store.snapshot()
        app = Soniq(store.url)

        @app.job(name="legacy.send")
        async def send(to: str) -> None: ...

        try:
            with pytest.raises(SchemaStateError, match=rf"{re.escape(store.description)}.*soniq setup") as caught:
                await app.enqueue("legacy.send", args={"to": "x"})
            assert caught.value.family is SchemaFamily.LEGACY_010
        finally:
            await app.close()
        await self.check_untouched(store, ids, before)
        worker = soniq_cli("worker", "--run-once", "--allow-no-jobs", "--database-url", store.url)
        assert worker.returncode == 1
        assert store.description in worker.stderr
        assert "soniq setup" in worker.stderr
        await self.check_untouched(store, ids, before)

    async def test_dry_run_prints_the_sql_and_changes_nothing(
        self, legacy_010: tuple[UpgradeStore, dict[str, str]]
    ) -> None:
        store, ids = legacy_010
        before = await store.snapshot()
        status = soniq_cli("migrate-status", "--database-url", store.url)
        assert status.returncode == 0, status.stderr
        assert re.search(r"family:\s+soniq-0.1.0", status.stdout), status.stdout
        assert "upgrade the soniq-0.1.0 schema in place" in status.stdout
        dry = soniq_cli("setup", "--dry-run", "--database-url", store.url)
        assert dry.returncode == 0, dry.stderr
        for statement in store.dry_run_shows:
            assert statement in dry.stdout, (statement, dry.stdout)
        await self.check_untouched(store, ids, before)

    async def test_upgrade_keeps_every_row_and_the_queued_jobs_run(
        self, legacy_010: tuple[UpgradeStore, dict[str, str]]
    ) -> None:
        store, ids = legacy_010
        done = soniq_cli("setup", "--database-url", store.url)
        assert done.returncode == 0, done.stderr
        assert "upgraded the soniq-0.1.0 schema" in done.stdout

        app = Soniq(store.url, heartbeat_timeout=60.0)
        sent: list[dict[str, Any]] = []

        @app.job(name="legacy.send", queue="mail")
        async def send(**kwargs: Any) -> str:
            sent.append(kwargs)
            return "sent"

        try:
            backend = cast(Backend, await app.connected_backend())

            async def job(key: str) -> JobRecord:
                return await stored(backend, ids[key])

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

            await self.check_upgraded(store, backend, ids)

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
            replayed = await stored(backend, new_id)
            assert (replayed.job_name, replayed.args) == ("legacy.bad", {"n": 7})

            # Dependencies and cancel requests work on the upgraded store: 0.1.0's rows can be depended on, and a
            # cancel of one fails its dependents (edge table, trigger and columns exist after the upgrade).
            def dependent(job_id: str, *on: str) -> NewJob:
                now = datetime.now(UTC)
                return NewJob(job_id, "legacy.send", {}, "mail", 5, now, 3, depends_on=on, limit_key="k")

            await backend.enqueue_jobs(
                EnqueueJobsParams(
                    jobs=[dependent("after-done", ids["done"]), dependent("after-later", ids["scheduled"])]
                )
            )
            assert (await stored(backend, "after-done")).waiting_on == 0
            assert (await stored(backend, "after-later")).waiting_on == 1
            assert await backend.request_cancel(RequestCancelParams(job_id=ids["scheduled"])) is CancelOutcome.CANCELLED
            cancelled = await stored(backend, "after-later")
            assert (cancelled.status, cancelled.last_error) == (
                JobStatus.CANCELLED,
                f"dependency {ids['scheduled']} was cancelled",
            )
        finally:
            await app.close()

        status = soniq_cli("migrate-status", "--json", "--database-url", store.url)
        assert '"family": "soniq"' in status.stdout, status.stdout
        assert '"pending": []' in status.stdout

    async def test_fresh_010_heartbeats_refuse_the_upgrade_unless_forced(
        self, legacy_010: tuple[UpgradeStore, dict[str, str]]
    ) -> None:
        store, ids = legacy_010
        await store.refresh_010_heartbeats()
        before = await store.snapshot()
        app = Soniq(store.url)
        try:
            with pytest.raises(LegacyWorkersActiveError, match=r"1 soniq 0.1.0 worker.*--force"):
                await app.setup()
        finally:
            await app.close()
        await self.check_untouched(store, ids, before)
        refused = soniq_cli("setup", "--database-url", store.url)
        assert refused.returncode == 1
        assert "soniq setup --force" in refused.stderr
        assert soniq_cli("setup", "--dry-run", "--database-url", store.url).returncode == 1
        await self.check_untouched(store, ids, before)
        forced = soniq_cli("setup", "--force", "--database-url", store.url)
        assert forced.returncode == 0, forced.stderr
        assert sorted(await store.column("SELECT id FROM soniq_jobs")) == sorted(ids[key] for key in JOB_KEYS)
        await self.check_upgraded_through_the_api(store, ids)

    async def test_a_failed_upgrade_rolls_back_and_leaves_the_010_database_as_it_was(
        self, legacy_010: tuple[UpgradeStore, dict[str, str]]
    ) -> None:
        store, ids = legacy_010
        await self.check_010_rows(store, ids)
        named = await store.break_one_010_row()
        before = await store.snapshot()
        failed = soniq_cli("setup", "--database-url", store.url)
        assert failed.returncode == 1
        assert "rolled back" in failed.stderr
        assert named in failed.stderr
        assert await store.snapshot() == before  # so 0.1.0's rows checked above are all still there
        assert await store.upgrade_leftovers() == []
        status = soniq_cli("migrate-status", "--database-url", store.url)
        assert re.search(r"family:\s+soniq-0.1.0", status.stdout), status.stdout

    async def test_concurrent_setups_upgrade_once(self, legacy_010: tuple[UpgradeStore, dict[str, str]]) -> None:
        store, ids = legacy_010
        results = concurrent_setups(store.url, store.concurrent_setups)
        assert [code for code, _, _ in results] == [0] * store.concurrent_setups, [err for _, _, err in results]
        assert len([out for _, out, _ in results if "upgraded the soniq-0.1.0 schema" in out]) == 1
        assert sorted(await store.column("SELECT id FROM soniq_jobs")) == sorted(ids[key] for key in JOB_KEYS)
        await self.check_upgraded_through_the_api(store, ids)
