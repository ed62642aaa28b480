"""The `OperatorReads` role: read-only views for operators' pages and the CLI."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from soniq.params import (
    JobActivityParams,
    JobCountsParams,
    JobPageParams,
)
from soniq.records import (
    ActivityBucket,
    JobPage,
    JobRecord,
    QueueCounts,
)

VERSION = 1
"""The version of `OperatorReads` this soniq-core speaks."""


@runtime_checkable
class OperatorReads(Protocol):
    """Read-only views for operators' pages and the CLI."""

    async def job_page(self, params: JobPageParams, /) -> JobPage:
        """Up to `limit` rows matching every given filter, newest ``(created_at, id)``
        first, strictly below `before`. Keyset pagination: following `next_cursor`
        never repeats or skips a row that existed when the first page was read,
        whatever is inserted or deleted meanwhile, and each page costs the same at
        any depth. `next_cursor` is None when no matching row is left below the page.
        `result` is None on every row unless `include_results`; a row that cannot
        be decoded comes back with `decode_error` set, never raised. The one job
        listing: core serves ``app.list_jobs(offset=...)`` by walking these pages."""

    async def job_counts(self, params: JobCountsParams, /) -> list[QueueCounts]:
        """How many jobs each queue holds and how long its oldest have waited.

        Per queue, in queue-name order: the `queue_stats` counts plus `scheduled`,
        `oldest_queued_at` and `oldest_due_at`, for every queue with at least one job or dead letter (or only
        `queues`, when given; a named queue with nothing in it comes back with zeros).
        One grouped read: the counts of one queue add up with each other. For one
        total over all queues (or one queue), without ages, `QueueStore.queue_stats`."""

    async def job_activity(self, params: JobActivityParams, /) -> list[ActivityBucket]:
        """Buckets of `bucket_seconds` from `since` to now, oldest first, every bucket
        present (zeros included). `done` counts `done` rows by `updated_at`,
        `dead_lettered` counts dead-letter rows by `moved_to_dead_letter_at`, both in
        ``[start, start + bucket_seconds)``; `failed` is None unless the store keeps
        a history of failed runs."""

    async def queue_names(self) -> list[str]:
        """Every distinct queue of a job or dead-letter row, sorted. Reads no more than
        one index probe per queue where the store has an index on `queue`."""


__all__ = [
    "VERSION",
    "ActivityBucket",
    "JobActivityParams",
    "JobCountsParams",
    "JobPage",
    "JobPageParams",
    "JobRecord",
    "OperatorReads",
    "QueueCounts",
]
