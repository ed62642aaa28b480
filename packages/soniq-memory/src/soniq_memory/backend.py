"""`MemoryBackend`: the reference implementation of `soniq.backend.Backend`.

Every operation is synchronous inside (no await between reading and writing),
so concurrent asyncio callers never interleave within one operation; a lock
makes the same true for threads sharing a named store.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any

from soniq.backend import (
    AcquireLeaseParams,
    ActivityBucket,
    BackendCapabilities,
    CancelJobParams,
    CancelOutcome,
    CancelRequestsParams,
    ClaimJobsParams,
    CompleteJobsParams,
    DeadLetterJobParams,
    DeadLetterPage,
    DeadLetterPageParams,
    DeadLetterReason,
    DeadLetterRecord,
    DeadLetterStats,
    DeadLetterStatsParams,
    DeleteDeadLettersParams,
    DeleteJobParams,
    DueSchedulesParams,
    EnqueueJobsParams,
    ExpireUnknownJobsParams,
    FindStaleJobsParams,
    FinishCancelParams,
    FireScheduleParams,
    GetDeadLetterParams,
    GetJobLogsParams,
    GetJobParams,
    GetLeaseParams,
    GetScheduleParams,
    HeartbeatParams,
    JobActivityParams,
    JobCountsParams,
    JobPage,
    JobPageParams,
    JobRecord,
    JobStatus,
    LeaseRecord,
    ListSchedulesParams,
    MarkStartedParams,
    MigrationStep,
    NackJobParams,
    NewJob,
    PausedQueue,
    PauseQueueParams,
    PrepareWorkerParams,
    PruneDeadLettersParams,
    PruneJobsParams,
    PurgeDeadLetterParams,
    QueueCounts,
    QueueStats,
    QueueStatsParams,
    RegisterWorkerParams,
    ReleaseLeaseParams,
    RemoveScheduleParams,
    ReplayDeadLetterParams,
    RequestCancelParams,
    RescueJobsParams,
    ResealRowParams,
    ResumeQueueParams,
    RetryJobParams,
    SaveCheckpointParams,
    SaveJobLogsParams,
    SaveProgressParams,
    SaveStepParams,
    ScheduleRecord,
    SchemaReport,
    SchemaStatus,
    SealedRowPage,
    SealedRowsParams,
    SetSchedulePausedParams,
    SetupSchemaParams,
    SetWorkerStatusParams,
    SnoozeJobParams,
    StaleScan,
    UpsertScheduleParams,
    WaitForJobChangesParams,
    WaitForJobsParams,
    WatchJobsParams,
    WorkerRecord,
    WorkerStatus,
    dead_letter_filter_matches,
    decode_json,
)
from soniq.errors import InvalidURLError, SoniqError
from soniq_memory import cancel, changes, dependencies, key_rotation, reads, schedules
from soniq_memory.claim import claim_rows
from soniq_memory.dependencies import Finish
from soniq_memory.enqueue import insert_jobs, queued_row
from soniq_memory.recovery import apply_rescue, find_stale
from soniq_memory.store import MemoryStore, export, json_copy, named_stores

ROLES = {
    "QueueStore": 1,
    "DeadLetterStore": 1,
    "ScheduleStore": 1,
    "OperatorReads": 1,
    "SchemaAdmin": 1,
    "CancelChannel": 1,
    "LimitStore": 1,
    "DependencyStore": 1,
    "RetentionStore": 1,
    "QueuePauseStore": 1,
    "JobStepStore": 1,
    "VersionedJobs": 1,
    "JobProgressStore": 1,
    "JobLogStore": 1,
    "UniqueWindows": 1,
    "DebouncedJobs": 1,
    "KeyRotationStore": 1,
}
"""Every role this backend fills, with the version of each it implements."""

_CAPABILITIES = BackendCapabilities(
    roles=ROLES,
    push_wakeup=True,
    transactional_enqueue=False,
    shared_across_processes=False,
    push_job_changes=True,
)
_URL_OPTIONS = ("namespace",)


class MemoryBackend:
    """An in-process queue store for tests and examples.

    ``MemoryBackend()`` (or ``memory://``) owns a fresh store. With a `name`
    (``memory://NAME``) every backend built with that name and namespace in
    this process shares one store, so an app and a worker can meet in it.
    """

    def __init__(self, *, name: str | None = None, namespace: str | None = None) -> None:
        self.name = name
        self.namespace = namespace
        self._store = named_stores.get(name, namespace) if name else MemoryStore()

    @classmethod
    def from_url(cls, url: str, **options: Any) -> MemoryBackend:
        """``memory://`` gives a fresh store; ``memory://NAME`` a process-wide shared one."""
        unknown = sorted(set(options) - set(_URL_OPTIONS))
        if unknown:
            raise TypeError(
                f"MemoryBackend.from_url() got unknown option(s) {', '.join(unknown)}; "
                f"accepted: {', '.join(_URL_OPTIONS)}"
            )
        scheme, sep, rest = url.partition("://")
        if not sep or scheme.split("+", 1)[0].lower() != "memory":
            raise InvalidURLError(f"invalid memory URL {url!r}: expected memory:// or memory://NAME")
        name = rest.split("?", 1)[0].strip("/")
        namespace = options.get("namespace")
        if namespace is not None and not isinstance(namespace, str):
            raise TypeError(f"namespace must be a str or None, got {namespace!r}")
        return cls(name=name or None, namespace=namespace)

    def __repr__(self) -> str:
        where = f"memory://{self.name}" if self.name else "memory://"
        return f"MemoryBackend({where!r}, namespace={self.namespace!r})"

    @property
    def capabilities(self) -> BackendCapabilities:
        return _CAPABILITIES

    # -- public test API -----------------------------------------------------

    @property
    def jobs(self) -> Mapping[str, JobRecord]:
        """Live read-only view of `soniq_jobs`, by job id."""
        return MappingProxyType(self._store.jobs)

    @property
    def dead_letters(self) -> Mapping[str, DeadLetterRecord]:
        """Live read-only view of `soniq_dead_letter_jobs`, by original job id."""
        return MappingProxyType(self._store.dead_letters)

    @property
    def workers(self) -> Mapping[str, WorkerRecord]:
        """Live read-only view of `soniq_workers`, by worker id."""
        return MappingProxyType(self._store.workers)

    def reset(self) -> None:
        """Forget every job, dead letter, worker, schedule, lease, queue pause and unique window in this store."""
        with self._store.lock:
            self._store.clear()

    def age_worker(self, worker_id: str, seconds: float) -> None:
        """Move a worker's `last_heartbeat` `seconds` into the past, to make it stale without waiting."""
        with self._store.lock:
            worker = self._store.workers[worker_id]
            self._store.workers[worker_id] = replace(
                worker, last_heartbeat=worker.last_heartbeat - timedelta(seconds=seconds)
            )

    def put_job(self, record: JobRecord) -> None:
        """Insert or replace a row exactly as given (states core would not produce, for tests).

        Raises ValueError for a status outside the four, like every write path."""
        with self._store.lock:
            self._store.put_job(record)
            if record.status is JobStatus.QUEUED and record.waiting_on > 0:
                pending = [
                    dep_id
                    for dep_id in record.depends_on
                    if (dep := self._store.jobs.get(dep_id)) is not None
                    and dep.status in (JobStatus.QUEUED, JobStatus.PROCESSING)
                ]
                dependencies.record_edges(self._store, record.id, pending)

    def put_raw_args(self, job_id: str, raw_args: str) -> None:
        """Replace the stored args of a row with raw text, as a foreign producer or a hand fix
        might have written them; reads then decode that text row by row (`decode_error`)."""
        with self._store.lock:
            if job_id not in self._store.jobs:
                raise KeyError(f"no job with id {job_id!r}")
            self._store.raw_args[job_id] = raw_args

    # -- lifecycle -------------------------------------------------------------

    async def connect(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def setup(self) -> None:
        return None

    async def setup_schema(self, params: SetupSchemaParams, /) -> SchemaReport:
        # A process-local store has no schema to detect or migrate.
        return SchemaReport(family="soniq", applied=(), pending=(), dry_run=params.dry_run)

    async def prepare_worker(self, params: PrepareWorkerParams, /) -> None:
        if params.concurrency < 1:
            raise SoniqError(f"concurrency must be at least 1, got {params.concurrency}")
        if params.prefetch < 0:
            raise SoniqError(f"prefetch must be 0 or more, got {params.prefetch}")

    async def drop_schema(self) -> None:
        self.reset()

    # -- producers -------------------------------------------------------------

    async def enqueue_jobs(self, params: EnqueueJobsParams, /) -> list[str] | None:
        if params.connection is not None:
            raise SoniqError("the memory backend has no transactional enqueue; pass connection=None")
        with self._store.lock:
            return self._insert_jobs(params.jobs)

    def _insert_jobs(self, jobs: Sequence[NewJob]) -> list[str]:
        """Insert every job (the caller holds the lock); see `soniq_memory.enqueue.insert_jobs`."""
        return insert_jobs(self._store, jobs)

    async def get_job(self, params: GetJobParams, /) -> JobRecord | None:
        with self._store.lock:
            row = self._store.jobs.get(params.job_id)
            return self._store.export_job(row) if row is not None else None

    async def cancel_job(self, params: CancelJobParams, /) -> bool:
        store = self._store
        with store.lock:
            row = store.jobs.get(params.job_id)
            if row is None or row.status is not JobStatus.QUEUED:
                return False
            store.cancel_queued(row)
            return True

    # -- the claim path --------------------------------------------------------

    async def claim_jobs(self, params: ClaimJobsParams, /) -> list[JobRecord]:
        with self._store.lock:
            return claim_rows(self._store, params)

    def _owned(self, job_id: str, worker_id: str) -> JobRecord | None:
        """The row when `worker_id` still owns it (the fence of every write about a claimed row)."""
        row = self._store.jobs.get(job_id)
        if row is None or row.status is not JobStatus.PROCESSING or row.worker_id != worker_id:
            return None
        return row

    async def mark_started(self, params: MarkStartedParams, /) -> set[str]:
        store = self._store
        with store.lock:
            written: set[str] = set()
            now = store.now()
            for job_id in params.job_ids:
                row = self._owned(job_id, params.worker_id)
                if row is None:
                    continue
                store.put_job(replace(row, started_at=now, updated_at=now))
                written.add(job_id)
            return written

    async def complete_jobs(self, params: CompleteJobsParams, /) -> set[str]:
        store = self._store
        with store.lock:
            # Serialise every result first: one that is not JSON must not leave the batch half-written.
            stored = [(item, json_copy(item.result, what="job result")) for item in params.results]
            written: set[str] = set()
            now = store.now()
            for item, result in stored:
                row = self._owned(item.job_id, params.worker_id)
                if row is None:
                    continue
                if item.delete_row:
                    store.drop_job(item.job_id)
                    store.finished(item.job_id, Finish.DONE)
                else:
                    store.put_job(
                        replace(
                            row,
                            status=JobStatus.DONE,
                            result=result,
                            worker_id=None,
                            updated_at=now,
                            expires_at=item.expires_at,
                        )
                    )
                    store.finished(item.job_id, Finish.DONE)
                written.add(item.job_id)
            return written

    async def retry_job(self, params: RetryJobParams, /) -> bool:
        return self._requeue_owned(
            params.job_id, params.worker_id, params.scheduled_at, count_attempt=True, last_error=params.error
        )

    async def snooze_job(self, params: SnoozeJobParams, /) -> bool:
        return self._requeue_owned(params.job_id, params.worker_id, params.scheduled_at, count_attempt=False)

    def _requeue_owned(
        self,
        job_id: str,
        worker_id: str,
        scheduled_at: datetime,
        *,
        count_attempt: bool,
        last_error: str | None = None,
    ) -> bool:
        """Back to `queued` at `scheduled_at`, only while `worker_id` owns the row."""
        store = self._store
        with store.lock:
            row = self._owned(job_id, worker_id)
            if row is None:
                return False
            store.put_job(
                replace(
                    row,
                    status=JobStatus.QUEUED,
                    attempts=row.attempts + 1 if count_attempt else row.attempts,
                    last_error=last_error if count_attempt else row.last_error,
                    scheduled_at=scheduled_at,
                    worker_id=None,
                    started_at=None,
                    updated_at=store.now(),
                )
            )
            store.wake(row.queue)
            return True

    async def dead_letter_job(self, params: DeadLetterJobParams, /) -> bool:
        store = self._store
        with store.lock:
            row = self._owned(params.job_id, params.worker_id)
            if row is None:
                return False
            store.move_to_dead_letter(replace(row, attempts=row.attempts + 1), error=params.error, reason=params.reason)
            return True

    async def nack_job(self, params: NackJobParams, /) -> bool:
        store = self._store
        with store.lock:
            row = self._owned(params.job_id, params.worker_id)
            if row is None:
                return False
            store.write_nack(row, handler_started=params.handler_started)
            return True

    # -- workers ---------------------------------------------------------------

    async def register_worker(self, params: RegisterWorkerParams, /) -> None:
        worker = params.worker
        store = self._store
        with store.lock:
            now = store.now()
            store.workers[worker.id] = WorkerRecord(
                id=worker.id,
                hostname=worker.hostname,
                pid=worker.pid,
                queues=tuple(worker.queues) if worker.queues is not None else None,
                concurrency=worker.concurrency,
                status=WorkerStatus.ACTIVE,
                last_heartbeat=now,
                started_at=now,
                job_names=tuple(worker.job_names) if worker.job_names is not None else None,
                job_versions=dict(worker.job_versions) if worker.job_versions is not None else None,
            )

    async def heartbeat(self, params: HeartbeatParams, /) -> bool:
        store = self._store
        with store.lock:
            worker = store.workers.get(params.worker_id)
            if worker is None or worker.status is WorkerStatus.STOPPED:
                return False
            store.workers[params.worker_id] = replace(worker, last_heartbeat=store.now())
            return True

    async def set_worker_status(self, params: SetWorkerStatusParams, /) -> bool:
        store = self._store
        with store.lock:
            worker = store.workers.get(params.worker_id)
            if worker is None:
                return False
            status = WorkerStatus(params.status)
            if worker.status is WorkerStatus.STOPPED and status is not WorkerStatus.STOPPED:
                return False
            now = store.now()
            worker = replace(worker, status=status, last_heartbeat=now)
            if params.state is not None:
                worker = replace(worker, state=str(params.state), state_changed_at=now)
            if params.last_shutdown is not None:
                worker = replace(worker, last_shutdown=json_copy(dict(params.last_shutdown), what="last_shutdown"))
            store.workers[params.worker_id] = worker
            return True

    async def list_workers(self) -> list[WorkerRecord]:
        with self._store.lock:
            return sorted(self._store.workers.values(), key=lambda worker: (worker.started_at, worker.id))

    # -- stale recovery --------------------------------------------------------

    async def find_stale_jobs(self, params: FindStaleJobsParams, /) -> StaleScan:
        # One lock means one sweeper at a time, so this store never reports `skipped`.
        with self._store.lock:
            return find_stale(self._store, heartbeat_timeout=params.heartbeat_timeout)

    async def rescue_jobs(self, params: RescueJobsParams, /) -> set[str]:
        store = self._store
        with store.lock:
            return {rescue.job_id for rescue in params.rescues if apply_rescue(store, rescue)}

    async def expire_unknown_jobs(self, params: ExpireUnknownJobsParams, /) -> set[str]:
        store = self._store
        with store.lock:
            known = set(params.known_names)
            cutoff = store.now() - timedelta(seconds=max(params.older_than, 0.0))
            expired = [
                row
                for row in store.jobs.values()
                if row.status is JobStatus.QUEUED and row.job_name not in known and row.created_at <= cutoff
            ]
            for row in expired:
                store.move_to_dead_letter(row, error=params.error, reason=DeadLetterReason.UNKNOWN_JOB)
            return {row.id for row in expired}

    # -- observation -----------------------------------------------------------

    async def queue_stats(self, params: QueueStatsParams, /) -> QueueStats:
        queue = params.queue
        with self._store.lock:
            counts = dict.fromkeys(JobStatus, 0)
            for row in self._store.jobs.values():
                if queue is None or row.queue == queue:
                    counts[row.status] += 1
            dead = sum(1 for dlq in self._store.dead_letters.values() if queue is None or dlq.queue == queue)
            return QueueStats(
                total=sum(counts.values()) + dead,
                queued=counts[JobStatus.QUEUED],
                processing=counts[JobStatus.PROCESSING],
                done=counts[JobStatus.DONE],
                dead_letter=dead,
                cancelled=counts[JobStatus.CANCELLED],
            )

    async def wait_for_jobs(self, params: WaitForJobsParams, /) -> None:
        queues, timeout = params.queues, params.timeout
        store = self._store
        with store.lock:
            now = store.now()
            wanted = set(queues) if queues is not None else None
            if any(
                row.status is JobStatus.QUEUED and row.scheduled_at <= now and (wanted is None or row.queue in wanted)
                for row in store.jobs.values()
            ):
                return
            waiter = store.add_waiter(queues)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter.future, timeout=max(timeout, 0.0))
        finally:
            with store.lock:
                store.remove_waiter(waiter)

    # -- dead letters ----------------------------------------------------------

    async def get_dead_letter(self, params: GetDeadLetterParams, /) -> DeadLetterRecord | None:
        with self._store.lock:
            row = self._store.dead_letters.get(params.job_id)
            return self._store.export_dead(row) if row is not None else None

    async def replay_dead_letter(self, params: ReplayDeadLetterParams, /) -> str | None:
        job_id, new_job_id, scheduled_at = params.job_id, params.new_job_id, params.scheduled_at
        store = self._store
        with store.lock:
            dead = store.dead_letters.get(job_id)
            if dead is None:
                return None
            if new_job_id in store.jobs:
                raise ValueError(f"a job with id {new_job_id!r} already exists")
            now = store.now()
            store.put_job(
                queued_row(
                    id=new_job_id,
                    job_name=dead.job_name,
                    args=dead.args,
                    queue=params.queue if params.queue is not None else dead.queue,
                    priority=params.priority if params.priority is not None else dead.priority,
                    scheduled_at=scheduled_at,
                    max_attempts=params.max_attempts if params.max_attempts is not None else dead.max_attempts,
                    now=now,
                    attempts=params.attempts,
                    version=dead.version,
                )
            )
            raw = store.dead_raw_args.get(job_id)
            if raw is not None:
                store.raw_args[new_job_id] = raw
            store.dead_letters[job_id] = replace(
                dead, resurrection_count=dead.resurrection_count + 1, last_resurrection_at=now
            )
            store.wake(params.queue if params.queue is not None else dead.queue)
            return new_job_id

    async def purge_dead_letter(self, params: PurgeDeadLetterParams, /) -> bool:
        with self._store.lock:
            return self._store.drop_dead(params.job_id) is not None

    # -- deleting jobs and bulk dead-letter operations --

    async def delete_job(self, params: DeleteJobParams, /) -> bool:
        store = self._store
        with store.lock:
            row = store.drop_job(params.job_id)
            if row is None:
                return False
            if row.status in (JobStatus.QUEUED, JobStatus.PROCESSING):
                store.finished(row.id, Finish.DELETED)
            return True

    async def delete_dead_letters(self, params: DeleteDeadLettersParams, /) -> set[str]:
        store = self._store
        with store.lock:
            matching = [row for row in store.dead_letters.values() if dead_letter_filter_matches(params.filter, row)]
            matching.sort(key=lambda row: (row.moved_to_dead_letter_at, row.id))
            deleted = {row.id for row in matching[: max(params.limit, 0)]}
            for job_id in deleted:
                store.drop_dead(job_id)
            return deleted

    async def dead_letter_stats(self, params: DeadLetterStatsParams, /) -> DeadLetterStats:
        with self._store.lock:
            rows = [
                row
                for row in self._store.dead_letters.values()
                if params.filter is None or dead_letter_filter_matches(params.filter, row)
            ]
            moved = [row.moved_to_dead_letter_at for row in rows]
            return DeadLetterStats(
                total=len(rows),
                by_job_name=dict(Counter(row.job_name for row in rows)),
                by_queue=dict(Counter(row.queue for row in rows)),
                by_reason=dict(Counter(row.dead_letter_reason for row in rows)),
                resurrected=sum(1 for row in rows if row.resurrection_count > 0),
                oldest_moved_at=min(moved) if moved else None,
                newest_moved_at=max(moved) if moved else None,
            )

    # -- dashboard reads (soniq_memory.reads) ----------------------------------

    async def job_counts(self, params: JobCountsParams, /) -> list[QueueCounts]:
        return reads.job_counts(self._store, params)

    async def job_activity(self, params: JobActivityParams, /) -> list[ActivityBucket]:
        return reads.job_activity(self._store, params)

    async def job_page(self, params: JobPageParams, /) -> JobPage:
        return reads.job_page(self._store, params)

    async def dead_letter_page(self, params: DeadLetterPageParams, /) -> DeadLetterPage:
        return reads.dead_letter_page(self._store, params)

    async def queue_names(self) -> list[str]:
        return reads.queue_names(self._store)

    # -- schema status --

    async def schema_status(self) -> SchemaStatus:
        # An in-process store has no schema to upgrade: it is always the shape this code knows.
        return SchemaStatus(
            backend="memory",
            location=f"memory://{self.name}" if self.name else "memory://",
            applied=(MigrationStep(1, "in-memory store"),),
            pending=(),
            details={"namespace": self.namespace},
        )

    # -- schedules, leader lease, pruning -------------------------

    async def upsert_schedule(self, params: UpsertScheduleParams, /) -> ScheduleRecord:
        with self._store.lock:
            return export(schedules.upsert(self._store, params))

    async def get_schedule(self, params: GetScheduleParams, /) -> ScheduleRecord | None:
        with self._store.lock:
            row = self._store.schedules.get(params.name)
            return export(row) if row is not None else None

    async def list_schedules(self, params: ListSchedulesParams, /) -> list[ScheduleRecord]:
        wanted = set(params.names) if params.names is not None else None
        with self._store.lock:
            rows = [row for row in self._store.schedules.values() if wanted is None or row.name in wanted]
            return [export(row) for row in sorted(rows, key=lambda row: row.name)]

    async def set_schedule_paused(self, params: SetSchedulePausedParams, /) -> bool:
        with self._store.lock:
            return schedules.set_paused(self._store, params)

    async def remove_schedule(self, params: RemoveScheduleParams, /) -> bool:
        with self._store.lock:
            return self._store.schedules.pop(params.name, None) is not None

    async def due_schedules(self, params: DueSchedulesParams, /) -> list[ScheduleRecord]:
        with self._store.lock:
            return [export(row) for row in schedules.due(self._store, params)]

    async def fire_schedule(self, params: FireScheduleParams, /) -> list[str] | None:
        store = self._store
        with store.lock:
            row = schedules.fenced(store, params.name, params.expected_next_run)
            if row is None:
                return None
            ids = self._insert_jobs(params.jobs)
            store.schedules[params.name] = replace(
                row,
                next_run=params.new_next_run,
                run_count=row.run_count + len(ids),
                last_run=params.fired_at if ids else row.last_run,
                last_job_id=ids[-1] if ids else row.last_job_id,
                updated_at=store.now(),
            )
            return ids

    async def acquire_lease(self, params: AcquireLeaseParams, /) -> LeaseRecord | None:
        with self._store.lock:
            return schedules.acquire(self._store, params)

    async def release_lease(self, params: ReleaseLeaseParams, /) -> bool:
        with self._store.lock:
            return schedules.release(self._store, params)

    async def get_lease(self, params: GetLeaseParams, /) -> LeaseRecord | None:
        with self._store.lock:
            return schedules.current_lease(self._store, params.name)

    async def prune_jobs(self, params: PruneJobsParams, /) -> int:
        with self._store.lock:
            return schedules.prune_jobs(self._store, params)

    async def prune_dead_letters(self, params: PruneDeadLettersParams, /) -> int:
        with self._store.lock:
            return schedules.prune_dead_letters(self._store, params)

    # -- queue pauses (QueuePauseStore) ------------------------------------------

    async def pause_queue(self, params: PauseQueueParams, /) -> bool:
        store = self._store
        with store.lock:
            current = store.pauses.get(params.queue)
            if current is not None:
                store.pauses[params.queue] = replace(current, reason=params.reason)
                return False
            store.pauses[params.queue] = PausedQueue(queue=params.queue, reason=params.reason, paused_at=store.now())
            return True

    async def resume_queue(self, params: ResumeQueueParams, /) -> bool:
        store = self._store
        with store.lock:
            if store.pauses.pop(params.queue, None) is None:
                return False
            # Its due rows are claimable again: wake the workers that wait on it.
            store.wake(params.queue)
            return True

    async def paused_queues(self) -> list[PausedQueue]:
        with self._store.lock:
            return [self._store.pauses[queue] for queue in sorted(self._store.pauses)]

    # -- steps and checkpoints (JobStepStore) -------------------------------------

    async def save_step(self, params: SaveStepParams, /) -> bool:
        value = json.loads(params.value_json)
        store = self._store
        with store.lock:
            row = self._owned(params.job_id, params.worker_id)
            if row is None:
                return False
            store.put_job(replace(row, steps={**row.steps, params.name: value}))
            return True

    async def save_checkpoint(self, params: SaveCheckpointParams, /) -> bool:
        value = json.loads(params.value_json)
        store = self._store
        with store.lock:
            row = self._owned(params.job_id, params.worker_id)
            if row is None:
                return False
            store.put_job(replace(row, checkpoint=value))
            return True

    # -- progress and logs (JobProgressStore, JobLogStore) -------------------------

    async def save_progress(self, params: SaveProgressParams, /) -> bool:
        # Kept decoded on the record, as every read returns it (text that is not an object reads as none).
        value, problem = decode_json(params.progress_json, "progress")
        progress = value if problem is None and isinstance(value, dict) else None
        store = self._store
        with store.lock:
            row = self._owned(params.job_id, params.worker_id)
            if row is None:
                return False
            store.put_job(replace(row, progress=progress))
            return True

    async def save_job_logs(self, params: SaveJobLogsParams, /) -> bool:
        store = self._store
        with store.lock:
            if self._owned(params.job_id, params.worker_id) is None:
                return False
            store.job_logs[params.job_id] = params.logs_json
            return True

    async def get_job_logs(self, params: GetJobLogsParams, /) -> str | None:
        store = self._store
        with store.lock:
            logs = store.job_logs.get(params.job_id) if params.job_id in store.jobs else None
            if logs is None and params.job_id in store.dead_letters:
                logs = store.dead_logs.get(params.job_id)
            return logs

    # -- sealed values (KeyRotationStore, soniq_memory.key_rotation) ---------------

    async def sealed_rows(self, params: SealedRowsParams, /) -> SealedRowPage:
        with self._store.lock:
            return key_rotation.sealed_rows(self._store, params)

    async def reseal_row(self, params: ResealRowParams, /) -> bool:
        with self._store.lock:
            return key_rotation.reseal_row(self._store, params)

    # -- cancelling running jobs, waiting for jobs ----------------

    async def request_cancel(self, params: RequestCancelParams, /) -> CancelOutcome:
        with self._store.lock:
            return cancel.request_cancel(self._store, params.job_id)

    async def cancel_requests(self, params: CancelRequestsParams, /) -> set[str]:
        with self._store.lock:
            return cancel.cancel_requests(self._store, params.worker_id)

    async def finish_cancel(self, params: FinishCancelParams, /) -> bool:
        with self._store.lock:
            return cancel.finish_cancel(self._store, params)

    async def watch_jobs(self, params: WatchJobsParams, /) -> None:
        changes.watch(self._store, params.job_ids)

    async def wait_for_job_changes(self, params: WaitForJobChangesParams, /) -> set[str] | None:
        return await changes.wait(self._store, params.job_ids, params.timeout)
