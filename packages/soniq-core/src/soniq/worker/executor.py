"""Calling handlers: async ones in their own task on the loop, plain functions in the bounded sync pool."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import dataclasses
import functools
import json
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any

from soniq.compat.hooks import Middleware, build_chain
from soniq.context import JobContext
from soniq.errors import InternalError, NoUpgradePathError, Snooze, UpgradeFailedError
from soniq.registry import JobDefinition, validated_arguments
from soniq.run_reports import DEFAULT_LOG_MAX_BYTES, RunReports
from soniq.serialization import MAX_RESULT_BYTES
from soniq.speedups import loads
from soniq.steps import JobSteps
from soniq.worker._runs import JobRun, Outcome
from soniq.worker.state import RunPhase

logger = logging.getLogger("soniq.worker")

CANCEL_UNWIND_SECONDS = 1.0
"""How long a handler cancelled by shutdown gets to run its `finally` blocks before the nack."""


CANCELLED_BEFORE_START = Outcome(ok=False, cancelled=True)
"""A cancel request reached the run before its handler was called: the handler never runs."""


class StuckHandlerError(InternalError, TimeoutError):
    """A handler that overran its deadline and did not stop when cancelled."""


def _outcome_from_exception(exc: BaseException, *, timed_out: bool = False) -> Outcome:
    if isinstance(exc, Snooze):
        return Outcome(ok=False, error=exc, snooze_seconds=exc.seconds)
    return Outcome(ok=False, error=exc, timed_out=timed_out)


async def _guarded(coro: Coroutine[Any, Any, Any]) -> tuple[bool, Any]:
    """Run a handler, turning any exception into a value: a task that raises SystemExit or
    KeyboardInterrupt would otherwise take the event loop down with it."""
    try:
        return True, await coro
    except asyncio.CancelledError:
        raise
    except BaseException as exc:
        return False, exc


def _retrieve(task: asyncio.Future[Any]) -> None:
    """Mark a background task's exception as seen (it was reported, or it no longer matters)."""
    if not task.cancelled():
        task.exception()


