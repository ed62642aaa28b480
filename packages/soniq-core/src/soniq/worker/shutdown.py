"""The shutdown sequence, exactly as the seed contract draws it.

DRAINING waits for in-flight work within `shutdown_timeout` while the
prefetch buffer is handed back. FORCE_TIMEOUT_PATH then splits by handler
kind: async (and claimed-not-yet-running) rows are cancelled and nack'd with
attempts preserved; running sync threads cannot be cancelled, so the worker
enters WAIT_FOR_THREAD, keeps heartbeating, and writes their outcome when
they return, however long that takes. No sync row is ever nack'd.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from soniq.metrics import safe_call
from soniq.observers import NackEvent, ShutdownInfo, ShutdownNotice
from soniq.records import WorkerStatus
from soniq.worker.runs import CANCELLABLE_PHASES, JobRun, RunPhase
from soniq.worker.state import WorkerState

if TYPE_CHECKING:
    from soniq.worker.worker import Worker

logger = logging.getLogger("soniq.worker")

CANCEL_UNWIND_SECONDS = 1.0
"""How long cancelled async handlers get to run their `finally` blocks before the nack."""
NACK_WRITE_SECONDS = 2.0
"""One nack write's budget; a store that does not answer by then leaves the row to stale recovery."""

REASON_SHUTDOWN_TIMEOUT = "shutdown_timeout"
REASON_PREFETCH_RELEASE = "prefetch_release"


