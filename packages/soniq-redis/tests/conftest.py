"""Fixtures for soniq-redis' own tests: the shared server, and private throwaway servers.

The shared server (``SONIQ_TEST_REDIS_URL``, default ``redis://127.0.0.1:6379/0``)
serves every test that only needs a namespace of its own. Tests that flush the
script cache, read command counters or stop the server get a private
``redis-server`` on a free port, so they disturb no one.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import pytest
import pytest_asyncio

from soniq.records import NewJob
from soniq_redis import RedisBackend

REDIS_URL = os.environ.get("SONIQ_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
START_HINT = 'start it with: redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no'


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true, so this fails instead of skipping)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def redis_url() -> str:
    parts = urlsplit(REDIS_URL)
    host, port = parts.hostname or "127.0.0.1", parts.port or 6379
    if not _reachable(host, port):
        _unavailable(f"no Redis server at {host}:{port} (SONIQ_TEST_REDIS_URL={REDIS_URL}); {START_HINT}")
    return REDIS_URL


def fresh_namespace() -> str:
    return f"soniq_redis_test_{uuid.uuid4().hex[:12]}"


@pytest_asyncio.fixture
async def backend(redis_url: str) -> AsyncIterator[RedisBackend]:
    """A connected backend in a namespace of its own on the shared server."""
    instance = RedisBackend.from_url(redis_url, namespace=fresh_namespace())
    await instance.connect()
    try:
        yield instance
    finally:
        try:
            await instance.drop_schema()
        finally:
            await instance.close()


@pytest_asyncio.fixture
async def peer(redis_url: str, backend: RedisBackend) -> AsyncIterator[RedisBackend]:
    """A second backend instance on `backend`'s namespace (as another process would have)."""
    other = RedisBackend.from_url(redis_url, namespace=backend.keys.namespace)
    await other.connect()
    try:
        yield other
    finally:
        await other.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServerProcess:
    """A private redis-server that a test may stop and start again on the same port."""

    def __init__(self, binary: str, workdir: str) -> None:
        self.binary = binary
        self.workdir = workdir
        self.port = _free_port()
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self._process = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            cwd=self.workdir,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        give_up = time.monotonic() + 10
        while not _reachable("127.0.0.1", self.port):
            if self._process.poll() is not None or time.monotonic() > give_up:
                raise RuntimeError(f"redis-server did not start on port {self.port}")
            time.sleep(0.01)

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            process.terminate()
            process.wait(timeout=10)


@pytest.fixture
def private_server() -> Iterator[RedisServerProcess]:
    binary = shutil.which("redis-server")
    if binary is None:
        _unavailable("redis-server is not installed (apt-get install redis-server); needed for a private server")
        raise AssertionError("unreachable")
    with tempfile.TemporaryDirectory(prefix="soniq-redis-") as workdir:
        server = RedisServerProcess(binary, workdir)
        server.start()
        try:
            yield server
        finally:
            server.stop()


WaitUntil = Callable[..., Awaitable[None]]
MakeJob = Callable[..., NewJob]


async def _wait_until(check: Callable[[], Awaitable[bool]], *, deadline: float, message: str) -> None:
    give_up = time.monotonic() + deadline
    while not await check():
        if time.monotonic() > give_up:
            raise AssertionError(f"gave up after {deadline:g}s: {message}")
        await asyncio.sleep(0.005)


@pytest.fixture
def wait_until() -> WaitUntil:
    """Poll an async check every few milliseconds until true, or fail after `deadline` seconds."""
    return _wait_until


def _make_job(**fields: Any) -> NewJob:
    values: dict[str, Any] = {
        "id": str(uuid.uuid4()),
        "job_name": "tests.job",
        "args": {"n": 1},
        "queue": "default",
        "priority": 100,
        "scheduled_at": datetime.now(UTC) - timedelta(seconds=1),
        "max_attempts": 3,
    }
    values.update(fields)
    return NewJob(**values)


@pytest.fixture
def make_job() -> MakeJob:
    """Build a `NewJob`, due a second ago, with any field overridden."""
    return _make_job
