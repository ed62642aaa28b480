"""The store's half of stale-worker recovery: find the orphans, write core's rescues.

`find_stale_jobs` runs in one transaction under `pg_try_advisory_xact_lock`
for the namespace, so sweepers take turns; one that finds the lock held
returns ``StaleScan(skipped=True)`` instead of queueing behind the other.
It writes worker rows only. `rescue_jobs` is one statement for every rescue:
each row is written only while it is exactly as `find_stale_jobs` read it
(owner and `updated_at`), which PostgreSQL re-checks on the locked row, so a
row its worker finished in the meantime, or that another sweeper already
rescued, is left alone. What each row becomes is decided by core
(`soniq.rescue`); nothing here chooses an action or words an error.
"""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from soniq.backend import Rescue, RescueAction, StaleScan
from soniq_postgres.migrations import RECOVERY_LOCK
from soniq_postgres.queries import JOB_COLUMNS, Queries, finished
from soniq_postgres.rows import job_record, utc

_FENCE = "j.id = r.id AND j.status = 'processing' AND j.worker_id = r.worker_id AND j.updated_at = r.updated_at"


class StaleSql:
    def __init__(self, q: Queries) -> None:
        self.lock = "SELECT pg_try_advisory_xact_lock($1, hashtext($2))"
        self.stale_workers = f"""
UPDATE {q.workers} SET status = 'stopped'
WHERE status IN ('active', 'stopping') AND last_heartbeat < now() - make_interval(secs => $1::float8)
RETURNING id"""
        # A stale worker's rows whatever their age; a missing or stopped owner's
        # rows once the row itself has been silent for the timeout.
        self.orphans = f"""
SELECT {JOB_COLUMNS}
FROM {q.jobs} AS j
WHERE j.status = 'processing'
  AND (j.worker_id = ANY($1::text[])
       OR (NOT EXISTS (SELECT 1 FROM {q.workers} AS w WHERE w.id = j.worker_id AND w.status <> 'stopped')
           AND j.updated_at < now() - make_interval(secs => $2::float8)))
ORDER BY j.updated_at, j.id"""
        # $1 ids, $2 expected owners, $3 expected updated_at, $4 actions, $5 attempts,
        # $6 errors (NULL keeps the stored one), $7 dead-letter reasons, $8 the changes channel.
        # A release and a requeue write the same field set; they differ only in
        # the attempts and error core hands over.
        self.rescue = f"""
WITH r AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::text[], $5::int[],
                         $6::text[], $7::text[]) AS r(id, worker_id, updated_at, action, attempts, error, reason)
), requeued AS (
    UPDATE {q.jobs} AS j
    SET status = 'queued', worker_id = NULL, started_at = NULL, scheduled_at = now(), updated_at = now(),
        attempts = r.attempts, last_error = COALESCE(r.error, j.last_error)
    FROM r
    WHERE r.action IN ('{RescueAction.RELEASE.value}', '{RescueAction.REQUEUE.value}') AND {_FENCE}
    RETURNING j.id
), moved AS (
    DELETE FROM {q.jobs} AS j USING r
    WHERE r.action = '{RescueAction.DEAD_LETTER.value}' AND {_FENCE}
    RETURNING j.id, j.job_name, j.args, j.queue, r.attempts AS attempts, j.max_attempts, j.priority,
              COALESCE(r.error, j.last_error) AS last_error, r.reason AS reason, j.has_dependents, j.watched, j.version,
              j.logs
), dead AS (
{q.dead_letter_insert("moved")}
), written AS (
    SELECT id, false AS has_dependents, false AS watched FROM requeued
    UNION ALL SELECT id, has_dependents, watched FROM moved
)
{finished("written", "$8")}"""


async def find_stale_jobs(
    connection: asyncpg.Connection, *, schema: str, sql: StaleSql, heartbeat_timeout: float
) -> StaleScan:
    async with connection.transaction():
        if not await connection.fetchval(sql.lock, RECOVERY_LOCK, schema):
            return StaleScan(skipped=True)
        stale = [row["id"] for row in await connection.fetch(sql.stale_workers, heartbeat_timeout)]
        rows = await connection.fetch(sql.orphans, stale, heartbeat_timeout)
    return StaleScan(stale_workers=tuple(sorted(stale)), orphaned=tuple(job_record(row) for row in rows))


async def rescue_jobs(
    connection: asyncpg.Connection, *, sql: StaleSql, rescues: Sequence[Rescue], changes_channel: str
) -> list[asyncpg.Record]:
    """Write core's rescues; each written row's id and `has_dependents` (set only for a dead-lettered
    row with dependents, which the caller resolves in the same transaction)."""
    if not rescues:
        return []
    rows: list[asyncpg.Record] = await connection.fetch(
        sql.rescue,
        [rescue.job_id for rescue in rescues],
        [rescue.expected_worker_id for rescue in rescues],
        # The value `find_stale_jobs` returned, so the comparison is exact to the microsecond.
        [utc(rescue.expected_updated_at) for rescue in rescues],
        [RescueAction(rescue.action).value for rescue in rescues],
        [rescue.attempts for rescue in rescues],
        [rescue.error for rescue in rescues],
        [rescue.reason for rescue in rescues],
        changes_channel,
    )
    return rows
