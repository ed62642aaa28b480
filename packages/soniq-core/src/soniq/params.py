"""One frozen parameters object per backend operation.

Why objects instead of keyword arguments: a new field with a default is
invisible to a backend that does not read it, so core can grow an operation
without a `TypeError` in every installed third-party backend. Backends read
the fields they know and must ignore the rest; core never removes or changes
the meaning of a field within one protocol version.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from soniq.records import JobCursor as JobCursor
from soniq.records import JobStatus, NewJob, WorkerInfo, WorkerStatus
from soniq.records import Rescue as Rescue
from soniq.records import RescueAction as RescueAction

# -- producers -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EnqueueJobsParams:
    jobs: Sequence[NewJob]
    connection: Any = None
    """A driver connection inside the caller's open transaction (only with
    `capabilities.transactional_enqueue`); None means the backend's own."""


@dataclass(frozen=True, slots=True)
class GetJobParams:
    job_id: str


@dataclass(frozen=True, slots=True)
class CancelJobParams:
    job_id: str


# -- the claim path ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PrepareWorkerParams:
    concurrency: int
    prefetch: int


class LimitScope(str, enum.Enum):
    """Which rows a `GroupLimit` counts."""

    QUEUE = "queue"
    """Rows whose `queue` is the limit's `name`."""
    JOB = "job"
    """Rows whose `job_name` is the limit's `name`."""


@dataclass(frozen=True, slots=True)
class GroupLimit:
    """A fleet-wide limit on one group of rows, enforced by the store inside the claim.

    The group is every row whose queue (scope QUEUE) or job name (scope JOB) is `name`;
    with `partitioned`, one group per distinct `limit_key` among those rows (rows whose
    `limit_key` is None form one group of their own). Core validates the values: every
    number given is positive.
    """

    scope: LimitScope
    name: str
    max_concurrent: int | None = None
    """At most this many rows of the group `processing` at once, across every worker."""
    rate_limit: int | None = None
    """At most this many claims of rows of the group per window of `rate_period` seconds."""
    rate_period: float = 1.0
    """The window length in seconds; windows are fixed, aligned to the Unix epoch, on the store's clock."""
    partitioned: bool = False

    @property
    def key(self) -> str:
        """A stable text naming the limit (not the partition): ``queue:NAME`` or ``job:NAME``."""
        return f"{self.scope.value}:{self.name}"


@dataclass(frozen=True, slots=True)
class ClaimJobsParams:
    worker_id: str
    queues: Sequence[str] | None
    limit: int
    mark_started: bool
    job_names: Sequence[str] | None = None
    """When given, claim only rows whose `job_name` is in it; rows of other names are never touched."""
    limits: Sequence[GroupLimit] = ()
    """Fleet-wide limits the claim must respect; empty: the unlimited claim path."""
    excluded_queues: Sequence[str] = ()
    """Paused queues: their rows are neither claimed nor touched. Sent only to backends that
    declare `QueuePauseStore`."""
    max_versions: Mapping[str, int] | None = None
    """Per job name, the newest row version this worker runs: a row of that name with a higher
    `version` is neither claimed nor touched. Sent only to backends that declare `VersionedJobs`."""


@dataclass(frozen=True, slots=True)
class MarkStartedParams:
    worker_id: str
    job_ids: Sequence[str]


@dataclass(frozen=True, slots=True)
class JobResult:
    job_id: str
    result: Any
    expires_at: datetime | None = None
    """Stored on the row as `expires_at`: when `prune_jobs` may delete it (None: never)."""
    delete_row: bool = False
    """`result_ttl = 0`: delete the row, fenced as a completion, instead of storing it."""


@dataclass(frozen=True, slots=True)
class CompleteJobsParams:
    worker_id: str
    results: Sequence[JobResult]


@dataclass(frozen=True, slots=True)
class RetryJobParams:
    job_id: str
    worker_id: str
    error: str
    scheduled_at: datetime


@dataclass(frozen=True, slots=True)
class SnoozeJobParams:
    job_id: str
    worker_id: str
    scheduled_at: datetime


@dataclass(frozen=True, slots=True)
class DeadLetterJobParams:
    job_id: str
    worker_id: str
    error: str
    reason: str


