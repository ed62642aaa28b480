"""The claim of the memory store: due, claimable rows in order, and fleet-wide limits when asked.

Rows of a paused queue (`excluded_queues`) and rows newer than the worker's code
(`max_versions`) are left out before anything else, so neither is claimed nor touched.

Runs under the store's lock from the first read to the last write, so no two claims, in any
thread, ever take one row or share one limited slot.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from soniq.backend import ClaimJobsParams, JobRecord, JobStatus
from soniq_memory.limits import LimitGate
from soniq_memory.store import MemoryStore


def claim_rows(store: MemoryStore, params: ClaimJobsParams) -> list[JobRecord]:
    """Move up to `limit` due rows with nothing to wait for to `processing` (the caller holds the lock)."""
    worker_id, queues, limit, mark_started = params.worker_id, params.queues, params.limit, params.mark_started
    if limit <= 0:
        return []
    now = store.now()
    wanted = set(queues) if queues is not None else None
    names = set(params.job_names) if params.job_names is not None else None
    excluded = set(params.excluded_queues) if params.excluded_queues else None
    too_new = _version_filter(params.max_versions)
    due = [
        row
        for row in store.jobs.values()
        if row.status is JobStatus.QUEUED
        and row.waiting_on <= 0
        and row.scheduled_at <= now
        and (wanted is None or row.queue in wanted)
        and (excluded is None or row.queue not in excluded)
        and (names is None or row.job_name in names)
        and (too_new is None or not too_new(row))
    ]
    due.sort(key=lambda row: (row.priority, row.scheduled_at, row.created_at, row.id))
    gate = LimitGate(store, params.limits, now) if params.limits else None
    claimed: list[JobRecord] = []
    for row in due if gate is not None else due[:limit]:
        if gate is not None:
            if len(claimed) >= limit:
                break
            if not gate.admit(row):
                continue
        updated = replace(
            row,
            status=JobStatus.PROCESSING,
            worker_id=worker_id,
            updated_at=now,
            started_at=now if mark_started else None,
            dedup_key=None,
        )
        store.put_job(updated)
        claimed.append(store.export_job(updated))
    return claimed


def _version_filter(max_versions: Mapping[str, int] | None) -> Callable[[JobRecord], bool] | None:
    """A test for rows newer than the worker's code of their name (None: every version is claimable)."""
    if not max_versions:
        return None
    ceilings = dict(max_versions)
    values = set(ceilings.values())
    if len(values) == 1:
        # The common case: every job at one version, so one comparison decides (then the name).
        ceiling = values.pop()
        return lambda row: row.version > ceiling and row.job_name in ceilings

    def too_new(row: JobRecord) -> bool:
        limit = ceilings.get(row.job_name)
        return limit is not None and row.version > limit

    return too_new
