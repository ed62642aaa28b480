"""The worker: claims rows, runs their handlers, and shuts down by the seed contract.

RUNNING -> DRAINING -> STOPPED | FORCE_TIMEOUT_PATH [-> WAIT_FOR_THREAD] -> STOPPED.
The shutdown sequence itself is in `soniq.worker.shutdown`; this module holds
the claim loop, the per-row lifecycle and the background heartbeat and sweep.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import time
import uuid
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from soniq.backend import Backend
from soniq.errors import BackendUnavailableError
from soniq.metrics import NullMetricsSink, safe_call
from soniq.observers import (
    JobEndEvent,
    JobStartEvent,
    RecoveryEvent,
    ShutdownInfo,
    TransitionEvent,
    WorkerStartedEvent,
    notify_optional,
)
from soniq.records import JobRecord, StaleJobPolicy, WorkerInfo, WorkerStatus
from soniq.retry import RetryPolicy
from soniq.worker.batching import CompletionBatcher
from soniq.worker.executor import Executor
from soniq.worker.runs import JobRun, Outcome, RunPhase
from soniq.worker.settle import Settler, write_with_retry
from soniq.worker.state import WorkerState, check_transition

if TYPE_CHECKING:
    from soniq.app import Soniq

logger = logging.getLogger("soniq.worker")


@dataclass
class WorkerSummary:
    """What a finished `run_worker` call did."""

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
        self.prefetch = settings.prefetch
        # Only when a buffer or the zombie policy needs it do we pay a write to record the handler start.
        self.defer_start_mark = self.prefetch > 0 or settings.stale_job_policy is StaleJobPolicy.DEAD_LETTER
        self.active: dict[str, JobRun] = {}
        """Every claimed row from slot to last write (including runs whose outcome is being written)."""
        self.running = 0
        """Rows holding a slot: claimed and not yet returned from their handler."""
        self.buffer: deque[JobRun] = deque()
        self.shutdown_info: ShutdownInfo | None = None
        self._stop_event = asyncio.Event()
        self._force_event = asyncio.Event()
        self._slot_event = asyncio.Event()
        self._stopped_event = asyncio.Event()
        self._trigger: str | None = None
        self.signal_at = 0.0
        self._last_transition_at = time.time()
        self._background: list[asyncio.Task[None]] = []
        self._claim_task: asyncio.Task[None] | None = None
        self._observed = True
        self.executor: Executor | None = None
        self.completions = CompletionBatcher(self.backend, self.worker_id, self._write_deadline)
        self.settler = Settler(
            self.backend,
            self.worker_id,
            RetryPolicy(base=settings.retry_backoff_base, maximum=settings.retry_backoff_max),
            self.completions,
        )

    # -- public control ------------------------------------------------------

    def request_stop(self, trigger: str = "stop") -> None:
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
            self.signal_at = time.time()
            self._stop_event.set()
            self._slot_event.set()
        elif self.state in (WorkerState.RUNNING, WorkerState.DRAINING) and not self._force_event.is_set():
            logger.warning("worker %s: second %s, skipping the rest of DRAINING", self.worker_id, trigger)
            self._force_event.set()
        elif self.state is WorkerState.WAIT_FOR_THREAD:
            logger.warning(
                "worker %s: %s again; still waiting for sync threads %s (only SIGKILL stops them)",
                self.worker_id,
                trigger,
                ", ".join(r.job.id for r in self.pinned_runs()),
            )

    async def run(self) -> WorkerSummary:
        from soniq.worker.shutdown import ShutdownSequence

        await self.app.connect()
        await self.backend.prepare_worker(concurrency=self.concurrency, prefetch=self.prefetch)
        self.executor = Executor(self.app.sync_pool, self.settings.sync_handler_pool_size)
        # Nobody listens to job starts and ends: skip building their events on the hot path.
        self._observed = bool(self.app.observers) or not isinstance(self.app.metrics, NullMetricsSink)
        await self.backend.register_worker(worker=self.info())
        logger.info(
            "worker %s started: concurrency=%d queues=%s prefetch=%d backend=%s",
            self.worker_id,
            self.concurrency,
            ",".join(self.queues) if self.queues else "*",
            self.prefetch,
            type(self.backend).__name__,
        )
        removers = self._install_signals() if self.install_signal_handlers else []
        notify_optional(
            self.app.observers,
            "on_worker_started",
            WorkerStartedEvent(
                worker_id=self.worker_id,
                app=self.app,
                queues=self.queues,
                concurrency=self.concurrency,
                at=time.time(),
            ),
        )
        try:
            self._background.append(asyncio.create_task(self._heartbeat_loop(), name="soniq-heartbeat"))
            self._background.append(asyncio.create_task(self._sweep_loop(), name="soniq-stale-sweep"))
            self._claim_task = asyncio.create_task(self._claim_loop(), name="soniq-claim")
            await self._stop_event.wait()
            await ShutdownSequence(self).run()
        finally:
            for task in self._background:
                task.cancel()
            await asyncio.gather(*self._background, return_exceptions=True)
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
            else:
                try:
                    await asyncio.wait_for(
                        self.backend.heartbeat(worker_id=self.worker_id, status=WorkerStatus.STOPPED), 2.0
                    )
                except Exception as exc:
                    logger.warning("could not mark worker %s stopped: %s", self.worker_id, exc)
            for observer in self.app.observers:
                safe_call(observer, "on_worker_stopped", self.worker_id)
            # Only now: a signal that arrives while the last writes run must not kill the process.
            for remove in removers:
                remove()
        self.summary.final_state = self.state
        self.summary.trigger = self._trigger
        return self.summary

    def info(self) -> WorkerInfo:
        return WorkerInfo(
            id=self.worker_id,
            hostname=socket.gethostname(),
            pid=os.getpid(),
            queues=self.queues,
            concurrency=self.concurrency,
        )

    # -- state ---------------------------------------------------------------

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
        now = time.time()
        logger.info(
            "worker %s: %s -> %s%s", self.worker_id, previous.value, target.value, f" ({reason})" if reason else ""
        )
        event = TransitionEvent(
            worker_id=self.worker_id,
            from_state=previous,
            to_state=target,
            at=now,
            shutdown=self.shutdown_info,
            reason=reason,
            nacked_job_ids=tuple(nacked),
            waiting_threads=tuple(waiting_threads),
        )
        self._last_transition_at = now
        for observer in self.app.observers:
            safe_call(observer, "on_transition", event)
        safe_call(
            self.app.metrics,
            "emit",
            "worker_transition",
            {"worker_id": self.worker_id, "from_state": previous.value, "to_state": target.value, "reason": reason},
        )

    @property
    def trigger(self) -> str:
        return self._trigger or "stop"

    @property
    def force_event(self) -> asyncio.Event:
        return self._force_event

    @property
    def slot_event(self) -> asyncio.Event:
        return self._slot_event

    @property
    def claim_task(self) -> asyncio.Task[None] | None:
        return self._claim_task

    def pinned_runs(self) -> list[JobRun]:
        return [r for r in self.active.values() if r.pinned]

    # -- the claim loop --------------------------------------------------------

    async def _claim_loop(self) -> None:
        while self.state is WorkerState.RUNNING and not self._stop_event.is_set():
            # Cleared before looking at the slots, so a slot freed from here on wakes the wait below.
            self._slot_event.clear()
            room = (self.concurrency - self.running) + self.prefetch - len(self.buffer)
            if room <= 0:
                # request_stop sets the slot event too, so this wait needs no race with the stop signal.
                await self._slot_event.wait()
                continue
            try:
                rows = await self.backend.claim_jobs(
                    worker_id=self.worker_id,
                    queues=self.queues,
                    limit=room,
                    mark_started=not self.defer_start_mark,
                )
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
            if self.run_once and not rows and not self.active and not self.buffer:
                self.request_stop("run_once")
                return
            await self._race(
                self.backend.wait_for_jobs(queues=self.queues, timeout=self.settings.poll_interval),
                self._slot_event.wait(),
            )

    def _accept(self, rows: list[JobRecord]) -> None:
        for row in rows:
            run = JobRun(job=row, definition=self.app.registry.get(row.job_name))
            if self.state is not WorkerState.RUNNING or self._stop_event.is_set():
                # Claimed as the drain began: never started, so it is handed back with the buffer.
                run.phase = RunPhase.BUFFERED
                self.buffer.append(run)
            elif self.running < self.concurrency:
                self._start(run)
            else:
                run.phase = RunPhase.BUFFERED
                self.buffer.append(run)

    def _start(self, run: JobRun) -> None:
        run.phase = RunPhase.CLAIMED
        self.active[run.job.id] = run
        self.running += 1
        run.holds_slot = True
        run.task = asyncio.create_task(self._lifecycle(run), name=f"soniq-job-{run.job.id}")

    def _fill_from_buffer(self) -> None:
        while (
            self.buffer
            and self.running < self.concurrency
            and self.state is WorkerState.RUNNING
            and not self._stop_event.is_set()
        ):
            self._start(self.buffer.popleft())

    async def _race(self, *awaitables: Any) -> None:
        """Wait for the first of `awaitables` or the stop signal."""
        tasks = [asyncio.ensure_future(a) for a in awaitables]
        stop = asyncio.ensure_future(self._stop_event.wait())
        try:
            done, _ = await asyncio.wait([*tasks, stop], return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if not task.cancelled() and task.exception() is not None and task is not stop:
                    exc = task.exception()
                    logger.warning("waiting for jobs failed: %s", exc)
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
                self._announce(run, "unknown")
                run.phase = RunPhase.SETTLING
                error = await self.settler.dead_letter_unknown(run, self.app.registry.names(), give_up_at=None)
                self.job_end(run, "dead_letter", None, error)
                return
            if self.defer_start_mark:
                owned = await write_with_retry(
                    f"handler start for job {job.id}",
                    lambda: self.backend.mark_started(job_id=job.id, worker_id=self.worker_id),
                    give_up_at=None,
                )
                if run.abandoned or owned is False:
                    return
            if run.abandoned:
                return
            await self._execute(run)
        except Exception:
            logger.exception("internal error while running job %s; the row stays for stale recovery", job.id)
            self.summary.unsettled_job_ids.append(job.id)
        finally:
            run.phase = RunPhase.FINISHED
            self._release_slot(run)
            self.active.pop(job.id, None)
            self.summary.processed += 1
            self._slot_event.set()

    def _release_slot(self, run: JobRun) -> None:
        """The handler is done with its slot; its outcome may still be on its way to the store."""
        if run.holds_slot:
            run.holds_slot = False
            self.running -= 1
            self._slot_event.set()
            self._fill_from_buffer()

    def _announce(self, run: JobRun, handler_kind: str) -> None:
        run.announced = True
        run.started_at = time.monotonic()
        if not self._observed:
            return
        event = JobStartEvent(
            worker_id=self.worker_id, job=run.job, handler_kind=handler_kind, attempt=run.job.attempts + 1
        )
        for observer in self.app.observers:
            safe_call(observer, "on_job_start", event)
        safe_call(
            self.app.metrics, "record_job_start", job_id=run.job.id, job_name=run.job.job_name, queue=run.job.queue
        )

    async def _execute(self, run: JobRun) -> None:
        assert run.definition is not None
        assert self.executor is not None
        job = run.job
        definition = run.definition
        timeout = definition.timeout if definition.timeout is not None else self.settings.job_timeout
        self._announce(run, definition.handler_kind)
        call = self.executor.call_async if definition.is_async else self.executor.call_sync
        try:
            outcome: Outcome = await call(run, job.args, timeout)
        except asyncio.CancelledError:
            if not run.abandoned:
                raise
            # The force path cancelled this run's handler. It nacks the row; the end is reported from
            # this task so that observers see it in the context where the run started.
            current = asyncio.current_task()
            if current is not None:
                current.uncancel()
            if run.unwound is not None:
                run.unwound.set()
            if run.nack_outcome is not None:
                outcome_name = await asyncio.shield(run.nack_outcome)
                self.job_end(run, outcome_name, None, None)
            return
        run.phase = RunPhase.SETTLING
        self._release_slot(run)
        name, error_text = await self.settler.settle(run, outcome, give_up_at=self._write_deadline())
        self.job_end(run, name, outcome.error, error_text)

    def job_end(self, run: JobRun, outcome: str, error: BaseException | None, error_text: str | None) -> None:
        if outcome == "unwritten":
            self.summary.unsettled_job_ids.append(run.job.id)
        if not self._observed:
            return
        duration = time.monotonic() - run.started_at if run.started_at else 0.0
        event = JobEndEvent(
            worker_id=self.worker_id,
            job=run.job,
            handler_kind=run.kind,
            attempt=run.job.attempts + 1,
            outcome=outcome,
            duration=duration,
            error=error,
            error_text=error_text,
        )
        for observer in self.app.observers:
            safe_call(observer, "on_job_end", event)
        safe_call(
            self.app.metrics,
            "record_job_end",
            job_id=run.job.id,
            job_name=run.job.job_name,
            queue=run.job.queue,
            outcome=outcome,
            duration=duration,
        )

    def _write_deadline(self) -> float | None:
        """While shutting down, writes give up in time for the process to stop within its bound."""
        if self.state is WorkerState.RUNNING:
            return None
        return asyncio.get_running_loop().time() + max(1.0, self.settings.prefetch_release_timeout)

    # -- background duties ---------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        interval = self.settings.heartbeat_interval
        failures = 0
        while True:
            await asyncio.sleep(interval)
            status = WorkerStatus.ACTIVE if self.state is WorkerState.RUNNING else WorkerStatus.STOPPING
            try:
                alive = await self.backend.heartbeat(worker_id=self.worker_id, status=status)
                failures = 0
            except Exception as exc:
                failures += 1
                if failures == 1 or failures % 10 == 0:
                    logger.warning("heartbeat failed (%d in a row): %s", failures, exc)
                continue
            if not alive:
                logger.error(
                    "worker %s was declared stale by another process; its rows were recovered. Re-registering.",
                    self.worker_id,
                )
                await self.backend.register_worker(worker=self.info())

    async def _sweep_loop(self) -> None:
        interval = self.settings.heartbeat_interval
        while self.state is WorkerState.RUNNING:
            try:
                result = await self.backend.recover_stale_workers(
                    heartbeat_timeout=self.settings.heartbeat_timeout, policy=self.settings.stale_job_policy
                )
                if result.requeued or result.dead_lettered:
                    notify_optional(
                        self.app.observers,
                        "on_recovery",
                        RecoveryEvent(worker_id=self.worker_id, result=result, at=time.time()),
                    )
                    logger.warning(
                        "stale recovery: workers %s; requeued %d rows, dead-lettered %d",
                        ", ".join(result.stale_workers) or "-",
                        len(result.requeued),
                        len(result.dead_lettered),
                    )
            except Exception as exc:
                logger.warning("stale-worker sweep failed: %s", exc)
            await asyncio.sleep(interval)

    def _install_signals(self) -> list[Any]:
        loop = asyncio.get_running_loop()
        removers = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, self.request_stop, sig.name)
            except (NotImplementedError, RuntimeError, ValueError):
                continue
            removers.append(lambda s=sig: loop.remove_signal_handler(s))
        return removers