@dataclass(frozen=True, slots=True)
class NackJobParams:
    job_id: str
    worker_id: str
    handler_started: bool = False
    """The row's handler had started and a shutdown cut it off: the same write also adds one
    to the row's `shutdown_nacks` (the count core bounds with `max_shutdown_nacks`). False for
    rows handed back before their handler started, which leave the count alone."""


# -- queue pauses, steps and checkpoints ----------------------------------------


@dataclass(frozen=True, slots=True)
class PauseQueueParams:
    queue: str
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class ResumeQueueParams:
    queue: str


@dataclass(frozen=True, slots=True)
class SaveStepParams:
    job_id: str
    worker_id: str
    name: str
    value_json: str
    """The step's result as JSON text, encoded and size-checked by core."""


@dataclass(frozen=True, slots=True)
class SaveCheckpointParams:
    job_id: str
    worker_id: str
    value_json: str
    """The checkpoint as JSON text, encoded and size-checked by core."""


@dataclass(frozen=True, slots=True)
class SaveProgressParams:
    job_id: str
    worker_id: str
    progress_json: str
    """The progress object as JSON text, built and checked by core."""


@dataclass(frozen=True, slots=True)
class SealedRowsParams:
    """A page of rows holding sealed values (`KeyRotationStore.sealed_rows`)."""

    cursor: str | None = None
    """Where the previous page ended (its `SealedRowPage.next_cursor`); None: the start."""
    limit: int = 500


@dataclass(frozen=True, slots=True)
class ResealRowParams:
    """Replace sealed values of one row, each only if it is still what was read (`KeyRotationStore.reseal_row`).

    Each field is None (leave it) or ``(old_json, new_json)``: the JSON text `sealed_rows` returned
    for it and the text to store instead."""

    table: str
    """``"jobs"`` or ``"dead_letter"``, as `SealedRow.table` said."""
    id: str
    args_json: tuple[str, str] | None = None
    result_json: tuple[str, str] | None = None
    progress_json: tuple[str, str] | None = None


@dataclass(frozen=True, slots=True)
class SaveJobLogsParams:
    job_id: str
    worker_id: str
    logs_json: str
    """The job's whole log as JSON text (`soniq.backend.encode_job_logs`), trimmed by core."""


@dataclass(frozen=True, slots=True)
class GetJobLogsParams:
    job_id: str


# -- workers -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RegisterWorkerParams:
    worker: WorkerInfo


@dataclass(frozen=True, slots=True)
class HeartbeatParams:
    worker_id: str


@dataclass(frozen=True, slots=True)
class SetWorkerStatusParams:
    worker_id: str
    status: WorkerStatus
    state: str | None = None
    """The `WorkerState` name the worker just entered; None leaves the stored state as it is."""
    last_shutdown: Mapping[str, Any] | None = None
    """At STOPPED: a JSON-ready summary of what the shutdown did; None leaves the stored one."""


# -- stale recovery ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FindStaleJobsParams:
    heartbeat_timeout: float
    """Seconds of silence after which a worker is stale."""


@dataclass(frozen=True, slots=True)
class RescueJobsParams:
    rescues: Sequence[Rescue]


@dataclass(frozen=True, slots=True)
class ExpireUnknownJobsParams:
    """Core decided that no live worker can run these names; the backend moves the old rows."""

    known_names: Sequence[str]
    older_than: float
    """Seconds, on the store's clock, judged by the row's `created_at`."""
    error: str
    """The `last_error` written on each moved row."""


# -- observation -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QueueStatsParams:
    queue: str | None = None


@dataclass(frozen=True, slots=True)
class WaitForJobsParams:
    queues: Sequence[str] | None
    timeout: float


# -- cancelling running jobs, waiting for jobs ------------------------


@dataclass(frozen=True, slots=True)
class RequestCancelParams:
    job_id: str


@dataclass(frozen=True, slots=True)
class CancelRequestsParams:
    worker_id: str


@dataclass(frozen=True, slots=True)
class FinishCancelParams:
    job_id: str
    worker_id: str
    message: str
    """Stored as `last_error`, saying who cancelled and how the handler ended."""


@dataclass(frozen=True, slots=True)
class WatchJobsParams:
    job_ids: Sequence[str]


