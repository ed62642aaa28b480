"""The features that need an optional backend role, in the words `MissingBackendRoleError` uses.

Core checks a role where a feature first needs it (`soniq.backend.require_role`), so a backend
that fills only `QueueStore` runs workers and refuses each of these with an error naming the
feature, the role and the backend. The texts are plain so that they read well in that message:
``"listing jobs needs the backend role OperatorReads, which ... does not fill"``.
"""

from __future__ import annotations

from typing import Any

from soniq.backend import (
    CancelChannel,
    DeadLetterStore,
    DependencyStore,
    JobLogStore,
    LimitStore,
    OperatorReads,
    RetentionStore,
    ScheduleStore,
    SchemaAdmin,
    require_role,
)

DEAD_LETTER_API = "the dead-letter API"
"""`app.dead_letter` and ``soniq dead-letter``: DeadLetterStore."""
LISTING_JOBS = "listing jobs"
"""`app.list_jobs`: OperatorReads."""
JOB_COUNTS = "job counts per queue"
"""Per-queue counts (``soniq inspect``-style reads): OperatorReads."""
LIMIT_USAGE = "reading fleet-wide limit usage"
"""What runs now in each limited group (`soniq.limits.limit_usage`): OperatorReads."""
SCHEDULES = "schedules"
"""`app.scheduler`, ``soniq scheduler`` and `@app.periodic` schedules: ScheduleStore."""
CANCEL_RUNNING = "cancelling a running job"
"""A cancel that reaches a job's worker while it runs: CancelChannel."""
JOB_DEPENDENCIES = "job dependencies"
"""`depends_on` and `app.chain`: DependencyStore."""
FLEET_LIMITS = "fleet-wide limits"
"""`max_concurrent`, `rate_limit` and `queue_limits` (enqueue with a limit key, or a worker): LimitStore."""
SCHEMA_MIGRATIONS = "schema migrations"
"""`app.setup_schema`, `app.schema_status` and ``soniq migrate-status``: SchemaAdmin."""
PRUNING = "pruning finished rows"
"""The leader's deletion of rows past their retention: RetentionStore (skipped, never refused, without it)."""
JOB_LOGS = "job logs (app.get_job_logs)"
"""`app.get_job_logs` and the dashboard's log panel: JobLogStore."""
DASHBOARD = "the dashboard"
"""soniq-dashboard's pages: OperatorReads and DeadLetterStore."""


# `require_role(backend, SomeRole, ...)` with a role protocol in the call trips mypy's `type-abstract`
# check (a protocol class is abstract), so core goes through these typed accessors instead.


def _required(backend: object, protocol: type[Any], feature: str) -> Any:
    return require_role(backend, protocol, feature)


def dead_letter_store(backend: object, feature: str = DEAD_LETTER_API) -> DeadLetterStore:
    """`backend` as a `DeadLetterStore`, or `MissingBackendRoleError` naming `feature`."""
    store: DeadLetterStore = _required(backend, DeadLetterStore, feature)
    return store


def operator_reads(backend: object, feature: str) -> OperatorReads:
    """`backend` as `OperatorReads`, or `MissingBackendRoleError` naming `feature`."""
    reads: OperatorReads = _required(backend, OperatorReads, feature)
    return reads


def schedule_store(backend: object, feature: str = SCHEDULES) -> ScheduleStore:
    """`backend` as a `ScheduleStore`, or `MissingBackendRoleError` naming `feature`."""
    store: ScheduleStore = _required(backend, ScheduleStore, feature)
    return store


def schema_admin(backend: object, feature: str = SCHEMA_MIGRATIONS) -> SchemaAdmin:
    """`backend` as `SchemaAdmin`, or `MissingBackendRoleError` naming `feature`."""
    admin: SchemaAdmin = _required(backend, SchemaAdmin, feature)
    return admin


def cancel_channel(backend: object, feature: str = CANCEL_RUNNING) -> CancelChannel:
    """`backend` as a `CancelChannel`, or `MissingBackendRoleError` naming `feature`."""
    channel: CancelChannel = _required(backend, CancelChannel, feature)
    return channel


def retention_store(backend: object, feature: str = PRUNING) -> RetentionStore:
    """`backend` as a `RetentionStore`, or `MissingBackendRoleError` naming `feature`."""
    store: RetentionStore = _required(backend, RetentionStore, feature)
    return store


def require_limits(backend: object) -> None:
    """`MissingBackendRoleError` ("fleet-wide limits") unless the backend fills `LimitStore`."""
    _required(backend, LimitStore, FLEET_LIMITS)


def require_dependencies(backend: object) -> None:
    """`MissingBackendRoleError` ("job dependencies") unless the backend fills `DependencyStore`."""
    _required(backend, DependencyStore, JOB_DEPENDENCIES)


__all__ = [
    "CANCEL_RUNNING",
    "DASHBOARD",
    "DEAD_LETTER_API",
    "FLEET_LIMITS",
    "JOB_COUNTS",
    "JOB_DEPENDENCIES",
    "LIMIT_USAGE",
    "LISTING_JOBS",
    "PRUNING",
    "SCHEDULES",
    "SCHEMA_MIGRATIONS",
    "cancel_channel",
    "dead_letter_store",
    "operator_reads",
    "require_dependencies",
    "require_limits",
    "retention_store",
    "schedule_store",
    "schema_admin",
]


def job_log_store(backend: object, feature: str = JOB_LOGS) -> JobLogStore:
    """`backend` as a `JobLogStore`, or `MissingBackendRoleError` naming `feature`."""
    store: JobLogStore = _required(backend, JobLogStore, feature)
    return store
