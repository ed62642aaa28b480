"""The sink fed by a real in-process worker on the memory backend: shutdown outcomes and durations,
soniq 0.1.0's `metrics_sink=` wiring, and label cardinality."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from datetime import UTC, datetime
from typing import Any

import pytest
from prom_testing import read_registry, series, value, wait_until
from prometheus_client import CollectorRegistry

from soniq import HandlerKind, JobOutcome, Soniq
from soniq.observers import JobEndEvent, JobStartEvent, RecoveryEvent, ScheduleFiredEvent
from soniq.params import Rescue, RescueAction
from soniq.records import DeadLetterReason, JobRecord, JobStatus, RecoveryResult
from soniq.worker.state import RunPhase
from soniq.worker.worker import Worker
from soniq_prometheus import PrometheusMetricsSink, find_sink

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(120)]

FAST = {
    "heartbeat_interval": 0.2,
    "heartbeat_timeout": 1.0,
    "poll_interval": 0.05,
    "retry_backoff_base": 0.01,
    "retry_backoff_max": 0.02,
    "observers": "",
}


def new_sink() -> PrometheusMetricsSink:
    return PrometheusMetricsSink(registry=CollectorRegistry(), queue_cache_seconds=0)


async def start(app: Soniq, running: str, phase: RunPhase) -> tuple[Worker, asyncio.Task[Any]]:
    """A new worker and its task, once the row `running` is in `phase` on it (its handler started)."""
    worker = app.worker(install_signal_handlers=False)
    task = asyncio.ensure_future(worker.run())
    await wait_until(lambda: worker.phase_of(running) is phase)
    return worker, task


async def test_a_drained_shutdown_is_counted_with_its_duration() -> None:
    sink = new_sink()
    app = Soniq("memory://", extra_observers=[sink], **FAST)

    @app.job(name="hello")
    async def hello() -> None:
        return None

    await app.enqueue(hello)
    await asyncio.wait_for(app.run_worker(run_once=True, install_signal_handlers=False), 20)
    s = read_registry(sink.registry)
    assert value(s, "soniq_shutdowns_total", outcome="drained") == 1
    assert value(s, "soniq_shutdown_duration_seconds_count", outcome="drained") == 1
    assert value(s, "soniq_shutdown_duration_seconds_sum", outcome="drained") < 5  # type: ignore[operator]
    assert value(s, "soniq_shutdowns_total", outcome="forced") is None
    assert value(s, "soniq_jobs_completed_total", queue="default", job_name="hello", status="done")
    assert set(series(s, "soniq_worker_state").values()) == {0}
    await app.close()


async def test_forced_and_waited_for_threads_outcomes() -> None:
    sink = new_sink()
    app = Soniq("memory://", extra_observers=[sink], shutdown_timeout=0.2, sync_handler_grace_seconds=0.1, **FAST)
    release = threading.Event()

    @app.job(name="stuck")
    async def stuck() -> None:
        await asyncio.sleep(3600)

    @app.job(name="blocking")
    def blocking() -> None:
        release.wait(30)

    stuck_id = await app.enqueue(stuck)
    worker, task = await start(app, stuck_id, RunPhase.RUNNING_ASYNC)
    worker.stop()
    await asyncio.wait_for(task, 20)
    s = read_registry(sink.registry)
    assert value(s, "soniq_shutdowns_total", outcome="forced") == 1
    assert (
        value(s, "soniq_nacks_total", queue="default", job_name="stuck", reason="shutdown_timeout", written="true") == 1
    )
    forced_seconds = value(s, "soniq_shutdown_duration_seconds_sum", outcome="forced")
    assert forced_seconds is not None
    assert 0.2 <= forced_seconds < 5

    assert await app.cancel_job(stuck_id)
    blocking_id = await app.enqueue(blocking)
    worker, task = await start(app, blocking_id, RunPhase.RUNNING_SYNC)
    worker.stop()
    await wait_until(lambda: value(read_registry(sink.registry), "soniq_worker_state", state="WAIT_FOR_THREAD") == 1)
    release.set()
    await asyncio.wait_for(task, 20)
    s = read_registry(sink.registry)
    assert value(s, "soniq_shutdowns_total", outcome="waited_for_threads") == 1
    assert value(s, "soniq_shutdowns_total", outcome="forced") == 1
    assert (
        value(s, "soniq_shutdown_transitions_total", from_state="FORCE_TIMEOUT_PATH", to_state="WAIT_FOR_THREAD") == 1
    )
    assert value(s, "soniq_shutdown_transitions_total", from_state="RUNNING", to_state="DRAINING") == 2
    await app.close()


async def test_as_a_0_1_0_metrics_sink_and_wired_both_ways_it_counts_once() -> None:
    sink_only = new_sink()
    both = new_sink()
    apps = [
        Soniq("memory://", metrics_sink=sink_only, **FAST),
        Soniq("memory://", metrics_sink=both, extra_observers=[both], **FAST),
    ]
    for app in apps:

        @app.job(name="fails", max_retries=1)
        async def fails() -> None:
            raise ValueError("no")

        job_id = await app.enqueue("fails")

        async def dead_lettered(app: Soniq = app, job_id: str = job_id) -> bool:
            await asyncio.wait_for(app.run_worker(run_once=True, install_signal_handlers=False), 20)
            return await app.dead_letter.get(job_id) is not None

        await wait_until(dead_lettered)
    # 0.1.0's `record_job_end` carries no dead-letter reason; the bus's job-end event does.
    for sink, reason in ((sink_only, "unreported"), (both, "max_attempts")):
        s = read_registry(sink.registry)
        assert value(s, "soniq_jobs_started_total", queue="default", job_name="fails") == 2
        assert value(s, "soniq_jobs_completed_total", queue="default", job_name="fails", status="failed") == 1
        assert value(s, "soniq_jobs_completed_total", queue="default", job_name="fails", status="dead_letter") == 1
        assert value(s, "soniq_job_retries_total", queue="default", job_name="fails", reason="error") == 1
        assert value(s, "soniq_dead_letters_total", queue="default", job_name="fails", reason=reason) == 1
        assert len(series(s, "soniq_dead_letters_total")) == 1
        drained = value(s, "soniq_shutdowns_total", outcome="drained")
        assert drained is not None
        assert drained >= 2
    assert find_sink(apps[0]) is sink_only
    for app in apps:
        await app.close()


async def test_ten_thousand_distinct_jobs_keep_the_series_count_flat() -> None:
    sink = new_sink()
    # A generous heartbeat timeout: on a loaded machine a late heartbeat would let the worker's own sweep
    # recover its rows, adding recovery series that have nothing to do with job ids.
    app = Soniq("memory://", extra_observers=[sink], concurrency=64, **{**FAST, "heartbeat_timeout": 30.0})

    @app.job(name="distinct")
    async def distinct(n: int, payload: str) -> int:
        return n

    async def series_count() -> int:
        await sink.queue_gauges.refresh()
        return len(read_registry(sink.registry))

    async def run(first: int, count: int) -> None:
        await app.enqueue_many("distinct", [{"n": n, "payload": f"user-{n}"} for n in range(first, first + count)])
        await asyncio.wait_for(app.run_worker(run_once=True, install_signal_handlers=False), 60)

    await run(0, 10)
    after_ten = await series_count()
    await run(10, 9_990)
    assert await series_count() == after_ten
    s = read_registry(sink.registry)
    assert value(s, "soniq_jobs_completed_total", queue="default", job_name="distinct", status="done") == 10_000
    job_ids = {row["id"] for row in await app.list_jobs(status="done", limit=10_000)}
    assert len(job_ids) == 10_000
    assert not {v for (_, labels) in s for _, v in labels} & job_ids
    await app.close()


async def test_queue_gauges_read_at_most_once_per_cache_interval() -> None:
    sink = PrometheusMetricsSink(registry=CollectorRegistry(), queue_cache_seconds=3600)
    app = Soniq("memory://", extra_observers=[sink], **FAST)

    @app.job(queue="reports")
    async def report() -> None:
        return None

    await app.enqueue(report)
    await app.enqueue(report, scheduled_at=3600)
    loop = asyncio.get_running_loop()
    sink.attach(app, loop)
    # Scrapes come from the HTTP server's thread; the reads run on the app's loop.
    first = await loop.run_in_executor(None, read_registry, sink.registry)
    again = await loop.run_in_executor(None, read_registry, sink.registry)
    assert sink.queue_gauges.reads == 1
    assert first == again
    assert value(first, "soniq_queue_jobs", queue="reports", state="queued") == 1
    assert value(first, "soniq_queue_jobs", queue="reports", state="scheduled") == 1
    assert value(first, "soniq_queue_jobs", queue="reports", state="processing") == 0
    assert value(first, "soniq_queue_gauges_up") == 1

    # Scraped from the loop itself: no blocking read, the cached values, a refresh for next time.
    sink.queue_gauges.cache_seconds = 0
    await app.enqueue(report)
    cached = read_registry(sink.registry)
    assert value(cached, "soniq_queue_jobs", queue="reports", state="queued") == 1
    await wait_until(lambda: sink.queue_gauges.reads == 2)
    await wait_until(
        lambda: value(read_registry(sink.registry), "soniq_queue_jobs", queue="reports", state="queued") == 2
    )
    await app.close()


async def test_a_store_that_fails_keeps_the_last_values_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    sink = PrometheusMetricsSink(registry=CollectorRegistry(), queue_cache_seconds=0)
    app = Soniq("memory://", extra_observers=[sink], **FAST)

    @app.job
    async def job() -> None:
        return None

    await app.enqueue(job)
    loop = asyncio.get_running_loop()
    sink.attach(app, loop)
    good = await loop.run_in_executor(None, read_registry, sink.registry)
    assert value(good, "soniq_queue_jobs", queue="default", state="queued") == 1

    async def unreachable(**kwargs: Any) -> None:
        raise ConnectionError("store down")

    monkeypatch.setattr(app.backend, "list_workers", unreachable)  # the first read of every refresh
    bad = await loop.run_in_executor(None, read_registry, sink.registry)
    assert value(bad, "soniq_queue_gauges_up") == 0
    assert value(bad, "soniq_queue_jobs", queue="default", state="queued") == 1
    await app.close()


async def test_a_port_in_use_is_logged_and_the_worker_runs_on(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        sink = PrometheusMetricsSink(registry=CollectorRegistry(), addr="127.0.0.1")
        app = Soniq("memory://", extra_observers=[sink], metrics_port=port, **FAST)

        @app.job(name="hello")
        async def hello() -> None:
            return None

        job_id = await app.enqueue(hello)
        with caplog.at_level(logging.ERROR, logger="soniq_prometheus"):
            await asyncio.wait_for(app.run_worker(run_once=True, install_signal_handlers=False), 20)
    assert f"cannot serve /metrics on 127.0.0.1:{port} (metrics_port)" in caplog.text
    row = await app.get_job(job_id)
    assert row is not None
    assert row["status"] == "done"
    await app.close()


def _row(job_id: str) -> JobRecord:
    now = datetime.now(UTC)
    return JobRecord(
        id=job_id,
        job_name="n",
        args={},
        status=JobStatus.PROCESSING,
        attempts=1,
        max_attempts=1,
        queue="q",
        priority=0,
        scheduled_at=now,
        last_error=None,
        worker_id="w",
        result=None,
        created_at=now,
        updated_at=now,
    )


def _rescue(job_id: str, action: RescueAction) -> Rescue:
    return Rescue(
        job_id=job_id, expected_worker_id="gone", expected_updated_at=datetime.now(UTC), action=action, attempts=1
    )


async def test_dead_letter_reasons_and_rescue_actions_come_from_the_bus_events() -> None:
    sink = new_sink()
    job = _row("j1")
    sink.on_job_start(JobStartEvent(worker_id="w", job=job, handler_kind=HandlerKind.ASYNC, attempt=1))
    sink.on_job_end(
        JobEndEvent(
            worker_id="w",
            job=job,
            handler_kind=HandlerKind.ASYNC,
            attempt=1,
            outcome=JobOutcome.DEAD_LETTER,
            duration=0.1,
            reason=DeadLetterReason.NON_RETRYABLE.value,
        )
    )
    rescues = tuple(
        _rescue(f"r{i}", action)
        for i, action in enumerate(
            (RescueAction.REQUEUE, RescueAction.DEAD_LETTER, RescueAction.REQUEUE, RescueAction.RELEASE)
        )
    )
    sink.on_recovery(RecoveryEvent(result=RecoveryResult(stale_workers=("gone",)), rescues=rescues, at=0.0))
    s = read_registry(sink.registry)
    assert value(s, "soniq_dead_letters_total", queue="q", job_name="n", reason="non_retryable") == 1
    assert value(s, "soniq_stale_recoveries_total", action="requeue") == 2
    assert value(s, "soniq_stale_recoveries_total", action="dead_letter") == 1
    assert value(s, "soniq_stale_recoveries_total", action="release") == 1
    assert value(s, "soniq_jobs_in_progress", queue="q", job_name="n") == 0


async def test_a_sink_fed_only_as_metrics_sink_counts_recoveries_from_the_stale_recovery_event() -> None:
    sink = new_sink()
    sink.emit("stale_recovery", {"worker_id": "w", "actions": {"a": "requeue", "b": "dead_letter", "c": "requeue"}})
    s = read_registry(sink.registry)
    assert value(s, "soniq_stale_recoveries_total", action="requeue") == 2
    assert value(s, "soniq_stale_recoveries_total", action="dead_letter") == 1


def _fired(schedule: str, *, late: float, catch_up: bool = False) -> ScheduleFiredEvent:
    return ScheduleFiredEvent(
        schedule_name=schedule,
        job_name="reports.nightly",
        queue="reports",
        due_at=datetime(2026, 12, 2, 3, 0, tzinfo=UTC),
        job_id=f"job-{schedule}-{late}",
        at=0.0,
        late_seconds=late,
        catch_up=catch_up,
    )


async def test_schedule_firings_through_the_app_s_bus_are_counted_with_their_lateness() -> None:
    sink = new_sink()
    app = Soniq("memory://", extra_observers=[sink], **FAST)
    assert app.bus.wants("on_schedule_fired")
    app.bus.schedule_fired(_fired("nightly", late=0.3))
    app.bus.schedule_fired(_fired("nightly", late=2.0))
    app.bus.schedule_fired(_fired("nightly", late=7200.0, catch_up=True))
    s = read_registry(sink.registry)
    on_time = {"schedule": "nightly", "queue": "reports", "job_name": "reports.nightly", "catch_up": "false"}
    assert value(s, "soniq_schedule_firings_total", **on_time) == 2
    assert value(s, "soniq_schedule_firings_total", **{**on_time, "catch_up": "true"}) == 1
    lateness = {"schedule": "nightly", "catch_up": "false"}
    assert value(s, "soniq_schedule_lateness_seconds_count", **lateness) == 2
    assert value(s, "soniq_schedule_lateness_seconds_sum", **lateness) == pytest.approx(2.3)
    assert value(s, "soniq_schedule_lateness_seconds_bucket", le="0.5", **lateness) == 1
    assert value(s, "soniq_schedule_lateness_seconds_bucket", le="5.0", **lateness) == 2
    caught_up = {"schedule": "nightly", "catch_up": "true"}
    assert value(s, "soniq_schedule_lateness_seconds_bucket", le="3600.0", **caught_up) == 0
    assert value(s, "soniq_schedule_lateness_seconds_bucket", le="21600.0", **caught_up) == 1
    # No job id among the labels: a schedule firing every minute for a year stays one series per label set.
    assert all("job_id" not in dict(labels) for labels in series(s, "soniq_schedule_firings_total"))
    await app.close()


async def test_a_sink_fed_only_as_metrics_sink_counts_schedule_firings_from_the_emitted_event() -> None:
    sink = new_sink()
    app = Soniq("memory://", metrics_sink=sink, **FAST)
    app.bus.schedule_fired(_fired("hourly", late=0.05))
    s = read_registry(sink.registry)
    labels = {"schedule": "hourly", "queue": "reports", "job_name": "reports.nightly", "catch_up": "false"}
    assert value(s, "soniq_schedule_firings_total", **labels) == 1
    assert value(s, "soniq_schedule_lateness_seconds_count", schedule="hourly", catch_up="false") == 1
    await app.close()


async def test_a_paused_queue_has_a_gauge_until_it_is_resumed() -> None:
    sink = PrometheusMetricsSink(registry=CollectorRegistry(), queue_cache_seconds=0)
    app = Soniq("memory://", extra_observers=[sink], **FAST)

    @app.job(queue="reports")
    async def report() -> None:
        return None

    await app.pause_queue("reports", reason="deploy")
    loop = asyncio.get_running_loop()
    sink.attach(app, loop)
    paused = await loop.run_in_executor(None, read_registry, sink.registry)
    assert series(paused, "soniq_queue_paused") == {frozenset({("queue", "reports")}): 1.0}
    await app.resume_queue("reports")
    resumed = await loop.run_in_executor(None, read_registry, sink.registry)
    assert series(resumed, "soniq_queue_paused") == {}
    assert value(resumed, "soniq_queue_gauges_up") == 1
    await app.close()
