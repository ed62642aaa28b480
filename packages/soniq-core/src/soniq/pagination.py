"""Pure-Python forms of the dashboard reads, for stores that filter rows in Python.

The memory backend and the Redis backend both hold rows they can only filter
after reading them; these helpers give them one definition of what each
filter and cursor of `soniq.params` means, the same one the SQL backends
write as `WHERE` clauses.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import TypeVar

from soniq.params import DeadLetterFilter, DeadLetterPageParams, JobActivityParams, JobCursor, JobPageParams
from soniq.records import ActivityBucket, DeadLetterRecord, JobRecord, JobStatus

_Row = TypeVar("_Row", JobRecord, DeadLetterRecord)


def _name_matches(name: str, exact: str | None, prefix: str | None) -> bool:
    if exact is not None and name != exact:
        return False
    return prefix is None or name.startswith(prefix)


def job_matches(params: JobPageParams, row: JobRecord) -> bool:
    if params.statuses is not None and row.status not in {JobStatus(s) for s in params.statuses}:
        return False
    if params.queues is not None and row.queue not in params.queues:
        return False
    if not _name_matches(row.job_name, params.job_name, params.job_name_prefix):
        return False
    if params.search and row.id != params.search and not row.job_name.startswith(params.search):
        return False
    return params.before is None or (row.created_at, row.id) < (params.before.at, params.before.id)


def dead_letter_filter_matches(wanted: DeadLetterFilter, row: DeadLetterRecord) -> bool:
    """Whether a dead-letter row passes every field of the filter (the bulk operations' and the pages')."""
    moved = row.moved_to_dead_letter_at
    return (
        (wanted.job_names is None or row.job_name in wanted.job_names)
        and (wanted.queues is None or row.queue in wanted.queues)
        and (wanted.reasons is None or row.dead_letter_reason in wanted.reasons)
        and (wanted.moved_from is None or moved >= wanted.moved_from)
        and (wanted.moved_to is None or moved <= wanted.moved_to)
        and (wanted.resurrected is None or (row.resurrection_count > 0) == wanted.resurrected)
    )


def dead_letter_matches(params: DeadLetterPageParams, row: DeadLetterRecord) -> bool:
    """Whether a dead-letter row belongs on the page: every field of the params, its `filter` included."""
    if params.filter is not None and not dead_letter_filter_matches(params.filter, row):
        return False
    if params.reasons is not None and row.dead_letter_reason not in params.reasons:
        return False
    if params.queues is not None and row.queue not in params.queues:
        return False
    if not _name_matches(row.job_name, params.job_name, params.job_name_prefix):
        return False
    if params.search and row.id != params.search and not row.job_name.startswith(params.search):
        return False
    before = params.before
    return before is None or (row.moved_to_dead_letter_at, row.id) < (before.at, before.id)


def bucket_count(since: datetime, now: datetime, bucket_seconds: int) -> int:
    """How many buckets cover ``[since, now]`` (at least one)."""
    span = max(0.0, (now - since).total_seconds())
    return max(1, math.floor(span / max(1, bucket_seconds)) + 1)


def bucket_index(params: JobActivityParams, at: datetime) -> int:
    return math.floor((at - params.since).total_seconds() / max(1, int(params.bucket_seconds)))


def activity_buckets(
    params: JobActivityParams, now: datetime, done: Mapping[int, int], dead: Mapping[int, int]
) -> list[ActivityBucket]:
    """Every bucket from `since` to `now`, from counts by bucket index (see `bucket_index`)."""
    width = max(1, int(params.bucket_seconds))
    return [
        ActivityBucket(
            start=params.since + timedelta(seconds=width * i),
            done=int(done.get(i, 0)),
            dead_lettered=int(dead.get(i, 0)),
        )
        for i in range(bucket_count(params.since, now, width))
    ]


def activity(
    params: JobActivityParams,
    now: datetime,
    done_at: Iterable[datetime],
    dead_at: Iterable[datetime],
) -> list[ActivityBucket]:
    """Bucket the given `done` and dead-letter timestamps (any order; ones before `since` are ignored)."""
    counts: tuple[dict[int, int], dict[int, int]] = ({}, {})
    for stamps, into in zip((done_at, dead_at), counts, strict=True):
        for at in stamps:
            index = bucket_index(params, at)
            if index >= 0:
                into[index] = into.get(index, 0) + 1
    return activity_buckets(params, now, *counts)


def cut(rows: list[_Row], limit: int, key: Callable[[_Row], JobCursor]) -> tuple[list[_Row], JobCursor | None]:
    """A page from `limit + 1` rows read in page order: the first `limit`, and a cursor when more exist."""
    limit = max(0, limit)
    if len(rows) <= limit or limit == 0:
        return rows[:limit], None
    page = rows[:limit]
    return page, key(page[-1])


def job_cursor(row: JobRecord) -> JobCursor:
    return JobCursor(at=row.created_at, id=row.id)


def dead_letter_cursor(row: DeadLetterRecord) -> JobCursor:
    return JobCursor(at=row.moved_to_dead_letter_at, id=row.id)