@dataclass(frozen=True, slots=True)
class WaitForJobChangesParams:
    job_ids: Sequence[str]
    timeout: float


# -- dead letters --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GetDeadLetterParams:
    job_id: str


@dataclass(frozen=True, slots=True)
class ReplayDeadLetterParams:
    job_id: str
    new_job_id: str
    scheduled_at: datetime
    # -- overrides; None keeps the dead-letter row's value --
    queue: str | None = None
    priority: int | None = None
    max_attempts: int | None = None
    attempts: int = 0
    """The new row's `attempts` (core passes the dead row's count when not resetting)."""


@dataclass(frozen=True, slots=True)
class PurgeDeadLetterParams:
    job_id: str


# -- dashboard reads -------------------------------------


@dataclass(frozen=True, slots=True)
class JobCountsParams:
    queues: Sequence[str] | None = None
    """Only these queues (None: every queue that has a job or a dead letter)."""


@dataclass(frozen=True, slots=True)
class JobActivityParams:
    since: datetime
    """The first bucket starts here; buckets run to the store's now."""
    bucket_seconds: int = 300
    queue: str | None = None


@dataclass(frozen=True, slots=True)
class JobPageParams:
    statuses: Sequence[JobStatus] | None = None
    queues: Sequence[str] | None = None
    job_name: str | None = None
    """Exact `job_name`."""
    job_name_prefix: str | None = None
    """`job_name` starts with this (case-sensitive)."""
    search: str | None = None
    """A row whose `id` equals it or whose `job_name` starts with it."""
    before: JobCursor | None = None
    limit: int = 50
    include_results: bool = False
    """False: every returned row has ``result = None`` (the store need not read the column)."""


@dataclass(frozen=True, slots=True)
class DeadLetterPageParams:
    reasons: Sequence[str] | None = None
    queues: Sequence[str] | None = None
    job_name: str | None = None
    job_name_prefix: str | None = None
    search: str | None = None
    """As on `JobPageParams`: the original job id, or a `job_name` prefix."""
    before: JobCursor | None = None
    limit: int = 50
    filter: DeadLetterFilter | None = None
    """Only rows matching it too (its job names, queues, reasons, move-time range and
    resurrected flag), with every other field; None: no further condition."""


# -- deleting jobs, dead-letter filters and bulk ops -----


@dataclass(frozen=True, slots=True)
class DeleteJobParams:
    job_id: str


@dataclass(frozen=True, slots=True)
class DeadLetterFilter:
    """Which dead-letter rows an operation applies to; every given field must match."""

    job_names: Sequence[str] | None = None
    queues: Sequence[str] | None = None
    reasons: Sequence[str] | None = None
    moved_from: datetime | None = None
    """``moved_to_dead_letter_at >= moved_from``."""
    moved_to: datetime | None = None
    """``moved_to_dead_letter_at <= moved_to``."""
    resurrected: bool | None = None
    """True: only rows replayed at least once; False: only never-replayed rows."""


@dataclass(frozen=True, slots=True)
class DeleteDeadLettersParams:
    filter: DeadLetterFilter
    limit: int = 1000
    """At most this many rows per call, oldest `moved_to_dead_letter_at` first."""


@dataclass(frozen=True, slots=True)
class DeadLetterStatsParams:
    filter: DeadLetterFilter | None = None


# -- schedules, leader lease, pruning -------------------------------


def _aware(value: datetime, what: str) -> None:
    """Every backend stores UTC instants: a naive datetime is refused before anything is written."""
    if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{what} must be a timezone-aware datetime, got {value!r}")


def _limit(value: int, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} must be an int of 0 or more, got {value!r}")


