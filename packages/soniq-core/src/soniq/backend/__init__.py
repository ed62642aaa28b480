"""The backend SDK: everything a Soniq backend imports from core.

A backend fills roles. `QueueStore` is required and makes a working backend on its own; every
other role is optional, declared with its version in `BackendCapabilities.roles`, and checked
when a feature first needs it (`MissingBackendRoleError` names the feature, the role and the
backend). Each role lives in its own module with the guarantees its methods make:

- `queue_store.QueueStore`: enqueue, claim, settle, nack, workers, stale recovery, stats.
- `dead_letter_store.DeadLetterStore`: read, replay and delete dead-letter rows.
- `schedule_store.ScheduleStore`: stored schedules and the leader lease.
- `operator_reads.OperatorReads`: paged and counted reads for dashboards and the CLI.
- `schema_admin.SchemaAdmin`: schema reports, upgrades from soniq 0.1.0, dropping.
- `cancel_channel.CancelChannel`: cancelling running jobs, telling waiters a job finished.
- `limit_store.LimitStore`: fleet-wide limits inside the claim (no method of its own).
- `dependency_store.DependencyStore`: jobs that wait for other jobs (no method of its own).
- `retention_store.RetentionStore`: deleting finished rows past their retention.
- `queue_pause_store.QueuePauseStore`: queues paused and resumed fleet-wide, durably.
- `job_step_store.JobStepStore`: a running job's completed steps and last checkpoint.
- `versioned_jobs.VersionedJobs`: rows carry their code's version; claims skip newer rows
  (no method of its own).
- `job_progress_store.JobProgressStore`: how far a running job has got.
- `job_log_store.JobLogStore`: the log records a job's handler wrote, kept with the job.
- `unique_windows.UniqueWindows`: at most one job per key per window (no method of its own).
- `debounced_jobs.DebouncedJobs`: a repeat enqueue moves the queued job (no method of its own).
- `key_rotation_store.KeyRotationStore`: finding rows with sealed values and re-sealing them.

`rules` holds the pure rules a backend applies rather than decides (the dependency cascade,
limit groups and windows), so that every backend writes the same values. Beside the roles this
package exports what every backend needs and should not write again: decoding stored JSON row by
row (`decode_args`), keyset pages (`cut`, `job_cursor`), redacting URLs in messages
(`redact_url`), the 0.1.0 unique key (`unique_key`), core's stale-recovery sweep and its error
text (`sweep_stale_workers`, `lost_worker_error`), and finding a backend by URL scheme.

Stability: this package is public API for backend authors. A role's version is bumped when a
method is added, removed or changes its guarantee; within one version guarantees only widen
and parameters objects grow only by fields with defaults, which a backend that does not know
them never reads.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from soniq.backend.cancel_channel import CancelChannel
from soniq.backend.capabilities import BackendCapabilities
from soniq.backend.dead_letter_store import DeadLetterStore
from soniq.backend.debounced_jobs import DebouncedJobs
from soniq.backend.dependency_store import DependencyStore
from soniq.backend.job_log_store import JobLogStore
from soniq.backend.job_progress_store import JobProgressStore
from soniq.backend.job_step_store import JobStepStore
from soniq.backend.key_rotation_store import (
    SEALED_MARKS,
    KeyRotationStore,
    holds_sealed,
    parse_sealed_cursor,
    sealed_cursor,
)
from soniq.backend.limit_store import LimitStore
from soniq.backend.operator_reads import OperatorReads
from soniq.backend.queue_pause_store import QueuePauseStore
from soniq.backend.queue_store import QueueStore
from soniq.backend.retention_store import RetentionStore
from soniq.backend.roles import ROLES, Role, check_backend, declared_roles, has_role, require_role
from soniq.backend.schedule_store import ScheduleStore
from soniq.backend.schema_admin import SchemaAdmin
from soniq.backend.unique_windows import UniqueWindows
from soniq.backend.versioned_jobs import VersionedJobs
from soniq.decoding import decode_args, decode_json, join_problems
from soniq.dedup import unique_key
from soniq.discovery import backend_class_for, installed_schemes, register_backend
from soniq.errors import MissingBackendRoleError
from soniq.limits import check_group_limit
from soniq.pagination import (
    activity,
    activity_buckets,
    cut,
    dead_letter_cursor,
    dead_letter_filter_matches,
    dead_letter_matches,
    job_cursor,
    job_matches,
)
from soniq.params import (
    AcquireLeaseParams,
    CancelJobParams,
    CancelRequestsParams,
    ClaimJobsParams,
    CompleteJobsParams,
    DeadLetterFilter,
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
    GetJobLogsParams,
    GetJobParams,
    GetLeaseParams,
    GetScheduleParams,
    GroupLimit,
    HeartbeatParams,
    JobActivityParams,
    JobCountsParams,
    JobCursor,
    JobPageParams,
    JobResult,
    LimitScope,
    ListSchedulesParams,
    MarkStartedParams,
    NackJobParams,
    PauseQueueParams,
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
    Rescue,
    RescueAction,
    RescueJobsParams,
    ResealRowParams,
    ResumeQueueParams,
    RetryJobParams,
    SaveCheckpointParams,
    SaveJobLogsParams,
    SaveProgressParams,
    SaveStepParams,
    SealedRowsParams,
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
    QUEUE_STATS_KEYS,
    ActivityBucket,
    CancelOutcome,
    DeadLetterPage,
    DeadLetterReason,
    DeadLetterRecord,
    DeadLetterStats,
    DependencyPolicy,
    JobPage,
    JobRecord,
    JobStatus,
    LeaseRecord,
    MigrationStep,
    NewJob,
    PausedQueue,
    QueueCounts,
    QueueStats,
    RecoveryResult,
    ScheduleRecord,
    SchemaReport,
    SchemaStatus,
    SealedRow,
    SealedRowPage,
    StaleJobPolicy,
    StaleScan,
    UniqueWindow,
    WorkerInfo,
    WorkerRecord,
    WorkerStatus,
)
from soniq.redaction import redact_text, redact_url
from soniq.rescue import lost_worker_error, sweep_stale_workers
from soniq.schema_state import SchemaFamily


@runtime_checkable
class Backend(
    QueueStore,
    DeadLetterStore,
    ScheduleStore,
    OperatorReads,
    SchemaAdmin,
    CancelChannel,
    LimitStore,
    DependencyStore,
    RetentionStore,
    QueuePauseStore,
    JobStepStore,
    VersionedJobs,
    JobProgressStore,
    JobLogStore,
    UniqueWindows,
    DebouncedJobs,
    KeyRotationStore,
    Protocol,
):
    """A backend that fills every role this soniq-core knows, as the bundled ones do."""


__all__ = [
    "QUEUE_STATS_KEYS",
    "ROLES",
    "SEALED_MARKS",
    "AcquireLeaseParams",
    "ActivityBucket",
    "Backend",
    "BackendCapabilities",
    "CancelChannel",
    "CancelJobParams",
    "CancelOutcome",
    "CancelRequestsParams",
    "ClaimJobsParams",
    "CompleteJobsParams",
    "DeadLetterFilter",
    "DeadLetterJobParams",
    "DeadLetterPage",
    "DeadLetterPageParams",
    "DeadLetterReason",
    "DeadLetterRecord",
    "DeadLetterStats",
    "DeadLetterStatsParams",
    "DeadLetterStore",
    "DebouncedJobs",
    "DeleteDeadLettersParams",
    "DeleteJobParams",
    "DependencyPolicy",
    "DependencyStore",
    "DueSchedulesParams",
    "EnqueueJobsParams",
    "ExpireUnknownJobsParams",
    "FindStaleJobsParams",
    "FinishCancelParams",
    "FireScheduleParams",
    "GetDeadLetterParams",
    "GetJobLogsParams",
    "GetJobParams",
    "GetLeaseParams",
    "GetScheduleParams",
    "GroupLimit",
    "HeartbeatParams",
    "JobActivityParams",
    "JobCountsParams",
    "JobCursor",
    "JobLogStore",
    "JobPage",
    "JobPageParams",
    "JobProgressStore",
    "JobRecord",
    "JobResult",
    "JobStatus",
    "JobStepStore",
    "KeyRotationStore",
    "LeaseRecord",
    "LimitScope",
    "LimitStore",
    "ListSchedulesParams",
    "MarkStartedParams",
    "MigrationStep",
    "MissingBackendRoleError",
    "NackJobParams",
    "NewJob",
    "OperatorReads",
    "PauseQueueParams",
    "PausedQueue",
    "PrepareWorkerParams",
    "PruneDeadLettersParams",
    "PruneJobsParams",
    "PurgeDeadLetterParams",
    "QueueCounts",
    "QueuePauseStore",
    "QueueStats",
    "QueueStatsParams",
    "QueueStore",
    "RecoveryResult",
    "RegisterWorkerParams",
    "ReleaseLeaseParams",
    "RemoveScheduleParams",
    "ReplayDeadLetterParams",
    "RequestCancelParams",
    "Rescue",
    "RescueAction",
    "RescueJobsParams",
    "ResealRowParams",
    "ResumeQueueParams",
    "RetentionStore",
    "RetryJobParams",
    "Role",
    "SaveCheckpointParams",
    "SaveJobLogsParams",
    "SaveProgressParams",
    "SaveStepParams",
    "ScheduleRecord",
    "ScheduleStore",
    "SchemaAdmin",
    "SchemaFamily",
    "SchemaReport",
    "SchemaStatus",
    "SealedRow",
    "SealedRowPage",
    "SealedRowsParams",
    "SetSchedulePausedParams",
    "SetWorkerStatusParams",
    "SetupSchemaParams",
    "SnoozeJobParams",
    "StaleJobPolicy",
    "StaleScan",
    "UniqueWindow",
    "UniqueWindows",
    "UpsertScheduleParams",
    "VersionedJobs",
    "WaitForJobChangesParams",
    "WaitForJobsParams",
    "WatchJobsParams",
    "WorkerInfo",
    "WorkerRecord",
    "WorkerStatus",
    "activity",
    "activity_buckets",
    "backend_class_for",
    "check_backend",
    "check_group_limit",
    "cut",
    "dead_letter_cursor",
    "dead_letter_filter_matches",
    "dead_letter_matches",
    "declared_roles",
    "decode_args",
    "decode_json",
    "has_role",
    "holds_sealed",
    "installed_schemes",
    "job_cursor",
    "job_matches",
    "join_problems",
    "lost_worker_error",
    "parse_sealed_cursor",
    "redact_text",
    "redact_url",
    "register_backend",
    "require_role",
    "sealed_cursor",
    "sweep_stale_workers",
    "unique_key",
]
