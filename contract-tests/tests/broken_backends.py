"""Memory backends with one deliberate contract bug each: the suite must catch every one.

Also `TransactionalMemory`, a correct memory store with a stand-in
transaction, so that the transactional-enqueue contract has a passing
backend to compare a broken one against.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import timedelta
from typing import TypeVar

from soniq.backend import Backend, BackendCapabilities
from soniq.backend.key_rotation_store import SEALED_MARKS
from soniq.params import (
    AcquireLeaseParams,
    ClaimJobsParams,
    DeadLetterPageParams,
    DeleteJobParams,
    EnqueueJobsParams,
    FindStaleJobsParams,
    FireScheduleParams,
    GetDeadLetterParams,
    GetJobParams,
    JobPageParams,
    NackJobParams,
    PruneJobsParams,
    ReplayDeadLetterParams,
    RequestCancelParams,
    RescueAction,
    RescueJobsParams,
    ResealRowParams,
    SaveCheckpointParams,
    SaveProgressParams,
    SaveStepParams,
    SealedRowsParams,
    WaitForJobChangesParams,
)
from soniq.records import (
    CancelOutcome,
    DeadLetterPage,
    DeadLetterRecord,
    JobPage,
    JobRecord,
    JobStatus,
    LeaseRecord,
    NewJob,
    SealedRow,
    SealedRowPage,
    StaleScan,
)
from soniq_memory import MemoryBackend
from soniq_memory.dependencies import Finish
from soniq_memory.key_rotation import dead_texts, job_texts
from soniq_memory.store import MemoryStore

_Row = TypeVar("_Row", JobRecord, DeadLetterRecord)


class NackDoesNothing(MemoryBackend):
    """Claims success but leaves the row as it was."""

    async def nack_job(self, params: NackJobParams, /) -> bool:
        return self._owned(params.job_id, params.worker_id) is not None


class NackCountsAnAttempt(MemoryBackend):
    """Requeues correctly but also spends an attempt, as if the job had failed."""

    async def nack_job(self, params: NackJobParams, /) -> bool:
        if not await super().nack_job(params):
            return False
        row = self._store.jobs[params.job_id]
        self._store.put_job(replace(row, attempts=row.attempts + 1))
        return True


class RecoveryDoesNothing(MemoryBackend):
    async def find_stale_jobs(self, params: FindStaleJobsParams, /) -> StaleScan:
        return StaleScan()


class RecoveryTakesLiveWorkersRows(MemoryBackend):
    """Reports every processing row untouched for the timeout, whether or not its worker still beats."""

    async def find_stale_jobs(self, params: FindStaleJobsParams, /) -> StaleScan:
        scan = await super().find_stale_jobs(params)
        cutoff = self._store.now() - timedelta(seconds=params.heartbeat_timeout)
        found = {row.id for row in scan.orphaned}
        taken = tuple(
            row
            for row in self._store.jobs.values()
            if row.status is JobStatus.PROCESSING and row.updated_at < cutoff and row.id not in found
        )
        return replace(scan, orphaned=scan.orphaned + taken)


class RescueDecidesItself(MemoryBackend):
    """Applies its own recovery rule instead of core's rescue, as backends did under protocol 1.

    It spends an attempt on every orphaned row (started or not), writes its own
    error text and dead-letters any row that reached its budget, unstarted or not.
    """

    async def rescue_jobs(self, params: RescueJobsParams, /) -> set[str]:
        own = []
        for rescue in params.rescues:
            row = self._store.jobs.get(rescue.job_id)
            if row is None:
                continue
            attempts = row.attempts + 1
            spent = attempts >= row.max_attempts
            own.append(
                replace(
                    rescue,
                    action=RescueAction.DEAD_LETTER if spent else RescueAction.REQUEUE,
                    attempts=attempts,
                    error="recovered from a stale worker",
                    reason="worker_lost" if spent else None,
                )
            )
        return await super().rescue_jobs(RescueJobsParams(rescues=own))


class ClaimHandsRowsOutTwice(MemoryBackend):
    """Reads the due rows, yields to the event loop, then writes: concurrent claimers share rows."""

    async def claim_jobs(self, params: ClaimJobsParams, /) -> list[JobRecord]:
        now = self._store.now()
        due = [
            row
            for row in self._store.jobs.values()
            if row.status is JobStatus.QUEUED
            and row.scheduled_at <= now
            and (params.queues is None or row.queue in params.queues)
        ][: params.limit]
        await asyncio.sleep(0)
        claimed = []
        for row in due:
            updated = replace(row, status=JobStatus.PROCESSING, worker_id=params.worker_id, updated_at=now)
            self._store.put_job(updated)
            claimed.append(updated)
        return claimed


class ClaimIgnoresJobNames(MemoryBackend):
    """Claims every due row, as protocol 1 did, whatever names the worker asked for."""

    async def claim_jobs(self, params: ClaimJobsParams, /) -> list[JobRecord]:
        return await super().claim_jobs(replace(params, job_names=None))


class RaisesOnCorruptRow(MemoryBackend):
    """Decodes a whole reply at once: one undecodable row fails the claim or listing for every row."""

    @staticmethod
    def _strict(rows: list[_Row]) -> list[_Row]:
        for row in rows:
            if row.decode_error is not None:
                raise ValueError(f"cannot decode args of job {row.id}: {row.decode_error}")
        return rows

    async def claim_jobs(self, params: ClaimJobsParams, /) -> list[JobRecord]:
        return self._strict(await super().claim_jobs(params))

    async def job_page(self, params: JobPageParams, /) -> JobPage:
        page = await super().job_page(params)
        return replace(page, rows=self._strict(list(page.rows)))

    async def get_job(self, params: GetJobParams, /) -> JobRecord | None:
        row = await super().get_job(params)
        return None if row is None else self._strict([row])[0]

    async def dead_letter_page(self, params: DeadLetterPageParams, /) -> DeadLetterPage:
        page = await super().dead_letter_page(params)
        return replace(page, rows=self._strict(list(page.rows)))

    async def get_dead_letter(self, params: GetDeadLetterParams, /) -> DeadLetterRecord | None:
        row = await super().get_dead_letter(params)
        return None if row is None else self._strict([row])[0]


class MemoryTransaction:
    """A stand-in driver connection: what is enqueued on it waits for the commit."""

    def __init__(self) -> None:
        self.pending: list[NewJob] = []


@contextlib.asynccontextmanager
async def memory_transaction(backend: Backend) -> AsyncIterator[MemoryTransaction]:
    """The `soniq_transaction` of the memory stand-ins: commit on a clean exit, drop on an error."""
    transaction = MemoryTransaction()
    yield transaction
    if transaction.pending:
        await backend.enqueue_jobs(EnqueueJobsParams(jobs=transaction.pending))


class TransactionalMemory(MemoryBackend):
    """A correct transactional enqueue: jobs on a `MemoryTransaction` wait for its commit."""

    @property
    def capabilities(self) -> BackendCapabilities:
        return replace(super().capabilities, transactional_enqueue=True)

    async def enqueue_jobs(self, params: EnqueueJobsParams, /) -> None:
        if isinstance(params.connection, MemoryTransaction):
            params.connection.pending.extend(params.jobs)
            return
        await super().enqueue_jobs(params)


class EnqueuesOutsideTheTransaction(TransactionalMemory):
    """Claims `transactional_enqueue` but writes on its own connection, committed at once."""

    async def enqueue_jobs(self, params: EnqueueJobsParams, /) -> None:
        await MemoryBackend.enqueue_jobs(self, replace(params, connection=None))


# -- schedules, leader lease, pruning (issue 14) ---------------------------------


class FireIgnoresTheFence(MemoryBackend):
    """Fires whatever `next_run` the caller read: two schedulers enqueue one due time twice."""

    async def fire_schedule(self, params: FireScheduleParams, /) -> list[str] | None:
        with self._store.lock:
            row = self._store.schedules.get(params.name)
            if row is None:
                return None
            ids = self._insert_jobs(params.jobs)
            self._store.schedules[params.name] = replace(
                row, next_run=params.new_next_run, run_count=row.run_count + len(ids)
            )
            return ids


class LeaseIgnoresTheHolder(MemoryBackend):
    """Hands the lease to whoever asks, as a leader election by timing alone would."""

    async def acquire_lease(self, params: AcquireLeaseParams, /) -> LeaseRecord | None:
        with self._store.lock:
            now = self._store.now()
            lease = LeaseRecord(
                name=params.name,
                holder=params.holder,
                acquired_at=now,
                renewed_at=now,
                expires_at=now + timedelta(seconds=params.ttl),
            )
            self._store.leases[params.name] = lease
            return lease


class PruneIgnoresExpiry(MemoryBackend):
    """Deletes every finished row up to the limit, expired or not."""

    async def prune_jobs(self, params: PruneJobsParams, /) -> int:
        with self._store.lock:
            finished = [
                job_id
                for job_id, row in self._store.jobs.items()
                if row.status in (JobStatus.DONE, JobStatus.CANCELLED)
            ][: params.limit]
            for job_id in finished:
                del self._store.jobs[job_id]
            return len(finished)


# -- protocol 4 (issue 19) ---------------------------------------------------------


class ClaimIgnoresLimits(MemoryBackend):
    """Claims as protocol 3 did: fleet-wide limits are left to the workers (who cannot see each other)."""

    async def claim_jobs(self, params: ClaimJobsParams, /) -> list[JobRecord]:
        return await super().claim_jobs(replace(params, limits=()))


class LimitCheckedBeforeTheClaim(MemoryBackend):
    """Counts the free slots, then claims in a second step: concurrent claimers share the same slots."""

    async def claim_jobs(self, params: ClaimJobsParams, /) -> list[JobRecord]:
        if not params.limits:
            return await super().claim_jobs(params)
        free = params.limit
        for limit in params.limits:
            if limit.max_concurrent is None:
                continue
            running = sum(
                1
                for row in self._store.jobs.values()
                if row.status is JobStatus.PROCESSING and limit.name in (row.job_name, row.queue)
            )
            free = min(free, limit.max_concurrent - running)
        await asyncio.sleep(0.005)
        return await super().claim_jobs(replace(params, limits=(), limit=max(free, 0)))


class EnqueueIgnoresDependencies(MemoryBackend):
    """Stores `depends_on` as a note but never waits: every row is claimable at once."""

    async def enqueue_jobs(self, params: EnqueueJobsParams, /) -> list[str] | None:
        jobs = [replace(job, depends_on=()) for job in params.jobs]
        return await super().enqueue_jobs(replace(params, jobs=jobs))


class CancelEndsRunningRows(MemoryBackend):
    """Cancels a running row on the spot, as if its handler had already stopped."""

    async def request_cancel(self, params: RequestCancelParams, /) -> CancelOutcome:
        with self._store.lock:
            row = self._store.jobs.get(params.job_id)
            if row is not None and row.status is JobStatus.PROCESSING:
                self._store.put_job(replace(row, status=JobStatus.CANCELLED, worker_id=None))
                return CancelOutcome.CANCELLED
        return await super().request_cancel(params)


class PushThatNeverWakes(MemoryBackend):
    """Declares `push_job_changes` but only ever sleeps out the timeout."""

    async def wait_for_job_changes(self, params: WaitForJobChangesParams, /) -> set[str] | None:
        await asyncio.sleep(params.timeout)
        return None


# -- roles: a backend declares what it fills, and the suite runs exactly that ---------------


class QueueStoreOnly(MemoryBackend):
    """A correct store declaring only the required role: optional roles' tests must be skipped."""

    @property
    def capabilities(self) -> BackendCapabilities:
        return replace(super().capabilities, roles={"QueueStore": 1})


