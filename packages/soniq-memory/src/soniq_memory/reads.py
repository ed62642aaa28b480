"""The dashboard reads of the memory store: each one scan of the rows under the store's lock."""

from __future__ import annotations

from datetime import datetime

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
    activity,
    cut,
    dead_letter_cursor,
    dead_letter_matches,
    job_cursor,
    job_matches,
)
from soniq_memory.store import MemoryStore


def job_counts(store: MemoryStore, params: JobCountsParams) -> list[QueueCounts]:
    with store.lock:
        now = store.now()
        counts: dict[str, dict[str, int]] = {}
        oldest: dict[str, datetime] = {}
        oldest_due: dict[str, datetime] = {}
        wanted = set(params.queues) if params.queues is not None else None
        for name in wanted or ():
            counts[name] = {}
        for row in store.jobs.values():
            if wanted is not None and row.queue not in wanted:
                continue
            bucket = counts.setdefault(row.queue, {})
            bucket[row.status.value] = bucket.get(row.status.value, 0) + 1
            if row.status is JobStatus.QUEUED:
                if row.scheduled_at > now:
                    bucket["scheduled"] = bucket.get("scheduled", 0) + 1
                else:
                    due = oldest_due.get(row.queue)
                    if due is None or row.created_at < due:
                        oldest_due[row.queue] = row.created_at
                first = oldest.get(row.queue)
                if first is None or row.created_at < first:
                    oldest[row.queue] = row.created_at
        for dead in store.dead_letters.values():
            if wanted is not None and dead.queue not in wanted:
                continue
            bucket = counts.setdefault(dead.queue, {})
            bucket["dead_letter"] = bucket.get("dead_letter", 0) + 1
        result = []
        for name in sorted(counts):
            c = counts[name]
            five = {k: c.get(k, 0) for k in ("queued", "processing", "done", "dead_letter", "cancelled")}
            result.append(
                QueueCounts(
                    queue=name,
                    total=sum(five.values()),
                    scheduled=c.get("scheduled", 0),
                    oldest_queued_at=oldest.get(name),
                    oldest_due_at=oldest_due.get(name),
                    **five,
                )
            )
        return result


def job_activity(store: MemoryStore, params: JobActivityParams) -> list[ActivityBucket]:
    queue = params.queue
    with store.lock:
        done = [
            r.updated_at
            for r in store.jobs.values()
            if r.status is JobStatus.DONE and (queue is None or r.queue == queue)
        ]
        dead = [d.moved_to_dead_letter_at for d in store.dead_letters.values() if queue is None or d.queue == queue]
        return activity(params, store.now(), done, dead)


def job_page(store: MemoryStore, params: JobPageParams) -> JobPage:
    with store.lock:
        rows = sorted(
            (r for r in store.jobs.values() if job_matches(params, r)),
            key=lambda r: (r.created_at, r.id),
            reverse=True,
        )[: max(0, params.limit) + 1]
        rows = [store.export_job(r, include_result=params.include_results) for r in rows]
    page, cursor = cut(rows, params.limit, job_cursor)
    return JobPage(rows=page, next_cursor=cursor)


def dead_letter_page(store: MemoryStore, params: DeadLetterPageParams) -> DeadLetterPage:
    with store.lock:
        rows = sorted(
            (d for d in store.dead_letters.values() if dead_letter_matches(params, d)),
            key=lambda d: (d.moved_to_dead_letter_at, d.id),
            reverse=True,
        )[: max(0, params.limit) + 1]
        rows = [store.export_dead(d) for d in rows]
    page, cursor = cut(rows, params.limit, dead_letter_cursor)
    return DeadLetterPage(rows=page, next_cursor=cursor)


def queue_names(store: MemoryStore) -> list[str]:
    with store.lock:
        return sorted({r.queue for r in store.jobs.values()} | {d.queue for d in store.dead_letters.values()})
