"""The dashboard reads on PostgreSQL, each one statement (one snapshot).

What keeps each fast at a million rows (migrations 1, 3 and 7 add the
indexes): `job_counts` groups an index-only scan of ``(queue, status)`` for
the rows that are not queued (migration 7 leaves queued rows out of it),
reads the queued rows' `scheduled_at` and `created_at` from the claim index
(index-only too) and the few rows waiting for dependencies from their own
index; pages walk ``(created_at DESC, id DESC)`` from the cursor with a row
comparison, so page 1,000 costs what page 1 costs; `job_activity` buckets an
index-only scan of the partial index of done rows by `updated_at` with
`date_bin`; `queue_names` is a loose index scan (a recursive CTE that probes
an index once per distinct queue) over each of those three parts. Counting
is still linear in the rows counted, which is why the dashboard serves its
overview from a snapshot.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import asyncpg

from soniq.backend import (
    ActivityBucket,
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
from soniq_postgres.queries import DEAD_COLUMNS, JOB_COLUMNS, JOB_COLUMNS_NO_RESULT, dead_letter_conditions
from soniq_postgres.rows import dead_letter_record, job_record, utc

_FIVE = ("queued", "processing", "done", "dead_letter", "cancelled")


class _Where:
    """`WHERE` clauses with their numbered parameters."""

    def __init__(self) -> None:
        self.clauses: list[str] = []
        self.args: list[Any] = []

    def arg(self, value: Any) -> str:
        self.args.append(value)
        return f"${len(self.args)}"

    def add(self, clause: str) -> None:
        self.clauses.append(clause)

    def any_of(self, column: str, values: Sequence[str] | None) -> None:
        if values is not None:
            self.add(f"{column} = ANY({self.arg(list(values))}::text[])")

    def names(self, *, exact: str | None, prefix: str | None, search: str | None) -> None:
        if exact is not None:
            self.add(f"job_name = {self.arg(exact)}")
        if prefix is not None:
            self.add(f"starts_with(job_name, {self.arg(prefix)})")
        if search:
            value = self.arg(search)
            self.add(f"(id = {value} OR starts_with(job_name, {value}))")

    def sql(self) -> str:
        return f" WHERE {' AND '.join(self.clauses)}" if self.clauses else ""


async def job_counts(conn: asyncpg.Connection, schema: str, params: JobCountsParams) -> list[QueueCounts]:
    where = _Where()
    where.any_of("queue", params.queues)
    clause = where.sql()

    def only(condition: str) -> str:
        return f"{clause} AND {condition}" if clause else f" WHERE {condition}"

    # Each part is one partial index (migration 7): rows that are not queued, claimable queued
    # rows (the claim index), queued rows waiting for dependencies.
    queued = """SELECT queue, 'queued', count(*), count(*) FILTER (WHERE scheduled_at > now()), min(created_at),
       min(created_at) FILTER (WHERE scheduled_at <= now())
  FROM {schema}.soniq_jobs{where} GROUP BY queue"""
    rows = await conn.fetch(
        f"""
SELECT queue, status, count(*) AS n, NULL::bigint AS scheduled, NULL::timestamptz AS oldest,
       NULL::timestamptz AS oldest_due
  FROM {schema}.soniq_jobs{only("status <> 'queued'")} GROUP BY queue, status
UNION ALL
{queued.format(schema=schema, where=only("status = 'queued' AND waiting_on = 0"))}
UNION ALL
{queued.format(schema=schema, where=only("status = 'queued' AND waiting_on > 0"))}
UNION ALL
SELECT queue, 'dead_letter', count(*), NULL, NULL, NULL FROM {schema}.soniq_dead_letter_jobs{clause} GROUP BY queue""",
        *where.args,
    )
    found: dict[str, dict[str, Any]] = {name: {} for name in params.queues or ()}
    for row in rows:
        entry = found.setdefault(row["queue"], {})
        status = row["status"]
        entry[status] = entry.get(status, 0) + int(row["n"])
        if status == "queued":
            entry["scheduled"] = entry.get("scheduled", 0) + int(row["scheduled"] or 0)
            oldest, earlier = entry.get("oldest"), row["oldest"]
            entry["oldest"] = earlier if oldest is None or (earlier is not None and earlier < oldest) else oldest
            due, earlier_due = entry.get("oldest_due"), row["oldest_due"]
            entry["oldest_due"] = earlier_due if due is None or (earlier_due is not None and earlier_due < due) else due
    result = []
    for name in sorted(found):
        entry = found[name]
        five = {key: int(entry.get(key, 0)) for key in _FIVE}
        oldest = entry.get("oldest")
        result.append(
            QueueCounts(
                queue=name,
                total=sum(five.values()),
                scheduled=int(entry.get("scheduled", 0)),
                oldest_queued_at=None if oldest is None else utc(oldest),
                oldest_due_at=None if entry.get("oldest_due") is None else utc(entry["oldest_due"]),
                **five,
            )
        )
    return result


async def job_activity(conn: asyncpg.Connection, schema: str, params: JobActivityParams) -> list[ActivityBucket]:
    width = max(1, int(params.bucket_seconds))
    since = utc(params.since)
    queue = " AND queue = $3" if params.queue is not None else ""
    extra = (params.queue,) if params.queue is not None else ()
    # date_bin is timestamp arithmetic; the epoch-and-floor form it replaces computed in `numeric`
    # for every row and took twice as long over a day of done rows.
    rows = await conn.fetch(
        f"""
