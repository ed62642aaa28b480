"""The `JobProgressStore` role: how far a running job has got, stored with the job.

Storage: each `soniq_jobs` row carries `progress` (one JSON object, none at enqueue). Core
builds the object (``{"done", "total", "message", "updated_at"}``), checks it, coalesces a
handler's calls to at most a few writes a second, and hands the backend the JSON text; the
backend stores that text and returns it decoded in `JobRecord.progress` from every read of
the row (`get_job`, pages, the claim).

The write is fenced like every worker write (``status = 'processing' AND worker_id =
<worker_id>``): a worker that lost its row writes nothing and gets False. Nothing else in the
protocol clears `progress`: a nack, a retry, a snooze, stale recovery and completion keep the
last value, so an operator reads where a finished or cut-off run stood. A dead-lettered row
does not carry it to the dead-letter table, and a replayed job starts without one.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from soniq.params import SaveProgressParams

VERSION = 1
"""The version of `JobProgressStore` this soniq-core speaks."""


@runtime_checkable
class JobProgressStore(Protocol):
    """The progress of running jobs (see the module's text)."""

    async def save_progress(self, params: SaveProgressParams, /) -> bool:
        """Set ``progress = params.progress_json`` on the row, fenced, atomic. True when written,
        False when the worker does not own the row (or there is no row)."""


__all__ = ["VERSION", "JobProgressStore", "SaveProgressParams"]
