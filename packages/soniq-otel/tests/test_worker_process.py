"""Each shutdown path in a real ``soniq worker`` process, stopped with real signals, on SQLite and Postgres."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from otel_testing import Tracing, wait_until, with_observer
from worker_process import (
    POSTGRES_URL,
    Store,
    WorkerProcess,
    by_name,
    edges,
    new_namespace,
    only,
    require_postgres,
    shutdown_trace,
)

from soniq import Soniq

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]

JOB_NAMES = ("gated_async", "endless_async", "blocking_sync")


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "sqlite":
        return Store(f"sqlite:///{tmp_path}/t.db", None)
    require_postgres()
    return Store(POSTGRES_URL, new_namespace())


@pytest_asyncio.fixture
async def producer(store: Store, tracing: Tracing) -> AsyncIterator[Soniq]:
    """The enqueuing side, in the test process, with its own SDK provider."""
    app = with_observer(store.app(), tracing.observer)
    for name in JOB_NAMES:
        # The bodies live in the worker's jobs module; here the names only need to be known.
        app.job(name=f"otel_worker_jobs.{name}")(_stub)
    await app.setup()
    yield app
    if store.namespace:
        await app.backend.drop_schema()
    await app.close()


def _stub(**kwargs: Any) -> None:
    raise AssertionError("runs in the worker process only")


async def started(producer: Soniq, job_id: str, marker: Path) -> None:
    await wait_until(marker.exists, timeout=20)
    await wait_until(lambda: _is_processing(producer, job_id), timeout=20)


async def _is_processing(producer: Soniq, job_id: str) -> bool:
    row = await producer.get_job(job_id)
    return row is not None and row["status"] == "processing"


async def finish(worker: WorkerProcess) -> int:
    try:
        return await asyncio.to_thread(worker.wait, 30)
    finally:
        worker.kill()


async def test_clean_drain_and_the_request_trace(
    store: Store, producer: Soniq, tracing: Tracing, tmp_path: Path
) -> None:
    marker, release = tmp_path / "started", tmp_path / "release"
    request_tracer = tracing.provider.get_tracer("test.web")
    with request_tracer.start_as_current_span("POST /reports") as request:
        job_id = await producer.enqueue("otel_worker_jobs.gated_async", marker=str(marker), release=str(release))
    worker = WorkerProcess(store, tmp_path, SONIQ_SHUTDOWN_TIMEOUT="20")
    try:
        await started(producer, job_id, marker)
        worker.signal(signal.SIGTERM)
        await asyncio.to_thread(worker.wait_for_log, "received, draining")
        release.touch()
    finally:
        code = await finish(worker)
    assert code == 0, worker.log()

    spans = worker.spans()
    root, steps = shutdown_trace(spans)
    assert edges(steps) == [("RUNNING", "DRAINING"), ("DRAINING", "STOPPED")]
    assert root["attributes"]["soniq.shutdown.trigger"] == "SIGTERM"
    assert root["attributes"]["soniq.shutdown.shutdown_timeout"] == 20.0
    assert root["attributes"]["soniq.shutdown.in_flight.async"] == 1
    assert root["attributes"]["soniq.shutdown.nacked_job_ids"] == []
    assert by_name(spans, "soniq.job.nack") == []
    # The job joined the request's trace: request -> send (this process) -> process (the worker).
    process = only(spans, "process default")
    send = tracing.one("send default")
    assert send.context is not None
    request_ctx = request.get_span_context()
    assert process["trace_id"] == f"{request_ctx.trace_id:032x}"
    assert process["parent_id"] == f"{send.context.span_id:016x}"
    assert send.parent is not None
    assert send.parent.span_id == request_ctx.span_id
    assert process["kind"] == "CONSUMER"
    assert process["attributes"]["messaging.system"] == "soniq"
    assert process["attributes"]["messaging.message.id"] == job_id
    assert process["attributes"]["soniq.job.outcome"] == "done"
    # It ended while the worker drained, before STOPPED.
    assert steps[1]["start"] <= process["end"] <= steps[1]["end"]
    assert (await producer.get_job(job_id) or {})["status"] == "done"


async def test_async_force_path_nacks(store: Store, producer: Soniq, tmp_path: Path) -> None:
    marker = tmp_path / "started"
    job_id = await producer.enqueue("otel_worker_jobs.endless_async", marker=str(marker))
    worker = WorkerProcess(store, tmp_path)
    try:
        await started(producer, job_id, marker)
        worker.signal(signal.SIGTERM)
    finally:
        code = await finish(worker)
    assert code == 0, worker.log()

    spans = worker.spans()
    root, steps = shutdown_trace(spans)
    assert edges(steps) == [
        ("RUNNING", "DRAINING"),
        ("DRAINING", "FORCE_TIMEOUT_PATH"),
        ("FORCE_TIMEOUT_PATH", "STOPPED"),
    ]
    assert steps[1]["attributes"]["soniq.shutdown.reason"] == "shutdown_timeout elapsed"
    assert root["attributes"]["soniq.shutdown.nacked_job_ids"] == [job_id]
    nack = only(spans, "soniq.job.nack")
    assert nack["parent_id"] == root["span_id"]
    assert nack["attributes"]["messaging.message.id"] == job_id
    assert nack["attributes"]["soniq.nack.reason"] == "shutdown_timeout"
    assert nack["attributes"]["soniq.nack.written"] is True
    assert steps[2]["start"] <= nack["end"] <= steps[2]["end"]
    process = only(spans, "process default")
    assert process["attributes"]["soniq.job.outcome"] == "nacked"
    assert nack["links"] == [process["span_id"]]
    row = await producer.get_job(job_id)
    assert row is not None
    assert (row["status"], row["attempts"], row["worker_id"]) == ("queued", 0, None)


async def test_sync_wait_for_thread_records_the_grace_expiry(store: Store, producer: Soniq, tmp_path: Path) -> None:
    marker, release = tmp_path / "started", tmp_path / "release"
    job_id = await producer.enqueue("otel_worker_jobs.blocking_sync", marker=str(marker), release=str(release))
    worker = WorkerProcess(store, tmp_path)
    try:
        await started(producer, job_id, marker)
        worker.signal(signal.SIGTERM)
        await asyncio.to_thread(worker.wait_for_log, "sync grace of")
        # Still processing: the sync branch never nacks.
        assert (await producer.get_job(job_id) or {})["status"] == "processing"
        release.touch()
    finally:
        code = await finish(worker)
    assert code == 0, worker.log()

    spans = worker.spans()
    root, steps = shutdown_trace(spans)
    assert edges(steps) == [
        ("RUNNING", "DRAINING"),
        ("DRAINING", "FORCE_TIMEOUT_PATH"),
        ("FORCE_TIMEOUT_PATH", "WAIT_FOR_THREAD"),
        ("WAIT_FOR_THREAD", "STOPPED"),
    ]
    waiting = steps[3]
    assert waiting["attributes"]["soniq.shutdown.waiting_job_ids"] == [job_id]
    assert [e["name"] for e in waiting["events"]] == ["soniq.shutdown.sync_grace_expired"]
    expiry = waiting["events"][0]
    assert expiry["attributes"]["soniq.shutdown.waiting_job_ids"] == [job_id]
    assert waiting["start"] <= expiry["timestamp"] <= waiting["end"]
    assert all(step["events"] == [] for step in steps[:3])
    assert root["attributes"]["soniq.shutdown.in_flight.sync"] == 1
    assert root["attributes"]["soniq.shutdown.nacked_job_ids"] == []
    assert by_name(spans, "soniq.job.nack") == []
    process = only(spans, "process default")
    assert process["attributes"]["soniq.job.outcome"] == "done"
    assert process["attributes"]["soniq.job.handler_kind"] == "sync"
    assert (await producer.get_job(job_id) or {})["status"] == "done"


async def test_second_signal_goes_straight_to_the_force_path(store: Store, producer: Soniq, tmp_path: Path) -> None:
    marker = tmp_path / "started"
    job_id = await producer.enqueue("otel_worker_jobs.endless_async", marker=str(marker))
    # A budget no test waits out: only the second signal can end DRAINING.
    worker = WorkerProcess(store, tmp_path, SONIQ_SHUTDOWN_TIMEOUT="120")
    try:
        await started(producer, job_id, marker)
        worker.signal(signal.SIGTERM)
        await asyncio.to_thread(worker.wait_for_log, "received, draining")
        worker.signal(signal.SIGTERM)
    finally:
        code = await finish(worker)
    assert code == 0, worker.log()

    spans = worker.spans()
    root, steps = shutdown_trace(spans)
    assert edges(steps) == [
        ("RUNNING", "DRAINING"),
        ("DRAINING", "FORCE_TIMEOUT_PATH"),
        ("FORCE_TIMEOUT_PATH", "STOPPED"),
    ]
    assert steps[1]["attributes"]["soniq.shutdown.reason"] == "second signal"
    assert root["attributes"]["soniq.shutdown.shutdown_timeout"] == 120.0
    nack = only(spans, "soniq.job.nack")
    assert nack["attributes"]["messaging.message.id"] == job_id
    assert nack["attributes"]["soniq.nack.reason"] == "second_signal"
    assert root["attributes"]["soniq.shutdown.nacked_job_ids"] == [job_id]
    row = await producer.get_job(job_id)
    assert row is not None
    assert (row["status"], row["attempts"]) == ("queued", 0)
