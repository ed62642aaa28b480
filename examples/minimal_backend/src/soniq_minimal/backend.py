"""`MinimalBackend`: a Soniq backend that fills only the required role, `QueueStore`.

Everything lives in one process: three dicts (jobs, dead letters, workers) and one asyncio
condition per store to wake idle workers. No method awaits between reading and writing, so two
coroutines never see one operation half done; that is the whole of its concurrency control, and
why it cannot be shared across processes or threads.

Args are kept as JSON text, as a database column would keep them, and decoded on every read: a
row whose text does not decode to an object comes back with ``args={}`` and `decode_error` set.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from soniq.backend import (
    BackendCapabilities,
    CancelJobParams,
    ClaimJobsParams,
    CompleteJobsParams,
    DeadLetterJobParams,
    DeadLetterRecord,
    DeleteJobParams,
    EnqueueJobsParams,
    ExpireUnknownJobsParams,
    FindStaleJobsParams,
    GetJobParams,
    HeartbeatParams,
    JobRecord,
    JobStatus,
    MarkStartedParams,
    NackJobParams,
    NewJob,
    PrepareWorkerParams,
    QueueStats,
    QueueStatsParams,
    RegisterWorkerParams,
    Rescue,
    RescueAction,
    RescueJobsParams,
    RetryJobParams,
    SetWorkerStatusParams,
    SnoozeJobParams,
    StaleScan,
    WaitForJobsParams,
    WorkerRecord,
    WorkerStatus,
)
from soniq.errors import InvalidURLError, SoniqError

SCHEME = "minimal"

CAPABILITIES = BackendCapabilities(
    roles={"QueueStore": 1},
    push_wakeup=True,  # an enqueue in this process wakes `wait_for_jobs` at once
    transactional_enqueue=False,
    shared_across_processes=False,
)


def _now() -> datetime:
    return datetime.now(UTC)


def _to_text(value: Any, what: str) -> str:
    try:
        return json.dumps(value, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what} must be JSON-serialisable: {exc}") from exc


def decode_args(text: str) -> tuple[dict[str, Any], str | None]:
    """The stored args text as a dict, or ``({}, why)`` when it is not a JSON object."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return {}, f"args: {type(exc).__name__}: {str(exc)[:200]}"
    if not isinstance(value, dict):
        return {}, f"args: expected a JSON object, got {type(value).__name__}"
    return value, None


@dataclass
class _Row:
    """A stored job: the record without its args, and the args as text."""

    record: JobRecord
    args_text: str


@dataclass
class _Store:
    jobs: dict[str, _Row] = field(default_factory=dict)
    dead_letters: dict[str, tuple[DeadLetterRecord, str]] = field(default_factory=dict)
    workers: dict[str, WorkerRecord] = field(default_factory=dict)
    dedup: dict[str, str] = field(default_factory=dict)
    """Dedup key -> id of the queued row holding it (checked against the row before use)."""
    changed: asyncio.Event = field(default_factory=asyncio.Event)


