"""A handler that never finishes costs its own job an attempt; every other job keeps running."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import pytest

from soniq import Soniq, WorkerState
from soniq.worker.worker import Worker

pytestmark = pytest.mark.asyncio


def make(fast_settings: dict[str, Any], **settings: Any) -> Soniq:
    return Soniq("memory://", **{**fast_settings, **settings})


async def start(app: Soniq) -> tuple[Worker, asyncio.Task[Any]]:
    worker = app.worker(install_signal_handlers=False)
    return worker, asyncio.create_task(worker.run())


async def stop(worker: Worker, task: asyncio.Task[Any]) -> Any:
    worker.stop("test")
    return await asyncio.wait_for(task, 20)


async def status(app: Soniq, job_id: str) -> str | None:
    row = await app.get_job(job_id)
    return row["status"] if row else None


async def test_async_handlers_that_wait_forever_time_out_and_others_run(
    fast_settings: dict[str, Any], wait_until: Any
) -> None:
    app = make(fast_settings, concurrency=2, job_timeout=0.3)

    @app.job(max_retries=0)
    async def forever() -> None:
        await asyncio.Event().wait()

    @app.job
    async def quick(n: int) -> int:
        return n

    hung = [await app.enqueue(forever) for _ in range(2)]
    ok = [await app.enqueue(quick, n=n) for n in range(5)]
    worker, task = await start(app)
    for job_id in ok:
        await wait_until(lambda j=job_id: status(app, j), timeout=10)
        await wait_until(lambda j=job_id: _is(app, j, "done"), timeout=10)
    for job_id in hung:
        await wait_until(lambda j=job_id: app.dead_letter.get(j), timeout=10)
        dead = await app.dead_letter.get(job_id)
        assert dead is not None
        assert "job timed out after 0.3s" in dead["last_error"]
    await stop(worker, task)


async def _is(app: Soniq, job_id: str, wanted: str) -> bool:
    return await status(app, job_id) == wanted


async def test_a_handler_swallowing_its_cancellation_frees_its_slot_and_ends_stuck(
    fast_settings: dict[str, Any], wait_until: Any, caplog: pytest.LogCaptureFixture
) -> None:
    app = make(fast_settings, concurrency=1, job_timeout=0.5, cancel_grace_seconds=0.3)
    release = asyncio.Event()

    @app.job(max_retries=0)
    async def stubborn() -> None:
        while not release.is_set():
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                continue  # the bug under test: cancellation swallowed

    @app.job
    async def quick() -> str:
        return "ran"

    hung = await app.enqueue(stubborn)
    after = await app.enqueue(quick)
    caplog.set_level(logging.WARNING, logger="soniq.worker")
    worker, task = await start(app)
    await wait_until(lambda: _is(app, after, "done"), timeout=10)
    dead = await app.dead_letter.get(hung)
    assert dead is not None
    assert dead["dead_letter_reason"] == "stuck"
    assert dead["attempts"] == 1
    assert "did not stop within 0.3s of being cancelled" in dead["last_error"]
    assert any("did not stop within" in r.getMessage() and hung in r.getMessage() for r in caplog.records)
    summary = await stop(worker, task)
    assert summary.stuck_job_ids == [hung]
    release.set()


async def test_a_stuck_handler_with_retries_left_is_retried(fast_settings: dict[str, Any], wait_until: Any) -> None:
    app = make(
        fast_settings,
        concurrency=1,
        job_timeout=0.3,
        cancel_grace_seconds=0.2,
        retry_backoff_base=60,
        retry_backoff_max=60,
    )
    release = asyncio.Event()

    @app.job(max_retries=2)
    async def stubborn() -> None:
        while not release.is_set():
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                continue

    job_id = await app.enqueue(stubborn)
    worker, task = await start(app)

    async def retried() -> bool:
        row = await app.get_job(job_id)
        return row is not None and row["status"] == "queued" and row["attempts"] == 1

    await wait_until(retried, timeout=10)
    await stop(worker, task)
    release.set()


async def test_a_sync_handler_that_never_returns_loses_its_thread_but_not_the_worker(
    fast_settings: dict[str, Any], wait_until: Any, caplog: pytest.LogCaptureFixture
) -> None:
    app = make(fast_settings, concurrency=3, sync_handler_pool_size=1)
    gate = threading.Event()

    @app.job(max_retries=0, timeout=0.3)
    def hangs() -> None:
        gate.wait(30)

    @app.job(max_retries=0, timeout=0.5)
    def needs_a_thread() -> str:
        return "ran once a thread came back"

    @app.job
    async def quick(n: int) -> int:
        return n

    hung = await app.enqueue(hangs)
    caplog.set_level(logging.WARNING, logger="soniq.worker")
    worker, task = await start(app)
    await wait_until(lambda: app.dead_letter.get(hung), timeout=10)
    starved = [await app.enqueue(needs_a_thread) for _ in range(3)]
    ok = [await app.enqueue(quick, n=n) for n in range(5)]
    # With the only thread lost, async jobs run on and no sync job is claimed to wait for a thread.
    for job_id in ok:
        await wait_until(lambda j=job_id: _is(app, j, "done"), timeout=10)
    for job_id in starved:
        row = await app.get_job(job_id)
        assert row is not None
        assert (row["status"], row["attempts"], row["worker_id"]) == ("queued", 0, None)
    assert any("claiming no sync job" in r.getMessage() for r in caplog.records)
    # The thread comes back: the sync jobs run, none of them having spent an attempt waiting.
    gate.set()
    for job_id in starved:
        await wait_until(lambda j=job_id: _is(app, j, "done"), timeout=10)
        row = await app.get_job(job_id)
        assert row is not None
        assert (row["attempts"], row["result"]) == (0, "ran once a thread came back")
    assert any("claiming sync jobs again" in r.getMessage() for r in caplog.records)
    assert any("overran its timeout" in r.getMessage() and hung in r.getMessage() for r in caplog.records)
    worker.stop("test")
    summary = await asyncio.wait_for(task, 20)
    assert summary.lost_thread_job_ids == [hung]


async def test_a_sync_job_claimed_before_the_pool_ran_dry_is_put_off_not_failed(
    fast_settings: dict[str, Any], wait_until: Any
) -> None:
    app = make(fast_settings, concurrency=2, sync_handler_pool_size=1, cancel_grace_seconds=0.2)
    gate = threading.Event()
    started = threading.Event()

    @app.job(max_retries=0, timeout=0.3)
    def hangs() -> None:
        started.set()
        gate.wait(30)

    @app.job(max_retries=0)
    def waits_for_a_thread() -> str:
        return "ran"

    hung = await app.enqueue(hangs)
    waiting = await app.enqueue(waits_for_a_thread, priority=200)
    worker, task = await start(app)
    try:
        # Claimed together; the second waits for the one permit, which the hung thread keeps past its deadline.
        await wait_until(lambda: app.dead_letter.get(hung), timeout=10)

        async def put_off() -> bool:
            row = await app.get_job(waiting)
            return row is not None and row["status"] == "queued" and row["scheduled_at"] > row["created_at"]

        await wait_until(put_off, timeout=10)
        row = await app.get_job(waiting)
        assert row is not None
        assert row["attempts"] == 0
        assert await app.dead_letter.get(waiting) is None
    finally:
        gate.set()
    await wait_until(lambda: _is(app, waiting, "done"), timeout=15)
    worker.stop("test")
    await asyncio.wait_for(task, 20)


async def test_at_shutdown_a_row_past_its_deadline_is_failed_not_handed_back(
    fast_settings: dict[str, Any], wait_until: Any
) -> None:
    app = make(fast_settings, concurrency=1, job_timeout=0.3, cancel_grace_seconds=30, shutdown_timeout=0.2)
    release = asyncio.Event()
    entered = asyncio.Event()

    @app.job(max_retries=0)
    async def stubborn() -> None:
        entered.set()
        while not release.is_set():
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                continue

    job_id = await app.enqueue(stubborn)
    worker, task = await start(app)
    await asyncio.wait_for(entered.wait(), 10)
    await asyncio.sleep(0.5)  # past the 0.3 s deadline, inside the 30 s cancel grace
    worker.stop("SIGTERM")
    summary = await asyncio.wait_for(task, 20)
    assert summary.final_state is WorkerState.STOPPED
    assert job_id not in summary.nacked_job_ids
    dead = await app.dead_letter.get(job_id)
    assert dead is not None
    assert (dead["dead_letter_reason"], dead["attempts"]) == ("stuck", 1)
    release.set()


async def test_a_slot_held_long_without_a_deadline_is_logged(
    fast_settings: dict[str, Any], wait_until: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from soniq.worker import watchdog

    monkeypatch.setattr(watchdog, "LONG_HELD_SECONDS", 0.3)
    app = make(fast_settings, concurrency=1)
    release = asyncio.Event()

    @app.job
    async def slow() -> None:
        await release.wait()

    caplog.set_level(logging.WARNING, logger="soniq.worker")
    job_id = await app.enqueue(slow)
    worker, task = await start(app)
    await wait_until(
        lambda: any("has held its slot" in r.getMessage() and job_id in r.getMessage() for r in caplog.records),
        timeout=10,
    )
    release.set()
    summary = await stop(worker, task)
    assert summary.long_held_job_ids == [job_id]
