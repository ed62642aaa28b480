"""Fixtures for the PostgreSQL backend tests: a real server, one schema per test."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest
import pytest_asyncio

from soniq.records import NewJob
from soniq_postgres import PostgresBackend

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
START_HINT = "start it with: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start"


def _server_error(url: str) -> str | None:
    async def probe() -> None:
        connection = await asyncpg.connect(url, timeout=3)
        await connection.close()

    try:
        asyncio.run(probe())
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


@pytest.fixture(scope="session")
def pg_url() -> str:
    url = os.environ.get("SONIQ_TEST_POSTGRES_URL", DEFAULT_URL)
    error = _server_error(url)
    if error is not None:
        message = f"PostgreSQL at {url} is unreachable ({error}); {START_HINT}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return url


@pytest.fixture
def namespace() -> str:
    return f"t_{uuid.uuid4().hex[:12]}"


BackendFactory = Callable[..., Awaitable[PostgresBackend]]


@pytest_asyncio.fixture
async def make_backend(pg_url: str, namespace: str) -> AsyncIterator[BackendFactory]:
    """Connected backends on this test's schema; the schema is dropped afterwards."""
    made: list[PostgresBackend] = []

    async def make(**options: Any) -> PostgresBackend:
        options.setdefault("namespace", namespace)
        backend = PostgresBackend.from_url(pg_url, **options)
        await backend.connect()
        made.append(backend)
        return backend

    yield make
    if made:
        await made[0].drop_schema()
    for backend in made:
        await backend.close()


@pytest_asyncio.fixture
async def backend(make_backend: BackendFactory) -> PostgresBackend:
    return await make_backend()


@pytest_asyncio.fixture
async def raw(pg_url: str) -> AsyncIterator[asyncpg.Connection]:
    """A plain asyncpg connection, outside any backend."""
    connection = await asyncpg.connect(pg_url)
    yield connection
    await connection.close()


def new_job(*, queue: str = "default", priority: int = 100, **fields: Any) -> NewJob:
    values: dict[str, Any] = {
        "id": str(uuid.uuid4()),
        "job_name": "tests.noop",
        "args": {},
        "queue": queue,
        "priority": priority,
        "scheduled_at": datetime.now(UTC),
        "max_attempts": 3,
    }
    values.update(fields)
    return NewJob(**values)


async def eventually(condition: Callable[[], Awaitable[bool]], *, within: float = 10.0, what: str = "") -> None:
    """Poll `condition` every few ms until it holds; fail after `within` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not await condition():
        if loop.time() > deadline:
            pytest.fail(f"not true within {within:g}s: {what}")
        await asyncio.sleep(0.01)


@pytest.fixture
def make_job() -> Callable[..., NewJob]:
    return new_job


@pytest.fixture
def wait_until() -> Callable[..., Awaitable[None]]:
    return eventually
