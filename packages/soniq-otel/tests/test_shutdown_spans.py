"""Shutdown traces, in-process on the memory backend, one test per path of the seed diagram."""

from __future__ import annotations

import asyncio
import itertools
import threading
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from otel_testing import RunningWorker, Tracing, make_app, wait_until

from soniq import Soniq, WorkerState
from soniq.observers import RecordingObserver, ShutdownNotice
from soniq_otel import attributes as a

pytestmark = pytest.mark.asyncio


def transitions(tracing: Tracing) -> list[ReadableSpan]:
    return sorted(tracing.spans(a.SPAN_SHUTDOWN_TRANSITION), key=lambda s: (s.start_time or 0, s.end_time or 0))


def edges(spans: list[ReadableSpan]) -> list[tuple[object, object]]:
    return [((s.attributes or {})[a.SHUTDOWN_FROM_STATE], (s.attributes or {}).get(a.SHUTDOWN_TO_STATE)) for s in spans]


def check_shape(tracing: Tracing, worker_id: str) -> tuple[ReadableSpan, list[ReadableSpan]]:
    """The timing rule of SPEC section 8, common to every path."""
    root = tracing.one(a.SPAN_WORKER_SHUTDOWN)
    steps = transitions(tracing)
    assert root.parent is None
    assert root.context is not None
    for step in steps:
        assert step.parent is not None
        assert step.parent.span_id == root.context.span_id
        assert step.context is not None
        assert step.context.trace_id == root.context.trace_id
        assert (step.attributes or {})[a.WORKER_ID] == worker_id
    assert steps[0].start_time == root.start_time
    for before, after in itertools.pairwise(steps):
        assert after.start_time == before.end_time
    assert steps[-1].end_time == root.end_time
    assert (steps[-1].attributes or {})[a.SHUTDOWN_TO_STATE] == WorkerState.STOPPED.value
    return root, steps


async def test_clean_drain(tracing: Tracing, app: Soniq) -> None:
    release = asyncio.Event()
    started = asyncio.Event()

    @app.job
    async def steady() -> None:
        started.set()
        await release.wait()

    job_id = await app.enqueue(steady)
    running = RunningWorker(app)
    await asyncio.wait_for(started.wait(), 10)
    await running.stop()
    await wait_until(lambda: running.worker.state is WorkerState.DRAINING)
    release.set()
    summary = await running.summary()

    root, steps = check_shape(tracing, summary.worker_id)
    assert edges(steps) == [("RUNNING", "DRAINING"), ("DRAINING", "STOPPED")]
    assert [(s.attributes or {})[a.SHUTDOWN_REASON] for s in steps] == ["SIGTERM", "drained"]
    attrs = root.attributes or {}
    assert attrs[a.WORKER_ID] == summary.worker_id
    assert attrs[a.SHUTDOWN_TRIGGER] == "SIGTERM"
    assert attrs[a.SHUTDOWN_TIMEOUT] == 1.0
    assert attrs[a.SHUTDOWN_SYNC_GRACE] == 1.0
    assert attrs[a.SHUTDOWN_PREFETCH_RELEASE_TIMEOUT] == 5.0
    assert a.SHUTDOWN_JOB_TIMEOUT not in attrs
    assert (attrs[a.SHUTDOWN_IN_FLIGHT_ASYNC], attrs[a.SHUTDOWN_IN_FLIGHT_SYNC]) == (1, 0)
    assert attrs[a.SHUTDOWN_NACKED_JOB_IDS] == ()
    assert attrs[a.SHUTDOWN_STATES] == ("RUNNING", "DRAINING", "STOPPED")
    assert tracing.spans(a.SPAN_JOB_NACK) == []
    process = tracing.one("process default")
    assert (process.attributes or {})[a.JOB_OUTCOME] == "done"
    assert (await app.get_job(job_id) or {})["status"] == "done"


async def test_async_force_path_nacks_with_a_span_per_job(tracing: Tracing) -> None:
    app = make_app(tracing, job_timeout=30)
    started = asyncio.Event()

    @app.job
    async def endless() -> None:
        started.set()
        await asyncio.sleep(3600)

    try:
        job_id = await app.enqueue(endless)
        worker = RunningWorker(app)
        await asyncio.wait_for(started.wait(), 10)
        await worker.stop()
        summary = await worker.summary()

        root, steps = check_shape(tracing, summary.worker_id)
        assert edges(steps) == [
            ("RUNNING", "DRAINING"),
            ("DRAINING", "FORCE_TIMEOUT_PATH"),
            ("FORCE_TIMEOUT_PATH", "STOPPED"),
        ]
        assert (steps[1].attributes or {})[a.SHUTDOWN_REASON] == "shutdown_timeout elapsed"
        assert (root.attributes or {})[a.SHUTDOWN_JOB_TIMEOUT] == 30.0
        assert (root.attributes or {})[a.SHUTDOWN_NACKED_JOB_IDS] == (job_id,)
        nack = tracing.one(a.SPAN_JOB_NACK)
        assert root.context is not None
        assert nack.parent is not None
        assert nack.parent.span_id == root.context.span_id
        assert {k: v for k, v in (nack.attributes or {}).items() if k.startswith(("soniq.nack", "messaging.m"))} == {
            a.MESSAGING_MESSAGE_ID: job_id,
            a.NACK_REASON: "shutdown_timeout",
            a.NACK_WRITTEN: True,
        }
        # The nack happened inside FORCE_TIMEOUT_PATH, and links back to the run it abandoned.
        assert (steps[2].start_time or 0) <= (nack.end_time or 0) <= (steps[2].end_time or 0)
        process = tracing.one("process default")
        assert (process.attributes or {})[a.JOB_OUTCOME] == "nacked"
        assert process.context is not None
        assert [link.context.span_id for link in nack.links] == [process.context.span_id]
        row = await app.get_job(job_id)
        assert row is not None
        assert (row["status"], row["attempts"]) == ("queued", 0)
    finally:
        await app.close()