class DeclaresDeadLettersButReplayForgets(MemoryBackend):
    """Declares `DeadLetterStore` (and nothing else optional) but a replay never counts a resurrection
    and leaves the dead-letter row behind unchanged: the declared role's tests must still run, and fail."""

    @property
    def capabilities(self) -> BackendCapabilities:
        return replace(super().capabilities, roles={"QueueStore": 1, "DeadLetterStore": 1})

    async def replay_dead_letter(self, params: ReplayDeadLetterParams, /) -> str | None:
        with self._store.lock:
            before = self._store.dead_letters.get(params.job_id)
        new_id = await super().replay_dead_letter(params)
        if before is not None:
            with self._store.lock:
                self._store.dead_letters[params.job_id] = before
        return new_id


class _CascadeStore(MemoryStore):
    """A memory store that settles dependents by a rule of its own instead of core's."""

    def finished(self, job_id: str, how: Finish) -> None:
        self.publish_change(job_id)
        stack = [(job_id, how)]
        while stack:
            dep_id, finish = stack.pop()
            for dependent_id in self.dependents.pop(dep_id, ()):
                row = self.jobs.get(dependent_id)
                if row is None or row.status is not JobStatus.QUEUED or row.waiting_on <= 0:
                    continue
                if finish is Finish.DONE or row.dependency_policy.value == "run":
                    self.put_job(replace(row, waiting_on=row.waiting_on - 1))
                    if row.waiting_on == 1:
                        self.wake(row.queue)
                    continue
                # Its own wording of the error, where core says "dependency <id> was <how>".
                error = f"parent job {dep_id} failed ({finish.value})"
                self.put_job(replace(row, status=JobStatus.CANCELLED, waiting_on=0, last_error=error))
                self.publish_change(dependent_id)
                stack.append((dependent_id, Finish.CANCELLED))


