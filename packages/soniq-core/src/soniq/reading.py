"""The read API of `Soniq`: a job, its result, a page of jobs, queue counts, cancelling, waiting.

`Reading` is a mixin of `Soniq`; each method is documented where it is defined here. The part
of it an observer is handed is `soniq.observers.AppReads`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from soniq import features
from soniq.backend import CancelChannel, DeadLetterStore, QueueStore, has_role
from soniq.encryption import opened
from soniq.errors import JobNotFoundError
from soniq.job_logs import decode_job_logs
from soniq.job_views import dead_letter_job_dict, job_dict
from soniq.log_escape import escape_line
from soniq.params import (
    CancelJobParams,
    DeleteJobParams,
    GetDeadLetterParams,
    GetJobLogsParams,
    GetJobParams,
    QueueStatsParams,
    RequestCancelParams,
)
from soniq.records import CancelOutcome, JobStatus, RecoveryResult
from soniq.validation import JobOptionsError, check_page, check_queue_filter, lookup_id
from soniq.waiting import JobWaiter, check_timeout
from soniq.worker.loops import sweep_once

if TYPE_CHECKING:
    from soniq.app_context import AppContext
    from soniq.bus import ObservationBus
    from soniq.settings import Settings
    from soniq.sync_bridge import SyncBridge

__all__ = ["Reading", "cancel_without_channel", "printable_id", "request_cancel"]

logger = logging.getLogger("soniq")


class Reading:
    """Reading and managing stored jobs; a mixin of `Soniq`."""

    if TYPE_CHECKING:
        settings: Settings
        context: AppContext
        _sync: SyncBridge
        _waiters: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, JobWaiter]

        @property
        def backend(self) -> QueueStore: ...

        @property
        def bus(self) -> ObservationBus: ...

        async def connected_backend(self) -> QueueStore: ...

    async def get_job(self, job_id: str) -> dict[str, Any] | None:
        """The job as a dict (with its result), or None; see `job_dict` for the keys.

        A dead-lettered job comes back as its dead-letter row with ``status="dead_letter"``
        (see `dead_letter_job_dict`). An id no store can hold (NUL, a lone surrogate, over
        `soniq.validation.MAX_ID_LENGTH` characters) is None without asking the store.

        On a backend without the `DeadLetterStore` role the dead-letter rows cannot be read, so a
        dead-lettered job is None, as a deleted or never-enqueued one is: None then means "not in
        the jobs table", never "still to run" nor "succeeded"."""
        key = lookup_id(job_id)
        if key is None:
            return None
        backend = await self.connected_backend()
        row = await backend.get_job(GetJobParams(job_id=key))
        if row is not None:
            return job_dict(row)
        if not has_role(backend, DeadLetterStore):
            return None
        dead = await features.dead_letter_store(backend).get_dead_letter(GetDeadLetterParams(job_id=key))
        return dead_letter_job_dict(dead) if dead is not None else None

    async def get_job_logs(self, job_id: str) -> list[dict[str, Any]]:
        """The records the job's handler wrote through `ctx.logger`, oldest first, each ``{"at",
        "level", "message"}`` (``at`` an aware datetime, ``level`` a name such as ``"INFO"``).

        Every run of the job appends to one log, kept with the job (a dead-lettered job's too)
        and deleted with it; when it grew past `job_log_max_bytes` the first record says how many
        were dropped. Empty for a job that logged nothing and for an id that is not stored. Needs
        the backend role `JobLogStore`."""
        key = lookup_id(job_id)
        backend = await self.connected_backend()
        store = features.job_log_store(backend)
        if key is None:
            return []
        return decode_job_logs(await store.get_job_logs(GetJobLogsParams(job_id=key)))

    def get_job_sync(self, job_id: str) -> dict[str, Any] | None:
        """`get_job` for synchronous code; see `enqueue_sync`."""
        return self._sync.run(self.get_job(job_id), what="get_job")

    async def get_result(self, job_id: str, result_model: Any = None) -> Any:
        """The stored result of a `done` job, None for a job that is not done (or not found).

        With `result_model` (a pydantic model, or any class taking the result), the result is
        validated into it: ``model_validate`` when the class has one, else ``result_model(**result)``
        for a dict and ``result_model(result)`` otherwise. A row deleted by ``result_ttl`` is not found.
        """
        key = lookup_id(job_id)
        if key is None:
            return None
        backend = await self.connected_backend()
        row = await backend.get_job(GetJobParams(job_id=key))
        if row is None or row.status is not JobStatus.DONE or row.result is None:
            return None
        result = opened(row.result, self.settings.encryption_keys)
        if result_model is None:
            return result
        validate = getattr(result_model, "model_validate", None)
        if callable(validate):
            return validate(result)
        if isinstance(result, Mapping):
            return result_model(**result)
        return result_model(result)

    async def delete_job(self, job_id: str) -> bool:
        """Delete a job's row whatever its status; False when there was none.

        A job that is running keeps running, but its outcome is then written nowhere.
        Dead-letter rows are deleted with ``app.dead_letter.purge``."""
        key = lookup_id(job_id)
        if key is None:
            return False
        backend = await self.connected_backend()
        return await backend.delete_job(DeleteJobParams(job_id=key))

    async def list_jobs(
        self,
        queue: str | None = None,
        status: str | JobStatus | None = None,
        limit: int = 100,
        offset: int = 0,
        *,
        include_results: bool = False,
    ) -> list[dict[str, Any]]:
        """A page of jobs, newest `created_at` first (ties: the larger id first); `result` is None
        unless `include_results` (results may be large).

        `limit` is 1 to `soniq.validation.MAX_PAGE_LIMIT` (10,000), `offset` 0 to `MAX_OFFSET`; a
        `queue` enqueue would refuse (`check_queue_name`: NUL, a lone surrogate...) is `JobOptionsError`.
        A backend without the `OperatorReads` role raises `MissingBackendRoleError`.

        The store pages by keyset (`OperatorReads.job_page`), so `offset` is served by reading the
        first ``offset + limit`` rows and dropping `offset` of them (in reads of 10,000, without
        results, while more than that are left to skip): a deep offset costs in proportion to it.
        To page deep, follow `job_page`'s `next_cursor` instead."""
        from soniq.params import JobCursor, JobPageParams
        from soniq.validation import MAX_PAGE_LIMIT

        features.operator_reads(self.backend, features.LISTING_JOBS)
        check_queue_filter(queue)
        wanted: JobStatus | None = None
        if status is not None:
            try:
                wanted = JobStatus(status)
            except ValueError:
                raise JobOptionsError(
                    f"status must be one of {', '.join(s.value for s in JobStatus)}, got {status!r}"
                ) from None
        check_page(limit, offset)
        backend = features.operator_reads(await self.connected_backend(), features.LISTING_JOBS)
        page_params = JobPageParams(
            statuses=None if wanted is None else [wanted], queues=None if queue is None else [queue]
        )
        before: JobCursor | None = None
        while offset >= MAX_PAGE_LIMIT:  # whole reads of rows to skip
            skipped = await backend.job_page(dataclasses.replace(page_params, before=before, limit=MAX_PAGE_LIMIT))
            if skipped.next_cursor is None or not skipped.rows:
                return []  # no row left beyond the ones skipped
            offset -= len(skipped.rows)
            before = skipped.next_cursor
        page = await backend.job_page(
            dataclasses.replace(page_params, before=before, limit=offset + limit, include_results=include_results)
        )
        # Also here, so a store that still reads the column cannot make a listing heavy.
        return [job_dict(row, with_result=include_results) for row in page.rows[offset:]]

    async def cancel_job(self, job_id: str) -> bool:
        """Cancel a job: True when it was queued and is now `cancelled`, or is running and its
        worker was asked to stop it; False when it had already finished, or no job has the id
        (as soniq 0.1.0 answered; `cancel` raises for that instead)."""
        outcome = await self._request_cancel(job_id)
        if outcome is CancelOutcome.NOT_FOUND:
            logger.warning("cancel_job: no job has id %s; nothing cancelled", printable_id(job_id))
        return outcome in (CancelOutcome.CANCELLED, CancelOutcome.REQUESTED)

    async def cancel(self, job_id: str) -> CancelOutcome:
        """Cancel a job, whatever its status, and say what happened.

        `CANCELLED`: it was queued and is now `cancelled` (its dependents follow their policy).
        `REQUESTED`: it is running; its worker is told through the store and stops it (an async
        handler is cancelled, a sync one sees ``ctx.cancel_requested``), and the row ends
        `cancelled`, unless the job completes first. `ALREADY_FINISHED`: it was `done`,
        `cancelled` or dead-lettered; nothing changed. An id no job has is `JobNotFoundError`.

        On a backend without the `CancelChannel` role a queued job is still cancelled (through
        `QueueStore.cancel_job`), but a running one raises `MissingBackendRoleError` ("cancelling a
        running job") and keeps running.
        """
        outcome = await self._request_cancel(job_id)
        if outcome is CancelOutcome.NOT_FOUND:
            raise JobNotFoundError(str(job_id), f"cannot cancel job {job_id}: no job has that id")
        return outcome

    async def _request_cancel(self, job_id: str) -> CancelOutcome:
        key = lookup_id(job_id)
        if key is None:  # no stored row can have this id
            return CancelOutcome.NOT_FOUND
        backend = await self.connected_backend()
        outcome = await request_cancel(backend, key)
        if outcome is CancelOutcome.ALREADY_FINISHED:
            row = await backend.get_job(GetJobParams(job_id=key))
            if row is not None and row.status is JobStatus.CANCELLED:
                logger.info("job %s is already cancelled; nothing to do", job_id)
            else:
                ended = row.status.value if row is not None else "dead-lettered or deleted"
                logger.info("cancel lost the race: job %s already finished (%s)", job_id, ended)
        return outcome

    async def wait_for(self, job_id: str, timeout: float | None = None) -> Any:
        """Wait until the job finishes and return its result.

        Raises `JobFailedError` when it was dead-lettered, `JobCancelledError` when it was
        cancelled, `JobNotFoundError` when no job has the id or its row vanished (a job with
        ``result_ttl=0`` deletes its row as it completes), and `TimeoutError` after `timeout`
        seconds (None: no limit; 0: only look once). Woken by the store's push channel where it
        has one; however many jobs are waited for, one task per process watches them all.
        """
        limit = check_timeout(timeout)
        key = lookup_id(job_id)
        if key is None:  # no stored row can have this id: what an unknown id gives
            raise JobNotFoundError(str(job_id))
        loop = asyncio.get_running_loop()
        waiter = self._waiters.get(loop)
        if waiter is None:
            waiter = self._waiters[loop] = JobWaiter(self.context)
        return opened(await waiter.wait(key, limit), self.settings.encryption_keys)

    def wait_for_sync(self, job_id: str, timeout: float | None = None) -> Any:
        """`wait_for` for synchronous code; see `enqueue_sync`. Blocks the calling thread."""
        return self._sync.run(self.wait_for(job_id, timeout), what="wait_for")

    async def get_queue_stats(self, queue: str | None = None) -> dict[str, int]:
        """Exactly ``total, queued, processing, done, dead_letter, cancelled``; a `queue` enqueue would
        refuse is `JobOptionsError`."""
        check_queue_filter(queue)
        backend = await self.connected_backend()
        return (await backend.queue_stats(QueueStatsParams(queue=queue))).to_dict()

    async def recover(self) -> RecoveryResult:
        """One stale-worker sweep now (what ``soniq recover`` runs), decided by `soniq.rescue`."""
        backend = await self.connected_backend()
        return await sweep_once(
            backend, self.bus, heartbeat_timeout=self.settings.heartbeat_timeout, policy=self.settings.stale_job_policy
        )


