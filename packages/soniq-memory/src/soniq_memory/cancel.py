"""Cancelling a job whatever its status, in the memory store.

Each function runs under the store's lock: a request on a `queued` row is a
plain cancel (its dependents follow in the same step); on a `processing` row it
only sets `cancel_requested` and tells waiters on that id, and the owner ends
the run with the fenced `finish_cancel`.
"""

from __future__ import annotations

from dataclasses import replace

from soniq.backend import CancelOutcome, FinishCancelParams, JobStatus
from soniq_memory.dependencies import Finish
from soniq_memory.store import MemoryStore


def request_cancel(store: MemoryStore, job_id: str) -> CancelOutcome:
    row = store.jobs.get(job_id)
    if row is None:
        return CancelOutcome.ALREADY_FINISHED if job_id in store.dead_letters else CancelOutcome.NOT_FOUND
    if row.status is JobStatus.QUEUED:
        store.cancel_queued(row)
        return CancelOutcome.CANCELLED
    if row.status is JobStatus.PROCESSING:
        if not row.cancel_requested:
            store.put_job(replace(row, cancel_requested=True))
        store.publish_change(job_id, always=True)
        return CancelOutcome.REQUESTED
    return CancelOutcome.ALREADY_FINISHED


def cancel_requests(store: MemoryStore, worker_id: str) -> set[str]:
    return {
        row.id
        for row in store.jobs.values()
        if row.cancel_requested and row.status is JobStatus.PROCESSING and row.worker_id == worker_id
    }


def finish_cancel(store: MemoryStore, params: FinishCancelParams) -> bool:
    """The owner's handler stopped: `cancelled`, fenced on the owner; attempts and the flag kept."""
    row = store.jobs.get(params.job_id)
    if row is None or row.status is not JobStatus.PROCESSING or row.worker_id != params.worker_id:
        return False
    store.put_job(
        replace(row, status=JobStatus.CANCELLED, worker_id=None, last_error=params.message, updated_at=store.now())
    )
    store.finished(row.id, Finish.CANCELLED)
    return True
