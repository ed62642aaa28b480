"""How long a finished job's row (and its result) is kept: the `result_ttl` setting.

None keeps the row until it is deleted by hand; 0 deletes it as the job completes (the
completion write itself deletes, fenced like any other); N > 0 stores
``expires_at = completion time + N seconds`` and the leader's pruning deletes the row
once that time has passed.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from soniq.params import JobResult


def completion_entry(job_id: str, result: Any, *, result_ttl: float | None, now: datetime | None = None) -> JobResult:
    """The `complete_jobs` entry of one successful run under `result_ttl`."""
    if result_ttl is None:
        return JobResult(job_id=job_id, result=result)
    if result_ttl == 0:
        return JobResult(job_id=job_id, result=None, delete_row=True)
    finished = now if now is not None else datetime.now(UTC)
    return JobResult(job_id=job_id, result=result, expires_at=finished + timedelta(seconds=result_ttl))
