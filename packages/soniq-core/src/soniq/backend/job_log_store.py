"""The `JobLogStore` role: the log records a job's handler wrote through `ctx.logger`, stored
with the job.

Storage: each `soniq_jobs` row carries `logs` (JSON text, none at enqueue) and so does each
`soniq_dead_letter_jobs` row. Core decides everything about the records: it keeps the run's
list, appends the handler's records, drops the oldest with a marker once the list is over the
setting `job_log_max_bytes`, encodes it (`soniq.backend.encode_job_logs`) and hands the
backend the whole text, at most a few times a second and once more before the run settles.
The backend stores the text as given and returns it as given.

Guarantees:

- `save_job_logs` replaces the row's `logs`, fenced like every worker write (``status =
  'processing' AND worker_id = <worker_id>``): a worker that lost its row writes nothing and
  gets False.
- Nothing else in the protocol clears `logs`: a nack, a retry, a snooze, stale recovery and
  completion keep them, so every run of the same job id appends to one log.
- Every move of a row to the dead-letter table (`dead_letter_job`, `rescue_jobs`,
  `expire_unknown_jobs`, a dependency cascade) carries `logs` to the dead-letter row, so the
  log of a dead-lettered job stays readable; a replayed job starts with no logs.
- `get_job_logs` returns the job row's logs when it has any, else the logs of the dead-letter
  row with that id (a job replayed under its own id shows its earlier log until it logs again),
  else None. Deleting a row (retention, pruning, purge, delete) deletes its logs with it.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from soniq.params import GetJobLogsParams, SaveJobLogsParams

VERSION = 1
"""The version of `JobLogStore` this soniq-core speaks."""


@runtime_checkable
class JobLogStore(Protocol):
    """Log records of jobs (see the module's text)."""

    async def save_job_logs(self, params: SaveJobLogsParams, /) -> bool:
        """Set ``logs = params.logs_json`` on the row, fenced, atomic. True when written, False
        when the worker does not own the row (or there is no row)."""

    async def get_job_logs(self, params: GetJobLogsParams, /) -> str | None:
        """The job row's logs text when it has any, else its dead-letter row's, else None."""


__all__ = ["VERSION", "GetJobLogsParams", "JobLogStore", "SaveJobLogsParams"]
