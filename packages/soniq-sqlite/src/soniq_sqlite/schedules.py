"""Schedules, the leader lease and pruning on SQLite.

Every process sharing the file shares this machine's clock, so the lease is
judged by `now_us()`. Firing runs under ``BEGIN IMMEDIATE``: the write lock
is held from the fenced update of the schedule to the job inserts, so two
firers of one due time are serialised and the second finds `next_run` moved.
Pruning deletes a bounded set of rowids picked through the partial index on
`expires_at`, in one short statement.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import aiosqlite

from soniq.backend import (
    AcquireLeaseParams,
    DueSchedulesParams,
    FireScheduleParams,
    LeaseRecord,
    PruneDeadLettersParams,
    PruneJobsParams,
    ScheduleRecord,
    SetSchedulePausedParams,
    UpsertScheduleParams,
    decode_args,
)
from soniq_sqlite import keyed
from soniq_sqlite.codec import dump_json, from_us, from_us_or_none, now_us, to_us
from soniq_sqlite.connection import Database

SCHEDULE_COLUMNS = (
    "name, job_name, queue, priority, max_attempts, args, cron, every_seconds, timezone, catch_up, "
    "catch_up_limit, paused, next_run, last_run, run_count, last_job_id, created_at, updated_at"
)
LEASE_COLUMNS = "name, holder, acquired_at, renewed_at, expires_at"

_UPSERT = f"""
INSERT INTO soniq_schedules (name, job_name, queue, priority, max_attempts, args, cron, every_seconds,
                             timezone, catch_up, catch_up_limit, paused, next_run, run_count,
                             created_at, updated_at)
VALUES (:name, :job_name, :queue, :priority, :max_attempts, :args, :cron, :every_seconds,
        :timezone, :catch_up, :catch_up_limit, COALESCE(:paused, 0), :next_run, 0, :now, :now)
ON CONFLICT (name) DO UPDATE SET
    job_name = excluded.job_name, queue = excluded.queue, priority = excluded.priority,
    max_attempts = excluded.max_attempts, args = excluded.args, cron = excluded.cron,
    every_seconds = excluded.every_seconds, timezone = excluded.timezone, catch_up = excluded.catch_up,
    catch_up_limit = excluded.catch_up_limit, paused = COALESCE(:paused, soniq_schedules.paused),
    next_run = CASE
        WHEN :reset OR soniq_schedules.cron IS NOT excluded.cron
             OR soniq_schedules.every_seconds IS NOT excluded.every_seconds
             OR soniq_schedules.timezone IS NOT excluded.timezone
        THEN excluded.next_run ELSE soniq_schedules.next_run END,
    updated_at = :now
RETURNING {SCHEDULE_COLUMNS}"""

_ADVANCE = """
UPDATE soniq_schedules SET next_run = ?, run_count = run_count + ?,
    last_run = CASE WHEN ? > 0 THEN ? ELSE last_run END,
    last_job_id = COALESCE(?, last_job_id), updated_at = ?
WHERE name = ? AND next_run = ? AND paused = 0"""

# The old holder keeps its acquisition time only while its lease is still running.
_ACQUIRE = f"""
INSERT INTO soniq_leader (name, holder, acquired_at, renewed_at, expires_at)
VALUES (:name, :holder, :now, :now, :expires)
ON CONFLICT (name) DO UPDATE SET
    holder = excluded.holder,
    acquired_at = CASE WHEN soniq_leader.holder = excluded.holder AND soniq_leader.expires_at > :now
                       THEN soniq_leader.acquired_at ELSE :now END,
    renewed_at = :now,
    expires_at = :expires
