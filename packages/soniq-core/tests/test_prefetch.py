"""Prefetch: rows claimed ahead of free slots, handed back untouched on shutdown."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from soniq import InMemoryMetricsSink, Soniq, WorkerState
from soniq.observers import RecordingObserver

pytestmark = pytest.mark.asyncio


async def test_buffered_rows_are_released_and_running_ones_nacked(
    fast_settings: dict[str, Any], wait_until: Any
) -> None:
    sink = InMemoryMetricsSink()
    observer = RecordingObserver()
    app = Soniq(
        "memory://", metrics_sink=sink, extra_observers=[observer], prefetch=6, shutdown_timeout=0.3, **fast_settings
    )
    started: list[int] = []

    @app.job
    async def hold(n: int) -> None:
        started.append(n)
        await asyncio.sleep(3600)

    ids = await app.enqueue_many(hold, [{"n": i} for i in range(8)])
    backend: Any = app.backend
    worker = app.worker(concurrency=2, install_signal_handlers=False)
    task = asyncio.create_task(worker.run())
    await wait_until(
        lambda: len(started) == 2 and sum(1 for i in ids if backend.jobs[i].status.value == "processing") == 8
    )
    # A buffered row's handler has not started, and the store knows it.
    buffered = [i for i in ids if backend.jobs[i].started_at is None]
    assert len(buffered) == 6
    worker.stop("SIGTERM")
    summary = await asyncio.wait_for(task, 10)
    assert summary.states == [
        WorkerState.RUNNING,
        WorkerState.DRAINING,
        WorkerState.FORCE_TIMEOUT_PATH,
        WorkerState.STOPPED,
    ]
    assert len(started) == 2
    reasons: dict[str, list[str]] = {}
    for event in sink.events_named("shutdown_nack"):
        reasons.setdefault(event["reason"], []).append(event["job_id"])
    assert sorted(reasons["prefetch_release"]) == sorted(buffered)
    assert len(reasons["shutdown_timeout"]) == 2
    assert sorted(summary.released_job_ids) == sorted(buffered)
    for job_id in ids:
        row = backend.jobs[job_id]
        assert (row.status.value, row.attempts, row.worker_id) == ("queued", 0, None)
    assert {n.reason for n in observer.nacks} == {"prefetch_release", "shutdown_timeout"}


async def test_with_prefetch_zero_the_claim_marks_the_start(fast_settings: dict[str, Any], wait_until: Any) -> None:
    app = Soniq("memory://", **fast_settings)
    gate = asyncio.Event()

    @app.job
    async def hold() -> None:
        await gate.wait()

    job_id = await app.enqueue(hold)
    backend: Any = app.backend
    worker = app.worker(install_signal_handlers=False)
    task = asyncio.create_task(worker.run())
    await wait_until(lambda: backend.jobs[job_id].status.value == "processing")
    assert backend.jobs[job_id].started_at is not None
    gate.set()
    await wait_until(lambda: backend.jobs[job_id].status.value == "done")
    worker.stop("stop")
    await asyncio.wait_for(task, 5)


async def test_buffered_rows_start_as_slots_free_up(fast_settings: dict[str, Any], wait_until: Any) -> None:
    app = Soniq("memory://", prefetch=3, **fast_settings)
    done: list[int] = []

    @app.job
    async def quick(n: int) -> None:
        await asyncio.sleep(0.01)
        done.append(n)

    await app.enqueue_many(quick, [{"n": i} for i in range(20)])
    await asyncio.wait_for(app.run_worker(concurrency=2, run_once=True, install_signal_handlers=False), 10)
    assert sorted(done) == list(range(20))
    stats = await app.get_queue_stats()
    assert stats["done"] == 20


async def test_buffered_rows_starting_together_share_one_start_write(
    fast_settings: dict[str, Any], wait_until: Any
) -> None:
    app = Soniq("memory://", prefetch=4, **fast_settings)
    gate = asyncio.Event()
    started: list[int] = []

    @app.job
    async def hold(n: int) -> None:
        started.append(n)
        if len(started) <= 4:  # the first four hold their slots; the other four wait in the buffer
            await gate.wait()

    ids = await app.enqueue_many(hold, [{"n": i} for i in range(8)])
    backend: Any = app.backend
    writes: list[list[str]] = []
    mark_started = backend.mark_started

    async def recording(params: Any) -> set[str]:
        writes.append(list(params.job_ids))
        written: set[str] = await mark_started(params)
        return written

    backend.mark_started = recording
    worker = app.worker(concurrency=4, install_signal_handlers=False)
    task = asyncio.create_task(worker.run())
    await wait_until(lambda: len(started) == 4)
    gate.set()  # four slots free at once: the four buffered rows start together
    await wait_until(lambda: all(backend.jobs[i].status.value == "done" for i in ids))
    # Each start is written before its handler runs, and the four that started together share one write.
    assert sorted(i for batch in writes for i in batch) == sorted(ids)
    assert sorted(len(batch) for batch in writes)[-1] == 4
    assert all(backend.jobs[i].started_at is not None for i in ids)
    worker.stop("stop")
    await asyncio.wait_for(task, 5)
