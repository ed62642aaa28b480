from __future__ import annotations

import sqlite3
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import pytest_asyncio

from soniq.records import NewJob
from soniq_sqlite import SQLiteBackend


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "queue.db"


@pytest_asyncio.fixture
async def backend(db_path: Path) -> AsyncIterator[SQLiteBackend]:
    instance = SQLiteBackend.from_url(f"sqlite:///{db_path}")
    await instance.connect()
    yield instance
    await instance.close()


@pytest.fixture
def raw(db_path: Path) -> Iterator[sqlite3.Connection]:
    """A plain sqlite3 connection to the backend's file, outside Soniq."""
    conn = sqlite3.connect(db_path, isolation_level=None, timeout=5)
    yield conn
    conn.close()


def _new_job(*, queue: str = "default", priority: int = 100, scheduled_at: datetime | None = None) -> NewJob:
    return NewJob(
        id=str(uuid.uuid4()),
        job_name="tests.noop",
        args={"n": 1},
        queue=queue,
        priority=priority,
        scheduled_at=scheduled_at or datetime.now(UTC),
        max_attempts=3,
    )


@pytest.fixture
def make_job() -> Callable[..., NewJob]:
    """Build a due `NewJob` with a fresh id; keywords override queue, priority, scheduled_at."""
    return _new_job
