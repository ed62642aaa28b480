"""Schedules, the leader lease and pruning in the memory store.

Each function runs under the store's lock, without awaiting, so a fire or an
acquire is atomic against every other caller sharing the store.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from soniq.backend import (
    AcquireLeaseParams,
    DueSchedulesParams,
    JobStatus,
    LeaseRecord,
    PruneDeadLettersParams,
    PruneJobsParams,
    ReleaseLeaseParams,
    ScheduleRecord,
    SetSchedulePausedParams,
    UpsertScheduleParams,
)
from soniq_memory.store import MemoryStore, json_copy

_FINISHED = (JobStatus.DONE, JobStatus.CANCELLED)


def upsert(store: MemoryStore, params: UpsertScheduleParams) -> ScheduleRecord:
    now = store.now()
    args = json_copy(dict(params.args), what="schedule args")
    old = store.schedules.get(params.name)
    if old is None:
        record = ScheduleRecord(
            name=params.name,
            job_name=params.job_name,
            queue=params.queue,
            priority=params.priority,
            max_attempts=params.max_attempts,
            args=args,
            cron=params.cron,
            every_seconds=params.every_seconds,
            timezone=params.timezone,
            catch_up=params.catch_up,
            catch_up_limit=params.catch_up_limit,
            paused=bool(params.paused),
            next_run=params.next_run,
            last_run=None,
            run_count=0,
            last_job_id=None,
            created_at=now,
            updated_at=now,
        )
    else:
        same_timing = (old.cron, old.every_seconds, old.timezone) == (
            params.cron,
            params.every_seconds,
            params.timezone,
        )
        record = replace(
            old,
            job_name=params.job_name,
            queue=params.queue,
            priority=params.priority,
            max_attempts=params.max_attempts,
            args=args,
            cron=params.cron,
            every_seconds=params.every_seconds,
            timezone=params.timezone,
            catch_up=params.catch_up,
            catch_up_limit=params.catch_up_limit,
            paused=old.paused if params.paused is None else params.paused,
            next_run=old.next_run if same_timing and not params.reset_next_run else params.next_run,
            updated_at=now,
        )
    store.schedules[params.name] = record
    return record


def set_paused(store: MemoryStore, params: SetSchedulePausedParams) -> bool:
    old = store.schedules.get(params.name)
    if old is None:
        return False
    store.schedules[params.name] = replace(
        old,
        paused=params.paused,
        next_run=old.next_run if params.next_run is None else params.next_run,
        updated_at=store.now(),
    )
    return True


def due(store: MemoryStore, params: DueSchedulesParams) -> list[ScheduleRecord]:
    now = store.now() if params.now is None else params.now
    rows = [row for row in store.schedules.values() if not row.paused and row.next_run <= now]
    rows.sort(key=lambda row: (row.next_run, row.name))
    return rows[: max(params.limit, 0)]


def acquire(store: MemoryStore, params: AcquireLeaseParams) -> LeaseRecord | None:
    now = store.now()
    held = store.leases.get(params.name)
    expires_at = now + timedelta(seconds=params.ttl)
    if held is not None and held.expires_at > now:
        if held.holder != params.holder:
            return None
        lease = replace(held, renewed_at=now, expires_at=expires_at)
    else:
        lease = LeaseRecord(
            name=params.name, holder=params.holder, acquired_at=now, renewed_at=now, expires_at=expires_at
        )
    store.leases[params.name] = lease
    return lease


def release(store: MemoryStore, params: ReleaseLeaseParams) -> bool:
    held = store.leases.get(params.name)
    if held is None or held.holder != params.holder:
        return False
    del store.leases[params.name]
    return True


def current_lease(store: MemoryStore, name: str) -> LeaseRecord | None:
    held = store.leases.get(name)
    return held if held is not None and held.expires_at > store.now() else None


def prune_jobs(store: MemoryStore, params: PruneJobsParams) -> int:
    now = store.now() if params.now is None else params.now
    victims: list[str] = []
    for job_id, row in store.jobs.items():
        if len(victims) >= params.limit:
            break
        if row.status in _FINISHED and row.expires_at is not None and row.expires_at <= now:
            victims.append(job_id)
    for job_id in victims:
        store.drop_job(job_id)
    # Expired unique windows go with the same sweep (bounded alike, not counted as jobs), by the
    # store's own clock: a `now` given for the rows must not end a window that still holds.
    store.prune_windows(min(now, store.now()), params.limit)
    return len(victims)


def prune_dead_letters(store: MemoryStore, params: PruneDeadLettersParams) -> int:
    victims = [job_id for job_id, row in store.dead_letters.items() if row.moved_to_dead_letter_at < params.before][
        : max(params.limit, 0)
    ]
    for job_id in victims:
        store.drop_dead(job_id)
    return len(victims)


def fenced(store: MemoryStore, name: str, expected_next_run: datetime) -> ScheduleRecord | None:
    """The schedule when it may fire for `expected_next_run` (exists, not paused, not yet advanced)."""
    row = store.schedules.get(name)
    if row is None or row.paused or row.next_run != expected_next_run:
        return None
    return row
