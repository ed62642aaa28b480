"""The claim loop and each claimed row's life, from claim to its last write (internal).

The worker builds one `Dispatcher` when it starts. The dispatcher fills the
run table from claims, gives every row that gets a slot its own task, refills
freed slots from the prefetch buffer, and settles each outcome. It is handed
what it uses in a `DispatchContext`, never the worker itself, and sees the
worker's state only through the `claiming` and `write_deadline` callables and
the stop event it is handed: shutdown stays the worker's business.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from soniq.backend import VersionedJobs, has_role
from soniq.bus import run_deferred
from soniq.encryption import EncryptionUnavailableError, UndecryptableError, cipher_for, is_envelope
from soniq.errors import BackendUnavailableError
from soniq.observers import job_end_event, job_start_event, nack_event
from soniq.outcomes import HandlerKind, JobOutcome
from soniq.params import ClaimJobsParams, LimitScope, NackJobParams, WaitForJobsParams
from soniq.records import DeadLetterReason, JobRecord, StaleJobPolicy
from soniq.retry import JobRetryDelays, RetryPolicy
from soniq.serialization import safe_text
from soniq.worker._runs import JobRun, Outcome
from soniq.worker.batching import StartBatcher
from soniq.worker.cancel_watch import CANCELLED_AT_CLAIM, cancel_message
from soniq.worker.claim_limits import ClaimLimits
from soniq.worker.queue_pauses import QueuePauses
from soniq.worker.settle import Settled, Settler
from soniq.worker.state import RunPhase

if TYPE_CHECKING:
    from soniq.backend import QueueStore
    from soniq.bus import ObservationBus
    from soniq.params import GroupLimit
    from soniq.registry import JobRegistry
    from soniq.retry import AppRetryPolicy
    from soniq.settings import Settings
    from soniq.worker._table import RunTable
    from soniq.worker.batching import CompletionBatcher
    from soniq.worker.executor import Executor
    from soniq.worker.summary import WorkerSummary

logger = logging.getLogger("soniq.worker")
job_logger = logging.getLogger("soniq.jobs")
"""One INFO line per finished run (see docs/observability.md), on by default; setting ``log_jobs``
(``SONIQ_LOG_JOBS``, ``soniq worker --quiet-jobs``) or this logger's level turns it off."""

REASON_UNKNOWN_JOB = "unknown_job"
"""Nack reason for a row of a name this worker has not registered (claimed by a backend that ignores
`job_names`): handed back untouched for a worker that has the code."""


QUICK_WAKE_SECONDS = 0.005
"""A wait for jobs that returns this fast, with nothing changed here, may be a store saying "rows are
queued" about rows no claim can take (held back by a limit, blocked by dependencies)."""
SPURIOUS_WAKE_PAUSE = 0.05
"""After such a wake found nothing to claim, the next wait starts this much later (at most poll_interval)."""


def job_versions(registry: JobRegistry) -> dict[str, int]:
    """Each registered job's version (the newest row version this worker runs), by name."""
    versions: dict[str, int] = {}
    for name in registry.names():
        definition = registry.get(name)
        versions[name] = int(getattr(definition, "version", 1)) if definition is not None else 1
    return versions


@dataclass(frozen=True, slots=True)
class DispatchContext:
    """What the dispatcher uses of its worker and app, and nothing else."""

    worker_id: str
    settings: Settings
    backend: QueueStore
    bus: ObservationBus
    registry: JobRegistry
    summary: WorkerSummary
    runs: RunTable
    completions: CompletionBatcher
    queues: tuple[str, ...] | None
    run_once: bool
    stop: Callable[[str], None]
    """Stop the worker (``run_once`` calls it once nothing is left to claim)."""
    limits: tuple[GroupLimit, ...] = ()
    """The app's fleet-wide limits, passed to every claim."""
    retry_policy: AppRetryPolicy | None = None
    """``Soniq(retry_policy=...)``, or None."""
    middleware: tuple[Callable[..., Any], ...] = ()
    """The app's middleware around each handler call, outermost first."""


