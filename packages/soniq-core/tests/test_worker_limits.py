"""Fleet-wide limits, on the worker's side: every claim carries the app's limits, a
claim held back by them does not spin, and without limits the claim is the plain one."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from soniq import Soniq
from soniq.params import ClaimJobsParams, GroupLimit, LimitScope
from soniq.records import JobRecord
from soniq.worker.claim_limits import WINDOW_MARGIN_SECONDS, ClaimLimits, next_window_in

pytestmark = pytest.mark.asyncio


class ClaimSpy:
    """Wraps a backend's `claim_jobs` to record every call's parameters."""

    def __init__(self, app: Soniq) -> None:
        self.calls: list[ClaimJobsParams] = []
        backend = app.backend
        original = backend.claim_jobs

        async def claim_jobs(params: ClaimJobsParams, /) -> list[JobRecord]:
            self.calls.append(params)
            return await original(params)

        backend.claim_jobs = claim_jobs  # type: ignore[method-assign]


async def run_until_done(app: Soniq, ids: list[str], *, timeout: float = 20.0) -> None:
    worker = app.worker(install_signal_handlers=False)
    task = asyncio.create_task(worker.run())
    deadline = time.monotonic() + timeout
    try:
        while True:
            rows = [await app.get_job(i) for i in ids]
            if all(r is not None and r["status"] == "done" for r in rows):
                return
            assert time.monotonic() < deadline, f"not all done after {timeout}s: {rows}"
            await asyncio.sleep(0.01)
    finally:
        worker.stop("test")
        await asyncio.wait_for(task, 20)


async def test_every_claim_carries_the_apps_limits_and_the_limit_holds(fast_settings: dict[str, Any]) -> None:
    app = Soniq("memory://", **{**fast_settings, "concurrency": 4})
    running = 0
    peak = 0

    @app.job(max_concurrent=1)
    async def one_at_a_time(n: int) -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.05)
        running -= 1
        return n

    spy = ClaimSpy(app)
    ids = await app.enqueue_many(one_at_a_time, [{"n": n} for n in range(6)])
    await run_until_done(app, ids)
    assert peak == 1
    assert spy.calls
    assert all(tuple(call.limits) == app.group_limits() for call in spy.calls)
    assert app.group_limits()[0].max_concurrent == 1


async def test_a_claim_held_back_by_a_limit_does_not_spin(fast_settings: dict[str, Any]) -> None:
    app = Soniq("memory://", **{**fast_settings, "concurrency": 4, "poll_interval": 0.05})
    release = asyncio.Event()

    @app.job(max_concurrent=1)
    async def held(n: int) -> int:
        await release.wait()
        return n

    spy = ClaimSpy(app)
    ids = await app.enqueue_many(held, [{"n": n} for n in range(3)])
    worker = app.worker(install_signal_handlers=False)
    task = asyncio.create_task(worker.run())
    await asyncio.sleep(1.0)  # one row runs, two are held back by the limit, three slots stay free
    claims_while_held = len(spy.calls)
    release.set()
    deadline = time.monotonic() + 10
    while [(await app.get_job(i) or {}).get("status") for i in ids] != ["done"] * len(ids):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
    worker.stop("test")
    await asyncio.wait_for(task, 20)
    # About one claim per poll_interval (20 in a second), never a busy loop.
    print(f"claims in 1s while held back: {claims_while_held}")
    assert claims_while_held <= 40, claims_while_held


async def test_without_limits_the_claim_carries_none(fast_settings: dict[str, Any]) -> None:
    app = Soniq("memory://", **fast_settings)

    @app.job
    async def free(n: int) -> int:
        return n

    spy = ClaimSpy(app)
    ids = await app.enqueue_many(free, [{"n": n} for n in range(3)])
    await run_until_done(app, ids)
    assert spy.calls
    assert all(tuple(call.limits) == () for call in spy.calls)


async def test_a_short_claim_under_a_rate_limit_waits_until_just_after_the_next_window() -> None:
    rated = ClaimLimits([GroupLimit(LimitScope.JOB, "j", rate_limit=5, rate_period=2.0)])
    assert rated.wait_after_short_claim(10.0, now=100.5) == pytest.approx(1.5 + WINDOW_MARGIN_SECONDS)
    assert rated.wait_after_short_claim(0.2, now=100.5) == 0.2
    concurrent = ClaimLimits([GroupLimit(LimitScope.QUEUE, "q", max_concurrent=2)])
    assert concurrent.wait_after_short_claim(1.0, now=100.5) == 1.0
    assert not ClaimLimits(())
    assert next_window_in(1.0, 7.0) == 1.0
    assert next_window_in(0.5, 7.2) == pytest.approx(0.3)


async def all_done(app: Soniq, ids: list[str]) -> bool:
    rows = [await app.get_job(job_id) for job_id in ids]
    return all(row is not None and row["status"] == "done" for row in rows)


async def test_a_limit_the_store_cannot_apply_holds_back_only_the_jobs_it_covers(
    fast_settings: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    app = Soniq("memory://", **{**fast_settings, "concurrency": 4, "queue_limits": {"metered": {"max_concurrent": 1}}})
    backend = app.backend
    original = backend.claim_jobs
    broken = True

    async def claim_jobs(params: ClaimJobsParams, /) -> list[JobRecord]:
        if broken and params.limits:
            raise RuntimeError("this store cannot apply that limit")
        return await original(params)

    backend.claim_jobs = claim_jobs  # type: ignore[method-assign]

    @app.job(max_concurrent=1)
    async def limited(n: int) -> int:
        return n

    @app.job
    async def free(n: int) -> int:
        return n

    held = [await app.enqueue(limited, n=n) for n in range(3)]
    held += [await app.enqueue(free, n=n, queue="metered") for n in range(2)]
    runs = [await app.enqueue(free, n=n) for n in range(5)]
    caplog.set_level("ERROR", logger="soniq.worker")
    worker = app.worker(install_signal_handlers=False)
    task = asyncio.create_task(worker.run())
    try:
        deadline = time.monotonic() + 20
        while not await all_done(app, runs):
            assert time.monotonic() < deadline, "the jobs no limit covers did not run"
            await asyncio.sleep(0.01)
        for job_id in held:
            row = await app.get_job(job_id)
            assert row is not None
            assert (row["status"], row["attempts"]) == ("queued", 0)
        assert not task.done(), "the worker stopped over a limit it could not apply"
        failures = [r for r in caplog.records if "the claim with fleet-wide limits failed" in r.getMessage()]
        assert len(failures) == 1
        limited_name = next(name for name in app.registry.names() if name.endswith("limited"))
        assert f"job:{limited_name}" in failures[0].getMessage()
        assert "queue:metered" in failures[0].getMessage()
        broken = False  # the store can apply the limit again: the held jobs run
        while not await all_done(app, held):
            assert time.monotonic() < deadline, "the held jobs did not run once the limit worked again"
            await asyncio.sleep(0.01)
    finally:
        worker.stop("test")
        await asyncio.wait_for(task, 20)
