"""The observer protocol: every worker start, transition, nack, job start/end and recovery.

Observers are found in the ``soniq.observers`` entry-point group (the entry is
a factory called with the app's `Settings`) or added with `Soniq.add_observer`.
Hooks run on the worker's event loop, inside the job's task for job hooks, so
an observer may set context variables in `on_job_start` that the handler sees
and reset them in `on_job_end`. A hook that raises is logged and ignored.
Every event is a frozen dataclass; docs/observability.md tables them. An
observer implements only the hooks it wants (subclass `BaseObserver`): the
app's `soniq.bus.ObservationBus` never calls, or builds events for, a hook
nobody implements.

This module is the SDK for observers and operator tools (soniq-otel, soniq-prometheus, the
dashboard): beside the events it exports the vocabulary they report (`WorkerState`,
`JobOutcome`, `HandlerKind`) and the helpers that keep secrets and control characters out of
what they show (`redact_text`, `redact_url`, `redact_data`, `is_secret_key`, `printable`),
and `describe_limit` for a fleet-wide limit in one line.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from soniq.limits import describe as describe_limit
from soniq.log_escape import escape_line as printable
from soniq.outcomes import HandlerKind, JobOutcome
from soniq.params import Rescue
from soniq.records import JobRecord, JobStatus, RecoveryResult
from soniq.redaction import is_secret_key, redact_data, redact_text, redact_url
from soniq.worker.state import WorkerState

if TYPE_CHECKING:
    from soniq.backend import QueueStore
    from soniq.registry import JobRegistry
    from soniq.settings import Settings


@dataclass(frozen=True, slots=True)
class ShutdownInfo:
    """What was in force when a shutdown began."""

    trigger: str
    """The signal name (``SIGTERM``, ``SIGINT``) or ``run_once`` / ``stop``."""
    signal_at: float
    """`time.time()` when the stop was requested (the RUNNING -> DRAINING span starts here)."""
    worker_id: str
    shutdown_timeout: float
    sync_handler_grace_seconds: float
    job_timeout: float | None
    prefetch_release_timeout: float
    in_flight_async: int
    in_flight_sync: int
    prefetched: int


@dataclass(frozen=True, slots=True)
class TransitionEvent:
    worker_id: str
    from_state: WorkerState
    to_state: WorkerState
    at: float
    """`time.time()` of the transition."""
    shutdown: ShutdownInfo | None = None
    reason: str = ""
    nacked_job_ids: tuple[str, ...] = ()
    """On the transition out of FORCE_TIMEOUT_PATH, and at STOPPED: every job nack'd so far."""
    waiting_threads: tuple[str, ...] = ()
    """Entering WAIT_FOR_THREAD: the ids of the jobs whose sync threads are awaited."""


@dataclass(frozen=True, slots=True)
class NackEvent:
    worker_id: str
    job_id: str
    job_name: str
    queue: str
    reason: str
    """``shutdown_timeout`` or ``prefetch_release``."""
    written: bool
    """False when the store could not be reached or the row was no longer ours."""
    at: float
    """`time.time()` when the write returned (or failed)."""
    error: str | None = None
    started_at: float | None = None
    """`time.time()` just before the nack was sent."""
    attempts: int = 0
    """The row's `attempts`, which the nack leaves as they are."""


@dataclass(frozen=True, slots=True)
class ShutdownNotice:
    """A moment inside a state that is not a transition (e.g. the sync grace expiring)."""

    worker_id: str
    state: WorkerState
    name: str
    at: float
    fields: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class JobStartEvent:
    worker_id: str
    job: JobRecord
    handler_kind: HandlerKind
    attempt: int
    """1-based number of this run among the runs that count."""


@dataclass(frozen=True, slots=True)
class JobEndEvent:
    worker_id: str
    job: JobRecord
    handler_kind: HandlerKind
    attempt: int
    outcome: JobOutcome
    duration: float
    error: BaseException | None = None
    error_text: str | None = None
    reason: str | None = None
    """Why, for the outcomes that have one: the `DeadLetterReason` value of a
    ``dead_letter`` (``max_attempts``, ``unknown_job``), ``error`` or ``timeout``
    for a retry, the nack reason of ``nacked``, ``cancel_requested`` for ``cancelled``; None otherwise."""


# -- cheap construction of the two per-job events ---------------------------------------------
# A frozen dataclass's __init__ sets each field through object.__setattr__, which made building
# a JobEndEvent cost five times a plain slotted class. These build the same frozen events from a
# mutable twin with the identical slot layout, then give the object its real class; what an
# observer receives is an ordinary JobStartEvent/JobEndEvent (equal, hashable, frozen). A field
# added to either event needs a parameter of its builder (a test compares them).


