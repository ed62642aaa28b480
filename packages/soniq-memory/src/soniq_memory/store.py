"""The in-process state behind `MemoryBackend`, and the registry of named stores.

A store is plain Python state guarded by a lock. Every backend operation
runs to completion under that lock without awaiting, so concurrent asyncio
callers (and threads) never observe a half-done operation.
"""

from __future__ import annotations

import asyncio
import copy
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, TypeVar

from soniq.backend import (
    DeadLetterReason,
    DeadLetterRecord,
    JobRecord,
    JobStatus,
    LeaseRecord,
    PausedQueue,
    ScheduleRecord,
    WorkerRecord,
    decode_args,
)
from soniq_memory import dependencies
from soniq_memory.dependencies import Finish

ALLOWED_STATUSES: frozenset[str] = frozenset(status.value for status in JobStatus)


def checked_status(status: object) -> JobStatus:
    """The status rule of the memory store: only the four `JobStatus` values are ever written."""
    if isinstance(status, JobStatus):
        return status
    if isinstance(status, str) and status in ALLOWED_STATUSES:
        return JobStatus(status)
    raise ValueError(
        f"soniq_jobs.status {status!r} is not allowed; the store accepts only {', '.join(sorted(ALLOWED_STATUSES))}"
    )


def json_copy(value: Any, *, what: str) -> Any:
    """Store what a JSON column would: a detached, JSON-normalised copy (tuples become lists)."""
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what} must be JSON-serialisable: {exc}") from exc


@dataclass(eq=False)
class _Waiter:
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[None]
    queues: frozenset[str] | None


@dataclass(eq=False)
class _ChangeWaiter:
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[None]
    job_ids: frozenset[str]
    changed: set[str] = field(default_factory=set)


RateKey = tuple[str, bool, str | None, float]
"""(limit key, partitioned, partition, period) of a rate window."""


