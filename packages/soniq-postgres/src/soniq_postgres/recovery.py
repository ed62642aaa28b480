"""Stale-worker recovery: one sweep, one transaction, one sweeper at a time.

The sweep takes `pg_try_advisory_xact_lock` for its namespace; a second
process that finds it held returns `RecoveryResult(skipped=True)` rather than
queueing behind the first. Rows are locked `FOR UPDATE` before they are
settled, and the predicate is re-checked under the lock, so a row its worker
completes at the same instant is left alone. Everything the sweep writes
(workers marked stopped, rows requeued or dead-lettered) commits together, so
a crash halfway leaves nothing half-settled for the next sweep to miss.
"""

from __future__ import annotations

import asyncpg

from soniq.records import DeadLetterReason, RecoveryResult, StaleJobPolicy
from soniq_postgres.migrations import RECOVERY_LOCK
from soniq_postgres.queries import Queries

_LOST_MESSAGE = "format('worker %s was lost (no heartbeat for %s s) while running this job', worker_id, $2::float8)"


class RecoverySql:
    def __init__(self, q: Queries) -> None:
        self.lock = "SELECT pg_try_advisory_xact_lock($1, hashtext($2))"
        self.stale_workers = f"""
UPDATE {q.workers} SET status = 'stopped'
WHERE status IN ('active', 'stopping') AND last_heartbeat < now() - make_interval(secs => $1::float8)
RETURNING id"""
        # Rows of stale workers, and rows whose worker has no row or has already stopped.
        self.orphans = f"""
SELECT j.id, j.started_at IS NOT NULL AS started, j.attempts, j.max_attempts
FROM {q.jobs} AS j
WHERE j.status = 'processing'
  AND (j.worker_id = ANY($1::text[])
       OR (NOT EXISTS (SELECT 1 FROM {q.workers} AS w WHERE w.id = j.worker_id AND w.status <> 'stopped')
           AND j.updated_at < now() - make_interval(secs => $2::float8)))
ORDER BY j.id
FOR UPDATE OF j"""
        self.nack = f"""
UPDATE {q.jobs} SET status = 'queued', worker_id = NULL, updated_at = now(), scheduled_at = now(),
                    started_at = NULL
WHERE id = ANY($1::text[]) AND status = 'processing'"""
        self.requeue = f"""
UPDATE {q.jobs} SET status = 'queued', attempts = attempts + 1, last_error = {_LOST_MESSAGE},
                    worker_id = NULL, started_at = NULL, scheduled_at = now(), updated_at = now()
WHERE id = ANY($1::text[]) AND status = 'processing'"""
        self.dead_letter = f"""
WITH moved AS (
    DELETE FROM {q.jobs} WHERE id = ANY($1::text[]) AND status = 'processing'
    RETURNING id, job_name, args, queue, attempts, max_attempts, priority, worker_id
)
INSERT INTO {q.dead} (id, job_name, args, queue, attempts, max_attempts, priority,
                      last_error, dead_letter_reason, moved_to_dead_letter_at)
SELECT id, job_name, args, queue, attempts + 1, max_attempts, priority, {_LOST_MESSAGE}, $3, now()
FROM moved
ON CONFLICT (id) DO UPDATE SET
    job_name = EXCLUDED.job_name, args = EXCLUDED.args, queue = EXCLUDED.queue,
    attempts = EXCLUDED.attempts, max_attempts = EXCLUDED.max_attempts,
    priority = EXCLUDED.priority, last_error = EXCLUDED.last_error,
    dead_letter_reason = EXCLUDED.dead_letter_reason,
    moved_to_dead_letter_at = EXCLUDED.moved_to_dead_letter_at
RETURNING id"""


async def recover_stale_workers(
    connection: asyncpg.Connection,
    *,
    queries: Queries,
    sql: RecoverySql,
    heartbeat_timeout: float,
    policy: StaleJobPolicy,
) -> RecoveryResult:
    async with connection.transaction():
        if not await connection.fetchval(sql.lock, RECOVERY_LOCK, queries.schema):
            return RecoveryResult(skipped=True)
        stale = [row["id"] for row in await connection.fetch(sql.stale_workers, heartbeat_timeout)]
        rows = await connection.fetch(sql.orphans, stale, heartbeat_timeout)

        never_started = [row["id"] for row in rows if not row["started"]]
        requeue: list[str] = []
        zombies: list[str] = []
        exhausted: list[str] = []
        for row in rows:
            if not row["started"]:
                continue
            if policy is StaleJobPolicy.DEAD_LETTER:
                zombies.append(row["id"])
            elif row["attempts"] + 1 >= row["max_attempts"]:
                exhausted.append(row["id"])
            else:
                requeue.append(row["id"])

        if never_started:
            await connection.execute(sql.nack, never_started)
        if requeue:
            await connection.execute(sql.requeue, requeue, heartbeat_timeout)
        dead: list[str] = []
        for ids, reason in ((zombies, DeadLetterReason.ZOMBIE), (exhausted, DeadLetterReason.WORKER_LOST)):
            if ids:
                moved = await connection.fetch(sql.dead_letter, ids, heartbeat_timeout, reason.value)
                dead.extend(row["id"] for row in moved)
    return RecoveryResult(
        stale_workers=tuple(stale),
        requeued=tuple(never_started + requeue),
        dead_lettered=tuple(sorted(dead)),
    )
