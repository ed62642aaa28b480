"""Cancelling a running job, on the worker's side: what each kind of run does with a request.

Every test runs a real worker on the memory backend and asks through `app.cancel` (the store's
`request_cancel`) or the backend itself, as another process would; the rows say what happened.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import pytest

from soniq import BaseObserver, CancelOutcome, JobContext, JobOutcome, Soniq, WorkerState
from soniq.backend import BackendCapabilities
from soniq.observers import JobEndEvent
from soniq.params import (
    CancelRequestsParams,
    ClaimJobsParams,
    NackJobParams,
    RequestCancelParams,
    WaitForJobChangesParams,
)
from soniq.worker._runs import JobRun
from soniq.worker._table import RunTable
from soniq.worker.cancel_watch import CancelWatcher, Delivery, deliver
from soniq.worker.state import RunPhase
from soniq.worker.worker import Worker

pytestmark = pytest.mark.asyncio


class Ends(BaseObserver):
    def __init__(self) -> None:
        self.ends: list[JobEndEvent] = []

    def on_job_end(self, event: JobEndEvent) -> None:
        self.ends.append(event)


def make(fast_settings: dict[str, Any], **settings: Any) -> tuple[Soniq, Ends]:
    ends = Ends()
    app = Soniq("memory://", extra_observers=[ends], **{**fast_settings, **settings})
    return app, ends


async def until(condition: Any, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


async def start(app: Soniq) -> tuple[Worker, asyncio.Task[Any]]:
    worker = app.worker(install_signal_handlers=False)
    task = asyncio.create_task(worker.run())
    return worker, task


async def stop(worker: Worker, task: asyncio.Task[Any]) -> Any:
    worker.stop("test")
    return await asyncio.wait_for(task, 20)


async def row(app: Soniq, job_id: str) -> dict[str, Any]:
    found = await app.get_job(job_id)
    assert found is not None
    return found


async def settled(app: Soniq, job_id: str, *, timeout: float = 10.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        found = await row(app, job_id)
        if found["status"] not in ("queued", "processing"):
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job_id} still {found['status']} after {timeout}s")
        await asyncio.sleep(0.005)


async def test_a_running_async_handler_is_cancelled_and_the_row_ends_cancelled_unpaid(
    fast_settings: dict[str, Any], wait_until: Any
) -> None:
    app, ends = make(fast_settings)
    started, unwound = asyncio.Event(), asyncio.Event()

    @app.job(max_retries=0)
    async def forever() -> None:
        started.set()
        try:
            await asyncio.sleep(3600)
        finally:
            unwound.set()

    job_id = await app.enqueue(forever)
    worker, task = await start(app)
    await asyncio.wait_for(started.wait(), 10)
    began = time.monotonic()
    assert await app.cancel(job_id) is CancelOutcome.REQUESTED
    done = await settled(app, job_id)
    elapsed = time.monotonic() - began
    assert unwound.is_set()
    assert (done["status"], done["attempts"], done["worker_id"]) == ("cancelled", 0, None)
    assert done["last_error"] == "cancelled by request: the async handler was cancelled"
    assert elapsed < 1.0
    await wait_until(lambda: ends.ends)
    (end,) = ends.ends
    assert (end.outcome, end.reason, end.error) == (JobOutcome.CANCELLED, "cancel_requested", None)
    assert not end.outcome.failed
    summary = await stop(worker, task)
    assert summary.final_state is WorkerState.STOPPED
    assert not summary.unsettled_job_ids


async def test_a_sync_handler_sees_cancel_requested_and_its_row_ends_cancelled_when_it_returns(
    fast_settings: dict[str, Any],
) -> None:
    app, _ = make(fast_settings)
    running = threading.Event()
    seen: list[bool] = []

    @app.job(max_retries=0)
    def polite(ctx: JobContext) -> str:
        running.set()
        seen.append(ctx.cancel_requested)
        seen.append(ctx.wait_for_cancel(20))
        return "stopped early"

    job_id = await app.enqueue(polite)
    worker, task = await start(app)
    await asyncio.to_thread(running.wait, 10)
    assert await app.cancel(job_id) is CancelOutcome.REQUESTED
    done = await settled(app, job_id)
    assert seen == [False, True]
    assert (done["status"], done["attempts"], done["result"]) == ("cancelled", 0, None)
    assert done["last_error"] == (
        "cancelled by request: the sync handler returned after ctx.cancel_requested became true"
    )
    await stop(worker, task)


async def test_a_sync_handler_that_cannot_see_the_request_still_ends_cancelled_when_it_returns(
    fast_settings: dict[str, Any],
) -> None:
    app, _ = make(fast_settings)
    running, release = threading.Event(), threading.Event()

    @app.job(max_retries=0)
    def plain() -> str:
        running.set()
        release.wait(20)
        raise RuntimeError("interrupted work")

    job_id = await app.enqueue(plain)
    worker, task = await start(app)
    await asyncio.to_thread(running.wait, 10)
    assert await app.cancel(job_id) is CancelOutcome.REQUESTED
    run = worker.runs.get(job_id)
    assert run is not None
    deadline = time.monotonic() + 5
    while not run.cancel_reached:
        assert time.monotonic() < deadline, "the request never reached the run"
        await asyncio.sleep(0.01)
    assert (await row(app, job_id))["status"] == "processing"  # a thread is never interrupted
    release.set()
    done = await settled(app, job_id)
    # It raised after the request reached it: still a cancel, never a counted failure or a dead letter.
    assert (done["status"], done["attempts"]) == ("cancelled", 0)
    assert "the sync handler raised RuntimeError" in done["last_error"]
    assert await app.dead_letter.get(job_id) is None
    await stop(worker, task)


async def test_a_cancel_that_loses_the_race_with_completion_leaves_the_row_done(
    fast_settings: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    app, _ = make(fast_settings)
    returned, release = asyncio.Event(), asyncio.Event()

    @app.middleware
    async def hold_after(ctx: JobContext, call_next: Any) -> Any:
        result = await call_next(ctx)
        returned.set()
        await release.wait()  # the handler has finished; its outcome is not written yet
        return result

    @app.job(max_retries=0)
    async def quick() -> str:
        return "made it"

    job_id = await app.enqueue(quick)
    caplog.set_level(logging.INFO, logger="soniq.worker")
    worker, task = await start(app)
    await asyncio.wait_for(returned.wait(), 10)
    assert await app.cancel(job_id) is CancelOutcome.REQUESTED
    deadline = time.monotonic() + 5
    while "the cancel lost the race" not in caplog.text:
        assert time.monotonic() < deadline, caplog.text
        await asyncio.sleep(0.01)
    release.set()
    done = await settled(app, job_id)
    assert (done["status"], done["result"], done["cancel_requested"]) == ("done", "made it", True)
    await stop(worker, task)


async def test_a_row_claimed_with_a_request_that_outlived_a_nack_is_cancelled_without_running(
    fast_settings: dict[str, Any],
) -> None:
    app, ends = make(fast_settings)
    calls: list[int] = []

    @app.job(max_retries=0)
    async def counted() -> None:
        calls.append(1)

    job_id = await app.enqueue(counted)
    backend = await app.connected_backend()
    (claimed,) = await backend.claim_jobs(ClaimJobsParams(worker_id="gone", queues=None, limit=1, mark_started=True))
    assert claimed.id == job_id
    assert await backend.request_cancel(RequestCancelParams(job_id=job_id)) is CancelOutcome.REQUESTED
    assert await backend.nack_job(NackJobParams(job_id=job_id, worker_id="gone"))
    assert (await row(app, job_id))["status"] == "queued"
    worker, task = await start(app)
    done = await settled(app, job_id)
    assert calls == []
    assert (done["status"], done["attempts"]) == ("cancelled", 0)
    assert done["last_error"].startswith("cancelled by request before its handler started")
    await stop(worker, task)
    assert [e.outcome for e in ends.ends] == [JobOutcome.CANCELLED]


async def test_a_prefetched_row_with_a_request_is_cancelled_without_running(fast_settings: dict[str, Any]) -> None:
    app, _ = make(fast_settings, concurrency=1, prefetch=2)
    release = asyncio.Event()
    ran: list[str] = []

    @app.job(max_retries=0)
    async def step(tag: str) -> str:
        ran.append(tag)
        if tag == "first":
            await release.wait()
        return tag

    first = await app.enqueue(step, tag="first")
    second = await app.enqueue(step, tag="second")
    worker, task = await start(app)
    deadline = time.monotonic() + 5
    while worker.runs.buffered_run(second) is None:
        assert time.monotonic() < deadline, "the second row was never prefetched"
        await asyncio.sleep(0.01)
    assert await app.cancel(second) is CancelOutcome.REQUESTED
    done = await settled(app, second)
    assert (done["status"], done["attempts"]) == ("cancelled", 0)
    assert "prefetch buffer" in done["last_error"]
    release.set()
    assert (await settled(app, first))["status"] == "done"
    assert ran == ["first"]
    await stop(worker, task)


async def test_a_job_cancelled_while_the_worker_drains_ends_cancelled_not_nacked(
    fast_settings: dict[str, Any],
) -> None:
    app, _ = make(fast_settings, shutdown_timeout=20)
    started = asyncio.Event()

    @app.job(max_retries=0)
    async def forever() -> None:
        started.set()
        await asyncio.sleep(3600)

    job_id = await app.enqueue(forever)
    worker, task = await start(app)
    await asyncio.wait_for(started.wait(), 10)
    worker.stop("test")
    await until(lambda: worker.state is WorkerState.DRAINING, "DRAINING")
    assert await app.cancel(job_id) is CancelOutcome.REQUESTED
    summary = await asyncio.wait_for(task, 10)
    done = await row(app, job_id)
    assert (done["status"], done["attempts"]) == ("cancelled", 0)
    assert summary.nacked_job_ids == []
    assert WorkerState.FORCE_TIMEOUT_PATH not in summary.states
    assert summary.final_state is WorkerState.STOPPED


async def test_delivery_by_phase() -> None:
    """Where a run is decides what a request does; a finished handler is never interrupted."""
    from datetime import UTC, datetime

    from soniq.records import JobRecord, JobStatus

    now = datetime.now(UTC)
    record = JobRecord(
        id="j", job_name="n", args={}, status=JobStatus.PROCESSING, attempts=0, max_attempts=1,
        queue="default", priority=100, scheduled_at=now, last_error=None, worker_id="w", result=None,
        created_at=now, updated_at=now,
    )  # fmt: skip

    def run(phase: RunPhase) -> JobRun:
        made = JobRun(job=record, definition=None)
        made.phase = phase
        return made

    claimed = run(RunPhase.CLAIMED)
    signal = claimed.cancel_signal()
    assert deliver(claimed) is Delivery.REACHED
    assert claimed.cancel_reached
    assert signal.is_set()
    finished = run(RunPhase.RUNNING_ASYNC)
    finished.handler_task = asyncio.ensure_future(asyncio.sleep(0))
    await finished.handler_task
    assert deliver(finished) is Delivery.TOO_LATE
    assert not finished.cancel_reached
    running = run(RunPhase.RUNNING_ASYNC)
    running.handler_task = asyncio.ensure_future(asyncio.sleep(10))
    assert deliver(running) is Delivery.REACHED
    with pytest.raises(asyncio.CancelledError):
        await running.handler_task
    assert deliver(run(RunPhase.SETTLING)) is Delivery.TOO_LATE
    abandoned = run(RunPhase.RUNNING_ASYNC)
    abandoned.abandoned = True
    assert deliver(abandoned) is Delivery.SHUTDOWN
    # A context made after the request still reads it.
    late = run(RunPhase.CLAIMED)
    deliver(late)
    assert late.cancel_signal().is_set()


class FakeChanges:
    """Just enough of a backend for the watcher: waits that the test ends, and the requests it reads."""

    def __init__(self) -> None:
        self.capabilities = BackendCapabilities(push_job_changes=True)
        self.waits: list[tuple[frozenset[str], asyncio.Future[set[str] | None]]] = []
        self.cancelled_waits = 0
        self.reads = 0
        self.requested: set[str] = set()

    async def wait_for_job_changes(self, params: WaitForJobChangesParams, /) -> set[str] | None:
        future: asyncio.Future[set[str] | None] = asyncio.get_running_loop().create_future()
        self.waits.append((frozenset(params.job_ids), future))
        try:
            return await asyncio.wait_for(asyncio.shield(future), params.timeout)
        except asyncio.CancelledError:
            self.cancelled_waits += 1
            raise
        except TimeoutError:
            return set()

    async def cancel_requests(self, params: CancelRequestsParams, /) -> set[str]:
        self.reads += 1
        return set(self.requested)


async def test_the_watcher_widens_its_wait_without_cancelling_one_that_may_hold_a_change() -> None:
    from datetime import UTC, datetime

    from soniq.records import JobRecord, JobStatus

    now = datetime.now(UTC)

    def record(job_id: str) -> JobRecord:
        return JobRecord(
            id=job_id, job_name="n", args={}, status=JobStatus.PROCESSING, attempts=0, max_attempts=1,
            queue="default", priority=100, scheduled_at=now, last_error=None, worker_id="w", result=None,
            created_at=now, updated_at=now,
        )  # fmt: skip

    backend = FakeChanges()
    runs = RunTable(concurrency=4, prefetch=0)
    watcher = CancelWatcher(backend, "w", runs, lambda run, message: None)  # type: ignore[arg-type]
    task = asyncio.create_task(watcher.watch())
    first = JobRun(job=record("a"), definition=None)
    runs.occupy(first)
    await until(lambda: len(backend.waits) == 1, "the first wait")
    runs.occupy(JobRun(job=record("b"), definition=None))
    await until(lambda: len(backend.waits) == 2, "a wider wait")
    assert [ids for ids, _ in backend.waits] == [frozenset({"a"}), frozenset({"a", "b"})]
    assert backend.cancelled_waits == 0
    # The narrow wait now reports a request on "a": the watcher reads, and delivers it to the run.
    backend.requested = {"a"}
    first.phase = RunPhase.RUNNING_SYNC
    backend.waits[0][1].set_result({"a"})
    await until(lambda: first.cancel_reached, "the request delivered")
    assert backend.reads == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