async def request_cancel(backend: QueueStore, job_id: str) -> CancelOutcome:
    """Ask for the job to stop, whatever its status (`CancelChannel.request_cancel`), or on a backend
    without that role what `cancel_without_channel` can do."""
    if has_role(backend, CancelChannel):
        return await features.cancel_channel(backend).request_cancel(RequestCancelParams(job_id=job_id))
    return await cancel_without_channel(backend, job_id)


async def cancel_without_channel(backend: QueueStore, job_id: str) -> CancelOutcome:
    """`CancelChannel.request_cancel` for a backend without that role: a queued job is cancelled
    through `QueueStore.cancel_job`; a running one cannot be reached, which is
    `MissingBackendRoleError` ("cancelling a running job"). A job with no row in the jobs table is
    `ALREADY_FINISHED` when its dead-letter row can be read, else `NOT_FOUND`."""
    for _ in range(CANCEL_ATTEMPTS):
        if await backend.cancel_job(CancelJobParams(job_id=job_id)):
            return CancelOutcome.CANCELLED
        row = await backend.get_job(GetJobParams(job_id=job_id))
        if row is None:
            if has_role(backend, DeadLetterStore):
                dead_letters = features.dead_letter_store(backend)
                if await dead_letters.get_dead_letter(GetDeadLetterParams(job_id=job_id)) is not None:
                    return CancelOutcome.ALREADY_FINISHED
            return CancelOutcome.NOT_FOUND
        if row.status is JobStatus.PROCESSING:
            features.cancel_channel(backend)  # raises: nothing reaches its worker
        if row.status is not JobStatus.QUEUED:
            return CancelOutcome.ALREADY_FINISHED
        # Queued again (a nack or retry between the two reads): try the cancel once more.
    # Claimed every time it was read queued: it is running, as far as this call can tell.
    features.cancel_channel(backend)  # raises
    return CancelOutcome.ALREADY_FINISHED  # not reached


CANCEL_ATTEMPTS = 3
"""Without a CancelChannel, how often a cancel retries a row that went back to `queued` under it."""


def printable_id(job_id: object) -> str:
    """An id as a log line may carry it: control characters, NUL and lone surrogates escaped (a
    handler writing UTF-8 fails on a lone surrogate), and at most 100 characters of it."""
    text = str(job_id)
    return escape_line(text[:100]) + ("..." if len(text) > 100 else "")