WHERE soniq_leader.holder = excluded.holder OR soniq_leader.expires_at <= :now
RETURNING {LEASE_COLUMNS}"""

_PRUNE_JOBS = """
DELETE FROM soniq_jobs WHERE rowid IN (
    SELECT rowid FROM soniq_jobs INDEXED BY soniq_jobs_expires
    WHERE expires_at IS NOT NULL AND expires_at <= ? AND status IN ('done', 'cancelled')
    ORDER BY expires_at LIMIT ?
)"""

_PRUNE_DEAD = """
DELETE FROM soniq_dead_letter_jobs WHERE rowid IN (
    SELECT rowid FROM soniq_dead_letter_jobs WHERE moved_to_dead_letter_at < ?
    ORDER BY moved_to_dead_letter_at LIMIT ?
)"""


def schedule_from_row(row: Sequence[Any]) -> ScheduleRecord:
    # The args were JSON-encoded by us; an unreadable value (a hand edit) is shown as empty.
    args, _ = decode_args(row[5])
    return ScheduleRecord(
        name=row[0],
        job_name=row[1],
        queue=row[2],
        priority=row[3],
        max_attempts=row[4],
        args=args,
        cron=row[6],
        every_seconds=row[7],
        timezone=row[8],
        catch_up=row[9],
        catch_up_limit=row[10],
        paused=bool(row[11]),
        next_run=from_us(row[12]),
        last_run=from_us_or_none(row[13]),
        run_count=row[14],
        last_job_id=row[15],
        created_at=from_us(row[16]),
        updated_at=from_us(row[17]),
    )


def lease_from_row(row: Sequence[Any]) -> LeaseRecord:
    return LeaseRecord(
        name=row[0],
        holder=row[1],
        acquired_at=from_us(row[2]),
        renewed_at=from_us(row[3]),
        expires_at=from_us(row[4]),
    )


async def upsert(db: Database, params: UpsertScheduleParams) -> ScheduleRecord:
    values = {
        "name": params.name,
        "job_name": params.job_name,
        "queue": params.queue,
        "priority": params.priority,
        "max_attempts": params.max_attempts,
        "args": dump_json(dict(params.args), what="schedule args"),
        "cron": params.cron,
        "every_seconds": None if params.every_seconds is None else float(params.every_seconds),
        "timezone": params.timezone,
        "catch_up": params.catch_up,
        "catch_up_limit": params.catch_up_limit,
        "paused": None if params.paused is None else int(params.paused),
        "next_run": to_us(params.next_run),
        "reset": int(params.reset_next_run),
        "now": now_us(),
    }
    rows = await db.fetchall(_UPSERT, values)  # type: ignore[arg-type]
    return schedule_from_row(rows[0])


async def select(db: Database, names: list[str] | None) -> list[ScheduleRecord]:
    if names is None:
        rows = await db.fetchall(f"SELECT {SCHEDULE_COLUMNS} FROM soniq_schedules ORDER BY name")
    else:
        rows = await db.fetchall(
            f"SELECT {SCHEDULE_COLUMNS} FROM soniq_schedules WHERE name IN (SELECT value FROM json_each(?)) "
            "ORDER BY name",
            (dump_json(names, what="schedule names"),),
        )
    return [schedule_from_row(row) for row in rows]


async def set_paused(db: Database, params: SetSchedulePausedParams) -> bool:
    next_run = None if params.next_run is None else to_us(params.next_run)
    changed = await db.execute(
        "UPDATE soniq_schedules SET paused = ?, next_run = COALESCE(?, next_run), updated_at = ? WHERE name = ?",
        (int(params.paused), next_run, now_us(), params.name),
    )
    return changed == 1


async def due(db: Database, params: DueSchedulesParams) -> list[ScheduleRecord]:
    now = now_us() if params.now is None else to_us(params.now)
    rows = await db.fetchall(
        f"SELECT {SCHEDULE_COLUMNS} FROM soniq_schedules WHERE paused = 0 AND next_run <= ? "
        "ORDER BY next_run, name LIMIT ?",
        (now, max(params.limit, 0)),
    )
    return [schedule_from_row(row) for row in rows]


async def advance(conn: aiosqlite.Connection, params: FireScheduleParams) -> bool:
    """The fenced half of `fire_schedule`, inside the caller's write transaction."""
    count = len(params.jobs)
    cursor = await conn.execute(
        _ADVANCE,
        (
            to_us(params.new_next_run),
            count,
            count,
            to_us(params.fired_at),
            params.jobs[-1].id if count else None,
            now_us(),
            params.name,
            to_us(params.expected_next_run),
        ),
    )
    return cursor.rowcount == 1


async def acquire(db: Database, params: AcquireLeaseParams) -> LeaseRecord | None:
    # Every worker asks for the lease; a plain read turns away the ones that cannot have it now,
    # so they take no write lock (SQLite has one writer). The fenced write below still decides.
    held = await current_lease(db, params.name)
    if held is not None and held.holder != params.holder:
        return None
    now = now_us()
    values = {
        "name": params.name,
        "holder": params.holder,
        "now": now,
        "expires": now + round(params.ttl * 1_000_000),
    }
    rows = await db.fetchall(_ACQUIRE, values)  # type: ignore[arg-type]
    return lease_from_row(rows[0]) if rows else None


async def current_lease(db: Database, name: str) -> LeaseRecord | None:
    rows = await db.fetchall(
        f"SELECT {LEASE_COLUMNS} FROM soniq_leader WHERE name = ? AND expires_at > ?", (name, now_us())
    )
    return lease_from_row(rows[0]) if rows else None


async def prune_jobs(db: Database, params: PruneJobsParams) -> int:
    clock = now_us()
    now = clock if params.now is None else to_us(params.now)
    pruned = await db.execute(_PRUNE_JOBS, (now, max(params.limit, 0)))
    # Ended unique windows go in the same sweep, bounded alike and not counted as jobs. Never
    # past the store's clock: a `now` given for the rows must not end a window that still holds.
    await db.execute(keyed.PRUNE_WINDOWS, (min(now, clock), max(params.limit, 0)))
    return pruned


async def prune_dead_letters(db: Database, params: PruneDeadLettersParams) -> int:
    return await db.execute(_PRUNE_DEAD, (to_us(params.before), max(params.limit, 0)))
