"""One span per schedule firing: `soniq.schedule.fire`, with the schedule's name and the due time."""

from __future__ import annotations

from opentelemetry.trace import SpanKind, Tracer

from soniq.observers import ScheduleFiredEvent
from soniq_otel import attributes as a


def _nanos(seconds: float) -> int:
    return int(seconds * 1_000_000_000)


class ScheduleTracing:
    def __init__(self, tracer: Tracer) -> None:
        self._tracer = tracer

    def fired(self, event: ScheduleFiredEvent) -> None:
        """The span covers the lateness: from the due time to the enqueue that fired it."""
        end = _nanos(event.at)
        start = min(end, _nanos(event.due_at.timestamp()))
        span = self._tracer.start_span(
            a.SPAN_SCHEDULE_FIRE,
            kind=SpanKind.PRODUCER,
            start_time=start,
            attributes={
                a.MESSAGING_SYSTEM: a.MESSAGING_SYSTEM_SONIQ,
                a.MESSAGING_DESTINATION_NAME: event.queue,
                a.MESSAGING_MESSAGE_ID: event.job_id,
                a.JOB_NAME: event.job_name,
                a.SCHEDULE_NAME: event.schedule_name,
                a.SCHEDULE_DUE_AT: event.due_at.isoformat(),
                a.SCHEDULE_LATE_SECONDS: event.late_seconds,
                a.SCHEDULE_CATCH_UP: event.catch_up,
                **({a.SCHEDULE_SCHEDULER_ID: event.scheduler_id} if event.scheduler_id else {}),
            },
        )
        span.end(end_time=end)
