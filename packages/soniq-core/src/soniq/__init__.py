"""Soniq: background jobs whose queue lives in the database you already have."""

from __future__ import annotations

from typing import TYPE_CHECKING

# First, before anything else of the package loads: a 0.1.0 leftover would break those imports.
from soniq import _install_check as _install_check
from soniq.app import Soniq
from soniq.backend import Backend, BackendCapabilities
from soniq.context import JobContext
from soniq.dead_letter import DeadLetterFilter, DeadLetterNotFoundError
from soniq.dependencies import JobCall
from soniq.errors import (
    BackendLoadError,
    BackendNotFoundError,
    BackendProtocolError,
    BackendUnavailableError,
    DependencyCycleError,
    InvalidLimitError,
    InvalidStepNameError,
    InvalidURLError,
    JobArgumentsError,
    JobCancelledError,
    JobFailedError,
    JobNotFoundError,
    JobOwnershipLostError,
    JobStepError,
    JobUpgradeError,
    NoUpgradePathError,
    Permanent,
    ProgressValueError,
    SettingsError,
    Snooze,
    SoniqError,
    StepValueError,
    StepValueTooLargeError,
    UnknownDependencyError,
    UnknownJobError,
    UpgradeFailedError,
)
from soniq.metrics import InMemoryMetricsSink, MetricsSink, NullMetricsSink
from soniq.observers import BaseObserver, Observer
from soniq.outcomes import HandlerKind, JobOutcome
from soniq.params import GroupLimit, LimitScope
from soniq.records import (
    CancelOutcome,
    DependencyPolicy,
    JobStatus,
    MigrationStep,
    SchemaStatus,
    StaleJobPolicy,
    WorkerStatus,
)
from soniq.retry import AppRetryPolicy
from soniq.routing import TaskRef, task_ref
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

if TYPE_CHECKING:
    import argparse

__version__ = "0.2.0"


def app_for_command(args: argparse.Namespace, command: str, *, need_jobs: bool = False) -> Soniq:
    """For a `soniq.commands` plugin: the app its command works on, found as every `soniq` command
    finds it (see `soniq.cli.common.app_for_command`); the CLI is imported only when called."""
    from soniq.cli.common import app_for_command as find

    return find(args, command, need_jobs=need_jobs)


__all__ = [
    "AppRetryPolicy",
    "Backend",
    "BackendCapabilities",
    "BackendLoadError",
    "BackendNotFoundError",
    "BackendProtocolError",
    "BackendUnavailableError",
    "BaseObserver",
    "CancelOutcome",
    "CatchUp",
    "DeadLetterFilter",
    "DeadLetterNotFoundError",
    "DependencyCycleError",
    "DependencyPolicy",
    "GroupLimit",
    "HandlerKind",
    "InMemoryMetricsSink",
    "InvalidLimitError",
    "InvalidStepNameError",
    "InvalidURLError",
    "JobArgumentsError",
    "JobCall",
    "JobCancelledError",
    "JobContext",
    "JobFailedError",
    "JobNotFoundError",
    "JobOptionsError",
    "JobOutcome",
    "JobOwnershipLostError",
    "JobStatus",
    "JobStepError",
    "JobUpgradeError",
    "LimitScope",
    "ManualClock",
    "MetricsSink",
    "MigrationStep",
    "NoUpgradePathError",
    "NullMetricsSink",
    "Observer",
    "Permanent",
    "ProgressValueError",
    "ScheduleError",
    "ScheduleTypeError",
    "SchemaStatus",
    "Settings",
    "SettingsError",
    "Snooze",
    "Soniq",
    "SoniqError",
    "StaleJobPolicy",
    "StepValueError",
    "StepValueTooLargeError",
    "TaskRef",
    "UnknownDependencyError",
    "UnknownJobError",
    "UpgradeFailedError",
    "WorkerState",
    "WorkerStatus",
    "WorkerSummary",
    "__version__",
    "app_for_command",
    "cron",
    "daily",
    "every",
    "monthly",
    "task_ref",
    "weekly",
]