class ShutdownSequence:
    def __init__(self, worker: Worker) -> None:
        self.w = worker
        self.loop = asyncio.get_running_loop()
        self.nacked: list[str] = []

    async def run(self) -> None:
        w = self.w
        settings = w.settings
        signal_at = self.loop.time()
        deadline = signal_at + settings.shutdown_timeout
        active = list(w.active.values())
        w.shutdown_info = ShutdownInfo(
            trigger=w.trigger,
            signal_at=w.signal_at or time.time(),
            worker_id=w.worker_id,
            shutdown_timeout=settings.shutdown_timeout,
            sync_handler_grace_seconds=settings.effective_sync_grace,
            job_timeout=settings.job_timeout,
            prefetch_release_timeout=settings.prefetch_release_timeout,
            in_flight_async=sum(1 for r in active if r.kind != "sync"),
            in_flight_sync=sum(1 for r in active if r.kind == "sync"),
            prefetched=len(w.buffer),
        )
        w.transition(WorkerState.DRAINING, reason=w.trigger)
        marking = asyncio.ensure_future(self._mark_stopping())
        await self._stop_claiming(deadline)
        release = asyncio.ensure_future(self._release_buffer())
        drained = await self._wait_drained(deadline)
        await release
        await marking
        if drained:
            await self._stop(reason="drained", nacked=self.nacked)
            return
        await self._force(reason="second signal" if w.force_event.is_set() else "shutdown_timeout elapsed")

    async def _stop(self, *, reason: str, nacked: list[str]) -> None:
        """STOPPED, once every queued completion write has landed (or given up)."""
        await self.w.completions.drain()
        self.w.transition(WorkerState.STOPPED, reason=reason, nacked=nacked)

    async def _mark_stopping(self) -> None:
        try:
            await asyncio.wait_for(
                self.w.backend.heartbeat(worker_id=self.w.worker_id, status=WorkerStatus.STOPPING), NACK_WRITE_SECONDS
            )
        except Exception as exc:
            logger.warning("could not mark worker %s stopping: %s", self.w.worker_id, exc)

    async def _stop_claiming(self, deadline: float) -> None:
        """Let a claim already on the wire come back, so no claimed row goes unseen."""
        task = self.w.claim_task
        if task is None or task.done():
            return
        done, _ = await asyncio.wait([task], timeout=max(0.0, deadline - self.loop.time()))
        if not done:
            task.cancel()

    async def _release_buffer(self) -> None:
        w = self.w
        runs: list[JobRun] = []
        while w.buffer:
            runs.append(w.buffer.popleft())
        if not runs:
            return
        tasks = [asyncio.ensure_future(self._nack(run, REASON_PREFETCH_RELEASE)) for run in runs]
        done, pending = await asyncio.wait(tasks, timeout=w.settings.prefetch_release_timeout)
        for task in pending:
            task.cancel()
        released = [
            r.job.id for r, t in zip(runs, tasks, strict=True) if t in done and not t.cancelled() and t.result()
        ]
        unreleased = [r.job.id for r in runs if r.job.id not in set(released)]
        w.summary.released_job_ids.extend(released)
        w.summary.unreleased_job_ids.extend(unreleased)
        if unreleased:
            logger.error(
                "could not release %d prefetched rows within %gs (%s); stale recovery will requeue them",
                len(unreleased),
                w.settings.prefetch_release_timeout,
                ", ".join(unreleased),
            )

    def _outstanding(self, *, include_abandoned: bool = True) -> list[JobRun]:
        return [r for r in self.w.active.values() if include_abandoned or not r.abandoned]

    async def _wait_until(self, done_when: Callable[[], bool], until: float | None, *, stop_on_force: bool) -> bool:
        """Wait for in-flight runs and live threads to end; True when they did."""
        w = self.w
        assert w.executor is not None
        while True:
            if done_when():
                return True
            if stop_on_force and w.force_event.is_set():
                return False
            timeout = None if until is None else until - self.loop.time()
            if timeout is not None and timeout <= 0:
                return False
            waiters = [
                asyncio.ensure_future(w.executor.wait_threads_changed()),
                asyncio.ensure_future(w.slot_event.wait()),
            ]
            w.slot_event.clear()
            if stop_on_force:
                waiters.append(asyncio.ensure_future(w.force_event.wait()))
            try:
                await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in waiters:
                    waiter.cancel()

    def _nothing_left(self) -> bool:
        assert self.w.executor is not None
        return not self._outstanding(include_abandoned=False) and not self.w.executor.live_threads

    async def _wait_drained(self, deadline: float) -> bool:
        return await self._wait_until(self._nothing_left, deadline, stop_on_force=True)

    async def _force(self, *, reason: str) -> None:
        w = self.w
        w.transition(WorkerState.FORCE_TIMEOUT_PATH, reason=reason)
        force_at = self.loop.time()
        abandoned: list[JobRun] = []
        unwinding: list[asyncio.Task[bool]] = []
        for run in list(w.active.values()):
            if run.phase is RunPhase.RUNNING_SYNC:
                run.pinned = True
            elif run.phase in CANCELLABLE_PHASES:
                run.abandoned = True
                run.nack_outcome = self.loop.create_future()
                abandoned.append(run)
                if run.phase is not RunPhase.CLAIMED and run.task is not None and not run.task.done():
                    # Only the handler part of the run's task is interrupted; it then waits for the nack.
                    run.unwound = asyncio.Event()
                    unwinding.append(asyncio.ensure_future(run.unwound.wait()))
                    run.task.cancel()
        if unwinding:
            _, pending = await asyncio.wait(unwinding, timeout=CANCEL_UNWIND_SECONDS)
            for waiter in pending:
                waiter.cancel()
        written = True
        if abandoned:
            written = all(await asyncio.gather(*(self._nack(run, REASON_SHUTDOWN_TIMEOUT) for run in abandoned)))
            # Let each abandoned run's task report its end before anything is flushed at STOPPED.
            ending = [r.task for r in abandoned if r.task is not None and not r.task.done()]
            if ending:
                await asyncio.wait(ending, timeout=CANCEL_UNWIND_SECONDS)
        # Rows already writing their outcome finish that write (bounded by the write deadline).
        await self._wait_until(
            lambda: not [r for r in self._outstanding(include_abandoned=False) if not r.pinned],
            self.loop.time() + NACK_WRITE_SECONDS * 2,
            stop_on_force=False,
        )
        assert w.executor is not None
        waiting = [r.job.id for r in w.pinned_runs() if r.phase is not RunPhase.FINISHED]
        if not waiting and not w.executor.live_threads:
            reason = "async work nack'd" if written else "nacks not all written; stale recovery settles the rest"
            await self._stop(reason=reason, nacked=self.nacked)
            return
        w.transition(
            WorkerState.WAIT_FOR_THREAD,
            reason="sync threads still running",
            nacked=self.nacked,
            waiting_threads=waiting,
        )
        grace = w.settings.effective_sync_grace
        logger.warning(
            "worker %s: waiting for %d sync thread(s) (jobs %s); grace %gs, then without bound until they "
            "return or the supervisor sends SIGKILL",
            w.worker_id,
            max(len(waiting), len(w.executor.live_threads)),
            ", ".join(waiting) or "-",
            grace,
        )
        within_grace = await self._wait_until(self._nothing_left, force_at + grace, stop_on_force=False)
        if not within_grace:
            still = [r.job.id for r in w.pinned_runs() if r.phase is not RunPhase.FINISHED]
            notice = ShutdownNotice(
                worker_id=w.worker_id,
                state=WorkerState.WAIT_FOR_THREAD,
                name="sync_grace_expired",
                at=time.time(),
                fields={"job_ids": still, "grace_seconds": grace},
            )
            logger.warning(
                "worker %s: sync grace of %gs expired; still waiting for jobs %s (no force-exit: "
                "SIGKILL is the only hard stop, and stale recovery would then run them again)",
                w.worker_id,
                grace,
                ", ".join(still) or "-",
            )
            safe_call(
                w.app.metrics,
                "emit",
                "sync_grace_expired",
                {"worker_id": w.worker_id, "job_ids": still, "grace_seconds": grace},
            )
            for observer in w.app.observers:
                safe_call(observer, "on_shutdown_notice", notice)
            await self._wait_until(self._nothing_left, None, stop_on_force=False)
        await self._stop(reason="sync threads returned", nacked=self.nacked)

    async def _nack(self, run: JobRun, reason: str) -> bool:
        w = self.w
        job = run.job
        error: str | None = None
        sent_at = time.time()
        try:
            written = await asyncio.wait_for(
                w.backend.nack_job(job_id=job.id, worker_id=w.worker_id), NACK_WRITE_SECONDS
            )
        except Exception as exc:
            written = False
            error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if written:
            self.nacked.append(job.id)
            if reason == REASON_SHUTDOWN_TIMEOUT:
                w.summary.nacked_job_ids.append(job.id)
            logger.warning(
                "job %s (%s) nack'd back to queued: %s (attempts stay %d)", job.id, job.job_name, reason, job.attempts
            )
        else:
            logger.error(
                "job %s (%s): nack for %s not written (%s); stale recovery will requeue it",
                job.id,
                job.job_name,
                reason,
                error or "the row was no longer ours",
            )
        fields = {
            "job_id": job.id,
            "job_name": job.job_name,
            "queue": job.queue,
            "worker_id": w.worker_id,
            "reason": reason,
            "attempts": job.attempts,
            "written": bool(written),
            "error": error,
        }
        safe_call(w.app.metrics, "emit", "shutdown_nack", fields)
        event = NackEvent(
            worker_id=w.worker_id,
            job_id=job.id,
            job_name=job.job_name,
            queue=job.queue,
            reason=reason,
            written=bool(written),
            at=time.time(),
            error=error,
            started_at=sent_at,
        )
        for observer in w.app.observers:
            safe_call(observer, "on_nack", event)
        if run.nack_outcome is not None and not run.nack_outcome.done():
            run.nack_outcome.set_result("nacked" if written else "unwritten")
        return bool(written)
