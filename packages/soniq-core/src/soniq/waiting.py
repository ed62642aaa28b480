"""`app.wait_for(job_id)`: one waiter service per app and event loop, however many waiters.

Every concurrent `wait_for` of one app on one loop shares one task, which asks the store to
watch the new ids (`watch_jobs`), then waits on `wait_for_job_changes` over every waited id
and re-reads only the ids it says changed (all of them when it cannot tell). With
`push_job_changes` it also reads each new id again at `SECOND_LOOKS` and everything every
`SAFETY_REREAD_SECONDS`, in case a change was missed; without push the call simply sleeps
`poll_interval`, so the cost is one read per waited job per poll interval and never one poll
loop per waiter. The task ends when the last waiter is gone, and `app.close()` ends it too.

On a backend without the `CancelChannel` role there is nothing to watch: the task reads every
waited id once per `poll_interval` (`get_job`). Without the `DeadLetterStore` role a job whose
row left the jobs table cannot be told apart (dead-lettered, deleted or pruned): see `read_outcome`.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from soniq import features
from soniq.backend import CancelChannel, DeadLetterStore, has_role
from soniq.errors import JobCancelledError, JobFailedError, JobNotFoundError, SoniqError
from soniq.job_views import dead_letter_job_dict, job_dict
from soniq.params import GetDeadLetterParams, GetJobParams, WaitForJobChangesParams, WatchJobsParams
from soniq.records import JobStatus
from soniq.validation import JobOptionsError

if TYPE_CHECKING:
    from soniq.app_context import AppContext
    from soniq.backend import QueueStore

logger = logging.getLogger("soniq.waiting")

SAFETY_REREAD_SECONDS = 5.0
"""With push, every waited id is read again this often whatever the store said."""
READ_BATCH = 32
"""Reads run this many at a time."""
SECOND_LOOKS = (0.5, 2.0)
"""Seconds after a job is first waited for at which it is read again: a push store may still be
opening its listener when the first wait call starts, and a change published before it listens
is lost (found then at these looks instead of the safety re-read)."""
MAX_CALLS_IN_FLIGHT = 16
"""Wait calls kept at once (a new one starts when new ids are waited for); past it the oldest is
dropped and its ids read again instead."""
MAX_CONSECUTIVE_ERRORS = 3
"""Store errors in a row after which the waiters are given the error instead of waiting on."""


@dataclass(frozen=True, slots=True)
class Finished:
    """A job that will not change any more: its result, or how to build the error to raise."""

    result: Any = None
    error: Callable[[], Exception] | None = None

    def settle(self, future: asyncio.Future[Any]) -> None:
        if future.done():
            return
        if self.error is not None:
            future.set_exception(self.error())  # a fresh exception per waiter: tracebacks stay their own
        else:
            future.set_result(self.result)


async def read_outcome(backend: QueueStore, job_id: str, *, seen_before: bool) -> Finished | None:
    """The job's final state, or None while it is `queued` or `processing`.

    A job with no row in the jobs table is `JobFailedError` when its dead-letter row is found, else
    `JobNotFoundError`. On a backend without the `DeadLetterStore` role the dead-letter rows are not
    read, so a dead-lettered job is `JobNotFoundError` too (its message says why): never a result,
    and never a wait that goes on for a job that will not run again."""
    row = await backend.get_job(GetJobParams(job_id=job_id))
    if row is not None:
        if row.status is JobStatus.DONE:
            return Finished(result=row.result)
        if row.status is JobStatus.CANCELLED:
            data = job_dict(row)
            return Finished(error=lambda: JobCancelledError(job_id, row.last_error, data))
        return None
    if not has_role(backend, DeadLetterStore):
        message = (
            f"job {job_id} is not in the jobs table, and {type(backend).__name__} keeps no readable dead-letter "
            "rows (no DeadLetterStore role): it was dead-lettered, deleted or pruned, or never existed"
        )
        return Finished(error=lambda: JobNotFoundError(job_id, message))
    dead = await features.dead_letter_store(backend).get_dead_letter(GetDeadLetterParams(job_id=job_id))
    if dead is not None:
        data = dead_letter_job_dict(dead)
        return Finished(error=lambda: JobFailedError(job_id, dead.last_error, data))
    if not seen_before:
        return Finished(error=lambda: JobNotFoundError(job_id))
    message = (
        f"job {job_id} no longer exists: its row was deleted while it was waited for (a job that completes "
        "with result_ttl=0 deletes its row, result included, so wait for it with a result_ttl above 0; "
        "delete_job and pruning delete rows too)"
    )
    return Finished(error=lambda: JobNotFoundError(job_id, message))


async def _poll(seconds: float) -> set[str] | None:
    """What waiting for changes is without a `CancelChannel`: a sleep, after which every id is read."""
    await asyncio.sleep(seconds)
    return None


def _retrieve(task: asyncio.Future[Any]) -> None:
    """A wait call given up on: whatever it ended with no longer matters (and must not be logged at exit)."""
    if not task.cancelled():
        task.exception()


def check_timeout(timeout: object) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) or timeout < 0:
        raise JobOptionsError(f"timeout must be None or a finite number of seconds >= 0, got {timeout!r}")
    return float(timeout)


class JobWaiter:
    """The waiters of one app on one event loop, served by one background task."""

    def __init__(self, context: AppContext) -> None:
        self._context = context
        self._futures: dict[str, list[asyncio.Future[Any]]] = {}
        self._fresh: set[str] = set()
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # However many wait_for calls start at once, at most READ_BATCH first reads are in flight,
        # so a burst of waiters never asks the backend for more connections than its pool holds.
        self._first_reads = asyncio.Semaphore(READ_BATCH)

    @property
    def waited_ids(self) -> frozenset[str]:
        return frozenset(self._futures)

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def wait(self, job_id: str, timeout: float | None) -> Any:
        backend = await self._context.connected_backend()
        async with self._first_reads:
            finished = await read_outcome(backend, job_id, seen_before=False)
        if finished is not None:
            if finished.error is not None:
                raise finished.error()
            return finished.result
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        if timeout == 0:
            raise TimeoutError(f"job {job_id} has not finished (timeout=0)")
        self._futures.setdefault(job_id, []).append(future)
        self._fresh.add(job_id)
        self._changed.set()
        if not self.running:
            self._task = loop.create_task(self._serve(), name="soniq-wait-for")
        try:
            async with asyncio.timeout(timeout):
                return await future
        except TimeoutError:
            if future.done() and not future.cancelled():
                return future.result()  # settled in the same instant the deadline passed
            raise TimeoutError(f"job {job_id} did not finish within {timeout:g}s") from None
        finally:
            self._forget(job_id, future)

    def _forget(self, job_id: str, future: asyncio.Future[Any]) -> None:
        waiting = self._futures.get(job_id)
        if waiting is None:
            return
        if future in waiting:
            waiting.remove(future)
        if not waiting:
            del self._futures[job_id]
            if not self._futures:
                self._changed.set()  # the service sees nobody waits and ends now, not at its next timeout

    def _settle(self, job_id: str, finished: Finished) -> None:
        for future in self._futures.pop(job_id, []):
            finished.settle(future)

    async def _read(self, backend: QueueStore, ids: Iterable[str]) -> None:
        wanted = [job_id for job_id in ids if job_id in self._futures]
        for start in range(0, len(wanted), READ_BATCH):
            chunk = wanted[start : start + READ_BATCH]
            outcomes = await asyncio.gather(*(read_outcome(backend, i, seen_before=True) for i in chunk))
            for job_id, finished in zip(chunk, outcomes, strict=True):
                if finished is not None:
                    self._settle(job_id, finished)

    async def _serve(self) -> None:
        backend = await self._context.connected_backend()
        channel = features.cancel_channel(backend) if has_role(backend, CancelChannel) else None
        push = channel is not None and backend.capabilities.push_job_changes
        timeout = SAFETY_REREAD_SECONDS if push else self._context.settings.poll_interval
        # Every wait call in flight, oldest first, with the ids it covers. A call is never cancelled
        # while waiters remain (a store may already have handed it a change): each one ends by its
        # own timeout and its answer is read. The newest always covers every waited id.
        calls: dict[asyncio.Future[set[str] | None], tuple[str, ...]] = {}
        latest: asyncio.Future[set[str] | None] | None = None
        last_full_read = time.monotonic()
        looks: list[tuple[float, frozenset[str]]] = []  # (when, ids) second looks, earliest first
        errors = 0
        try:
            while self._futures:
                try:
                    fresh, self._fresh = self._fresh, set()
                    self._changed.clear()
                    if fresh and channel is not None:
                        await channel.watch_jobs(WatchJobsParams(job_ids=sorted(fresh)))
                    reread: set[str] = set()
                    # Without push a call only sleeps: the one in flight ends in a full read anyway.
                    if latest is None or latest.done() or (fresh and push):
                        ids = tuple(sorted(self._futures))
                        params = WaitForJobChangesParams(job_ids=ids, timeout=timeout)
                        latest = asyncio.ensure_future(
                            channel.wait_for_job_changes(params) if channel is not None else _poll(timeout)
                        )
                        calls[latest] = ids
                        await asyncio.sleep(0)  # let the new call subscribe before the read below
                        if len(calls) > MAX_CALLS_IN_FLIGHT:
                            oldest = next(iter(calls))
                            reread.update(calls.pop(oldest))  # what it may have been told is read instead
                            oldest.cancel()
                            oldest.add_done_callback(_retrieve)
                    if fresh or reread:
                        # Read after watching and subscribing: a job that finished before that is seen here,
                        # one that finishes after it publishes a change.
                        await self._read(backend, fresh | reread)
                    if fresh and push:
                        now = time.monotonic()
                        looks = sorted([*looks, *((now + delay, frozenset(fresh)) for delay in SECOND_LOOKS)])
                    if looks and looks[0][0] <= time.monotonic():
                        due = {i for when, ids in looks if when <= time.monotonic() for i in ids}
                        looks = [(when, ids) for when, ids in looks if when > time.monotonic()]
                        await self._read(backend, due)
                    if not self._futures:
                        break
                    woken: asyncio.Future[Any] = asyncio.ensure_future(self._changed.wait())
                    watched: set[asyncio.Future[Any]] = {*calls, woken}
                    until_look = max(looks[0][0] - time.monotonic(), 0.0) if looks else None
                    try:
                        done, _ = await asyncio.wait(watched, timeout=until_look, return_when=asyncio.FIRST_COMPLETED)
                    finally:
                        woken.cancel()
                    answered = [call for call in calls if call in done]
                    if not answered:
                        continue  # new waiters, none left, or a second look is due
                    changed: set[str] = set()
                    unknown = False
                    for call in answered:
                        del calls[call]
                        result = call.result()
                        if result is None:
                            unknown = True
                        else:
                            changed.update(result)
                    now = time.monotonic()
                    if unknown or now - last_full_read >= SAFETY_REREAD_SECONDS:
                        last_full_read = now
                        await self._read(backend, list(self._futures))
                    elif changed:
                        await self._read(backend, changed)
                    errors = 0
                except Exception as exc:
                    errors += 1
                    if errors >= MAX_CONSECUTIVE_ERRORS:
                        self._fail_all(exc)
                        return
                    logger.warning("waiting for jobs: the store failed (%s); trying again", exc)
                    await asyncio.sleep(self._context.settings.poll_interval)
        finally:
            for call in calls:
                call.cancel()
                call.add_done_callback(_retrieve)

    def _fail_all(self, exc: Exception) -> None:
        for job_id in list(self._futures):
            error = SoniqError(f"waiting for job {job_id} failed: the store kept failing ({exc})")
            self._settle(job_id, Finished(error=lambda error=error: error))  # type: ignore[misc]

    async def close(self) -> None:
        """Stop the service; waiters still waiting get a `SoniqError` saying the app was closed."""
        task, self._task = self._task, None
        for job_id in list(self._futures):
            message = f"the app was closed while waiting for job {job_id}"
            self._settle(job_id, Finished(error=lambda message=message: SoniqError(message)))  # type: ignore[misc]
        if task is not None and not task.done():
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