SELECT 'done' AS kind, date_bin($2, updated_at, $1) AS bucket, count(*) AS n
  FROM {schema}.soniq_jobs WHERE status = 'done' AND updated_at >= $1{queue} GROUP BY 2
UNION ALL
SELECT 'dead', date_bin($2, moved_to_dead_letter_at, $1), count(*)
  FROM {schema}.soniq_dead_letter_jobs WHERE moved_to_dead_letter_at >= $1{queue} GROUP BY 2
UNION ALL
SELECT 'now', now(), 0""",
        since,
        timedelta(seconds=width),
        *extra,
    )
    counts: dict[str, dict[int, int]] = {"done": {}, "dead": {}}
    now = since
    for row in rows:
        if row["kind"] == "now":
            now = utc(row["bucket"])
        else:
            index = round((utc(row["bucket"]) - since).total_seconds() / width)
            counts[row["kind"]][index] = int(row["n"])
    return activity_buckets(params, now, counts["done"], counts["dead"])


async def job_page(conn: asyncpg.Connection, schema: str, params: JobPageParams) -> JobPage:
    where = _Where()
    if params.statuses is not None:
        where.any_of("status", [JobStatus(s).value for s in params.statuses])
    where.any_of("queue", params.queues)
    where.names(exact=params.job_name, prefix=params.job_name_prefix, search=params.search)
    if params.before is not None:
        at, last = where.arg(utc(params.before.at)), where.arg(params.before.id)
        where.add(f"(created_at, id) < ({at}::timestamptz, {last}::text)")
    columns = JOB_COLUMNS if params.include_results else JOB_COLUMNS_NO_RESULT
    limit = max(0, params.limit)
    rows = await conn.fetch(
        f"SELECT {columns} FROM {schema}.soniq_jobs{where.sql()} "
        f"ORDER BY created_at DESC, id DESC LIMIT {where.arg(limit + 1)}",
        *where.args,
    )
    page, cursor = cut([job_record(row) for row in rows], limit, job_cursor)
    return JobPage(rows=page, next_cursor=cursor)


async def dead_letter_page(conn: asyncpg.Connection, schema: str, params: DeadLetterPageParams) -> DeadLetterPage:
    where = _Where()
    where.any_of("dead_letter_reason", params.reasons)
    where.any_of("queue", params.queues)
    where.names(exact=params.job_name, prefix=params.job_name_prefix, search=params.search)
    conditions, values = dead_letter_conditions(params.filter, first=len(where.args) + 1)
    where.clauses.extend(conditions)
    where.args.extend(values)
    if params.before is not None:
        at, last = where.arg(utc(params.before.at)), where.arg(params.before.id)
        where.add(f"(moved_to_dead_letter_at, id) < ({at}::timestamptz, {last}::text)")
    limit = max(0, params.limit)
    rows = await conn.fetch(
        f"SELECT {DEAD_COLUMNS} FROM {schema}.soniq_dead_letter_jobs{where.sql()} "
        f"ORDER BY moved_to_dead_letter_at DESC, id DESC LIMIT {where.arg(limit + 1)}",
        *where.args,
    )
    page, cursor = cut([dead_letter_record(row) for row in rows], limit, dead_letter_cursor)
    return DeadLetterPage(rows=page, next_cursor=cursor)


def _distinct(table: str, condition: str = "true") -> str:
    """A loose index scan of the queue names of `table`'s rows that meet `condition`."""
    return f"""(WITH RECURSIVE q(name) AS (
    (SELECT queue FROM {table} WHERE {condition} ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT queue FROM {table} WHERE {condition} AND queue > q.name ORDER BY queue LIMIT 1)
    FROM q WHERE q.name IS NOT NULL
) SELECT name FROM q WHERE name IS NOT NULL)"""


# The job rows in three parts, each with an index led by `queue` (migration 7).
_JOB_PARTS = ("status <> 'queued'", "status = 'queued' AND waiting_on = 0", "status = 'queued' AND waiting_on > 0")


async def queue_names(conn: asyncpg.Connection, schema: str) -> list[str]:
    jobs = f"{schema}.soniq_jobs"
    parts = [_distinct(jobs, condition) for condition in _JOB_PARTS]
    rows = await conn.fetch(f"{' UNION '.join(parts)} UNION {_distinct(f'{schema}.soniq_dead_letter_jobs')} ORDER BY 1")
    return [str(row[0]) for row in rows]
