from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from soniq import Soniq

sys.path.insert(0, str(Path(__file__).parent))  # the tests' own helper modules (cli_process)

# Core's own tests never load installed observers (soniq-otel) unless a test asks for them.
os.environ.setdefault("SONIQ_OBSERVERS", "")


async def _wait_until(condition: Callable[[], Any], *, timeout: float = 10.0, interval: float = 0.01) -> Any:
    """Poll `condition` (sync or async) until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(interval)


@pytest.fixture
def fast_settings() -> dict[str, Any]:
    return {
        "heartbeat_interval": 0.2,
        "heartbeat_timeout": 1.0,
        "poll_interval": 0.05,
        "retry_backoff_base": 0.01,
        "retry_backoff_max": 0.02,
        "observers": "",
    }


@pytest.fixture
def wait_until() -> Callable[..., Any]:
    return _wait_until


POSTGRES_URL = os.environ.get("SONIQ_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def _postgres_error() -> str | None:
    try:
        import asyncpg
    except ImportError as exc:
        return str(exc)

    async def probe() -> None:
        connection = await asyncpg.connect(POSTGRES_URL, timeout=3)
        await connection.close()

    try:
        asyncio.run(probe())
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


@pytest.fixture(scope="session")
def postgres_url() -> str:
    error = _postgres_error()
    if error is not None:
        message = f"PostgreSQL at {POSTGRES_URL} is unreachable ({error})"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return POSTGRES_URL


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str, dict[str, Any]]:
    """(kind, url, backend options) of one real store per parameter; PostgreSQL gets its own schema."""
    if request.param == "memory":
        return "memory", "memory://", {}
    if request.param == "sqlite":
        return "sqlite", f"sqlite:///{tmp_path / 'soniq.db'}", {}
    url = request.getfixturevalue("postgres_url")
    return "postgres", url, {"namespace": f"t_{uuid.uuid4().hex[:12]}"}


@pytest_asyncio.fixture
async def make_app(
    store: tuple[str, str, dict[str, Any]], fast_settings: dict[str, Any]
) -> AsyncIterator[Callable[..., Soniq]]:
    """Apps on the `store` of this test, closed (and their schema dropped) afterwards."""
    kind, url, options = store
    made: list[Soniq] = []
    shared: list[Any] = []

    def make(**settings: Any) -> Soniq:
        # Memory stores live in one object: later apps share the first one's backend.
        extra: dict[str, Any] = {"backend": shared[0]} if shared and kind == "memory" else {}
        app = Soniq(url, backend_options=options, **{**fast_settings, **settings}, **extra)
        made.append(app)
        if not shared:
            shared.append(app.backend)
        return app

    yield make
    for app in made:
        if kind == "postgres" and app is made[0]:
            backend: Any = await app.connected_backend()
            await backend.drop_schema()
        await app.close()
