"""Upgrade a soniq 0.1.0 SQLite file in place, inside `schema_setup`'s ``BEGIN IMMEDIATE``.

0.1.0 used the same table names with other columns (``args_hash``, ``unique_job``, ISO-8601
text timestamps) and no ``user_version``. Its tables are renamed aside (their indexes and
triggers follow them), this release's migrations create ours, every row is copied over,
and the renamed tables are dropped. Any failure rolls the transaction back, and the file
is 0.1.0's again, byte for byte. 0.1.0 kept recurring schedules only on PostgreSQL, so a
SQLite file has none to carry.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import aiosqlite

from soniq.backend import SchemaFamily, unique_key
from soniq.errors import LegacyWorkersActiveError, SchemaStateError
from soniq_sqlite.codec import now_us
from soniq_sqlite.schema import MIGRATIONS, SCHEMA_VERSION

LEGACY_TABLES = ("soniq_jobs", "soniq_dead_letter_jobs", "soniq_workers")
ASIDE_PREFIX = "soniq010_upgrade_"
FRESH_HEARTBEAT_SECONDS = 60.0
"""A 0.1.0 worker that heartbeated this recently (it beats every 5 s) is taken as running."""
TIMESTAMP_FUNCTION = "soniq010_us"
"""The SQL function `upgrade` registers: 0.1.0's ISO-8601 text to our integer microseconds."""


def legacy_timestamp_us(value: object) -> int | None:
    """0.1.0's ISO-8601 timestamp (naive ones are UTC) as microseconds since the epoch."""
    if value is None:
        return None
    moment = datetime.fromisoformat(str(value))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def needs_setup(where: str) -> SchemaStateError:
    return SchemaStateError(
        SchemaFamily.LEGACY_010,
        f"{where} holds a soniq 0.1.0 SQLite database, which this release cannot use as it is; "
        "back the file up, then run `soniq setup` to upgrade it in place (`soniq setup --dry-run` shows the SQL)",
    )


def upgrade_sql(now: int) -> list[str]:
    """Every statement of the upgrade except the unique-key step, in order."""
    us = TIMESTAMP_FUNCTION
    statements = [f"ALTER TABLE {table} RENAME TO {ASIDE_PREFIX}{table}" for table in LEGACY_TABLES]
    statements += [statement for version in range(1, SCHEMA_VERSION + 1) for statement in MIGRATIONS[version]]
    statements.append(
        "INSERT INTO soniq_jobs (id, job_name, args, status, attempts, max_attempts, queue, priority, "
        "scheduled_at, last_error, worker_id, result, created_at, updated_at, started_at, expires_at, "
        "dedup_key, producer_id)\n"
        "SELECT id, job_name, args, status, MAX(COALESCE(attempts, 0), 0), MAX(COALESCE(max_attempts, 1), 1), "
        "COALESCE(queue, 'default'), COALESCE(priority, 100), "
        f"COALESCE({us}(scheduled_at), {us}(created_at), {now}), last_error, worker_id, result, "
        f"COALESCE({us}(created_at), {now}), COALESCE({us}(updated_at), {us}(created_at), {now}), "
        # A row 0.1.0 left 'processing' keeps its owner (a 0.1.0 worker id no live worker
        # has) and its last write time, so stale recovery picks it up.
        f"CASE WHEN status = 'processing' THEN COALESCE({us}(updated_at), {now}) END, {us}(expires_at), "
        # A key is held only while a row is queued (in 0.1.0 and here); other rows drop theirs.
        "CASE WHEN status = 'queued' THEN dedup_key END, producer_id\n"
        f"FROM {ASIDE_PREFIX}soniq_jobs"
    )
    statements.append(
        "INSERT INTO soniq_dead_letter_jobs (id, job_name, args, queue, attempts, max_attempts, priority, "
        "last_error, dead_letter_reason, moved_to_dead_letter_at, resurrection_count, last_resurrection_at)\n"
        "SELECT id, job_name, args, queue, MAX(attempts, 0), MAX(max_attempts, 1), priority, last_error, "
        f"dead_letter_reason, COALESCE({us}(moved_to_dead_letter_at), {now}), COALESCE(resurrection_count, 0), "
        f"{us}(last_resurrection_at)\nFROM {ASIDE_PREFIX}soniq_dead_letter_jobs"
    )
    return statements


