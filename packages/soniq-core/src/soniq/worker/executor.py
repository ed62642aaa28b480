"""Calling handlers: async ones on the loop, plain functions in the bounded sync pool."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
from collections.abc import Mapping
from typing import Any

from soniq.errors import Snooze
from soniq.worker._runs import JobRun, Outcome
from soniq.worker.state import RunPhase


def _outcome_from_exception(exc: BaseException, *, timed_out: bool = False) -> Outcome:
    if isinstance(exc, Snooze):
        return Outcome(ok=False, error=exc, snooze_seconds=exc.seconds)
    return Outcome(ok=False, error=exc, timed_out=timed_out)


class Executor:
    """Owns the sync thread pool and its permits.

    Saturation is enforced after the claim (the handler kind is known only
    then): a sync job holds its slot while it waits for a permit, and that
    wait is cancellable, so such a job is treated as the async branch at
    shutdown. A permit is released when the thread returns, not when the
    worker stops waiting for it, so a timed-out thread keeps its permit.
    """

    def __init__(self, pool: concurrent.futures.ThreadPoolExecutor, pool_size: int) -> None:
        self._pool = pool
        self._permits = asyncio.Semaphore(pool_size)
        self.live_threads: set[concurrent.futures.Future[Any]] = set()
        self._threads_changed = asyncio.Event()

    async def call_async(self, run: JobRun, args: Mapping[str, Any], timeout: float | None) -> Outcome:
        assert run.definition is not None
        run.phase = RunPhase.RUNNING_ASYNC
        deadline = asyncio.timeout(timeout)
        try:
            async with deadline:
                result = await run.definition.func(**args)
        except asyncio.CancelledError:
            raise
        except TimeoutError as exc:
            if deadline.expired():
                return Outcome(ok=False, error=TimeoutError(f"job timed out after {timeout:g}s"), timed_out=True)
            return _outcome_from_exception(exc)
        except BaseException as exc:
            return _outcome_from_exception(exc)
        return Outcome(ok=True, result=result)

    async def call_sync(self, run: JobRun, args: Mapping[str, Any], timeout: float | None) -> Outcome:
        assert run.definition is not None
        run.phase = RunPhase.WAITING_PERMIT
        await self._permits.acquire()
        loop = asyncio.get_running_loop()
        context = contextvars.copy_context()
        call = functools.partial(context.run, run.definition.func, **args)
        try:
            future = self._pool.submit(call)
        except BaseException:
            self._permits.release()
            raise
        run.phase = RunPhase.RUNNING_SYNC
        run.thread_future = future
        self.live_threads.add(future)
        future.add_done_callback(lambda f: loop.call_soon_threadsafe(self._thread_returned, f))
        waiter = asyncio.wrap_future(future, loop=loop)
        try:
            if timeout is None:
                result = await asyncio.shield(waiter)
            else:
                try:
                    result = await asyncio.wait_for(asyncio.shield(waiter), timeout)
                except TimeoutError:
                    if not future.done() and not run.pinned:
                        return Outcome(
                            ok=False, error=TimeoutError(f"job timed out after {timeout:g}s"), timed_out=True
                        )
                    # Shutdown's force path fired first: only the thread's return decides the row now.
                    result = await asyncio.shield(waiter)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            return _outcome_from_exception(exc)
        return Outcome(ok=True, result=result)

    def _thread_returned(self, future: concurrent.futures.Future[Any]) -> None:
        self._permits.release()
        self.live_threads.discard(future)
        self._threads_changed.set()

    async def wait_threads_changed(self) -> None:
        self._threads_changed.clear()
        await self._threads_changed.wait()
