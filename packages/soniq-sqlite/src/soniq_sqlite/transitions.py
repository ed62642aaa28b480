"""Multi-statement transitions, each run inside one ``BEGIN IMMEDIATE`` transaction.

These bodies take an open connection and never commit themselves; the caller
(`Database.transaction`) owns BEGIN, COMMIT and ROLLBACK.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime

import aiosqlite

from soniq.backend import DeadLetterReason, Rescue, RescueAction, StaleScan
from soniq_sqlite.codec import job_from_row, now_us, to_us
from soniq_sqlite.connection import run_raw
from soniq_sqlite.dependencies import DEAD_LETTERED, Fallout, fail_dependents
from soniq_sqlite.schema import JOB_COLUMNS

_INSERT_DEAD_LETTER = """
    INSERT INTO soniq_dead_letter_jobs (
        id, job_name, args, queue, attempts, max_attempts, priority, last_error,
        dead_letter_reason, moved_to_dead_letter_at, resurrection_count, last_resurrection_at, version, logs
    ) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, NULL, ?, ?)
    ON CONFLICT (id) DO UPDATE SET
        job_name = excluded.job_name, args = excluded.args, queue = excluded.queue,
        attempts = excluded.attempts, max_attempts = excluded.max_attempts,
        priority = excluded.priority, last_error = excluded.last_error,
        dead_letter_reason = excluded.dead_letter_reason,
        moved_to_dead_letter_at = excluded.moved_to_dead_letter_at, version = excluded.version,
        logs = excluded.logs
"""
_OWNED = "id = ? AND status = 'processing' AND worker_id = ?"
_AS_READ = f"{_OWNED} AND updated_at = ?"


async def move_to_dead_letter(
    conn: aiosqlite.Connection,
    *,
    where: str,
    params: Sequence[object],
    error: str | None,
    reason: str | None,
    attempts: int | None = None,
    keep_attempts: bool = False,
    fallout: Fallout | None = None,
) -> bool:
    """The one move of a `soniq_jobs` row into `soniq_dead_letter_jobs`.

     Deletes the row matching the fence `where` and inserts its dead-letter
     row; `attempts` None counts the run that ends here (stored + 1) unless
     `keep_attempts` (a row that never ran keeps its count), and
     `error` None keeps the stored `last_error`. The row's dependents fail
    . Every statement belongs
     to the caller's transaction, so the move commits whole or not at all.
    """
    rows = list(
        await conn.execute_fetchall(
            "DELETE FROM soniq_jobs WHERE "
            + where
            + " RETURNING id, job_name, args, queue, attempts, max_attempts, priority, last_error, version, logs",
            params,
        )
    )
    if not rows:
        return False
    # The row's logs move with it; its steps, checkpoint and progress stay behind: a replayed job
    # starts afresh (at its version), and its replay copies no logs.
    job_id, job_name, args, queue, stored_attempts, max_attempts, priority, last_error, version, logs = rows[0]
    await conn.execute(
        _INSERT_DEAD_LETTER,
        (
            job_id,
            job_name,
            args,
            queue,
            _attempts_after(int(stored_attempts), attempts, keep_attempts),
            max_attempts,
            priority,
            last_error if error is None else error,
            reason,
            now_us(),
            version,
            logs,
        ),
    )
    failed = [(str(job_id), DEAD_LETTERED)]
    await run_raw(conn, lambda raw: fail_dependents(raw, failed, now_us(), fallout))
    return True


def _attempts_after(stored: int, given: int | None, keep: bool) -> int:
    if given is not None:
        return given
    return stored if keep else stored + 1


async def dead_letter_owned(
    conn: aiosqlite.Connection, *, job_id: str, worker_id: str, error: str, reason: str, fallout: Fallout
) -> bool:
    """Fenced move of a claimed row to the dead-letter table, counting the run."""
    return await move_to_dead_letter(
        conn, where=_OWNED, params=(job_id, worker_id), error=error, reason=reason, fallout=fallout
    )


async def replay(
    conn: aiosqlite.Connection,
    *,
    job_id: str,
    new_job_id: str,
    scheduled_at: datetime,
    queue: str | None = None,
    priority: int | None = None,
    max_attempts: int | None = None,
    attempts: int = 0,
) -> str | None:
    """Insert a fresh queued copy of a dead-letter row (with core's overrides) and count the resurrection."""
    now = now_us()
    rows = list(
        await conn.execute_fetchall(
            "UPDATE soniq_dead_letter_jobs SET resurrection_count = resurrection_count + 1, "
            "last_resurrection_at = ? WHERE id = ? RETURNING job_name, args, queue, max_attempts, priority, version",
            (now, job_id),
        )
    )
    if not rows:
        return None
    job_name, args, dead_queue, dead_max_attempts, dead_priority, version = rows[0]
    await conn.execute(
        "INSERT INTO soniq_jobs (id, job_name, args, status, attempts, max_attempts, queue, priority, "
        "scheduled_at, created_at, updated_at, version) VALUES (?, ?, ?, 'queued', ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            new_job_id,
            job_name,
            args,
            attempts,
            dead_max_attempts if max_attempts is None else max_attempts,
            dead_queue if queue is None else queue,
            dead_priority if priority is None else priority,
            to_us(scheduled_at),
            now,
            now,
            version,
        ),
    )
    return new_job_id