class Executor:
    """Owns the sync thread pool and its permits, and the handlers the worker gave up on.

    Saturation is enforced after the claim (the handler kind is known only
    then): a sync job holds its slot while it waits for a permit, and that
    wait is cancellable, so such a job is treated as the async branch at
    shutdown. A permit is released when the thread returns, not when the
    worker stops waiting for it, so a timed-out thread keeps its permit. The
    wait for a permit shares the job's deadline; a job without one gives up
    after `cancel_grace` once every permit is held by a thread that overran
    its own deadline, since none of them may ever come back, and is then put
    off (a snooze: its attempts untouched) rather than failed. While every
    permit is held that way the dispatcher claims no sync job at all
    (`sync_pool_exhausted`), so healthy sync jobs wait in the store, for this
    worker's threads to come back or for another worker, instead of burning
    their retries here.
    """

    def __init__(
        self,
        pool: concurrent.futures.ThreadPoolExecutor,
        pool_size: int,
        *,
        cancel_grace: float = 5.0,
        backend: object | None = None,
        max_result_bytes: int = MAX_RESULT_BYTES,
        job_log_max_bytes: int = DEFAULT_LOG_MAX_BYTES,
        on_progress: Callable[[JobRun, dict[str, Any]], None] | None = None,
    ) -> None:
        self._backend = backend
        self._job_log_max_bytes = job_log_max_bytes
        self._on_progress = on_progress
        """Called with each progress value once it is stored (the bus's `on_job_progress`)."""
        """The store `ctx.step` and `ctx.checkpoint` write to (None: they keep values in memory)."""
        self._max_result_bytes = max_result_bytes
        self._pool = pool
        self._pool_size = pool_size
        self._permits = asyncio.Semaphore(pool_size)
        self._cancel_grace = cancel_grace
        self.live_threads: set[concurrent.futures.Future[Any]] = set()
        self.lost_threads: dict[concurrent.futures.Future[Any], tuple[JobRun, float]] = {}
        """Threads still running a handler whose run gave up on them (timed out), with when they started."""
        self.lost_tasks: dict[asyncio.Task[Any], tuple[JobRun, float]] = {}
        """Async handlers that would not stop when cancelled, left to finish in the background."""
        self.lost_thread_history: list[str] = []
        self._threads_changed = asyncio.Event()

    @property
    def sync_pool_exhausted(self) -> bool:
        """Every sync-pool thread is held by a handler that overran its deadline."""
        return len(self.lost_threads) >= self._pool_size

    # -- one call: model check, JobContext, middleware, a returned Snooze --

    async def call(
        self, run: JobRun, timeout: float | None, *, worker_id: str = "", middleware: Sequence[Middleware] = ()
    ) -> Outcome:
        """Call the run's handler with its model checked, its `JobContext` and the middleware around it.

        The worker calls `call_async` / `call_sync` itself for a plain job with no middleware.
        """
        definition = run.definition
        assert definition is not None
        call = self.call_async if definition.is_async else self.call_sync
        outcome = await self._call_wrapped(run, call, timeout, worker_id, middleware)
        if outcome.ok and isinstance(outcome.result, Snooze):  # returned by a middleware
            return _outcome_from_exception(outcome.result)
        return outcome

    async def _call_wrapped(
        self,
        run: JobRun,
        call: Callable[[JobRun, Mapping[str, Any], float | None], Awaitable[Outcome]],
        timeout: float | None,
        worker_id: str,
        middleware: Sequence[Middleware],
    ) -> Outcome:
        definition = run.definition
        assert definition is not None
        if run.job.version != definition.version:
            refused = bring_to_version(run, definition)
            if refused is not None:
                return refused
        job = run.job
        try:
            args = validated_arguments(definition, job.args)
        except Exception as exc:
            return Outcome(ok=False, error=exc)
        steps = JobSteps(
            backend=self._backend,
            job_id=job.id,
            worker_id=worker_id,
            steps=job.steps,
            checkpoint=job.checkpoint,
            max_bytes=self._max_result_bytes,
        )
        on_progress = self._on_progress
        reports = RunReports(
            backend=self._backend,
            job_id=job.id,
            job_name=job.job_name,
            worker_id=worker_id,
            log_max_bytes=self._job_log_max_bytes,
            on_progress=None if on_progress is None else functools.partial(on_progress, run),
            seal_text=None if run.cipher is None else run.cipher.seal_text,
        )
        context = JobContext(
            job_id=job.id,
            job_name=job.job_name,
            attempt=job.attempts + 1,
            max_attempts=job.max_attempts,
            queue=job.queue,
            worker_id=worker_id,
            scheduled_at=job.scheduled_at,
            created_at=job.created_at,
            _cancel=run.cancel_signal(),
            _steps=steps,
            _reports=reports,
        )
        if definition.context_param is not None:
            args[definition.context_param] = context
        try:
            return await self._call_chain(run, call, args, timeout, context, middleware)
        finally:
            await reports.close()  # before the row settles, while this worker still owns it

    async def _call_chain(
        self,
        run: JobRun,
        call: Callable[[JobRun, Mapping[str, Any], float | None], Awaitable[Outcome]],
        args: dict[str, Any],
        timeout: float | None,
        context: JobContext,
        middleware: Sequence[Middleware],
    ) -> Outcome:
        if not middleware:
            return await call(run, args, timeout)
        inner: list[Outcome] = []

        async def handler(_ctx: JobContext) -> Any:
            outcome = await call(run, args, timeout)
            inner.append(outcome)
            if outcome.ok:
                return outcome.result
            assert outcome.error is not None
            raise outcome.error

        try:
            result = await build_chain(middleware, handler)(context)
        except BaseException as exc:
            if inner and inner[-1].error is exc:
                return inner[-1]  # keeps timed_out / stuck
            if isinstance(exc, asyncio.CancelledError):
                raise
            return _outcome_from_exception(exc)
        if inner and inner[-1].ok and inner[-1].result is result:
            return inner[-1]
        return Outcome(ok=True, result=result)

    # -- async handlers --------------------------------------------------------

    async def call_async(self, run: JobRun, args: Mapping[str, Any], timeout: float | None) -> Outcome:
        assert run.definition is not None
        if run.job.version != run.definition.version:  # a plain job's row of another version
            refused = bring_to_version(run, run.definition)
            if refused is not None:
                return refused
            args = run.job.args
        if run.cancel_reached:
            return CANCELLED_BEFORE_START
        run.phase = RunPhase.RUNNING_ASYNC
        run.handler_started = True
        try:
            coro = run.definition.func(**args)
        except Exception as exc:
            return _outcome_from_exception(exc)
        # Its own task, so that a handler swallowing its cancellation cannot keep this run's slot.
        handler = asyncio.get_running_loop().create_task(_guarded(coro), name=f"soniq-handler-{run.job.id}")
        run.handler_task = handler  # a cancel request cancels this task only (soniq.worker.cancel_watch)
        started = time.monotonic()
        try:
            done, _ = await asyncio.wait([handler], timeout=timeout)
        except asyncio.CancelledError:
            handler.cancel()
            await self._give_up_after(handler, run, CANCEL_UNWIND_SECONDS, started)
            raise
        if handler in done:
            return self._async_outcome(handler)
        assert timeout is not None
        run.overran = True
        handler.cancel()
        if await self._give_up_after(handler, run, self._cancel_grace, started):
            _retrieve(handler)
            return Outcome(ok=False, error=TimeoutError(f"job timed out after {timeout:g}s"), timed_out=True)
        error = StuckHandlerError(
            f"job timed out after {timeout:g}s and did not stop within {self._cancel_grace:g}s of being cancelled "
            "(does it catch CancelledError or BaseException?); it was left running in the background"
        )
        return Outcome(ok=False, error=error, timed_out=True, stuck=True)

    async def _give_up_after(
        self, handler: asyncio.Task[tuple[bool, Any]], run: JobRun, grace: float, started: float
    ) -> bool:
        """Wait up to `grace` (or until shutdown cuts it short) for a cancelled handler; True when it stopped."""
        waiters: list[asyncio.Future[Any]] = [handler]
        cut = asyncio.ensure_future(run.grace_cut.wait())
        waiters.append(cut)
        try:
            await asyncio.wait(waiters, timeout=grace, return_when=asyncio.FIRST_COMPLETED)
        finally:
            cut.cancel()
        if handler.done():
            return True
        logger.warning(
            "job %s (%s): the async handler did not stop within %gs of being cancelled (%.1fs after it started); "
            "its slot is freed and the task left running in the background",
            run.job.id,
            run.job.job_name,
            grace,
            time.monotonic() - started,
        )
        self.lost_tasks[handler] = (run, started)
        handler.add_done_callback(self._task_returned)
        return False

    def _task_returned(self, task: asyncio.Task[Any]) -> None:
        entry = self.lost_tasks.pop(task, None)
        _retrieve(task)
        if entry is not None:
            run, started = entry
            logger.warning(
                "job %s (%s): the abandoned async handler finished after %.1fs; its outcome was already written",
                run.job.id,
                run.job.job_name,
                time.monotonic() - started,
            )

    @staticmethod
    def _async_outcome(handler: asyncio.Task[tuple[bool, Any]]) -> Outcome:
        if handler.cancelled():
            # Cancelled by the handler's own code, not by the worker: a failure like any other.
            return Outcome(ok=False, error=asyncio.CancelledError("the handler's task was cancelled"))
        ok, value = handler.result()
        if not ok:
            return _outcome_from_exception(value)
        # A returned Snooze (0.1.0's form) is the same instruction as a raised one.
        return _outcome_from_exception(value) if isinstance(value, Snooze) else Outcome(ok=True, result=value)

    # -- sync handlers -----------------------------------------------------------

    async def call_sync(self, run: JobRun, args: Mapping[str, Any], timeout: float | None) -> Outcome:
        assert run.definition is not None
        if run.job.version != run.definition.version:  # a plain job's row of another version
            refused = bring_to_version(run, run.definition)
            if refused is not None:
                return refused
            args = run.job.args
        run.phase = RunPhase.WAITING_PERMIT
        loop = asyncio.get_running_loop()
        began = loop.time()
        refusal = await self._acquire_permit(timeout)
        if refusal is not None and self.sync_pool_exhausted:
            # No thread may ever come back: hand the job back for later, its attempt unspent.
            return _outcome_from_exception(Snooze(max(1.0, self._cancel_grace), reason=refusal))
        if refusal is not None:
            return Outcome(ok=False, error=TimeoutError(refusal), timed_out=True)
        if run.cancel_reached:  # asked to stop while it waited for a thread: it never starts
            self._permits.release()
            return CANCELLED_BEFORE_START
        if timeout is not None:
            timeout = max(0.0, timeout - (loop.time() - began))
        context = contextvars.copy_context()
        call = functools.partial(context.run, run.definition.func, **args)
        try:
            future = self._pool.submit(call)
        except BaseException:
            self._permits.release()
            raise
        started = time.monotonic()
        run.handler_started = True
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
                        self._lose_thread(future, run, started)
                        return Outcome(
                            ok=False, error=TimeoutError(f"job timed out after {run_timeout(run):g}s"), timed_out=True
                        )
                    # Shutdown's force path fired first: only the thread's return decides the row now.
                    result = await asyncio.shield(waiter)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            return _outcome_from_exception(exc)
        # A returned Snooze (0.1.0's form) is the same instruction as a raised one.
        return _outcome_from_exception(result) if isinstance(result, Snooze) else Outcome(ok=True, result=result)

    async def _acquire_permit(self, timeout: float | None) -> str | None:
        """Take a pool permit; None once held, else why the run gives up waiting."""
        loop = asyncio.get_running_loop()
        began = loop.time()
        while True:
            wait = self._cancel_grace if timeout is None else max(0.0, timeout - (loop.time() - began))
            try:
                await asyncio.wait_for(self._permits.acquire(), wait)
                return None
            except TimeoutError:
                lost = len(self.lost_threads)
                if timeout is not None or lost >= self._pool_size:
                    waited = loop.time() - began
                    return (
                        f"job waited {waited:.3g}s for a sync-pool thread and got none: all {self._pool_size} "
                        f"are busy, {lost} of them with handlers that overran their deadline "
                        "(setting 'sync_handler_pool_size')"
                    )

    def _lose_thread(self, future: concurrent.futures.Future[Any], run: JobRun, started: float) -> None:
        self.lost_threads[future] = (run, started)
        self.lost_thread_history.append(run.job.id)
        logger.warning(
            "job %s (%s): the sync handler overran its timeout; its thread keeps running and holds one of the "
            "%d pool permits until it returns (%d held so far by handlers past their deadline)",
            run.job.id,
            run.job.job_name,
            self._pool_size,
            len(self.lost_threads),
        )

    def _thread_returned(self, future: concurrent.futures.Future[Any]) -> None:
        self._permits.release()
        self.live_threads.discard(future)
        entry = self.lost_threads.pop(future, None)
        if entry is not None:
            run, started = entry
            logger.warning(
                "job %s (%s): the thread that overran its timeout returned after %.1fs and freed its permit",
                run.job.id,
                run.job.job_name,
                time.monotonic() - started,
            )
        self._threads_changed.set()

    async def wait_threads_changed(self) -> None:
        self._threads_changed.clear()
        await self._threads_changed.wait()


