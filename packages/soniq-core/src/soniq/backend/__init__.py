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

`rules` holds the pure rules a backend applies rather than decides (the dependency cascade,
limit groups and windows), so that every backend writes the same values.

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
from soniq.backend.dependency_store import DependencyStore
from soniq.backend.limit_store import LimitStore
from soniq.backend.operator_reads import OperatorReads
from soniq.backend.queue_store import QueueStore
from soniq.backend.retention_store import RetentionStore
from soniq.backend.roles import ROLES, Role, check_backend, declared_roles, has_role, require_role
from soniq.backend.schedule_store import ScheduleStore
from soniq.backend.schema_admin import SchemaAdmin
from soniq.errors import MissingBackendRoleError
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
    Rescue,
    RescueAction,
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
    QueueCounts,
    QueueStats,
    RecoveryResult,
    ScheduleRecord,
    SchemaReport,
    SchemaStatus,
    StaleJobPolicy,
    StaleScan,
    WorkerInfo,
    WorkerRecord,
    WorkerStatus,
)


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
    Protocol,
):
    """A backend that fills every role this soniq-core knows, as the bundled ones do."""


__all__ = [
    "ROLES",
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
    "GetJobParams",
    "GetLeaseParams",
    "GetScheduleParams",
    "GroupLimit",
    "HeartbeatParams",
    "JobActivityParams",
    "JobCountsParams",
    "JobCursor",
    "JobPage",
    "JobPageParams",
    "JobRecord",
    "JobResult",
    "JobStatus",
    "LeaseRecord",
    "LimitScope",
    "LimitStore",
    "ListDeadLetterParams",
    "ListJobsParams",
    "ListSchedulesParams",
    "MarkStartedParams",
    "MigrationStep",
    "MissingBackendRoleError",
    "NackJobParams",
    "NewJob",
    "OperatorReads",
    "PrepareWorkerParams",
    "PruneDeadLettersParams",
    "PruneJobsParams",
    "PurgeDeadLetterParams",
    "QueueCounts",
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
    "RetentionStore",
    "RetryJobParams",
    "Role",
    "ScheduleRecord",
    "ScheduleStore",
    "SchemaAdmin",
    "SchemaReport",
    "SchemaStatus",
    "SetSchedulePausedParams",
    "SetWorkerStatusParams",
    "SetupSchemaParams",
    "SnoozeJobParams",
    "StaleJobPolicy",
    "StaleScan",
    "UpsertScheduleParams",
    "WaitForJobChangesParams",
    "WaitForJobsParams",
    "WatchJobsParams",
    "WorkerInfo",
    "WorkerRecord",
    "WorkerStatus",
    "check_backend",
    "declared_roles",
    "has_role",
    "require_role",
]
