"""The `CancelChannel` role: cancelling running jobs and telling waiters that jobs finished."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from soniq.params import (
    CancelRequestsParams,
    FinishCancelParams,
    RequestCancelParams,
    WaitForJobChangesParams,
    WatchJobsParams,
)
from soniq.records import (
    CancelOutcome,
    JobRecord,
)

VERSION = 1
"""The version of `CancelChannel` this soniq-core speaks."""


@runtime_checkable
class CancelChannel(Protocol):
    """Cancelling running jobs and telling waiters that jobs finished."""

    async def request_cancel(self, params: RequestCancelParams, /) -> CancelOutcome:
        """Ask for a job to stop, whatever its status, in one atomic write.

        `queued`: as `cancel_job` (the row becomes `cancelled`, its dependents follow),
        `CANCELLED`. `processing`: ``cancel_requested = true`` (idempotent; nothing else
        changes) and a change is published to the owner's `wait_for_job_changes`,
        whatever `watch_jobs` said, `REQUESTED`. `done` or `cancelled` in `soniq_jobs`,
        or a dead-letter row: nothing written, `ALREADY_FINISHED`. No row anywhere:
        `NOT_FOUND`. The flag stays on the row through a nack, retry or rescue, so the
        next worker to claim it sees it in the claimed `JobRecord`."""

    async def cancel_requests(self, params: CancelRequestsParams, /) -> set[str]:
        """Ids of `processing` rows owned by `worker_id` whose `cancel_requested` is set.
        One read; reads nothing but that worker's rows where the store can."""

    async def finish_cancel(self, params: FinishCancelParams, /) -> bool:
        """The handler of a row whose cancel was requested has stopped: ``status =
        'cancelled'``, ``worker_id = NULL``, ``last_error = message``, ``updated_at = now``;
        `attempts` untouched, `cancel_requested` kept. Fenced like every worker write;
        fails the row's dependents and publishes a change when watched, atomically."""

    async def watch_jobs(self, params: WatchJobsParams, /) -> None:
        """Mark rows so that the write that next finishes each of them (`done`, `cancelled`,
        dead-lettered, deleted) publishes a change that `wait_for_job_changes` in any
        process sees. Ids with no row are ignored. A backend without `push_job_changes`
        may do nothing. Cheap: core calls it once per waited job."""

    async def wait_for_job_changes(self, params: WaitForJobChangesParams, /) -> set[str] | None:
        """Return when a change was published for any of `job_ids` (a watched row
        finished, or a cancel was requested on it), or after `timeout` seconds.

        Returns the ids among `job_ids` known to have changed (possibly empty on a
        timeout), or None when the backend cannot tell which (then core re-reads them
        all). A spurious return is always allowed. With `push_job_changes`, one
        listener per backend instance serves every concurrent call; without it the
        backend may simply sleep for `timeout` and return None."""


__all__ = [
    "VERSION",
    "CancelChannel",
    "CancelOutcome",
    "CancelRequestsParams",
    "FinishCancelParams",
    "JobRecord",
    "RequestCancelParams",
    "WaitForJobChangesParams",
    "WatchJobsParams",
]
