"""Frozen value types exchanged between core and backends.

Backends return these, never driver rows, so that core and every backend
agree on one shape. Timestamps are timezone-aware UTC datetimes.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any


class JobStatus(str, enum.Enum):
    """The only four values a `soniq_jobs.status` may hold."""

    QUEUED = "queued"
    PROCESSING = "processing"
    DONE = "done"
    CANCELLED = "cancelled"


class WorkerStatus(str, enum.Enum):
    ACTIVE = "active"
    STOPPING = "stopping"
    STOPPED = "stopped"


class StaleJobPolicy(str, enum.Enum):
    """What stale recovery does with a row whose handler had started."""

    REQUEUE = "requeue"
    DEAD_LETTER = "dead_letter"


class DeadLetterReason(str, enum.Enum):
    """Why a row moved to `soniq_dead_letter_jobs`."""

    MAX_ATTEMPTS = "max_attempts"
    UNKNOWN_JOB = "unknown_job"
    ZOMBIE = "zombie"
    WORKER_LOST = "worker_lost"
    NON_RETRYABLE = "non_retryable"
    CORRUPT_ROW = "corrupt_row"
    """The row's stored arguments or result could not be decoded."""
    STUCK = "stuck"
    """The handler would not stop after cancellation, or kept running past its deadline."""
    INVALID_ARGUMENTS = "invalid_arguments"
    """The stored arguments failed the job's `args_model` in the worker."""
    NO_UPGRADE_PATH = "no_upgrade_path"
    """The row's version is older than any upgrade chain of the worker's job reaches."""
    UPGRADE_FAILED = "upgrade_failed"
    """An upgrade function raised or returned something that is not a JSON object."""
    NACK_LIMIT = "nack_limit"
    """The row's handler was cut off by `max_shutdown_nacks` shutdowns without finishing."""
    UNDECRYPTABLE = "undecryptable"
    """The row's sealed arguments open with none of the configured `encryption_keys`."""


class DependencyPolicy(str, enum.Enum):
    """What a job does when one of its dependencies is cancelled or dead-lettered."""

    CANCEL = "cancel"
    """The dependent is cancelled too (and so, in turn, are its own dependents that follow this policy)."""
    RUN = "run"
    """The failed dependency counts as resolved: the dependent runs once the others are done."""


class CancelOutcome(str, enum.Enum):
    """What `Backend.request_cancel` did."""

    CANCELLED = "cancelled"
    """The row was `queued`: it is now `cancelled`."""
    REQUESTED = "requested"
    """The row is `processing`: `cancel_requested` is set and its owner was told."""
    ALREADY_FINISHED = "already_finished"
    """The row is `done` or `cancelled`, or the job is dead-lettered: nothing written."""
    NOT_FOUND = "not_found"
    """No job row and no dead-letter row has that id: nothing written."""


QUEUE_STATS_KEYS: tuple[str, ...] = (
    "total",
    "queued",
    "processing",
    "done",
    "dead_letter",
    "cancelled",
)


@dataclass(frozen=True, slots=True)
class NewJob:
    """A job about to be inserted. Core fills every field; the backend stores them as given."""

    id: str
    job_name: str
    args: Mapping[str, Any]
    queue: str
    priority: int
    scheduled_at: datetime
    max_attempts: int
    trace_context: Mapping[str, str] | None = None
    args_json: str | None = None
    """`args` as compact JSON text, when core already encoded it; a backend may store it as is."""
    # -- deduplication and the producer -------------
    dedup_key: str | None = None
    """While a `queued` row holds this key, enqueueing another job with it stores nothing
    and returns that row's id (see `Backend.enqueue_jobs`). None: no deduplication."""
    producer_id: str | None = None
    """Who enqueued the job (a service name), stored as is; None when not given."""
    # -- dependencies and fleet-wide limits ------------------------
    depends_on: tuple[str, ...] = ()
    """Ids of jobs this one waits for (distinct; rows in the store, dead letters, or jobs
    earlier in the same `enqueue_jobs` call). See `Backend.enqueue_jobs`."""
    dependency_policy: DependencyPolicy = DependencyPolicy.CANCEL
    limit_key: str | None = None
    """The partition value for partitioned limits (`GroupLimit.partitioned`), taken by core
    from the job's arguments; stored as is."""
    version: int = 1
    """The version of the job's code that enqueued it (see `VersionedJobs`)."""
    # -- unique windows and debounce -------------------------------------------
    unique_window: UniqueWindow | None = None
    """Hold `unique_window.key` for a window whatever the row's state (see `UniqueWindows`);
    such a job carries no `dedup_key`. None: no window."""
    debounce_deadline: datetime | None = None
    """A debounced job: the latest `scheduled_at` its row may ever get, stored with the row; a
    repeat enqueue with the same `dedup_key` moves the queued row instead of inserting (see
    `DebouncedJobs`). None: not debounced."""


