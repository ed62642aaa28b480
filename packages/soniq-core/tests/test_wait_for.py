"""`app.wait_for(job_id, timeout=None)`: the result of a finished job, the job's
fate as an exception otherwise, across two apps sharing a store, with one waiter task per
process however many jobs are waited for.

Real memory and SQLite stores; the completions come from real workers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from soniq import JobCancelledError, JobFailedError, JobNotFoundError, JobOptionsError, Soniq, SoniqError

WAITER_TASK = "soniq-wait-for"


def register(app: Soniq) -> None:
    @app.job(name="double")
    async def double(n: int) -> int:
        return 2 * n

    @app.job(name="fails", max_retries=0)
    async def fails() -> None:
        raise RuntimeError("card declined")

    @app.job(name="slow")
    async def slow(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return "slept"


@pytest_asyncio.fixture(params=["memory", "sqlite"])
async def app(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Soniq]:
    url = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'wait.db'}"
    made = Soniq(url, observers="", poll_interval=0.05)
    register(made)
    yield made
    await made.close()


@pytest_asyncio.fixture
async def two_apps(tmp_path: Path) -> AsyncIterator[tuple[Soniq, Soniq]]:
    """A producer that waits and a worker app, on one SQLite file: two backend instances."""
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    producer = Soniq(url, observers="", poll_interval=0.05)
    worker = Soniq(url, observers="", poll_interval=0.05)
    register(producer)
    register(worker)
    yield producer, worker
    await producer.close()
    await worker.close()


def waiter_tasks() -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if t.get_name() == WAITER_TASK and not t.done()]


@pytest.mark.asyncio
async def test_a_finished_job_returns_its_result_at_once(app: Soniq) -> None:
    job_id = await app.enqueue("double", n=21)
    await app.run_worker(run_once=True, install_signal_handlers=False)
    assert await app.wait_for(job_id) == 42
    assert await app.wait_for(job_id, timeout=0) == 42
    assert waiter_tasks() == []  # nothing to wait for: no service started


@pytest.mark.asyncio
async def test_wait_for_returns_when_another_app_on_the_store_completes_the_job(
    two_apps: tuple[Soniq, Soniq],
) -> None:
    producer, worker = two_apps
    job_id = await producer.enqueue("slow", seconds=0.2)
    waiting = asyncio.create_task(producer.wait_for(job_id, timeout=20))
    await asyncio.sleep(0.1)
    assert not waiting.done()
    started = time.monotonic()
    await worker.run_worker(run_once=True, install_signal_handlers=False)
    assert await waiting == "slept"
    # Without push (SQLite across instances), the waiter polls every poll_interval.
    assert time.monotonic() - started < 5


@pytest.mark.asyncio
async def test_one_waiter_task_serves_every_concurrent_wait(app: Soniq) -> None:
    ids = await app.enqueue_many("double", [{"n": n} for n in range(20)])
    waits = [asyncio.create_task(app.wait_for(job_id, timeout=20)) for job_id in ids]
    await asyncio.sleep(0.1)
    assert len(waiter_tasks()) == 1
    await app.run_worker(run_once=True, install_signal_handlers=False)
    assert await asyncio.gather(*waits) == [2 * n for n in range(20)]
    await _until(lambda: not waiter_tasks(), timeout=2)  # it ends with its last waiter


@pytest.mark.asyncio
async def test_a_dead_lettered_job_raises_job_failed_with_its_error(app: Soniq) -> None:
    job_id = await app.enqueue("fails")
    waiting = asyncio.create_task(app.wait_for(job_id, timeout=20))
    await asyncio.sleep(0.05)
    await app.run_worker(run_once=True, install_signal_handlers=False)
    with pytest.raises(JobFailedError) as caught:
        await waiting
    assert caught.value.job_id == job_id
    assert "card declined" in (caught.value.last_error or "")
    assert caught.value.job["dead_letter_reason"] == "max_attempts"
    with pytest.raises(JobFailedError):
        await app.wait_for(job_id)  # and at once, once it is known


@pytest.mark.asyncio
async def test_a_cancelled_job_raises_job_cancelled(app: Soniq) -> None:
    job_id = await app.enqueue("double", n=1, scheduled_at=3600)
    waiting = asyncio.create_task(app.wait_for(job_id, timeout=20))
    await asyncio.sleep(0.05)
    assert await app.cancel_job(job_id)
    with pytest.raises(JobCancelledError) as caught:
        await waiting
    assert caught.value.job_id == job_id
    assert caught.value.job["status"] == "cancelled"


@pytest.mark.asyncio
async def test_an_unknown_id_raises_job_not_found_at_once(app: Soniq) -> None:
    with pytest.raises(JobNotFoundError, match="no job has id 'nope'"):
        await app.wait_for("nope", timeout=5)


@pytest.mark.asyncio
async def test_a_row_deleted_by_result_ttl_zero_is_not_found_saying_why(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ttl.db'}"
    producer = Soniq(url, observers="", poll_interval=0.05)
    worker = Soniq(url, observers="", poll_interval=0.05, result_ttl=0)
    register(producer)
    register(worker)
    try:
        job_id = await producer.enqueue("double", n=2)
        waiting = asyncio.create_task(producer.wait_for(job_id, timeout=20))
        await asyncio.sleep(0.1)
        await worker.run_worker(run_once=True, install_signal_handlers=False)
        with pytest.raises(JobNotFoundError, match="result_ttl=0") as caught:
            await waiting
        assert caught.value.job_id == job_id
    finally:
        await producer.close()
        await worker.close()


@pytest.mark.asyncio
async def test_a_job_that_does_not_finish_in_time_raises_timeout(app: Soniq) -> None:
    job_id = await app.enqueue("double", n=1, scheduled_at=3600)
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=f"job {job_id} did not finish within 0.3s"):
        await app.wait_for(job_id, timeout=0.3)
    assert 0.3 <= time.monotonic() - started < 2
    with pytest.raises(TimeoutError, match="timeout=0"):
        await app.wait_for(job_id, timeout=0)
    await _until(lambda: not waiter_tasks(), timeout=2)
    for bad in (-1, float("nan"), float("inf"), "5", True):
        with pytest.raises(JobOptionsError, match="timeout must be None or a finite number"):
            await app.wait_for(job_id, timeout=bad)  # type: ignore[arg-type]
    assert (await app.get_job(job_id))["status"] == "queued"  # type: ignore[index]


@pytest.mark.asyncio
async def test_closing_the_app_ends_waits_with_an_error(app: Soniq) -> None:
    job_id = await app.enqueue("double", n=1, scheduled_at=3600)
    waiting = asyncio.create_task(app.wait_for(job_id))
    await asyncio.sleep(0.05)
    await app.close()
    with pytest.raises(SoniqError, match=f"the app was closed while waiting for job {job_id}"):
        await waiting
    assert waiter_tasks() == []


async def _until(condition: Callable[[], bool], *, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {timeout}s")
        await asyncio.sleep(0.01)


@pytest.mark.asyncio
async def test_with_push_wait_for_wakes_when_another_app_completes_the_job(postgres_url: str) -> None:
    """PostgreSQL pushes the end of a watched job: the waiter wakes well before its 5 s safety re-read."""
    import uuid

    options = {"namespace": f"t_{uuid.uuid4().hex[:12]}"}
    producer = Soniq(postgres_url, backend_options=options, observers="", poll_interval=0.05)
    worker = Soniq(postgres_url, backend_options=options, observers="", poll_interval=0.05)
    register(producer)
    register(worker)
    try:
        await producer.setup()
        assert producer.backend.capabilities.push_job_changes
        job_id = await producer.enqueue("double", n=5)
        waiting = asyncio.create_task(producer.wait_for(job_id, timeout=20))
        await asyncio.sleep(0.3)  # the waiter is watching and listening
        assert not waiting.done()
        await worker.run_worker(run_once=True, install_signal_handlers=False)
        finished = time.monotonic()
        assert await waiting == 10
        assert time.monotonic() - finished < 2.0
        # Waiters that arrive one by one, each while the wait call of the ones before is in flight.
        ids = await producer.enqueue_many("slow", [{"seconds": 0.01 * n} for n in range(10)])
        waits = []
        for job_id in ids:
            waits.append(asyncio.ensure_future(producer.wait_for(job_id, timeout=20)))
            await asyncio.sleep(0.02)
        await worker.run_worker(concurrency=10, run_once=True, install_signal_handlers=False)
        finished = time.monotonic()
        assert await asyncio.gather(*waits) == ["slept"] * 10
        assert time.monotonic() - finished < 2.0  # pushed, not found by the 5 s safety re-read
    finally:
        backend: Any = await producer.connected_backend()
        await backend.drop_schema()
        await producer.close()
        await worker.close()


def test_wait_for_sync_waits_from_a_thread_without_a_loop(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'sync.db'}"
    producer = Soniq(url, observers="", poll_interval=0.05)
    worker = Soniq(url, observers="", poll_interval=0.05)
    register(producer)
    register(worker)
    job_id = producer.enqueue_sync("double", n=4)
    with pytest.raises(TimeoutError):
        producer.wait_for_sync(job_id, timeout=0.2)
    asyncio.run(worker.run_worker(run_once=True, install_signal_handlers=False))
    assert producer.wait_for_sync(job_id, timeout=10) == 8
    producer.close_sync()
    asyncio.run(worker.close())
