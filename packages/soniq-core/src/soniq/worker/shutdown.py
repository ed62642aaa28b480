"""The shutdown sequence, exactly as the seed contract draws it.

DRAINING waits for in-flight work within `shutdown_timeout` while the
prefetch buffer is handed back. FORCE_TIMEOUT_PATH then splits by handler
kind: async (and claimed-not-yet-running) rows are cancelled and nack'd with
attempts preserved; running sync threads cannot be cancelled, so the worker
enters WAIT_FOR_THREAD, keeps heartbeating, and writes their outcome when
they return, however long that takes. No sync row is ever nack'd.

The sequence is handed the run table, the executor and a `ShutdownHost`
(the few things it needs from the worker); it never reaches further in.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from soniq.observers import ShutdownInfo, ShutdownNotice, nack_event
from soniq.outcomes import HandlerKind, JobOutcome
from soniq.params import DeadLetterJobParams, NackJobParams
from soniq.records import DeadLetterReason
from soniq.worker._runs import CANCELLABLE_PHASES, JobRun
from soniq.worker.executor import CANCEL_UNWIND_SECONDS
from soniq.worker.state import RunPhase, WorkerState

if TYPE_CHECKING:
    from soniq.backend import QueueStore
    from soniq.bus import ObservationBus
    from soniq.settings import Settings
    from soniq.worker._table import RunTable
    from soniq.worker.batching import CompletionBatcher
    from soniq.worker.executor import Executor
    from soniq.worker.record import StateRecord
    from soniq.worker.summary import WorkerSummary

logger = logging.getLogger("soniq.worker")

NACK_WRITE_SECONDS = 2.0
"""One nack write's budget; a store that does not answer by then leaves the row to stale recovery."""

REASON_SHUTDOWN_TIMEOUT = "shutdown_timeout"
REASON_SECOND_SIGNAL = "second_signal"
"""Nack reason when a second signal (or cancellation) skipped the rest of DRAINING."""
REASON_CANCELLED = "cancelled"
"""Nack reason when the task running the worker was cancelled (a FastAPI lifespan ending)."""
REASON_PREFETCH_RELEASE = "prefetch_release"
REASON_NACK_LIMIT = DeadLetterReason.NACK_LIMIT.value
"""Dead-letter reason (and job-end reason) of a row shutdowns kept cutting off (`max_shutdown_nacks`)."""
FORCE_NACK_REASONS = frozenset({REASON_SHUTDOWN_TIMEOUT, REASON_SECOND_SIGNAL, REASON_CANCELLED})
DRAIN_LOG_SECONDS = 5.0
"""A draining worker says what it still waits for this often."""


class ShutdownHost(Protocol):
    """What the shutdown sequence needs from its worker."""

    worker_id: str
    settings: Settings
    backend: QueueStore
    bus: ObservationBus
    summary: WorkerSummary
    completions: CompletionBatcher
    state_record: StateRecord

    @property
    def force_requested(self) -> asyncio.Event: ...

    def transition(
        self,
        target: WorkerState,
        *,
        reason: str = "",
        nacked: Sequence[str] = (),
        waiting_threads: Sequence[str] = (),
    ) -> None: ...