class CascadeDecidesItself(MemoryBackend):
    """Cancels the dependents of a failed dependency with a `last_error` of its own wording: the
    cascade decided in the backend, as every backend did before `soniq.backend.rules`. Rows
    cancelled at enqueue still get core's text (that path is the memory store's own)."""

    def __init__(self, *, name: str | None = None, namespace: str | None = None) -> None:
        super().__init__(name=None, namespace=namespace)
        self._store = _CascadeStore()


# -- round three: queue pauses, steps, versions, shutdown nacks --------------------------------


class ClaimIgnoresExcludedQueues(MemoryBackend):
    """Stores pauses but claims from paused queues all the same."""

    async def claim_jobs(self, params: ClaimJobsParams, /) -> list[JobRecord]:
        return await super().claim_jobs(replace(params, excluded_queues=()))


class ClaimTouchesExcludedRows(MemoryBackend):
    """Leaves paused queues' rows unclaimed but bumps their `updated_at`, as a claim that locks and
    rewrites every candidate row would."""

    async def claim_jobs(self, params: ClaimJobsParams, /) -> list[JobRecord]:
        claimed = await super().claim_jobs(params)
        with self._store.lock:
            now = self._store.now() + timedelta(milliseconds=5)
            for row in list(self._store.jobs.values()):
                if row.status is JobStatus.QUEUED and row.queue in params.excluded_queues:
                    self._store.put_job(replace(row, updated_at=now))
        return claimed


