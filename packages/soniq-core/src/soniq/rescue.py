"""Stale recovery, decided in core: what happens to a row whose worker went silent.

A backend finds stale workers and the rows they orphaned (`find_stale_jobs`)
and stores what core decides (`rescue_jobs`); it never decides itself, so every
backend words, counts and routes a lost row the same way.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from soniq.params import FindStaleJobsParams, Rescue, RescueAction, RescueJobsParams
from soniq.records import DeadLetterReason, JobRecord, RecoveryResult, StaleJobPolicy

if TYPE_CHECKING:
    from soniq.backend import Backend


def lost_worker_error(worker_id: str | None, heartbeat_timeout: float) -> str:
    """The one `last_error` text of a run lost with its worker."""
    return f"worker {worker_id} was lost (no heartbeat for {heartbeat_timeout:g}s) while running it"


def decide_rescue(row: JobRecord, *, policy: StaleJobPolicy, heartbeat_timeout: float) -> Rescue:
    """The fate of one orphaned `processing` row, as an explicit write.

    A row whose handler never started ran no user code: it is released with
    its attempts intact and is never dead-lettered. A started row counts the
    lost run as an attempt; under `dead_letter` policy it goes to review as a
    `zombie`, under `requeue` it runs again unless that spent its budget.
    """
    fenced = functools.partial(
        Rescue, job_id=row.id, expected_worker_id=row.worker_id or "", expected_updated_at=row.updated_at
    )
    if row.started_at is None:
        return fenced(action=RescueAction.RELEASE, attempts=row.attempts)
    attempts = row.attempts + 1
    error = lost_worker_error(row.worker_id, heartbeat_timeout)
    if policy is StaleJobPolicy.DEAD_LETTER:
        return fenced(
            action=RescueAction.DEAD_LETTER, attempts=attempts, error=error, reason=DeadLetterReason.ZOMBIE.value
        )
    if attempts >= row.max_attempts:
        return fenced(
            action=RescueAction.DEAD_LETTER, attempts=attempts, error=error, reason=DeadLetterReason.WORKER_LOST.value
        )
    return fenced(action=RescueAction.REQUEUE, attempts=attempts, error=error)


async def sweep_stale_workers(backend: Backend, *, heartbeat_timeout: float, policy: StaleJobPolicy) -> RecoveryResult:
    """One stale-worker sweep: find, decide per row, store; report what was written."""
    scan = await backend.find_stale_jobs(FindStaleJobsParams(heartbeat_timeout=heartbeat_timeout))
    if scan.skipped:
        return RecoveryResult(skipped=True)
    rescues = [decide_rescue(row, policy=policy, heartbeat_timeout=heartbeat_timeout) for row in scan.orphaned]
    written = await backend.rescue_jobs(RescueJobsParams(rescues=rescues)) if rescues else set()
    applied = tuple(r for r in rescues if r.job_id in written)
    requeued = tuple(r.job_id for r in applied if r.action is not RescueAction.DEAD_LETTER)
    dead = tuple(r.job_id for r in applied if r.action is RescueAction.DEAD_LETTER)
    return RecoveryResult(stale_workers=scan.stale_workers, requeued=requeued, dead_lettered=dead, rescues=applied)
