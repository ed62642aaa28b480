"""soniq 0.1.0's store features still work, through the app on every backend: unique and dedup_key enqueue,
result_ttl, get_result, delete_job, get_job of a dead letter, and the dead-letter service."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import os
import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from soniq import JobOptionsError, Soniq
from soniq.dead_letter import DeadLetterFilter

pytestmark = pytest.mark.asyncio

PG_URL = os.environ.get("SONIQ_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("SONIQ_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


def _url(kind: str, tmp_path: Path) -> str:
    if kind == "memory":
        return f"memory://{uuid.uuid4().hex}"
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'jobs.db'}"
    url, port = (PG_URL, 5432) if kind == "postgres" else (REDIS_URL, 6379)
    parts = urlsplit(url)
    try:
        socket.create_connection((parts.hostname or "127.0.0.1", parts.port or port), timeout=1.0).close()
    except OSError:
        message = f"{kind} is not reachable at {url}; start it (see CONTRIBUTING) or set SONIQ_TEST_{kind.upper()}_URL"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return url


class Apps:
    """Apps on one backend and one namespace of their own; the namespace is dropped afterwards."""

    def __init__(self, kind: str, tmp_path: Path) -> None:
        self.url = _url(kind, tmp_path)
        self.options = {"namespace": f"t_dedup_{uuid.uuid4().hex[:12]}"}
        self.made: list[Soniq] = []

    def app(self, **settings: Any) -> Soniq:
        app = Soniq(self.url, backend_options=self.options, observers="", poll_interval=0.05, **settings)
        self.made.append(app)
        return app

    def cleanup(self) -> None:
        async def drop() -> None:
            cleaner = Soniq(self.url, backend_options=self.options, observers="")
            try:
                await cleaner.connect()
                await cleaner.backend.drop_schema()
            finally:
                await cleaner.close()

        for app in self.made:
            app.close_sync()
        if self.made:
            asyncio.run(drop())


@pytest.fixture(params=["memory", "sqlite", "postgres", "redis"])
def apps(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Apps]:
    made = Apps(str(request.param), tmp_path)
    yield made
    made.cleanup()


def jobs_app(apps: Apps, **settings: Any) -> Soniq:
    app = apps.app(**settings)

    @app.job(name="compat.add", max_retries=0)
    async def add(a: int, b: int) -> dict[str, int]:
        return {"sum": a + b}

    @app.job(name="compat.fail", max_retries=0)
    async def fail(n: int = 0) -> None:
        raise RuntimeError(f"no {n}")

    return app


async def run_all(app: Soniq) -> None:
    await app.run_worker(run_once=True, install_signal_handlers=False)


async def test_unique_and_dedup_key_return_the_queued_jobs_id(apps: Apps) -> None:
    app = jobs_app(apps)
    async with app:
        await app.setup()
        first = await app.enqueue("compat.add", a=1, b=2, unique=True)
        assert await app.enqueue("compat.add", b=2, a=1, unique=True) == first  # argument order does not matter
        other = await app.enqueue("compat.add", a=1, b=3, unique=True)
        assert other != first
        plain = await app.enqueue("compat.add", a=1, b=2)
        assert plain not in (first, other)
        keyed = await app.enqueue("compat.add", a=5, b=5, dedup_key="nightly-report")
        assert await app.enqueue("compat.add", a=9, b=9, dedup_key="nightly-report") == keyed
        row = await app.get_job(keyed)
        assert row is not None
        assert (row["args"], row["dedup_key"]) == ({"a": 5, "b": 5}, "nightly-report")
        assert set(row["args"]) == {"a", "b"}
        assert (await app.get_queue_stats())["queued"] == 4

        batch = await app.enqueue_many(
            "compat.add", [{"a": 7, "b": 1}, {"a": 7, "b": 1}, {"a": 1, "b": 2}], unique=True
        )
        assert batch[0] == batch[1] != first
        assert batch[2] == first
        assert (await app.get_queue_stats())["queued"] == 5

        # Once a worker took it, the key is free again.
        await run_all(app)
        again = await app.enqueue("compat.add", a=1, b=2, unique=True)
        assert again != first
        assert (await app.get_job(again) or {})["status"] == "queued"


async def test_concurrent_producers_on_separate_apps_get_one_job(apps: Apps) -> None:
    producers = [jobs_app(apps) for _ in range(4)]
    await producers[0].setup()
    try:
        ids = await asyncio.gather(*(producers[n % 4].enqueue("compat.add", a=3, b=4, unique=True) for n in range(24)))
        assert len(set(ids)) == 1
        assert (await producers[0].get_queue_stats())["queued"] == 1
    finally:
        for app in producers:
            await app.close()


async def test_a_bad_dedup_option_stores_nothing(apps: Apps) -> None:
    app = jobs_app(apps)
    async with app:
        await app.setup()
        with pytest.raises(JobOptionsError, match="dedup_key"):
            await app.enqueue("compat.add", a=1, b=2, dedup_key="")
        with pytest.raises(JobOptionsError, match="dedup_key"):
            await app.enqueue("compat.add", a=1, b=2, dedup_key="k" * 300)
        with pytest.raises(JobOptionsError, match="unique"):
            await app.enqueue("compat.add", a=1, b=2, unique="yes")  # type: ignore[arg-type]
        assert (await app.get_queue_stats())["total"] == 0


@dataclass
class Sum:
    sum: int


async def test_get_result_with_and_without_a_model(apps: Apps) -> None:
    app = jobs_app(apps)
    async with app:
        await app.setup()
        job_id = await app.enqueue("compat.add", a=2, b=3)
        assert await app.get_result(job_id) is None  # not done yet
        await run_all(app)
        assert await app.get_result(job_id) == {"sum": 5}
        assert await app.get_result(job_id, result_model=Sum) == Sum(sum=5)
        assert await app.get_result("no-such-job") is None


async def test_result_ttl_zero_deletes_the_row_and_n_sets_its_expiry(apps: Apps) -> None:
    gone = jobs_app(apps, result_ttl=0)
    async with gone:
        await gone.setup()
        job_id = await gone.enqueue("compat.add", a=1, b=1)
        await run_all(gone)
        assert await gone.get_job(job_id) is None
        assert await gone.get_result(job_id) is None
        assert (await gone.get_queue_stats())["total"] == 0
    kept = jobs_app(apps, result_ttl=60)
    async with kept:
        job_id = await kept.enqueue("compat.add", a=1, b=1)
        before = datetime.now(UTC)
        await run_all(kept)
        row = await kept.get_job(job_id)
        assert row is not None
        assert row["status"] == "done"
        expires = row["expires_at"]
        assert expires is not None
        slack = timedelta(seconds=2)
        assert before + timedelta(seconds=60) - slack <= expires <= datetime.now(UTC) + timedelta(seconds=60) + slack


async def test_result_ttl_is_validated_with_its_name() -> None:
    with pytest.raises(Exception, match="result_ttl"):
        Soniq("memory://", result_ttl=-1)


async def test_delete_job_and_get_job_of_a_dead_letter(apps: Apps) -> None:
    app = jobs_app(apps)
    async with app:
        await app.setup()
        queued = await app.enqueue("compat.add", a=1, b=1, scheduled_at=3600)
        assert await app.delete_job(queued) is True
        assert await app.delete_job(queued) is False
        assert await app.get_job(queued) is None

        failed = await app.enqueue("compat.fail", n=1)
        await run_all(app)
        row = await app.get_job(failed)
        assert row is not None
        assert (row["status"], row["dead_letter_reason"], row["job_name"]) == (
            "dead_letter",
            "max_attempts",
            "compat.fail",
        )
        assert "no 1" in row["last_error"]


async def test_dead_letter_service_filters_replays_deletes_counts_and_exports(apps: Apps) -> None:
    app = jobs_app(apps)
    async with app:
        await app.setup()
        for n in range(3):
            await app.enqueue("compat.fail", n=n, queue="dl-a")
        await app.enqueue("compat.fail", n=9, queue="dl-b")
        await run_all(app)
        service = app.dead_letter

        stats = await service.stats()
        assert (stats["total"], stats["by_queue"], stats["resurrected"]) == (4, {"dl-a": 3, "dl-b": 1}, 0)
        only_b = await service.list(filter=DeadLetterFilter(queues=["dl-b"]))
        assert [row["args"] for row in only_b] == [{"n": 9}]

        new_id = await service.replay(only_b[0]["id"], new_queue="dl-c", new_priority=5, new_max_attempts=4)
        copy = await app.get_job(new_id)
        assert copy is not None
        assert (copy["queue"], copy["priority"], copy["max_attempts"], copy["attempts"]) == ("dl-c", 5, 4, 0)
        kept = await service.replay(only_b[0]["id"], reset_attempts=False)
        assert (await app.get_job(kept) or {})["attempts"] == 1
        with pytest.raises(JobOptionsError, match="new_max_attempts"):
            await service.replay(only_b[0]["id"], new_max_attempts=0)
        assert (await service.stats(DeadLetterFilter(has_been_resurrected=True)))["total"] == 1

        replayed = await service.bulk_replay(DeadLetterFilter(queues=["dl-a"], limit=2))
        assert len(replayed) == 2
        exported = await service.export(DeadLetterFilter(queues=["dl-a"]), format="csv")
        table = list(csv.DictReader(io.StringIO(exported)))
        assert sorted(json.loads(row["args"])["n"] for row in table) == [0, 1, 2]
        as_json = json.loads(await service.export(format="json"))
        assert len(as_json) == 4
        with pytest.raises(JobOptionsError, match="format"):
            await service.export(format="xml")

        assert await service.cleanup(0, dry_run=True) == 4
        assert await service.bulk_delete(DeadLetterFilter(queues=["dl-a"])) == 3
        assert (await service.stats())["total"] == 1
        assert await service.cleanup(1) == 0
        assert await service.cleanup(0) == 1
        assert (await service.stats())["total"] == 0


async def test_dead_letter_filter_refuses_bad_fields_by_name() -> None:
    with pytest.raises(JobOptionsError, match="queues"):
        DeadLetterFilter(queues="default")
    with pytest.raises(JobOptionsError, match="limit"):
        DeadLetterFilter(limit=0)
    with pytest.raises(JobOptionsError, match="date_from"):
        DeadLetterFilter(date_from=datetime(2026, 2, 1, tzinfo=UTC), date_to=datetime(2026, 1, 1, tzinfo=UTC))
