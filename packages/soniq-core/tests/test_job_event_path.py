"""The per-job event path: the cheap builders give ordinary frozen events, and the bus's job fan-out keeps
its order and survives a failing hook, seen through a real worker on the memory backend."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
from datetime import UTC, datetime
from typing import Any

import pytest

from soniq import BaseObserver, HandlerKind, JobOutcome, Soniq
from soniq.observers import JobEndEvent, JobStartEvent, job_end_event, job_start_event
from soniq.records import JobRecord, JobStatus

NOW = datetime(2026, 12, 2, tzinfo=UTC)
JOB = JobRecord(
    id="j1",
    job_name="noop",
    args={},
    status=JobStatus.PROCESSING,
    attempts=0,
    max_attempts=3,
    queue="default",
    priority=0,
    scheduled_at=NOW,
    last_error=None,
    worker_id="w1",
    result=None,
    created_at=NOW,
    updated_at=NOW,
)


@pytest.mark.parametrize(("builder", "event_class"), [(job_start_event, JobStartEvent), (job_end_event, JobEndEvent)])
def test_each_builder_takes_every_field_of_its_event_in_order(builder: Any, event_class: type) -> None:
    assert list(inspect.signature(builder).parameters) == [f.name for f in dataclasses.fields(event_class)]


def test_built_events_equal_constructed_ones_and_stay_frozen() -> None:
    error = RuntimeError("boom")
    built = job_end_event("w1", JOB, HandlerKind.ASYNC, 2, JobOutcome.RETRY, 0.25, error, "RuntimeError: boom", "error")
    constructed = JobEndEvent(
        worker_id="w1",
        job=JOB,
        handler_kind=HandlerKind.ASYNC,
        attempt=2,
        outcome=JobOutcome.RETRY,
        duration=0.25,
        error=error,
        error_text="RuntimeError: boom",
        reason="error",
    )
    assert type(built) is JobEndEvent
    assert built == constructed
    assert repr(built) == repr(constructed)
    assert dataclasses.replace(built, duration=1.0).duration == 1.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.duration = 3.0  # type: ignore[misc]
    start = job_start_event("w1", JOB, HandlerKind.SYNC, 1)
    assert start == JobStartEvent(worker_id="w1", job=JOB, handler_kind=HandlerKind.SYNC, attempt=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        start.attempt = 5  # type: ignore[misc]


@pytest.mark.asyncio
async def test_job_hooks_run_in_listener_order_and_a_failing_one_is_logged_and_skipped(
    fast_settings: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[tuple[str, str, object]] = []

    class Broken(BaseObserver):
        def on_job_start(self, event: JobStartEvent) -> None:
            seen.append(("broken", "start", event.attempt))
            raise RuntimeError("observer bug")

        def on_job_end(self, event: JobEndEvent) -> None:
            raise RuntimeError("observer bug")

    class Recorder(BaseObserver):
        def on_job_start(self, event: JobStartEvent) -> None:
            seen.append(("recorder", "start", event.handler_kind))

        def on_job_end(self, event: JobEndEvent) -> None:
            seen.append(("recorder", "end", event.outcome))

    app = Soniq("memory://", extra_observers=[Broken(), Recorder()], **fast_settings)

    @app.job(name="noop")
    async def noop() -> None:
        return None

    await app.enqueue(noop)
    with caplog.at_level(logging.ERROR, logger="soniq.metrics"):
        await asyncio.wait_for(app.run_worker(run_once=True, install_signal_handlers=False), 10)
    assert seen == [("broken", "start", 1), ("recorder", "start", HandlerKind.ASYNC), ("recorder", "end", "done")]
    logged = [r.getMessage() for r in caplog.records if r.name == "soniq.metrics"]
    assert logged == ["Broken.on_job_start raised; ignoring", "Broken.on_job_end raised; ignoring"]
    await app.close()
