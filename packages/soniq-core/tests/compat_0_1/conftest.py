"""Runs `test_0_1_idioms.py` unchanged on every backend: `make_app()` is pointed at each store in turn."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import pytest_asyncio

from soniq import Soniq
from soniq.testing import use_backend

PG_URL = os.environ.get("SONIQ_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("SONIQ_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


def _reachable_or_skip(kind: str, url: str, port: int) -> None:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or port), timeout=1.0):
            return
    except OSError:
        message = f"{kind} is not reachable at {url}: start it, or set SONIQ_TEST_{kind.upper()}_URL"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


@pytest_asyncio.fixture(autouse=True, params=["memory", "sqlite", "postgres", "redis"])
async def every_backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    kind = str(request.param)
    if kind == "memory":
        url = "memory://"
    elif kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'jobs.db'}"
    else:
        url, port = (PG_URL, 5432) if kind == "postgres" else (REDIS_URL, 6379)
        _reachable_or_skip(kind, url, port)
    namespace = f"t_c01_{uuid.uuid4().hex[:12]}"
    before = set(map(id, Soniq.instances()))
    with use_backend(url, namespace=namespace):
        yield kind
    made = [app for app in Soniq.instances() if id(app) not in before]
    # Close every app first: a connection still open in another app would hold the schema's locks.
    for app in made:
        await app.close()
    if made and kind in ("postgres", "redis"):
        cleaner = Soniq(url, backend_options={"namespace": namespace})
        try:
            await cleaner.connect()
            await cleaner.backend.drop_schema()
        finally:
            await cleaner.close()