@dataclass(frozen=True, slots=True)
class UniqueWindow:
    """A key held for a window from an enqueue on, whatever becomes of the job (`unique_for=`).

    Times come from the producer's clock, so the store compares them without a clock of its own:
    a stored window whose `expires_at` is after this window's `starts_at` still holds the key."""

    key: str
    starts_at: datetime
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class JobRecord:
    """One `soniq_jobs` row.

    `started_at` is set when the row's handler started (or, when the worker
    needs no distinction, at claim time); stale recovery reads it to tell a
    row that never ran user code from one that may have side effects.
    """

    id: str
    job_name: str
    args: Mapping[str, Any]
    status: JobStatus
    attempts: int
    max_attempts: int
    queue: str
    priority: int
    scheduled_at: datetime
    last_error: str | None
    worker_id: str | None
    result: Any
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None = None
    trace_context: Mapping[str, str] | None = None
    decode_error: str | None = None
    """Set by the backend, instead of raising, when the stored args or result could not be
    decoded (then `args` is empty and/or `result` None); core dead-letters such a row."""
    expires_at: datetime | None = None
    """When a finished row may be pruned; None: kept until deleted by hand."""
    dedup_key: str | None = None
    """The key the row holds while `queued`; a claim releases it (then None)."""
    producer_id: str | None = None
    depends_on: tuple[str, ...] = ()
    """The ids the job was enqueued to wait for, as given."""
    waiting_on: int = 0
    """How many of `depends_on` are not yet resolved; the row is claimable only at 0."""
    dependency_policy: DependencyPolicy = DependencyPolicy.CANCEL
    limit_key: str | None = None
    cancel_requested: bool = False
    """Someone asked for this job to be cancelled while it was `processing` (kept afterwards as a record)."""
    shutdown_nacks: int = 0
    """How many times a shutdown handed the row back after its handler had started."""
    version: int = 1
    """The version of the job's code that enqueued the row (`VersionedJobs`; 1 elsewhere)."""
    steps: Mapping[str, Any] = field(default_factory=dict)
    """Completed steps of this job id, by name (`JobStepStore`; empty elsewhere)."""
    checkpoint: Any = None
    """The last checkpoint stored for this job id (`JobStepStore`), or None."""
    progress: Mapping[str, Any] | None = None
    """The last progress a run of this job stored (`JobProgressStore`): the decoded JSON object
    ``{"done", "total", "message", "updated_at"}`` (``updated_at`` an ISO 8601 string), or None."""

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = self.status.value
        data["args"] = dict(self.args)
        data["depends_on"] = list(self.depends_on)
        data["dependency_policy"] = self.dependency_policy.value
        data["trace_context"] = dict(self.trace_context) if self.trace_context else None
        data["steps"] = dict(self.steps)
        data["progress"] = progress_view(self.progress)
        return data


