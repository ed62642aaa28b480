"""Detect the schema family in a namespace, and upgrade a soniq 0.1.0 schema in place.

0.1.0 used the same table names with other columns (UUID ids, jsonb, ``unique_job``,
its own ``soniq_migrations`` with text versions '0001'...). The upgrade runs inside
`migrations.migrate`'s transaction and advisory lock: 0.1.0's tables are moved into a
scratch schema, this release's migrations create ours, every row is copied over, and the
scratch schema is dropped. Any failure rolls the whole thing back, leaving 0.1.0's
schema as it was. 0.1.0's webhook, log and task-registry tables are not ours and are
left in place untouched.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

import asyncpg

from soniq.backend import SchemaFamily, unique_key
from soniq.errors import LegacyWorkersActiveError, SchemaStateError
from soniq_postgres.options import quote_ident

LEGACY_VERSIONS = frozenset({"0001", "0002", "0003", "0004", "0005"})
"""The migration versions soniq 0.1.0 records."""
MOVED_TABLES = ("soniq_jobs", "soniq_dead_letter_jobs", "soniq_workers", "soniq_recurring_jobs", "soniq_migrations")
OUR_TABLES = ("soniq_jobs", "soniq_dead_letter_jobs", "soniq_workers", "soniq_migrations")
FRESH_HEARTBEAT_SECONDS = 60.0
"""A 0.1.0 worker that heartbeated this recently (it beats every 5 s) is taken as running."""


def aside_schema(schema: str) -> str:
    return f"{schema}_soniq010_upgrade"[:63]


async def _columns(connection: asyncpg.Connection, schema: str, table: str) -> dict[str, str]:
    rows = await connection.fetch(
        "SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2",
        schema,
        table,
    )
    return {row["column_name"]: row["data_type"] for row in rows}


async def detect(connection: asyncpg.Connection, schema: str, latest: int) -> tuple[SchemaFamily, tuple[int, ...]]:
    """The family of `schema`'s Soniq tables, and our recorded versions (empty unless CURRENT)."""
    present = {
        row["table_name"]
        for row in await connection.fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = $1 AND table_name = ANY($2::text[])",
            schema,
            list(OUR_TABLES),
        )
    }
    if not present:
        return SchemaFamily.EMPTY, ()
    quoted = quote_ident(schema)
    if "soniq_migrations" not in present:
        return SchemaFamily.FOREIGN, ()
    tracking = await _columns(connection, schema, "soniq_migrations")
    if tracking.get("version") != "integer":
        versions = {str(v) for v in await _fetch_versions(connection, quoted)}
        jobs = await _columns(connection, schema, "soniq_jobs")
        if versions <= LEGACY_VERSIONS and "0001" in versions and jobs.get("id") == "uuid":
            return SchemaFamily.LEGACY_010, ()
        return SchemaFamily.FOREIGN, ()
    applied = tuple(sorted(int(v) for v in await _fetch_versions(connection, quoted)))
    if applied and max(applied) > latest:
        return SchemaFamily.NEWER, applied
    if applied:
        jobs = await _columns(connection, schema, "soniq_jobs")
        if any(table not in present for table in OUR_TABLES) or jobs.get("id") != "text":
            return SchemaFamily.FOREIGN, applied
    return SchemaFamily.CURRENT, applied


async def _fetch_versions(connection: asyncpg.Connection, quoted: str) -> list[Any]:
    return [row["version"] for row in await connection.fetch(f"SELECT version FROM {quoted}.soniq_migrations")]


def refusal(family: SchemaFamily, schema: str, applied: Iterable[int], latest: int) -> SchemaStateError:
    """The error for a family `setup` does not migrate."""
    if family is SchemaFamily.NEWER:
        return SchemaStateError(
            family,
            f"schema {schema!r} records migrations {sorted(applied)}, newer than this release knows "
            f"(up to {latest}); upgrade soniq (downgrades are not supported), nothing was changed",
        )
    return SchemaStateError(
        family,
        f"schema {schema!r} holds soniq tables this release does not recognise (neither its own "
        "schema nor soniq 0.1.0's, or only part of either); nothing was changed. Restore it from a "
        "backup, or point Soniq at another schema (?schema=NAME in the database URL)",
    )


def needs_setup(schema: str) -> SchemaStateError:
    return SchemaStateError(
        SchemaFamily.LEGACY_010,
        f"schema {schema!r} holds a soniq 0.1.0 database, which this release cannot use as it is; "
        "back it up, then run `soniq setup` to upgrade it in place (`soniq setup --dry-run` shows the SQL)",
    )


async def check_workers(connection: asyncpg.Connection, schema: str) -> None:
    count = await connection.fetchval(
        f"SELECT count(*) FROM {quote_ident(schema)}.soniq_workers "
        "WHERE status <> 'stopped' AND last_heartbeat > now() - make_interval(secs => $1::float8)",
        FRESH_HEARTBEAT_SECONDS,
    )
    if count:
        raise LegacyWorkersActiveError(int(count), FRESH_HEARTBEAT_SECONDS)