class StepWritesUnfenced(MemoryBackend):
    """`save_step` and `save_checkpoint` write whoever asks, whatever the row's status."""

    async def save_step(self, params: SaveStepParams, /) -> bool:
        with self._store.lock:
            row = self._store.jobs.get(params.job_id)
            if row is None:
                return False
            self._store.put_job(replace(row, steps={**row.steps, params.name: json.loads(params.value_json)}))
            return True

    async def save_checkpoint(self, params: SaveCheckpointParams, /) -> bool:
        with self._store.lock:
            row = self._store.jobs.get(params.job_id)
            if row is None:
                return False
            self._store.put_job(replace(row, checkpoint=json.loads(params.value_json)))
            return True


class StepReplacesEveryStep(MemoryBackend):
    """`save_step` overwrites the whole `steps` object with the one step it was given."""

    async def save_step(self, params: SaveStepParams, /) -> bool:
        written = await super().save_step(params)
        if written:
            with self._store.lock:
                row = self._store.jobs[params.job_id]
                self._store.put_job(replace(row, steps={params.name: json.loads(params.value_json)}))
        return written


class NackForgetsSteps(MemoryBackend):
    """A nack hands the row back with its steps and checkpoint cleared: every re-run starts over."""

    async def nack_job(self, params: NackJobParams, /) -> bool:
        written = await super().nack_job(params)
        if written:
            with self._store.lock:
                row = self._store.jobs[params.job_id]
                self._store.put_job(replace(row, steps={}, checkpoint=None))
        return written