async def expire_unknown(
    conn: aiosqlite.Connection, *, known_names: Sequence[str], cutoff: int, error: str, fallout: Fallout
) -> set[str]:
    """Move old queued rows of names no worker knows to the dead-letter table, attempts as stored.

    Runs inside the caller's ``BEGIN IMMEDIATE``, so no claim can take a row
    between the read and the move.
    """
    # One bound JSON array, however many names there are: this is not the hot path.
    rows = list(
        await conn.execute_fetchall(
            "SELECT id FROM soniq_jobs WHERE status = 'queued' AND created_at < ? "
            "AND job_name NOT IN (SELECT value FROM json_each(?))",
            (cutoff, json.dumps(list(known_names))),
        )
    )
    moved: set[str] = set()
    for row in rows:
        if await move_to_dead_letter(
            conn,
            where="id = ? AND status = 'queued'",
            params=(row[0],),
            error=error,
            reason=DeadLetterReason.UNKNOWN_JOB.value,
            attempts=None,
            keep_attempts=True,
            fallout=fallout,
        ):
            moved.add(str(row[0]))
    return moved


async def find_stale(conn: aiosqlite.Connection, *, heartbeat_timeout: float) -> StaleScan:
    """Mark silent workers `stopped` and read the rows they and missing owners orphaned."""
    cutoff = now_us() - int(heartbeat_timeout * 1_000_000)
    stale = sorted(
        str(row[0])
        for row in await conn.execute_fetchall(
            "UPDATE soniq_workers SET status = 'stopped' "
            "WHERE status IN ('active', 'stopping') AND last_heartbeat < ? RETURNING id",
            (cutoff,),
        )
    )
    marks = ", ".join("?" for _ in stale)
    stale_clause = f"worker_id IN ({marks}) OR " if stale else ""
    # A stale worker's rows whatever their age; a missing or stopped owner's
    # rows once the row itself has been silent for the timeout.
    rows = await conn.execute_fetchall(
        f"SELECT {JOB_COLUMNS} FROM soniq_jobs j "
        f"WHERE status = 'processing' AND ({stale_clause}(updated_at < ? AND NOT EXISTS ("
        "SELECT 1 FROM soniq_workers w WHERE w.id = j.worker_id AND w.status != 'stopped'))) "
        "ORDER BY updated_at, id",
        (*stale, cutoff),
    )
    return StaleScan(stale_workers=tuple(stale), orphaned=tuple(job_from_row(row) for row in rows))


async def apply_rescues(conn: aiosqlite.Connection, rescues: Sequence[Rescue], fallout: Fallout) -> set[str]:
    """Write each of core's rescues while its row is exactly as it was read."""
    written: set[str] = set()
    for rescue in rescues:
        fence = (rescue.job_id, rescue.expected_worker_id, to_us(rescue.expected_updated_at))
        action = RescueAction(rescue.action)
        if action is RescueAction.DEAD_LETTER:
            moved = await move_to_dead_letter(
                conn,
                where=_AS_READ,
                params=fence,
                error=rescue.error,
                reason=rescue.reason,
                attempts=rescue.attempts,
                fallout=fallout,
            )
        else:
            # A release and a requeue write the same field set; core's attempts and error differ.
            now = now_us()
            cursor = await conn.execute(
                "UPDATE soniq_jobs SET status = 'queued', worker_id = NULL, started_at = NULL, "
                "scheduled_at = ?, updated_at = ?, attempts = ?, last_error = COALESCE(?, last_error) "
                f"WHERE {_AS_READ}",
                (now, now, rescue.attempts, rescue.error, *fence),
            )
            moved = cursor.rowcount == 1
        if moved:
            written.add(rescue.job_id)
    return written
