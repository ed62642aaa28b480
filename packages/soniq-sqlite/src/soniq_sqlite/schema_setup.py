"""Creating, upgrading and dropping the schema, safely from several processes at once."""

from __future__ import annotations

import aiosqlite

from soniq.backend import SchemaFamily, SchemaReport
from soniq.errors import SchemaStateError
from soniq_sqlite import legacy_010
from soniq_sqlite.connection import Database
from soniq_sqlite.schema import MIGRATIONS, SCHEMA_VERSION, TABLES


async def _user_version(conn: aiosqlite.Connection) -> int:
    rows = list(await conn.execute_fetchall("PRAGMA user_version"))
    return int(rows[0][0])


async def ensure_schema(db: Database) -> None:
    """First use: a cheap version read, and the full upgrade only when it is behind."""
    rows = await db.fetchall("PRAGMA user_version")
    if int(rows[0][0]) != SCHEMA_VERSION:
        await upgrade_schema(db, explicit=False)


async def _foreign_family(conn: aiosqlite.Connection) -> SchemaFamily | None:
    """At version 0, Soniq's table names mean someone else's schema (0.1.0's or unknown)."""
    rows = list(
        await conn.execute_fetchall("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'soniq_%'")
    )
    if not rows:
        return None
    columns = {row[1] for row in await conn.execute_fetchall("PRAGMA table_info(soniq_jobs)")}
    return SchemaFamily.LEGACY_010 if "unique_job" in columns and "args_hash" in columns else SchemaFamily.FOREIGN


async def upgrade_schema(
    db: Database, *, dry_run: bool = False, force: bool = False, explicit: bool = True
) -> SchemaReport:
    """Run every migration above the file's version in one ``BEGIN IMMEDIATE``.

    A second process doing the same waits on the write lock, then reads the
    new version and has nothing left to do. `explicit` is False for first use by
    a worker or producer, which never upgrades a soniq 0.1.0 file.
    """

    reports: list[SchemaReport] = []

    async def body(conn: aiosqlite.Connection) -> None:
        current = await _user_version(conn)
        if current > SCHEMA_VERSION:
            raise SchemaStateError(
                SchemaFamily.NEWER,
                f"{db.location.describe()} has Soniq schema version {current}, newer than the "
                f"{SCHEMA_VERSION} this soniq-sqlite knows; upgrade soniq-sqlite (downgrades are not supported)",
            )
        foreign = await _foreign_family(conn) if current == 0 else None
        if foreign is SchemaFamily.LEGACY_010:
            where = db.location.describe()
            if not explicit:
                raise legacy_010.needs_setup(where)
            pending = tuple(range(1, SCHEMA_VERSION + 1))
            if dry_run:
                statements = await legacy_010.plan(conn, where, force=force)
            else:
                statements = await legacy_010.upgrade(conn, where, force=force)
                await conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            reports.append(
                SchemaReport(foreign.value, (), pending, statements, upgraded_from=foreign.value, dry_run=dry_run)
            )
            return
        if foreign is not None:
            raise SchemaStateError(
                foreign,
                f"{db.location.describe()} has soniq_* tables but no Soniq schema version; it is not a "
                "schema this release knows. Nothing was changed: point SONIQ_DATABASE_URL at another file",
            )
        pending = tuple(range(current + 1, SCHEMA_VERSION + 1))
        statements = tuple(statement for version in pending for statement in MIGRATIONS[version])
        family = SchemaFamily.EMPTY if current == 0 else SchemaFamily.CURRENT
        applied = tuple(range(1, current + 1))
        reports.append(SchemaReport(family.value, applied, pending, statements, dry_run=dry_run))
        if dry_run:
            return
        for version in range(current + 1, SCHEMA_VERSION + 1):
            for statement in MIGRATIONS[version]:
                await conn.execute(statement)
        if current != SCHEMA_VERSION:
            # user_version lives in the file header and is written by this transaction.
            await conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    await db.transaction(body)
    return reports[0]


async def drop_schema(db: Database) -> None:
    async def body(conn: aiosqlite.Connection) -> None:
        for table in TABLES:
            await conn.execute(f"DROP TABLE IF EXISTS {table}")
        await conn.execute("PRAGMA user_version = 0")

    await db.transaction(body)
