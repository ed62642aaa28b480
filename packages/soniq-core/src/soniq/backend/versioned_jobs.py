"""The `VersionedJobs` role: rows carry the version of the code that enqueued them, and a
worker never claims a row newer than its own code.

The role adds no method. A backend that declares it promises:

- `QueueStore.enqueue_jobs` stores `NewJob.version` (an integer >= 1) in the row's `version`
  column; a row stored before the column existed, or by a producer that sent none, has
  version 1. `JobRecord.version` returns it from every read.
- `QueueStore.claim_jobs` honours `ClaimJobsParams.max_versions`: a row whose `job_name` is a
  key of it and whose `version` is greater than that key's value is neither claimed nor
  touched (it stays `queued` for a worker that has that code, exactly like a row whose name
  the worker does not know). Names that are not keys are claimed at any version. When
  every value is the same number a backend may compare with that one number.
- `QueueStore.register_worker` stores `WorkerInfo.job_versions` and `list_workers` returns
  it in `WorkerRecord.job_versions`, so operators see which versions each worker runs.

Core decides everything else: it upgrades an older row's arguments through the job's chain
in the worker, and dead-letters a row no chain reaches (reason ``no_upgrade_path``). A
backend without the role is never sent `max_versions`, and a job declared with a version
above 1 cannot be enqueued on it (`MissingBackendRoleError`).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

VERSION = 1
"""The version of `VersionedJobs` this soniq-core speaks."""


@runtime_checkable
class VersionedJobs(Protocol):
    """A marker: rows carry `version` and claims honour `max_versions` (see the module's text)."""


__all__ = ["VERSION", "VersionedJobs"]
