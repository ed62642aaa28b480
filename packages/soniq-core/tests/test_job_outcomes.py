"""What the worker writes for each way a handler can end."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from soniq import Snooze, Soniq

pytestmark = pytest.mark.asyncio


@pytest.fixture
def app(fast_settings: dict[str, Any]) -> Soniq:
    return Soniq("memory://", **fast_settings)


async def run_once(app: Soniq) -> None:
    await asyncio.wait_for(app.run_worker(run_once=True, install_signal_handlers=False), 20)


async def test_failures_retry_with_backoff_then_dead_letter_with_the_last_error(app: Soniq, wait_until: Any) -> None:
    @app.job(max_retries=2)
    def flaky() -> None:
        raise RuntimeError("disk on fire")

    job_id = await app.enqueue(flaky)

    async def dead() -> bool:
        await run_once(app)
        return bool(await app.dead_letter.get(job_id))

    await wait_until(dead, timeout=10)
    assert (await app.get_job(job_id) or {}).get("status") == "dead_letter"  # get_job answers for dead letters
    row = await app.dead_letter.get(job_id)
    assert row is not None
    assert row["attempts"] == 3
    assert row["dead_letter_reason"] == "max_attempts"
    assert "RuntimeError: disk on fire" in row["last_error"]
    assert (await app.get_queue_stats())["dead_letter"] == 1


async def test_replay_makes_a_fresh_row_and_counts_resurrections(app: Soniq) -> None:
    @app.job(max_retries=0)
    def broken() -> None:
        raise ValueError("nope")

    job_id = await app.enqueue(broken)
    await run_once(app)
    first = await app.dead_letter.replay(job_id)
    second = await app.dead_letter.replay(job_id)
    assert len({job_id, first, second}) == 3
    fresh = await app.get_job(first)
    assert fresh is not None
    assert (fresh["status"], fresh["attempts"]) == ("queued", 0)
    row = await app.dead_letter.get(job_id)
    assert row is not None
    assert row["resurrection_count"] == 2
    assert row["last_resurrection_at"] is not None
    assert await app.dead_letter.purge(job_id) is True
    assert await app.dead_letter.purge(job_id) is False


@pytest.mark.parametrize("exc_type", [SystemExit, KeyboardInterrupt, BaseException])
async def test_a_handler_raising_a_base_exception_fails_the_job_and_the_worker_lives(
    app: Soniq, exc_type: type[BaseException]
) -> None:
    @app.job(max_retries=0)
    async def rude() -> None:
        raise exc_type("raised by the handler")

    @app.job(max_retries=0, name="rude_sync")
    def rude_sync() -> None:
        raise exc_type("raised by the sync handler")

    @app.job
    async def fine() -> str:
        return "ok"

    bad = await app.enqueue(rude)
    bad_sync = await app.enqueue(rude_sync)
    good = await app.enqueue(fine)
    await run_once(app)
    for job_id in (bad, bad_sync):
        row = await app.dead_letter.get(job_id)
        assert row is not None
        assert exc_type.__name__ in row["last_error"]
    done = await app.get_job(good)
    assert done is not None
    assert done["status"] == "done"


async def test_an_unknown_job_name_is_left_queued_untouched_and_the_worker_lives(app: Soniq) -> None:
    producer = Soniq("memory://", backend=app.backend)

    @producer.job(name="only.on.producer")
    async def elsewhere() -> None: ...

    @app.job
    async def fine() -> str:
        return "ok"

    other = await producer.enqueue(elsewhere)
    good = await app.enqueue(fine)
    await run_once(app)
    assert await app.dead_letter.get(other) is None
    row = await app.get_job(other)
    assert row is not None
    assert (row["status"], row["attempts"], row["last_error"]) == ("queued", 0, None)
    assert (await app.get_job(good) or {}).get("status") == "done"


async def test_an_unserialisable_result_fails_the_run(app: Soniq) -> None:
    @app.job(max_retries=0)
    async def returns_a_set() -> object:
        return {1, 2}

    job_id = await app.enqueue(returns_a_set)
    await run_once(app)
    row = await app.dead_letter.get(job_id)
    assert row is not None
    assert "not JSON-serialisable" in row["last_error"]


async def test_snooze_requeues_later_without_spending_an_attempt(app: Soniq) -> None:
    @app.job(max_retries=0)
    async def not_yet() -> None:
        raise Snooze(3600)

    job_id = await app.enqueue(not_yet)
    await run_once(app)
    row = await app.get_job(job_id)
    assert row is not None
    assert (row["status"], row["attempts"]) == ("queued", 0)
    assert (row["scheduled_at"] - row["updated_at"]).total_seconds() > 3000


async def test_job_timeout_fails_an_async_run_and_counts_an_attempt(app: Soniq) -> None:
    @app.job(timeout=0.1, max_retries=1)
    async def slow() -> None:
        await asyncio.sleep(10)

    job_id = await app.enqueue(slow)
    await run_once(app)
    row = await app.get_job(job_id)
    assert row is not None
    assert row["attempts"] == 1
    assert "timed out after 0.1s" in row["last_error"]


async def test_priorities_run_lower_numbers_first(app: Soniq) -> None:
    order: list[int] = []

    @app.job
    async def record(p: int) -> None:
        order.append(p)

    for p in (50, 10, 100, 1):
        await app.enqueue(record, p=p, priority=p)
    await asyncio.wait_for(app.run_worker(concurrency=1, run_once=True, install_signal_handlers=False), 10)
    assert order == [1, 10, 50, 100]


async def test_a_worker_serves_only_its_queues(app: Soniq) -> None:
    @app.job
    async def work() -> None: ...

    mine = await app.enqueue(work, queue="mine")
    other = await app.enqueue(work, queue="other")
    await asyncio.wait_for(app.run_worker(queues=["mine"], run_once=True, install_signal_handlers=False), 10)
    assert (await app.get_job(mine) or {})["status"] == "done"
    assert (await app.get_job(other) or {})["status"] == "queued"