class _JobStartEventTwin:
    __slots__ = tuple(f.name for f in fields(JobStartEvent))


class _JobEndEventTwin:
    __slots__ = tuple(f.name for f in fields(JobEndEvent))


def job_start_event(worker_id: str, job: JobRecord, handler_kind: HandlerKind, attempt: int) -> JobStartEvent:
    """`JobStartEvent(...)` for the worker's hot path, without the frozen __init__'s cost."""
    event: Any = _JobStartEventTwin()
    event.worker_id = worker_id
    event.job = job
    event.handler_kind = handler_kind
    event.attempt = attempt
    event.__class__ = JobStartEvent
    return event  # type: ignore[no-any-return]


def nack_event(
    worker_id: str, job: JobRecord, *, reason: str, written: bool, error: str | None, started_at: float
) -> NackEvent:
    """The `NackEvent` for a nack of `job` sent at `started_at` that has just returned (or failed)."""
    return NackEvent(
        worker_id=worker_id,
        job_id=job.id,
        job_name=job.job_name,
        queue=job.queue,
        reason=reason,
        written=written,
        at=time.time(),
        error=error,
        started_at=started_at,
        attempts=job.attempts,
    )


def job_end_event(
    worker_id: str,
    job: JobRecord,
    handler_kind: HandlerKind,
    attempt: int,
    outcome: JobOutcome,
    duration: float,
    error: BaseException | None = None,
    error_text: str | None = None,
    reason: str | None = None,
) -> JobEndEvent:
    """`JobEndEvent(...)` for the worker's hot path, without the frozen __init__'s cost."""
    event: Any = _JobEndEventTwin()
    event.worker_id = worker_id
    event.job = job
    event.handler_kind = handler_kind
    event.attempt = attempt
    event.outcome = outcome
    event.duration = duration
    event.error = error
    event.error_text = error_text
    event.reason = reason
    event.__class__ = JobEndEvent
    return event  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class RecoveryEvent:
    """A stale-worker sweep of this process that wrote something."""

    result: RecoveryResult
    rescues: tuple[Rescue, ...]
    """Core's decision for every row the store actually rescued (action, attempts, reason)."""
    at: float
    """`time.time()` when the sweep returned."""
    worker_id: str | None = None
    """The worker whose sweep loop ran it; None for `app.recover()` and ``soniq recover``."""


@dataclass(frozen=True, slots=True)
class ScheduleFiredEvent:
    """A periodic schedule's due time was enqueued (by this process; each due time is enqueued once fleet-wide)."""

    schedule_name: str
    job_name: str
    queue: str
    due_at: datetime
    """The due time that fired (aware, UTC), not the moment the scheduler noticed it."""
    job_id: str
    at: float
    """`time.time()` when the enqueue returned."""
    late_seconds: float = 0.0
    """How long after `due_at` the job was enqueued."""
    catch_up: bool = False
    """Enqueued by the catch-up policy for a due time missed during downtime."""
    scheduler_id: str | None = None
    """The worker or `soniq scheduler` process that fired it."""


class AppReads(Protocol):
    """What an exporter reads of an app: its registered jobs and, through the read API, its store."""

    @property
    def registry(self) -> JobRegistry: ...

    async def connected_backend(self) -> QueueStore: ...

    async def get_queue_stats(self, queue: str | None = None) -> dict[str, int]: ...

    async def list_jobs(
        self,
        queue: str | None = None,
        status: str | JobStatus | None = None,
        limit: int = 100,
        offset: int = 0,
        *,
        include_results: bool = False,
    ) -> list[dict[str, Any]]: ...


@dataclass(frozen=True, slots=True)
class WorkerStartedEvent:
    """The worker registered and is about to claim. `settings` are its app's (an exporter's port, for
    one); `reads` is the app's read API, through which an exporter reads the queues."""

    worker_id: str
    settings: Settings
    reads: AppReads
    queues: tuple[str, ...] | None
    concurrency: int
    at: float


@dataclass(frozen=True, slots=True)
class JobProgressEvent:
    """A running job's progress was stored (`ctx.progress`; coalesced, so at most a few a second per job)."""

    worker_id: str
    job_id: str
    job_name: str
    queue: str
    progress: Mapping[str, Any]
    """``{"done", "total", "message", "updated_at"}`` as stored (``updated_at`` ISO 8601 text)."""