@dataclass(frozen=True, slots=True)
class UpsertScheduleParams:
    """A schedule's definition, inserted or replacing the one stored under `name`.

    `next_run` is computed by core. On replace, the stored `next_run` is kept
    when `cron`, `every_seconds` and `timezone` are unchanged (so re-declaring
    a schedule as each worker starts loses no due run), unless `reset_next_run`.
    `last_run`, `run_count`, `last_job_id` and `created_at` always survive.
    """

    name: str
    job_name: str
    next_run: datetime
    cron: str | None = None
    every_seconds: float | None = None
    timezone: str = "UTC"
    queue: str = "default"
    priority: int = 100
    max_attempts: int = 3
    args: Mapping[str, Any] = field(default_factory=dict)
    catch_up: str = "skip"
    catch_up_limit: int = 1
    paused: bool | None = None
    """None keeps the stored value (False for a new schedule)."""
    reset_next_run: bool = False

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("schedule name must be a non-empty string")
        if (self.cron is None) == (self.every_seconds is None):
            raise ValueError(f"schedule {self.name!r}: give exactly one of cron and every_seconds")
        if self.every_seconds is not None and not self.every_seconds > 0:
            raise ValueError(f"schedule {self.name!r}: every_seconds must be positive, got {self.every_seconds!r}")
        _aware(self.next_run, f"schedule {self.name!r}: next_run")


@dataclass(frozen=True, slots=True)
class GetScheduleParams:
    name: str


@dataclass(frozen=True, slots=True)
class ListSchedulesParams:
    names: Sequence[str] | None = None
    """Only these names (None: every schedule)."""


@dataclass(frozen=True, slots=True)
class SetSchedulePausedParams:
    name: str
    paused: bool
    next_run: datetime | None = None
    """Also store this `next_run` (core passes one when resuming); None keeps it."""


@dataclass(frozen=True, slots=True)
class RemoveScheduleParams:
    name: str


@dataclass(frozen=True, slots=True)
class DueSchedulesParams:
    now: datetime | None = None
    """Due means ``next_run <= now``; None: the store's clock."""
    limit: int = 100

    def __post_init__(self) -> None:
        if self.now is not None:
            _aware(self.now, "due_schedules now")
        _limit(self.limit, "due_schedules limit")


@dataclass(frozen=True, slots=True)
class FireScheduleParams:
    """Advance one schedule and enqueue its runs, fenced on the `next_run` core read."""

    name: str
    expected_next_run: datetime
    new_next_run: datetime
    jobs: Sequence[NewJob]
    """Inserted as `enqueue_jobs` would; empty to advance without a run (`skip`)."""
    fired_at: datetime
    """Stored as `last_run` when `jobs` is not empty."""

    def __post_init__(self) -> None:
        for what in ("expected_next_run", "new_next_run", "fired_at"):
            _aware(getattr(self, what), f"fire_schedule {what}")


@dataclass(frozen=True, slots=True)
class AcquireLeaseParams:
    holder: str
    ttl: float
    """Seconds, on the store's clock, until the lease lapses unless renewed."""
    name: str = "leader"

    def __post_init__(self) -> None:
        if isinstance(self.ttl, bool) or not isinstance(self.ttl, int | float) or not self.ttl > 0:
            raise ValueError(f"lease ttl must be a positive number of seconds, got {self.ttl!r}")


@dataclass(frozen=True, slots=True)
class ReleaseLeaseParams:
    holder: str
    name: str = "leader"


@dataclass(frozen=True, slots=True)
class GetLeaseParams:
    name: str = "leader"


@dataclass(frozen=True, slots=True)
class PruneJobsParams:
    now: datetime | None = None
    """Rows with ``expires_at <= now`` go; None: the store's clock."""
    limit: int = 1000

    def __post_init__(self) -> None:
        if self.now is not None:
            _aware(self.now, "prune_jobs now")
        _limit(self.limit, "prune_jobs limit")


@dataclass(frozen=True, slots=True)
class PruneDeadLettersParams:
    before: datetime
    """Dead-letter rows moved strictly before this go."""
    limit: int = 1000

    def __post_init__(self) -> None:
        _aware(self.before, "prune_dead_letters before")
        _limit(self.limit, "prune_dead_letters limit")


# --- schema upgrades (setup_schema) ---------------------------------------------


@dataclass(frozen=True, slots=True)
class SetupSchemaParams:
    dry_run: bool = False
    """Change nothing: report the family found and the SQL `setup` would run."""
    force: bool = False
    """Upgrade a soniq 0.1.0 schema even while 0.1.0 workers still heartbeat into it."""

    def __post_init__(self) -> None:
        for name in ("dry_run", "force"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"setup_schema {name} must be True or False, got {getattr(self, name)!r}")
