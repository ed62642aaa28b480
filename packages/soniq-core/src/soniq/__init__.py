"""Soniq: background jobs whose queue lives in the database you already have."""

from __future__ import annotations

# First, before anything else of the package loads: a 0.1.0 leftover would break those imports.
from soniq import _install_check as _install_check
from soniq.app import Soniq
from soniq.backend import BACKEND_PROTOCOL_VERSION, Backend, BackendCapabilities
from soniq.context import JobContext  # compat-jobs (issue 12)
from soniq.dead_letter import DeadLetterNotFoundError
from soniq.errors import (
    BackendLoadError,
    BackendNotFoundError,
    BackendProtocolError,
    BackendUnavailableError,
    InvalidURLError,
    JobArgumentsError,
    Permanent,
    SettingsError,
    Snooze,
    SoniqError,
    UnknownJobError,
)
from soniq.metrics import InMemoryMetricsSink, MetricsSink, NullMetricsSink
from soniq.observers import BaseObserver, Observer
from soniq.outcomes import HandlerKind, JobOutcome
from soniq.records import JobStatus, StaleJobPolicy, WorkerStatus
from soniq.retry import AppRetryPolicy  # compat-jobs (issue 12)
from soniq.settings import Settings
from soniq.validation import JobOptionsError
from soniq.worker.state import WorkerState
from soniq.worker.summary import WorkerSummary

__version__ = "0.2.0"

__all__ = [
    "BACKEND_PROTOCOL_VERSION",
    "AppRetryPolicy",  # compat-jobs (issue 12)
    "Backend",
    "BackendCapabilities",
    "BackendLoadError",
    "BackendNotFoundError",
    "BackendProtocolError",
    "BackendUnavailableError",
    "BaseObserver",
    "DeadLetterNotFoundError",
    "HandlerKind",
    "InMemoryMetricsSink",
    "InvalidURLError",
    "JobArgumentsError",
    "JobContext",  # compat-jobs (issue 12)
    "JobOptionsError",
    "JobOutcome",
    "JobStatus",
    "MetricsSink",
    "NullMetricsSink",
    "Observer",
    "Permanent",
    "Settings",
    "SettingsError",
    "Snooze",
    "Soniq",
    "SoniqError",
    "StaleJobPolicy",
    "UnknownJobError",
    "WorkerState",
    "WorkerStatus",
    "WorkerSummary",
    "__version__",
]
