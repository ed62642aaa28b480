"""Waiting for jobs in the memory store.

Every backend instance on a store shares its waiters, so a finish or a cancel
request made through any of them, from any thread, wakes every waiter on that
id at once: the memory store has `push_job_changes` for all its users (they
all live in this process).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

from soniq.backend import JobStatus
from soniq_memory.store import MemoryStore

_FINISHED = (JobStatus.DONE, JobStatus.CANCELLED)


def watch(store: MemoryStore, job_ids: Sequence[str]) -> None:
    with store.lock:
        store.watched.update(job_id for job_id in job_ids if job_id in store.jobs)


async def wait(store: MemoryStore, job_ids: Sequence[str], timeout: float) -> set[str]:
    """The ids among `job_ids` that changed: already finished (or gone) at the call, or published
    while waiting; empty after `timeout` without a change."""
    wanted = frozenset(job_ids)
    with store.lock:
        ended = {job_id for job_id in wanted if (row := store.jobs.get(job_id)) is None or row.status in _FINISHED}
        if ended:
            return ended
        waiter = store.add_change_waiter(wanted)
    try:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(waiter.future, timeout=max(timeout, 0.0))
    finally:
        with store.lock:
            store.remove_change_waiter(waiter)
    return set(waiter.changed)