def progress_view(stored: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A stored progress object as `get_job()["progress"]` shows it: ``updated_at`` a datetime."""
    if stored is None:
        return None
    view = dict(stored)
    stamp = view.get("updated_at")
    if isinstance(stamp, str):
        try:
            view["updated_at"] = datetime.fromisoformat(stamp)
        except ValueError:
            pass  # shown as stored
    return view


@dataclass(frozen=True, slots=True)
class DeadLetterRecord:
    """One `soniq_dead_letter_jobs` row; `id` is the original job's id."""

    id: str
    job_name: str
    args: Mapping[str, Any]
    queue: str
    attempts: int
    last_error: str | None
    dead_letter_reason: str
    moved_to_dead_letter_at: datetime
    resurrection_count: int = 0
    last_resurrection_at: datetime | None = None
    max_attempts: int = 1
    priority: int = 100
    decode_error: str | None = None
    """As on `JobRecord`: the stored args could not be decoded (then `args` is empty)."""
    version: int = 1
    """The job version the row was enqueued at (`VersionedJobs`); a replay queues it at this version."""

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["args"] = dict(self.args)
        return data


@dataclass(frozen=True, slots=True)
class SealedRow:
    """One stored row that may hold sealed values (`KeyRotationStore`): each field's JSON text as
    stored, None where the row has no value there."""

    table: str
    """``"jobs"`` (a `soniq_jobs` row) or ``"dead_letter"``."""
    id: str
    args_json: str | None
    result_json: str | None
    progress_json: str | None = None


@dataclass(frozen=True, slots=True)
class SealedRowPage:
    rows: list[SealedRow]
    next_cursor: str | None
    """Pass it back for the next page; None when this was the last."""


@dataclass(frozen=True, slots=True)
class PausedQueue:
    """One paused queue (`QueuePauseStore`)."""

    queue: str
    reason: str | None
    paused_at: datetime

    def to_dict(self) -> dict[str, Any]:
        return {"queue": self.queue, "reason": self.reason, "paused_at": self.paused_at}


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A worker process as it registers itself in `soniq_workers`."""

    id: str
    hostname: str
    pid: int
    queues: tuple[str, ...] | None
    concurrency: int
    job_names: tuple[str, ...] | None = None
    """The job names this worker has registered (None: not reported)."""
    job_versions: Mapping[str, int] | None = None
    """The version of each registered job this worker runs (stored by `VersionedJobs` backends)."""


@dataclass(frozen=True, slots=True)
class WorkerRecord:
    """One `soniq_workers` row."""

    id: str
    hostname: str
    pid: int
    queues: tuple[str, ...] | None
    concurrency: int
    status: WorkerStatus
    last_heartbeat: datetime
    started_at: datetime
    job_names: tuple[str, ...] | None = None
    state: str | None = None
    """The `WorkerState` name the worker last wrote (None: it has written none since registering)."""
    state_changed_at: datetime | None = None
    last_shutdown: Mapping[str, Any] | None = None
    """What the worker's last completed shutdown did, as it wrote it at STOPPED (see `soniq.worker.record`)."""
    job_versions: Mapping[str, int] | None = None
    """The version of each job the worker runs, as registered (`VersionedJobs`; None elsewhere)."""


@dataclass(frozen=True, slots=True)
class RecoveryResult:
    """What one stale-worker sweep did."""

    stale_workers: tuple[str, ...] = ()
    requeued: tuple[str, ...] = ()
    dead_lettered: tuple[str, ...] = ()
    skipped: bool = False
    """True when another process held the sweep lock and this call did nothing."""
    rescues: tuple[Rescue, ...] = field(default=(), compare=False)
    """Core's decision for each row actually written (release, requeue or dead letter,
    with its reason); left out of equality so results compare by what moved."""


@dataclass(frozen=True, slots=True)
class StaleScan:
    """What `find_stale_jobs` found: the workers it marked `stopped` and the rows they orphaned."""

    stale_workers: tuple[str, ...] = ()
    orphaned: tuple[JobRecord, ...] = ()
    """`processing` rows owned by a stale worker, or by a worker id with no row or a
    `stopped` row and `updated_at` older than the timeout, oldest `updated_at` first."""
    skipped: bool = False
    """True when another process held the sweep lock: nothing was marked or read."""


@dataclass(frozen=True, slots=True)
class QueueStats:
    """Counts by state; `total` is the sum of the other five."""

    total: int = 0
    queued: int = 0
    processing: int = 0
    done: int = 0
    dead_letter: int = 0
    cancelled: int = 0

    def to_dict(self) -> dict[str, int]:
        return {key: int(getattr(self, key)) for key in QUEUE_STATS_KEYS}


@dataclass(frozen=True, slots=True)
class QueueCounts:
    """One queue's counts; `total` is the sum of the five status counts (as in `QueueStats`)."""

    queue: str
    total: int = 0
    queued: int = 0
    processing: int = 0
    done: int = 0
    dead_letter: int = 0
    cancelled: int = 0
    scheduled: int = 0
    """The `queued` rows whose `scheduled_at` is still in the future (a subset of `queued`)."""
    oldest_queued_at: datetime | None = None
    """The smallest `created_at` among `queued` rows, None when there are none."""
    oldest_due_at: datetime | None = None
    """The smallest `created_at` among `queued` rows already due (`scheduled_at` not in the future), None
    when none is due: the wait an operator asks about, which a job scheduled for later is not part of."""


@dataclass(frozen=True, slots=True)
class ActivityBucket:
    start: datetime
    done: int = 0
    """Rows now `done` whose `updated_at` falls in the bucket."""
    dead_lettered: int = 0
    """Dead-letter rows whose `moved_to_dead_letter_at` falls in the bucket."""
    failed: int | None = None
    """Failed runs (retried) in the bucket; None when the store keeps no run history (every backend so far)."""


@dataclass(frozen=True, slots=True)
class JobPage:
    rows: list[JobRecord]
    next_cursor: JobCursor | None
    """Pass as `before` for the next page; None when this page reached the end."""


@dataclass(frozen=True, slots=True)
class DeadLetterPage:
    rows: list[DeadLetterRecord]
    next_cursor: JobCursor | None


# -- schema status --


@dataclass(frozen=True, slots=True)
class MigrationStep:
    """One schema step of a backend: its number, its name, and when it was applied (None: unknown or pending)."""

    version: int
    name: str
    applied_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class SchemaStatus:
    """What `Backend.schema_status` found: the steps applied to the store and those `setup()` would apply.

    Growable: later fields get defaults, and `details` holds backend-specific facts
    (a JSON-ready mapping) that have no field of their own yet.
    """

    backend: str
    """The kind of store, as its URL scheme names it: ``postgresql``, ``sqlite``, ``redis``, ``memory``."""
    location: str
    """Where the schema lives (schema name, file, key prefix), with no password in it."""
    applied: tuple[MigrationStep, ...]
    pending: tuple[MigrationStep, ...]
    newer_than_known: bool = False
    """The store was upgraded by a newer release than this backend: it holds steps this one does not know."""
    details: Mapping[str, Any] = field(default_factory=dict)

    @property
    def up_to_date(self) -> bool:
        return not self.pending and not self.newer_than_known

    @property
    def current_version(self) -> int | None:
        return max((step.version for step in self.applied), default=None)

    def to_dict(self) -> dict[str, Any]:
        def step(item: MigrationStep) -> dict[str, Any]:
            applied_at = item.applied_at.isoformat() if item.applied_at else None
            return {"version": item.version, "name": item.name, "applied_at": applied_at}

        return {
            "backend": self.backend,
            "location": self.location,
            "current_version": self.current_version,
            "up_to_date": self.up_to_date,
            "newer_than_known": self.newer_than_known,
            "applied": [step(item) for item in self.applied],
            "pending": [step(item) for item in self.pending],
            "details": dict(self.details),
        }


# -- dead-letter statistics -----------------------------


@dataclass(frozen=True, slots=True)
class DeadLetterStats:
    """Counts over the dead-letter rows a `DeadLetterFilter` matches."""

    total: int = 0
    by_job_name: Mapping[str, int] = field(default_factory=dict)
    by_queue: Mapping[str, int] = field(default_factory=dict)
    by_reason: Mapping[str, int] = field(default_factory=dict)
    resurrected: int = 0
    """Rows replayed at least once (`resurrection_count > 0`)."""
    oldest_moved_at: datetime | None = None
    newest_moved_at: datetime | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "by_job_name": dict(sorted(self.by_job_name.items())),
            "by_queue": dict(sorted(self.by_queue.items())),
            "by_reason": dict(sorted(self.by_reason.items())),
            "resurrected": self.resurrected,
            "oldest_moved_at": self.oldest_moved_at,
            "newest_moved_at": self.newest_moved_at,
        }