class Dispatcher:
    def __init__(
        self,
        context: DispatchContext,
        executor: Executor,
        *,
        stop_event: asyncio.Event,
        claiming: Callable[[], bool],
        write_deadline: Callable[[], float | None],
    ) -> None:
        settings = context.settings
        self._settings = settings
        self._worker_id = context.worker_id
        self._queues = context.queues
        self._run_once = context.run_once
        self._stop = context.stop
        self._backend = context.backend
        self._bus = context.bus
        self._registry = context.registry
        self._summary = context.summary
        self._runs = context.runs
        self._executor = executor
        self._stop_event = stop_event
        self._claiming = claiming
        self._write_deadline = write_deadline
        # Only when a buffer or the zombie policy needs it do we pay a write to record the handler start.
        self._defer_start_mark = settings.prefetch > 0 or settings.stale_job_policy is StaleJobPolicy.DEAD_LETTER
        self._starts = StartBatcher(context.backend, context.worker_id) if self._defer_start_mark else None
        self._settler = Settler(
            context.backend,
            context.worker_id,
            JobRetryDelays(  # per-job retry options and Soniq(retry_policy=...)
                RetryPolicy(base=settings.retry_backoff_base, maximum=settings.retry_backoff_max),
                context.retry_policy,
            ),
            context.completions,
            max_result_bytes=settings.max_result_bytes,
            snooze_max_seconds=settings.snooze_max_seconds,
        )
        self._job_names = tuple(self._registry.runnable_names())
        self._seal_all = settings.encrypt_all
        self._async_names = tuple(name for name in self._job_names if self._is_async(name))
        self._sync_claims_paused = False
        self._limited_claim_error: str | None = None
        self._log_jobs = settings.log_jobs
        # The app's fleet-wide limits, read once; the store enforces them inside each claim.
        self._limits = ClaimLimits(context.limits)
        # The app's middleware around each call; async hooks awaited in the job's task.
        self._middleware = context.middleware
        # Stored queue pauses, read at most once per poll_interval (QueuePauseStore only).
        self._pauses = QueuePauses(context.backend, context.worker_id, context.queues, interval=settings.poll_interval)
        # The newest row version of each job this worker runs (VersionedJobs only).
        self._max_versions = job_versions(self._registry) if has_role(context.backend, VersionedJobs) else None

    # -- the claim loop --------------------------------------------------------

    async def claim_loop(self) -> None:
        runs = self._runs
        loop = asyncio.get_running_loop()
        quick_wake = False
        while self._claiming():
            # Cleared before looking at the slots, so a slot freed from here on wakes the wait below.
            runs.changed.clear()
            room = runs.room
            if room <= 0:
                # stop() sets the same event, so this wait needs no race with the stop signal.
                await runs.changed.wait()
                continue
            excluded = await self._pauses.refresh() if self._pauses.enabled else ()
            if self._pauses.all_paused:
                # Every queue this worker serves is paused: claim nothing until the next read of the pauses.
                if self._run_once and runs.empty:
                    self._stop("run_once")
                    return
                await self._race(asyncio.sleep(max(self._pauses.due_in(), 0.001)))
                continue
            params = ClaimJobsParams(
                worker_id=self._worker_id,
                queues=self._queues,
                limit=room,
                mark_started=not self._defer_start_mark,
                job_names=self._claimable_names(),
                limits=self._limits.limits,
                excluded_queues=excluded,
                max_versions=self._max_versions,
            )
            try:
                rows = await self._backend.claim_jobs(params)
            except BackendUnavailableError as exc:
                logger.warning("claim failed, store unreachable: %s", exc)
                await self._race(asyncio.sleep(self._settings.poll_interval))
                continue
            except Exception as exc:
                if not params.limits:
                    raise
                # A limit the store cannot apply holds back only the jobs it covers: run the others.
                await self._claim_around_limits(params, exc)
                await self._race(asyncio.sleep(self._settings.poll_interval), runs.changed.wait())
                continue
            if params.limits and self._limited_claim_error is not None:
                self._limited_claim_error = None
                logger.warning("the claim with fleet-wide limits works again; the jobs they cover run again")
            # Any other error ends this loop: the worker's supervisor logs it and restarts the loop after a
            # growing pause, and stops the worker when it keeps failing (soniq.worker.supervise).
            self._accept(rows)
            if rows and all(self._registry.get(row.job_name) is None for row in rows):
                # A backend that ignores `job_names` hands us only names we give back: do not spin on them.
                if self._run_once:
                    await self._wait_idle()
                    self._stop("run_once")
                    return
                await self._race(asyncio.sleep(self._settings.poll_interval))
                continue
            if len(rows) >= room:
                continue
            if self._run_once and not rows and runs.empty:
                self._stop("run_once")
                return
            if quick_wake and not rows:
                # The store said rows were waiting and the claim found none to take: rows held back by a
                # limit or blocked by dependencies look like that to some stores. Never a busy loop.
                # Rows of a paused queue wake such a wait too: then wait up to the next read of the pauses.
                pause = self._pauses.due_in() if excluded else 0.0
                await self._race(
                    asyncio.sleep(min(self._settings.poll_interval, max(SPURIOUS_WAKE_PAUSE, pause))),
                    runs.changed.wait(),
                )
            timeout = self._settings.poll_interval
            if self._limits:
                # Rows may have been held back by a limit: claim again when a rate window opens.
                timeout = self._limits.wait_after_short_claim(timeout)
            if excluded:
                # Wake no later than the next read of the pauses, so that a resume is seen in time.
                timeout = min(timeout, max(self._pauses.due_in(), 0.001))
            wait = WaitForJobsParams(queues=self._pauses.unpaused(), timeout=timeout)
            began = loop.time()
            await self._race(self._backend.wait_for_jobs(wait), runs.changed.wait())
            # A wait cut short on purpose (the next read of the pauses is due) is no quick wake.
            quick_wake = (
                timeout > QUICK_WAKE_SECONDS and loop.time() - began < QUICK_WAKE_SECONDS and not runs.changed.is_set()
            )

    async def _claim_around_limits(self, params: ClaimJobsParams, exc: Exception) -> None:
        """After a claim with limits failed: claim without them, leaving out every job name a limit covers, and
        hand straight back any row of a queue a limit covers, so that those jobs wait in the store untouched."""
        limited_names = {limit.name for limit in params.limits if limit.scope is LimitScope.JOB}
        limited_queues = {limit.name for limit in params.limits if limit.scope is LimitScope.QUEUE}
        error = f"{type(exc).__name__}: {exc}"
        if error != self._limited_claim_error:
            self._limited_claim_error = error
            logger.error(
                "the claim with fleet-wide limits failed (%s); the jobs those limits cover (%s) stay queued, the "
                "others run on; retrying the limited claim every poll_interval",
                safe_text(error),
                ", ".join(sorted(limit.key for limit in params.limits)),
            )
        names = tuple(name for name in params.job_names or () if name not in limited_names)
        if not names:
            return
        rows = await self._backend.claim_jobs(replace(params, limits=(), job_names=names))
        held = [row for row in rows if row.queue in limited_queues]
        for row in held:
            await self._backend.nack_job(NackJobParams(job_id=row.id, worker_id=self._worker_id))
        self._accept([row for row in rows if row.queue not in limited_queues])

    def _is_async(self, name: str) -> bool:
        definition = self._registry.get(name)
        return definition is not None and definition.is_async

    def _claimable_names(self) -> tuple[str, ...]:
        """Every registered name, or only the async ones while every sync-pool thread is held by a handler
        that overran its deadline: a sync job claimed then could only wait for a thread that may never return."""
        exhausted = self._executor.sync_pool_exhausted
        if exhausted != self._sync_claims_paused:
            self._sync_claims_paused = exhausted
            if exhausted:
                logger.warning(
                    "every sync-pool thread is held by a handler that overran its deadline: claiming no sync job "
                    "until one returns (async jobs run on; raise 'sync_handler_pool_size' or fix the handler)"
                )
            else:
                logger.warning("a sync-pool thread came back: claiming sync jobs again")
        return self._async_names if exhausted else self._job_names

    async def _wait_idle(self) -> None:
        while not self._runs.empty:
            self._runs.changed.clear()
            await self._runs.changed.wait()

    def _accept(self, rows: list[JobRecord]) -> None:
        for row in rows:
            run = JobRun(job=row, definition=self._registry.get(row.job_name))
            if row.cancel_requested:
                # The request outlived a hand-back (nack, retry, rescue): the handler never runs.
                run.cancel_noted = True
                self.cancel_unstarted(run, CANCELLED_AT_CLAIM)
                continue
            # A row claimed as the drain began never starts: it is handed back with the buffer.
            if self._claiming() and self._runs.has_free_slot:
                self._start(run)
            else:
                self._runs.hold(run)

    def _start(self, run: JobRun) -> None:
        self._runs.occupy(run)
        run.task = asyncio.create_task(self._lifecycle(run), name=f"soniq-job-{run.job.id}")

    def cancel_unstarted(self, run: JobRun, message: str) -> None:
        """End a claimed row whose handler never started as `cancelled`, without a slot."""
        self._runs.adopt(run)
        run.task = asyncio.create_task(self._cancel_before_start(run, message), name=f"soniq-cancel-{run.job.id}")

    async def _cancel_before_start(self, run: JobRun, message: str) -> None:
        try:
            self._announce(run, run.kind)
            run.phase = RunPhase.SETTLING
            settled = await self._settler.cancelled(run, message, give_up_at=self._write_deadline)
            self._job_end(run, settled)
            if self._bus.defers:
                await run_deferred()  # async hooks
        except Exception:
            logger.exception("internal error while cancelling job %s; the row stays for stale recovery", run.job.id)
            self._summary.unsettled_job_ids.append(run.job.id)
        finally:
            self._runs.finish(run)
            self._summary.processed += 1

    def _release_slot(self, run: JobRun) -> None:
        """The handler is done with its slot (its outcome may still be on its way); refill from the buffer."""
        if not self._runs.release_slot(run):
            return
        while self._claiming() and self._runs.has_free_slot:
            buffered = self._runs.next_buffered()
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
                    await asyncio.sleep(min(self._settings.poll_interval, 1.0))
        finally:
            for task in (*tasks, stop):
                if not task.done():
                    task.cancel()

    # -- one row from claim to its last write --------------------------------

    async def _lifecycle(self, run: JobRun) -> None:
        job = run.job
        try:
            if job.decode_error is not None:
                await self._dead_letter_corrupt(run, job.decode_error)
                return
            if run.definition is None:
                await self._hand_back_unknown(run)
                return
            if self._starts is not None:
                # Runs starting together share one write (see StartBatcher); the handler waits for its row's.
                owned = await self._starts.mark(job.id)
                if run.abandoned or owned is False:
                    return
            if run.abandoned:
                return
            await self._execute(run)
        except Exception:
            logger.exception("internal error while running job %s; the row stays for stale recovery", job.id)
            self._summary.unsettled_job_ids.append(job.id)
        finally:
            self._release_slot(run)
            self._runs.finish(run)
            self._summary.processed += 1

    async def _dead_letter_corrupt(self, run: JobRun, decode_error: str) -> None:
        self._announce(run, run.kind)
        run.phase = RunPhase.SETTLING
        error = safe_text(f"the stored row could not be decoded: {decode_error}")
        settled = await self._settler.dead_letter(
            run, DeadLetterReason.CORRUPT_ROW.value, error, give_up_at=self._write_deadline
        )
        self._job_end(run, settled)
        if self._bus.defers:
            await run_deferred()  # async hooks

    async def _hand_back_unknown(self, run: JobRun) -> None:
        """A name this worker cannot run (the store ignored `job_names`): give the row back untouched."""
        job = run.job
        run.phase = RunPhase.SETTLING
        sent_at = time.time()
        try:
            written = await asyncio.wait_for(
                self._backend.nack_job(NackJobParams(job_id=job.id, worker_id=self._worker_id)), 2.0
            )
            error = None
        except Exception as exc:
            written, error = False, f"{type(exc).__name__}: {exc}"
        logger.warning(
            "job %s: no job named %r is registered in this worker (registered: %s); handed back untouched "
            "for a worker that has its code%s",
            job.id,
            job.job_name,
            ", ".join(self._job_names) or "none",
            "" if written else f" (the nack was not written: {error or 'the row was no longer ours'})",
        )
        self._bus.nack(
            nack_event(
                self._worker_id, job, reason=REASON_UNKNOWN_JOB, written=bool(written), error=error, started_at=sent_at
            )
        )

    def _announce(self, run: JobRun, handler_kind: HandlerKind) -> None:
        run.started_at = time.monotonic()
        if self._bus.wants_job_events:
            job = run.job
            self._bus.job_start(job_start_event(self._worker_id, job, handler_kind, job.attempts + 1))

    async def _execute(self, run: JobRun) -> None:
        assert run.definition is not None
        definition = run.definition
        timeout = definition.timeout if definition.timeout is not None else self._settings.job_timeout
        run.timeout = timeout
        self._announce(run, definition.handler_kind)
        call = self._executor.call_async if definition.is_async else self._executor.call_sync
        try:
            if self._bus.defers:
                await run_deferred()  # async before_job hooks finish before the handler
            refused = (
                self._open_sealed(run) if self._seal_all or definition.encrypted or is_envelope(run.job.args) else None
            )
            if refused is not None:
                outcome: Outcome = refused
            elif definition.plain and not self._middleware:
                outcome = await call(run, run.job.args, timeout)
            else:  # args_model, JobContext, middleware
                worker_id, middleware = self._worker_id, self._middleware
                outcome = await self._executor.call(run, timeout, worker_id=worker_id, middleware=middleware)
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
                self._job_end(run, Settled(nacked, reason=run.nack_reason))
                if self._bus.defers:
                    await run_deferred()  # async hooks and sinks see the nack too
            return
        run.phase = RunPhase.SETTLING
        self._release_slot(run)
        if outcome.stuck:
            self._summary.stuck_job_ids.append(run.job.id)
        if run.cancel_reached:  # a cancel request reached the run before it ended
            message = cancel_message(run, outcome)
            settled = await self._settler.cancelled(run, message, give_up_at=self._write_deadline)
        else:
            settled = await self._settler.settle(run, outcome, give_up_at=self._write_deadline)
        self._job_end(run, settled, None if run.cancel_reached else outcome.error)
        if self._bus.defers:
            await run_deferred()  # async after_job / on_error hooks

    def _open_sealed(self, run: JobRun) -> Outcome | None:
        """Give `run` its cipher and open its sealed arguments; the outcome that ends the run when
        no configured key opens them (reason ``undecryptable``), else None."""
        try:
            cipher = cipher_for(self._settings.encryption_keys)
            if is_envelope(run.job.args):
                args = cipher.open(run.job.args)
                if not isinstance(args, dict):
                    raise UndecryptableError(f"the sealed arguments hold a {type(args).__name__}, not an object")
                run.job = replace(run.job, args=args)
        except (UndecryptableError, EncryptionUnavailableError) as exc:
            return Outcome(ok=False, error=UndecryptableError(f"job {run.job.id} ({run.job.job_name}): {exc}"))
        run.cipher = cipher
        return None

    def _job_end(self, run: JobRun, settled: Settled, error: BaseException | None = None) -> None:
        if settled.outcome is JobOutcome.UNWRITTEN:
            self._summary.unsettled_job_ids.append(run.job.id)
        duration = time.monotonic() - run.started_at if run.started_at else 0.0
        if self._log_jobs and job_logger.isEnabledFor(logging.INFO):
            job = run.job
            job_logger.info(
                "job %s (%s) on %s: %s%s in %.3fs, run %d of %d",
                job.id,
                job.job_name,
                job.queue,
                settled.outcome.value,
                f" ({settled.reason})" if settled.reason else "",
                duration,
                job.attempts + 1,
                job.max_attempts,
            )
        if not self._bus.wants_job_events:
            return
        job = run.job
        self._bus.job_end(
            job_end_event(
                self._worker_id,
                job,
                run.kind,
                job.attempts + 1,
                settled.outcome,
                duration,
                error,
                settled.error_text,
                settled.reason,
            )
        )