REASON_NEWER_VERSION = "newer_version"
"""Nack reason of a row enqueued by a newer version of the job than this worker runs."""


def bring_to_version(run: JobRun, definition: JobDefinition) -> Outcome | None:
    """Upgrade an older row's arguments through the job's chain (`run.job` then carries them and
    the worker's version); None when the run can go on, else the outcome that ends it: a row
    newer than this worker's code is handed back, one no chain reaches or whose upgrade fails
    is dead-lettered (`NoUpgradePathError`, `UpgradeFailedError`)."""
    job = run.job
    have, want = job.version, definition.version
    if have > want:
        return Outcome(
            ok=False,
            hand_back=(
                f"job {job.id} ({job.job_name}) was enqueued by version {have} of the job, newer than the version "
                f"{want} this worker runs; handed back untouched for a worker that has that code (this backend "
                "does not keep newer rows from older workers)"
            ),
            hand_back_reason=REASON_NEWER_VERSION,
        )
    upgrades = definition.upgrades
    if have not in upgrades:
        listed = ", ".join(f"{old}->{old + 1}" for old in sorted(upgrades)) or "none"
        error = NoUpgradePathError(
            f"job {job.id} ({job.job_name}) is a version-{have} row and this worker runs version {want}, but no "
            f"upgrade chain starts at version {have} (upgrades: {listed}); add upgrades={{{have}: fn, ...}} to "
            "@app.job, or replay the job with arguments of the new shape"
        )
        return Outcome(ok=False, error=error)
    args: Any = dict(job.args)
    for old in range(have, want):
        step = f"upgrade {old}->{old + 1} of job {job.job_name!r} (row {job.id})"
        try:
            upgraded: Any = upgrades[old](dict(args))
        except Exception as exc:
            failed = UpgradeFailedError(f"{step} raised {type(exc).__name__}: {exc}")
            failed.__cause__ = exc
            return Outcome(ok=False, error=failed)
        if not isinstance(upgraded, dict):
            problem = f"{step} returned {type(upgraded).__name__}, not a dict of arguments"
            return Outcome(ok=False, error=UpgradeFailedError(problem))
        try:
            args = loads(json.dumps(upgraded, ensure_ascii=False, allow_nan=False))
        except (TypeError, ValueError, RecursionError) as exc:
            return Outcome(ok=False, error=UpgradeFailedError(f"{step} returned arguments that are not JSON: {exc}"))
    run.job = dataclasses.replace(job, args=args, version=want)
    return None


def run_timeout(run: JobRun) -> float:
    return run.timeout if run.timeout is not None else 0.0
