"""Keyed inserts on SQLite: dedup keys, unique windows (`UniqueWindows`) and debounce (`DebouncedJobs`).

Each function takes the sqlite3 connection inside the caller's ``BEGIN IMMEDIATE``
(`Database.transaction_raw`, or `connection.run_raw` from an async transaction body). The
write lock is held from the first statement, and every check is also the write it guards (an
upsert on a primary key or on the partial unique index ``soniq_jobs_dedup``), so producers in
any number of processes racing on one key store one row and all get its id.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from soniq.backend import NewJob
from soniq_sqlite.codec import to_us

UPSERT_KEYED_JOB = (
    "INSERT INTO soniq_jobs (id, job_name, args, status, attempts, max_attempts, queue, priority, "
    "scheduled_at, created_at, updated_at, trace_context, limit_key, version, dedup_key, producer_id) "
    "VALUES (?, ?, ?, 'queued', 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (dedup_key) WHERE status = 'queued' AND dedup_key IS NOT NULL "
    "DO UPDATE SET dedup_key = excluded.dedup_key RETURNING id, scheduled_at"
)
"""A job with a dedup key (or only a producer): a key a queued row already holds turns the
insert into a no-op update that returns that row's id."""

# In a DO UPDATE, a bare column is the holder's value and `excluded.` the new job's. Every SET
# expression reads the holder as it was, so the CASE tests one condition for all four.
_HOLDER_DEBOUNCED = "soniq_jobs.debounce_deadline IS NOT NULL"
UPSERT_DEBOUNCED_JOB = (
    "INSERT INTO soniq_jobs (id, job_name, args, status, attempts, max_attempts, queue, priority, "
    "scheduled_at, created_at, updated_at, trace_context, limit_key, version, dedup_key, producer_id, "
    "debounce_deadline) "
    "VALUES (?, ?, ?, 'queued', 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (dedup_key) WHERE status = 'queued' AND dedup_key IS NOT NULL "
    "DO UPDATE SET dedup_key = excluded.dedup_key, "
    f"args = CASE WHEN {_HOLDER_DEBOUNCED} THEN excluded.args ELSE soniq_jobs.args END, "
    f"scheduled_at = CASE WHEN {_HOLDER_DEBOUNCED} "
    "THEN min(excluded.scheduled_at, soniq_jobs.debounce_deadline) ELSE soniq_jobs.scheduled_at END, "
    f"updated_at = CASE WHEN {_HOLDER_DEBOUNCED} THEN excluded.updated_at ELSE soniq_jobs.updated_at END "
    "RETURNING id, scheduled_at"
)
"""A debounced job: no queued holder, it is inserted with its deadline; a debounced holder takes
its args and moves to ``min(new scheduled_at, holder's deadline)``; any other holder is left as
it is. Either way the holder's id comes back."""

TAKE_WINDOW = (
    "INSERT INTO soniq_unique_windows (key, job_id, expires_at) VALUES (?, ?, ?) "
    "ON CONFLICT (key) DO UPDATE SET "
    "job_id = CASE WHEN expires_at <= ? THEN excluded.job_id ELSE job_id END, "
    "expires_at = CASE WHEN expires_at <= ? THEN excluded.expires_at ELSE expires_at END "
    "RETURNING job_id"
)
"""Take a window key for a job, or find who holds it: a free key, or one whose window ended at or
before the new window's start, is set to the new job; the returned id is the holder either way."""

PRUNE_WINDOWS = """
DELETE FROM soniq_unique_windows WHERE key IN (
    SELECT key FROM soniq_unique_windows INDEXED BY soniq_unique_windows_expires
    WHERE expires_at <= ? ORDER BY expires_at LIMIT ?
)"""
"""The retention prune's share: windows that ended, oldest first, as many as the prune's limit."""


def needs_keyed_insert(job: NewJob) -> bool:
    """Whether `job` needs more than the plain insert (a key, a window, a debounce, a producer)."""
    return (
        job.dedup_key is not None
        or job.producer_id is not None
        or job.unique_window is not None
        or job.debounce_deadline is not None
    )


def insert_one(raw: sqlite3.Connection, row: Sequence[Any], job: NewJob) -> tuple[str, bool]:
    """Store one job (no dependencies) as its key, window or debounce says; the stored id (the
    holder's when the key or window is held) and whether that row is due at the insert time.

    `row` is a `backend._job_rows` tuple: id, job_name, args, max_attempts, queue, priority,
    scheduled_at, created_at, updated_at, trace_context, limit_key, version."""
    created = int(row[7])
    window = job.unique_window
    if window is not None:
        starts_at = to_us(window.starts_at)
        taken = raw.execute(TAKE_WINDOW, (window.key, job.id, to_us(window.expires_at), starts_at, starts_at))
        holder = str(taken.fetchone()[0])
        if holder != job.id:
            return holder, False
    if job.debounce_deadline is not None:
        values = (*row, job.dedup_key, job.producer_id, to_us(job.debounce_deadline))
        stored_id, scheduled_at = raw.execute(UPSERT_DEBOUNCED_JOB, values).fetchone()
    else:
        stored_id, scheduled_at = raw.execute(UPSERT_KEYED_JOB, (*row, job.dedup_key, job.producer_id)).fetchone()
    return str(stored_id), int(scheduled_at) <= created


def insert_keyed(
    raw: sqlite3.Connection, rows: Sequence[Sequence[Any]], jobs: Sequence[NewJob]
) -> tuple[list[str], set[str]]:
    """`insert_one` for each job, in order; the stored ids and the queues given a due row."""
    stored: list[str] = []
    due: set[str] = set()
    for row, job in zip(rows, jobs, strict=True):
        stored_id, is_due = insert_one(raw, row, job)
        stored.append(stored_id)
        if is_due:
            due.add(job.queue)
    return stored, due
