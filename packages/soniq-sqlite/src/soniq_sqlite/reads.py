"""The dashboard reads on SQLite: each one statement, so each reads one snapshot.

Schema version 2 adds the indexes they lean on (see `soniq_sqlite.schema`):
counts come from one covering scan of ``(queue, status, scheduled_at,
created_at)``, pages walk ``(created_at, id)`` backwards from the cursor, and
queue names hop from one distinct value to the next in the index.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from soniq.backend import (
    ActivityBucket,
    DeadLetterFilter,
    DeadLetterPage,
    DeadLetterPageParams,
    JobActivityParams,
    JobCountsParams,
    JobPage,
    JobPageParams,
    JobStatus,
    QueueCounts,
    activity_buckets,
    cut,
    dead_letter_cursor,
    job_cursor,
)
from soniq_sqlite.codec import dead_letter_from_row, from_us, from_us_or_none, job_from_row, now_us, to_us
from soniq_sqlite.connection import Database
from soniq_sqlite.schema import DEAD_LETTER_COLUMNS, JOB_COLUMNS, JOB_COLUMNS_NO_RESULT

_FIVE = ("queued", "processing", "done", "dead_letter", "cancelled")


def _in(column: str, values: Sequence[str], where: list[str], args: list[Any]) -> None:
    where.append(f"{column} IN ({', '.join('?' for _ in values)})" if values else "0")
    args.extend(values)


def _names(
    where: list[str],
    args: list[Any],
    *,
    exact: str | None,
    prefix: str | None,
    search: str | None,
) -> None:
    if exact is not None:
        where.append("job_name = ?")
        args.append(exact)
    if prefix is not None:
        where.append("substr(job_name, 1, length(?)) = ?")
        args.extend((prefix, prefix))
    if search:
        where.append("(id = ? OR substr(job_name, 1, length(?)) = ?)")
        args.extend((search, search, search))


def _clause(where: list[str]) -> str:
    return f" WHERE {' AND '.join(where)}" if where else ""


def dead_letter_filter(wanted: DeadLetterFilter) -> tuple[str, tuple[Any, ...]]:
    """The filter as one SQL condition over `soniq_dead_letter_jobs` ("" when it has no field)."""
    clauses: list[str] = []
    values: list[Any] = []
    for column, given in (
        ("job_name", wanted.job_names),
        ("queue", wanted.queues),
        ("dead_letter_reason", wanted.reasons),
    ):
        if given is not None:
            clauses.append(f"{column} IN (SELECT value FROM json_each(?))")
            values.append(json.dumps(list(given)))
    if wanted.moved_from is not None:
        clauses.append("moved_to_dead_letter_at >= ?")
        values.append(to_us(wanted.moved_from))
    if wanted.moved_to is not None:
        clauses.append("moved_to_dead_letter_at <= ?")
        values.append(to_us(wanted.moved_to))
    if wanted.resurrected is not None:
        clauses.append("resurrection_count > 0" if wanted.resurrected else "resurrection_count = 0")
    return " AND ".join(clauses), tuple(values)


async def job_counts(db: Database, params: JobCountsParams) -> list[QueueCounts]:
    now = now_us()
    where: list[str] = []
    args: list[Any] = []
    if params.queues is not None:
        _in("queue", list(params.queues), where, args)
    clause = _clause(where)
    rows = await db.fetchall(
        "SELECT queue, status, COUNT(*), "
        "SUM(CASE WHEN status = 'queued' AND scheduled_at > ? THEN 1 ELSE 0 END), "
        "MIN(CASE WHEN status = 'queued' THEN created_at END), "
        "MIN(CASE WHEN status = 'queued' AND scheduled_at <= ? THEN created_at END) "
        f"FROM soniq_jobs{clause} GROUP BY queue, status "
        "UNION ALL SELECT queue, 'dead_letter', COUNT(*), 0, NULL, NULL "
        f"FROM soniq_dead_letter_jobs{clause} GROUP BY queue",
        (now, now, *args, *args),
    )
    found: dict[str, dict[str, Any]] = {name: {} for name in params.queues or ()}
    for queue, status, count, scheduled, oldest, oldest_due in rows:
        entry = found.setdefault(str(queue), {})
        entry[str(status)] = int(count)
        if status == "queued":
            entry["scheduled"] = int(scheduled or 0)
            entry["oldest"] = oldest
            entry["oldest_due"] = oldest_due
    result = []
    for name in sorted(found):
        entry = found[name]
        five = {key: int(entry.get(key, 0)) for key in _FIVE}
        result.append(
            QueueCounts(
                queue=name,
                total=sum(five.values()),
                scheduled=int(entry.get("scheduled", 0)),
                oldest_queued_at=from_us_or_none(entry.get("oldest")),
                oldest_due_at=from_us_or_none(entry.get("oldest_due")),
                **five,
            )
        )
    return result


async def job_activity(db: Database, params: JobActivityParams) -> list[ActivityBucket]:
    now = now_us()
    since = to_us(params.since)
    width = max(1, int(params.bucket_seconds)) * 1_000_000
    queue = " AND queue = ?" if params.queue is not None else ""
    extra: tuple[Any, ...] = (params.queue,) if params.queue is not None else ()
    rows = await db.fetchall(
        "SELECT 'done', (updated_at - ?) / ?, COUNT(*) FROM soniq_jobs "
        f"WHERE status = 'done' AND updated_at >= ?{queue} GROUP BY 2 "
        "UNION ALL SELECT 'dead', (moved_to_dead_letter_at - ?) / ?, COUNT(*) FROM soniq_dead_letter_jobs "
        f"WHERE moved_to_dead_letter_at >= ?{queue} GROUP BY 2",
        (since, width, since, *extra, since, width, since, *extra),
    )
    done = {int(index): int(count) for kind, index, count in rows if kind == "done"}
    dead = {int(index): int(count) for kind, index, count in rows if kind == "dead"}
    return activity_buckets(params, from_us(now), done, dead)


async def job_page(db: Database, params: JobPageParams) -> JobPage:
    where: list[str] = []
    args: list[Any] = []
    if params.statuses is not None:
        _in("status", [JobStatus(s).value for s in params.statuses], where, args)
    if params.queues is not None:
        _in("queue", list(params.queues), where, args)
    _names(where, args, exact=params.job_name, prefix=params.job_name_prefix, search=params.search)
    if params.before is not None:
        where.append("(created_at, id) < (?, ?)")
        args.extend((to_us(params.before.at), params.before.id))
    columns = JOB_COLUMNS if params.include_results else JOB_COLUMNS_NO_RESULT
    limit = max(0, params.limit)
    rows = await db.fetchall(
        f"SELECT {columns} FROM soniq_jobs{_clause(where)} ORDER BY created_at DESC, id DESC LIMIT ?",
        (*args, limit + 1),
    )
    page, cursor = cut([job_from_row(row) for row in rows], limit, job_cursor)
    return JobPage(rows=page, next_cursor=cursor)


async def dead_letter_page(db: Database, params: DeadLetterPageParams) -> DeadLetterPage:
    where: list[str] = []
    args: list[Any] = []
    if params.reasons is not None:
        _in("dead_letter_reason", list(params.reasons), where, args)
    if params.queues is not None:
        _in("queue", list(params.queues), where, args)
    _names(where, args, exact=params.job_name, prefix=params.job_name_prefix, search=params.search)
    if params.filter is not None:
        condition, values = dead_letter_filter(params.filter)
        if condition:
            where.append(condition)
            args.extend(values)
    if params.before is not None:
        where.append("(moved_to_dead_letter_at, id) < (?, ?)")
        args.extend((to_us(params.before.at), params.before.id))
    limit = max(0, params.limit)
    rows = await db.fetchall(
        f"SELECT {DEAD_LETTER_COLUMNS} FROM soniq_dead_letter_jobs{_clause(where)} "
        "ORDER BY moved_to_dead_letter_at DESC, id DESC LIMIT ?",
        (*args, limit + 1),
    )
    page, cursor = cut([dead_letter_from_row(row) for row in rows], limit, dead_letter_cursor)
    return DeadLetterPage(rows=page, next_cursor=cursor)


def _distinct(table: str) -> str:
    # A loose index scan: each step is one probe for the next larger queue name.
    return (
        f"SELECT name FROM (WITH RECURSIVE q(name) AS (SELECT MIN(queue) FROM {table} UNION ALL "
        f"SELECT (SELECT MIN(queue) FROM {table} WHERE queue > q.name) FROM q WHERE q.name IS NOT NULL) "
        "SELECT name FROM q WHERE name IS NOT NULL)"
    )


async def queue_names(db: Database) -> list[str]:
    rows = await db.fetchall(f"{_distinct('soniq_jobs')} UNION {_distinct('soniq_dead_letter_jobs')} ORDER BY 1")
    return [str(row[0]) for row in rows]