@dataclass(eq=False)
class MemoryStore:
    """All Soniq state of one memory store: the three tables plus the waiters to wake."""

    jobs: dict[str, JobRecord] = field(default_factory=dict)
    dead_letters: dict[str, DeadLetterRecord] = field(default_factory=dict)
    workers: dict[str, WorkerRecord] = field(default_factory=dict)
    lock: threading.RLock = field(default_factory=threading.RLock)
    raw_args: dict[str, str] = field(default_factory=dict)
    """Job id -> args text that replaces the row's decoded args (`put_raw_args`, for tests)."""
    dead_raw_args: dict[str, str] = field(default_factory=dict)
    job_logs: dict[str, str] = field(default_factory=dict)
    """Job id -> the `logs` text of its `jobs` row (`JobLogStore`), kept beside the record."""
    dead_logs: dict[str, str] = field(default_factory=dict)
    """Job id -> the `logs` text its dead-letter row carried over."""
    dedup_holders: dict[str, str] = field(default_factory=dict)
    """Dedup key -> id of the row that last took it; valid only while that row is queued with that key."""
    schedules: dict[str, ScheduleRecord] = field(default_factory=dict)
    leases: dict[str, LeaseRecord] = field(default_factory=dict)
    dependents: dict[str, list[str]] = field(default_factory=dict)
    """Dependency id -> ids of the rows enqueued waiting for it, dropped once it finishes."""
    watched: set[str] = field(default_factory=set)
    """Ids whose finishing write publishes a change (`watch_jobs`)."""
    rate_windows: dict[RateKey, tuple[int, int]] = field(default_factory=dict)
    """Per rate-limited group: (window start in epoch microseconds, claims in it); an older window counts as empty."""
    pauses: dict[str, PausedQueue] = field(default_factory=dict)
    """Queue name -> its stored pause (`QueuePauseStore`)."""
    unique_windows: dict[str, tuple[str, datetime]] = field(default_factory=dict)
    """Window key -> (id of the job that took it, the window's `expires_at`) (`UniqueWindows`); an
    entry whose `expires_at` is not after a new window's `starts_at` no longer holds the key."""
    debounce_deadlines: dict[str, datetime] = field(default_factory=dict)
    """Job id -> the `debounce_deadline` its row was stored with (`DebouncedJobs`), kept beside the
    record and dropped with the row."""
    _last_now: datetime = field(default_factory=lambda: datetime.now(UTC))
    _waiters: set[_Waiter] = field(default_factory=set)
    _change_waiters: set[_ChangeWaiter] = field(default_factory=set)

    def now(self) -> datetime:
        """The store's clock: wall-clock UTC, never running backwards between two calls."""
        current = datetime.now(UTC)
        if current < self._last_now:
            current = self._last_now
        self._last_now = current
        return current

    def put_job(self, record: JobRecord) -> None:
        """The one write path of `jobs`; it enforces the status rule."""
        status = checked_status(record.status)
        if status is not record.status:
            record = replace(record, status=status)
        self.jobs[record.id] = record

    def write_nack(self, row: JobRecord, *, handler_started: bool = False) -> None:
        """The seed's nack field set; `attempts` and `last_error` stay as they are (so do steps and
        checkpoint). With `handler_started`, one more `shutdown_nacks` in the same write."""
        now = self.now()
        self.put_job(
            replace(
                row,
                status=JobStatus.QUEUED,
                worker_id=None,
                updated_at=now,
                scheduled_at=now,
                started_at=None,
                shutdown_nacks=row.shutdown_nacks + 1 if handler_started else row.shutdown_nacks,
            )
        )
        self.wake(row.queue)

    def move_to_dead_letter(self, row: JobRecord, *, error: str | None, reason: str) -> None:
        """Delete the job row and insert its dead-letter row, as one step (we hold the lock)."""
        self.dead_letters[row.id] = DeadLetterRecord(
            id=row.id,
            job_name=row.job_name,
            args=row.args,
            queue=row.queue,
            attempts=row.attempts,
            last_error=error,
            dead_letter_reason=str(reason.value if isinstance(reason, DeadLetterReason) else reason),
            moved_to_dead_letter_at=self.now(),
            max_attempts=row.max_attempts,
            priority=row.priority,
            version=row.version,
        )
        raw = self.raw_args.pop(row.id, None)
        if raw is not None:
            self.dead_raw_args[row.id] = raw
        # The logs move with the row (the progress stays behind, with the record).
        logs = self.job_logs.pop(row.id, None)
        if logs is not None:
            self.dead_logs[row.id] = logs
        else:
            self.dead_logs.pop(row.id, None)
        self.debounce_deadlines.pop(row.id, None)
        del self.jobs[row.id]
        self.finished(row.id, Finish.DEAD_LETTERED)

    def drop_job(self, job_id: str) -> JobRecord | None:
        """Delete a `jobs` row and what is kept beside it (raw args, logs); the row, or None."""
        self.raw_args.pop(job_id, None)
        self.job_logs.pop(job_id, None)
        self.debounce_deadlines.pop(job_id, None)
        return self.jobs.pop(job_id, None)

    def drop_dead(self, job_id: str) -> DeadLetterRecord | None:
        """Delete a dead-letter row and what is kept beside it (raw args, logs); the row, or None."""
        self.dead_raw_args.pop(job_id, None)
        self.dead_logs.pop(job_id, None)
        return self.dead_letters.pop(job_id, None)

    def cancel_queued(self, row: JobRecord) -> None:
        """`queued` -> `cancelled`; its dependents follow."""
        self.put_job(replace(row, status=JobStatus.CANCELLED, updated_at=self.now()))
        self.finished(row.id, Finish.CANCELLED)

    def finished(self, job_id: str, how: Finish) -> None:
        """A row reached its end: publish it when watched and settle its dependents, in the same step."""
        self.publish_change(job_id)
        dependencies.settle(self, job_id, how)

    def clear(self) -> None:
        self.jobs.clear()
        self.dead_letters.clear()
        self.workers.clear()
        self.raw_args.clear()
        self.dead_raw_args.clear()
        self.job_logs.clear()
        self.dead_logs.clear()
        self.dedup_holders.clear()
        self.schedules.clear()
        self.leases.clear()
        self.dependents.clear()
        self.watched.clear()
        self.rate_windows.clear()
        self.pauses.clear()
        self.unique_windows.clear()
        self.debounce_deadlines.clear()

    def export_job(self, row: JobRecord, *, include_result: bool = True) -> JobRecord:
        """The row as a caller sees it: a detached copy, args decoded from raw text if any."""
        copied = export(row) if include_result else export(replace(row, result=None))
        raw = self.raw_args.get(row.id)
        if raw is None:
            return copied
        args, error = decode_args(raw)
        return replace(copied, args=args, decode_error=error)

    def export_dead(self, row: DeadLetterRecord) -> DeadLetterRecord:
        copied = export(row)
        raw = self.dead_raw_args.get(row.id)
        if raw is None:
            return copied
        args, error = decode_args(raw)
        return replace(copied, args=args, decode_error=error)

    def dedup_holder(self, key: str) -> JobRecord | None:
        """The `queued` row holding `key`, if any (a claimed, cancelled or moved row no longer does)."""
        job_id = self.dedup_holders.get(key)
        row = self.jobs.get(job_id) if job_id is not None else None
        if row is None or row.status is not JobStatus.QUEUED or row.dedup_key != key:
            return None
        return row

    def window_holder(self, key: str, starts_at: datetime) -> str | None:
        """The id of the job whose window still holds `key` at `starts_at`, if any; an expired
        entry is dropped on the way (it would be replaced by the next insert anyway)."""
        held = self.unique_windows.get(key)
        if held is None:
            return None
        holder_id, expires_at = held
        if expires_at > starts_at:
            return holder_id
        if expires_at <= self.now():
            del self.unique_windows[key]
        return None

    def prune_windows(self, now: datetime, limit: int) -> int:
        """Delete up to `limit` windows that expired at or before `now`; how many went."""
        expired = [key for key, (_, expires_at) in self.unique_windows.items() if expires_at <= now][: max(limit, 0)]
        for key in expired:
            del self.unique_windows[key]
        return len(expired)

    # -- wake-up -------------------------------------------------------------

    def add_waiter(self, queues: Sequence[str] | None) -> _Waiter:
        loop = asyncio.get_running_loop()
        wanted = frozenset(queues) if queues is not None else None
        waiter = _Waiter(loop=loop, future=loop.create_future(), queues=wanted)
        self._waiters.add(waiter)
        return waiter

    def remove_waiter(self, waiter: _Waiter) -> None:
        self._waiters.discard(waiter)

    def wake(self, queue: str) -> None:
        """Resolve every waiter interested in `queue`, on whichever loop (or thread) it waits."""
        for waiter in list(self._waiters):
            if waiter.queues is not None and queue not in waiter.queues:
                continue
            self._waiters.discard(waiter)
            if waiter.loop.is_closed():
                continue
            waiter.loop.call_soon_threadsafe(_resolve, waiter.future)

    # -- job changes --------------------------------------------------

    def add_change_waiter(self, job_ids: frozenset[str]) -> _ChangeWaiter:
        loop = asyncio.get_running_loop()
        waiter = _ChangeWaiter(loop=loop, future=loop.create_future(), job_ids=job_ids)
        self._change_waiters.add(waiter)
        return waiter

    def remove_change_waiter(self, waiter: _ChangeWaiter) -> None:
        self._change_waiters.discard(waiter)

    def publish_change(self, job_id: str, *, always: bool = False) -> None:
        """Tell every waiter on `job_id` that it changed: when watched (a finish spends the mark), or
        `always` (a cancel request, which keeps it)."""
        if always:
            pass
        elif job_id in self.watched:
            self.watched.discard(job_id)
        else:
            return
        for waiter in list(self._change_waiters):
            if job_id not in waiter.job_ids:
                continue
            waiter.changed.add(job_id)
            if not waiter.loop.is_closed():
                waiter.loop.call_soon_threadsafe(_resolve, waiter.future)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


_Row = TypeVar("_Row", JobRecord, DeadLetterRecord, ScheduleRecord)


def export(record: _Row) -> _Row:
    """A copy of a stored row whose mutable parts (args, result) the caller may change freely."""
    return copy.deepcopy(record)


class _Registry:
    """Process-wide named stores: ``memory://NAME`` with one namespace maps to one store."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stores: dict[tuple[str, str | None], MemoryStore] = {}

    def get(self, name: str, namespace: str | None) -> MemoryStore:
        with self._lock:
            store = self._stores.get((name, namespace))
            if store is None:
                store = self._stores[(name, namespace)] = MemoryStore()
            return store


named_stores = _Registry()
