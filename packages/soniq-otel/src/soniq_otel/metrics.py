"""OpenTelemetry metrics by the messaging semantic conventions, through the API only.

`messaging.client.sent.messages` counts enqueues, `messaging.client.consumed.messages`
counts rows handed to a handler, and `messaging.process.duration` times each run, with
`error.type` on runs that failed. Soniq's own series (nacks, shutdown outcomes, schedule
firings and their lateness) sit beside them under ``soniq.``. Attributes are a queue, a
job name, a schedule, an outcome or reason, never a job id, so the number of streams stays
bounded. Without an SDK meter provider every instrument is a no-op.
"""

from __future__ import annotations

from typing import Final

from opentelemetry import metrics
from opentelemetry.metrics import MeterProvider
from opentelemetry.util.types import Attributes

from soniq.observers import (
    EnqueueEvent,
    JobEndEvent,
    JobStartEvent,
    NackEvent,
    ScheduleFiredEvent,
    TransitionEvent,
)
from soniq_otel import attributes as a

METRIC_SENT_MESSAGES: Final = "messaging.client.sent.messages"
METRIC_CONSUMED_MESSAGES: Final = "messaging.client.consumed.messages"
METRIC_PROCESS_DURATION: Final = "messaging.process.duration"
METRIC_NACKS: Final = "soniq.job.nacks"
METRIC_SHUTDOWNS: Final = "soniq.worker.shutdowns"
METRIC_SHUTDOWN_DURATION: Final = "soniq.worker.shutdown.duration"
METRIC_SCHEDULE_FIRINGS: Final = "soniq.schedule.firings"
METRIC_SCHEDULE_LATENESS: Final = "soniq.schedule.lateness"

SCHEDULE_NAME: Final = "soniq.schedule.name"
SCHEDULE_CATCH_UP: Final = "soniq.schedule.catch_up"

SHUTDOWN_OUTCOME: Final = "soniq.shutdown.outcome"
"""``drained``, ``forced`` or ``waited_for_threads``."""

# The conventions' advised boundaries for messaging durations.
PROCESS_DURATION_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)


def _error_type(error: BaseException | None, outcome: str) -> str:
    if error is None:
        return outcome
    cls = type(error)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


class JobMetrics:
    def __init__(self, meter_provider: MeterProvider | None = None, *, version: str = "0") -> None:
        meter = metrics.get_meter(
            a.INSTRUMENTATION_NAME, version, meter_provider=meter_provider, schema_url=a.SCHEMA_URL
        )
        self.sent = meter.create_counter(
            METRIC_SENT_MESSAGES, unit="{message}", description="Jobs the application attempted to enqueue."
        )
        self.consumed = meter.create_counter(
            METRIC_CONSUMED_MESSAGES, unit="{message}", description="Jobs delivered to a handler."
        )
        self.process_duration = meter.create_histogram(
            METRIC_PROCESS_DURATION,
            unit="s",
            description="Duration of a job run, from handler start to its outcome.",
            explicit_bucket_boundaries_advisory=list(PROCESS_DURATION_BUCKETS),
        )
        self.nacks = meter.create_counter(
            METRIC_NACKS, unit="{message}", description="Jobs handed back to queued on shutdown, by reason."
        )
        self.shutdowns = meter.create_counter(
            METRIC_SHUTDOWNS, unit="{shutdown}", description="Worker shutdowns that reached STOPPED, by outcome."
        )
        self.shutdown_duration = meter.create_histogram(
            METRIC_SHUTDOWN_DURATION, unit="s", description="Time from the stop request to STOPPED, by outcome."
        )
        self.schedule_firings = meter.create_counter(
            METRIC_SCHEDULE_FIRINGS,
            unit="{firing}",
            description="Due times of periodic schedules this process enqueued, on time or by catch-up.",
        )
        self.schedule_lateness = meter.create_histogram(
            METRIC_SCHEDULE_LATENESS, unit="s", description="How long after its due time a schedule's job was enqueued."
        )
        self._shutdown_states: dict[str, set[str]] = {}

    @staticmethod
    def _job(operation: str, queue: str, job_name: str) -> dict[str, str]:
        return {
            a.MESSAGING_SYSTEM: a.MESSAGING_SYSTEM_SONIQ,
            a.MESSAGING_OPERATION_NAME: operation,
            a.MESSAGING_DESTINATION_NAME: queue,
            a.JOB_NAME: job_name,
        }

    def sent_ended(self, event: EnqueueEvent, error: BaseException | None) -> None:
        attributes = self._job(a.OPERATION_SEND, event.queue, event.job_name)
        if error is not None:
            attributes[a.ERROR_TYPE] = _error_type(error, "error")
        self.sent.add(1, attributes)

    def process_started(self, event: JobStartEvent) -> None:
        self.consumed.add(1, self._job(a.OPERATION_PROCESS, event.job.queue, event.job.job_name))

    def process_ended(self, event: JobEndEvent) -> None:
        outcome = event.outcome.value
        attributes = self._job(a.OPERATION_PROCESS, event.job.queue, event.job.job_name)
        attributes[a.JOB_OUTCOME] = outcome
        if event.outcome.failed:
            attributes[a.ERROR_TYPE] = _error_type(event.error, outcome)
        self.process_duration.record(event.duration, attributes)

    def nacked(self, event: NackEvent) -> None:
        attributes: Attributes = {
            a.MESSAGING_SYSTEM: a.MESSAGING_SYSTEM_SONIQ,
            a.MESSAGING_DESTINATION_NAME: event.queue,
            a.JOB_NAME: event.job_name,
            a.NACK_REASON: event.reason,
            a.NACK_WRITTEN: event.written,
        }
        self.nacks.add(1, attributes)

    def schedule_fired(self, event: ScheduleFiredEvent) -> None:
        attributes: Attributes = {
            a.MESSAGING_SYSTEM: a.MESSAGING_SYSTEM_SONIQ,
            a.MESSAGING_DESTINATION_NAME: event.queue,
            a.JOB_NAME: event.job_name,
            SCHEDULE_NAME: event.schedule_name,
            SCHEDULE_CATCH_UP: event.catch_up,
        }
        self.schedule_firings.add(1, attributes)
        self.schedule_lateness.record(
            max(0.0, event.late_seconds), {SCHEDULE_NAME: event.schedule_name, SCHEDULE_CATCH_UP: event.catch_up}
        )

    def transition(self, event: TransitionEvent) -> None:
        to_state = event.to_state.value
        states = self._shutdown_states.setdefault(event.worker_id, set())
        states.add(to_state)
        if to_state != "STOPPED":
            return
        del self._shutdown_states[event.worker_id]
        if "WAIT_FOR_THREAD" in states:
            outcome = "waited_for_threads"
        elif "FORCE_TIMEOUT_PATH" in states:
            outcome = "forced"
        else:
            outcome = "drained"
        self.shutdowns.add(1, {SHUTDOWN_OUTCOME: outcome})
        if event.shutdown is not None:
            self.shutdown_duration.record(max(0.0, event.at - event.shutdown.signal_at), {SHUTDOWN_OUTCOME: outcome})
