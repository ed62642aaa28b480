"""A schedule firing is one `soniq.schedule.fire` span with the schedule's name and the due time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from opentelemetry.trace import SpanKind
from otel_testing import Tracing

from soniq import ManualClock, Soniq
from soniq.scheduling.runner import ScheduleRunner
from soniq_otel import attributes as a

pytestmark = pytest.mark.asyncio


async def test_each_firing_is_a_span_from_due_time_to_enqueue(tracing: Tracing, app: Soniq) -> None:
    @app.job(queue="reports")
    async def nightly() -> None:
        return None

    # The manual clock sits a little after the due time, so the span also measures the lateness.
    due = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=30)
    clock = ManualClock(due - timedelta(seconds=60))
    app.scheduler.clock = clock
    name = await app.scheduler.add(nightly, every=60, name="nightly-report")
    clock.set(due + timedelta(seconds=2))
    await ScheduleRunner(app, scheduler_id="sched-1", clock=clock).tick()

    span = tracing.one(a.SPAN_SCHEDULE_FIRE)
    assert span.kind is SpanKind.PRODUCER
    attributes = dict(span.attributes or {})
    stored = await app.scheduler.get(name)
    assert stored is not None
    assert attributes[a.SCHEDULE_NAME] == "nightly-report"
    assert attributes[a.SCHEDULE_DUE_AT] == due.isoformat()
    assert attributes[a.MESSAGING_MESSAGE_ID] == stored["last_job_id"]
    assert attributes[a.MESSAGING_DESTINATION_NAME] == "reports"
    assert attributes[a.SCHEDULE_SCHEDULER_ID] == "sched-1"
    assert attributes[a.SCHEDULE_LATE_SECONDS] == pytest.approx(2.0)
    assert span.start_time == int(due.timestamp() * 1e9)
    assert span.end_time is not None
    assert span.end_time >= span.start_time