class ClaimIgnoresMaxVersions(MemoryBackend):
    """Stores versions but claims rows of any version: an old worker takes new code's rows."""

    async def claim_jobs(self, params: ClaimJobsParams, /) -> list[JobRecord]:
        return await super().claim_jobs(replace(params, max_versions=None))


class ShutdownNacksNotCounted(MemoryBackend):
    """Ignores `handler_started`: `shutdown_nacks` never grows, so `max_shutdown_nacks` never applies."""

    async def nack_job(self, params: NackJobParams, /) -> bool:
        return await super().nack_job(replace(params, handler_started=False))


# -- progress and job logs -------------------------------------------------------------------


class ProgressWritesUnfenced(MemoryBackend):
    """`save_progress` writes any row it finds, whoever asks and whatever the row's status."""

    async def save_progress(self, params: SaveProgressParams, /) -> bool:
        with self._store.lock:
            row = self._store.jobs.get(params.job_id)
            if row is None:
                return False
            self._store.put_job(replace(row, progress=json.loads(params.progress_json)))
            return True


class _LogDroppingStore(MemoryStore):
    """A memory store whose dead-letter rows never carry the job's logs."""

    def move_to_dead_letter(self, row: JobRecord, *, error: str | None, reason: str) -> None:
        super().move_to_dead_letter(row, error=error, reason=reason)
        self.dead_logs.pop(row.id, None)


class DeadLetterMoveDropsLogs(MemoryBackend):
    """Moves rows to the dead-letter table (every path: `dead_letter_job`, rescues,
    `expire_unknown_jobs`) without their logs, as an INSERT that lists the old columns would."""

    def __init__(self, *, name: str | None = None, namespace: str | None = None) -> None:
        super().__init__(name=None, namespace=namespace)
        self._store = _LogDroppingStore()


class DeleteLeavesLogsBehind(MemoryBackend):
    """`delete_job` deletes the row but not its logs: a new row under the same id inherits them."""

    async def delete_job(self, params: DeleteJobParams, /) -> bool:
        with self._store.lock:
            logs = self._store.job_logs.get(params.job_id)
            deleted = await super().delete_job(params)
            if logs is not None:
                self._store.job_logs[params.job_id] = logs
            return deleted


# -- unique windows and debounce -------------------------------------------------------------


class _DeclaresWindowsAndDebounce(MemoryBackend):
    """Declares `UniqueWindows` and `DebouncedJobs` whatever the memory store does."""

    @property
    def capabilities(self) -> BackendCapabilities:
        capabilities = super().capabilities
        return replace(capabilities, roles={**capabilities.roles, "UniqueWindows": 1, "DebouncedJobs": 1})


class WindowIgnored(_DeclaresWindowsAndDebounce):
    """Declares `UniqueWindows` but stores every job sent with a window, as if it had none."""

    async def enqueue_jobs(self, params: EnqueueJobsParams, /) -> list[str] | None:
        jobs = [replace(job, unique_window=None) for job in params.jobs]
        return await super().enqueue_jobs(replace(params, jobs=jobs))


