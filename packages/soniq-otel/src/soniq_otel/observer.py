"""`SoniqTracingObserver`: the observer the ``otel`` entry point creates."""

from __future__ import annotations

import importlib.metadata
import logging
import time
from collections.abc import Mapping

from opentelemetry import trace
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import TracerProvider

from soniq import Settings
from soniq.observers import (
    BaseObserver,
    EnqueueEvent,
    JobEndEvent,
    JobStartEvent,
    NackEvent,
    ScheduleFiredEvent,
    ShutdownNotice,
    TransitionEvent,
)
from soniq_otel import attributes as a
from soniq_otel.job_spans import JobTracing
from soniq_otel.metrics import JobMetrics
from soniq_otel.schedule_spans import ScheduleTracing
from soniq_otel.shutdown_spans import ShutdownTracing

logger = logging.getLogger("soniq_otel")

FLUSH_TIMEOUT_MILLIS = 5_000
"""How long the flush at STOPPED may hold the worker's exit."""


def _version() -> str:
    try:
        return importlib.metadata.version("soniq-otel")
    except importlib.metadata.PackageNotFoundError:
        return "0"


class SoniqTracingObserver(BaseObserver):
    """Spans for every shutdown transition, nack, enqueue and job run, and the messaging metrics.

    With `tracer_provider=None` the global provider is used, looked up through
    the API's proxy, so a provider the jobs module installs after the app was
    built is still the one that records. Without any SDK the spans are no-ops.
    """

    def __init__(
        self, *, tracer_provider: TracerProvider | None = None, meter_provider: MeterProvider | None = None
    ) -> None:
        self._tracer_provider = tracer_provider
        tracer = trace.get_tracer(
            a.INSTRUMENTATION_NAME, _version(), tracer_provider=tracer_provider, schema_url=a.SCHEMA_URL
        )
        self.jobs = JobTracing(tracer)
        self.shutdown = ShutdownTracing(tracer)
        self.schedules = ScheduleTracing(tracer)
        self.metrics = JobMetrics(meter_provider, version=_version())

    def on_transition(self, event: TransitionEvent) -> None:
        self.shutdown.transition(event)
        self.metrics.transition(event)

    def on_shutdown_notice(self, event: ShutdownNotice) -> None:
        self.shutdown.notice(event)

    def on_nack(self, event: NackEvent) -> None:
        self.shutdown.nack(event, self.jobs.nack_links(event.job_id))
        self.metrics.nacked(event)

    def on_job_start(self, event: JobStartEvent) -> None:
        self.jobs.process_started(event)
        self.metrics.process_started(event)

    def on_job_end(self, event: JobEndEvent) -> None:
        self.jobs.process_ended(event)
        self.metrics.process_ended(event)

    def on_enqueue(self, event: EnqueueEvent) -> Mapping[str, str] | None:
        return self.jobs.send_started(event)

    def on_enqueue_end(self, event: EnqueueEvent, error: BaseException | None) -> None:
        self.jobs.send_ended(event, error)
        self.metrics.sent_ended(event, error)

    def on_schedule_fired(self, event: ScheduleFiredEvent) -> None:
        self.schedules.fired(event)
        self.metrics.schedule_fired(event)

    def on_worker_stopped(self, worker_id: str) -> None:
        self.jobs.abandon(worker_id)
        self.shutdown.abandon(worker_id, time.time())
        self.force_flush()

    def force_flush(self) -> bool:
        """Push every finished span out now, so a process that exits next loses none.

        The API's provider has no `force_flush`; an SDK provider (or any provider
        that has one) is flushed. Returns False when nothing could be flushed.
        """
        provider = self._tracer_provider or trace.get_tracer_provider()
        flush = getattr(provider, "force_flush", None)
        if not callable(flush):
            return False
        try:
            return bool(flush(timeout_millis=FLUSH_TIMEOUT_MILLIS))
        except TypeError:
            return bool(flush())
        except Exception:
            logger.exception("flushing the tracer provider failed")
            return False


def create_observer(
    settings: Settings | None = None,
    *,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
) -> SoniqTracingObserver:
    """The ``soniq.observers`` entry point: ``Soniq`` calls it with the app's settings."""
    return SoniqTracingObserver(tracer_provider=tracer_provider, meter_provider=meter_provider)