# -- schedules, leader lease, pruning -------------------------------


@dataclass(frozen=True, slots=True)
class ScheduleRecord:
    """One `soniq_schedules` row: a recurring job's definition and its firing state.

    The store keeps the timing fields (`cron`, `every_seconds`, `timezone`,
    `catch_up`, `catch_up_limit`) as given and never interprets them; core
    computes every `next_run`.
    """

    name: str
    job_name: str
    queue: str
    priority: int
    max_attempts: int
    args: Mapping[str, Any]
    cron: str | None
    every_seconds: float | None
    timezone: str
    catch_up: str
    """`skip`, `latest` or `all` (core's policy names)."""
    catch_up_limit: int
    paused: bool
    next_run: datetime
    last_run: datetime | None
    run_count: int
    last_job_id: str | None
    created_at: datetime
    updated_at: datetime

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["args"] = dict(self.args)
        return data


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """A held lease (one `soniq_leader` row), timestamps on the store's clock."""

    name: str
    holder: str
    acquired_at: datetime
    """When `holder` took the lease (renewals keep it)."""
    renewed_at: datetime
    expires_at: datetime

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --- schema upgrades (setup_schema) ---------------------------------------------


@dataclass(frozen=True, slots=True)
class SchemaReport:
    """Where a store's schema stands, and what `setup_schema` did (or, on a dry run, would do)."""

    family: str
    """A `soniq.schema_state.SchemaFamily` value: the schema found before this call."""
    applied: tuple[int, ...]
    """Migration versions recorded before this call."""
    pending: tuple[int, ...]
    """Versions this call applied (or would apply); empty when the schema was current."""
    statements: tuple[str, ...] = ()
    """The SQL run (or to run), in order; empty for stores without SQL."""
    upgraded_from: str | None = None
    """``"soniq-0.1.0"`` when this call upgraded (or would upgrade) a 0.1.0 schema."""
    dry_run: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- values that travel both ways: core's rescue decisions and keyset positions --


