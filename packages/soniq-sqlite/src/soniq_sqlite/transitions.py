"""Multi-statement transitions, each run inside one ``BEGIN IMMEDIATE`` transaction.

These bodies take an open connection and never commit themselves; the caller
(`Database.transaction`) owns BEGIN, COMMIT and ROLLBACK.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import aiosqlite

from soniq.records import DeadLetterReason, RecoveryResult, StaleJobPolicy
from soniq_sqlite.codec import now_us, to_us

_INSERT_DEAD_LETTER = """
    INSERT INTO soniq_dead_letter_jobs (
        id, job_name, args, queue, attempts, max_attempts, priority, last_error,
        dead_letter_reason, moved_to_dead_letter_at, resurrection_count, last_resurrection_at
    ) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, NULL)
    ON CONFLICT (id) DO UPDATE SET
        job_name = excluded.job_name, args = excluded.args, queue = excluded.queue,
        attempts = excluded.attempts, max_attempts = excluded.max_attempts,
        priority = excluded.priority, last_error = excluded.last_error,
        dead_letter_reason = excluded.dead_letter_reason,
        moved_to_dead_letter_at = excluded.moved_to_dead_letter_at
"""
# What the dead-letter row needs from the job row, in `_dead_letter_params` order.
_MOVED_COLUMNS = "id, job_name, args, queue, attempts, max_attempts, priority"


def _dead_letter_params(
    moved: Sequence[object], *, attempts: int, error: str, reason: str, now: int
) -> tuple[object, ...]:
    job_id, job_name, args, queue, _old_attempts, max_attempts, priority = moved
    return (job_id, job_name, args, queue, attempts, max_attempts, priority, error, reason, now)


async def dead_letter_owned(
    conn: aiosqlite.Connection, *, job_id: str, worker_id: str, error: str, reason: str
) -> bool:
    """Fenced move of a claimed row to the dead-letter table, counting the run."""
    now = now_us()
    rows = list(
        await conn.execute_fetchall(
            f"DELETE FROM soniq_jobs WHERE id = ? AND status = 'processing' AND worker_id = ? "
            f"RETURNING {_MOVED_COLUMNS}",
            (job_id, worker_id),
        )
    )
    if not rows:
        return False
    moved = rows[0]
    params = _dead_letter_params(moved, attempts=int(moved[4]) + 1, error=error, reason=reason, now=now)
    await conn.execute(_INSERT_DEAD_LETTER, params)
    return True


async def replay(conn: aiosqlite.Connection, *, job_id: str, new_job_id: str, scheduled_at: datetime) -> str | None:
    """Insert a fresh queued copy of a dead-letter row and count the resurrection."""
    now = now_us()
    rows = list(
        await conn.execute_fetchall(
            "UPDATE soniq_dead_letter_jobs SET resurrection_count = resurrection_count + 1, "
            "last_resurrection_at = ? WHERE id = ? RETURNING job_name, args, queue, max_attempts, priority",
            (now, job_id),
        )
    )
    if not rows:
        return None
    job_name, args, queue, max_attempts, priority = rows[0]
    await conn.execute(
        "INSERT INTO soniq_jobs (id, job_name, args, status, attempts, max_attempts, queue, priority, "
        "scheduled_at, created_at, updated_at) VALUES (?, ?, ?, 'queued', 0, ?, ?, ?, ?, ?, ?)",
        (new_job_id, job_name, args, max_attempts, queue, priority, to_us(scheduled_at), now, now),
    )
    return new_job_id


async def recover_stale(
    conn: aiosqlite.Connection, *, heartbeat_timeout: float, policy: StaleJobPolicy
) -> RecoveryResult:
    """One stale-worker sweep (see `Backend.recover_stale_workers`)."""
    now = now_us()
    cutoff = now - int(heartbeat_timeout * 1_000_000)
    stale = [
        str(row[0])
        for row in await conn.execute_fetchall(
            "UPDATE soniq_workers SET status = 'stopped' "
            "WHERE status IN ('active', 'stopping') AND last_heartbeat < ? RETURNING id",
            (cutoff,),
        )
    ]
    stale.sort()
    marks = ", ".join("?" for _ in stale)
    stale_clause = f"worker_id IN ({marks}) OR " if stale else ""
    # Rows of stale workers, plus rows whose owner has no live row at all (never
    # registered, deleted, or stopped earlier) once they too are older than the timeout.
    candidates = list(
        await conn.execute_fetchall(
            f"SELECT {_MOVED_COLUMNS}, worker_id, started_at FROM soniq_jobs j "
            f"WHERE status = 'processing' AND ({stale_clause}(updated_at < ? AND NOT EXISTS ("
            "SELECT 1 FROM soniq_workers w WHERE w.id = j.worker_id AND w.status != 'stopped'))) "
            "ORDER BY id",
            (*stale, cutoff),
        )
    )
    stale_set = set(stale)
    requeued: list[str] = []
    dead_lettered: list[str] = []
    for row in candidates:
        job_id, attempts, max_attempts = str(row[0]), int(row[4]), int(row[5])
        owner, started_at = row[7], row[8]
        if started_at is None:
            # Never ran user code: the nack field set, the budget untouched.
            await conn.execute(
                "UPDATE soniq_jobs SET status = 'queued', worker_id = NULL, updated_at = ?, "
                "scheduled_at = ?, started_at = NULL WHERE id = ?",
                (now, now, job_id),
            )
            requeued.append(job_id)
            continue
        if owner in stale_set:
            error = f"worker {owner} was lost: no heartbeat for more than {heartbeat_timeout:g}s"
        else:
            error = (
                f"worker {owner} was lost: it has no live worker row and the job was silent for {heartbeat_timeout:g}s"
            )
        attempts += 1
        if policy is StaleJobPolicy.DEAD_LETTER or attempts >= max_attempts:
            reason = DeadLetterReason.ZOMBIE if policy is StaleJobPolicy.DEAD_LETTER else DeadLetterReason.WORKER_LOST
            await conn.execute("DELETE FROM soniq_jobs WHERE id = ?", (job_id,))
            params = _dead_letter_params(row[:7], attempts=attempts, error=error, reason=reason.value, now=now)
            await conn.execute(_INSERT_DEAD_LETTER, params)
            dead_lettered.append(job_id)
        else:
            await conn.execute(
                "UPDATE soniq_jobs SET status = 'queued', worker_id = NULL, attempts = ?, last_error = ?, "
                "updated_at = ?, scheduled_at = ?, started_at = NULL WHERE id = ?",
                (attempts, error, now, now, job_id),
            )
            requeued.append(job_id)
    return RecoveryResult(
        stale_workers=tuple(stale),
        requeued=tuple(requeued),
        dead_lettered=tuple(dead_lettered),
    )
