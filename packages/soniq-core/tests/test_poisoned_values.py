"""Values a store cannot hold fail their own run with the real reason; every other row still finishes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from soniq import Snooze, Soniq
from soniq.params import CompleteJobsParams, RetryJobParams

pytestmark = pytest.mark.asyncio


async def settle_all(app: Soniq, job_ids: list[str], wait_until: Any, **options: Any) -> None:
    """Run a worker (built with `options`) until no job of `job_ids` is queued-and-due or processing, then stop it."""
    worker = app.worker(install_signal_handlers=False, **options)
    task = asyncio.create_task(worker.run())

    async def settled() -> bool:
        for job_id in job_ids:
            row = await app.get_job(job_id)
            if row is not None and (
                row["status"] == "processing"
                or (row["status"] == "queued" and not row["attempts"] and row["scheduled_at"] <= datetime.now(UTC))
            ):
                return False
        return True

    try:
        await wait_until(settled, timeout=30)
    finally:
        worker.stop("test")
        await asyncio.wait_for(task, 20)


async def test_unstorable_results_and_errors_fail_only_their_own_row(
    make_app: Callable[..., Soniq], wait_until: Any
) -> None:
    app = make_app(max_result_bytes=2_000, concurrency=8)
    go = asyncio.Event()

    @app.job(max_retries=0)
    async def normal(n: int) -> int:
        await go.wait()
        return n

    @app.job(max_retries=0)
    async def surrogate() -> str:
        await go.wait()
        return "report-\udcff.txt"  # what os.listdir() gives for a file name that is not UTF-8

    @app.job(max_retries=0)
    async def nul_result() -> dict[str, str]:
        await go.wait()
        return {"text": "a\x00b"}

    @app.job(max_retries=0)
    async def deep() -> Any:
        await go.wait()
        nested: list[Any] = []
        for _ in range(3_000):
            nested = [nested]
        return nested

    @app.job(max_retries=0)
    async def not_json() -> object:
        await go.wait()
        return object()

    @app.job(max_retries=0)
    async def too_big() -> str:
        await go.wait()
        return "x" * 5_000

    @app.job(max_retries=0)
    async def nasty_error() -> None:
        await go.wait()
        raise ValueError("bad\x00byte and \udcff surrogate")

    @app.job(max_retries=0)
    def snooze_nan() -> None:
        raise Snooze(float("nan"))

    @app.job(max_retries=0)
    def snooze_forever() -> None:
        raise Snooze(1e12)

    normal_ids = [await app.enqueue(normal, n=n) for n in range(30)]
    poisoned = {
        "surrogate": await app.enqueue(surrogate),
        "nul_result": await app.enqueue(nul_result),
        "deep": await app.enqueue(deep),
        "not_json": await app.enqueue(not_json),
        "too_big": await app.enqueue(too_big),
        "nasty_error": await app.enqueue(nasty_error),
        "snooze_nan": await app.enqueue(snooze_nan),
    }
    snoozed = await app.enqueue(snooze_forever)
    asyncio.get_running_loop().call_later(0.3, go.set)
    await settle_all(app, [*normal_ids, *poisoned.values(), snoozed], wait_until)

    for n, job_id in enumerate(normal_ids):
        row = await app.get_job(job_id)
        assert row is not None
        assert (row["status"], row["result"]) == ("done", n)
    expected = {
        "surrogate": "lone surrogate",
        "nul_result": "NUL character",
        "deep": "nested too deeply",
        "not_json": "not JSON-serialisable",
        "too_big": "over the limit of 2000 bytes",
        "nasty_error": "ValueError: bad\\x00byte and \\udcff surrogate",
        "snooze_nan": "Snooze seconds must be a finite number",
    }
    for name, job_id in poisoned.items():
        dead = await app.dead_letter.get(job_id)
        assert dead is not None, name
        assert dead["dead_letter_reason"] == "max_attempts"
        assert dead["attempts"] == 1
        assert expected[name] in dead["last_error"], (name, dead["last_error"])
    row = await app.get_job(snoozed)
    assert row is not None
    assert (row["status"], row["attempts"]) == ("queued", 0)
    due = row["scheduled_at"] - datetime.now(UTC)
    assert timedelta(days=29) < due <= timedelta(days=30, minutes=1)
    assert (await app.get_queue_stats())["processing"] == 0


async def test_huge_backoff_is_bounded_and_the_retry_is_written(
    make_app: Callable[..., Soniq], wait_until: Any
) -> None:
    # The settings' ceilings (1e12 and 1e15 are refused where they enter): a year each.
    app = make_app(retry_backoff_base=365 * 86400.0, retry_backoff_max=365 * 86400.0)

    @app.job(max_retries=3)
    def fails() -> None:
        raise RuntimeError("try later")

    job_id = await app.enqueue(fails)
    await asyncio.wait_for(app.run_worker(run_once=True, install_signal_handlers=False), 20)
    row = await app.get_job(job_id)
    assert row is not None
    assert (row["status"], row["attempts"]) == ("queued", 1)
    assert "RuntimeError: try later" in row["last_error"]
    assert row["scheduled_at"] - datetime.now(UTC) <= timedelta(days=366)


async def test_a_result_the_store_refuses_fails_that_row_and_not_its_batch(
    make_app: Callable[..., Soniq], wait_until: Any
) -> None:
    app = make_app(concurrency=20)
    backend: Any = await app.connected_backend()
    real_complete = backend.complete_jobs
    refused: list[int] = []

    async def complete_jobs(params: CompleteJobsParams) -> set[str]:
        # The store takes everything except one value (as PostgreSQL refuses a string it cannot hold).
        if any(r.result == "poison" for r in params.results):
            refused.append(len(params.results))
            raise ValueError("invalid input syntax for type json")
        written: set[str] = await real_complete(params)
        return written

    backend.complete_jobs = complete_jobs
    go = asyncio.Event()

    @app.job(max_retries=0)
    async def finish(value: str) -> str:
        await go.wait()
        return value

    ids = [await app.enqueue(finish, value=f"ok-{n}") for n in range(19)]
    poison = await app.enqueue(finish, value="poison")
    asyncio.get_running_loop().call_later(0.3, go.set)
    await settle_all(app, [*ids, poison], wait_until)

    assert refused
    for n, job_id in enumerate(ids):
        row = await app.get_job(job_id)
        assert row is not None
        assert (row["status"], row["result"]) == ("done", f"ok-{n}")
    dead = await app.dead_letter.get(poison)
    assert dead is not None
    assert "the store refused the job result: invalid input syntax for type json" in dead["last_error"]


async def test_a_retry_the_store_refuses_dead_letters_the_row_with_both_errors(
    make_app: Callable[..., Soniq],
) -> None:
    app = make_app()
    backend: Any = await app.connected_backend()

    async def retry_job(params: RetryJobParams) -> bool:
        raise ValueError("value too long for type character varying")

    backend.retry_job = retry_job

    @app.job(max_retries=3)
    def flaky() -> None:
        raise RuntimeError("first failure")

    job_id = await app.enqueue(flaky)
    await asyncio.wait_for(app.run_worker(run_once=True, install_signal_handlers=False), 20)
    assert (await app.get_job(job_id) or {}).get("status") == "dead_letter"  # get_job answers for dead letters
    dead = await app.dead_letter.get(job_id)
    assert dead is not None
    assert (dead["dead_letter_reason"], dead["attempts"]) == ("non_retryable", 1)
    assert dead["last_error"].startswith("RuntimeError: first failure")
    assert "then the store refused the retry: value too long for type character varying" in dead["last_error"]