class RescueAction(str, enum.Enum):
    """What core decided for one orphaned row."""

    RELEASE = "release"
    """The handler never started: the nack field set, `attempts` as given (unchanged)."""
    REQUEUE = "requeue"
    """Back to `queued` now with `attempts` and `last_error` as given."""
    DEAD_LETTER = "dead_letter"
    """Move to the dead-letter table with `attempts`, `last_error` and `reason` as given."""


@dataclass(frozen=True, slots=True)
class Rescue:
    """Core's explicit decision for one orphaned row: the backend writes exactly this.

    The write is fenced on the row as it was read: it applies only while the
    row is still ``status = 'processing'`` with ``worker_id = expected_worker_id``
    and ``updated_at = expected_updated_at``. A row that finished, was rescued
    by another sweeper, or changed in any way since is left alone.
    """

    job_id: str
    expected_worker_id: str
    expected_updated_at: datetime
    action: RescueAction
    attempts: int
    error: str | None = None
    """The new `last_error` (None keeps the current one, as a release does)."""
    reason: str | None = None
    """The `dead_letter_reason`, for `DEAD_LETTER` only."""


@dataclass(frozen=True, slots=True, order=True)
class JobCursor:
    """A keyset position: the `(at, id)` of the last row shown; the next page starts strictly below it."""

    at: datetime
    id: str
