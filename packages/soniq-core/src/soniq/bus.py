"""One observation bus per app: every event goes to the observers and the metrics sink once.

The bus looks up, when it is built, which listeners implement which hook
(an inherited `BaseObserver` no-op does not count), as trio's instruments
do; a hook nobody implements is an empty tuple, and callers skip building
its event altogether (`wants_job_events`). The metrics sink is one more
listener, through `MetricsAdapter`, so the worker reports each event once.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from soniq.metrics import MetricsSink, NullMetricsSink, safe_call
from soniq.observers import (
    BaseObserver,
    EnqueueEvent,
    JobEndEvent,
    JobProgressEvent,
    JobStartEvent,
    NackEvent,
    RecoveryEvent,
    ScheduleFiredEvent,
    ShutdownNotice,
    TransitionEvent,
    WorkerStartedEvent,
)

logger = logging.getLogger("soniq.metrics")
"""Where a failing hook is reported, as `soniq.metrics.safe_call` does."""

HOOKS = (
    "on_transition",
    "on_shutdown_notice",
    "on_nack",
    "on_job_start",
    "on_job_end",
    "on_enqueue",
    "on_enqueue_end",
    "on_recovery",
    "on_schedule_fired",
    "on_job_progress",
    "on_worker_started",
    "on_worker_stopped",
)


class MetricsAdapter(BaseObserver):
    """Turns bus events into the `MetricsSink` calls earlier releases made by hand."""

    def __init__(self, sink: MetricsSink) -> None:
        self.sink = sink

    def on_job_start(self, event: JobStartEvent) -> None:
        job = event.job
        self.sink.record_job_start(job_id=job.id, job_name=job.job_name, queue=job.queue)

    def on_job_end(self, event: JobEndEvent) -> None:
        job = event.job
        self.sink.record_job_end(
            job_id=job.id, job_name=job.job_name, queue=job.queue, outcome=event.outcome, duration=event.duration
        )

    def on_transition(self, event: TransitionEvent) -> None:
        self.sink.emit(
            "worker_transition",
            {
                "worker_id": event.worker_id,
                "from_state": event.from_state.value,
                "to_state": event.to_state.value,
                "reason": event.reason,
            },
        )

    def on_nack(self, event: NackEvent) -> None:
        self.sink.emit(
            "shutdown_nack",
            {
                "job_id": event.job_id,
                "job_name": event.job_name,
                "queue": event.queue,
                "worker_id": event.worker_id,
                "reason": event.reason,
                "attempts": event.attempts,
                "written": event.written,
                "error": event.error,
            },
        )

    def on_shutdown_notice(self, event: ShutdownNotice) -> None:
        self.sink.emit(event.name, {"worker_id": event.worker_id, **event.fields})

    def on_recovery(self, event: RecoveryEvent) -> None:
        self.sink.emit(
            "stale_recovery",
            {
                "worker_id": event.worker_id,
                "stale_workers": list(event.result.stale_workers),
                "requeued": list(event.result.requeued),
                "dead_lettered": list(event.result.dead_lettered),
                "actions": {r.job_id: r.action.value for r in event.rescues},
            },
        )

    def on_schedule_fired(self, event: ScheduleFiredEvent) -> None:
        self.sink.emit(
            "schedule_fired",
            {
                "schedule": event.schedule_name,
                "job_name": event.job_name,
                "queue": event.queue,
                "job_id": event.job_id,
                "due_at": event.due_at.isoformat(),
                "late_seconds": event.late_seconds,
                "catch_up": event.catch_up,
            },
        )


def _implements(listener: object, hook: str) -> bool:
    method = getattr(type(listener), hook, None)
    if method is None:
        # Duck-typed observers may carry hooks as instance attributes.
        return callable(getattr(listener, hook, None))
    return method is not getattr(BaseObserver, hook)


def _bound(listeners: tuple[object, ...], hook: str) -> tuple[tuple[object, Callable[..., Any]], ...]:
    return tuple((listener, getattr(listener, hook)) for listener in listeners)


def _log_failure(listener: object, hook: str) -> None:
    logger.exception("%s.%s raised; ignoring", type(listener).__name__, hook)


class ObservationBus:
    """Fans each event out to the listeners implementing its hook; a failing hook is logged and ignored."""

    def __init__(self, observers: Iterable[object], metrics: MetricsSink | None = None) -> None:
        listeners = list(observers)
        if metrics is not None and not isinstance(metrics, NullMetricsSink):
            listeners.append(MetricsAdapter(metrics))
        self._hooks: dict[str, tuple[object, ...]] = {
            hook: tuple(listener for listener in listeners if _implements(listener, hook)) for hook in HOOKS
        }
        self.wants_job_events = bool(self._hooks["on_job_start"] or self._hooks["on_job_end"])
        """Anyone listens to job starts or ends: only then does the hot path build their events."""
        self.wants_enqueue_events = bool(self._hooks["on_enqueue"] or self._hooks["on_enqueue_end"])
        # The two hooks called for every job are bound once, so their fan-out is a plain loop.
        self._job_start_calls = _bound(self._hooks["on_job_start"], "on_job_start")
        self._job_end_calls = _bound(self._hooks["on_job_end"], "on_job_end")
        # -- listeners that leave awaitables (async app hooks) --
        self.defers = any(getattr(listener, "defers_awaitables", False) for listener in listeners)
        """Some listener may `defer` coroutines: the worker then awaits `run_deferred` in the job's task."""

    def wants(self, hook: str) -> bool:
        return bool(self._hooks[hook])

    def _fan_out(self, hook: str, *args: Any) -> None:
        for listener in self._hooks[hook]:
            safe_call(listener, hook, *args)

    def transition(self, event: TransitionEvent) -> None:
        self._fan_out("on_transition", event)

    def shutdown_notice(self, event: ShutdownNotice) -> None:
        self._fan_out("on_shutdown_notice", event)

    def nack(self, event: NackEvent) -> None:
        self._fan_out("on_nack", event)

    def job_start(self, event: JobStartEvent) -> None:
        for listener, call in self._job_start_calls:
            try:
                call(event)
            except Exception:
                _log_failure(listener, "on_job_start")

    def job_end(self, event: JobEndEvent) -> None:
        for listener, call in self._job_end_calls:
            try:
                call(event)
            except Exception:
                _log_failure(listener, "on_job_end")

    def recovery(self, event: RecoveryEvent) -> None:
        self._fan_out("on_recovery", event)

    def schedule_fired(self, event: ScheduleFiredEvent) -> None:
        self._fan_out("on_schedule_fired", event)

    def job_progress(self, event: JobProgressEvent) -> None:
        self._fan_out("on_job_progress", event)

    def worker_started(self, event: WorkerStartedEvent) -> None:
        self._fan_out("on_worker_started", event)

    def worker_stopped(self, worker_id: str) -> None:
        self._fan_out("on_worker_stopped", worker_id)

    def enqueue(self, event: EnqueueEvent) -> dict[str, str]:
        """Every observer's trace headers for a job about to be inserted, merged."""
        headers: dict[str, str] = {}
        for listener in self._hooks["on_enqueue"]:
            returned: Mapping[str, str] | None = safe_call(listener, "on_enqueue", event)
            if returned:
                headers.update(returned)
        return headers

    def enqueue_end(self, event: EnqueueEvent, error: BaseException | None) -> None:
        self._fan_out("on_enqueue_end", event, error)


# -- awaiting what async listeners leave behind --

_deferred: contextvars.ContextVar[list[Awaitable[Any]] | None] = contextvars.ContextVar(
    "soniq_bus_deferred", default=None
)
_logger = logging.getLogger("soniq.bus")


def defer(awaitable: Awaitable[Any]) -> None:
    """From a listener (declaring ``defers_awaitables = True``): have the current job's task await
    `awaitable` at its next `run_deferred`, before the handler starts or after the run's end."""
    pending = _deferred.get()
    if pending is None:
        pending = []
        _deferred.set(pending)
    pending.append(awaitable)


async def run_deferred() -> None:
    """Await, in order, what listeners deferred in this task; a failure is logged and ignored."""
    pending = _deferred.get()
    while pending:
        awaitable = pending.pop(0)
        try:
            await awaitable
        except Exception:
            _logger.exception("a deferred listener call raised; ignoring")