class MinimalBackend:
    """An in-process `QueueStore`: ``minimal://`` (a fresh store per backend)."""

    def __init__(self, *, namespace: str | None = None) -> None:
        self.namespace = namespace
        self._store = _Store()

    @classmethod
    def from_url(cls, url: str, **options: Any) -> MinimalBackend:
        """``minimal://``; the only option is `namespace` (each backend has its own store anyway)."""
        scheme, sep, _ = url.partition("://")
        if not sep or scheme.lower() != SCHEME:
            raise InvalidURLError(f"invalid minimal URL {url!r}: expected minimal://")
        unknown = sorted(set(options) - {"namespace"})
        if unknown:
            raise TypeError(f"MinimalBackend.from_url() got unknown option(s) {', '.join(unknown)}")
        return cls(namespace=options.get("namespace"))

    def __repr__(self) -> str:
        return f"MinimalBackend(namespace={self.namespace!r})"

    @property
    def capabilities(self) -> BackendCapabilities:
        return CAPABILITIES

    # -- lifecycle ---------------------------------------------------------------------------

    async def connect(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def setup(self) -> None:
        return None

    async def prepare_worker(self, params: PrepareWorkerParams, /) -> None:
        if params.concurrency < 1:
            raise SoniqError(f"concurrency must be at least 1, got {params.concurrency}")

    # -- reading rows --------------------------------------------------------------------------

    def _export(self, row: _Row) -> JobRecord:
        args, error = decode_args(row.args_text)
        return replace(row.record, args=args, decode_error=error, result=_copy(row.record.result))

    def _owned(self, job_id: str, worker_id: str) -> _Row | None:
        """The row while `worker_id` owns it: the fence of every write about a claimed row."""
        row = self._store.jobs.get(job_id)
        if row is None or row.record.status is not JobStatus.PROCESSING or row.record.worker_id != worker_id:
            return None
        return row

    def _write(self, row: _Row, **changes: Any) -> None:
        row.record = replace(row.record, updated_at=_now(), **changes)

    def _wake(self) -> None:
        self._store.changed.set()

    # -- producers -------------------------------------------------------------------------------

    async def enqueue_jobs(self, params: EnqueueJobsParams, /) -> list[str] | None:
        if params.connection is not None:
            raise SoniqError("MinimalBackend has no transactional enqueue (capabilities.transactional_enqueue)")
        store = self._store
        planned: list[_Row] = []
        ids: list[str] = []
        seen: set[str] = set()
        now = _now()
        for job in params.jobs:  # plan every row first: a bad one stores nothing of the call
            if job.depends_on:
                raise SoniqError("MinimalBackend does not fill DependencyStore: it cannot store depends_on")
            if job.id in seen or job.id in store.jobs:
                raise ValueError(f"a job with id {job.id!r} already exists")
            seen.add(job.id)
            holder = self._dedup_holder(job.dedup_key)
            if holder is not None:
                ids.append(holder)
                continue
            planned.append(_Row(self._new_record(job, now), job.args_json or _to_text(dict(job.args), "job args")))
            ids.append(job.id)
        for row in planned:
            store.jobs[row.record.id] = row
            if row.record.dedup_key is not None:
                store.dedup[row.record.dedup_key] = row.record.id
        if planned:
            self._wake()
        return ids

    def _dedup_holder(self, key: str | None) -> str | None:
        if key is None:
            return None
        job_id = self._store.dedup.get(key)
        row = self._store.jobs.get(job_id) if job_id is not None else None
        if row is None or row.record.status is not JobStatus.QUEUED or row.record.dedup_key != key:
            return None
        return row.record.id

    @staticmethod
    def _new_record(job: NewJob, now: datetime) -> JobRecord:
        return JobRecord(
            id=job.id,
            job_name=job.job_name,
            args={},
            status=JobStatus.QUEUED,
            attempts=0,
            max_attempts=job.max_attempts,
            queue=job.queue,
            priority=job.priority,
            scheduled_at=job.scheduled_at,
            last_error=None,
            worker_id=None,
            result=None,
            created_at=now,
            updated_at=now,
            trace_context=dict(job.trace_context) if job.trace_context is not None else None,
            dedup_key=job.dedup_key,
            producer_id=job.producer_id,
            limit_key=job.limit_key,
        )

    async def get_job(self, params: GetJobParams, /) -> JobRecord | None:
        row = self._store.jobs.get(params.job_id)
        return self._export(row) if row is not None else None

    async def cancel_job(self, params: CancelJobParams, /) -> bool:
        row = self._store.jobs.get(params.job_id)
        if row is None or row.record.status is not JobStatus.QUEUED:
            return False
        self._write(row, status=JobStatus.CANCELLED)
        return True

    async def delete_job(self, params: DeleteJobParams, /) -> bool:
        return self._store.jobs.pop(params.job_id, None) is not None

    # -- the claim path ------------------------------------------------------------------------

    async def claim_jobs(self, params: ClaimJobsParams, /) -> list[JobRecord]:
        if params.limits:
            raise SoniqError("MinimalBackend does not fill LimitStore: it cannot claim under limits")
        if params.limit <= 0:
            return []
        now = _now()
        queues = set(params.queues) if params.queues is not None else None
        names = set(params.job_names) if params.job_names is not None else None
        due = sorted(
            (
                row
                for row in self._store.jobs.values()
                if row.record.status is JobStatus.QUEUED
                and row.record.scheduled_at <= now
                and (queues is None or row.record.queue in queues)
                and (names is None or row.record.job_name in names)
            ),
            key=lambda row: (row.record.priority, row.record.scheduled_at, row.record.created_at, row.record.id),
        )
        claimed: list[JobRecord] = []
        for row in due[: params.limit]:
            self._write(
                row,
                status=JobStatus.PROCESSING,
                worker_id=params.worker_id,
                started_at=now if params.mark_started else None,
                dedup_key=None,  # a claimed row no longer holds its key
            )
            claimed.append(self._export(row))
        return claimed

    async def mark_started(self, params: MarkStartedParams, /) -> set[str]:
        written: set[str] = set()
        for job_id in params.job_ids:
            row = self._owned(job_id, params.worker_id)
            if row is not None:
                self._write(row, started_at=_now())
                written.add(job_id)
        return written

    async def complete_jobs(self, params: CompleteJobsParams, /) -> set[str]:
        # Encode every result before writing any: one that is not JSON must not half-write the batch.
        results = [(item, json.loads(_to_text(item.result, "job result"))) for item in params.results]
        written: set[str] = set()
        for item, result in results:
            row = self._owned(item.job_id, params.worker_id)
            if row is None:
                continue
            if item.delete_row:
                del self._store.jobs[item.job_id]
            else:
                self._write(row, status=JobStatus.DONE, result=result, worker_id=None, expires_at=item.expires_at)
            written.add(item.job_id)
        return written

    async def retry_job(self, params: RetryJobParams, /) -> bool:
        row = self._owned(params.job_id, params.worker_id)
        if row is None:
            return False
        self._requeue(row, params.scheduled_at, attempts=row.record.attempts + 1, last_error=params.error)
        return True

    async def snooze_job(self, params: SnoozeJobParams, /) -> bool:
        row = self._owned(params.job_id, params.worker_id)
        if row is None:
            return False
        self._requeue(row, params.scheduled_at, attempts=row.record.attempts, last_error=row.record.last_error)
        return True

    def _requeue(self, row: _Row, scheduled_at: datetime, *, attempts: int, last_error: str | None) -> None:
        self._write(
            row,
            status=JobStatus.QUEUED,
            attempts=attempts,
            last_error=last_error,
            scheduled_at=scheduled_at,
            worker_id=None,
            started_at=None,
        )
        self._wake()

    async def dead_letter_job(self, params: DeadLetterJobParams, /) -> bool:
        row = self._owned(params.job_id, params.worker_id)
        if row is None:
            return False
        self._move_to_dead_letter(row, attempts=row.record.attempts + 1, error=params.error, reason=params.reason)
        return True

    def _move_to_dead_letter(self, row: _Row, *, attempts: int, error: str | None, reason: str) -> None:
        record = row.record
        dead = DeadLetterRecord(
            id=record.id,
            job_name=record.job_name,
            args={},
            queue=record.queue,
            attempts=attempts,
            last_error=error,
            dead_letter_reason=str(reason),
            moved_to_dead_letter_at=_now(),
            max_attempts=record.max_attempts,
            priority=record.priority,
        )
        self._store.dead_letters[record.id] = (dead, row.args_text)
        del self._store.jobs[record.id]

    async def nack_job(self, params: NackJobParams, /) -> bool:
        row = self._owned(params.job_id, params.worker_id)
        if row is None:
            return False
        self._nack(row, handler_started=params.handler_started)
        return True

    def _nack(self, row: _Row, *, handler_started: bool = False) -> None:
        """The seed's field set; `attempts` and `last_error` stay as they are. A shutdown that cut a
        running handler off (`handler_started`) also counts one more `shutdown_nacks`, in the same write."""
        now = _now()
        nacks = row.record.shutdown_nacks + 1 if handler_started else row.record.shutdown_nacks
        self._write(
            row, status=JobStatus.QUEUED, worker_id=None, scheduled_at=now, started_at=None, shutdown_nacks=nacks
        )
        self._wake()

    # -- workers ---------------------------------------------------------------------------------

    async def register_worker(self, params: RegisterWorkerParams, /) -> None:
        worker, now = params.worker, _now()
        self._store.workers[worker.id] = WorkerRecord(
            id=worker.id,
            hostname=worker.hostname,
            pid=worker.pid,
            queues=tuple(worker.queues) if worker.queues is not None else None,
            concurrency=worker.concurrency,
            status=WorkerStatus.ACTIVE,
            last_heartbeat=now,
            started_at=now,
            job_names=tuple(worker.job_names) if worker.job_names is not None else None,
        )

    async def heartbeat(self, params: HeartbeatParams, /) -> bool:
        worker = self._store.workers.get(params.worker_id)
        if worker is None or worker.status is WorkerStatus.STOPPED:
            return False
        self._store.workers[worker.id] = replace(worker, last_heartbeat=_now())
        return True

    async def set_worker_status(self, params: SetWorkerStatusParams, /) -> bool:
        worker = self._store.workers.get(params.worker_id)
        if worker is None:
            return False
        status = WorkerStatus(params.status)
        if worker.status is WorkerStatus.STOPPED and status is not WorkerStatus.STOPPED:
            return False  # stale recovery stopped it: a late status write must not revive it
        now = _now()
        worker = replace(worker, status=status, last_heartbeat=now)
        if params.state is not None:
            worker = replace(worker, state=str(params.state), state_changed_at=now)
        if params.last_shutdown is not None:
            worker = replace(worker, last_shutdown=json.loads(_to_text(dict(params.last_shutdown), "last_shutdown")))
        self._store.workers[worker.id] = worker
        return True

    async def list_workers(self) -> list[WorkerRecord]:
        return sorted(self._store.workers.values(), key=lambda worker: (worker.started_at, worker.id))

    # -- stale recovery: find what dead workers hold, write what core decides --------------------------

    async def find_stale_jobs(self, params: FindStaleJobsParams, /) -> StaleScan:
        store = self._store
        cutoff = _now() - timedelta(seconds=params.heartbeat_timeout)
        stale = [
            worker.id
            for worker in store.workers.values()
            if worker.status in (WorkerStatus.ACTIVE, WorkerStatus.STOPPING) and worker.last_heartbeat < cutoff
        ]
        for worker_id in stale:
            store.workers[worker_id] = replace(store.workers[worker_id], status=WorkerStatus.STOPPED)

        def gone(worker_id: str) -> bool:
            worker = store.workers.get(worker_id)
            return worker is None or worker.status is WorkerStatus.STOPPED

        orphaned = sorted(
            (
                row
                for row in store.jobs.values()
                if row.record.status is JobStatus.PROCESSING
                and row.record.worker_id is not None
                and (row.record.worker_id in stale or (gone(row.record.worker_id) and row.record.updated_at < cutoff))
            ),
            key=lambda row: (row.record.updated_at, row.record.id),
        )
        return StaleScan(stale_workers=tuple(stale), orphaned=tuple(self._export(row) for row in orphaned))

    async def rescue_jobs(self, params: RescueJobsParams, /) -> set[str]:
        return {rescue.job_id for rescue in params.rescues if self._rescue(rescue)}

    def _rescue(self, rescue: Rescue) -> bool:
        row = self._store.jobs.get(rescue.job_id)
        if (
            row is None
            or row.record.status is not JobStatus.PROCESSING
            or row.record.worker_id != rescue.expected_worker_id
            or row.record.updated_at != rescue.expected_updated_at
        ):
            return False  # changed since it was read: someone else settled it
        error = rescue.error if rescue.error is not None else row.record.last_error
        if rescue.action is RescueAction.RELEASE:
            row.record = replace(row.record, attempts=rescue.attempts)
            self._nack(row)
        elif rescue.action is RescueAction.DEAD_LETTER:
            self._move_to_dead_letter(row, attempts=rescue.attempts, error=error, reason=rescue.reason or "")
        else:
            self._requeue(row, _now(), attempts=rescue.attempts, last_error=error)
        return True

    async def expire_unknown_jobs(self, params: ExpireUnknownJobsParams, /) -> set[str]:
        known = set(params.known_names)
        cutoff = _now() - timedelta(seconds=max(params.older_than, 0.0))
        expired = [
            row
            for row in self._store.jobs.values()
            if row.record.status is JobStatus.QUEUED
            and row.record.job_name not in known
            and row.record.created_at <= cutoff
        ]
        for row in expired:
            self._move_to_dead_letter(row, attempts=row.record.attempts, error=params.error, reason="unknown_job")
        return {row.record.id for row in expired}

    # -- observation -----------------------------------------------------------------------------

    async def queue_stats(self, params: QueueStatsParams, /) -> QueueStats:
        counts = dict.fromkeys(JobStatus, 0)
        for row in self._store.jobs.values():
            if params.queue is None or row.record.queue == params.queue:
                counts[row.record.status] += 1
        dead = sum(1 for record, _ in self._store.dead_letters.values() if params.queue in (None, record.queue))
        return QueueStats(
            total=sum(counts.values()) + dead,
            queued=counts[JobStatus.QUEUED],
            processing=counts[JobStatus.PROCESSING],
            done=counts[JobStatus.DONE],
            dead_letter=dead,
            cancelled=counts[JobStatus.CANCELLED],
        )

    async def wait_for_jobs(self, params: WaitForJobsParams, /) -> None:
        # Spurious returns are allowed: any write that may make a row due wakes every waiter.
        changed = self._store.changed
        changed.clear()
        now = _now()
        queues = set(params.queues) if params.queues is not None else None
        if any(
            row.record.status is JobStatus.QUEUED
            and row.record.scheduled_at <= now
            and (queues is None or row.record.queue in queues)
            for row in self._store.jobs.values()
        ):
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(changed.wait(), timeout=max(params.timeout, 0.0))

    # -- for the contract suite's corrupt-row writer (see contract_fixtures.py) ------------------------

    def put_args_text(self, job_id: str, text: str) -> None:
        """Store `text` as the row's args, verbatim, as another producer might have written it."""
        self._store.jobs[job_id].args_text = text


def _copy(value: Any) -> Any:
    """A detached copy of a stored JSON value, so a caller's changes never reach the store."""
    return json.loads(json.dumps(value)) if value is not None else None