def move_aside_sql(schema: str) -> list[str]:
    """Statements that park 0.1.0's tables (with their indexes) outside the namespace."""
    quoted, aside = quote_ident(schema), quote_ident(aside_schema(schema))
    statements = [f"CREATE SCHEMA {aside}"]
    statements += [f"ALTER TABLE IF EXISTS {quoted}.{table} SET SCHEMA {aside}" for table in MOVED_TABLES]
    return statements


def copy_sql(schema: str, target_sql: str) -> list[str]:
    """Statements that copy 0.1.0's rows into the tables `target_sql` (our migrations) creates.

    Optional columns (`expires_at`, `dedup_key`, `producer_id`, schedules) are copied when
    this release's migrations create them.
    """
    quoted, aside = quote_ident(schema), quote_ident(aside_schema(schema))

    def has(name: str) -> bool:
        return re.search(rf"\b{name}\b", target_sql) is not None

    targets = [
        "id", "job_name", "args", "status", "attempts", "max_attempts", "queue", "priority",
        "scheduled_at", "last_error", "worker_id", "result", "started_at", "created_at", "updated_at",
    ]  # fmt: skip
    sources = [
        "id::text", "job_name", "args::text::json", "status", "GREATEST(COALESCE(attempts, 0), 0)",
        "GREATEST(COALESCE(max_attempts, 1), 1)", "COALESCE(queue, 'default')", "COALESCE(priority, 100)",
        "COALESCE(scheduled_at, created_at, now())", "last_error", "worker_id::text", "result::text::json",
        # 0.1.0 rows left 'processing' keep their owner (a 0.1.0 worker id no live worker
        # has) and their last write time, so stale recovery picks them up.
        "CASE WHEN status = 'processing' THEN COALESCE(updated_at, now()) END",
        "COALESCE(created_at, now())", "COALESCE(updated_at, created_at, now())",
    ]  # fmt: skip
    if has("expires_at"):
        targets.append("expires_at")
        sources.append("expires_at")
    if has("dedup_key"):
        # A key is held only while a row is queued (in 0.1.0 and here); other rows drop theirs.
        targets.append("dedup_key")
        sources.append("CASE WHEN status = 'queued' THEN dedup_key END")
    if has("producer_id"):
        targets.append("producer_id")
        sources.append("producer_id")
    statements = [
        f"INSERT INTO {quoted}.soniq_jobs ({', '.join(targets)})\nSELECT {', '.join(sources)}\nFROM {aside}.soniq_jobs",
        f"INSERT INTO {quoted}.soniq_dead_letter_jobs (id, job_name, args, queue, attempts, max_attempts, "
        "priority, last_error, dead_letter_reason, moved_to_dead_letter_at, resurrection_count, "
        "last_resurrection_at)\n"
        "SELECT id::text, job_name, args::text::json, queue, GREATEST(attempts, 0), GREATEST(max_attempts, 1), "
        "priority, last_error, dead_letter_reason, moved_to_dead_letter_at, COALESCE(resurrection_count, 0), "
        f"last_resurrection_at\nFROM {aside}.soniq_dead_letter_jobs",
    ]
    if has("soniq_schedules"):
        # 0.1.0 keyed a schedule by its job name and had already computed next_run.
        statements.append(
            f"INSERT INTO {quoted}.soniq_schedules (name, job_name, queue, priority, max_attempts, args, cron, "
            "every_seconds, paused, next_run, last_run, run_count, last_job_id, created_at, updated_at)\n"
            "SELECT DISTINCT ON (job_name) job_name, job_name, queue, priority, GREATEST(max_attempts, 1), "
            "job_kwargs::text::json, CASE WHEN schedule_type = 'cron' THEN schedule_value END, "
            "CASE WHEN schedule_type = 'interval' THEN schedule_value::float8 END, status = 'paused', "
            "COALESCE(next_run, now()), last_run, run_count, last_job_id::text, COALESCE(created_at, now()), "
            f"COALESCE(updated_at, now())\nFROM {aside}.soniq_recurring_jobs "
            "ORDER BY job_name, updated_at DESC NULLS LAST"
        )
    return statements


def unique_keys_note(schema: str) -> str:
    return (
        f"-- then, for each queued 0.1.0 row with unique_job = true and no dedup_key:\n"
        f"-- UPDATE {quote_ident(schema)}.soniq_jobs SET dedup_key = 'unique:<job_name>:<sha256 of its "
        "canonical arguments>' WHERE id = <id>"
    )


def drop_aside_sql(schema: str) -> str:
    return f"DROP SCHEMA {quote_ident(aside_schema(schema))} CASCADE"


async def carry_unique_keys(connection: asyncpg.Connection, schema: str) -> int:
    """Give 0.1.0's queued ``unique_job`` rows the key this release's ``unique=True`` derives."""
    if "dedup_key" not in await _columns(connection, schema, "soniq_jobs"):
        return 0
    aside = quote_ident(aside_schema(schema))
    rows = await connection.fetch(
        f"SELECT id::text AS id, job_name, args::text AS args FROM {aside}.soniq_jobs "
        "WHERE unique_job AND dedup_key IS NULL AND status = 'queued'"
    )
    keyed = [(row["id"], unique_key(row["job_name"], json.loads(row["args"]))) for row in rows]
    if keyed:
        await connection.executemany(f"UPDATE {quote_ident(schema)}.soniq_jobs SET dedup_key = $2 WHERE id = $1", keyed)
    return len(keyed)
