"""Every transition of the seed diagram, driven in-process on the memory backend."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from soniq import InMemoryMetricsSink, Soniq, WorkerState
from soniq.observers import NackEvent, RecordingObserver, ShutdownNotice
from soniq.worker.worker import Worker

from .conftest import _wait_until

pytestmark = pytest.mark.asyncio

R, D, F, W, S = (
    WorkerState.RUNNING,
    WorkerState.DRAINING,
    WorkerState.FORCE_TIMEOUT_PATH,
    WorkerState.WAIT_FOR_THREAD,
    WorkerState.STOPPED,
)


def make_app(fast_settings: dict[str, Any], **settings: Any) -> tuple[Soniq, InMemoryMetricsSink, RecordingObserver]:
    sink = InMemoryMetricsSink()
    observer = RecordingObserver()
    app = Soniq("memory://", metrics_sink=sink, extra_observers=[observer], **{**fast_settings, **settings})

    # A worker with no job registered refuses to start.
    @app.job(name="tests.idle")
    def idle() -> None: ...

    return app, sink, observer


async def start_worker(app: Soniq, **kwargs: Any) -> tuple[Worker, asyncio.Task[Any]]:
    worker = app.worker(install_signal_handlers=False, **kwargs)
    task = asyncio.create_task(worker.run())
    store: Any = app.backend
    await _wait_until(lambda: worker.worker_id in store.workers, timeout=5)
    return worker, task


async def job_row(app: Soniq, job_id: str) -> dict[str, Any]:
    row = await app.get_job(job_id)
    assert row is not None
    return row


async def test_idle_stop_goes_straight_from_draining_to_stopped(fast_settings: dict[str, Any]) -> None:
    app, _, observer = make_app(fast_settings)
    worker, task = await start_worker(app)
    started = time.monotonic()
    worker.stop("SIGTERM")
    summary = await asyncio.wait_for(task, 5)
    assert summary.states == [R, D, S]
    assert time.monotonic() - started < 1.0
    assert [(t.from_state, t.to_state) for t in observer.transitions] == [(R, D), (D, S)]
    assert observer.transitions[0].shutdown is not None
    assert observer.transitions[0].shutdown.trigger == "SIGTERM"


async def test_clean_drain_lets_the_running_async_job_finish(fast_settings: dict[str, Any], wait_until: Any) -> None:
    app, sink, _ = make_app(fast_settings, shutdown_timeout=10)
    release = asyncio.Event()

    @app.job
    async def slow() -> str:
        await release.wait()
        return "finished"

    job_id = await app.enqueue(slow)
    worker, task = await start_worker(app)
    await wait_until(lambda: job_row(app, job_id), timeout=5)
    await wait_until(lambda: worker.in_flight, timeout=5)
    worker.stop("SIGTERM")
    await wait_until(lambda: worker.state is D)
    release.set()
    summary = await asyncio.wait_for(task, 5)
    assert summary.states == [R, D, S]
    row = await job_row(app, job_id)
    assert row["status"] == "done"
    assert row["result"] == "finished"
    assert sink.events_named("shutdown_nack") == []


async def test_async_force_path_nacks_with_the_seed_field_set(fast_settings: dict[str, Any], wait_until: Any) -> None:
    app, sink, observer = make_app(fast_settings, shutdown_timeout=0.3)
    cancelled = threading.Event()

    @app.job(max_retries=2)
    async def forever() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            cancelled.set()

    job_id = await app.enqueue(forever)
    backend: Any = app.backend
    worker, task = await start_worker(app)
    await wait_until(lambda: job_id in worker.in_flight)
    await wait_until(lambda: backend.jobs[job_id].status.value == "processing")
    claimed = backend.jobs[job_id]
    started = time.monotonic()
    worker.stop("SIGTERM")
    summary = await asyncio.wait_for(task, 10)
    elapsed = time.monotonic() - started
    assert summary.states == [R, D, F, S]
    assert cancelled.is_set()
    assert 0.3 <= elapsed < 0.3 + 3.0
    row = backend.jobs[job_id]
    assert row.status.value == "queued"
    assert row.worker_id is None
    assert row.attempts == claimed.attempts == 0
    assert row.last_error == claimed.last_error
    assert row.updated_at > claimed.updated_at
    assert row.scheduled_at >= claimed.updated_at
    assert summary.nacked_job_ids == [job_id]
    (nack,) = sink.events_named("shutdown_nack")
    assert nack["job_id"] == job_id
    assert nack["reason"] == "shutdown_timeout"
    assert nack["written"] is True
    assert [n.job_id for n in observer.nacks] == [job_id]
    assert observer.transitions[-1].nacked_job_ids == (job_id,)


async def test_sync_thread_is_waited_for_past_its_grace_then_marked_done(
    fast_settings: dict[str, Any], wait_until: Any
) -> None:
    app, sink, observer = make_app(fast_settings, shutdown_timeout=0.2, sync_handler_grace_seconds=0.3)
    gate = threading.Event()

    @app.job
    def blocking() -> str:
        gate.wait(10)
        return "thread returned"

    job_id = await app.enqueue(blocking)
    worker, task = await start_worker(app)
    await wait_until(lambda: worker.threads_running)
    worker.stop("SIGTERM")
    await wait_until(lambda: any(isinstance(e, ShutdownNotice) for e in observer.events), timeout=5)
    assert worker.state is W
    # The worker keeps the row and keeps heartbeating while it waits.
    backend: Any = app.backend
    assert backend.jobs[job_id].status.value == "processing"
    beat = backend.workers[worker.worker_id].last_heartbeat
    await wait_until(lambda: backend.workers[worker.worker_id].last_heartbeat > beat, timeout=3)
    gate.set()
    summary = await asyncio.wait_for(task, 5)
    assert summary.states == [R, D, F, W, S]
    row = await job_row(app, job_id)
    assert row["status"] == "done"
    assert row["result"] == "thread returned"
    assert sink.events_named("shutdown_nack") == []
    notice = next(e for e in observer.events if isinstance(e, ShutdownNotice))
    assert notice.name == "sync_grace_expired"
    assert notice.fields["job_ids"] == [job_id]
    assert not any(isinstance(e, NackEvent) for e in observer.events)


async def test_sync_thread_returning_within_grace_is_marked_without_grace_expiry(
    fast_settings: dict[str, Any], wait_until: Any
) -> None:
    app, _, observer = make_app(fast_settings, shutdown_timeout=0.1, sync_handler_grace_seconds=5)
    gate = threading.Event()

    @app.job(max_retries=3)
    def blocking() -> None:
        gate.wait(10)
        raise ValueError("failed after the force path")

    job_id = await app.enqueue(blocking)
    worker, task = await start_worker(app)
    await wait_until(lambda: worker.threads_running)
    worker.stop("SIGTERM")
    await wait_until(lambda: worker.state is W)
    gate.set()
    summary = await asyncio.wait_for(task, 5)
    assert summary.states == [R, D, F, W, S]
    row = await job_row(app, job_id)
    # Failed per the normal policy: one attempt spent, back in the queue for a retry; never nack'd.
    assert row["status"] == "queued"
    assert row["attempts"] == 1
    assert "failed after the force path" in row["last_error"]
    assert not any(isinstance(e, ShutdownNotice) for e in observer.events)
    assert observer.nacks == []


async def test_second_stop_during_draining_goes_straight_to_force(
    fast_settings: dict[str, Any], wait_until: Any
) -> None:
    app, sink, _ = make_app(fast_settings, shutdown_timeout=60)

    @app.job
    async def forever() -> None:
        await asyncio.sleep(3600)

    job_id = await app.enqueue(forever)
    worker, task = await start_worker(app)
    await wait_until(lambda: job_id in worker.in_flight)
    worker.stop("SIGTERM")
    await wait_until(lambda: worker.state is D)
    started = time.monotonic()
    worker.stop("SIGTERM")
    summary = await asyncio.wait_for(task, 10)
    assert time.monotonic() - started < 5
    assert summary.states == [R, D, F, S]
    assert (await job_row(app, job_id))["status"] == "queued"
    assert sink.events_named("shutdown_nack")[0]["reason"] == "second_signal"


async def test_claimed_sync_job_waiting_for_a_permit_takes_the_async_branch(
    fast_settings: dict[str, Any], wait_until: Any
) -> None:
    app, sink, _ = make_app(fast_settings, shutdown_timeout=0.2, sync_handler_grace_seconds=5, sync_handler_pool_size=1)
    gate = threading.Event()

    @app.job
    def blocking(n: int) -> int:
        gate.wait(10)
        return n

    first = await app.enqueue(blocking, n=1)
    worker, task = await start_worker(app, concurrency=2)
    await wait_until(lambda: worker.threads_running)
    second = await app.enqueue(blocking, n=2)
    await wait_until(lambda: second in worker.in_flight)
    await wait_until(lambda: worker.phase_of(second).value == "waiting_permit")
    worker.stop("SIGTERM")
    await wait_until(lambda: worker.state is W)
    gate.set()
    summary = await asyncio.wait_for(task, 5)
    assert summary.states == [R, D, F, W, S]
    assert (await job_row(app, first))["status"] == "done"
    waiting = await job_row(app, second)
    assert waiting["status"] == "queued"
    assert waiting["attempts"] == 0
    assert [e["job_id"] for e in sink.events_named("shutdown_nack")] == [second]


async def test_job_timeout_during_draining_fails_the_job_and_counts_an_attempt(
    fast_settings: dict[str, Any], wait_until: Any
) -> None:
    app, sink, _ = make_app(fast_settings, shutdown_timeout=5, job_timeout=0.3)

    @app.job
    async def forever() -> None:
        await asyncio.sleep(3600)

    job_id = await app.enqueue(forever)
    worker, task = await start_worker(app)
    await wait_until(lambda: job_id in worker.in_flight)
    worker.stop("SIGTERM")
    summary = await asyncio.wait_for(task, 5)
    assert summary.states == [R, D, S]
    row = await job_row(app, job_id)
    assert row["attempts"] == 1
    assert "timed out" in row["last_error"]
    assert sink.events_named("shutdown_nack") == []


async def test_no_claims_while_draining(fast_settings: dict[str, Any], wait_until: Any) -> None:
    app, _, _ = make_app(fast_settings, shutdown_timeout=5)
    release = asyncio.Event()

    @app.job
    async def slow() -> None:
        await release.wait()

    first = await app.enqueue(slow)
    worker, task = await start_worker(app, concurrency=4)
    await wait_until(lambda: first in worker.in_flight)
    worker.stop("SIGTERM")
    await wait_until(lambda: worker.state is D)
    late = await app.enqueue(slow)
    await asyncio.sleep(0.2)  # several poll intervals in which a claim would have happened
    assert (await job_row(app, late))["status"] == "queued"
    release.set()
    await asyncio.wait_for(task, 5)
    assert (await job_row(app, late))["status"] == "queued"
    assert (await job_row(app, first))["status"] == "done"


async def test_nacks_never_spend_the_retry_budget(fast_settings: dict[str, Any], wait_until: Any) -> None:
    app, _, _ = make_app(fast_settings, shutdown_timeout=0.1)
    runs = {"n": 0}

    @app.job(max_retries=0)
    async def eventually() -> str:
        runs["n"] += 1
        if runs["n"] <= 3:
            await asyncio.sleep(3600)
        return "ran to the end"

    job_id = await app.enqueue(eventually)
    for _ in range(3):
        worker, task = await start_worker(app)
        await wait_until(lambda started=worker: job_id in started.in_flight)
        await wait_until(lambda: runs["n"] >= 1)
        worker.stop("SIGTERM")
        summary = await asyncio.wait_for(task, 5)
        assert summary.nacked_job_ids == [job_id]
        row = await job_row(app, job_id)
        assert (row["status"], row["attempts"]) == ("queued", 0)
    summary = await asyncio.wait_for(app.run_worker(run_once=True, install_signal_handlers=False), 5)
    row = await job_row(app, job_id)
    assert (row["status"], row["result"], row["attempts"]) == ("done", "ran to the end", 0)
