"""Producer checks, namespaces and several event loops on every backend, on real servers."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import os
import re
import socket
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from soniq import JobArgumentsError, JobOptionsError, Soniq, SoniqError

PG_URL = os.environ.get("SONIQ_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("SONIQ_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
BACKENDS = ["memory", "sqlite", "postgres", "redis"]


def _reachable(url: str, default_port: int) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or default_port), timeout=1.0):
            return True
    except OSError:
        return False


def backend_url(kind: str, tmp_path: Path) -> str:
    if kind == "memory":
        return f"memory://{uuid.uuid4().hex}"
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'jobs.db'}"
    url, port = (PG_URL, 5432) if kind == "postgres" else (REDIS_URL, 6379)
    if not _reachable(url, port):
        message = f"{kind} is not reachable at {url}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return url


def namespace() -> str:
    return f"t_app_{uuid.uuid4().hex[:12]}"


async def drop(app: Soniq) -> None:
    dropper: Any = getattr(app.backend, "drop_schema", None)
    if dropper is not None:
        await app.connect()
        await dropper()


class Apps:
    """Builds apps on one backend and one namespace, and drops that namespace at the end."""

    def __init__(self, kind: str, tmp_path: Path) -> None:
        self.kind = kind
        self.url = backend_url(kind, tmp_path)
        self.namespace = namespace()
        self.made: list[Soniq] = []

    def app(self, **settings: Any) -> Soniq:
        options = {"namespace": self.namespace}
        app = Soniq(self.url, backend_options=options, observers="", **settings)
        self.made.append(app)
        return app

    def cleanup(self) -> None:
        if not self.made:
            return

        async def finish() -> None:
            cleaner = Soniq(self.url, backend_options={"namespace": self.namespace}, observers="")
            try:
                await drop(cleaner)
            finally:
                await cleaner.close()

        for app in self.made:
            app.close_sync()
        asyncio.run(finish())


@pytest.fixture(params=BACKENDS)
def apps(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Apps]:
    made = Apps(str(request.param), tmp_path)
    yield made
    made.cleanup()


# -- 17.6: validated in core, the same error everywhere, nothing stored -------------------

BAD_ARGS: list[tuple[str, dict[str, Any], str]] = [
    ("lone surrogate in a value", {"path": "caf\udce9.txt"}, "lone surrogate (U+DCE9)"),
    ("lone surrogate in a key", {"k\ud800": 1}, "lone surrogate (U+D800)"),
    ("NUL in a key", {"a\x00b": 1}, "NUL character"),
    ("nested too deep", {"deep": functools.reduce(lambda inner, _: [inner], range(5000), [])}, "nested more"),
    ("not JSON", {"when": object()}, "is of type object"),
    ("NaN", {"ratio": float("nan")}, "JSON cannot carry"),
]


@pytest.mark.parametrize(("label", "args", "fragment"), BAD_ARGS, ids=[case[0] for case in BAD_ARGS])
def test_bad_arguments_fail_the_same_way_on_every_backend(
    apps: Apps, label: str, args: dict[str, Any], fragment: str
) -> None:
    async def main() -> None:
        app = apps.app()

        @app.job(name="take")
        async def take(**kwargs: Any) -> None: ...

        try:
            await app.setup()
            with pytest.raises(JobArgumentsError) as info:
                await app.enqueue("take", args=args)
            message = str(info.value)
            assert fragment in message
            assert "'take'" in message
            assert len(message) < 400  # it names the problem, it never prints the arguments
            with pytest.raises(JobArgumentsError):
                await app.enqueue_many("take", [{"fine": 1}, args])
            assert (await app.get_queue_stats())["total"] == 0
        finally:
            await app.close()

    asyncio.run(main())


BAD_OPTIONS: list[tuple[dict[str, Any], str]] = [
    ({"queue": ""}, "must not be empty"),
    ({"queue": "a\x00b"}, "control character (U+0000)"),
    ({"queue": "a\nb"}, "control character (U+000A)"),
    ({"queue": "a,b"}, "contains ','"),
    ({"queue": " padded "}, "leading or trailing spaces"),
    ({"queue": "€" * 67}, "201 bytes in UTF-8, over the limit of 200 bytes"),
    ({"priority": 2**31}, "between -2147483648 and 2147483647"),
    ({"priority": -(2**31) - 1}, "between -2147483648 and 2147483647"),
    ({"scheduled_at": float("inf")}, "finite number of seconds"),
    ({"scheduled_at": float("nan")}, "finite number of seconds"),
    ({"scheduled_at": 1e12}, "out of range"),
    ({"scheduled_at": datetime(1, 1, 1, tzinfo=UTC)}, "out of range"),
    ({"scheduled_at": timedelta(days=999_999_999)}, "out of range"),
]


@pytest.mark.parametrize(("options", "fragment"), BAD_OPTIONS, ids=[repr(case[0])[:40] for case in BAD_OPTIONS])
def test_bad_queue_priority_and_schedule_fail_the_same_way_on_every_backend(
    apps: Apps, options: dict[str, Any], fragment: str
) -> None:
    async def main() -> None:
        app = apps.app()

        @app.job(name="take")
        async def take() -> None: ...

        try:
            await app.setup()
            with pytest.raises(JobOptionsError, match=re.escape(fragment)):
                await app.enqueue("take", **options)
            with pytest.raises(JobOptionsError, match=re.escape(fragment)):
                await app.enqueue_many("take", [{}], **options)
            assert (await app.get_queue_stats())["total"] == 0
            # The bounds themselves are accepted everywhere.
            await app.enqueue("take", queue="€" * 66, priority=2**31 - 1)
            await app.enqueue("take", priority=-(2**31))
            assert (await app.get_queue_stats())["total"] == 2
        finally:
            await app.close()

    asyncio.run(main())


def test_negative_page_bounds_are_one_clear_error_on_every_backend(apps: Apps) -> None:
    async def main() -> None:
        app = apps.app()
        try:
            await app.setup()
            for call in (
                lambda: app.list_jobs(limit=-1),
                lambda: app.list_jobs(offset=-1),
                lambda: app.dead_letter.list(limit=-1),
                lambda: app.dead_letter.list(offset=-1),
            ):
                with pytest.raises(
                    JobOptionsError, match=r"(limit|offset) must be a whole number from [01] to [0-9,]+, got -1"
                ):
                    await call()
        finally:
            await app.close()

    asyncio.run(main())


# -- 17.5: a namespaced tenant keeps its namespace through --database-url -----------------


def test_use_database_url_keeps_the_namespace_and_the_worker_serves_only_its_tenant(apps: Apps) -> None:
    async def main() -> None:
        producer = apps.app()
        tenant = apps.app()
        other = Soniq(apps.url, backend_options={"namespace": apps.namespace + "_other"}, observers="")
        ran: list[str] = []

        async def work(who: str) -> None:
            ran.append(who)

        for app in (producer, tenant, other):
            app.job(name="work")(work)
        try:
            await producer.setup()
            await other.setup()
            await producer.enqueue("work", who="tenant")
            await other.enqueue("work", who="other")
            # What `soniq worker --database-url` does: the URL spelled again, no options passed.
            tenant.use_database_url(apps.url)
            assert tenant.backend_options == {"namespace": apps.namespace}
            await tenant.run_worker(run_once=True, install_signal_handlers=False)
            assert ran == ["tenant"]
            stats = await other.get_queue_stats()
            assert (stats["queued"], stats["dead_letter"]) == (1, 0)
        finally:
            await producer.close()
            await tenant.close()
            await drop(other)
            await other.close()

    asyncio.run(main())


# -- 21.3: one app across event loops and threads ---------------------------------------------


def test_asyncio_run_three_times_in_a_row(apps: Apps) -> None:
    app = apps.app()

    @app.job(name="ping")
    async def ping(n: int) -> None: ...

    async def once(n: int) -> str:
        await app.setup()
        job_id = await app.enqueue("ping", n=n)
        row = await app.get_job(job_id)
        assert row is not None
        assert row["args"] == {"n": n}
        return job_id

    ids = [asyncio.run(once(n)) for n in range(3)]
    assert len(set(ids)) == 3

    async def count() -> int:
        try:
            return (await app.get_queue_stats())["queued"]
        finally:
            await app.close()

    assert asyncio.run(count()) == 3


def test_enqueue_sync_from_many_threads_like_a_flask_app(apps: Apps) -> None:
    app = apps.app()

    @app.job(name="send_email")
    def send_email(to: str) -> None: ...

    asyncio.run(app.setup())

    def view(n: int) -> str:
        job_id = app.enqueue_sync(send_email, to=f"user{n}@example.com")
        row = app.get_job_sync(job_id)
        assert row is not None
        assert row["args"] == {"to": f"user{n}@example.com"}
        return job_id

    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        ids = list(pool.map(view, range(40)))
    ids += app.enqueue_many_sync("send_email", [{"to": "a"}, {"to": "b"}])
    assert len(set(ids)) == 42

    async def main_loop_use() -> int:
        # A loop running in this thread while the bridge thread exists: both work.
        await app.enqueue("send_email", to="from-async")
        other_thread = await asyncio.to_thread(app.enqueue_sync, "send_email", to="from-thread")
        assert await app.get_job(other_thread) is not None
        with pytest.raises(SoniqError, match="running event loop"):
            app.enqueue_sync("send_email", to="blocked")
        try:
            return (await app.get_queue_stats())["queued"]
        finally:
            await app.close()

    assert asyncio.run(main_loop_use()) == 44