class ShutdownSequence:
    def __init__(self, host: ShutdownHost, runs: RunTable, executor: Executor) -> None:
        self.host = host
        self.runs = runs
        self.executor = executor
        self.settings = host.settings
        self.loop = asyncio.get_running_loop()
        self.nacked: list[str] = []

    def info(self, *, trigger: str, signal_at: float) -> ShutdownInfo:
        settings = self.settings
        sync = self.runs.count(HandlerKind.SYNC)
        return ShutdownInfo(
            trigger=trigger,
            signal_at=signal_at,
            worker_id=self.host.worker_id,
            shutdown_timeout=settings.shutdown_timeout,
            sync_handler_grace_seconds=settings.effective_sync_grace,
            job_timeout=settings.job_timeout,
            prefetch_release_timeout=settings.prefetch_release_timeout,
            in_flight_async=len(self.runs.runs()) - sync,
            in_flight_sync=sync,
            prefetched=self.runs.buffered,
        )

    async def run(self, *, trigger: str, claim_task: asyncio.Task[None] | None) -> None:
        deadline = self.loop.time() + self.settings.shutdown_timeout
        self.host.transition(WorkerState.DRAINING, reason=trigger)
        marking = asyncio.ensure_future(self.host.state_record.mark_stopping())
        await self._stop_claiming(claim_task, deadline)
        release = asyncio.ensure_future(self._release_buffer())
        progress = asyncio.ensure_future(self._log_progress(deadline))
        try:
            drained = await self._wait_until(self._nothing_left, deadline, stop_on_force=True)
        finally:
            progress.cancel()
        await release
        await marking
        if drained:
            await self._stop(reason="drained")
            return
        if self.host.force_requested.is_set() and trigger == "cancelled":
            await self._force(reason="task cancelled", nack_reason=REASON_CANCELLED)
        elif self.host.force_requested.is_set():
            await self._force(reason="second signal", nack_reason=REASON_SECOND_SIGNAL)
        else:
            await self._force(reason="shutdown_timeout elapsed", nack_reason=REASON_SHUTDOWN_TIMEOUT)

    async def _log_progress(self, deadline: float) -> None:
        """While DRAINING, say every few seconds which jobs the worker still waits for."""
        while True:
            runs = self.runs.runs(include_abandoned=False)
            lost = len(self.executor.live_threads) - sum(1 for r in runs if r.thread_future is not None)
            if runs or lost > 0:
                now = time.monotonic()
                waiting = ", ".join(
                    f"{r.job.id} ({r.job.job_name}, {now - r.started_at:.1f}s)" if r.started_at else r.job.id
                    for r in runs
                )
                logger.info(
                    "worker %s draining: waiting for %d job(s)%s%s; %.1fs left of shutdown_timeout",
                    self.host.worker_id,
                    len(runs),
                    f": {waiting}" if waiting else "",
                    f" and {lost} thread(s) that overran their deadline" if lost > 0 else "",
                    max(0.0, deadline - self.loop.time()),
                )
            await asyncio.sleep(DRAIN_LOG_SECONDS)

    # -- DRAINING ------------------------------------------------------------

    async def _stop_claiming(self, task: asyncio.Task[None] | None, deadline: float) -> None:
        """Let a claim already on the wire come back, so no claimed row goes unseen."""
        if task is None or task.done():
            return
        done, _ = await asyncio.wait([task], timeout=max(0.0, deadline - self.loop.time()))
        if not done:
            task.cancel()

    async def _release_buffer(self) -> None:
        runs = self.runs.take_buffer()
        if not runs:
            return
        timeout = self.settings.prefetch_release_timeout
        tasks = [asyncio.ensure_future(self._nack(run, REASON_PREFETCH_RELEASE)) for run in runs]
        done, pending = await asyncio.wait(tasks, timeout=timeout)
        for task in pending:
            task.cancel()
        released = [
            r.job.id for r, t in zip(runs, tasks, strict=True) if t in done and not t.cancelled() and t.result()
        ]
        unreleased = [r.job.id for r in runs if r.job.id not in set(released)]
        self.host.summary.released_job_ids.extend(released)
        self.host.summary.unreleased_job_ids.extend(unreleased)
        if unreleased:
            logger.error(
                "could not release %d prefetched rows within %gs (%s); stale recovery will requeue them",
                len(unreleased),
                timeout,
                ", ".join(unreleased),
            )

    # -- waiting -------------------------------------------------------------

    async def _wait_until(self, done_when: Callable[[], bool], until: float | None, *, stop_on_force: bool) -> bool:
        """Wait until `done_when()` holds, waking on run and thread changes; False once `until` passes
        (or, with `stop_on_force`, on a force request)."""
        force = self.host.force_requested
        while True:
            if done_when():
                return True
            if stop_on_force and force.is_set():
                return False
            timeout = None if until is None else until - self.loop.time()
            if timeout is not None and timeout <= 0:
                return False
            waiters = [
                asyncio.ensure_future(self.executor.wait_threads_changed()),
                asyncio.ensure_future(self.runs.changed.wait()),
            ]
            self.runs.changed.clear()
            if stop_on_force:
                waiters.append(asyncio.ensure_future(force.wait()))
            try:
                await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in waiters:
                    waiter.cancel()

    def _nothing_left(self) -> bool:
        return not self.runs.runs(include_abandoned=False) and not self.executor.live_threads

    def _waiting_threads(self) -> list[str]:
        return [r.job.id for r in self.runs.pinned() if r.phase is not RunPhase.FINISHED]

    async def _stop(self, *, reason: str) -> None:
        """STOPPED, once every queued completion write has landed (or given up)."""
        await self.host.completions.drain()
        self.host.transition(WorkerState.STOPPED, reason=reason, nacked=self.nacked)

    # -- FORCE_TIMEOUT_PATH, in named steps ------------------------------------

    async def _force(self, *, reason: str, nack_reason: str) -> None:
        self.host.transition(WorkerState.FORCE_TIMEOUT_PATH, reason=reason)
        force_at = self.loop.time()
        abandoned = await self._cancel_async_runs(nack_reason)
        written = await self._nack_abandoned(abandoned, nack_reason)
        await self._finish_outcome_writes()
        waiting = self._waiting_threads()
        if not waiting and not self.executor.live_threads:
            reason = "async work nack'd" if written else "nacks not all written; stale recovery settles the rest"
            await self._stop(reason=reason)
            return
        await self._wait_for_threads(waiting, force_at)

    async def _cancel_async_runs(self, nack_reason: str) -> list[JobRun]:
        """Pin running sync threads; abandon every cancellable run and let its handler unwind.

        A handler already past its own deadline is not nack'd: its run writes a failed
        attempt at once, so that a job that hangs cannot come back intact on every restart."""
        abandoned: list[JobRun] = []
        unwinding: list[asyncio.Future[bool]] = []
        for run in self.runs.runs():
            if run.phase is RunPhase.RUNNING_SYNC:
                run.pin()
            elif run.overran:
                run.grace_cut.set()
            elif run.phase in CANCELLABLE_PHASES:
                abandoned.append(run)
                unwound = run.abandon(nack_reason)
                if unwound is not None:
                    unwinding.append(asyncio.ensure_future(unwound.wait()))
        if unwinding:
            _, pending = await asyncio.wait(unwinding, timeout=CANCEL_UNWIND_SECONDS)
            for waiter in pending:
                waiter.cancel()
        return abandoned

    async def _nack_abandoned(self, abandoned: list[JobRun], nack_reason: str) -> bool:
        """Nack every abandoned row; True when all the nacks were written."""
        if not abandoned:
            return True
        written = all(await asyncio.gather(*(self._nack(run, nack_reason) for run in abandoned)))
        # Let each abandoned run's task report its end before anything is flushed at STOPPED.
        ending = [r.task for r in abandoned if r.task is not None and not r.task.done()]
        if ending:
            await asyncio.wait(ending, timeout=CANCEL_UNWIND_SECONDS)
        return written

    async def _finish_outcome_writes(self) -> None:
        """Rows already writing their outcome finish that write (bounded by the write deadline)."""
        await self._wait_until(
            lambda: not [r for r in self.runs.runs(include_abandoned=False) if not r.pinned],
            self.loop.time() + NACK_WRITE_SECONDS * 2,
            stop_on_force=False,
        )

    async def _wait_for_threads(self, waiting: list[str], force_at: float) -> None:
        """WAIT_FOR_THREAD: the sync grace, then without bound until every thread returns."""
        host = self.host
        host.transition(
            WorkerState.WAIT_FOR_THREAD,
            reason="sync threads still running",
            nacked=self.nacked,
            waiting_threads=waiting,
        )
        grace = self.settings.effective_sync_grace
        logger.warning(
            "worker %s: waiting for %d sync thread(s) (jobs %s); grace %gs, then without bound until they "
            "return or the supervisor sends SIGKILL",
            host.worker_id,
            max(len(waiting), len(self.executor.live_threads)),
            ", ".join(waiting) or "-",
            grace,
        )
        within_grace = await self._wait_until(self._nothing_left, force_at + grace, stop_on_force=False)
        if not within_grace:
            still = self._waiting_threads()
            logger.warning(
                "worker %s: sync grace of %gs expired; still waiting for jobs %s (no force-exit: "
                "SIGKILL is the only hard stop, and stale recovery would then run them again)",
                host.worker_id,
                grace,
                ", ".join(still) or "-",
            )
            host.bus.shutdown_notice(
                ShutdownNotice(
                    worker_id=host.worker_id,
                    state=WorkerState.WAIT_FOR_THREAD,
                    name="sync_grace_expired",
                    at=time.time(),
                    fields={"job_ids": still, "grace_seconds": grace},
                )
            )
            await self._wait_until(self._nothing_left, None, stop_on_force=False)
        await self._stop(reason="sync threads returned")

    async def _nack(self, run: JobRun, reason: str) -> bool:
        """Hand the row back (attempts kept). A row whose handler had started counts one more
        shutdown nack; one already cut off `max_shutdown_nacks` times is dead-lettered instead."""
        host = self.host
        job = run.job
        started = run.handler_started
        limit = self.settings.max_shutdown_nacks
        if started and job.shutdown_nacks >= limit:
            return await self._dead_letter_at_limit(run, reason, limit)
        error: str | None = None
        sent_at = time.time()
        params = NackJobParams(job_id=job.id, worker_id=host.worker_id, handler_started=started)
        try:
            written = await asyncio.wait_for(host.backend.nack_job(params), NACK_WRITE_SECONDS)
        except Exception as exc:
            written = False
            error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if written:
            self.nacked.append(job.id)
            if reason in FORCE_NACK_REASONS:
                host.summary.nacked_job_ids.append(job.id)
            logger.warning(
                "job %s (%s) nack'd back to queued: %s (attempts stay %d%s)",
                job.id,
                job.job_name,
                reason,
                job.attempts,
                f"; shutdown {job.shutdown_nacks + 1} of {limit} to cut off its started handler" if started else "",
            )
        else:
            logger.error(
                "job %s (%s): nack for %s not written (%s); stale recovery will requeue it",
                job.id,
                job.job_name,
                reason,
                error or "the row was no longer ours",
            )
        host.bus.nack(
            nack_event(host.worker_id, job, reason=reason, written=bool(written), error=error, started_at=sent_at)
        )
        run.report_nack(bool(written))
        return bool(written)

    async def _dead_letter_at_limit(self, run: JobRun, reason: str, limit: int) -> bool:
        """The row's handler was cut off by `limit` shutdowns already: dead-letter it (fenced, reason
        ``nack_limit``) rather than hand it back for ever; True when written."""
        host = self.host
        job = run.job
        text = (
            f"handed back by {job.shutdown_nacks} shutdowns after its handler started, without finishing "
            f"(max_shutdown_nacks={limit}); set job_timeout or make the job resumable with ctx.step"
        )
        params = DeadLetterJobParams(job_id=job.id, worker_id=host.worker_id, error=text, reason=REASON_NACK_LIMIT)
        error: str | None = None
        try:
            written = bool(await asyncio.wait_for(host.backend.dead_letter_job(params), NACK_WRITE_SECONDS))
        except Exception as exc:
            written = False
            error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if written:
            host.summary.nack_limit_job_ids.append(job.id)
            logger.warning(
                "job %s (%s) moved to the dead-letter table (%s) instead of a %s nack: %s",
                job.id,
                job.job_name,
                REASON_NACK_LIMIT,
                reason,
                text,
            )
        else:
            logger.error(
                "job %s (%s): dead letter at the nack limit not written (%s); stale recovery will requeue it",
                job.id,
                job.job_name,
                error or "the row was no longer ours",
            )
        host.bus.shutdown_notice(
            ShutdownNotice(
                worker_id=host.worker_id,
                state=WorkerState.FORCE_TIMEOUT_PATH,
                name=REASON_NACK_LIMIT,
                at=time.time(),
                fields={
                    "job_id": job.id,
                    "job_name": job.job_name,
                    "queue": job.queue,
                    "shutdown_nacks": job.shutdown_nacks,
                    "max_shutdown_nacks": limit,
                    "trigger": reason,
                    "written": written,
                    "error": error,
                },
            )
        )
        run.nack_reason = REASON_NACK_LIMIT
        run.report_nack(written, JobOutcome.DEAD_LETTER)
        return written