UNIQUE_KEYS_NOTE = (
    "-- then, for each queued 0.1.0 row with unique_job = 1 and no dedup_key:\n"
    "-- UPDATE soniq_jobs SET dedup_key = 'unique:<job_name>:<sha256 of its canonical arguments>' WHERE id = <id>"
)
FUNCTION_NOTE = f"-- {TIMESTAMP_FUNCTION}(text): 0.1.0's ISO-8601 time as integer microseconds (UTC), run in Python"


def drop_sql() -> list[str]:
    return [f"DROP TABLE {ASIDE_PREFIX}{table}" for table in LEGACY_TABLES]


async def check_tables(conn: aiosqlite.Connection, where: str) -> None:
    """All of 0.1.0's tables must be there: a file with only some of them is not one to convert."""
    names = {str(row[0]) for row in await conn.execute_fetchall("SELECT name FROM sqlite_master WHERE type = 'table'")}
    missing = [table for table in LEGACY_TABLES if table not in names]
    if missing:
        raise SchemaStateError(
            SchemaFamily.FOREIGN,
            f"{where} has a soniq 0.1.0 soniq_jobs table but not {', '.join(missing)}, so it is only part of a "
            "0.1.0 database; nothing was changed. Restore the file from a backup, or point SONIQ_DATABASE_URL "
            "at another file",
        )


async def plan(conn: aiosqlite.Connection, where: str, *, force: bool) -> tuple[str, ...]:
    """The dry run: the same checks as `upgrade`, and the statements it would run."""
    await check_tables(conn, where)
    await register_functions(conn)
    if not force:
        await check_workers(conn, now_us())
    return (FUNCTION_NOTE, *upgrade_sql(now_us()), UNIQUE_KEYS_NOTE, *drop_sql())


async def check_workers(conn: aiosqlite.Connection, now: int) -> None:
    cutoff = now - int(FRESH_HEARTBEAT_SECONDS * 1_000_000)
    rows = list(
        await conn.execute_fetchall(
            f"SELECT count(*) FROM soniq_workers WHERE COALESCE(status, 'active') <> 'stopped' "
            f"AND {TIMESTAMP_FUNCTION}(last_heartbeat) > ?",
            (cutoff,),
        )
    )
    if rows[0][0]:
        raise LegacyWorkersActiveError(int(rows[0][0]), FRESH_HEARTBEAT_SECONDS)


async def register_functions(conn: aiosqlite.Connection) -> None:
    await conn.create_function(TIMESTAMP_FUNCTION, 1, legacy_timestamp_us, deterministic=True)


async def upgrade(conn: aiosqlite.Connection, where: str, *, force: bool) -> tuple[str, ...]:
    """Run the whole upgrade on `conn`, already inside a write transaction; the statements run."""
    await check_tables(conn, where)
    await register_functions(conn)
    now = now_us()
    if not force:
        await check_workers(conn, now)
    statements = upgrade_sql(now)
    step = ""
    try:
        for step in statements:
            await conn.execute(step)
        step = UNIQUE_KEYS_NOTE
        await carry_unique_keys(conn)
        for step in drop_sql():
            await conn.execute(step)
    except (aiosqlite.Error, ValueError) as exc:
        first_line = step.strip().splitlines()[0] if step.strip() else "?"
        raise SchemaStateError(
            SchemaFamily.LEGACY_010,
            f"upgrading the soniq 0.1.0 SQLite database {where} failed at `{first_line[:100]}` "
            f"({type(exc).__name__}: {exc}); the transaction was rolled back, so the 0.1.0 file and every "
            "row are as they were. Fix the row it names (or report it) and run `soniq setup` again",
        ) from exc
    return (FUNCTION_NOTE, *statements, UNIQUE_KEYS_NOTE, *drop_sql())


async def carry_unique_keys(conn: aiosqlite.Connection) -> int:
    """Give 0.1.0's queued ``unique_job`` rows the key this release's ``unique=True`` derives."""
    rows = await conn.execute_fetchall(
        f"SELECT id, job_name, args FROM {ASIDE_PREFIX}soniq_jobs "
        "WHERE unique_job AND dedup_key IS NULL AND status = 'queued'"
    )
    keyed = [(unique_key(str(row[1]), json.loads(row[2])), str(row[0])) for row in rows]
    if keyed:
        await conn.executemany("UPDATE soniq_jobs SET dedup_key = ? WHERE id = ?", keyed)
    return len(keyed)