class DebounceNeverMoves(_DeclaresWindowsAndDebounce):
    """Declares `DebouncedJobs` but deduplicates a debounced job as a plain keyed one: the first
    enqueue's args and start stay, whatever the repeats say."""

    async def enqueue_jobs(self, params: EnqueueJobsParams, /) -> list[str] | None:
        jobs = [replace(job, debounce_deadline=None) for job in params.jobs]
        return await super().enqueue_jobs(replace(params, jobs=jobs))


class DebounceIgnoresTheDeadline(_DeclaresWindowsAndDebounce):
    """Moves the holder to each repeat's start, past the holder's deadline if the repeat says so."""

    async def enqueue_jobs(self, params: EnqueueJobsParams, /) -> list[str] | None:
        with self._store.lock:
            returned = await super().enqueue_jobs(params)
            for job, job_id in zip(params.jobs, returned or [], strict=True):
                row = self._store.jobs.get(job_id)
                # Only where the memory store moved a debounced holder (it took the repeat's args).
                moved = row is not None and dict(row.args) == dict(job.args)
                if job.debounce_deadline is not None and job_id != job.id and row is not None and moved:
                    self._store.put_job(replace(row, scheduled_at=job.scheduled_at))
            return returned


# -- re-sealing stored sealed values (KeyRotationStore) ---------------------------------------


class SealedRowsSkipDeadLetters(MemoryBackend):
    """Walks the `soniq_jobs` rows and ends there: sealed dead-letter rows are never re-sealed."""

    async def sealed_rows(self, params: SealedRowsParams, /) -> SealedRowPage:
        page = await super().sealed_rows(params)
        rows = [row for row in page.rows if row.table == "jobs"]
        cursor = page.next_cursor
        return SealedRowPage(rows=rows, next_cursor=None if cursor is None or cursor.startswith("dead") else cursor)


class SealedRowsByOffset(MemoryBackend):
    """Pages by position (jobs then dead letters, in id order): a row deleted behind the cursor
    shifts the rest, so the next page starts one row late and a row nobody touched is skipped."""

    async def sealed_rows(self, params: SealedRowsParams, /) -> SealedRowPage:
        with self._store.lock:
            order = [("jobs", job_id) for job_id in sorted(self._store.jobs)]
            order += [("dead_letter", job_id) for job_id in sorted(self._store.dead_letters)]
            start = int(params.cursor or 0)
            rows = []
            for table, job_id in order[start : start + params.limit]:
                texts = (job_texts if table == "jobs" else dead_texts)(self._store, job_id)
                if any(text is not None and mark in text for text in texts for mark in SEALED_MARKS):
                    rows.append(SealedRow(table, job_id, *texts))
            end = start + params.limit
            return SealedRowPage(rows=rows, next_cursor=str(end) if end < len(order) else None)


class ResealIgnoresTheOldValue(MemoryBackend):
    """Writes the new values whenever the row exists, whatever it holds now: a worker's newer
    progress (or a stale read) is overwritten."""

    async def reseal_row(self, params: ResealRowParams, /) -> bool:
        with self._store.lock:
            if params.table == "jobs" and params.id in self._store.jobs:
                current = job_texts(self._store, params.id)
            elif params.table == "dead_letter" and params.id in self._store.dead_letters:
                current = dead_texts(self._store, params.id)
            else:
                return False
            pairs = (params.args_json, params.result_json, params.progress_json)
            now = [None if pair is None else (text or "", pair[1]) for pair, text in zip(pairs, current, strict=True)]
            return await super().reseal_row(replace(params, args_json=now[0], result_json=now[1], progress_json=now[2]))


class ResealFieldByField(MemoryBackend):
    """Compares and writes one field at a time: with the args current and the result stale it
    writes the args, then returns False for the result."""

    async def reseal_row(self, params: ResealRowParams, /) -> bool:
        written = True
        for name in ("args_json", "result_json", "progress_json"):
            pair = getattr(params, name)
            if pair is not None:
                one = ResealRowParams(table=params.table, id=params.id, **{name: pair})
                written = await super().reseal_row(one) and written
        return written
