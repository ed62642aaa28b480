"""The worker's lifecycle: start, stop, and the shutdown states it reports.

RUNNING -> DRAINING -> STOPPED | FORCE_TIMEOUT_PATH [-> WAIT_FOR_THREAD] -> STOPPED.
This module starts the pieces and stops them in order: the start-up checks and
the budget line are in `soniq.worker.startup`, the claim loop and each row's
life in `soniq.worker._dispatch`, slots and the prefetch buffer in the run
table (`soniq.worker._table`), the shutdown sequence in `soniq.worker.shutdown`,
the heartbeat and sweep loops in `soniq.worker.loops`, the long-held-slot
warnings in `soniq.worker.watchdog`, cancel requests for running jobs in
`soniq.worker.cancel_watch`, fleet-wide limits on the claim in
`soniq.worker.claim_limits`, and the worker row's shutdown record
(STOPPED included) in `soniq.worker.record`. Build one with `app.worker(...)`,
drive it with `await worker.run()` and `worker.stop()`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from soniq import log_escape
from soniq.backend import CancelChannel, QueueStore, VersionedJobs, has_role
from soniq.observers import JobProgressEvent, ShutdownInfo, TransitionEvent, WorkerStartedEvent
from soniq.params import PrepareWorkerParams, RegisterWorkerParams
from soniq.records import WorkerInfo
from soniq.scheduling.duties import FleetDuties
from soniq.speedups import ORJSON, running_loop_name
from soniq.worker._dispatch import DispatchContext, Dispatcher, job_versions
from soniq.worker._runs import JobRun
from soniq.worker._table import RunTable
from soniq.worker.batching import CompletionBatcher
from soniq.worker.cancel_watch import CancelWatcher, watched_store
from soniq.worker.executor import Executor
from soniq.worker.loops import heartbeat_loop, sweep_loop
from soniq.worker.record import StateRecord
from soniq.worker.shutdown import ShutdownSequence
from soniq.worker.startup import install_signal_handlers, log_budget, refuse_missing_roles, refuse_without_jobs
from soniq.worker.state import RunPhase, WorkerState, check_transition
from soniq.worker.summary import WorkerSummary
from soniq.worker.supervise import LoopSupervisor
from soniq.worker.watchdog import Watchdog

if TYPE_CHECKING:
    from soniq.app_context import AppContext
    from soniq.compat.hooks import Middleware
    from soniq.observers import AppReads

__all__ = ["Worker", "WorkerSummary", "new_worker_id"]

logger = logging.getLogger("soniq.worker")
# Job data in the worker's log lines is escaped whatever handler the application installed.
log_escape.install()


def new_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class Worker:
    """One worker process: starts its claim, heartbeat, sweep and watchdog loops and stops them by the
    shutdown contract; build it with `Soniq.worker`.

    `reads` is the app's read API, handed to observers in `WorkerStartedEvent` (an exporter reads
    queue gauges through it). `retry_policy` and `middleware` are the app's (``Soniq(retry_policy=...)``,
    ``@app.middleware``); the middleware list is read when the worker starts."""

    def __init__(
        self,
        context: AppContext,
        *,
        reads: AppReads,
        retry_policy: Any = None,
        middleware: Sequence[Middleware] = (),
        concurrency: int | None = None,
        queues: Sequence[str] | None = None,
        run_once: bool = False,
        install_signal_handlers: bool = True,
    ) -> None:
        settings = context.settings
        self.context = context
        self.reads = reads
        self.retry_policy = retry_policy
        self.middleware = middleware
        self.settings = settings
        self.backend: QueueStore = context.backend
        self.bus = context.bus
        self.concurrency = concurrency if concurrency is not None else settings.concurrency
        if isinstance(self.concurrency, bool) or not isinstance(self.concurrency, int) or self.concurrency < 1:
            raise ValueError(f"concurrency must be a whole number >= 1, got {concurrency!r}")
        self.queues: tuple[str, ...] | None = tuple(queues) if queues else settings.queues
        self.run_once = run_once
        self.install_signal_handlers = install_signal_handlers
        self.worker_id = new_worker_id()
        self.state = WorkerState.RUNNING
        self.summary = WorkerSummary(worker_id=self.worker_id, final_state=WorkerState.RUNNING)
        self.summary.states.append(WorkerState.RUNNING)
        self.runs = RunTable(concurrency=self.concurrency, prefetch=settings.prefetch)
        self._shutdown_info: ShutdownInfo | None = None
        self._stop_event = asyncio.Event()
        self._force_event = asyncio.Event()
        self._trigger: str | None = None
        self._signal_at = 0.0
        self._executor: Executor | None = None
        self.completions = CompletionBatcher(
            self.backend, self.worker_id, self._write_deadline, result_ttl=settings.result_ttl
        )
        self.state_record = StateRecord(self.backend, self.worker_id)
        # Every long-lived task runs under one restart rule (soniq.worker.supervise).
        self.supervisor = LoopSupervisor(
            self.worker_id,
            failure_limit=getattr(settings, "loop_failure_limit", 60.0),
            on_give_up=self._loop_gave_up,
        )

    # -- public control ------------------------------------------------------

    def stop(self, trigger: str = "stop") -> None:
        """First call starts DRAINING; the next one skips to FORCE_TIMEOUT_PATH; during WAIT_FOR_THREAD it only logs."""
        if self.state is WorkerState.RUNNING and not self._stop_event.is_set():
            # A routine stop: SIGTERM is how every deploy ends a worker.
            logger.info(
                "worker %s: %s received, draining (shutdown_timeout=%gs)",
                self.worker_id,
                trigger,
                self.settings.shutdown_timeout,
            )
            self._trigger = trigger
            self._signal_at = time.time()
            self._stop_event.set()
            self.runs.changed.set()
        elif self.state in (WorkerState.RUNNING, WorkerState.DRAINING) and not self._force_event.is_set():
            logger.warning("worker %s: second %s, skipping the rest of DRAINING", self.worker_id, trigger)
            self._force_event.set()
        elif self.state is WorkerState.WAIT_FOR_THREAD:
            logger.warning(
                "worker %s: %s again; still waiting for sync threads %s (only SIGKILL stops them)",
                self.worker_id,
                trigger,
                ", ".join(r.job.id for r in self.runs.pinned()),
            )

    def _loop_gave_up(self, name: str) -> None:
        self.summary.failed_loop = self.summary.failed_loop or name
        if self.state is WorkerState.RUNNING and not self._stop_event.is_set():
            self.stop("internal loop failure")

    @property
    def force_requested(self) -> asyncio.Event:
        return self._force_event

    @property
    def in_flight(self) -> tuple[str, ...]:
        """Ids of the rows holding a slot or writing their outcome (not the prefetch buffer)."""
        return tuple(run.job.id for run in self.runs.runs())

    def phase_of(self, job_id: str) -> RunPhase | None:
        """Where an in-flight row is in its lifecycle; None when this worker does not hold it."""
        run = self.runs.get(job_id)
        return run.phase if run is not None else None

    @property
    def threads_running(self) -> int:
        """Sync handler threads that have not returned yet (timed-out ones included)."""
        return len(self._executor.live_threads) if self._executor is not None else 0

    async def run(self) -> WorkerSummary:
        """Run until stopped (a signal, `stop()`, or with `run_once` no due job); returns what happened.

        Cancelling the task that runs this stops the worker like a second signal (DRAINING, then
        the force path: nacks, worker row `stopped`, STOPPED); then the cancellation propagates.
        """
        settings = self.settings
        context = self.context
        refuse_without_jobs(context.registry, settings)
        limits = context.group_limits()
        # Before anything is opened or written: a worker that cannot honour its configuration never starts.
        refuse_missing_roles(
            self.backend, limits=limits, schedules=0 if self.run_once else len(context.scheduler.declared)
        )
        await context.connect()
        await self.backend.prepare_worker(
            PrepareWorkerParams(concurrency=self.concurrency, prefetch=self.runs.prefetch)
        )
        executor = self._executor = Executor(
            context.sync_pool,
            settings.sync_handler_pool_size,
            cancel_grace=settings.cancel_grace_seconds,
            backend=self.backend,
            max_result_bytes=settings.max_result_bytes,
            job_log_max_bytes=settings.job_log_max_bytes,
            on_progress=self._progress_stored if self.bus.wants("on_job_progress") else None,
        )
        dispatch_context = DispatchContext(
            worker_id=self.worker_id,
            settings=settings,
            backend=self.backend,
            bus=self.bus,
            registry=context.registry,
            summary=self.summary,
            runs=self.runs,
            completions=self.completions,
            queues=self.queues,
            run_once=self.run_once,
            stop=self.stop,
            limits=limits,
            retry_policy=self.retry_policy,
            middleware=tuple(self.middleware),
        )
        dispatch = Dispatcher(
            dispatch_context,
            executor,
            stop_event=self._stop_event,
            claiming=self._claiming,
            write_deadline=self._write_deadline,
        )
        await self.backend.register_worker(RegisterWorkerParams(worker=self.info()))
        # Handlers go in before the 'started' line: a supervisor (or test) that signals on seeing it must
        # never hit the default SIGTERM action.
        removers = install_signal_handlers(self.stop) if self.install_signal_handlers else []
        logger.info(
            "worker %s started: concurrency=%d queues=%s prefetch=%d backend=%s loop=%s json=%s",
            self.worker_id,
            self.concurrency,
            ",".join(self.queues) if self.queues else "*",
            self.runs.prefetch,
            type(self.backend).__name__,
            running_loop_name(),
            "orjson" if ORJSON else "json",
        )
        if self.bus.wants("on_worker_started"):
            self.bus.worker_started(
                WorkerStartedEvent(
                    worker_id=self.worker_id,
                    settings=settings,
                    reads=self.reads,
                    queues=self.queues,
                    concurrency=self.concurrency,
                    at=time.time(),
                )
            )
        log_budget(self.worker_id, settings, context.registry)
        cancelled = False
        supervise = self.supervisor.run
        background = [
            asyncio.create_task(
                supervise(
                    "heartbeat",
                    lambda: heartbeat_loop(self.backend, self.info, interval=settings.heartbeat_interval),
                ),
                name="soniq-heartbeat",
            ),
            asyncio.create_task(
                supervise(
                    "stale-sweep",
                    lambda: sweep_loop(
                        self.backend,
                        self.bus,
                        worker_id=self.worker_id,
                        interval=settings.heartbeat_interval,
                        heartbeat_timeout=settings.heartbeat_timeout,
                        policy=settings.stale_job_policy,
                        keep_going=lambda: self.state is WorkerState.RUNNING,
                        unknown_job_timeout=settings.unknown_job_timeout,
                    ),
                ),
                name="soniq-stale-sweep",
            ),
            asyncio.create_task(
                supervise("watchdog", lambda: Watchdog(self.runs, self.summary).watch(settings.heartbeat_interval)),
                name="soniq-watchdog",
            ),
        ]
        if has_role(self.backend, CancelChannel):
            # Cancel requests for the rows this worker holds, through DRAINING to STOPPED.
            watched = watched_store(self.backend)
            background.append(
                asyncio.create_task(
                    supervise(
                        "cancel-watch",
                        lambda: CancelWatcher(watched, self.worker_id, self.runs, dispatch.cancel_unstarted).watch(),
                    ),
                    name="soniq-cancel-watch",
                )
            )
        # The scheduler loop and the leader's duties end at the first shutdown signal (_stop_event).
        duties = None if self.run_once else FleetDuties(context, holder=self.worker_id)
        if duties is not None:
            duties.start(self._stop_event, supervise=supervise)
        try:
            claim_task = asyncio.create_task(
                supervise("claim", dispatch.claim_loop, wake=self._stop_event), name="soniq-claim"
            )
            try:
                await self._stop_event.wait()
            except asyncio.CancelledError:
                cancelled = True
                self._cancelled()
            cancelled = await self._shut_down(executor, claim_task) or cancelled
        finally:
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            if duties is not None:
                await duties.finish()  # the lease is released before the worker row says stopped
            # Before the STOPPED write: `last_shutdown` lists these threads.
            self.summary.lost_thread_job_ids = list(executor.lost_thread_history)
            await self.state_record.mark_stopped(
                self.summary, reached=self.state, heartbeat_timeout=settings.heartbeat_timeout
            )
            self.bus.worker_stopped(self.worker_id)
            # Only now: a signal that arrives while the last writes run must not kill the process.
            for remove in removers:
                remove()
        self.summary.final_state = self.state
        self.summary.trigger = self._trigger
        if cancelled:
            raise asyncio.CancelledError
        return self.summary

    async def _shut_down(self, executor: Executor, claim_task: asyncio.Task[None]) -> bool:
        """Run the shutdown sequence to STOPPED even if this task is cancelled meanwhile; True if it was."""
        sequence = ShutdownSequence(self, self.runs, executor)
        self._shutdown_info = sequence.info(trigger=self.trigger, signal_at=self._signal_at or time.time())
        running = asyncio.ensure_future(sequence.run(trigger=self.trigger, claim_task=claim_task))
        cancelled = False
        while True:
            try:
                await asyncio.shield(running)
                return cancelled
            except asyncio.CancelledError:
                if running.done():
                    raise
                cancelled = True
                self._cancelled()

    def _cancelled(self) -> None:
        """The task running the worker was cancelled (a FastAPI lifespan ending): stop as on a second signal."""
        current = asyncio.current_task()
        if current is not None:
            # The shutdown below must be able to await; the cancellation is re-raised once it is done.
            current.uncancel()
        if not self._stop_event.is_set():
            self.stop("cancelled")
        if not self._force_event.is_set() and self.state is not WorkerState.WAIT_FOR_THREAD:
            logger.info("worker %s: run_worker() task cancelled, skipping the rest of DRAINING", self.worker_id)
            self._force_event.set()

    def _progress_stored(self, run: JobRun, progress: dict[str, Any]) -> None:
        job = run.job
        self.bus.job_progress(
            JobProgressEvent(
                worker_id=self.worker_id, job_id=job.id, job_name=job.job_name, queue=job.queue, progress=progress
            )
        )

    def info(self) -> WorkerInfo:
        return WorkerInfo(
            id=self.worker_id,
            hostname=socket.gethostname(),
            pid=os.getpid(),
            queues=self.queues,
            concurrency=self.concurrency,
            job_names=tuple(self.context.registry.names()),
            job_versions=job_versions(self.context.registry) if has_role(self.backend, VersionedJobs) else None,
        )

    @property
    def trigger(self) -> str:
        return self._trigger or "stop"

    def transition(
        self,
        target: WorkerState,
        *,
        reason: str = "",
        nacked: Sequence[str] = (),
        waiting_threads: Sequence[str] = (),
    ) -> None:
        check_transition(self.state, target)
        previous = self.state
        self.state = target
        self.summary.states.append(target)
        self.state_record.transition(target, reason=reason, waiting_threads=waiting_threads)
        logger.info(
            "worker %s: %s -> %s%s", self.worker_id, previous.value, target.value, f" ({reason})" if reason else ""
        )
        self.bus.transition(
            TransitionEvent(
                worker_id=self.worker_id,
                from_state=previous,
                to_state=target,
                at=time.time(),
                shutdown=self._shutdown_info,
                reason=reason,
                nacked_job_ids=tuple(nacked),
                waiting_threads=tuple(waiting_threads),
            )
        )

    def _claiming(self) -> bool:
        return self.state is WorkerState.RUNNING and not self._stop_event.is_set()

    def _write_deadline(self) -> float | None:
        """While shutting down, writes give up in time for the process to stop within its bound."""
        if self.state is WorkerState.RUNNING:
            return None
        return asyncio.get_running_loop().time() + max(1.0, self.settings.prefetch_release_timeout)
