"""Creating, upgrading and dropping the schema, safely from several processes at once."""

from __future__ import annotations

import aiosqlite

from soniq.errors import SoniqError
from soniq_sqlite.connection import Database
from soniq_sqlite.schema import MIGRATIONS, SCHEMA_VERSION, TABLES


async def _user_version(conn: aiosqlite.Connection) -> int:
    rows = list(await conn.execute_fetchall("PRAGMA user_version"))
    return int(rows[0][0])


async def ensure_schema(db: Database) -> None:
    """First use: a cheap version read, and the full upgrade only when it is behind."""
    rows = await db.fetchall("PRAGMA user_version")
    if int(rows[0][0]) != SCHEMA_VERSION:
        await upgrade_schema(db)


async def upgrade_schema(db: Database) -> None:
    """Run every migration above the file's version in one ``BEGIN IMMEDIATE``.

    A second process doing the same waits on the write lock, then reads the
    new version and has nothing left to do.
    """

    async def body(conn: aiosqlite.Connection) -> None:
        current = await _user_version(conn)
        if current > SCHEMA_VERSION:
            raise SoniqError(
                f"{db.location.describe()} has Soniq schema version {current}, newer than the "
                f"{SCHEMA_VERSION} this soniq-sqlite knows; upgrade soniq-sqlite"
            )
        for version in range(current + 1, SCHEMA_VERSION + 1):
            for statement in MIGRATIONS[version]:
                await conn.execute(statement)
        if current != SCHEMA_VERSION:
            # user_version lives in the file header and is written by this transaction.
            await conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    await db.transaction(body)


async def drop_schema(db: Database) -> None:
    async def body(conn: aiosqlite.Connection) -> None:
        for table in TABLES:
            await conn.execute(f"DROP TABLE IF EXISTS {table}")
        await conn.execute("PRAGMA user_version = 0")

    await db.transaction(body)
