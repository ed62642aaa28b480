"""OpenTelemetry messaging metrics, read back through the SDK's InMemoryMetricReader."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader, NumberDataPoint
from otel_testing import FAST_SETTINGS, RunningWorker, wait_until

from soniq import Soniq
from soniq.observers import ScheduleFiredEvent
from soniq_otel import SoniqTracingObserver
from soniq_otel import attributes as a
from soniq_otel import metrics as m

pytestmark = pytest.mark.asyncio


def points(reader: InMemoryMetricReader, name: str) -> list[Any]:
    data = reader.get_metrics_data()
    found: list[Any] = []
    for resource in data.resource_metrics if data is not None else ():
        for scope in resource.scope_metrics:
            assert scope.scope.name == a.INSTRUMENTATION_NAME
            for metric in scope.metrics:
                if metric.name == name:
                    found.extend(metric.data.data_points)
    return found


def by_attributes(found: list[Any], **wanted: Any) -> list[Any]:
    return [p for p in found if all(p.attributes.get(k) == v for k, v in wanted.items())]


async def test_messaging_metrics_for_a_worker_run_and_its_shutdown() -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    app = Soniq("memory://", extra_observers=[SoniqTracingObserver(meter_provider=provider)], **FAST_SETTINGS)

    @app.job(name="ok", queue="emails")
    async def ok(n: int) -> int:
        return n

    @app.job(name="bad", max_retries=0)
    async def bad() -> None:
        raise ValueError("no")

    @app.job(name="stuck")
    async def stuck() -> None:
        await asyncio.sleep(3600)

    for n in range(3):
        await app.enqueue(ok, n=n)
    await app.enqueue(bad)
    await app.enqueue(stuck)
    worker = RunningWorker(app)

    def settled() -> bool:
        ended = sum(p.count for p in points(reader, m.METRIC_PROCESS_DURATION))
        stuck_started = by_attributes(points(reader, m.METRIC_CONSUMED_MESSAGES), **{a.JOB_NAME: "stuck"})
        return ended == 4 and bool(stuck_started)

    await wait_until(settled)
    await worker.stop()
    await worker.summary()

    sent = points(reader, m.METRIC_SENT_MESSAGES)
    assert all(isinstance(p, NumberDataPoint) for p in sent)
    (sent_ok,) = by_attributes(sent, **{a.MESSAGING_DESTINATION_NAME: "emails", a.JOB_NAME: "ok"})
    assert sent_ok.value == 3
    assert sent_ok.attributes[a.MESSAGING_SYSTEM] == "soniq"
    assert sent_ok.attributes[a.MESSAGING_OPERATION_NAME] == "send"

    consumed = points(reader, m.METRIC_CONSUMED_MESSAGES)
    assert {(p.attributes[a.JOB_NAME], p.value) for p in consumed} == {("ok", 3), ("bad", 1), ("stuck", 1)}
    assert {p.attributes[a.MESSAGING_OPERATION_NAME] for p in consumed} == {"process"}

    durations = points(reader, m.METRIC_PROCESS_DURATION)
    assert all(isinstance(p, HistogramDataPoint) for p in durations)
    (done,) = by_attributes(durations, **{a.JOB_NAME: "ok"})
    assert (done.count, done.attributes[a.JOB_OUTCOME]) == (3, "done")
    assert a.ERROR_TYPE not in done.attributes
    assert list(done.explicit_bounds) == list(m.PROCESS_DURATION_BUCKETS)
    (failed,) = by_attributes(durations, **{a.JOB_NAME: "bad"})
    assert failed.attributes[a.ERROR_TYPE] == "ValueError"
    assert failed.attributes[a.JOB_OUTCOME] == "dead_letter"
    (nacked,) = by_attributes(durations, **{a.JOB_NAME: "stuck"})
    assert nacked.attributes[a.JOB_OUTCOME] == "nacked"
    assert a.ERROR_TYPE not in nacked.attributes  # abandoned by the worker, not failed

    (nack,) = points(reader, m.METRIC_NACKS)
    assert nack.value == 1
    assert nack.attributes[a.NACK_REASON] == "shutdown_timeout"
    (shutdown,) = points(reader, m.METRIC_SHUTDOWNS)
    assert (shutdown.value, shutdown.attributes[m.SHUTDOWN_OUTCOME]) == (1, "forced")
    (shutdown_duration,) = points(reader, m.METRIC_SHUTDOWN_DURATION)
    assert shutdown_duration.sum >= FAST_SETTINGS["shutdown_timeout"]

    # No attribute value is a job id: streams stay bounded however many jobs run.
    job_ids = {row["id"] for row in await app.list_jobs(limit=100)}
    every_point = [
        p
        for name in (m.METRIC_SENT_MESSAGES, m.METRIC_CONSUMED_MESSAGES, m.METRIC_PROCESS_DURATION)
        for p in points(reader, name)
    ]
    assert not {str(v) for p in every_point for v in p.attributes.values()} & job_ids
    provider.shutdown()
    await app.close()


async def test_schedule_firings_through_the_app_s_bus_are_counted_with_their_lateness() -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    app = Soniq("memory://", extra_observers=[SoniqTracingObserver(meter_provider=provider)], **FAST_SETTINGS)
    due = datetime(2026, 12, 2, 3, 0, tzinfo=UTC)
    for late, catch_up in ((0.5, False), (1.5, False), (5400.0, True)):
        app.bus.schedule_fired(
            ScheduleFiredEvent(
                schedule_name="nightly",
                job_name="reports.build",
                queue="reports",
                due_at=due,
                job_id=f"job-{late}",
                at=0.0,
                late_seconds=late,
                catch_up=catch_up,
            )
        )
    firings = points(reader, m.METRIC_SCHEDULE_FIRINGS)
    (on_time,) = by_attributes(firings, **{m.SCHEDULE_CATCH_UP: False})
    assert on_time.value == 2
    assert on_time.attributes[m.SCHEDULE_NAME] == "nightly"
    assert on_time.attributes[a.MESSAGING_DESTINATION_NAME] == "reports"
    assert on_time.attributes[a.JOB_NAME] == "reports.build"
    (caught_up,) = by_attributes(firings, **{m.SCHEDULE_CATCH_UP: True})
    assert caught_up.value == 1
    lateness = points(reader, m.METRIC_SCHEDULE_LATENESS)
    (late_on_time,) = by_attributes(lateness, **{m.SCHEDULE_CATCH_UP: False})
    assert (late_on_time.count, late_on_time.sum) == (2, 2.0)
    (late_catch_up,) = by_attributes(lateness, **{m.SCHEDULE_CATCH_UP: True})
    assert (late_catch_up.count, late_catch_up.sum) == (1, 5400.0)
    provider.shutdown()
    await app.close()
