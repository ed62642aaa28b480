"""Completion and handler-start writes batched while the store is busy.

A `done` write is queued and the handler's slot is freed at once; one flush
in flight at a time takes everything queued so far, so under load many
completions share one round trip, and when idle a completion is written
immediately. Each row stays fenced by owner. A batch the store refuses for a
reason other than a lost connection is written again row by row, and only
the row that is refused fails (its run is settled as a failure). A row whose handler returned
but whose flush has not landed is still `processing` in the store: if the
process is SIGKILLed in that window, stale recovery runs the job again
(at-least-once). The worker drains the batcher before STOPPED.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from soniq.backend import QueueStore
from soniq.params import CompleteJobsParams, MarkStartedParams
from soniq.retention import completion_entry
from soniq.worker.writes import write_with_retry

logger = logging.getLogger("soniq.worker")

MAX_BATCH = 500

P = TypeVar("P")


class FencedBatcher(Generic[P]):
    """Per-row writes fenced by owner, queued and flushed together.

    `write` stores a batch of (job id, payload) and returns the ids it wrote
    (None: the store stayed unreachable). Each queued row's future answers True
    (written), False (this worker no longer owns the row) or None; a batch the
    store refuses is written again row by row, so only the refused row's future
    raises.
    """

    def __init__(
        self, label: str, task_name: str, write: Callable[[list[tuple[str, P]]], Awaitable[set[str] | None]]
    ) -> None:
        self._label = label
        self._task_name = task_name
        self._write = write
        self._pending: list[tuple[str, P, asyncio.Future[bool | None]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._inflight: list[tuple[str, P, asyncio.Future[bool | None]]] = []

    def submit(self, job_id: str, payload: P) -> asyncio.Future[bool | None]:
        future: asyncio.Future[bool | None] = asyncio.get_running_loop().create_future()
        self._pending.append((job_id, payload, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush(), name=self._task_name)
        return future

    async def drain(self) -> None:
        while self._flusher is not None and not self._flusher.done():
            await asyncio.shield(self._flusher)

    async def _flush(self) -> None:
        try:
            await self._flush_pending()
        except Exception as exc:
            # A flusher that breaks must not leave handlers waiting forever. Every queued row fails
            # (its run is settled as a failure, or left to stale recovery); the next submit starts a new one.
            logger.exception("%s writer failed; failing the %d rows it held", self._label, len(self._pending))
            pending, self._pending, self._inflight = [*self._inflight, *self._pending], [], []
            for _, _, future in pending:
                _fail(future, exc)

    async def _flush_pending(self) -> None:
        while self._pending:
            batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
            self._inflight = batch
            try:
                written = await self._write([(job_id, payload) for job_id, payload, _ in batch])
            except Exception as exc:
                if len(batch) == 1:
                    _fail(batch[0][2], exc)
                    continue
                # One row the store refuses must not hold back the others: write them one by one.
                logger.warning("%s batch of %d refused (%s); writing its rows one by one", self._label, len(batch), exc)
                for job_id, payload, future in batch:
                    try:
                        one = await self._write([(job_id, payload)])
                    except Exception as exc:
                        # The settler turns this into a failed run of that one job, with the store's error.
                        _fail(future, exc)
                        continue
                    _answer(future, None if one is None else job_id in one)
                continue
            for job_id, _, future in batch:
                _answer(future, None if written is None else job_id in written)


class CompletionBatcher:
    """`done` writes: the handler's slot is freed at once and its result queued."""

    def __init__(
        self,
        backend: QueueStore,
        worker_id: str,
        give_up_at: Callable[[], float | None],
        *,
        result_ttl: float | None = None,
    ) -> None:
        self._backend = backend
        self._result_ttl = result_ttl
        self._worker_id = worker_id
        self._give_up_at = give_up_at
        self._batcher: FencedBatcher[Any] = FencedBatcher("completion", "soniq-completions", self._write)

    def complete(self, job_id: str, result: Any) -> asyncio.Future[bool | None]:
        """Queue a fenced `done` write; the future says whether it was written (None: store unreachable)."""
        return self._batcher.submit(job_id, result)

    async def drain(self) -> None:
        await self._batcher.drain()

    async def _write(self, rows: list[tuple[str, Any]]) -> set[str] | None:
        params = CompleteJobsParams(
            worker_id=self._worker_id,
            results=[completion_entry(job_id, result, result_ttl=self._result_ttl) for job_id, result in rows],
        )
        return await write_with_retry(
            f"done for {len(rows)} jobs",
            functools.partial(self._backend.complete_jobs, params),
            give_up_at=self._give_up_at,
        )


class StartBatcher:
    """Handler-start marks (`mark_started`) batched like completions.

    With `prefetch` (or the `dead_letter` zombie policy) the claim leaves
    `started_at` empty and each run records its start just before its handler
    is called. Every run that starts within the same event-loop tick, or while
    the previous mark is in flight, shares one fenced write; each run still
    awaits its own row's answer before its handler runs, so a start is always
    durable before any user code does something. The future says whether the
    row was written (False: this worker no longer owns it; None: the store
    stayed unreachable, the handler runs and stale recovery judges the row).
    """

    def __init__(self, backend: QueueStore, worker_id: str) -> None:
        self._backend = backend
        self._worker_id = worker_id
        self._batcher: FencedBatcher[None] = FencedBatcher("handler-start", "soniq-start-marks", self._write)

    def mark(self, job_id: str) -> asyncio.Future[bool | None]:
        return self._batcher.submit(job_id, None)

    async def _write(self, rows: list[tuple[str, None]]) -> set[str] | None:
        job_ids = [job_id for job_id, _ in rows]
        params = MarkStartedParams(worker_id=self._worker_id, job_ids=job_ids)
        what = f"handler start for job {job_ids[0]}" if len(job_ids) == 1 else f"handler start for {len(job_ids)} jobs"
        return await write_with_retry(what, functools.partial(self._backend.mark_started, params), give_up_at=None)


def _answer(future: asyncio.Future[bool | None], value: bool | None) -> None:
    if not future.done():
        future.set_result(value)


def _fail(future: asyncio.Future[bool | None], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)
