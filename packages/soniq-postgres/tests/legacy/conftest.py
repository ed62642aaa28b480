"""A database of its own for each 0.1.0 upgrade test; the 0.1.0 virtualenv comes from
`soniq_contract_tests.legacy_venv`."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
import pytest_asyncio

from soniq_contract_tests.legacy_venv import legacy_python

__all__ = ["legacy_python"]

POPULATE = Path(__file__).with_name("populate_010.py")


@pytest_asyncio.fixture
async def legacy_db(pg_url: str) -> AsyncIterator[str]:
    """The URL of a new, empty database on the test server, dropped afterwards."""
    name = f"soniq_upgrade_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(pg_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    parts = urlsplit(pg_url)
    yield urlunsplit(parts._replace(path=f"/{name}"))
    admin = await asyncpg.connect(pg_url)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


def populate(legacy_python: Path, url: str) -> dict[str, str]:
    """Run 0.1.0's own setup, worker and enqueues against `url`; the ids of the rows it left."""
    done = subprocess.run(
        [str(legacy_python), str(POPULATE), url],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    ids: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    return ids


@pytest.fixture
def legacy_010_db(legacy_python: Path, legacy_db: str) -> tuple[str, dict[str, str]]:
    """A database soniq 0.1.0 set up and used, with the ids of the rows it left."""
    return legacy_db, populate(legacy_python, legacy_db)


async def fetch(url: str, sql: str, *args: object) -> list[asyncpg.Record]:
    connection = await asyncpg.connect(url)
    try:
        return list(await connection.fetch(sql, *args))
    finally:
        await connection.close()


def run_fetch(url: str, sql: str, *args: object) -> list[asyncpg.Record]:
    return asyncio.run(fetch(url, sql, *args))