async def test_sync_wait_for_thread_shows_the_grace_expiry(tracing: Tracing) -> None:
    app = make_app(tracing, shutdown_timeout=0.3, sync_handler_grace_seconds=0.3)
    recorder = RecordingObserver()
    app.add_observer(recorder)
    started = threading.Event()
    release = threading.Event()

    @app.job
    def crunch() -> str:
        started.set()
        release.wait(30)
        return "crunched"

    try:
        job_id = await app.enqueue(crunch)
        worker = RunningWorker(app)
        await wait_until(started.is_set)
        await worker.stop()
        await wait_until(lambda: any(isinstance(e, ShutdownNotice) for e in recorder.events))
        release.set()
        summary = await worker.summary()

        root, steps = check_shape(tracing, summary.worker_id)
        assert edges(steps) == [
            ("RUNNING", "DRAINING"),
            ("DRAINING", "FORCE_TIMEOUT_PATH"),
            ("FORCE_TIMEOUT_PATH", "WAIT_FOR_THREAD"),
            ("WAIT_FOR_THREAD", "STOPPED"),
        ]
        waiting = steps[3]
        assert (waiting.attributes or {})[a.SHUTDOWN_WAITING_JOB_IDS] == (job_id,)
        assert [e.name for e in waiting.events] == [a.EVENT_SYNC_GRACE_EXPIRED]
        expiry = waiting.events[0]
        assert dict(expiry.attributes or {})[a.SHUTDOWN_WAITING_JOB_IDS] == (job_id,)
        assert dict(expiry.attributes or {})[a.SHUTDOWN_SYNC_GRACE] == 0.3
        assert (waiting.start_time or 0) <= expiry.timestamp <= (waiting.end_time or 0)
        for other in steps[:3]:
            assert other.events == ()
        assert (root.attributes or {})[a.SHUTDOWN_IN_FLIGHT_SYNC] == 1
        assert (root.attributes or {})[a.SHUTDOWN_NACKED_JOB_IDS] == ()
        assert tracing.spans(a.SPAN_JOB_NACK) == []
        process = tracing.one("process default")
        assert (process.attributes or {})[a.JOB_OUTCOME] == "done"
        assert (process.end_time or 0) <= (root.end_time or 0)
        assert (await app.get_job(job_id) or {})["status"] == "done"
    finally:
        release.set()
        await app.close()


async def test_second_signal_skips_the_rest_of_draining(tracing: Tracing) -> None:
    app = make_app(tracing, shutdown_timeout=60)
    started = asyncio.Event()

    @app.job
    async def endless() -> None:
        started.set()
        await asyncio.sleep(3600)

    try:
        job_id = await app.enqueue(endless)
        running = RunningWorker(app)
        await asyncio.wait_for(started.wait(), 10)
        await running.stop()
        await wait_until(lambda: running.worker.state is WorkerState.DRAINING)
        running.worker.stop("SIGTERM")
        summary = await running.summary()

        root, steps = check_shape(tracing, summary.worker_id)
        assert edges(steps) == [
            ("RUNNING", "DRAINING"),
            ("DRAINING", "FORCE_TIMEOUT_PATH"),
            ("FORCE_TIMEOUT_PATH", "STOPPED"),
        ]
        assert (steps[1].attributes or {})[a.SHUTDOWN_REASON] == "second signal"
        assert (root.attributes or {})[a.SHUTDOWN_TIMEOUT] == 60.0
        nack = tracing.one(a.SPAN_JOB_NACK)
        assert (nack.attributes or {})[a.MESSAGING_MESSAGE_ID] == job_id
        assert (nack.attributes or {})[a.NACK_REASON] == "second_signal"
    finally:
        await app.close()


async def test_prefetched_rows_are_released_with_a_nack_span_each(tracing: Tracing) -> None:
    app = make_app(tracing, prefetch=2)
    started = asyncio.Event()
    release = asyncio.Event()

    @app.job
    async def one_at_a_time() -> None:
        started.set()
        await release.wait()

    try:
        ids = await app.enqueue_many(one_at_a_time, [{}, {}, {}])
        worker = RunningWorker(app, concurrency=1)
        await asyncio.wait_for(started.wait(), 10)
        store: Any = app.backend
        # All three claimed, one started: the other two wait in the prefetch buffer.
        await wait_until(lambda: sum(1 for i in ids if store.jobs[i].status.value == "processing") == 3)
        await worker.stop()
        await wait_until(lambda: len(tracing.spans(a.SPAN_JOB_NACK)) == 2)
        release.set()
        summary = await worker.summary()

        root, steps = check_shape(tracing, summary.worker_id)
        assert edges(steps) == [("RUNNING", "DRAINING"), ("DRAINING", "STOPPED")]
        assert (root.attributes or {})[a.SHUTDOWN_PREFETCHED] == 2
        nacks = tracing.spans(a.SPAN_JOB_NACK)
        released = {str((n.attributes or {})[a.MESSAGING_MESSAGE_ID]) for n in nacks}
        assert released == set(summary.released_job_ids)
        assert len(released & set(ids)) == 2
        assert {(n.attributes or {})[a.NACK_REASON] for n in nacks} == {"prefetch_release"}
        nacked_ids = (root.attributes or {})[a.SHUTDOWN_NACKED_JOB_IDS]
        assert isinstance(nacked_ids, tuple)
        assert set(nacked_ids) == released
        for job_id in released:
            assert (await app.get_job(job_id) or {})["status"] == "queued"
    finally:
        release.set()
        await app.close()
