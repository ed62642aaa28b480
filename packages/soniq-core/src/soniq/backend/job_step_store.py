"""The `JobStepStore` role: a running job's completed steps and its last checkpoint, stored
with the job so that a re-run of the same job id resumes where the last run stopped.

Storage: each `soniq_jobs` row carries `steps` (a JSON object, step name to the step's JSON
result, empty at enqueue) and `checkpoint` (one JSON value, none at enqueue). Core encodes
the values and checks their sizes; the backend stores the JSON text it is given and returns
it decoded in `JobRecord.steps` and `JobRecord.checkpoint` (from `get_job` and from the
claim, so a handler sees them without another read).

Both writes are fenced like every worker write (``status = 'processing' AND worker_id =
<worker_id>``): a worker that lost its row writes nothing and gets False. Nothing else in the
protocol clears them: a nack, a retry, a snooze, stale recovery (release or requeue) and a
cancel request keep both, so every re-run of the same id sees what the last run stored. A
dead-lettered row does not carry them to the dead-letter table; a replayed job starts afresh.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from soniq.params import SaveCheckpointParams, SaveStepParams

VERSION = 1
"""The version of `JobStepStore` this soniq-core speaks."""


@runtime_checkable
class JobStepStore(Protocol):
    """Completed steps and checkpoints of running jobs (see the module's text)."""

    async def save_step(self, params: SaveStepParams, /) -> bool:
        """Set ``steps[name] = value`` on the row (adding or replacing that one key, leaving
        the others), fenced, atomic. True when written, False when the worker does not own
        the row (or there is no row)."""

    async def save_checkpoint(self, params: SaveCheckpointParams, /) -> bool:
        """Set ``checkpoint = value`` on the row, fenced, atomic. True when written."""


__all__ = ["VERSION", "JobStepStore", "SaveCheckpointParams", "SaveStepParams"]
