"""Enqueue in the memory store: dedup, dependencies and the insert, all or none, under the caller's lock.

Every row is planned before any is written, so a bad job (an id that exists, args that are not
JSON, an unknown dependency) leaves the store untouched.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from soniq.backend import DependencyPolicy, JobRecord, JobStatus, NewJob
from soniq_memory import dependencies
from soniq_memory.store import MemoryStore, json_copy


def queued_row(
    *,
    id: str,
    job_name: str,
    args: Mapping[str, Any],
    queue: str,
    priority: int,
    scheduled_at: datetime,
    max_attempts: int,
    now: datetime,
    trace_context: Mapping[str, str] | None = None,
    dedup_key: str | None = None,
    producer_id: str | None = None,
    attempts: int = 0,
    depends_on: Sequence[str] = (),
    dependency_policy: DependencyPolicy = DependencyPolicy.CANCEL,
    limit_key: str | None = None,
    waiting_on: int = 0,
    version: int = 1,
) -> JobRecord:
    """A fresh `queued` row that has never run (what enqueue and replay insert)."""
    return JobRecord(
        id=id,
        job_name=job_name,
        args=json_copy(dict(args), what="job args"),
        status=JobStatus.QUEUED,
        attempts=attempts,
        max_attempts=max_attempts,
        queue=queue,
        priority=priority,
        scheduled_at=scheduled_at,
        last_error=None,
        worker_id=None,
        result=None,
        created_at=now,
        updated_at=now,
        started_at=None,
        trace_context=dict(trace_context) if trace_context is not None else None,
        dedup_key=dedup_key,
        producer_id=producer_id,
        depends_on=tuple(depends_on),
        dependency_policy=DependencyPolicy(dependency_policy),
        limit_key=limit_key,
        waiting_on=waiting_on,
        version=version,
    )


def insert_jobs(store: MemoryStore, jobs: Sequence[NewJob]) -> list[str]:
    """Insert every job, all or none; returns the stored ids, a job whose `dedup_key` a queued row
    holds, or whose unique window is held, getting that row's id. Rows waiting on a dependency are
    stored with their edges; a debounced job whose key a debounced queued row holds moves that row."""
    now = store.now()
    seen: set[str] = set()
    aliases: dict[str, str] = {}
    moves: list[tuple[JobRecord, NewJob, datetime]] = []
    for job in jobs:
        if job.id in seen or job.id in store.jobs:
            raise ValueError(f"a job with id {job.id!r} already exists")
        seen.add(job.id)
        if isinstance(job.version, bool) or not isinstance(job.version, int) or job.version < 1:
            raise ValueError(f"job {job.id!r}: version must be an integer >= 1, got {job.version!r}")
        if job.unique_window is not None:
            window_holder = store.window_holder(job.unique_window.key, job.unique_window.starts_at)
            if window_holder is not None:
                aliases[job.id] = window_holder
            continue
        holder = store.dedup_holder(job.dedup_key) if job.dedup_key is not None else None
        if holder is not None:
            aliases[job.id] = holder.id
            deadline = store.debounce_deadlines.get(holder.id)
            if job.debounce_deadline is not None and deadline is not None:
                moves.append((holder, job, deadline))
    # Plan every row before writing any, so a bad job leaves the store untouched.
    plans = dependencies.plan_inserts(store, jobs, aliases)
    rows: list[tuple[JobRecord, tuple[str, ...]]] = []
    for job, plan in zip(jobs, plans, strict=True):
        if job.id in aliases:
            continue
        row = queued_row(
            id=job.id,
            job_name=job.job_name,
            args=job.args,
            queue=job.queue,
            priority=job.priority,
            scheduled_at=job.scheduled_at,
            max_attempts=job.max_attempts,
            now=now,
            trace_context=job.trace_context,
            dedup_key=job.dedup_key,
            producer_id=job.producer_id,
            depends_on=job.depends_on,
            dependency_policy=job.dependency_policy,
            limit_key=job.limit_key,
            waiting_on=plan.waiting_on,
            version=job.version,
        )
        if plan.cancelled:
            row = replace(row, status=JobStatus.CANCELLED, last_error=plan.last_error, dedup_key=None)
        rows.append((row, plan.pending))
    # The new args of every debounced move, encoded before anything is written (they may not be JSON).
    moved = [
        (holder, json_copy(dict(job.args), what="job args"), min(job.scheduled_at, deadline))
        for holder, job, deadline in moves
    ]
    by_id = {job.id: job for job in jobs}
    for row, pending in rows:
        store.put_job(row)
        dependencies.record_edges(store, row.id, pending)
        if row.dedup_key is not None:
            store.dedup_holders[row.dedup_key] = row.id
        job = by_id[row.id]
        if job.unique_window is not None:
            store.unique_windows[job.unique_window.key] = (row.id, job.unique_window.expires_at)
        if job.debounce_deadline is not None:
            store.debounce_deadlines[row.id] = job.debounce_deadline
    for holder, args, scheduled_at in moved:
        # The holder keeps its id, deadline and created_at; only its args and its due time move.
        store.raw_args.pop(holder.id, None)
        store.put_job(replace(holder, args=args, scheduled_at=scheduled_at, updated_at=now))
    woken = {row.queue for row, _ in rows if row.status is JobStatus.QUEUED and row.waiting_on == 0}
    woken.update(holder.queue for holder, _, _ in moved if holder.waiting_on == 0)
    for queue in woken:
        store.wake(queue)
    return [aliases.get(job.id, job.id) for job in jobs]
