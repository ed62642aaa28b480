"""The backend protocol: the queue operations every Soniq backend implements.

Stability: this module is public API for third-party backend authors.
`BACKEND_PROTOCOL_VERSION` is bumped whenever a method is added, removed or
changes its guarantee; within one protocol version, signatures and the
guarantees in these docstrings only ever widen. A backend declares the
version it implements in `BackendCapabilities.protocol_version`; core refuses
a backend that declares a newer version than it knows.

The state machine lives in core. A backend stores each transition atomically
and enforces the rules written here; it never decides a transition itself.
Every operation is async and keyword-only. Every write about a claimed row
(complete, retry, snooze, dead-letter, nack, mark-started) is fenced: it
applies only while ``status = 'processing' AND worker_id = <worker_id>`` and
returns False, writing nothing, when the caller no longer owns the row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol, runtime_checkable

from soniq.records import (
    DeadLetterRecord,
    JobRecord,
    JobStatus,
    NewJob,
    QueueStats,
    RecoveryResult,
    StaleJobPolicy,
    WorkerInfo,
    WorkerRecord,
    WorkerStatus,
)

BACKEND_PROTOCOL_VERSION = 1


@dataclass(frozen=True, slots=True)
class BackendCapabilities:
    """What a backend can do; core branches on these, never on the backend's type."""

    push_wakeup: bool = False
    """`wait_for_jobs` returns promptly when another process enqueues."""
    transactional_enqueue: bool = False
    """`enqueue_jobs(connection=...)` joins the caller's open transaction."""
    batch_complete: bool = False
    """`complete_jobs` writes many completions in one round trip."""
    shared_across_processes: bool = True
    """Several worker processes may share the store (False for in-process memory)."""
    timestamp_precision: timedelta = timedelta(microseconds=1)
    protocol_version: int = BACKEND_PROTOCOL_VERSION


