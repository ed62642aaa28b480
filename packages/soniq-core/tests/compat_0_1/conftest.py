"""Runs `test_0_1_idioms.py` unchanged on every backend: `make_app()` is pointed at each store in turn."""

from __future__ import annotations

import importlib.util
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


def _store_dedupes(package: str) -> bool:
    """Whether a backend package has the store side of unique/dedup_key (compat-store lands it backend by backend)."""
    spec = importlib.util.find_spec(package)
    root = Path(spec.origin or "").parent if spec else None
    return root is not None and any("dedup_key" in p.read_text(errors="replace") for p in root.rglob("*.py"))


PENDING = {
    # test name -> (backend, why), for features a sibling branch has not landed on that backend yet
    "test_unique_enqueue_returns_the_queued_job": {
        kind: f"pending: unique/dedup_key enqueue is not in {package} yet (compat-store)"
        for kind, package in (("redis", "soniq_redis"), ("postgres", "soniq_postgres"), ("sqlite", "soniq_sqlite"))
        if not _store_dedupes(package)
    },
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        name, _, kind = item.name.partition("[")
        reason = PENDING.get(name, {}).get(kind.rstrip("]"))
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))


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
    if made and kind in ("postgres", "redis"):
        await made[0].connect()
        await made[0].backend.drop_schema()
    for app in made:
        await app.close()
