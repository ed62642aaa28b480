"""The backend protocol: the queue operations every Soniq backend implements.

Stability: this module is public API for third-party backend authors.
`BACKEND_PROTOCOL_VERSION` is bumped whenever a method is added, removed or
changes its guarantee. Within one protocol version the guarantees in these
docstrings only ever widen, and operations grow only by new fields with
defaults on their parameters objects (`soniq.params`), which a backend that
does not know them simply never reads. A backend declares the version it
implements in `BackendCapabilities.protocol_version`; core refuses, at
construction, a backend that declares a version it does not speak.

Protocol 2 changed from protocol 1: every operation with
arguments takes one positional parameters object instead of keyword
arguments; `complete_job` and the `batch_complete` capability are gone
(`complete_jobs` is the one completion write); `heartbeat` no longer takes a
status (`set_worker_status` says what it does); `recover_stale_workers` is
replaced by `find_stale_jobs` plus `rescue_jobs`, so that core decides each
orphaned row's fate and the backend only stores it. The migration note is in
docs/backends/authoring.md, "Migrating from protocol 1".

Protocol 3 added, from protocol 2: deduplicated enqueue
(`NewJob.dedup_key`, `enqueue_jobs` returns the stored ids), `delete_job`,
the dead-letter filter, bulk delete and stats, `JobResult.delete_row` and
`expires_at`, the schedule operations with the fenced `fire_schedule`, the
leader lease, `prune_jobs` / `prune_dead_letters`, `schema_status` and
`setup_schema`. "Migrating from protocol 2" in docs/backends/authoring.md lists them.

Protocol 4 (this version) adds, from protocol 3 (issue 19): job dependencies
(`NewJob.depends_on` and `dependency_policy`, the `waiting_on` count, and
"Dependencies" below), fleet-wide limits inside the claim
(`ClaimJobsParams.limits`, `NewJob.limit_key`), cancelling a running job
(`request_cancel`, `cancel_requests`, `finish_cancel`, `JobRecord.cancel_requested`)
and waiting for jobs (`watch_jobs`, `wait_for_job_changes`, the `push_job_changes`
capability). "Migrating from protocol 3" in docs/backends/authoring.md lists them.

Dependencies. A row with ``waiting_on > 0`` is never claimed. A dependency is
*resolved* when its row becomes `done` (including a completion that deletes the
row), and *failed* when its row becomes `cancelled` (by `cancel_job`,
`request_cancel`, `finish_cancel` or a cascade), is moved to the dead-letter
table (`dead_letter_job`, `rescue_jobs`, `expire_unknown_jobs`), or is deleted
by `delete_job` before it was `done`. In the same transaction or script as that
write, every dependent row still `queued` with ``waiting_on > 0`` is updated:
on resolved, or on failed with policy `run`, ``waiting_on -= 1`` (at 0 the row
becomes claimable and workers may be woken as for an insert); on failed with
policy `cancel`, the dependent becomes `cancelled` with ``waiting_on = 0`` and
``last_error = "dependency <id> was cancelled"`` (or ``"... was dead-lettered"``),
which in turn fails its own dependents. Retries, snoozes, nacks and rescues
that requeue are not terminal and resolve nothing. Fan-in stays cheap: one
dependency's resolution touches its dependents only (an edge list per
dependency), never a scan of all waiting rows.

The state machine lives in core. A backend stores each transition atomically
and enforces the rules written here; it never decides a transition itself.
Every write about a claimed row (complete, retry, snooze, dead-letter, nack,
mark-started) is fenced: it applies only while ``status = 'processing' AND
worker_id = <worker_id>`` and writes nothing when the caller no longer owns
the row.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol, runtime_checkable

from soniq.params import (
    AcquireLeaseParams,
    CancelJobParams,
    CancelRequestsParams,
    ClaimJobsParams,
    CompleteJobsParams,
    DeadLetterJobParams,
    DeadLetterPageParams,
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
    GetJobParams,
    GetLeaseParams,
    GetScheduleParams,
    HeartbeatParams,
    JobActivityParams,
    JobCountsParams,
    JobPageParams,
    ListDeadLetterParams,
    ListJobsParams,
    ListSchedulesParams,
    MarkStartedParams,
    NackJobParams,
    PrepareWorkerParams,
    PruneDeadLettersParams,
    PruneJobsParams,
    PurgeDeadLetterParams,
    QueueStatsParams,
    RegisterWorkerParams,
    ReleaseLeaseParams,
    RemoveScheduleParams,
    ReplayDeadLetterParams,
    RequestCancelParams,
    RescueJobsParams,
    RetryJobParams,
    SetSchedulePausedParams,
    SetupSchemaParams,
    SetWorkerStatusParams,
    SnoozeJobParams,
    UpsertScheduleParams,
    WaitForJobChangesParams,
    WaitForJobsParams,
    WatchJobsParams,
)
from soniq.records import (
    ActivityBucket,
    CancelOutcome,
    DeadLetterPage,
    DeadLetterRecord,
    DeadLetterStats,
    JobPage,
    JobRecord,
    LeaseRecord,
    QueueCounts,
    QueueStats,
    ScheduleRecord,
    SchemaReport,
    SchemaStatus,
    StaleScan,
    WorkerRecord,
)

BACKEND_PROTOCOL_VERSION = 4

PROTOCOL_MIGRATION_NOTE = (
    "docs/backends/authoring.md, sections 'Migrating from protocol 1', 'Migrating from protocol 2' "
    "and 'Migrating from protocol 3'"
)


@dataclass(frozen=True, slots=True)
class BackendCapabilities:
    """What a backend can do; core branches on these, never on the backend's type."""

    push_wakeup: bool = False
    """`wait_for_jobs` returns promptly when another process enqueues."""
    transactional_enqueue: bool = False
    """`enqueue_jobs` with `connection` joins the caller's open transaction."""
    shared_across_processes: bool = True
    """Several worker processes may share the store (False for in-process memory)."""
    timestamp_precision: timedelta = timedelta(microseconds=1)
    protocol_version: int = BACKEND_PROTOCOL_VERSION
    push_job_changes: bool = False
    """`wait_for_job_changes` returns promptly when another process finishes a watched job
    or requests a cancel (protocol 4); without it core polls, once per process."""


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

    async def prepare_worker(self, params: PrepareWorkerParams, /) -> None:
        """Called once as a worker starts, after `connect`: check that the store
        can serve `concurrency + prefetch` in-flight rows (pool sizes, limits)
        and raise a `SoniqError` whose message says how to fix it otherwise."""

    async def drop_schema(self) -> None:
        """Delete every table or key this backend created in its namespace.
        For tests and teardown; the backend must be usable again after `setup`."""

    # -- producers ---------------------------------------------------------

    async def enqueue_jobs(self, params: EnqueueJobsParams, /) -> list[str] | None:
        """Insert every job as `queued` with `attempts = 0`, all or none.

        With `connection`, the insert runs on that driver connection inside the
        caller's transaction (only when `capabilities.transactional_enqueue`):
        nothing is committed by the backend, and a rollback means the jobs never
        existed. Wakes waiting workers (on commit, when in a transaction).

        Deduplication (issue 12): a job with a `dedup_key` that a `queued` row
        already holds is not inserted; its place in the returned list is that
        row's id. The store enforces it atomically (a unique index, a script),
        so producers racing on one key, in any number of processes, store
        exactly one row and all get its id. A claim releases the key (the row's
        `dedup_key` becomes None); cancel and dead-letter release it too. Core
        never sends two jobs with the same key in one call. Stores `producer_id`.
        Returns the stored id of every job, in order; None means every job was
        inserted under its own id (what a backend without deduplication returns).

        Dependencies (protocol 4): every id in a job's `depends_on` must be a
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

    async def list_jobs(self, params: ListJobsParams, /) -> list[JobRecord]:
        """Rows filtered by queue and status, newest `created_at` first; `result` is
        None on every row unless `include_results`. A row whose stored args or result
        cannot be decoded is returned with `decode_error` set, never raised."""

    async def cancel_job(self, params: CancelJobParams, /) -> bool:
        """Move a `queued` row to `cancelled` (its dependents follow, see "Dependencies").
        False (nothing written) in any other status."""

    # -- the claim path ----------------------------------------------------

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

        Rows with ``waiting_on > 0`` are never claimed nor touched (protocol 4).

        Limits (protocol 4): with `limits`, a row is claimed only if, for every
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
        written row that is watched (protocol 4), in the same transaction."""

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
        Fails the row's dependents and publishes a change when watched (protocol 4)."""

    async def nack_job(self, params: NackJobParams, /) -> bool:
        """Hand an abandoned row back, writing exactly the seed's field set:
        ``status = 'queued'``, ``worker_id = NULL``, ``updated_at = now``,
        ``scheduled_at = now`` (and ``started_at = NULL``). `attempts` and
        `last_error` are not modified. A no-op returning False unless the row
        is `processing` and owned by `worker_id`, so it is idempotent and can
        never undo stale recovery."""

    # -- workers -----------------------------------------------------------

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

    # -- stale recovery ------------------------------------------------------

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

    # -- observation -------------------------------------------------------

    async def queue_stats(self, params: QueueStatsParams, /) -> QueueStats:
        """Counts by status, `dead_letter` from the dead-letter table, `total`
        the sum of the five. `processing` includes claimed rows whose handler
        has not started."""

    async def wait_for_jobs(self, params: WaitForJobsParams, /) -> None:
        """Return when a job may have become available, or after `timeout`
        seconds. A backend without push wake-up may simply sleep; a spurious
        return is always allowed."""

    # -- dead letters ------------------------------------------------------

    async def list_dead_letter(self, params: ListDeadLetterParams, /) -> list[DeadLetterRecord]:
        """Dead-letter rows, most recently moved first."""

    async def get_dead_letter(self, params: GetDeadLetterParams, /) -> DeadLetterRecord | None:
        """One dead-letter row by its original job id."""

    async def replay_dead_letter(self, params: ReplayDeadLetterParams, /) -> str | None:
        """In one transaction insert a fresh `queued` row with id `new_job_id`
        (same name and args; queue, priority and `max_attempts` from the params where
        given, else the dead-letter row's; ``attempts = params.attempts``, 0 by default)
        and on the dead-letter row ``resurrection_count += 1`` and
        ``last_resurrection_at = now``. The dead-letter row stays for the
        record. Returns the new id, or None when there is no such row."""

    async def purge_dead_letter(self, params: PurgeDeadLetterParams, /) -> bool:
        """Delete the dead-letter row. False when there was none."""

    # -- issue 12 (compat-store) additions ------------------------------------
    #
    # `list_dead_letter` also honours `ListDeadLetterParams.filter`.

    async def delete_job(self, params: DeleteJobParams, /) -> bool:
        """Delete the `soniq_jobs` row whatever its status. False when there was none.
        A worker still running it then finds its fenced writes apply to nothing.
        A row deleted before it was `done` fails its dependents (protocol 4)."""

    async def delete_dead_letters(self, params: DeleteDeadLettersParams, /) -> set[str]:
        """Delete at most `limit` dead-letter rows matching `filter`, oldest
        `moved_to_dead_letter_at` first, in one short statement or script; returns
        their ids. Core repeats the call until it returns fewer than `limit`."""

    async def dead_letter_stats(self, params: DeadLetterStatsParams, /) -> DeadLetterStats:
        """Counts over the dead-letter rows matching `filter` (None: all), in one read."""

    # -- dashboard reads (protocol 2 additions) -----------------------------
    #
    # Reads for operators' pages. None of them writes; each is one consistent
    # read where the store offers one (a single statement or script).

    async def job_counts(self, params: JobCountsParams, /) -> list[QueueCounts]:
        """Per queue, in queue-name order: the `queue_stats` counts plus `scheduled`,
        `oldest_queued_at` and `oldest_due_at`, for every queue with at least one job or dead letter (or only
        `queues`, when given; a named queue with nothing in it comes back with zeros).
        One grouped read: the counts of one queue add up with each other."""

    async def job_activity(self, params: JobActivityParams, /) -> list[ActivityBucket]:
        """Buckets of `bucket_seconds` from `since` to now, oldest first, every bucket
        present (zeros included). `done` counts `done` rows by `updated_at`,
        `dead_lettered` counts dead-letter rows by `moved_to_dead_letter_at`, both in
        ``[start, start + bucket_seconds)``; `failed` is None unless the store keeps
        a history of failed runs."""

    async def job_page(self, params: JobPageParams, /) -> JobPage:
        """Up to `limit` rows matching every given filter, newest ``(created_at, id)``
        first, strictly below `before`. Keyset pagination: following `next_cursor`
        never repeats or skips a row that existed when the first page was read,
        whatever is inserted or deleted meanwhile, and each page costs the same at
        any depth. `next_cursor` is None when no matching row is left below the page.
        `result` is None on every row unless `include_results`; a row that cannot
        be decoded comes back with `decode_error` set, never raised."""

    async def dead_letter_page(self, params: DeadLetterPageParams, /) -> DeadLetterPage:
        """As `job_page`, over dead-letter rows, newest ``(moved_to_dead_letter_at, id)``
        first, filtered by `dead_letter_reason`, queue and name."""

    async def queue_names(self) -> list[str]:
        """Every distinct queue of a job or dead-letter row, sorted. Reads no more than
        one index probe per queue where the store has an index on `queue`."""

    # -- schema status (compat-surface) --

    async def schema_status(self) -> SchemaStatus:
        """The schema steps applied to the store and those `setup()` would still apply.

        Read-only and safe on a store that was never set up: it creates nothing, applies
        nothing (even where `connect()` would upgrade the schema by itself) and needs no
        `connect()` first. Steps a newer release applied set `newer_than_known`."""

    # -- end of schema status --
    # -- schedules, leader lease, pruning (issue 14) -------------------------
    #
    # The store keeps schedules and the lease and enforces exactly-once firing and
    # lease exclusivity; core parses cron, computes every `next_run` and decides
    # catch-up. Each write below is atomic on its own.

    async def upsert_schedule(self, params: UpsertScheduleParams, /) -> ScheduleRecord:
        """Insert the schedule, or replace the definition stored under its name, and
        return the row as stored. See `UpsertScheduleParams` for what a replace keeps."""

    async def get_schedule(self, params: GetScheduleParams, /) -> ScheduleRecord | None:
        """The schedule, or None when no row has that name."""

    async def list_schedules(self, params: ListSchedulesParams, /) -> list[ScheduleRecord]:
        """Every schedule (or only `names`), in name order."""

    async def set_schedule_paused(self, params: SetSchedulePausedParams, /) -> bool:
        """Write `paused` (and `next_run` when given). False when there is no such schedule."""

    async def remove_schedule(self, params: RemoveScheduleParams, /) -> bool:
        """Delete the schedule. False when there was none. Jobs it enqueued stay."""

    async def due_schedules(self, params: DueSchedulesParams, /) -> list[ScheduleRecord]:
        """Up to `limit` schedules that are not paused and whose ``next_run <= now``,
        earliest `next_run` first. Reads only; claiming a due time is `fire_schedule`."""

    async def fire_schedule(self, params: FireScheduleParams, /) -> list[str] | None:
        """In one transaction: only while the schedule exists, is not paused and has
        ``next_run = expected_next_run``, set ``next_run = new_next_run``, insert every
        job of `jobs` as `queued` (as `enqueue_jobs`), ``run_count += len(jobs)`` and,
        when `jobs` is not empty, ``last_run = fired_at`` and ``last_job_id`` = the last
        job's id. Returns the inserted ids (empty for an advance without runs), or None
        with nothing written when the fence failed. However many callers race on one
        due time, in any number of processes, exactly one of them gets a non-None."""

    async def acquire_lease(self, params: AcquireLeaseParams, /) -> LeaseRecord | None:
        """Take the lease `name` when it is free or expired (``acquired_at = renewed_at =
        now``), or renew it when `holder` holds it (``renewed_at = now``), with
        ``expires_at = now + ttl``; `now` is the store's clock. Atomic: at any instant at
        most one holder has an unexpired lease. None (nothing written) when another
        holder's lease has not expired."""

    async def release_lease(self, params: ReleaseLeaseParams, /) -> bool:
        """Free the lease when `holder` holds it (expired or not). False otherwise."""

    async def get_lease(self, params: GetLeaseParams, /) -> LeaseRecord | None:
        """The unexpired lease `name` by the store's clock, or None when it is free."""

    async def prune_jobs(self, params: PruneJobsParams, /) -> int:
        """Delete at most `limit` `done` or `cancelled` rows whose ``expires_at <= now``;
        never a `queued` or `processing` row, whatever its `expires_at`. One short
        statement (or transaction) per call that skips rows locked by others, so it
        never blocks a claim. Returns how many rows it deleted; call again while it
        returns `limit`."""

    async def prune_dead_letters(self, params: PruneDeadLettersParams, /) -> int:
        """Delete at most `limit` dead-letter rows with ``moved_to_dead_letter_at < before``.
        Returns how many it deleted."""

    # -- issue 13: schema families and upgrades ------------------------------

    async def setup_schema(self, params: SetupSchemaParams, /) -> SchemaReport:
        """`setup` with a report: detect the schema family (`soniq.schema_state.SchemaFamily`)
        and bring it to this release's schema, all or nothing, serialised across processes
        (several at once apply each step once). A soniq 0.1.0 schema is upgraded in place
        keeping every row, unless 0.1.0 workers still heartbeat into it (then
        `LegacyWorkersActiveError`, unless `force`). A newer, mixed or unknown schema raises
        `SchemaStateError` with nothing changed. With `dry_run` nothing is changed and the
        report lists what would run. Stores without a schema report `"soniq"` and nothing
        pending."""

    # -- issue 19 (protocol 4): cancelling running jobs, waiting for jobs ----------

    async def request_cancel(self, params: RequestCancelParams, /) -> CancelOutcome:
        """Ask for a job to stop, whatever its status, in one atomic write.

        `queued`: as `cancel_job` (the row becomes `cancelled`, its dependents follow),
        `CANCELLED`. `processing`: ``cancel_requested = true`` (idempotent; nothing else
        changes) and a change is published to the owner's `wait_for_job_changes`,
        whatever `watch_jobs` said, `REQUESTED`. `done` or `cancelled` in `soniq_jobs`,
        or a dead-letter row: nothing written, `ALREADY_FINISHED`. No row anywhere:
        `NOT_FOUND`. The flag stays on the row through a nack, retry or rescue, so the
        next worker to claim it sees it in the claimed `JobRecord`."""

    async def cancel_requests(self, params: CancelRequestsParams, /) -> set[str]:
        """Ids of `processing` rows owned by `worker_id` whose `cancel_requested` is set.
        One read; reads nothing but that worker's rows where the store can."""

    async def finish_cancel(self, params: FinishCancelParams, /) -> bool:
        """The handler of a row whose cancel was requested has stopped: ``status =
        'cancelled'``, ``worker_id = NULL``, ``last_error = message``, ``updated_at = now``;
        `attempts` untouched, `cancel_requested` kept. Fenced like every worker write;
        fails the row's dependents and publishes a change when watched, atomically."""

    async def watch_jobs(self, params: WatchJobsParams, /) -> None:
        """Mark rows so that the write that next finishes each of them (`done`, `cancelled`,
        dead-lettered, deleted) publishes a change that `wait_for_job_changes` in any
        process sees. Ids with no row are ignored. A backend without `push_job_changes`
        may do nothing. Cheap: core calls it once per waited job."""

    async def wait_for_job_changes(self, params: WaitForJobChangesParams, /) -> set[str] | None:
        """Return when a change was published for any of `job_ids` (a watched row
        finished, or a cancel was requested on it), or after `timeout` seconds.

        Returns the ids among `job_ids` known to have changed (possibly empty on a
        timeout), or None when the backend cannot tell which (then core re-reads them
        all). A spurious return is always allowed. With `push_job_changes`, one
        listener per backend instance serves every concurrent call; without it the
        backend may simply sleep for `timeout` and return None."""