@runtime_checkable
class Backend(Protocol):
    """A queue store.

    Implementations also provide a classmethod ``from_url(url, **options)``
    (the ``soniq.backends`` entry point's target) which opens nothing yet. Every
    backend accepts the option ``namespace: str | None``: an isolated copy of
    all Soniq state within the same server (a PostgreSQL schema, a SQLite file
    beside the URL's file, a Redis key prefix), so that tests and tenants can
    share one server. The contract suite gives each test its own namespace.
    """

    @property
    def capabilities(self) -> BackendCapabilities: ...

    async def connect(self) -> None:
        """Open connections. Called once before any other operation; idempotent."""

    async def close(self) -> None:
        """Release every connection and background task. Idempotent."""

    async def setup(self) -> None:
        """Create or upgrade the schema. Idempotent and safe to run from several
        processes at once. Backends also create the schema on first use."""

    async def prepare_worker(self, *, concurrency: int, prefetch: int) -> None:
        """Called once as a worker starts, after `connect`: check that the store
        can serve `concurrency + prefetch` in-flight rows (pool sizes, limits)
        and raise a `SoniqError` whose message says how to fix it otherwise."""

    async def drop_schema(self) -> None:
        """Delete every table or key this backend created in its namespace.
        For tests and teardown; the backend must be usable again after `setup`."""

    # -- producers ---------------------------------------------------------

    async def enqueue_jobs(self, *, jobs: Sequence[NewJob], connection: Any = None) -> None:
        """Insert every job as `queued` with `attempts = 0`, all or none.

        With `connection`, the insert runs on that driver connection inside the
        caller's transaction (only when `capabilities.transactional_enqueue`);
        a rollback means the jobs never existed. Wakes waiting workers."""

    async def get_job(self, *, job_id: str) -> JobRecord | None:
        """The row, or None when no `soniq_jobs` row has that id."""

    async def list_jobs(
        self,
        *,
        queue: str | None = None,
        status: JobStatus | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[JobRecord]:
        """Rows filtered by queue and status, newest `created_at` first."""

    async def cancel_job(self, *, job_id: str) -> bool:
        """Move a `queued` row to `cancelled`. False (nothing written) in any other status."""

    # -- the claim path ----------------------------------------------------

    async def claim_jobs(
        self,
        *,
        worker_id: str,
        queues: Sequence[str] | None,
        limit: int,
        mark_started: bool,
    ) -> list[JobRecord]:
        """Atomically move up to `limit` due `queued` rows to `processing`.

        Due means ``scheduled_at <= now``. Rows come in order of `priority`
        ascending (lower runs first), then `scheduled_at`, then `created_at`.
        `queues=None` means every queue. The claimed rows get
        ``worker_id = worker_id`` and ``updated_at = now``; with `mark_started`
        also ``started_at = now``, otherwise ``started_at = NULL``. No two
        concurrent callers, in any number of processes, ever receive the same
        row. `attempts` is not changed."""

    async def mark_started(self, *, job_id: str, worker_id: str) -> bool:
        """Record durably that the handler of a claimed row is about to run
        (``started_at = now``). Fenced."""

    async def complete_job(self, *, job_id: str, worker_id: str, result: Any) -> bool:
        """``status = 'done'``, store the JSON `result`, ``worker_id = NULL``. Fenced."""

    async def complete_jobs(self, *, worker_id: str, results: Sequence[tuple[str, Any]]) -> set[str]:
        """Batch form of `complete_job`, called only when `capabilities.batch_complete`:
        complete each ``(job_id, result)`` this worker still owns, each row fenced on
        its own, in one round trip. Returns the ids actually written."""

    async def retry_job(self, *, job_id: str, worker_id: str, error: str, scheduled_at: datetime) -> bool:
        """A failed run: ``attempts += 1``, ``last_error = error``, back to `queued`
        at `scheduled_at`, ``worker_id = NULL``, ``started_at = NULL``. Fenced."""

    async def snooze_job(self, *, job_id: str, worker_id: str, scheduled_at: datetime) -> bool:
        """The handler asked to run later: back to `queued` at `scheduled_at`,
        ``worker_id = NULL``; `attempts` and `last_error` untouched. Fenced."""

    async def dead_letter_job(self, *, job_id: str, worker_id: str, error: str, reason: str) -> bool:
        """A run that ends the job: ``attempts += 1``, then in one transaction
        delete the `soniq_jobs` row and insert its `soniq_dead_letter_jobs` row
        with `last_error = error` and `dead_letter_reason = reason`. Fenced."""

    async def nack_job(self, *, job_id: str, worker_id: str) -> bool:
        """Hand an abandoned row back, writing exactly the seed's field set:
        ``status = 'queued'``, ``worker_id = NULL``, ``updated_at = now``,
        ``scheduled_at = now`` (and ``started_at = NULL``). `attempts` and
        `last_error` are not modified. A no-op returning False unless the row
        is `processing` and owned by `worker_id`, so it is idempotent and can
        never undo stale recovery."""

    # -- workers -----------------------------------------------------------

    async def register_worker(self, *, worker: WorkerInfo) -> None:
        """Insert (or replace) the worker's row as `active` with a fresh heartbeat."""

    async def heartbeat(self, *, worker_id: str, status: WorkerStatus | None = None) -> bool:
        """``last_heartbeat = now`` (and the status, when given). False when the
        worker row is gone or was marked `stopped` by recovery."""

    async def list_workers(self) -> list[WorkerRecord]:
        """Every registered worker row."""

    async def recover_stale_workers(self, *, heartbeat_timeout: float, policy: StaleJobPolicy) -> RecoveryResult:
        """One stale-worker sweep, using the store's clock.

        A worker is stale when it is `active` or `stopping` and its
        `last_heartbeat` is older than `heartbeat_timeout` seconds; it is
        marked `stopped`. Each `processing` row owned by a stale worker, or
        by a worker id with no row or a `stopped` row, and ``updated_at``
        older than the timeout, is settled atomically, one row at a time:

        - handler never started (``started_at IS NULL``): nack field set,
          `attempts` untouched; never dead-lettered;
        - started, policy `dead_letter`: ``attempts += 1`` and moved to the
          dead-letter table with reason ``zombie``;
        - started, policy `requeue`: ``attempts += 1`` (a run lost with its
          worker counts); if that reaches `max_attempts` the row is
          dead-lettered with reason ``worker_lost``, otherwise it goes back to
          `queued` now with `last_error` saying which worker was lost.

        Rows of live workers are never touched. Backends that can run several
        sweepers serialise them (a sweep that finds the lock held returns
        ``RecoveryResult(skipped=True)``)."""

    # -- observation -------------------------------------------------------

    async def queue_stats(self, *, queue: str | None = None) -> QueueStats:
        """Counts by status, `dead_letter` from the dead-letter table, `total`
        the sum of the five. `processing` includes claimed rows whose handler
        has not started."""

    async def wait_for_jobs(self, *, queues: Sequence[str] | None, timeout: float) -> None:
        """Return when a job may have become available, or after `timeout`
        seconds. A backend without push wake-up may simply sleep; a spurious
        return is always allowed."""

    # -- dead letters ------------------------------------------------------

    async def list_dead_letter(
        self, *, queue: str | None = None, limit: int = 100, offset: int = 0
    ) -> list[DeadLetterRecord]:
        """Dead-letter rows, most recently moved first."""

    async def get_dead_letter(self, *, job_id: str) -> DeadLetterRecord | None:
        """One dead-letter row by its original job id."""

    async def replay_dead_letter(self, *, job_id: str, new_job_id: str, scheduled_at: datetime) -> str | None:
        """In one transaction insert a fresh `queued` row with id `new_job_id`
        (same name, args, queue, priority and `max_attempts`, ``attempts = 0``)
        and on the dead-letter row ``resurrection_count += 1`` and
        ``last_resurrection_at = now``. The dead-letter row stays for the
        record. Returns the new id, or None when there is no such row."""

    async def purge_dead_letter(self, *, job_id: str) -> bool:
        """Delete the dead-letter row. False when there was none."""
