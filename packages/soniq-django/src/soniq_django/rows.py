"""The one place soniq-django writes SQL: inserting a job on Django's own connection.

Core's ``app.enqueue`` opens its own connection, which cannot see (or roll
back with) the caller's ``transaction.atomic()`` block. So the insert runs on
``connections[alias]`` instead and writes exactly the columns core's enqueue
writes through soniq-postgres and soniq-sqlite (SPEC section 6): a queued row
with no attempts, no error, no worker and no result. On PostgreSQL the same
statement sends the ``NOTIFY`` soniq-postgres sends, which PostgreSQL delivers
only when the transaction commits, so a rolled-back job wakes no worker.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connections

# soniq-postgres' wake-up channel for its default (public) schema.
NOTIFY_CHANNEL = "soniq_new_job"

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)

_POSTGRES_INSERT = """
WITH inserted AS (
    INSERT INTO soniq_jobs (id, job_name, args, queue, priority, scheduled_at, max_attempts,
                            status, attempts, created_at, updated_at)
    VALUES (%s, %s, %s::json, %s, %s, %s, %s, 'queued', 0, clock_timestamp(), clock_timestamp())
    RETURNING 1
)
SELECT (SELECT count(*) FROM inserted), pg_notify(%s, %s)"""

# soniq-sqlite stores timestamps as integer microseconds since the epoch (UTC).
_SQLITE_INSERT = (
    "INSERT INTO soniq_jobs (id, job_name, args, status, attempts, max_attempts, queue, priority, "
    "scheduled_at, created_at, updated_at) VALUES (%s, %s, %s, 'queued', 0, %s, %s, %s, %s, %s, %s)"
)


@dataclass(frozen=True, slots=True)
class JobRow:
    id: str
    job_name: str
    args: dict[str, Any]
    queue: str
    priority: int
    scheduled_at: datetime
    max_attempts: int


def to_microseconds(moment: datetime) -> int:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // _MICROSECOND


def from_microseconds(value: int) -> datetime:
    return _EPOCH + value * _MICROSECOND


_last_created = 0


def _next_created_at() -> int:
    # Claim order falls back to created_at: keep it strictly rising within this process, as soniq-sqlite does.
    global _last_created
    _last_created = max(time.time_ns() // 1000, _last_created + 1)
    return _last_created


def insert_job(database: str, row: JobRow) -> None:
    """Insert one queued job on Django's connection `database`, inside its current transaction if any."""
    connection = connections[database]
    args = json.dumps(row.args, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                _POSTGRES_INSERT,
                [
                    row.id,
                    row.job_name,
                    args,
                    row.queue,
                    row.priority,
                    row.scheduled_at,
                    row.max_attempts,
                    NOTIFY_CHANNEL,
                    row.queue,
                ],
            )
        else:
            now = _next_created_at()
            cursor.execute(
                _SQLITE_INSERT,
                [
                    row.id,
                    row.job_name,
                    args,
                    row.max_attempts,
                    row.queue,
                    row.priority,
                    to_microseconds(row.scheduled_at),
                    now,
                    now,
                ],
            )
