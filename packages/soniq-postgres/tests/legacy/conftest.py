"""A database of its own for each 0.1.0 upgrade test; the 0.1.0 virtualenv comes from
`soniq_contract_tests.legacy_venv`."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from soniq_contract_tests.legacy_venv import legacy_python

__all__ = ["legacy_python"]


async def _admin(url: str, sql: str) -> None:
    connection = await asyncpg.connect(url)
    try:
        await connection.execute(sql)
    finally:
        await connection.close()


@pytest.fixture
def legacy_db(pg_url: str) -> Iterator[str]:
    """The URL of a new, empty database on the test server, dropped afterwards."""
    name = f"soniq_upgrade_{uuid.uuid4().hex[:10]}"
    asyncio.run(_admin(pg_url, f'CREATE DATABASE "{name}"'))
    yield urlunsplit(urlsplit(pg_url)._replace(path=f"/{name}"))
    asyncio.run(_admin(pg_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
