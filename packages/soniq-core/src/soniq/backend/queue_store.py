"""The `QueueStore` role, the one every backend fills: store, claim and settle jobs, track
workers, find and rescue the rows of dead workers, count jobs.

A backend that fills only this role is a working Soniq backend: workers run jobs with the
whole shutdown contract, retries, snoozes, dead-lettering and stale recovery.

The state machine lives in core. A backend stores each transition atomically and enforces
the rules written here; it never decides a transition itself. Every write about a claimed
row (complete, retry, snooze, dead-letter, nack, mark-started) is fenced: it applies only
while ``status = 'processing' AND worker_id = <worker_id>`` and writes nothing when the
caller no longer owns the row.

Implementations also provide a classmethod ``from_url(url, **options)`` (the
``soniq.backends`` entry point's target) which opens nothing yet. Every backend accepts the
option ``namespace: str | None``: an isolated copy of all Soniq state within the same server
(a PostgreSQL schema, a SQLite file beside the URL's file, a Redis key prefix), so that tests
and tenants can share one server. The contract suite gives each test its own namespace.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from soniq.backend.capabilities import BackendCapabilities
from soniq.params import (
    CancelJobParams,
    ClaimJobsParams,
    CompleteJobsParams,
    DeadLetterJobParams,
    DeleteJobParams,
    EnqueueJobsParams,
    ExpireUnknownJobsParams,
    FindStaleJobsParams,
    GetJobParams,
    GroupLimit,
    HeartbeatParams,
    JobResult,
    MarkStartedParams,
    NackJobParams,
    PrepareWorkerParams,
    QueueStatsParams,
    RegisterWorkerParams,
    Rescue,
    RescueJobsParams,
    RetryJobParams,
    SetWorkerStatusParams,
    SnoozeJobParams,
    WaitForJobsParams,
)
from soniq.records import (
    JobRecord,
    QueueStats,
    StaleScan,
    WorkerRecord,
)

VERSION = 1
"""The version of `QueueStore` this soniq-core speaks."""


@runtime_checkable
class QueueStore(Protocol):
    """The required role (see the module's text)."""

    @property
    def capabilities(self) -> BackendCapabilities: ...

    async def connect(self) -> None:
        """Open connections. Called once before any other operation; idempotent."""

    async def close(self) -> None:
        """Release every connection and background task. Idempotent."""

    async def setup(self) -> None:
        """Create or upgrade the schema. Idempotent and safe to run from several
        processes at once. Backends also create the schema on first use."""

    async def prepare_worker(self, params: PrepareWorkerParams, /) -> None:
        """Called once as a worker starts, after `connect`: check that the store
        can serve `concurrency + prefetch` in-flight rows (pool sizes, limits)
        and raise a `SoniqError` whose message says how to fix it otherwise."""

    async def enqueue_jobs(self, params: EnqueueJobsParams, /) -> list[str] | None:
        """Insert every job as `queued` with `attempts = 0`, all or none.

        With `connection`, the insert runs on that driver connection inside the
        caller's transaction (only when `capabilities.transactional_enqueue`):
        nothing is committed by the backend, and a rollback means the jobs never
        existed. Wakes waiting workers (on commit, when in a transaction).

        Deduplication: a job with a `dedup_key` that a `queued` row
        already holds is not inserted; its place in the returned list is that
        row's id. The store enforces it atomically (a unique index, a script),
        so producers racing on one key, in any number of processes, store
        exactly one row and all get its id. A claim releases the key (the row's
        `dedup_key` becomes None); cancel and dead-letter release it too. Core
        never sends two jobs with the same key in one call. Stores `producer_id`.
        Returns the stored id of every job, in order; None means every job was
        inserted under its own id (what a backend without deduplication returns).

        Dependencies: every id in a job's `depends_on` must be a
        `soniq_jobs` row, a dead-letter row, or a job earlier in the same call;
        otherwise `soniq.errors.UnknownDependencyError` (listing the missing ids)
        is raised and nothing of the call is stored. Each dependency is read as it
        stands in the same transaction: `done` is resolved; `cancelled` or
        dead-lettered is failed; `queued` or `processing` is pending. The row is
        stored with ``waiting_on`` = the pending count plus, under policy `run`,
        nothing for failed ones; under policy `cancel`, one failed dependency
        stores the row as `cancelled` with ``last_error`` as in "Dependencies"
        (and ``waiting_on = 0``). The store records an edge per pending
        dependency so that its resolution finds this row. Stores `depends_on`,
        `dependency_policy` and `limit_key` as given."""

    async def get_job(self, params: GetJobParams, /) -> JobRecord | None:
        """The row, or None when no `soniq_jobs` row has that id."""

    async def cancel_job(self, params: CancelJobParams, /) -> bool:
        """Move a `queued` row to `cancelled` (its dependents follow, see "Dependencies").
        False (nothing written) in any other status."""

    async def delete_job(self, params: DeleteJobParams, /) -> bool:
        """Delete the `soniq_jobs` row whatever its status. False when there was none.
        A worker still running it then finds its fenced writes apply to nothing.
        A row deleted before it was `done` fails its dependents."""

    async def claim_jobs(self, params: ClaimJobsParams, /) -> list[JobRecord]:
        """Atomically move up to `limit` due `queued` rows to `processing`.

        Due means ``scheduled_at <= now``. Rows come in order of `priority`
        ascending (lower runs first), then `scheduled_at`, then `created_at`.
        `queues=None` means every queue. The claimed rows get
        ``worker_id = worker_id`` and ``updated_at = now``; with `mark_started`
        also ``started_at = now``, otherwise ``started_at = NULL``. No two
        concurrent callers, in any number of processes, ever receive the same
        row. `attempts` is not changed. With `job_names`, rows of any other name are
        neither claimed nor touched. A claimed row whose args cannot be decoded is
        returned with `decode_error` set (the claim itself never fails for it).

        Rows with ``waiting_on > 0`` are never claimed nor touched.

        Limits: with `limits`, a row is claimed only if, for every
        limit that matches it (see `GroupLimit`), claiming it keeps the number of
        `processing` rows of its group, counted across the whole store, at most
        `max_concurrent`, and the number of claims of its group in the current
        window of `rate_period` seconds (store clock, windows aligned to the epoch)
        at most `rate_limit`. The check and the claim are atomic with respect to
        every other claim that passes limits, in any number of processes, so no
        interleaving ever exceeds a limit. A row held back stays `queued` and
        untouched, and the claim goes on past it to the rows behind it, which it
        may claim (a full group never blocks other groups). The claim may return
        fewer than `limit` rows. Without `limits` the claim counts nothing."""

    async def mark_started(self, params: MarkStartedParams, /) -> set[str]:
        """Record durably that the handlers of claimed rows are about to run
        (``started_at = now``), each row fenced on its own, in one round trip.
        Returns the ids actually written."""

    async def complete_jobs(self, params: CompleteJobsParams, /) -> set[str]:
        """For each ``JobResult`` this worker still owns: ``status = 'done'``, store
        the JSON `result`, ``worker_id = NULL``. Each row fenced on its own, in one
        round trip; a row the worker lost is skipped, never the batch. Returns
        the ids actually written. A result with `delete_row` (``result_ttl = 0``)
        deletes its row instead, under the same fence, and counts as written.
        Resolves each written row's dependents and publishes a change for each
        written row that is watched, in the same transaction."""

    async def retry_job(self, params: RetryJobParams, /) -> bool:
        """A failed run: ``attempts += 1``, ``last_error = error``, back to `queued`
        at `scheduled_at`, ``worker_id = NULL``, ``started_at = NULL``. Fenced."""

    async def snooze_job(self, params: SnoozeJobParams, /) -> bool:
        """The handler asked to run later: back to `queued` at `scheduled_at`,
        ``worker_id = NULL``; `attempts` and `last_error` untouched. Fenced."""

    async def dead_letter_job(self, params: DeadLetterJobParams, /) -> bool:
        """A run that ends the job: ``attempts += 1``, then in one transaction
        delete the `soniq_jobs` row and insert its `soniq_dead_letter_jobs` row
        with `last_error = error` and `dead_letter_reason = reason`. Fenced.
        Fails the row's dependents and publishes a change when watched."""

    async def nack_job(self, params: NackJobParams, /) -> bool:
        """Hand an abandoned row back, writing exactly the seed's field set:
        ``status = 'queued'``, ``worker_id = NULL``, ``updated_at = now``,
        ``scheduled_at = now`` (and ``started_at = NULL``). `attempts` and
        `last_error` are not modified. A no-op returning False unless the row
        is `processing` and owned by `worker_id`, so it is idempotent and can
        never undo stale recovery. With `handler_started`, the same write adds
        one to the row's `shutdown_nacks` (stored with the row, 0 at enqueue,
        returned in `JobRecord.shutdown_nacks`, changed by nothing else)."""

    async def register_worker(self, params: RegisterWorkerParams, /) -> None:
        """Insert (or replace) the worker's row as `active` with a fresh heartbeat."""

    async def heartbeat(self, params: HeartbeatParams, /) -> bool:
        """``last_heartbeat = now``. False when the worker row is gone or was
        marked `stopped` (by recovery or by the worker itself)."""

    async def set_worker_status(self, params: SetWorkerStatusParams, /) -> bool:
        """Write the worker's `status` (`stopping` as it starts draining, `stopped`
        at STOPPED) with ``last_heartbeat = now``. False when the row is gone.

        With `state`, also ``state = state`` and ``state_changed_at = now``; with
        `last_shutdown`, store that JSON object as is. Either one None leaves its
        column untouched. A row stale recovery already marked `stopped` is not
        revived by a non-`stopped` status (False, nothing written).
        `register_worker` resets all three to None."""

    async def list_workers(self) -> list[WorkerRecord]:
        """Every registered worker row."""

    async def find_stale_jobs(self, params: FindStaleJobsParams, /) -> StaleScan:
        """The first half of one stale-worker sweep, on the store's clock.

        A worker is stale when it is `active` or `stopping` and its
        `last_heartbeat` is older than `heartbeat_timeout` seconds; this call
        marks each such worker `stopped` and returns its id. It also returns,
        as read, every `processing` row owned by a stale worker, or by a worker
        id whose row is missing or `stopped` and whose ``updated_at`` is older
        than the timeout (judged by the row, never by the worker's heartbeat).
        It writes nothing to job rows. Rows of live workers are never returned.
        Backends that can run several sweepers serialise this call (one that
        finds the lock held returns ``StaleScan(skipped=True)``)."""

    async def rescue_jobs(self, params: RescueJobsParams, /) -> set[str]:
        """The second half: apply each `Rescue` core decided, exactly as given,
        each fenced on the row as read (see `Rescue`) and atomic on its own.

        `RELEASE` writes the nack field set; `REQUEUE` writes ``status = 'queued'``,
        ``worker_id = NULL``, ``started_at = NULL``, ``scheduled_at = now``,
        ``attempts`` and ``last_error`` as given; `DEAD_LETTER` moves the row to
        the dead-letter table with ``attempts``, ``last_error`` and the reason as
        given. Returns the ids actually written; a row that changed since it
        was read is skipped silently."""

    async def expire_unknown_jobs(self, params: ExpireUnknownJobsParams, /) -> set[str]:
        """Move every `queued` row whose `job_name` is not in `known_names` and whose
        `created_at` is older than `older_than` seconds to the dead-letter table with
        reason ``unknown_job`` and ``last_error = error``; `attempts` untouched. Atomic
        per row (a row claimed in between is left alone). Returns the ids moved.
        Core calls it only when every live worker has reported its names."""

    async def queue_stats(self, params: QueueStatsParams, /) -> QueueStats:
        """How many jobs there are in each status, in total: over every queue, or
        over `queue` alone. Counts by status, `dead_letter` from the dead-letter
        table, `total` the sum of the five. `processing` includes claimed rows
        whose handler has not started. Per-queue counts with the oldest waiting
        job's age are `OperatorReads.job_counts`."""

    async def wait_for_jobs(self, params: WaitForJobsParams, /) -> None:
        """Return when a job may have become available, or after `timeout`
        seconds. A backend without push wake-up may simply sleep; a spurious
        return is always allowed."""


__all__ = [
    "VERSION",
    "CancelJobParams",
    "ClaimJobsParams",
    "CompleteJobsParams",
    "DeadLetterJobParams",
    "DeleteJobParams",
    "EnqueueJobsParams",
    "ExpireUnknownJobsParams",
    "FindStaleJobsParams",
    "GetJobParams",
    "GroupLimit",
    "HeartbeatParams",
    "JobRecord",
    "JobResult",
    "MarkStartedParams",
    "NackJobParams",
    "PrepareWorkerParams",
    "QueueStats",
    "QueueStatsParams",
    "QueueStore",
    "RegisterWorkerParams",
    "Rescue",
    "RescueJobsParams",
    "RetryJobParams",
    "SetWorkerStatusParams",
    "SnoozeJobParams",
    "StaleScan",
    "WaitForJobsParams",
    "WorkerRecord",
]
