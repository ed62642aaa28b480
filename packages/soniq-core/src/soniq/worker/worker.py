"""The worker: claims rows, runs their handlers, and shuts down by the seed contract.

RUNNING -> DRAINING -> STOPPED | FORCE_TIMEOUT_PATH [-> WAIT_FOR_THREAD] -> STOPPED.
The shutdown sequence is in `soniq.worker.shutdown`, the heartbeat and sweep
loops in `soniq.worker.loops`, slots and the prefetch buffer in the run table
(`soniq.worker.table`); this module holds the claim loop and a row's lifecycle.
Build one with `app.worker(...)`, drive it with `await worker.run()` and
`worker.stop()`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import signal
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from soniq.backend import Backend
from soniq.errors import BackendUnavailableError
from soniq.observers import JobEndEvent, JobStartEvent, ShutdownInfo, TransitionEvent
from soniq.outcomes import HandlerKind, JobOutcome
from soniq.params import (
    ClaimJobsParams,
    MarkStartedParams,
    PrepareWorkerParams,
    RegisterWorkerParams,
    SetWorkerStatusParams,
    WaitForJobsParams,
)
from soniq.records import JobRecord, StaleJobPolicy, WorkerInfo, WorkerStatus
from soniq.retry import RetryPolicy
from soniq.worker.batching import CompletionBatcher
from soniq.worker.executor import Executor
from soniq.worker.loops import heartbeat_loop, sweep_loop
from soniq.worker.runs import JobRun, Outcome, RunPhase
from soniq.worker.settle import Settled, Settler
from soniq.worker.shutdown import ShutdownSequence
from soniq.worker.state import WorkerState, check_transition
from soniq.worker.table import RunTable
from soniq.worker.writes import write_with_retry

if TYPE_CHECKING:
    from soniq.app import Soniq

logger = logging.getLogger("soniq.worker")


@dataclass
class WorkerSummary:
    """What a finished worker run did."""

    worker_id: str
    final_state: WorkerState
    states: list[WorkerState] = field(default_factory=list)
    processed: int = 0
    nacked_job_ids: list[str] = field(default_factory=list)
    released_job_ids: list[str] = field(default_factory=list)
    unreleased_job_ids: list[str] = field(default_factory=list)
    unsettled_job_ids: list[str] = field(default_factory=list)
    """Rows whose outcome or nack could not be written: they stay `processing` for stale recovery."""
    trigger: str | None = None

    @property
    def forced(self) -> bool:
        return WorkerState.FORCE_TIMEOUT_PATH in self.states


def new_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class Worker:
    """One worker process's claim loop and runs; build it with `Soniq.worker`."""

    def __init__(
        self,
        app: Soniq,
        *,
        concurrency: int | None = None,
        queues: Sequence[str] | None = None,
        run_once: bool = False,
        install_signal_handlers: bool = True,
    ) -> None:
        settings = app.settings
        self.app = app
        self.settings = settings
        self.backend: Backend = app.backend
        self.bus = app.bus
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
        # Only when a buffer or the zombie policy needs it do we pay a write to record the handler start.
        self._defer_start_mark = settings.prefetch > 0 or settings.stale_job_policy is StaleJobPolicy.DEAD_LETTER
        self._shutdown_info: ShutdownInfo | None = None
        self._stop_event = asyncio.Event()
        self._force_event = asyncio.Event()
        self._trigger: str | None = None
        self._signal_at = 0.0
        self._claim_task: asyncio.Task[None] | None = None
        self._executor: Executor | None = None
        self.completions = CompletionBatcher(self.backend, self.worker_id, self._write_deadline)
        self._settler = Settler(
            self.backend,
            self.worker_id,
            RetryPolicy(base=settings.retry_backoff_base, maximum=settings.retry_backoff_max),
            self.completions,
        )

    # -- public control ------------------------------------------------------

    def stop(self, trigger: str = "stop") -> None:
        """First call starts DRAINING; a call during DRAINING goes to FORCE_TIMEOUT_PATH."""
        if self.state is WorkerState.RUNNING and not self._stop_event.is_set():
            logger.log(
                logging.WARNING if trigger.startswith("SIG") else logging.INFO,
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

    request_stop = stop

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
        """Run until stopped (a signal, `stop()`, or with `run_once` no due job); returns what happened."""
        await self.app.connect()
        await self.backend.prepare_worker(
            PrepareWorkerParams(concurrency=self.concurrency, prefetch=self.runs.prefetch)
        )
        executor = self._executor = Executor(self.app.sync_pool, self.settings.sync_handler_pool_size)
        await self.backend.register_worker(RegisterWorkerParams(worker=self.info()))
        logger.info(
            "worker %s started: concurrency=%d queues=%s prefetch=%d backend=%s",
            self.worker_id,
            self.concurrency,
            ",".join(self.queues) if self.queues else "*",
            self.runs.prefetch,
            type(self.backend).__name__,
        )
        removers = self._install_signals() if self.install_signal_handlers else []
        settings = self.settings
        background = [
            asyncio.create_task(
                heartbeat_loop(self.backend, self.info, interval=settings.heartbeat_interval), name="soniq-heartbeat"
            ),
            asyncio.create_task(
                sweep_loop(
                    self.backend,
                    self.bus,
                    worker_id=self.worker_id,
                    interval=settings.heartbeat_interval,
                    heartbeat_timeout=settings.heartbeat_timeout,
                    policy=settings.stale_job_policy,
                    keep_going=lambda: self.state is WorkerState.RUNNING,
                ),
                name="soniq-stale-sweep",
            ),
        ]
        try:
            self._claim_task = asyncio.create_task(self._claim_loop(), name="soniq-claim")
            await self._stop_event.wait()
            sequence = ShutdownSequence(self, self.runs, executor)
            self._shutdown_info = sequence.info(trigger=self.trigger, signal_at=self._signal_at or time.time())
            await sequence.run(trigger=self.trigger, claim_task=self._claim_task)
        finally:
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            await self._mark_stopped()
            self.bus.worker_stopped(self.worker_id)
            # Only now: a signal that arrives while the last writes run must not kill the process.
            for remove in removers:
                remove()
        self.summary.final_state = self.state
        self.summary.trigger = self._trigger
        return self.summary

    async def _mark_stopped(self) -> None:
        left = [*self.summary.unsettled_job_ids, *self.summary.unreleased_job_ids]
        if left:
            # A `stopped` worker's rows are never swept; staying `stopping` lets its heartbeat go
            # stale so that stale recovery settles the rows this process could not write.
            logger.warning(
                "worker %s stays 'stopping': stale recovery settles the %d rows it could not write (%s) "
                "once its heartbeat is %gs old",
                self.worker_id,
                len(left),
                ", ".join(left),
                self.settings.heartbeat_timeout,
            )
            return
        try:
            params = SetWorkerStatusParams(worker_id=self.worker_id, status=WorkerStatus.STOPPED)
            await asyncio.wait_for(self.backend.set_worker_status(params), 2.0)
        except Exception as exc:
            logger.warning("could not mark worker %s stopped: %s", self.worker_id, exc)

    def info(self) -> WorkerInfo:
        return WorkerInfo(
            id=self.worker_id,
            hostname=socket.gethostname(),
            pid=os.getpid(),
            queues=self.queues,
            concurrency=self.concurrency,
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

    # -- the claim loop --------------------------------------------------------

    def _claiming(self) -> bool:
        return self.state is WorkerState.RUNNING and not self._stop_event.is_set()

    async def _claim_loop(self) -> None:
        runs = self.runs
        while self._claiming():
            # Cleared before looking at the slots, so a slot freed from here on wakes the wait below.
            runs.changed.clear()
            room = runs.room
            if room <= 0:
                # stop() sets the same event, so this wait needs no race with the stop signal.
                await runs.changed.wait()
                continue
            params = ClaimJobsParams(
                worker_id=self.worker_id, queues=self.queues, limit=room, mark_started=not self._defer_start_mark
            )
            try:
                rows = await self.backend.claim_jobs(params)
            except Exception as exc:
                if isinstance(exc, BackendUnavailableError):
                    logger.warning("claim failed, store unreachable: %s", exc)
                else:
                    logger.exception("claim failed")
                await self._race(asyncio.sleep(self.settings.poll_interval))
                continue
            self._accept(rows)
            if len(rows) >= room:
                continue
            if self.run_once and not rows and runs.empty:
                self.stop("run_once")
                return
            wait = WaitForJobsParams(queues=self.queues, timeout=self.settings.poll_interval)
            await self._race(self.backend.wait_for_jobs(wait), runs.changed.wait())

    def _accept(self, rows: list[JobRecord]) -> None:
        for row in rows:
            run = JobRun(job=row, definition=self.app.registry.get(row.job_name))
            # A row claimed as the drain began never starts: it is handed back with the buffer.
            if self._claiming() and self.runs.has_free_slot:
                self._start(run)
            else:
                self.runs.hold(run)

    def _start(self, run: JobRun) -> None:
        self.runs.occupy(run)
        run.task = asyncio.create_task(self._lifecycle(run), name=f"soniq-job-{run.job.id}")

    def _release_slot(self, run: JobRun) -> None:
        """The handler is done with its slot (its outcome may still be on its way); refill from the buffer."""
        if not self.runs.release_slot(run):
            return
        while self._claiming() and self.runs.has_free_slot:
            buffered = self.runs.next_buffered()
            if buffered is None:
                return
            self._start(buffered)

    async def _race(self, *awaitables: Any) -> None:
        """Wait for the first of `awaitables` or the stop signal."""
        tasks = [asyncio.ensure_future(a) for a in awaitables]
        stop = asyncio.ensure_future(self._stop_event.wait())
        try:
            done, _ = await asyncio.wait([*tasks, stop], return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if not task.cancelled() and task.exception() is not None and task is not stop:
                    logger.warning("waiting for jobs failed: %s", task.exception())
                    await asyncio.sleep(min(self.settings.poll_interval, 1.0))
        finally:
            for task in (*tasks, stop):
                if not task.done():
                    task.cancel()

    # -- one row from claim to its last write --------------------------------

    async def _lifecycle(self, run: JobRun) -> None:
        job = run.job
        try:
            if run.definition is None:
                self._announce(run, HandlerKind.UNKNOWN)
                run.phase = RunPhase.SETTLING
                settled = await self._settler.dead_letter_unknown(run, self.app.registry.names(), give_up_at=None)
                self._job_end(run, settled)
                return
            if self._defer_start_mark:
                params = MarkStartedParams(worker_id=self.worker_id, job_ids=(job.id,))
                owned = await write_with_retry(
                    f"handler start for job {job.id}", lambda: self.backend.mark_started(params), give_up_at=None
                )
                if run.abandoned or (owned is not None and job.id not in owned):
                    return
            if run.abandoned:
                return
            await self._execute(run)
        except Exception:
            logger.exception("internal error while running job %s; the row stays for stale recovery", job.id)
            self.summary.unsettled_job_ids.append(job.id)
        finally:
            self._release_slot(run)
            self.runs.finish(run)
            self.summary.processed += 1

    def _announce(self, run: JobRun, handler_kind: HandlerKind) -> None:
        run.started_at = time.monotonic()
        if self.bus.wants_job_events:
            attempt = run.job.attempts + 1
            self.bus.job_start(
                JobStartEvent(worker_id=self.worker_id, job=run.job, handler_kind=handler_kind, attempt=attempt)
            )

    async def _execute(self, run: JobRun) -> None:
        assert run.definition is not None
        assert self._executor is not None
        definition = run.definition
        timeout = definition.timeout if definition.timeout is not None else self.settings.job_timeout
        self._announce(run, definition.handler_kind)
        call = self._executor.call_async if definition.is_async else self._executor.call_sync
        try:
            outcome: Outcome = await call(run, run.job.args, timeout)
        except asyncio.CancelledError:
            if not run.abandoned:
                raise
            # The force path cancelled this run's handler and nacks the row; the end is reported from
            # this task so that observers see it in the context where the run started.
            current = asyncio.current_task()
            if current is not None:
                current.uncancel()
            run.unwound()
            nacked = await run.nack_result()
            if nacked is not None:
                self._job_end(run, Settled(nacked, reason="shutdown_timeout"))
            return
        run.phase = RunPhase.SETTLING
        self._release_slot(run)
        settled = await self._settler.settle(run, outcome, give_up_at=self._write_deadline())
        self._job_end(run, settled, outcome.error)

    def _job_end(self, run: JobRun, settled: Settled, error: BaseException | None = None) -> None:
        if settled.outcome is JobOutcome.UNWRITTEN:
            self.summary.unsettled_job_ids.append(run.job.id)
        if not self.bus.wants_job_events:
            return
        self.bus.job_end(
            JobEndEvent(
                worker_id=self.worker_id,
                job=run.job,
                handler_kind=run.kind,
                attempt=run.job.attempts + 1,
                outcome=settled.outcome,
                duration=time.monotonic() - run.started_at if run.started_at else 0.0,
                error=error,
                error_text=settled.error_text,
                reason=settled.reason,
            )
        )

    def _write_deadline(self) -> float | None:
        """While shutting down, writes give up in time for the process to stop within its bound."""
        if self.state is WorkerState.RUNNING:
            return None
        return asyncio.get_running_loop().time() + max(1.0, self.settings.prefetch_release_timeout)

    def _install_signals(self) -> list[Callable[[], bool]]:
        loop = asyncio.get_running_loop()
        removers: list[Callable[[], bool]] = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, self.stop, sig.name)
            except (NotImplementedError, RuntimeError, ValueError):
                continue
            removers.append(functools.partial(loop.remove_signal_handler, sig))
        return removers
