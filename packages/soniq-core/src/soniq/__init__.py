"""Soniq: background jobs whose queue lives in the database you already have."""

from __future__ import annotations

# First, before anything else of the package loads: a 0.1.0 leftover would break those imports.
from soniq import _install_check as _install_check
from soniq.app import Soniq
from soniq.backend import Backend, BackendCapabilities
from soniq.context import JobContext  # compat-jobs (issue 12)
from soniq.dead_letter import DeadLetterNotFoundError
from soniq.dependencies import JobCall  # issue 19
from soniq.errors import (
    BackendLoadError,
    BackendNotFoundError,
    BackendProtocolError,
    BackendUnavailableError,
    DependencyCycleError,  # issue 19
    InvalidLimitError,
    InvalidURLError,
    JobArgumentsError,
    JobCancelledError,
    JobFailedError,
    JobNotFoundError,
    Permanent,
    SettingsError,
    Snooze,
    SoniqError,
    UnknownDependencyError,
    UnknownJobError,
)
from soniq.metrics import InMemoryMetricsSink, MetricsSink, NullMetricsSink
from soniq.observers import BaseObserver, Observer
from soniq.outcomes import HandlerKind, JobOutcome
from soniq.params import GroupLimit, LimitScope  # issue 19
from soniq.records import (
    CancelOutcome,  # issue 19
    DependencyPolicy,  # issue 19
    JobStatus,
    MigrationStep,  # compat-surface
    SchemaStatus,  # compat-surface
    StaleJobPolicy,
    WorkerStatus,
)
from soniq.retry import AppRetryPolicy  # compat-jobs (issue 12)
from soniq.routing import TaskRef, task_ref  # compat-surface
from soniq.scheduling import (
    CatchUp,
    ManualClock,
    ScheduleError,
    ScheduleTypeError,  # also a TypeError, as in soniq 0.1.0
    cron,
    daily,
    every,
    monthly,
    weekly,
)
from soniq.settings import Settings
from soniq.validation import JobOptionsError
from soniq.worker.state import WorkerState
from soniq.worker.summary import WorkerSummary

__version__ = "0.2.0"

__all__ = [
    "AppRetryPolicy",  # compat-jobs (issue 12)
    "Backend",
    "BackendCapabilities",
    "BackendLoadError",
    "BackendNotFoundError",
    "BackendProtocolError",
    "BackendUnavailableError",
    "BaseObserver",
    "CancelOutcome",  # issue 19
    "CatchUp",
    "DeadLetterNotFoundError",
    "DependencyCycleError",  # issue 19
    "DependencyPolicy",  # issue 19
    "GroupLimit",  # issue 19
    "HandlerKind",
    "InMemoryMetricsSink",
    "InvalidLimitError",  # issue 19
    "InvalidURLError",
    "JobArgumentsError",
    "JobCall",  # issue 19
    "JobCancelledError",  # issue 19
    "JobContext",  # compat-jobs (issue 12)
    "JobFailedError",  # issue 19
    "JobNotFoundError",  # issue 19
    "JobOptionsError",
    "JobOutcome",
    "JobStatus",
    "LimitScope",  # issue 19
    "ManualClock",
    "MetricsSink",
    "MigrationStep",  # compat-surface
    "NullMetricsSink",
    "Observer",
    "Permanent",
    "ScheduleError",
    "ScheduleTypeError",
    "SchemaStatus",  # compat-surface
    "Settings",
    "SettingsError",
    "Snooze",
    "Soniq",
    "SoniqError",
    "StaleJobPolicy",
    "TaskRef",  # compat-surface
    "UnknownDependencyError",  # issue 19
    "UnknownJobError",
    "WorkerState",
    "WorkerStatus",
    "WorkerSummary",
    "__version__",
    "cron",
    "daily",
    "every",
    "monthly",
    "task_ref",  # compat-surface
    "weekly",
]
