"""The `ScheduleStore` role: stored schedules with exactly-once firing, and the leader lease."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from soniq.params import (
    AcquireLeaseParams,
    DueSchedulesParams,
    FireScheduleParams,
    GetLeaseParams,
    GetScheduleParams,
    ListSchedulesParams,
    ReleaseLeaseParams,
    RemoveScheduleParams,
    SetSchedulePausedParams,
    UpsertScheduleParams,
)
from soniq.records import (
    LeaseRecord,
    ScheduleRecord,
)

VERSION = 1
"""The version of `ScheduleStore` this soniq-core speaks."""


@runtime_checkable
class ScheduleStore(Protocol):
    """Stored schedules with exactly-once firing, and the leader lease."""

    async def upsert_schedule(self, params: UpsertScheduleParams, /) -> ScheduleRecord:
        """Insert the schedule, or replace the definition stored under its name, and
        return the row as stored. See `UpsertScheduleParams` for what a replace keeps."""

    async def get_schedule(self, params: GetScheduleParams, /) -> ScheduleRecord | None:
        """The schedule, or None when no row has that name."""

    async def list_schedules(self, params: ListSchedulesParams, /) -> list[ScheduleRecord]:
        """Every schedule (or only `names`), in name order."""

    async def set_schedule_paused(self, params: SetSchedulePausedParams, /) -> bool:
        """Write `paused` (and `next_run` when given). False when there is no such schedule."""

    async def remove_schedule(self, params: RemoveScheduleParams, /) -> bool:
        """Delete the schedule. False when there was none. Jobs it enqueued stay."""

    async def due_schedules(self, params: DueSchedulesParams, /) -> list[ScheduleRecord]:
        """Up to `limit` schedules that are not paused and whose ``next_run <= now``,
        earliest `next_run` first. Reads only; claiming a due time is `fire_schedule`."""

    async def fire_schedule(self, params: FireScheduleParams, /) -> list[str] | None:
        """In one transaction: only while the schedule exists, is not paused and has
        ``next_run = expected_next_run``, set ``next_run = new_next_run``, insert every
        job of `jobs` as `queued` (as `enqueue_jobs`), ``run_count += len(jobs)`` and,
        when `jobs` is not empty, ``last_run = fired_at`` and ``last_job_id`` = the last
        job's id. Returns the inserted ids (empty for an advance without runs), or None
        with nothing written when the fence failed. However many callers race on one
        due time, in any number of processes, exactly one of them gets a non-None."""

    async def acquire_lease(self, params: AcquireLeaseParams, /) -> LeaseRecord | None:
        """Take the lease `name` when it is free or expired (``acquired_at = renewed_at =
        now``), or renew it when `holder` holds it (``renewed_at = now``), with
        ``expires_at = now + ttl``; `now` is the store's clock. Atomic: at any instant at
        most one holder has an unexpired lease. None (nothing written) when another
        holder's lease has not expired."""

    async def release_lease(self, params: ReleaseLeaseParams, /) -> bool:
        """Free the lease when `holder` holds it (expired or not). False otherwise."""

    async def get_lease(self, params: GetLeaseParams, /) -> LeaseRecord | None:
        """The unexpired lease `name` by the store's clock, or None when it is free."""


__all__ = [
    "VERSION",
    "AcquireLeaseParams",
    "DueSchedulesParams",
    "FireScheduleParams",
    "GetLeaseParams",
    "GetScheduleParams",
    "LeaseRecord",
    "ListSchedulesParams",
    "ReleaseLeaseParams",
    "RemoveScheduleParams",
    "ScheduleRecord",
    "ScheduleStore",
    "SetSchedulePausedParams",
    "UpsertScheduleParams",
]