@dataclass(frozen=True, slots=True)
class EnqueueEvent:
    job_id: str
    job_name: str
    queue: str


@runtime_checkable
class Observer(Protocol):
    def on_transition(self, event: TransitionEvent) -> None: ...

    def on_shutdown_notice(self, event: ShutdownNotice) -> None: ...

    def on_nack(self, event: NackEvent) -> None: ...

    def on_job_start(self, event: JobStartEvent) -> None: ...

    def on_job_end(self, event: JobEndEvent) -> None: ...

    def on_enqueue(self, event: EnqueueEvent) -> Mapping[str, str] | None:
        """Called before the insert; returned entries are stored in the row's
        `trace_context` and handed back at processing."""

    def on_enqueue_end(self, event: EnqueueEvent, error: BaseException | None) -> None: ...

    def on_recovery(self, event: RecoveryEvent) -> None: ...

    def on_schedule_fired(self, event: ScheduleFiredEvent) -> None: ...

    def on_job_progress(self, event: JobProgressEvent) -> None: ...

    def on_worker_started(self, event: WorkerStartedEvent) -> None: ...

    def on_worker_stopped(self, worker_id: str) -> None:
        """Last call before the worker returns: flush anything buffered."""


class BaseObserver:
    """No-op implementations of every hook; subclass and override what you need."""

    def on_transition(self, event: TransitionEvent) -> None:
        return None

    def on_shutdown_notice(self, event: ShutdownNotice) -> None:
        return None

    def on_nack(self, event: NackEvent) -> None:
        return None

    def on_job_start(self, event: JobStartEvent) -> None:
        return None

    def on_job_end(self, event: JobEndEvent) -> None:
        return None

    def on_enqueue(self, event: EnqueueEvent) -> Mapping[str, str] | None:
        return None

    def on_enqueue_end(self, event: EnqueueEvent, error: BaseException | None) -> None:
        return None

    def on_recovery(self, event: RecoveryEvent) -> None:
        return None

    def on_schedule_fired(self, event: ScheduleFiredEvent) -> None:
        return None

    def on_job_progress(self, event: JobProgressEvent) -> None:
        return None

    def on_worker_started(self, event: WorkerStartedEvent) -> None:
        return None

    def on_worker_stopped(self, worker_id: str) -> None:
        return None


class RecordingObserver(BaseObserver):
    """Keeps every event in order, for tests."""

    def __init__(self) -> None:
        self.events: list[object] = []

    def on_transition(self, event: TransitionEvent) -> None:
        self.events.append(event)

    def on_shutdown_notice(self, event: ShutdownNotice) -> None:
        self.events.append(event)

    def on_nack(self, event: NackEvent) -> None:
        self.events.append(event)

    def on_job_start(self, event: JobStartEvent) -> None:
        self.events.append(event)

    def on_job_end(self, event: JobEndEvent) -> None:
        self.events.append(event)

    def on_recovery(self, event: RecoveryEvent) -> None:
        self.events.append(event)

    def on_schedule_fired(self, event: ScheduleFiredEvent) -> None:
        self.events.append(event)

    def on_job_progress(self, event: JobProgressEvent) -> None:
        self.events.append(event)

    @property
    def transitions(self) -> list[TransitionEvent]:
        return [e for e in self.events if isinstance(e, TransitionEvent)]

    @property
    def nacks(self) -> list[NackEvent]:
        return [e for e in self.events if isinstance(e, NackEvent)]

    @property
    def job_ends(self) -> list[JobEndEvent]:
        return [e for e in self.events if isinstance(e, JobEndEvent)]

    @property
    def recoveries(self) -> list[RecoveryEvent]:
        return [e for e in self.events if isinstance(e, RecoveryEvent)]


__all__ = [
    "AppReads",
    "BaseObserver",
    "EnqueueEvent",
    "HandlerKind",
    "JobEndEvent",
    "JobOutcome",
    "JobProgressEvent",
    "JobRecord",
    "JobStartEvent",
    "JobStatus",
    "NackEvent",
    "Observer",
    "RecordingObserver",
    "RecoveryEvent",
    "RecoveryResult",
    "Rescue",
    "ScheduleFiredEvent",
    "ShutdownInfo",
    "ShutdownNotice",
    "TransitionEvent",
    "WorkerStartedEvent",
    "WorkerState",
    "describe_limit",
    "is_secret_key",
    "job_end_event",
    "job_start_event",
    "nack_event",
    "printable",
    "redact_data",
    "redact_text",
    "redact_url",
]
